//! The confirmation's pure parts: which address stands for a part, what of a listing loads
//! again, which routes are recreated, what agrees; and one confirmation end to end in scratch
//! namespaces of its own, against a real kernel.

use super::*;
use crate::eval::{Conn, Decider, Outcome};
use run::SystemRunner;

fn v4(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn cidr(s: &str) -> Addrs {
    let (a, l) = s.split_once('/').unwrap();
    let a: IpAddr = a.parse().unwrap();
    Addrs::cidr(Fam::of(a), to_num(a), l.parse().unwrap())
}

#[test]
fn a_part_is_stood_for_by_an_ordinary_address_inside_it() {
    let anywhere = Addrs::all(Fam::V4);
    // Not 0.0.0.0/8, and not a span's first address.
    assert_eq!(representative(&anywhere, &[]), Some(v4("1.0.0.1")));
    let ban = cidr("192.0.2.32/28");
    assert_eq!(representative(&ban, &[]), Some(v4("192.0.2.33")));
    // Taken addresses and the node's own are skipped.
    assert_eq!(
        representative(&ban, &[v4("192.0.2.33")]),
        Some(v4("192.0.2.34"))
    );
    let except = anywhere.minus(&cidr("0.0.0.0/1"));
    assert_eq!(representative(&except, &[]), Some(v4("128.0.0.1")));
    // Loopback and multicast alone stand for nothing a client sends from.
    assert_eq!(representative(&cidr("127.0.0.0/8"), &[]), None);
    // IPv6: global unicast first, a unique local network where that is all there is.
    assert_eq!(
        representative(&Addrs::all(Fam::V6), &[]),
        Some("2000::1".parse().unwrap())
    );
    assert_eq!(
        representative(&cidr("fd00:1::/64"), &[]),
        Some("fd00:1::1".parse().unwrap())
    );
    assert_eq!(
        representative(&cidr("2001:db8:1::40/128"), &[]),
        Some("2001:db8:1::40".parse().unwrap())
    );
}

#[test]
fn admitted_agrees_with_connected_and_doubt_is_settled() {
    let by = Decider {
        table: "inet filter".into(),
        chain: "input".into(),
        handle: Some(4),
        index: Some(2),
        text: "policy drop".into(),
    };
    let not = Fate::NotAdmitted { by: by.clone() };
    let doubt = Fate::Doubtful {
        by,
        what: "a socket".into(),
    };
    let refused = Kernel::Refused("answered with a reset".into());
    assert_eq!(
        agreement(&Fate::Admitted, &Kernel::Connected),
        Agreement::Agrees
    );
    assert_eq!(agreement(&not, &Kernel::TimedOut), Agreement::Agrees);
    assert_eq!(agreement(&not, &refused), Agreement::Agrees);
    assert_eq!(
        agreement(&Fate::Admitted, &Kernel::TimedOut),
        Agreement::Disagrees
    );
    assert_eq!(agreement(&not, &Kernel::Connected), Agreement::Disagrees);
    assert_eq!(agreement(&doubt, &Kernel::Connected), Agreement::Settled);
    assert_eq!(
        agreement(&Fate::Admitted, &Kernel::Unprobed("x".into())),
        Agreement::Unprobed
    );
}

#[test]
fn the_iptables_nft_tables_and_the_owner_flag_are_left_to_their_own_loaders() {
    let listing = "table ip filter {\n\tchain INPUT {\n\t\txt match recent counter drop\n\t}\n}\n\
                   table inet mesh_host {\n\tflags owner,persist\n\tchain input {\n\t}\n}\n\
                   table inet keep {\n\tflags dormant\n\tset s {\n\t\tflags interval\n\t}\n}\n";
    let got = loadable_nft(listing, &["ip filter".to_string()]);
    assert_eq!(
        got,
        "table inet mesh_host {\n\tchain input {\n\t}\n}\n\
         table inet keep {\n\tflags dormant\n\tset s {\n\t\tflags interval\n\t}\n}\n"
    );
    // A native table iptables-nft-save prints empty is nft's to load.
    let save = "# Table `nat' contains incompatible base-chains, use 'nft' tool to list them.\n\
                *nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n*filter\n:INPUT DROP [0:0]\nCOMMIT\n";
    assert_eq!(saved_tables(&managed_only(save)), ["filter"]);
    assert_eq!(
        saved_tables("# Generated\n*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n*nat\nCOMMIT\n"),
        ["filter", "nat"]
    );
}

#[test]
fn routes_through_the_scratch_nodes_interfaces_are_recreated_less_the_kernels() {
    let text = "default via 192.0.2.1 dev eth0 \n\
                192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2 \n\
                10.9.0.0/16 via 10.0.0.1 dev mesh0 metric 20 \n\
                172.17.0.0/16 dev docker0 proto kernel scope link src 172.17.0.1 linkdown \n\
                blackhole 10.99.0.0/16 \n\
                198.51.100.0/24 dev gone0 scope link \n";
    let got = route_args(text, &["eth0".to_string(), "mesh0".to_string()]);
    let want: Vec<Vec<String>> = [
        "route replace default via 192.0.2.1 dev eth0 onlink",
        "route replace 10.9.0.0/16 via 10.0.0.1 dev mesh0 metric 20 onlink",
    ]
    .iter()
    .map(|l| l.split(' ').map(String::from).collect())
    .collect();
    assert_eq!(got, want);
}

fn iface(name: &str, index: u32, addrs: &[(&str, u8)]) -> Iface {
    Iface {
        name: name.into(),
        index,
        addrs: addrs
            .iter()
            .map(|(a, l)| (a.parse().unwrap(), *l))
            .collect(),
        way_in: name != "lo",
    }
}

fn way(iif: &str, fam: Fam, port: u16) -> Way {
    let mut conn = Conn::incoming(fam, 6, port, iif);
    conn.daddr = None;
    Way {
        conn,
        sources: Addrs::all(fam),
    }
}

fn part(sources: Addrs, fate: Fate) -> Outcome {
    Outcome {
        sources,
        fate,
        trace: Vec::new(),
        limits: Vec::new(),
    }
}

fn probe(kernel: Kernel) -> Probe {
    Probe {
        source: None,
        to: None,
        behind: None,
        kernel,
    }
}

#[test]
fn the_tally_counts_each_part_and_the_kernels_verdict_stands_where_it_was_asked() {
    let by = Decider {
        table: "inet filter".into(),
        chain: "input".into(),
        handle: Some(9),
        index: Some(3),
        text: "ip saddr 192.0.2.0/24 drop".into(),
    };
    let ban = Fate::Refused {
        by: by.clone(),
        why: crate::eval::Refusal::Ban,
    };
    let doubt = Fate::Doubtful {
        by,
        what: "a socket".into(),
    };
    let ways = vec![
        (
            way("eth0", Fam::V4, 9000),
            Answer {
                parts: vec![
                    part(cidr("192.0.2.0/24"), ban.clone()),
                    part(cidr("0.0.0.0/1"), Fate::Admitted),
                ],
            },
        ),
        (
            way("eth0", Fam::V6, 9000),
            Answer {
                parts: vec![part(Addrs::all(Fam::V6), doubt.clone())],
            },
        ),
    ];
    let probes = vec![
        vec![probe(Kernel::TimedOut), probe(Kernel::Connected)],
        vec![probe(Kernel::TimedOut)],
    ];
    let t = Tally::of(&ways, &probes);
    assert_eq!(
        (t.agreeing, t.disagreeing, t.settled, t.unprobed),
        (2, 0, 1, 0)
    );
    // The ban's part is refused by the kernel too, and the doubt settled against: not every
    // part is admitted.
    assert!(!t.kernel_admits);
    assert_eq!(standing(&ban, &Kernel::TimedOut), "refused");
    assert_eq!(standing(&doubt, &Kernel::TimedOut), "not-admitted");
    assert_eq!(standing(&doubt, &Kernel::Connected), "admitted");
    assert_eq!(standing(&doubt, &Kernel::Unprobed("x".into())), "doubtful");
    // Unprobed, the evaluator's fate counts for whether every part is admitted.
    let admitted = vec![(
        way("eth0", Fam::V4, 22),
        Answer {
            parts: vec![part(Addrs::all(Fam::V4), Fate::Admitted)],
        },
    )];
    let t = Tally::of(&admitted, &[vec![probe(Kernel::Unprobed("x".into()))]]);
    assert_eq!((t.unprobed, t.kernel_admits), (1, true));
    let t = Tally::of(&admitted, &[vec![probe(Kernel::TimedOut)]]);
    assert_eq!((t.disagreeing, t.kernel_admits), (1, false));
    // No way at all admits nothing.
    assert!(!Tally::of(&[], &[]).kernel_admits);
}

#[test]
fn each_part_gets_its_own_source_and_a_way_with_nothing_to_send_to_says_so() {
    let ifaces = [
        iface("lo", 1, &[("127.0.0.1", 8)]),
        iface("eth0", 2, &[("1.0.0.1", 24), ("fe80::1", 64)]),
    ];
    let ban = cidr("192.0.2.32/28");
    let ways = vec![
        (
            way("eth0", Fam::V4, 9000),
            Answer {
                parts: vec![
                    part(Addrs::all(Fam::V4).minus(&ban), Fate::Admitted),
                    part(ban.clone(), Fate::Admitted),
                ],
            },
        ),
        (
            way("eth0", Fam::V6, 9000),
            Answer {
                parts: vec![part(Addrs::all(Fam::V6), Fate::Admitted)],
            },
        ),
    ];
    let p = plan(&ways, &ifaces);
    let first = p[0][0].as_ref().unwrap();
    // The node's own address is not taken as a source.
    assert_eq!(first.src, v4("1.0.0.2"));
    assert_eq!(
        representative(&Addrs::all(Fam::V4), &[v4("1.0.0.1")]),
        Some(v4("1.0.0.2"))
    );
    assert_eq!(first.dst, "1.0.0.1:9000".parse().unwrap());
    assert_eq!(p[0][1].as_ref().unwrap().src, v4("192.0.2.33"));
    // A one-address ban asked on two interfaces: the same source, routed back through each in
    // a round of its own.
    let one = cidr("192.0.2.40/32");
    let twice = vec![
        (
            way("eth0", Fam::V4, 22),
            Answer {
                parts: vec![part(one.clone(), Fate::Admitted)],
            },
        ),
        (
            way("mesh0", Fam::V4, 22),
            Answer {
                parts: vec![part(one, Fate::Admitted)],
            },
        ),
    ];
    let both = [ifaces[1].clone(), iface("mesh0", 3, &[("10.0.0.1", 24)])];
    let p2 = plan(&twice, &both);
    let got: Vec<(IpAddr, usize)> = p2
        .iter()
        .map(|r| r[0].as_ref().map(|s| (s.src, s.round)).unwrap())
        .collect();
    assert_eq!(got, [(v4("192.0.2.40"), 0), (v4("192.0.2.40"), 1)]);
    // Only a link-local IPv6 address: nothing to send to.
    assert_eq!(
        p[1][0].as_ref().unwrap_err().to_string(),
        "eth0 has no ipv6 address to send to"
    );
}

/// Docker's own hairpin rule gives the container's address a part of its own on a forwarded
/// way. Sent from that address, the probe's way back (routed through the interface it arrives
/// on) would also take every forwarded probe of its round to the client instead of the
/// container: the corpus's Docker 20.10 ruleset, where the kernel seemed to time out what the
/// node admits. The host behind's address is never a source; a part holding nothing else says
/// so.
#[test]
fn a_host_behinds_own_address_is_never_a_source() {
    let ifaces = [
        iface("lo", 1, &[("127.0.0.1", 8)]),
        iface("eth0", 2, &[("192.0.2.10", 24)]),
        iface("docker0", 3, &[("172.17.0.1", 16)]),
    ];
    let mut w = way("eth0", Fam::V4, 8082);
    w.conn.path = Path::Forwarded;
    w.conn.daddr = Some(v4("172.17.0.2"));
    w.conn.to_port = Some(80);
    w.conn.oif = Some("docker0".into());
    let container = cidr("172.17.0.2/32");
    let near = cidr("172.17.0.0/30");
    let ways = vec![(
        w,
        Answer {
            parts: vec![
                part(container, Fate::Admitted),
                part(near.minus(&cidr("172.17.0.2/32")), Fate::Admitted),
                part(Addrs::all(Fam::V4).minus(&near), Fate::Admitted),
            ],
        },
    )];
    let p = plan(&ways, &ifaces);
    assert_eq!(
        p[0][0].as_ref().unwrap_err().to_string(),
        "no unicast address in 172.17.0.2/32 to send from but this machine's or a host \
         behind's own"
    );
    // 172.17.0.1 is the node's and 172.17.0.2 the container's: the first span's start is left.
    let second = p[0][1].as_ref().unwrap();
    assert_eq!(second.src, v4("172.17.0.0"));
    assert_eq!(
        second.behind.as_ref().map(|b| b.target),
        Some("172.17.0.2:80".parse().unwrap())
    );
    assert_eq!(p[0][2].as_ref().unwrap().src, v4("1.0.0.1"));
}

/// A real confirmation in namespaces this test makes: a node namespace standing for the node
/// (its eth0 and an input chain that drops all but 22 and refuses a ban with a reset), read by
/// `capture` from inside it; the probes' results are the kernel's.
#[test]
fn the_kernel_answers_each_part_in_scratch_namespaces_removed_after() {
    let node = format!("mesh-confirm-unit-{}", std::process::id());
    let run = |a: &[&str]| crate::child::run_ok(&SystemRunner, a[0], &args(&a[1..]), None).unwrap();
    run(&["ip", "netns", "add", &node]);
    struct Gone(String);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = crate::child::run(
                &SystemRunner,
                "ip",
                &args(&["netns", "delete", &self.0]),
                None,
            );
        }
    }
    let _gone = Gone(node.clone());
    run(&[
        "ip", "-n", &node, "link", "add", "eth0", "type", "veth", "peer", "name", "x0",
    ]);
    run(&[
        "ip",
        "-n",
        &node,
        "addr",
        "add",
        "198.18.0.2/24",
        "dev",
        "eth0",
    ]);
    run(&["ip", "-n", &node, "link", "set", "eth0", "up"]);
    let ruleset = "table inet filter {\n\tchain input {\n\t\ttype filter hook input priority 0; policy drop;\n\
                   \t\tip saddr 192.0.2.32/28 tcp dport 22 reject with tcp reset\n\
                   \t\ttcp dport 22 accept\n\t}\n}\n";
    crate::child::run_ok(
        &SystemRunner,
        "nsenter",
        &args(&[
            &format!("--net={NETNS_DIR}/{node}"),
            "nft",
            "-f",
            "/dev/stdin",
        ]),
        Some(ruleset),
    )
    .unwrap();
    // What the node holds, read from inside it, as the command reads its own namespace.
    let node2 = node.clone();
    let (listing, ifaces) = sock::in_netns(&node2, || {
        Ok((capture(&SystemRunner).unwrap(), crate::eval::interfaces()))
    })
    .unwrap();
    assert!(listing.nft.contains("tcp dport 22 accept"), "{listing:?}");
    let ban = cidr("192.0.2.32/28");
    let by = Decider {
        table: "inet filter".into(),
        chain: "input".into(),
        handle: None,
        index: None,
        text: "policy drop".into(),
    };
    let mut w22 = way("eth0", Fam::V4, 22);
    w22.conn.daddr = Some(v4("198.18.0.2"));
    let mut w9000 = w22.clone();
    w9000.conn.port = 9000;
    let ways = vec![
        (
            w22,
            Answer {
                parts: vec![
                    part(Addrs::all(Fam::V4).minus(&ban), Fate::Admitted),
                    // Said admitted on purpose: the kernel resets it, a disagreement.
                    part(ban, Fate::Admitted),
                ],
            },
        ),
        (
            w9000,
            Answer {
                parts: vec![part(Addrs::all(Fam::V4), Fate::NotAdmitted { by })],
            },
        ),
    ];
    // What a confirmation killed half way left (a PID that cannot be running) is removed by
    // the next.
    let stale = format!("mesh-confirm-{}-0-0-node", u32::MAX - 1);
    run(&["ip", "netns", "add", &stale]);
    let c = confirm(&SystemRunner, &listing, &ifaces, &ways, BUDGET).unwrap();
    assert!(
        !std::path::Path::new(NETNS_DIR).join(&stale).exists()
            && c.notes.iter().any(|n| n.contains(&stale)),
        "{:?}",
        c.notes
    );
    let got: Vec<Vec<&str>> = c
        .probes
        .iter()
        .map(|r| r.iter().map(|p| p.kernel.word()).collect())
        .collect();
    assert_eq!(got, [vec!["connected", "refused"], vec!["timed-out"]]);
    assert_eq!(c.probes[0][1].source, Some(v4("192.0.2.33")));
    assert!(c.namespaces.len() >= 2, "{:?}", c.namespaces);
    for ns in &c.namespaces {
        assert!(
            !std::path::Path::new(NETNS_DIR).join(ns).exists(),
            "{ns} was left behind"
        );
    }
}

