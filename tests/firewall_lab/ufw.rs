//! A found ufw, running inside the node with its own files (a mount namespace of the lab's):
//! openings written with `ufw allow` carrying the mesh's mark, reachable from outside in both
//! families; a fail2ban-style ban (`ufw prepend deny from …`) keeps refusing its source; a
//! `ufw reload` keeps them (they are ufw's rules); removal deletes only the marked rules; retire
//! and restore through the driver leave `/etc/ufw` byte for byte and the ruleset as before; an
//! operator's rule for the same traffic as an opening is never rewritten as the mesh's.

use super::found::{files, flipped_to_the_derived_filter, not_reached, stub_systemctl};
use super::*;
use firewall::backend::{kind, Cx};
use firewall::{Backend, Batch};
use std::collections::BTreeMap;

/// Runs every program inside the node's network namespace and ufw's mount namespace, as the
/// host under test does.
struct InUfw {
    netns: PathBuf,
    holder: u32,
}

impl run::Runner for InUfw {
    /// The call's argv after `nsenter` into both namespaces, its input, deadline and bound kept.
    fn call(&self, call: &run::Call<'_>) -> std::io::Result<run::Output> {
        let mut argv = vec![
            "nsenter".to_string(),
            format!("--net={}", self.netns.display()),
            format!("--mount=/proc/{}/ns/mnt", self.holder),
            "--".to_string(),
        ];
        argv.extend(call.argv.iter().cloned());
        run::SystemRunner.call(&run::Call {
            argv: &argv,
            ..*call
        })
    }
}

/// The node's ufw in the lab, set up with the operator's `rules` (each one `ufw` command's
/// arguments, ending in `--force enable`). ufw is installed for the lab tests: never skipped.
pub(super) fn ufw_with(lab: &Lab, node: &Machine, rules: &[&[&str]]) -> lab::Ufw {
    let ufw = node
        .prepare_ufw(&lab.dir().join("ufw"))
        .expect("ufw is installed (apt-get install ufw); never skipped");
    for args in rules {
        ufw.cmd(args).unwrap();
    }
    ufw
}

/// The running ruleset of both families as iptables-nft prints it, counters left out.
fn saved(node: &Machine) -> String {
    format!(
        "{}{}",
        View::Save("iptables-nft-save").read(node),
        View::Save("ip6tables-nft-save").read(node)
    )
}

