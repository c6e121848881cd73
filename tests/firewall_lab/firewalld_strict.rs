//! A found firewalld 2.3 with `StrictForwardPorts=yes` (Debian trixie's, unpacked by
//! `lab/fetch-firewalld`), a Docker engine beside it on its bus: a container port published on a
//! different port than it serves is refused until the forwarded opening is applied, then
//! admitted by a forward port in the mesh's policy naming the container; a reload loses it until
//! the next reconcile; a container that moves gets its forward port replaced; an opening from a
//! network is not widened; the flip's retire and the return keep Docker's rules; removal takes
//! the forward ports out; firewalld's configuration keeps every byte but the mesh's policy file.
//! The resident host writes a forward port once the runtime publishes the port; with IPv6 on
//! Docker's bridge there is one forward port per family.

use super::firewalld::{docker_rules, retire_keeping_docker, with_driver};
use super::found::{files, not_reached};
use super::*;
use lab::FirewalldProgram;

/// The port the node publishes, and the port the container serves on behind it.
const PUBLISHED: u16 = 8085;
const SERVES: u16 = 80;

/// firewalld 2.3 (as `lab/fetch-firewalld` unpacked it) with `StrictForwardPorts=yes`, started in
/// `node` on a private bus under the lab's directory.
fn strict_firewalld(lab: &Lab, node: &Machine) -> lab::Firewalld {
    let program = FirewalldProgram::fetched()
        .expect("firewalld 2.3 unpacked by lab/fetch-firewalld; never skipped")
        .with_setting("StrictForwardPorts", "yes");
    let dir = lab.dir().join("firewalld");
    node.start_firewalld_program(&program, &dir, &dir.join("etc"))
        .expect("firewalld 2.3 starts on a private bus")
}

/// The container's address on Docker's bridge.
fn container_addr(docker: &lab::Docker, name: &str) -> String {
    docker
        .docker(&[
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            name,
        ])
        .unwrap()
        .stdout
        .trim()
        .to_string()
}

/// The forward ports of the mesh's policy at run time, as firewall-cmd lists them.
fn forward_ports(fw: &lab::Firewalld) -> Vec<String> {
    let out = fw
        .cmd(&["--policy", "mesh-host", "--list-forward-ports"])
        .unwrap();
    let mut v: Vec<String> = out.stdout.split_whitespace().map(String::from).collect();
    v.sort();
    v
}

