//! The guard: the foundation's own ports refused from outside, whatever the source address says
//! or an interface is named, and reachable over the private network and loopback; a plain table
//! that a saved ruleset carries and restores, that a flush removes and the next reconcile puts
//! back, and that replaces an earlier version's orphaned table.

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

    // No interface is trusted for its name: one named like Podman's (netavark's podman1, CNI's
    // cni-podman0) is outside, since no runtime here reports it, like any other.
    for (n, ifname) in ["podman1", "cni-podman0"].into_iter().enumerate() {
        let ctr = lab
            .machine(&format!("ctr{n}"))
            .expect("a container's namespace");
        lab.veth(node, ifname, &ctr, "eth0")
            .expect("a veth into it");
        let node_side: IpAddr = format!("10.88.{n}.1").parse().unwrap();
        let ctr_side: IpAddr = format!("10.88.{n}.2").parse().unwrap();
        node.add_address(ifname, node_side, 24).unwrap();
        ctr.add_address("eth0", ctr_side, 24).unwrap();
        expect(&ctr, &[node_side], STORE, Probe::TimedOut, ifname);
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

    // The apply exited; the guard is a plain table, owned by no one and with no flags.
    let g = guard_state(&host);
    assert_eq!(
        (&g["present"], &g["plain"], &g["owned"], &g["orphan"]),
        (&json!(true), &json!(true), &json!(false), &json!(false)),
        "{g:#}"
    );
    let listing = run_ok(node, &["nft", "list", "table", "inet", "mesh_host"]);
    assert!(
        listing.starts_with("table inet mesh_host {\n\tchain guard {"),
        "no flags line, no owner: {listing}"
    );

    // Another program flushes the whole ruleset: the plain guard goes with it, and the next
    // reconcile puts it back.
    run_ok(node, &["nft", "flush", "ruleset"]);
    assert_eq!(guard_state(&host)["present"], false);
    expect(
        &net.outside,
        &public,
        STORE,
        Probe::Reached,
        "guard flushed by another program",
    );
    let report = host.reconcile();
    assert!(
        report["guard"]
            .as_str()
            .unwrap_or_default()
            .contains("(created; written)"),
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

/// An earlier version's guard: a table created with the owner and persist flags, held by a live
/// process or orphaned by one that exited.
#[test]
fn an_earlier_versions_owned_guard_is_reported_while_held_and_replaced_once_orphaned() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _store = node.listen_tcp(STORE).expect("listener on the node");
    let host = Host::new(node);
    host.apply(&declaration(&[]));
    run_ok(node, &["nft", "delete", "table", "inet", "mesh_host"]);

    // A holder, as an earlier version's resident host: the table owned by its socket, empty.
    let mut holder = node
        .in_namespace(NfSocket::open)
        .expect("entering the node")
        .expect("a netlink socket in the node");
    assert_eq!(
        holder
            .claim_table(firewall::Family::Inet, "mesh_host")
            .unwrap(),
        firewall::Claim::Created
    );
    let out = host.run(&["reconcile", "--json"]);
    assert!(!out.success(), "{}\n{}", out.stdout, out.stderr);
    let report: Value = crate::util::contract(&out.stdout);
    let line = report["guard"].as_str().unwrap_or_default();
    assert!(
        line.contains(&format!("held by netlink port {}", holder.portid()))
            && line.contains("its holder must change it"),
        "reported, not fought: {report:#}"
    );
    let g = guard_state(&host);
    assert_eq!(
        (&g["owned"], &g["owner"]),
        (&json!(true), &json!(holder.portid()))
    );

    // The holder exits: the table stays as an orphan, which a saved ruleset cannot carry. The
    // next reconcile replaces it with the plain guard in one transaction.
    drop(holder);
    assert_eq!(guard_state(&host)["orphan"], true);
    let report = host.reconcile();
    let line = report["guard"].as_str().unwrap_or_default();
    assert!(
        line.contains("(replaced an orphaned persist table of an earlier version with a plain table; written)"),
        "{report:#}"
    );
    let g = guard_state(&host);
    assert_eq!(
        (&g["plain"], &g["orphan"]),
        (&json!(true), &json!(false)),
        "{g:#}"
    );
    expect(
        &net.outside,
        &node_public(),
        STORE,
        Probe::TimedOut,
        "the plain guard in place of the orphan",
    );
    let report = host.reconcile();
    assert!(
        report["guard"]
            .as_str()
            .unwrap_or_default()
            .contains("(plain table; unchanged);"),
        "{report:#}"
    );
}

/// Every file beneath `dir` with its bytes, for a before-and-after comparison.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().map(Result::unwrap) {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                todo.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// An opening on the store's or broker-management's port wider than the private network
/// contradicts the guard (it would be reported in force while the guard drops it, and reach the
/// store from outside after converge): the declaration is refused with exit 2 naming the guard
/// setting, and the store, the ruleset and the ports stay as they were — probed.
#[test]
fn an_opening_on_the_stores_port_from_anywhere_is_refused_and_changes_nothing() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [STORE, BROKER_MANAGEMENT, OPENED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let host = Host::new(node);
    host.apply(&declaration(&[opening("web/port", OPENED, "incoming")]));
    let ruleset = run_ok(node, &["nft", "list", "ruleset"]);
    let store = tree(&host.root());

    let mut wide = opening("db/port", STORE, "incoming");
    wide["module"] = json!("db");
    let mut listed = opening("mq/admin", BROKER_MANAGEMENT, "forwarded");
    listed["from"] = json!([format!("{PRIVATE_V4_NET}/{PRIVATE_V4_PREFIX}"), "0.0.0.0/0"]);
    let mut private = opening("db/private", STORE, "incoming");
    private["from"] = json!("private");
    let file = host.dir.path().join("wide.json");
    let decl = declaration(&[
        opening("web/port", OPENED, "incoming"),
        wide,
        listed,
        private,
    ]);
    std::fs::write(&file, serde_json::to_vec_pretty(&decl).unwrap()).unwrap();
    let out = host.run(&["apply", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}\n{}", out.stdout, out.stderr);
    for says in [
        "resources[1].from: an opening from anywhere: port 5432 is settings.ports.store",
        "resources[2].from[1]: an opening from 0.0.0.0/0: port 15672 is \
         settings.ports.broker_management",
    ] {
        assert!(out.stderr.contains(says), "{says:?} in:\n{}", out.stderr);
    }
    assert!(
        !out.stderr.contains("resources[3]") && !out.stderr.contains("from[0]"),
        "from the private network is what the guard admits:\n{}",
        out.stderr
    );
    assert_eq!(run_ok(node, &["nft", "list", "ruleset"]), ruleset);
    assert_eq!(
        tree(&host.root()),
        store,
        "the store and root are untouched"
    );
    expect(
        &net.outside,
        &node_public(),
        STORE,
        Probe::TimedOut,
        "the store from outside, after the refusal",
    );
    expect(
        &net.outside,
        &node_public(),
        BROKER_MANAGEMENT,
        Probe::TimedOut,
        "broker-management from outside, after the refusal",
    );
    expect(
        &net.outside,
        &node_public(),
        OPENED,
        Probe::Reached,
        "the opening applied before the refusal still answers",
    );
}
