//! A real Docker engine in the node: a published port behind a found forward chain, Docker's real
//! rules listed, and the guard seen from containers.

use super::*;

/// Connects from a fresh container (on `network`, or Docker's default bridge) to `addr:port`
/// with busybox nc: reached, refused, or timed out after two seconds.
fn from_container(docker: &lab::Docker, network: Option<&str>, addr: IpAddr, port: u16) -> Probe {
    let target = addr.to_string();
    let port = port.to_string();
    let mut args = vec!["run", "--rm"];
    if let Some(n) = network {
        args.extend(["--network", n]);
    }
    args.extend([
        lab::BUSYBOX_IMAGE,
        "/bin/nc",
        "-w2",
        &target,
        &port,
        "-e",
        "/bin/true",
    ]);
    let out = lab::run(&mut docker.command(&args)).expect("docker run");
    if out.success() {
        Probe::Reached
    } else if out.stderr.contains("timed out") {
        Probe::TimedOut
    } else if out.stderr.contains("refused") {
        Probe::Refused
    } else {
        panic!(
            "docker {args:?} failed for another reason ({}): {}",
            out.status, out.stderr
        )
    }
}

#[test]
fn docker_published_port_behind_a_found_forward_chain_and_the_guard_from_containers() {
    const PUBLISHED: u16 = 8082;
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let docker = node
        .start_docker(&lab.dir().join("docker"))
        .expect("a Docker engine in the node's namespace (docker.io, busybox-static)");
    docker
        .run_container(
            "web",
            &["-p", &format!("{PUBLISHED}:80")],
            &["/bin/httpd", "-f", "-p", "80", "-h", "/www"],
        )
        .expect("a container publishing a port");
    // Docker publishes IPv4 through DNAT; its IPv6 goes through docker-proxy on the input path.
    let v4: [IpAddr; 1] = [NODE_PUBLIC_V4.into()];
    expect(
        &net.outside,
        &v4,
        PUBLISHED,
        Probe::Reached,
        "Docker's own rules admit it",
    );

    // Docker's real rules list, as an iptables-nft firewall whose forward chain can drop.
    let host = Host::new(node);
    let status = host.status();
    assert_eq!(status["kind"], "iptables-nft", "{status:#}");
    let forward = status["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["layer"] == "ip filter FORWARD (iptables-nft)")
        .unwrap_or_else(|| panic!("no Docker FORWARD layer: {status:#}"));
    assert_eq!(forward["can_drop"], true, "{forward:#}");
    assert!(
        forward["evidence"].as_str().unwrap().contains("Docker"),
        "{forward:#}"
    );

    // 1. The operator's own forward chain drops by default, beside Docker's: a packet must pass
    //    both, so Docker's accept no longer admits the published port.
    load_nft(
        node,
        lab.dir(),
        "forward.nft",
        "table inet filter {
	chain forward {
		type filter hook forward priority filter; policy drop;
	}
}
",
    );
    expect(
        &net.outside,
        &v4,
        PUBLISHED,
        Probe::TimedOut,
        "the found forward chain drops",
    );
    let views = [
        View::Save("iptables-nft-save"),
        View::Save("ip6tables-nft-save"),
        View::NftTable("inet", "filter"),
        View::Nft,
    ];
    let before: Vec<String> = views.iter().map(|v| v.read(node)).collect();

    let decl = declaration(&[opening("web/http", PUBLISHED, "forwarded")]);
    let report = host.apply(&decl);
    assert_eq!(outcome(&report, "web/http"), "created", "{report:#}");
    expect(
        &net.outside,
        &v4,
        PUBLISHED,
        Probe::Reached,
        "the forwarded opening",
    );
    let status = host.status();
    assert_eq!(status["kind"], "nftables+iptables-nft", "{status:#}");
    // Docker's own FORWARD already accepts the published port (its DOCKER chain admits the
    // container's port towards docker0), which the walk sees: only the operator's chain, which
    // drops it, gets the opening's rule.
    assert_eq!(
        presence(&status, "web/http"),
        ["inet filter forward (nftables)=present"],
        "{status:#}"
    );
    assert_eq!(status_verdict(&status, "web/http"), "present", "{status:#}");
    // iptables still reads Docker's tables, and each view differs from the found one only by
    // the mesh's marked rules.
    for (view, marks) in [(0, 0), (1, 0), (2, 1)] {
        let now = views[view].read(node);
        assert_eq!(marked_lines(&now).len(), marks, "{:?}\n{now}", views[view]);
        assert_eq!(without_marked(&now), before[view], "{:?}", views[view]);
    }

    let report = host.apply(&declaration(&[]));
    assert_eq!(outcome(&report, "web/http"), "removed", "{report:#}");
    expect(
        &net.outside,
        &v4,
        PUBLISHED,
        Probe::TimedOut,
        "the opening removed",
    );
    for (view, before) in views.iter().zip(&before) {
        assert_eq!(&view.read(node), before, "{view:?}: restored exactly");
    }

    // 2. The operator drops forwarded traffic from outside in DOCKER-USER instead, through
    //    iptables (Docker's documented way): that drop is the catch-all for what arrives on the
    //    outside interface, so the opening goes just before it in DOCKER-USER, in iptables' own
    //    terms; FORWARD itself is not touched.
    run_ok(node, &["nft", "delete", "table", "inet", "filter"]);
    run_ok(
        node,
        &[
            "iptables-nft",
            "-w",
            "-I",
            "DOCKER-USER",
            "-i",
            PUBLIC_IF,
            "-j",
            "DROP",
        ],
    );
    expect(
        &net.outside,
        &v4,
        PUBLISHED,
        Probe::TimedOut,
        "DOCKER-USER drops",
    );
    let before = View::Save("iptables-nft-save").read(node);
    host.apply(&decl);
    expect(
        &net.outside,
        &v4,
        PUBLISHED,
        Probe::Reached,
        "opened in DOCKER-USER, before its drop",
    );
    let status = host.status();
    assert_eq!(
        presence(&status, "web/http"),
        ["ip filter FORWARD (iptables-nft)=present"],
        "{status:#}"
    );
    let now = View::Save("iptables-nft-save").read(node);
    assert_eq!(
        marked_lines(&now),
        [format!(
            "-A DOCKER-USER -p tcp -m conntrack --ctstate DNAT --ctorigdstport {PUBLISHED} -m comment --comment \"{}\" -j ACCEPT",
            marked_lines(&now)
                .first()
                .and_then(|l| l.split('"').nth(1))
                .unwrap_or("?")
        )],
        "{now}"
    );
    assert_eq!(without_marked(&now), before);
    let user: Vec<&str> = now
        .lines()
        .filter(|l| l.starts_with("-A DOCKER-USER"))
        .collect();
    assert!(
        user.len() >= 2
            && is_marked(user[0])
            && user[1] == format!("-A DOCKER-USER -i {PUBLIC_IF} -j DROP"),
        "the opening sits just before the operator's drop:\n{now}"
    );
    host.apply(&declaration(&[]));
    expect(
        &net.outside,
        &v4,
        PUBLISHED,
        Probe::TimedOut,
        "removed again",
    );
    assert_eq!(View::Save("iptables-nft-save").read(node), before);

    // 3. The guard: the store's port on the node is refused from outside and reachable from
    //    containers, on Docker's default bridge (docker0) and on a network of its own (br-…),
    //    each a bridge Docker reports when the host asks it on the apply.
    let _store = node.listen_tcp(STORE).expect("store listener on the node");
    docker
        .docker(&["network", "create", "labnet"])
        .expect("a user-defined network");
    let report = host.apply_with_docker(docker.docker_host(), &declaration(&[]));
    let line = report["guard"].as_str().unwrap_or_default();
    assert!(
        // The runtime's bridges in name order, whatever order the engine listed them in.
        line.contains("except on lo, br-") && line.contains(", docker0") && !line.contains('*'),
        "{report:#}"
    );
    let public = node_public();
    expect(
        &net.outside,
        &public,
        STORE,
        Probe::TimedOut,
        "store from outside",
    );
    let bridges = run_ok(node, &["ip", "-o", "link", "show", "type", "bridge"]);
    assert!(
        bridges.contains(": docker0:") && bridges.contains(": br-"),
        "{bridges}"
    );
    for network in [None, Some("labnet")] {
        let got = from_container(&docker, network, NODE_PUBLIC_V4.into(), STORE);
        if got != Probe::Reached {
            let again = from_container(&docker, network, NODE_PUBLIC_V4.into(), STORE);
            let diag = [
                vec!["nft", "list", "ruleset"],
                vec!["ip", "-br", "link"],
                vec!["ip", "-br", "addr"],
                vec!["ip", "route"],
                vec!["sysctl", "net.bridge.bridge-nf-call-iptables"],
            ]
            .iter()
            .map(|argv| {
                let out = node.run(argv).unwrap();
                format!("$ {}\n{}{}", argv.join(" "), out.stdout, out.stderr)
            })
            .collect::<Vec<_>>()
            .join("\n");
            panic!(
                "a container on {network:?} to the node's store: {got}, then {again}\n{diag}\n{}",
                docker.log()
            );
        }
    }
    // The container's published port passes the guard untouched: it refuses only its own two.
    assert_eq!(
        from_container(&docker, Some("labnet"), NODE_PUBLIC_V4.into(), CLOSED),
        Probe::Refused,
        "nothing listens there, and the guard does not pretend otherwise"
    );
    let status = host.status();
    assert_eq!(status["guard"]["present"], true, "{status:#}");
}