/// Waits (up to 30 s) until Docker's DNAT for the published port is back in its nat table
/// (Docker writes its rules again a moment after firewalld reloads).
fn docker_dnat_back(node: &Machine) {
    let until = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let out = node
            .run(&["iptables-nft", "-t", "nat", "-S", "DOCKER"])
            .unwrap();
        if out.stdout.contains(&format!("--dport {PUBLISHED} ")) {
            return;
        }
        assert!(
            std::time::Instant::now() < until,
            "Docker's DNAT is not back: {}",
            out.stdout
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The state and detail of the opening in firewalld's forward layer.
fn forward_layer(status: &Value, id: &str) -> (String, String) {
    let o = status["openings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == id)
        .unwrap_or_else(|| panic!("{status:#}"));
    let l = o["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["layer"] == "inet firewalld filter_FORWARD (firewalld)")
        .unwrap_or_else(|| panic!("firewalld's forward layer: {status:#}"));
    (
        l["state"].as_str().unwrap().to_string(),
        l["detail"].as_str().unwrap().to_string(),
    )
}

#[test]
fn firewalld_strict_forward_ports_admit_a_published_port_by_a_forward_port_in_the_mesh_policy() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let mut fw = strict_firewalld(&lab, node);
    let version = fw.cmd(&["--version"]).unwrap().stdout;
    assert!(version.trim().starts_with("2.3"), "firewalld {version}");
    let strict = strict_chain(node);
    assert!(
        strict.contains("reject with icmpx admin-prohibited"),
        "{strict}"
    );
    let docker = fw
        .start_docker(&lab.dir().join("docker"))
        .expect("a Docker engine in the node's namespace (docker.io, busybox-static)");
    let serve = ["/bin/httpd", "-f", "-p", "80", "-h", "/www"];
    let publish = format!("{PUBLISHED}:{SERVES}");
    docker
        .run_container("web", &["-p", &publish], &serve)
        .expect("a container publishing a port");
    let v4: [IpAddr; 1] = [NODE_PUBLIC_V4.into()];
    // Docker's own rules admit it; firewalld's strict chain refuses what Docker's DNAT forwards.
    not_reached(
        &net.peer,
        &v4,
        PUBLISHED,
        "strict firewalld refuses it, before",
    );
    let config = files(&fw.config_dir());

    let host = Host::wrapped(node, vec!["env".into(), fw.env()]);
    let anywhere = declaration(&[opening("web/pub", PUBLISHED, "forwarded")]);
    let report = host.apply(&anywhere);
    assert_eq!(outcome(&report, "web/pub"), "created", "{report:#}");
    expect(
        &net.peer,
        &v4,
        PUBLISHED,
        Probe::Reached,
        "admitted by the forward port",
    );
    let addr = container_addr(&docker, "web");
    let mine = format!("port={PUBLISHED}:proto=tcp:toport={SERVES}:toaddr={addr}");
    assert_eq!(
        forward_ports(&fw),
        vec![mine.clone()],
        "one forward port, the container's"
    );
    let status = host.status();
    assert_eq!(forward_layer(&status, "web/pub").0, "present", "{status:#}");
    let layers = presence(&status, "web/pub");
    assert!(layers.iter().all(|p| p.ends_with("=present")), "{status:#}");
    let strict = strict_chain(node);
    // Debian 12's nft prints the port in hex (its ct proto-dst has no type).
    assert!(
        strict.contains(&format!("ct original proto-dst {PUBLISHED} accept"))
            || strict.contains(&format!(
                "ct original proto-dst {PUBLISHED:#x} [invalid type] accept"
            )),
        "firewalld's own accept for it: {strict}"
    );

    // firewalld's reload drops its runtime configuration: the forward port is gone (Docker puts
    // its own rules back) until the next reconcile puts it back.
    fw.cmd(&["--reload"]).unwrap();
    docker_dnat_back(node);
    assert!(forward_ports(&fw).is_empty(), "the reload lost it");
    not_reached(
        &net.peer,
        &v4,
        PUBLISHED,
        "the reload lost the forward port",
    );
    assert_eq!(forward_layer(&host.status(), "web/pub").0, "missing");
    let report = host.reconcile();
    assert_eq!(outcome(&report, "web/pub"), "created", "{report:#}");
    assert_eq!(forward_ports(&fw), vec![mine.clone()]);
    expect(
        &net.peer,
        &v4,
        PUBLISHED,
        Probe::Reached,
        "put back by reconcile",
    );

    // The flip's retire through the driver: firewalld 2.3 ended without its cleanup, its table
    // gone, Docker's rules as they were and the published port served; on the return (the lab
    // standing in for its unit) the forward port comes back with the next reconcile.
    let docker_before = docker_rules(node);
    let address = fw.address();
    let retired = retire_keeping_docker(&net, &mut fw, &docker_before, &v4, PUBLISHED);
    fw.start().unwrap();
    with_driver(node, &address, |d, cx| d.restore(&retired, cx).unwrap());
    docker_dnat_back(node);
    host.reconcile();
    assert_eq!(
        forward_ports(&fw),
        vec![mine.clone()],
        "back after the return"
    );
    expect(
        &net.peer,
        &v4,
        PUBLISHED,
        Probe::Reached,
        "admitted after the return",
    );

    // The container moves to another address: its stale forward port is replaced.
    docker.remove_container("web").unwrap();
    docker
        .run_container("filler", &[], &["/bin/sleep", "3600"])
        .unwrap();
    docker
        .run_container("web", &["-p", &publish], &serve)
        .unwrap();
    let moved = container_addr(&docker, "web");
    assert_ne!(moved, addr, "the container's address changed");
    // firewalld's accept names the original port alone, so the stale forward port still admits
    // it; but it names the old address, so the status says the container's is missing.
    assert_eq!(
        forward_ports(&fw),
        vec![mine.clone()],
        "stale, until the next check"
    );
    assert_eq!(forward_layer(&host.status(), "web/pub").0, "missing");
    host.reconcile();
    assert_eq!(
        forward_ports(&fw),
        [format!(
            "port={PUBLISHED}:proto=tcp:toport={SERVES}:toaddr={moved}"
        )],
        "the stale forward port replaced"
    );
    expect(
        &net.peer,
        &v4,
        PUBLISHED,
        Probe::Reached,
        "admitted at the container's new address",
    );

    // An opening from one network is not widened to every source: nothing written, and the
    // report says why.
    let from_net = declaration(&[
        json!({"id": "web/pub", "type": "opening", "port": PUBLISHED,
        "proto": "tcp", "from": ["198.51.100.0/24"], "path": "forwarded"}),
    ]);
    // Not admitted: the briefing says failed, so the apply exits 5.
    let report = host.apply_not_in_force(&from_net);
    let why = report["not_admitted"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == "web/pub" && n["layer"] == "inet firewalld filter_FORWARD (firewalld)")
        .unwrap_or_else(|| panic!("not admitted by firewalld: {report:#}"))["why"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(why.contains("does not widen it"), "{why}");
    assert!(forward_ports(&fw).is_empty(), "nothing written for it");
    not_reached(&net.peer, &v4, PUBLISHED, "not admitted from a network");
    let (state, detail) = forward_layer(&host.status(), "web/pub");
    assert_eq!(state, "unwritable");
    assert!(detail.contains("StrictForwardPorts"), "{detail}");

    // Removal takes the forward ports out: refused again.
    host.apply(&anywhere);
    expect(
        &net.peer,
        &v4,
        PUBLISHED,
        Probe::Reached,
        "from anywhere again",
    );
    host.apply(&declaration(&[]));
    assert!(forward_ports(&fw).is_empty(), "removed");
    not_reached(&net.peer, &v4, PUBLISHED, "refused again once removed");

    // firewalld's configuration: every file as it was, but the mesh's policy, added once.
    let mut after = files(&fw.config_dir());
    let policy = fw.config_dir().join("policies/mesh-host.xml");
    assert!(
        after.remove(&policy).is_some(),
        "the mesh's policy file: {:?}",
        after.keys().collect::<Vec<_>>()
    );
    assert_eq!(
        after, config,
        "/etc/firewalld byte for byte but the mesh's policy"
    );
    drop(docker);
}

/// With no container publishing the port yet, nothing is written and the status says why. The
/// resident host, hearing Docker's rules arrive when the container starts, writes the forward
/// port; after a firewalld reload (its `Reloaded` signal, then Docker's rules coming back) it
/// puts it back, with no command run.
#[test]
fn firewalld_strict_the_resident_host_writes_the_forward_port_once_the_port_is_published() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let fw = strict_firewalld(&lab, node);
    let docker = fw
        .start_docker(&lab.dir().join("docker"))
        .expect("a Docker engine in the node's namespace");
    let host = Host::wrapped(node, vec!["env".into(), fw.env()]);
    // No container publishes the port yet, so the opening is not in force: the briefing says
    // failed and the apply exits 5.
    let report =
        host.apply_not_in_force(&declaration(&[opening("web/pub", PUBLISHED, "forwarded")]));
    let (state, detail) = forward_layer(&host.status(), "web/pub");
    assert_eq!(state, "unwritable", "{report:#}");
    assert!(
        detail.contains(&format!("no DNAT rule translates tcp port {PUBLISHED}")),
        "{detail}"
    );
    let policies = fw.cmd(&["--get-policies"]).unwrap().stdout;
    assert!(
        !policies.split_whitespace().any(|p| p == "mesh-host"),
        "nothing written yet, not even the mesh's policy: {policies}"
    );
    let resident = super::resident::Resident::start(&host, &[]);

    docker
        .run_container(
            "web",
            &["-p", &format!("{PUBLISHED}:{SERVES}")],
            &["/bin/httpd", "-f", "-p", "80", "-h", "/www"],
        )
        .unwrap();
    let addr = container_addr(&docker, "web");
    let mine = vec![format!(
        "port={PUBLISHED}:proto=tcp:toport={SERVES}:toaddr={addr}"
    )];
    let v4: [IpAddr; 1] = [NODE_PUBLIC_V4.into()];
    let written = |why: &str| {
        let started = std::time::Instant::now();
        while forward_ports(&fw) != mine {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{why}: not written:\n{}",
                resident.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        expect(&net.peer, &v4, PUBLISHED, Probe::Reached, why);
    };
    written("written by the resident host once published");

    fw.cmd(&["--reload"]).unwrap();
    resident.wait_log("firewalld reloaded", 1, Duration::from_secs(30));
    written("put back by the resident host after firewalld's reload");
    assert_eq!(forward_layer(&host.status(), "web/pub").0, "present");
}

/// Both families: Docker with IPv6 on its bridge (and its ip6tables DNAT) publishes the port on
/// both node addresses; the forwarded opening is one forward port per family, each naming the
/// container's address in it, and the peer reaches the container over both.
#[test]
fn firewalld_strict_a_port_published_in_both_families_gets_a_forward_port_in_each() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let fw = strict_firewalld(&lab, node);
    // Docker 20.10 publishes over IPv6 (ip6tables DNAT) only with its experimental options.
    let options = lab::EngineOptions::ipv6("fd00:d0c::/64");
    let docker = fw
        .start_docker_with(&lab.dir().join("docker"), &options)
        .expect("a Docker engine with IPv6 in the node's namespace");
    docker
        .run_container(
            "web",
            &["-p", &format!("{PUBLISHED}:{SERVES}")],
            &["/bin/httpd", "-f", "-p", "80", "-h", "/www"],
        )
        .unwrap();
    let public = node_public();
    not_reached(
        &net.peer,
        &public,
        PUBLISHED,
        "strict firewalld refuses it, before",
    );

    let host = Host::wrapped(node, vec!["env".into(), fw.env()]);
    host.apply(&declaration(&[opening("web/pub", PUBLISHED, "forwarded")]));
    let v4 = container_addr(&docker, "web");
    let v6 = docker
        .docker(&[
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.GlobalIPv6Address}}{{end}}",
            "web",
        ])
        .unwrap()
        .stdout
        .trim()
        .to_string();
    assert!(
        v6.starts_with("fd00:d0c::"),
        "the container's IPv6 address: {v6:?}"
    );
    let mut want = vec![
        format!("port={PUBLISHED}:proto=tcp:toport={SERVES}:toaddr={v4}"),
        format!("port={PUBLISHED}:proto=tcp:toport={SERVES}:toaddr={v6}"),
    ];
    want.sort();
    assert_eq!(forward_ports(&fw), want, "one forward port per family");
    expect(
        &net.peer,
        &public,
        PUBLISHED,
        Probe::Reached,
        "admitted in both families",
    );
    let status = host.status();
    assert!(
        presence(&status, "web/pub")
            .iter()
            .all(|p| p.ends_with("=present")),
        "{status:#}"
    );

    host.apply(&declaration(&[]));
    assert!(forward_ports(&fw).is_empty(), "removed");
    not_reached(
        &net.peer,
        &public,
        PUBLISHED,
        "refused again in both families",
    );
}

/// firewalld's strict chain for DNATed connections, as nft lists it.
fn strict_chain(node: &Machine) -> String {
    run_ok(
        node,
        &[
            "nft",
            "list",
            "chain",
            "inet",
            "firewalld",
            "filter_FORWARD_dnat",
        ],
    )
}
