//! The guard: the foundation's own ports refused from outside, whatever the source address says,
//! and reachable over the private network, loopback and the runtimes' networks; held, orphaned and
//! reclaimed.

use super::*;

/// How many packets the counter of each line of `chain` that mentions `dport PORT` has seen.
fn counted(m: &Machine, table: &str, chain: &str, port: u16) -> Vec<u64> {
    let listing = run_ok(m, &["nft", "list", "chain", "inet", table, chain]);
    let needle = format!("dport {port} ");
    listing
        .lines()
        .filter(|l| l.contains(&needle))
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let at = words
                .iter()
                .position(|w| *w == "packets")
                .unwrap_or_else(|| panic!("no counter in {l:?}"));
            words[at + 1].parse().unwrap()
        })
        .collect()
}

fn guard_state(host: &Host) -> Value {
    host.status()["guard"].clone()
}

#[test]
fn the_guard_refuses_the_foundations_ports_except_from_the_private_network_and_the_node() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [STORE, BROKER_MANAGEMENT, SERVED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let public = node_public();
    let private = node_private();
    let loopback: [IpAddr; 2] = [
        std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::Ipv6Addr::LOCALHOST.into(),
    ];

    // A machine with no firewall at all: the store is reachable from anywhere until the guard.
    expect(&net.outside, &public, STORE, Probe::Reached, "no guard yet");
    let host = Host::new(node);
    let report = host.apply(&declaration(&[]));
    let line = report["guard"].as_str().unwrap_or_default();
    assert!(
        line.contains("created") && line.contains(PRIVATE_IF),
        "{report:#}"
    );
    assert_eq!(host.status()["kind"], "none");

    expect(
        &net.outside,
        &public,
        STORE,
        Probe::TimedOut,
        "store from outside",
    );
    expect(
        &net.outside,
        &public,
        BROKER_MANAGEMENT,
        Probe::TimedOut,
        "broker from outside",
    );
    expect(
        &net.outside,
        &public,
        SERVED,
        Probe::Reached,
        "the guard only refuses its two ports",
    );
    expect(
        &net.peer,
        &private,
        STORE,
        Probe::Reached,
        "store over the private network",
    );
    expect(
        &net.peer,
        &private,
        BROKER_MANAGEMENT,
        Probe::Reached,
        "broker over the private network",
    );
    expect(
        &net.peer,
        &public,
        STORE,
        Probe::TimedOut,
        "the peer over the public network",
    );
    expect(
        node,
        &loopback,
        STORE,
        Probe::Reached,
        "store over loopback",
    );
    expect(
        node,
        &public,
        STORE,
        Probe::Reached,
        "the node to its own public address (over lo)",
    );

    // Runtimes' networks are known by their interface names: Podman's (netavark's podman0…, and
    // CNI's cni-…) pass, like Docker's (in the Docker test); an interface of any other name is
    // outside, whatever addresses it carries.
    for (n, (ifname, want)) in [
        ("podman1", Probe::Reached),
        ("cni-podman0", Probe::Reached),
        ("veth-other", Probe::TimedOut),
    ]
    .into_iter()
    .enumerate()
    {
        let ctr = lab
            .machine(&format!("ctr{n}"))
            .expect("a container's namespace");
        lab.veth(node, ifname, &ctr, "eth0")
            .expect("a veth into it");
        let node_side: IpAddr = format!("10.88.{n}.1").parse().unwrap();
        let ctr_side: IpAddr = format!("10.88.{n}.2").parse().unwrap();
        node.add_address(ifname, node_side, 24).unwrap();
        ctr.add_address("eth0", ctr_side, 24).unwrap();
        expect(&ctr, &[node_side], STORE, want, ifname);
        expect(&ctr, &[node_side], SERVED, Probe::Reached, ifname);
    }

    // A private-range source address claimed on the outside interface is refused: the guard goes
    // by the interface a packet arrives on. Replies to a spoofed source never come back, so what
    // arrives is counted after the guard, at prerouting priority 0, against a port it does not
    // guard.
    load_nft(
        node,
        lab.dir(),
        "watch.nft",
        &format!(
            "table inet watch {{
	chain pre {{
		type filter hook prerouting priority 0; policy accept;
		ip saddr {SPOOFED_PRIVATE_V4} tcp dport {STORE} counter
		ip6 saddr {SPOOFED_PRIVATE_V6} tcp dport {STORE} counter
		ip saddr {SPOOFED_PRIVATE_V4} tcp dport {SERVED} counter
		ip6 saddr {SPOOFED_PRIVATE_V6} tcp dport {SERVED} counter
	}}
}}
"
        ),
    );
    net.spoof_private_source()
        .expect("spoofing a private source");
    for (source, target) in [
        (
            IpAddr::from(SPOOFED_PRIVATE_V4),
            IpAddr::from(NODE_PRIVATE_V4),
        ),
        (SPOOFED_PRIVATE_V6.into(), NODE_PRIVATE_V6.into()),
    ] {
        for port in [STORE, SERVED] {
            let got = net
                .outside
                .probe_tcp_from(source, target, port, SILENCE)
                .expect("spoofed probe");
            assert_ne!(
                got,
                Probe::Reached,
                "spoofed [{source}] -> [{target}]:{port}"
            );
        }
    }
    assert_eq!(
        counted(node, "watch", "pre", STORE),
        [0, 0],
        "spoofed private sources passed the guard"
    );
    let served = counted(node, "watch", "pre", SERVED);
    assert!(
        served.iter().all(|n| *n > 0),
        "the spoofed packets must arrive at all for the check to mean anything: {served:?}"
    );
    run_ok(node, &["nft", "delete", "table", "inet", "watch"]);

    // The apply exited, so the guard is an orphan: persistent, owned by no one.
    let g = guard_state(&host);
    assert_eq!(
        (&g["present"], &g["orphan"], &g["owned"]),
        (&json!(true), &json!(true), &json!(false)),
        "{g:#}"
    );

    // A holder: a socket opened in the node's namespace that keeps the table, as the resident
    // host will. It reclaims the orphan without rewriting it.
    let spec = GuardSpec::for_node(STORE, BROKER_MANAGEMENT, Some(PRIVATE_IF));
    let mut holder = node
        .in_namespace(NfSocket::open)
        .expect("entering the node")
        .expect("a netlink socket in the node");
    let held = firewall::guard::ensure(&mut holder, &spec).expect("holding the guard");
    assert_eq!(held.claim, Some(firewall::Claim::Reclaimed));
    assert!(!held.changed, "the guard the apply left was already right");
    let g = guard_state(&host);
    assert_eq!(g["owned"], true, "{g:#}");
    assert_eq!(g["owner"], holder.portid(), "{g:#}");

    // Another process flushes the whole ruleset while the holder runs: the guard stays, and so
    // does the refusal. It cannot delete the table either.
    run_ok(node, &["nft", "flush", "ruleset"]);
    assert_eq!(guard_state(&host)["present"], true);
    expect(
        &net.outside,
        &public,
        STORE,
        Probe::TimedOut,
        "after a flush while held",
    );
    let deleted = node
        .run(&["nft", "delete", "table", "inet", "mesh_host"])
        .unwrap();
    assert!(!deleted.success(), "another process deleted a held guard");
    expect(
        &net.peer,
        &private,
        STORE,
        Probe::Reached,
        "private network while held",
    );

    // The holder exits: the guard persists as an orphan and still refuses.
    drop(holder);
    let g = guard_state(&host);
    assert_eq!(
        (&g["present"], &g["orphan"], &g["owned"]),
        (&json!(true), &json!(true), &json!(false)),
        "{g:#}"
    );
    expect(
        &net.outside,
        &public,
        STORE,
        Probe::TimedOut,
        "orphaned guard",
    );

    // The next holder reclaims it.
    let mut next = node.in_namespace(NfSocket::open).unwrap().unwrap();
    let held = firewall::guard::ensure(&mut next, &spec).unwrap();
    assert_eq!(held.claim, Some(firewall::Claim::Reclaimed));
    assert_eq!(guard_state(&host)["owner"], next.portid());
    drop(next);

    // So does the next reconcile, which leaves it an orphan again when it exits.
    let report = host.reconcile();
    assert!(
        report["guard"]
            .as_str()
            .unwrap_or_default()
            .contains("reclaimed"),
        "{report:#}"
    );
    assert_eq!(guard_state(&host)["orphan"], true);

    // With no holder, a flush deletes the orphan (the kernel's rule); the next reconcile puts the
    // guard back.
    run_ok(node, &["nft", "flush", "ruleset"]);
    assert_eq!(guard_state(&host)["present"], false);
    expect(
        &net.outside,
        &public,
        STORE,
        Probe::Reached,
        "guard flushed while orphaned",
    );
    let report = host.reconcile();
    assert!(
        report["guard"]
            .as_str()
            .unwrap_or_default()
            .contains("created"),
        "{report:#}"
    );
    expect(
        &net.outside,
        &public,
        STORE,
        Probe::TimedOut,
        "guard put back by reconcile",
    );
    expect(
        &net.peer,
        &private,
        STORE,
        Probe::Reached,
        "private network after reconcile",
    );
}
