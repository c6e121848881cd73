//! x_tables' `set` match read from a real kernel: ipsets made with the `ipset` tool in a fresh
//! namespace, read back over ipset's own netlink protocol (names, types, members, the kernel's
//! indices), and `-m set` rules through iptables-nft (which names the set by index only) and
//! iptables-legacy (by name) evaluated with them: the banned member is refused as a ban, another
//! source admitted, and a member added later is a later reading.

mod common;

use common::{in_fresh_netns, run_ok};
use firewall::eval::{Addrs, Conn, Fam, Fate, Model, Refusal, Snapshot};
use firewall::netlink::Family;
use firewall::NfSocket;
use std::process::Command;

/// Every tool run here is bounded by `timeout`; their output is a few lines.
fn run(args: &[&str]) {
    let mut all = vec!["20"];
    all.extend_from_slice(args);
    run_ok("timeout", &all);
}

fn save(tool: &str) -> String {
    let out = Command::new("timeout")
        .args(["20", tool, "-t", "filter"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{tool}: {:?}", out);
    String::from_utf8(out.stdout).unwrap()
}

const RULES: &[&[&str]] = &[
    &["-P", "INPUT", "DROP"],
    &[
        "-A",
        "INPUT",
        "-m",
        "set",
        "--match-set",
        "bans",
        "src",
        "-j",
        "DROP",
    ],
    &[
        "-A",
        "INPUT",
        "-p",
        "tcp",
        "--dport",
        "8080",
        "-m",
        "set",
        "!",
        "--match-set",
        "nets",
        "src",
        "-j",
        "DROP",
    ],
    &[
        "-A",
        "INPUT",
        "-p",
        "tcp",
        "-m",
        "set",
        "--match-set",
        "svc",
        "src,dst",
        "-j",
        "DROP",
    ],
    &[
        "-A",
        "INPUT",
        "-p",
        "tcp",
        "--dport",
        "8443",
        "-m",
        "set",
        "--match-set",
        "holes",
        "src",
        "-j",
        "DROP",
    ],
    &["-A", "INPUT", "-p", "tcp", "-j", "ACCEPT"],
];

fn fate(m: &Model, port: u16, from: &str) -> Fate {
    let mut c = Conn::incoming(Fam::V4, 6, port, "eth0");
    c.iif_index = Some(2);
    m.evaluate(&c, &Addrs::all(Fam::V4))
        .fate_of(from.parse().unwrap())
        .unwrap()
        .clone()
}

fn is_ban(f: &Fate) -> bool {
    matches!(
        f,
        Fate::Refused {
            why: Refusal::Ban,
            ..
        }
    )
}

/// The nf_tables part of the snapshot cut to iptables-nft's `ip filter`.
fn nft_model(snap: &Snapshot) -> Model {
    let mut s = snap.clone();
    let keep = |f: Family, t: &str| f == Family::Ipv4 && t == "filter";
    s.ruleset.tables.retain(|t| keep(t.family, &t.name));
    s.ruleset.chains.retain(|c| keep(c.family, &c.table));
    s.ruleset.rules.retain(|r| keep(r.family, &r.table));
    Model::new(&s)
}

fn legacy_model(snap: &Snapshot) -> Model {
    let mut s = Snapshot {
        ipsets: snap.ipsets.clone(),
        ..Snapshot::default()
    };
    s.legacy = vec![(Fam::V4, "filter".into(), save("iptables-legacy-save"))];
    Model::new(&s)
}

fn read() -> Snapshot {
    let mut sock = NfSocket::open().unwrap();
    let mut snap = Snapshot::read(&mut sock).unwrap();
    snap.ipsets = Some(sock.ipsets().unwrap());
    snap
}

#[test]
fn a_set_match_is_decided_from_the_kernels_members_through_both_tools() {
    in_fresh_netns();
    // A set made first takes index 0, so the ban set's index is not 0 by chance.
    run(&["ipset", "create", "first", "hash:ip"]);
    run(&["ipset", "create", "bans", "hash:ip", "timeout", "600"]);
    run(&["ipset", "add", "bans", "192.0.2.77", "timeout", "300"]);
    run(&["ipset", "create", "nets", "hash:net"]);
    run(&["ipset", "add", "nets", "198.51.100.0/24"]);
    run(&["ipset", "create", "bans6", "hash:ip", "family", "inet6"]);
    run(&["ipset", "add", "bans6", "2001:db8::77"]);
    // An address and a port: the member holds for its protocol and port only.
    run(&["ipset", "create", "svc", "hash:ip,port"]);
    run(&["ipset", "add", "svc", "192.0.2.7,tcp:2222"]);
    // A network with a hole cut by a nomatch member: not read, undecided.
    run(&["ipset", "create", "holes", "hash:net"]);
    run(&["ipset", "add", "holes", "203.0.113.0/24"]);
    run(&["ipset", "add", "holes", "203.0.113.128/25", "nomatch"]);
    for tool in ["iptables-nft", "iptables-legacy"] {
        for r in RULES {
            let mut args = vec![tool];
            args.extend_from_slice(r);
            run(&args);
        }
    }

    // The reading itself: every set, its type, family, members and index.
    let snap = read();
    let sets = snap.ipsets.as_ref().unwrap();
    let names: Vec<&str> = sets.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["first", "bans", "nets", "bans6", "svc", "holes"]);
    let svc = &sets[4].members[0];
    assert_eq!((svc.port, svc.proto), (Some(2222), Some(6)), "{svc:?}");
    assert!(sets[5].members.iter().any(|m| m.nomatch));
    let bans = &sets[1];
    assert_eq!((bans.typename.as_str(), bans.family), ("hash:ip", 2));
    assert_eq!(bans.index, Some(1));
    let ips: Vec<String> = bans
        .members
        .iter()
        .map(|m| m.ip.unwrap().to_string())
        .collect();
    assert_eq!(ips, ["192.0.2.77"]);
    assert_eq!(sets[2].members[0].cidr, Some(24));
    assert_eq!(sets[3].family, 10);
    let mut sock = NfSocket::open().unwrap();
    assert_eq!(sock.ipset_name(1).unwrap().as_deref(), Some("bans"));
    assert_eq!(sock.ipset_name(200).unwrap(), None);

    for (tool, m) in [
        ("iptables-nft", nft_model(&snap)),
        ("iptables-legacy", legacy_model(&snap)),
    ] {
        let banned = fate(&m, 22, "192.0.2.77");
        assert!(is_ban(&banned), "{tool}: the banned member: {banned:?}");
        assert_eq!(
            fate(&m, 22, "192.0.2.1"),
            Fate::Admitted,
            "{tool}: another source"
        );
        // `! --match-set nets`: only the set's network reaches 8080.
        assert_eq!(fate(&m, 8080, "198.51.100.9"), Fate::Admitted, "{tool}");
        let outside = fate(&m, 8080, "192.0.2.1");
        assert!(
            matches!(outside, Fate::Refused { .. }),
            "{tool}: {outside:?}"
        );
        let svc = fate(&m, 2222, "192.0.2.7");
        assert!(matches!(svc, Fate::Refused { .. }), "{tool}: {svc:?}");
        assert_eq!(fate(&m, 2223, "192.0.2.7"), Fate::Admitted, "{tool}");
        assert_eq!(fate(&m, 2222, "192.0.2.8"), Fate::Admitted, "{tool}");
        let hole = fate(&m, 8443, "203.0.113.1");
        assert!(
            matches!(&hole, Fate::Doubtful { what, .. } if what.contains("nomatch")),
            "{tool}: {hole:?}"
        );
    }

    // Without the members, each match stays undecided, as before the ipsets were read.
    let mut unread = snap.clone();
    unread.ipsets = None;
    let f = fate(&nft_model(&unread), 22, "192.0.2.1");
    assert!(matches!(f, Fate::Doubtful { .. }), "{f:?}");

    // A ban added later is a later reading.
    run(&["ipset", "add", "bans", "192.0.2.99"]);
    assert_eq!(fate(&nft_model(&snap), 22, "192.0.2.99"), Fate::Admitted);
    let again = read();
    assert!(is_ban(&fate(&nft_model(&again), 22, "192.0.2.99")));
    assert!(is_ban(&fate(&legacy_model(&again), 22, "192.0.2.99")));
}