/// Calls the driver's verb inside the node, with ufw's files.
fn through_driver(node: &Machine, exec: &InUfw, f: impl FnOnce(&mut Cx<'_>) + Send) {
    node.in_namespace(|| {
        let ruleset = firewall::Ruleset::default();
        let saves = BTreeMap::new();
        let mut batch = Batch::new();
        let mut cx = Cx {
            ruleset: &ruleset,
            legacy_saves: &saves,
            batch: &mut batch,
            exec,
        };
        f(&mut cx);
        assert!(batch.is_empty(), "ufw's verbs write nothing natively");
    })
    .unwrap();
}

#[test]
fn ufw_openings_carry_the_mark_and_retire_with_ufws_own_init() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [SSH, SERVED, OPENED, CLOSED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let public = node_public();
    // The found firewall: ssh and the served port allowed, the outside machine banned in both
    // families the way fail2ban's ufw action does it, everything else denied.
    let ufw = ufw_with(
        &lab,
        node,
        &[
            &["allow", "22/tcp"],
            &["allow", "8080/tcp"],
            &["prepend", "deny", "from", "192.0.2.20"],
            &["prepend", "deny", "from", "2001:db8:1::20"],
            &["--force", "enable"],
        ],
    );
    expect(&net.peer, &public, SERVED, Probe::Reached, "served, before");
    not_reached(&net.peer, &public, OPENED, "not yet opened");
    let added_before = ufw.cmd(&["show", "added"]).unwrap().stdout;
    let ruleset_before = saved(node);

    let holder = ufw.holder_pid();
    let host = Host::wrapped(node, ufw.enter(&[]));
    host.apply(&declaration(&[opening("web/api", OPENED, "incoming")]));
    expect(
        &net.peer,
        &public,
        OPENED,
        Probe::Reached,
        "opened with ufw allow",
    );
    expect(&net.peer, &public, SERVED, Probe::Reached, "served, after");
    expect(&net.peer, &public, SSH, Probe::Reached, "ssh, after");
    not_reached(&net.peer, &public, CLOSED, "nothing opened it");
    not_reached(
        &net.outside,
        &public,
        OPENED,
        "the ban still refuses its source",
    );
    let added = ufw.cmd(&["show", "added"]).unwrap().stdout;
    let marked: Vec<&str> = added.lines().filter(|l| l.contains("mesh-host:")).collect();
    assert_eq!(marked.len(), 1, "{added}");
    assert!(
        marked[0].starts_with("ufw allow 9000/tcp comment 'mesh-host:web/api#"),
        "{added}"
    );
    let status = host.status();
    let layers = presence(&status, "web/api");
    assert!(!layers.is_empty(), "no layer drops the opening: {status:#}");
    assert!(layers.iter().all(|p| p.ends_with("=present")), "{status:#}");
    let opened = saved(node);

    // ufw reloads from its files, which hold the marked rule: the opening stays.
    ufw.cmd(&["reload"]).unwrap();
    expect(
        &net.peer,
        &public,
        OPENED,
        Probe::Reached,
        "still open after ufw reload",
    );
    host.reconcile();
    assert_eq!(
        saved(node),
        opened,
        "a reconcile after the reload changes nothing"
    );

    // Retire and restore through the driver, as the flip and the return call them.
    let exec = InUfw {
        netns: node.netns_path(),
        holder,
    };
    let config = files(&ufw.config_dir());
    let mut retired = None;
    through_driver(node, &exec, |cx| {
        let d = kind(Backend::Ufw).retire;
        let r = d
            .survey(Path::new("/"), cx)
            .unwrap()
            .expect("an active ufw is found");
        d.retire(&r, cx).unwrap();
        retired = Some(r);
    });
    let retired = retired.unwrap();
    assert_eq!(retired.unit.as_deref(), Some("ufw.service"));
    // ufw-init stop empties ufw's chains (it keeps the primary ones, empty, hooked where they
    // were, so they come back in the same place): nothing of ufw refuses any more.
    let retired_rules = saved(node);
    for line in retired_rules.lines().filter(|l| l.starts_with("-A ")) {
        let mut w = line.split_whitespace().skip(1);
        let (chain, jump, target) = (w.next(), w.next(), w.next());
        assert!(
            matches!(chain, Some("INPUT" | "FORWARD" | "OUTPUT"))
                && jump == Some("-j")
                && target.is_some_and(|t| t.starts_with("ufw"))
                && w.next().is_none(),
            "only jumps to ufw's emptied chains are left, not {line:?}:\n{retired_rules}"
        );
    }
    assert!(
        !retired_rules.lines().any(|l| l.starts_with("-A ufw")),
        "every ufw chain is empty:\n{retired_rules}"
    );
    expect(
        &net.peer,
        &public,
        CLOSED,
        Probe::Reached,
        "nothing refuses once retired",
    );
    assert_eq!(
        files(&ufw.config_dir()),
        config,
        "/etc/ufw byte for byte, retired"
    );
    through_driver(node, &exec, |cx| {
        let d = kind(Backend::Ufw).retire;
        d.restore(&retired, cx).unwrap();
    });
    assert_eq!(
        files(&ufw.config_dir()),
        config,
        "/etc/ufw byte for byte, restored"
    );
    assert_eq!(
        saved(node),
        opened,
        "the running rules as before the retire"
    );
    expect(
        &net.peer,
        &public,
        OPENED,
        Probe::Reached,
        "opened after the return",
    );
    not_reached(&net.outside, &public, OPENED, "the ban through the return");

    // Removal deletes only the marked rule: ufw's rules and the ruleset as they were found.
    host.apply(&declaration(&[]));
    assert_eq!(ufw.cmd(&["show", "added"]).unwrap().stdout, added_before);
    assert_eq!(saved(node), ruleset_before, "only the mesh's rules went");
    not_reached(&net.peer, &public, OPENED, "removed");
    expect(
        &net.peer,
        &public,
        SERVED,
        Probe::Reached,
        "served after removal",
    );
}

/// ufw replaces a rule that differs from an added one only in action or comment, so the host
/// adds nothing where the operator holds a rule for the same traffic: an opening the operator's
/// `allow` already admits needs no rule, one the operator's `deny` refuses is reported refused
/// (the deny stays a deny), and a removal of both leaves the operator's rules exactly as found.
#[test]
fn ufw_an_operators_rule_for_the_same_traffic_is_never_rewritten() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [SSH, SERVED, OPENED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let public = node_public();
    let ufw = ufw_with(
        &lab,
        node,
        &[
            &["allow", "22/tcp"],
            &["allow", "8080/tcp"],
            &["deny", "9000/tcp"],
            &["--force", "enable"],
        ],
    );
    let added_before = ufw.cmd(&["show", "added"]).unwrap().stdout;
    let host = Host::wrapped(node, ufw.enter(&[]));
    // `ufw deny 9000/tcp` refuses web/denied: the briefing says failed, the apply exits 5.
    host.apply_not_in_force(&declaration(&[
        opening("web/served", SERVED, "incoming"),
        opening("web/denied", OPENED, "incoming"),
    ]));
    assert_eq!(
        ufw.cmd(&["show", "added"]).unwrap().stdout,
        added_before,
        "the operator's rules neither rewritten nor joined"
    );
    expect(
        &net.peer,
        &public,
        SERVED,
        Probe::Reached,
        "the operator's allow",
    );
    not_reached(
        &net.peer,
        &public,
        OPENED,
        "the operator's deny still denies",
    );
    let status = host.status();
    assert!(
        presence(&status, "web/served").is_empty(),
        "the operator's allow admits it, no rule needed: {status:#}"
    );
    let denied = presence(&status, "web/denied");
    assert!(
        !denied.is_empty() && denied.iter().all(|p| p.ends_with("=refused")),
        "{status:#}"
    );
    assert!(
        status.to_string().contains("ufw deny 9000/tcp"),
        "the refusal names the operator's rule: {status:#}"
    );

    host.apply(&declaration(&[]));
    assert_eq!(ufw.cmd(&["show", "added"]).unwrap().stdout, added_before);
    expect(
        &net.peer,
        &public,
        SERVED,
        Probe::Reached,
        "the operator's allow after the removal",
    );
}

/// Docker's rules (its chains and every rule that names one), for comparing through ufw's
/// stop and start.
fn docker_lines(node: &Machine) -> Vec<String> {
    View::Save("iptables-nft-save")
        .read(node)
        .lines()
        .filter(|l| l.contains("DOCKER") || l.contains("docker0"))
        .map(String::from)
        .collect()
}

/// A Docker engine in the node beside ufw: a forwarded opening is written with `ufw route allow`
/// carrying the mark, to the container Docker's DNAT sends the published port to; the published
/// port is reachable; ufw's reload, retire and
/// restore leave Docker's rules exactly as they were.
#[test]
fn ufw_with_docker_a_forwarded_opening_is_a_marked_route_rule_and_docker_keeps_its_rules() {
    const PUBLISHED: u16 = 8083;
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let ufw = ufw_with(&lab, node, &[&["allow", "22/tcp"], &["--force", "enable"]]);
    let docker = node
        .start_docker(&lab.dir().join("docker"))
        .expect("a Docker engine in the node's namespace (docker.io, busybox-static)");
    docker
        .run_container(
            "web",
            &["-p", &format!("{PUBLISHED}:{PUBLISHED}")],
            &[
                "/bin/httpd",
                "-f",
                "-p",
                &PUBLISHED.to_string(),
                "-h",
                "/www",
            ],
        )
        .expect("a container publishing a port");
    let v4: [IpAddr; 1] = [NODE_PUBLIC_V4.into()];
    let added_before = ufw.cmd(&["show", "added"]).unwrap().stdout;

    let holder = ufw.holder_pid();
    let host = Host::wrapped(node, ufw.enter(&[]));
    host.apply(&declaration(&[opening("web/pub", PUBLISHED, "forwarded")]));
    expect(
        &net.peer,
        &v4,
        PUBLISHED,
        Probe::Reached,
        "published, after",
    );
    // The route rule names where Docker's DNAT sends the port: the container's address.
    let addr = super::ufw_docker::container_v4(&docker, "web");
    let added = ufw.cmd(&["show", "added"]).unwrap().stdout;
    assert!(
        added.lines().any(|l| l.starts_with(&format!(
            "ufw route allow to {addr} port {PUBLISHED} proto tcp comment 'mesh-host:web/pub#"
        ))),
        "{added}"
    );
    let status = host.status();
    let layers = presence(&status, "web/pub");
    assert!(!layers.is_empty(), "no layer drops the opening: {status:#}");
    assert!(layers.iter().all(|p| p.ends_with("=present")), "{status:#}");
    let docker_before = docker_lines(node);
    assert!(!docker_before.is_empty());

    ufw.cmd(&["reload"]).unwrap();
    expect(
        &net.peer,
        &v4,
        PUBLISHED,
        Probe::Reached,
        "after ufw reload",
    );
    assert_eq!(
        docker_lines(node),
        docker_before,
        "Docker's rules through ufw reload"
    );

    let exec = InUfw {
        netns: node.netns_path(),
        holder,
    };
    let mut retired = None;
    through_driver(node, &exec, |cx| {
        let d = kind(Backend::Ufw).retire;
        let r = d.survey(Path::new("/"), cx).unwrap().expect("ufw is found");
        d.retire(&r, cx).unwrap();
        retired = Some(r);
    });
    assert_eq!(
        docker_lines(node),
        docker_before,
        "Docker's rules through the retire"
    );
    expect(
        &net.peer,
        &v4,
        PUBLISHED,
        Probe::Reached,
        "published while retired",
    );
    let retired = retired.unwrap();
    through_driver(node, &exec, |cx| {
        let d = kind(Backend::Ufw).retire;
        d.restore(&retired, cx).unwrap();
    });
    assert_eq!(
        docker_lines(node),
        docker_before,
        "Docker's rules after the return"
    );
    expect(
        &net.peer,
        &v4,
        PUBLISHED,
        Probe::Reached,
        "published after the return",
    );

    host.apply(&declaration(&[]));
    assert_eq!(ufw.cmd(&["show", "added"]).unwrap().stdout, added_before);
    expect(
        &net.peer,
        &v4,
        PUBLISHED,
        Probe::Reached,
        "Docker's own rules still admit it",
    );
}

/// The flip and the return through the built binary (`mesh-host converge`, `mesh-host adopt`)
/// on a node whose found firewall is ufw: ufw is retired with its own init (its rules out of
/// force, `/etc/ufw` byte for byte, `ufw.service` disabled, never stopped through systemd), the
/// derived filter admits the declared port and closes the rest; the return brings ufw's rules
/// back as they were and enables the unit again.
#[test]
fn ufw_the_flip_and_the_return_through_the_binary() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [SSH, SERVED, OPENED, CLOSED, STORE]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let public = node_public();
    let ufw = ufw_with(
        &lab,
        node,
        &[
            &["allow", "22/tcp"],
            &["allow", "8080/tcp"],
            &["--force", "enable"],
        ],
    );
    let stub = lab.dir().join("stub");
    std::fs::create_dir_all(&stub).unwrap();
    stub_systemctl(&stub);
    let path = format!(
        "PATH={}:{}",
        stub.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let host = Host::wrapped(node, ufw.enter(&["env", &path]));
    host.apply(&declaration(&[
        opening("api/port", OPENED, "incoming"),
        json!({"id": "store/port", "type": "opening", "port": STORE, "proto": "tcp",
               "from": "private", "path": "incoming"}),
    ]));
    expect(
        &net.peer,
        &public,
        OPENED,
        Probe::Reached,
        "adopted: the opening",
    );
    expect(
        &net.peer,
        &public,
        SERVED,
        Probe::Reached,
        "adopted: ufw's own rule",
    );
    let config = files(&ufw.config_dir());
    let before = saved(node);

    let out = host.run(&["converge", "--json"]);
    assert!(out.success(), "the flip: {}\n{}", out.stdout, out.stderr);
    assert_eq!(
        files(&ufw.config_dir()),
        config,
        "/etc/ufw byte for byte, converged"
    );
    let flipped = saved(node);
    assert!(
        !flipped.lines().any(|l| l.starts_with("-A ufw")),
        "ufw's rules out of force:\n{flipped}"
    );
    flipped_to_the_derived_filter(&net, &stub, "ufw.service");

    let out = host.run(&["adopt", "--json"]);
    assert!(out.success(), "the return: {}\n{}", out.stdout, out.stderr);
    assert_eq!(
        files(&ufw.config_dir()),
        config,
        "/etc/ufw byte for byte, returned"
    );
    assert_eq!(
        saved(node),
        before,
        "ufw's rules and the openings as before the flip"
    );
    let mesh = run_ok(node, &["nft", "list", "table", "inet", "mesh_host"]);
    assert!(!mesh.contains("chain input"), "{mesh}");
    expect(
        &net.peer,
        &public,
        SERVED,
        Probe::Reached,
        "returned: ufw's own rule",
    );
    expect(
        &net.peer,
        &public,
        OPENED,
        Probe::Reached,
        "returned: the opening",
    );
    let log = std::fs::read_to_string(stub.join("log")).unwrap_or_default();
    assert!(log.contains("enable ufw.service"), "{log}");
}