/// `capture` reads every loader's save through the exec seam, as argv arrays: the nft listing
/// less the iptables-nft table, that table from iptables-nft-save, the legacy saves that hold
/// tables, and the routes; ipset is asked only where it exists (here it does not).
#[test]
fn the_ruleset_is_captured_through_the_exec_seam() {
    use run::RecordingRunner;
    let ok = crate::child::answer;
    let exec = RecordingRunner {
        programs: [
            "nft",
            "iptables-nft-save",
            "ip6tables-nft-save",
            "iptables-legacy-save",
            "ip6tables-legacy-save",
        ]
        .iter()
        .map(|p| p.to_string())
        .collect(),
        answers: std::cell::RefCell::new(
            [
                ok("table ip filter {\n\tchain INPUT {\n\t}\n}\ntable inet f {\n}\n"),
                ok("*filter\n:INPUT DROP [0:0]\nCOMMIT\n"),
                ok("# nothing\n"),
                ok("*raw\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n"),
                ok(""),
                ok("default via 192.0.2.1 dev eth0\n"),
                ok("default via fd00::1 dev eth0 metric 1024\n"),
            ]
            .into_iter()
            .collect(),
        ),
        ..RecordingRunner::succeeding()
    };
    let l = capture(&exec).unwrap();
    assert_eq!(l.nft, "table inet f {\n}\n");
    assert_eq!(
        l.xt_nft,
        [(Fam::V4, "*filter\n:INPUT DROP [0:0]\nCOMMIT\n".into())]
    );
    assert_eq!(l.legacy.len(), 1);
    assert_eq!(l.ipset, None);
    assert_eq!(l.routes.len(), 2);
    let calls: Vec<Vec<String>> = exec.calls.borrow().clone();
    let want: Vec<Vec<String>> = [
        "nft list ruleset",
        "iptables-nft-save",
        "ip6tables-nft-save",
        "iptables-legacy-save",
        "ip6tables-legacy-save",
        "ip -4 -o route show",
        "ip -6 -o route show",
    ]
    .iter()
    .map(|l| l.split(' ').map(String::from).collect())
    .collect();
    assert_eq!(calls, want);
}

