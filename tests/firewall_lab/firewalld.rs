//! A found firewalld, running inside the node on a private D-Bus: openings are rich rules in the
//! mesh's policy, reachable from outside in both families; the operator's ban (a rich rule in
//! the zone) keeps refusing its source; a reload loses them until the next reconcile; removal
//! leaves firewalld's ruleset as it was; retire and restore through the driver leave
//! `/etc/firewalld` byte for byte and the ruleset as before.

use super::found::{files, not_reached};
use super::*;
use firewall::backend::{kind, Cx};
use firewall::{Backend, Batch};
use std::collections::BTreeMap;

/// `nft list table inet firewalld` as text, or empty when the table is gone.
pub(super) fn firewalld_table(node: &Machine) -> String {
    let out = node
        .run(&["nft", "list", "table", "inet", "firewalld"])
        .unwrap();
    if out.success() {
        nft_text(&out.stdout)
    } else {
        String::new()
    }
}

#[test]
fn firewalld_openings_live_in_the_mesh_policy_and_retire_in_firewallds_own_way() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [SSH, SERVED, OPENED, CLOSED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let public = node_public();
    let mut fw = node
        .start_firewalld(&lab.dir().join("firewalld"))
        .expect("firewalld and dbus are installed (apt-get install firewalld dbus); never skipped");
    // The found firewall: the served port, and the operator's ban of the outside machine in
    // both families, in the permanent configuration.
    fw.cmd(&["--permanent", "--add-port=8080/tcp"]).unwrap();
    for (family, banned) in [("ipv4", "192.0.2.20"), ("ipv6", "2001:db8:1::20")] {
        let rule = format!("rule family=\"{family}\" source address=\"{banned}\" reject");
        fw.cmd(&["--permanent", &format!("--add-rich-rule={rule}")])
            .unwrap();
    }
    fw.cmd(&["--reload"]).unwrap();
    expect(&net.peer, &public, SERVED, Probe::Reached, "served, before");
    not_reached(&net.peer, &public, OPENED, "not yet opened");

    let host = Host::wrapped(node, vec!["env".into(), fw.env()]);
    let decl = declaration(&[opening("web/api", OPENED, "incoming")]);
    host.apply(&decl);
    expect(
        &net.peer,
        &public,
        OPENED,
        Probe::Reached,
        "opened through the mesh policy",
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
    let rules = fw
        .cmd(&["--policy", "mesh-host", "--list-rich-rules"])
        .unwrap();
    assert_eq!(
        rules.stdout.trim(),
        "rule port port=\"9000\" protocol=\"tcp\" accept",
        "the opening's one rich rule, in the mesh's policy"
    );
    let status = host.status();
    let layers = presence(&status, "web/api");
    assert!(!layers.is_empty(), "no layer drops the opening: {status:#}");
    assert!(layers.iter().all(|p| p.ends_with("=present")), "{status:#}");
    let opened = firewalld_table(node);

    // firewalld's reload drops its runtime configuration: the opening is gone until the next
    // reconcile, and comes back exactly as it was.
    fw.cmd(&["--reload"]).unwrap();
    not_reached(&net.peer, &public, OPENED, "the reload lost the opening");
    let status = host.status();
    assert!(
        presence(&status, "web/api")
            .iter()
            .all(|p| p.ends_with("=missing")),
        "{status:#}"
    );
    let report = host.reconcile();
    assert_eq!(outcome(&report, "web/api"), "created", "{report:#}");
    expect(
        &net.peer,
        &public,
        OPENED,
        Probe::Reached,
        "put back by reconcile",
    );
    assert_eq!(
        firewalld_table(node),
        opened,
        "reconcile gives what the apply gave"
    );

    // Retire and restore through the driver, as the flip and the return call them: firewalld
    // stops in its own way (its table goes, its configuration stays byte for byte), and comes
    // back (its unit starting it, here the lab) with the same configuration.
    let config = files(&fw.config_dir());
    let before = firewalld_table(node);
    let address = fw.address();
    let retired = node
        .in_namespace(|| {
            firewall::dbus::with_system_bus(&address, || {
                let mut sock = firewall::NfSocket::open().unwrap();
                let ruleset = sock.ruleset(None).unwrap();
                let saves = BTreeMap::new();
                let mut batch = Batch::new();
                let d = kind(Backend::Firewalld).retire;
                let mut cx = Cx {
                    ruleset: &ruleset,
                    legacy_saves: &saves,
                    batch: &mut batch,
                    exec: &run::SystemRunner,
                };
                let retired = d
                    .survey(Path::new("/"), &mut cx)
                    .unwrap()
                    .expect("firewalld is found");
                d.retire(&retired, &mut cx).unwrap();
                if !batch.is_empty() {
                    sock.send(&batch).unwrap();
                }
                retired
            })
        })
        .unwrap();
    assert_eq!(retired.unit.as_deref(), Some("firewalld.service"));
    assert!(!fw.is_running(), "retired firewalld has stopped");
    assert_eq!(firewalld_table(node), "", "its table went with it");
    expect(
        &net.peer,
        &public,
        SERVED,
        Probe::Reached,
        "nothing refuses once retired",
    );
    assert_eq!(
        files(&fw.config_dir()),
        config,
        "/etc/firewalld byte for byte, retired"
    );

    fw.start().unwrap();
    node.in_namespace(|| {
        firewall::dbus::with_system_bus(&address, || {
            let ruleset = firewall::Ruleset::default();
            let saves = BTreeMap::new();
            let mut batch = Batch::new();
            let d = kind(Backend::Firewalld).retire;
            let mut cx = Cx {
                ruleset: &ruleset,
                legacy_saves: &saves,
                batch: &mut batch,
                exec: &run::SystemRunner,
            };
            d.restore(&retired, &mut cx).unwrap();
        })
    })
    .unwrap();
    host.reconcile();
    assert_eq!(
        files(&fw.config_dir()),
        config,
        "/etc/firewalld byte for byte, restored"
    );
    assert_eq!(
        firewalld_table(node),
        before,
        "the ruleset as before, openings converged again"
    );
    expect(
        &net.peer,
        &public,
        OPENED,
        Probe::Reached,
        "opened again after the return",
    );
    not_reached(
        &net.outside,
        &public,
        OPENED,
        "the ban refuses through the return",
    );

    // Removal leaves only what was there: the policy empty, the ruleset as before the opening.
    host.apply(&declaration(&[]));
    let rules = fw
        .cmd(&["--policy", "mesh-host", "--list-rich-rules"])
        .unwrap();
    assert_eq!(
        rules.stdout.trim(),
        "",
        "only the mesh's rules went, all of them"
    );
    not_reached(&net.peer, &public, OPENED, "removed");
    expect(
        &net.peer,
        &public,
        SERVED,
        Probe::Reached,
        "served after removal",
    );
    assert!(
        !firewalld_table(node).contains("9000"),
        "no rule of the opening is left"
    );
    // Nothing of the mesh's is left at run time: the ruleset is what firewalld makes from its
    // configuration alone (which holds the mesh's policy and zone, empty).
    let removed = firewalld_table(node);
    fw.cmd(&["--reload"]).unwrap();
    assert_eq!(
        firewalld_table(node),
        removed,
        "the runtime is firewalld's own"
    );
}

/// Runs a driver verb inside the node against the firewalld at `address`, sending what it put
/// in the batch.
pub(super) fn with_driver<T: Send>(
    node: &Machine,
    address: &str,
    f: impl FnOnce(&dyn firewall::backend::Retire, &mut Cx<'_>) -> T + Send,
) -> T {
    node.in_namespace(|| {
        firewall::dbus::with_system_bus(address, || {
            let mut sock = firewall::NfSocket::open().unwrap();
            let ruleset = sock.ruleset(None).unwrap();
            let saves = BTreeMap::new();
            let mut batch = Batch::new();
            let d = kind(Backend::Firewalld).retire;
            let mut cx = Cx {
                ruleset: &ruleset,
                legacy_saves: &saves,
                batch: &mut batch,
                exec: &run::SystemRunner,
            };
            let out = f(d, &mut cx);
            if !batch.is_empty() {
                sock.send(&batch).unwrap();
            }
            out
        })
    })
    .unwrap()
}

/// The flip's retire through the driver with Docker on firewalld's bus: firewalld ended without
/// its cleanup, its table gone, Docker's rules still `docker_before` and `port` still reached on
/// `addrs`. Returns what the survey saved, for the restore.
pub(super) fn retire_keeping_docker(
    net: &Adoption,
    fw: &mut lab::Firewalld,
    docker_before: &str,
    addrs: &[IpAddr],
    port: u16,
) -> firewall::Retired {
    let node = &net.node;
    let retired = with_driver(node, &fw.address(), |d, cx| {
        let r = d
            .survey(Path::new("/"), cx)
            .unwrap()
            .expect("firewalld is found");
        d.retire(&r, cx).unwrap();
        r
    });
    assert!(!fw.is_running(), "retired firewalld has stopped");
    assert_eq!(firewalld_table(node), "", "its table is gone");
    assert_eq!(
        docker_rules(node),
        docker_before,
        "Docker's rules through the retire"
    );
    expect(
        &net.peer,
        addrs,
        port,
        Probe::Reached,
        "published while retired",
    );
    retired
}

/// Docker's rules as iptables-nft prints them, counters left out.
pub(super) fn docker_rules(node: &Machine) -> String {
    View::Save("iptables-nft-save").read(node)
}

/// Waits (up to 30 s) until the peer reaches `port` on the node's IPv4 address: Docker puts its
/// rules back a moment after firewalld comes back.
fn eventually_reached(net: &Adoption, port: u16, why: &str) {
    let until = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = net
            .peer
            .probe_tcp(NODE_PUBLIC_V4.into(), port, ANSWER)
            .unwrap();
        if got == Probe::Reached {
            return;
        }
        assert!(std::time::Instant::now() < until, "{why}: still {got}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A Docker engine beside firewalld, sharing its bus as on a real machine: a published port is
/// forwarded after Docker's DNAT, which firewalld (without StrictForwardPorts) accepts as a
/// whole, so the forwarded opening needs no rule in firewalld and is reported so, naming why;
/// the published port is reached in both families.
/// Docker's rules survive firewalld's reload (Docker puts them back), the retire (firewalld is
/// ended without the cleanup that flushes every iptables table) and the return.
#[test]
fn firewalld_with_docker_a_forwarded_opening_is_admitted_and_docker_keeps_its_rules() {
    const PUBLISHED: u16 = 8082;
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let mut fw = node
        .start_firewalld(&lab.dir().join("firewalld"))
        .expect("firewalld and dbus are installed; never skipped");
    let docker = fw
        .start_docker_with(
            &lab.dir().join("docker"),
            &lab::EngineOptions::ipv6("fd00:d0c::/64"),
        )
        .expect("a Docker engine in the node's namespace (docker.io, busybox-static)");
    docker
        .run_container(
            "web",
            &["-p", &format!("{PUBLISHED}:80")],
            &["/bin/httpd", "-f", "-p", "80", "-h", "/www"],
        )
        .expect("a container publishing a port");
    let v4: [IpAddr; 1] = [NODE_PUBLIC_V4.into()];
    // Published in both families: Docker's DNAT in ip and ip6 nat alike.
    let both = node_public();
    expect(
        &net.peer,
        &both,
        PUBLISHED,
        Probe::Reached,
        "published, before",
    );
    let outside_before = net.outside.probe_tcp(v4[0], PUBLISHED, ANSWER).unwrap();

    let host = Host::wrapped(node, vec!["env".into(), fw.env()]);
    host.apply(&declaration(&[opening("web/pub", PUBLISHED, "forwarded")]));
    expect(
        &net.peer,
        &both,
        PUBLISHED,
        Probe::Reached,
        "published, after",
    );
    assert_eq!(
        net.outside.probe_tcp(v4[0], PUBLISHED, ANSWER).unwrap(),
        outside_before,
        "the outside machine sees the published port as before"
    );
    let status = host.status();
    let o = status["openings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "web/pub")
        .unwrap_or_else(|| panic!("{status:#}"));
    let forward = o["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["layer"] == "inet firewalld filter_FORWARD (firewalld)")
        .unwrap_or_else(|| panic!("firewalld's forward layer: {status:#}"));
    assert_eq!(forward["state"], "not-needed", "{forward:#}");
    assert!(
        forward["detail"]
            .as_str()
            .unwrap()
            .contains("ct status dnat accept"),
        "{forward:#}"
    );
    assert!(
        presence(&status, "web/pub")
            .iter()
            .all(|p| p.ends_with("=present")),
        "every other layer admits it: {status:#}"
    );

    // firewalld's reload flushes every iptables table; Docker, on the same bus, puts its rules
    // back. Docker's own FORWARD admits its published port (its DOCKER chain accepts the
    // container's port towards docker0), which the host's walk sees: nothing of the mesh's is
    // written into Docker's chains, before the reload or after the host's next check.
    fw.cmd(&["--reload"]).unwrap();
    eventually_reached(
        &net,
        PUBLISHED,
        "Docker puts its rules back after firewalld's reload",
    );
    host.reconcile();
    let docker_before = docker_rules(node);
    assert!(
        !docker_before.contains("mesh-host:"),
        "Docker's chains admit it as they are: {docker_before}"
    );
    // Docker puts its IPv6 rules back a moment after its IPv4 ones: the verdict says present
    // once both are, and the probes in both families agree.
    let started = std::time::Instant::now();
    let mut status = host.status();
    while status_verdict(&status, "web/pub") != "present"
        && started.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(250));
        status = host.status();
    }
    assert_eq!(status_verdict(&status, "web/pub"), "present", "{status:#}");
    expect(
        &net.peer,
        &both,
        PUBLISHED,
        Probe::Reached,
        "after firewalld's reload, as the verdict says",
    );
    let docker_before = docker_rules(node);

    // The flip's retire: Docker's rules stay exactly as they were, the published port served.
    let address = fw.address();
    let retired = retire_keeping_docker(&net, &mut fw, &docker_before, &both, PUBLISHED);

    // The return: firewalld started again (its unit, here the lab), Docker's rules back.
    fw.start().unwrap();
    with_driver(node, &address, |d, cx| d.restore(&retired, cx).unwrap());
    eventually_reached(&net, PUBLISHED, "published after the return");
    host.reconcile();
    assert_eq!(
        docker_rules(node),
        docker_before,
        "Docker's rules after the return"
    );
    host.apply(&declaration(&[]));
    expect(
        &net.peer,
        &both,
        PUBLISHED,
        Probe::Reached,
        "Docker's own rules still admit it",
    );
}

/// The resident host hears firewalld's `Reloaded` signal on the bus and puts the opening back
/// in the mesh's policy, with no command run.
#[test]
fn the_resident_host_puts_firewalld_openings_back_after_a_reload() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [SSH, OPENED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let public = node_public();
    let fw = node
        .start_firewalld(&lab.dir().join("firewalld"))
        .expect("firewalld and dbus are installed; never skipped");
    let host = Host::wrapped(node, vec!["env".into(), fw.env()]);
    host.apply(&declaration(&[opening("web/api", OPENED, "incoming")]));
    expect(&net.peer, &public, OPENED, Probe::Reached, "opened");
    let resident = super::resident::Resident::start(&host, &[]);

    for round in 1..=2 {
        fw.cmd(&["--reload"]).unwrap();
        resident.wait_log("firewalld reloaded", round, Duration::from_secs(30));
        let started = std::time::Instant::now();
        loop {
            let rules = fw
                .cmd(&["--policy", "mesh-host", "--list-rich-rules"])
                .unwrap()
                .stdout;
            if rules.contains("port=\"9000\"") {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "round {round}: the opening was not put back:\n{}",
                resident.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        expect(
            &net.peer,
            &public,
            OPENED,
            Probe::Reached,
            "put back by the resident host",
        );
    }
}

/// An opening from the private network: firewalld admits by zone, so the private network's
/// interface (the mesh's own) is bound to the mesh's zone at run time and the opening's rich rule
/// lives there. The peer reaches it over the private network in both families; nobody reaches it
/// over the public side; removal unbinds the interface and empties the zone.
#[test]
fn firewalld_an_opening_from_the_private_network_lives_in_the_mesh_zone() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [SSH, OPENED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let fw = node
        .start_firewalld(&lab.dir().join("firewalld"))
        .expect("firewalld and dbus are installed; never skipped");
    let private = node_private();
    let public = node_public();
    not_reached(&net.peer, &private, OPENED, "not yet opened");

    let host = Host::wrapped(node, vec!["env".into(), fw.env()]);
    let decl = declaration(&[
        json!({"id": "store/private", "type": "opening", "port": OPENED,
        "proto": "tcp", "from": "private", "path": "incoming"}),
    ]);
    host.apply(&decl);
    expect(
        &net.peer,
        &private,
        OPENED,
        Probe::Reached,
        "opened from the private network",
    );
    not_reached(&net.peer, &public, OPENED, "not from the public side");
    not_reached(&net.outside, &public, OPENED, "not from outside");
    assert_eq!(
        fw.cmd(&["--get-zone-of-interface=mesh0"])
            .unwrap()
            .stdout
            .trim(),
        "mesh-private"
    );
    assert_eq!(
        fw.cmd(&["--zone", "mesh-private", "--list-rich-rules"])
            .unwrap()
            .stdout
            .trim(),
        "rule port port=\"9000\" protocol=\"tcp\" accept"
    );
    let status = host.status();
    let layers = presence(&status, "store/private");
    assert!(!layers.is_empty(), "no layer drops the opening: {status:#}");
    assert!(layers.iter().all(|p| p.ends_with("=present")), "{status:#}");

    // A reload drops the binding and the rule with the rest of the runtime; a reconcile puts
    // both back.
    fw.cmd(&["--reload"]).unwrap();
    not_reached(&net.peer, &private, OPENED, "the reload lost it");
    host.reconcile();
    expect(
        &net.peer,
        &private,
        OPENED,
        Probe::Reached,
        "put back by reconcile",
    );

    host.apply(&declaration(&[]));
    not_reached(&net.peer, &private, OPENED, "removed");
    let zone = node
        .run(&[
            "env",
            &fw.env(),
            "firewall-cmd",
            "--get-zone-of-interface=mesh0",
        ])
        .unwrap();
    assert!(
        !zone.stdout.contains("mesh-private"),
        "mesh0 unbound: {}",
        zone.stdout
    );
    assert_eq!(
        fw.cmd(&["--zone", "mesh-private", "--list-rich-rules"])
            .unwrap()
            .stdout
            .trim(),
        ""
    );
    // No rule dispatches the interface anywhere any more (firewalld keeps or drops the empty
    // chains of a zone nothing is bound to as it pleases).
    let removed = firewalld_table(node);
    assert!(!removed.contains("\"mesh0\""), "{removed}");
    assert!(!removed.contains("9000"), "{removed}");
}