/// A connection routed on as sent (no DNAT) is addressed to the host behind, not to the node
/// (which would answer it as incoming); a published port's goes to the node. No source is the
/// host behind's address, even where a part's sources hold it.
#[test]
fn a_routed_way_is_sent_to_the_host_behind_and_no_source_is_that_host() {
    let ifaces = [
        iface("eth0", 2, &[("192.0.2.10", 24)]),
        iface("lan0", 3, &[("198.51.100.1", 24)]),
    ];
    let mut routed = way("eth0", Fam::V4, 22);
    routed.conn.path = Path::Forwarded;
    routed.conn.oif = Some("lan0".into());
    routed.conn.daddr = Some(v4("198.51.100.2"));
    routed.conn.routed = true;
    let mut published = routed.clone();
    published.conn.routed = false;
    published.conn.to_port = Some(80);
    let lan = cidr("198.51.100.0/24");
    let ways: Vec<(Way, Answer)> = [routed, published]
        .into_iter()
        .map(|w| {
            (
                w,
                Answer {
                    parts: vec![part(lan.clone(), Fate::Admitted)],
                },
            )
        })
        .collect();
    let p = plan(&ways, &ifaces);
    let (r, d) = (p[0][0].as_ref().unwrap(), p[1][0].as_ref().unwrap());
    assert_eq!(r.dst, "198.51.100.2:22".parse().unwrap());
    assert_eq!(d.dst, "192.0.2.10:22".parse().unwrap());
    assert_eq!(
        d.behind.as_ref().map(|b| b.target),
        Some("198.51.100.2:80".parse().unwrap())
    );
    for s in [r, d] {
        assert!(
            s.src != v4("198.51.100.2") && s.src != v4("198.51.100.1"),
            "{s:?}"
        );
    }
}
