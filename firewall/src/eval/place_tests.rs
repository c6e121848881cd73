//! Placement, case by case, as the evaluator answers it: where an opening's rule goes in chains
//! shaped like real found firewalls (an operator's blocklist, catch-all rejects, Docker's jumps),
//! and whether the mesh's rules as they stand are where it would put them. These are the cases
//! the shape-reading placement (`place.rs`, gone) was held to, asked of the model instead.

use super::*;
use crate::opening::{From, Opening, Path as OPath, Proto};

fn legacy(table: &str, save: &str) -> Model {
    let mut m = Model::default();
    m.add_legacy(Fam::V4, table, save);
    m
}

fn filter(save: &str) -> Model {
    legacy("filter", save)
}

fn incoming(port: u16) -> Conn {
    let mut c = Conn::incoming(Fam::V4, 6, port, "eth0");
    c.iif_index = Some(2);
    c
}

/// A connection to `port` forwarded through the runtime's DNAT to 172.17.0.2:80 on docker0.
fn forwarded(port: u16) -> Conn {
    let mut c = incoming(port);
    c.path = Path::Forwarded;
    c.to_port = Some(80);
    c.daddr = Some("172.17.0.2".parse().unwrap());
    c.oif = Some("docker0".into());
    c.oif_index = Some(3);
    c
}

/// The same where nothing publishes the port yet: where the DNAT sends it is not known.
fn unpublished(port: u16) -> Conn {
    let mut c = incoming(port);
    c.path = Path::Forwarded;
    c.daddr = None;
    c
}

fn place(m: &Model, table: &str, chain: &str, c: &Conn) -> Placement {
    m.place(table, chain, c, &Addrs::all(Fam::V4))
        .expect("the base chain is in the model")
}

fn input(m: &Model, port: u16) -> Placement {
    place(m, "iptables-legacy filter", "INPUT", &incoming(port))
}

/// The chain and index a placement puts the rule at, if it puts one.
fn at(p: &Placement) -> Option<(&str, Option<usize>)> {
    match p {
        Placement::At { chain, index, .. } => Some((chain.as_str(), *index)),
        Placement::Doubtful { then, .. } => at(then),
        _ => None,
    }
}

#[test]
fn a_drop_policy_takes_the_rule_at_the_end_after_every_refusal() {
    let m = filter(
        "*filter
:INPUT DROP [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -i lo -j ACCEPT
-A INPUT -s 203.0.113.0/24 -j DROP
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
COMMIT
",
    );
    let p = input(&m, 9000);
    assert_eq!(at(&p), Some(("INPUT", None)), "{p:?}");
}

#[test]
fn a_ban_in_a_chain_with_policy_accept_gets_no_rule() {
    // An operator's blocklist at the head of an accepting chain.
    let m = filter("*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -s 203.0.113.0/24 -j DROP\nCOMMIT\n");
    let p = input(&m, 9000);
    assert!(matches!(p, Placement::NotNeeded(_)), "{p:?}");
}

#[test]
fn the_rule_goes_just_before_the_catch_all_refusal() {
    let m = filter(
        "*filter
:INPUT ACCEPT [0:0]
:f2b-sshd - [0:0]
-A INPUT -i lo -j ACCEPT
-A INPUT -p tcp -m multiport --dports 22 -j f2b-sshd
-A INPUT -m conntrack --ctstate INVALID -j DROP
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A INPUT -j REJECT --reject-with icmp-host-prohibited
-A INPUT -p tcp -m tcp --dport 80 -j ACCEPT
-A f2b-sshd -s 198.51.100.7/32 -j REJECT
-A f2b-sshd -j RETURN
COMMIT
",
    );
    let p = input(&m, 9000);
    assert_eq!(at(&p), Some(("INPUT", Some(4))), "{p:?}");
    // `ct state new drop` refuses every new connection: a catch-all too.
    let m = filter(
        "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m conntrack --ctstate NEW -j DROP\nCOMMIT\n",
    );
    assert_eq!(at(&input(&m, 9000)), Some(("INPUT", Some(0))));
    // A catch-all for another protocol is not one for tcp.
    let m = filter(
        "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p udp -j DROP\n-A INPUT -p tcp -j DROP\nCOMMIT\n",
    );
    assert_eq!(at(&input(&m, 9000)), Some(("INPUT", Some(1))));
}

#[test]
fn an_operator_refusing_the_port_itself_is_obeyed_and_said() {
    let m = filter(
        "*filter\n:INPUT DROP [0:0]\n-A INPUT -p tcp -m tcp --dport 9000 -j DROP\n-A INPUT -j DROP\nCOMMIT\n",
    );
    let p = input(&m, 9000);
    match &p {
        Placement::Refused(by) => {
            assert_eq!(by.text, "-A INPUT -p tcp -m tcp --dport 9000 -j DROP")
        }
        p => panic!("{p:?}"),
    }
    // Another port refused is no concern of this opening's.
    assert_eq!(at(&input(&m, 9001)), Some(("INPUT", Some(1))));
    // Refusing it from some sources only is a ban: the rule goes after it.
    let m = filter(
        "*filter\n:INPUT DROP [0:0]\n-A INPUT -s 192.0.2.0/24 -p tcp -m tcp --dport 9000 -j DROP\nCOMMIT\n",
    );
    assert_eq!(at(&input(&m, 9000)), Some(("INPUT", None)));
}

#[test]
fn an_accept_of_the_port_already_admits_it() {
    let m = filter(
        "*filter\n:INPUT DROP [0:0]\n-A INPUT -p tcp -m tcp --dport 9000 -j ACCEPT\nCOMMIT\n",
    );
    assert!(matches!(input(&m, 9000), Placement::NotNeeded(_)));
}

const DOCKER: &str = "*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:DOCKER - [0:0]
:DOCKER-ISOLATION-STAGE-1 - [0:0]
:DOCKER-ISOLATION-STAGE-2 - [0:0]
:DOCKER-USER - [0:0]
-A FORWARD -j DOCKER-USER
-A FORWARD -j DOCKER-ISOLATION-STAGE-1
-A FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -o docker0 -j DOCKER
-A DOCKER-ISOLATION-STAGE-1 -i docker0 ! -o docker0 -j DOCKER-ISOLATION-STAGE-2
-A DOCKER-ISOLATION-STAGE-1 -j RETURN
-A DOCKER-ISOLATION-STAGE-2 -o docker0 -j DROP
-A DOCKER-ISOLATION-STAGE-2 -j RETURN
";

#[test]
fn jumps_are_followed_to_their_catch_all() {
    // Docker's FORWARD: DOCKER-USER holds an operator's ban and catch-all drop.
    let m = filter(&format!(
        "{DOCKER}-A DOCKER-USER -s 198.51.100.0/24 -j DROP\n-A DOCKER-USER -j DROP\nCOMMIT\n"
    ));
    let p = place(&m, "iptables-legacy filter", "FORWARD", &forwarded(8082));
    assert_eq!(at(&p), Some(("DOCKER-USER", Some(1))), "{p:?}");
    // Without the operator's drop, the opening goes at FORWARD's end (policy drop).
    let m = filter(&format!("{DOCKER}-A DOCKER-USER -j RETURN\nCOMMIT\n"));
    let p = place(&m, "iptables-legacy filter", "FORWARD", &forwarded(8082));
    assert_eq!(at(&p), Some(("FORWARD", None)), "{p:?}");
}

#[test]
fn a_refusal_by_interface_refuses_what_arrives_there() {
    // Docker's documented way to keep the outside from containers.
    let m = filter(&format!(
        "{DOCKER}-A DOCKER-USER -i eth0 -j DROP\n-A DOCKER-USER -j RETURN\nCOMMIT\n"
    ));
    let p = place(&m, "iptables-legacy filter", "FORWARD", &forwarded(8082));
    assert_eq!(at(&p), Some(("DOCKER-USER", Some(0))), "{p:?}");
    // Arriving on another interface, the same rule is no concern of the opening's.
    let mut other = forwarded(8082);
    other.iif = "eth1".into();
    other.iif_index = Some(4);
    let p = place(&m, "iptables-legacy filter", "FORWARD", &other);
    assert_eq!(at(&p), Some(("FORWARD", None)), "{p:?}");
}

#[test]
fn after_dnat_a_port_match_is_the_containers() {
    let m = filter(
        "*filter\n:FORWARD DROP [0:0]\n-A FORWARD -p tcp -m tcp --dport 80 -j DROP\nCOMMIT\n",
    );
    // Published to port 80 behind: the operator refuses the container's port.
    let p = place(&m, "iptables-legacy filter", "FORWARD", &forwarded(8082));
    assert!(matches!(p, Placement::Refused(_)), "{p:?}");
    // Published to port 8080 behind: the refusal of 80 is no concern of it.
    let mut c = forwarded(8082);
    c.to_port = Some(8080);
    let p = place(&m, "iptables-legacy filter", "FORWARD", &c);
    assert_eq!(at(&p), Some(("FORWARD", None)), "{p:?}");
    // Nothing publishes it yet: the port it will be sent to is not known, so the test of it is
    // undecided and said; the rule goes ahead of the first refusal a translated connection
    // could meet (once published, the placement is asked again with the port known).
    let p = place(&m, "iptables-legacy filter", "FORWARD", &unpublished(8082));
    match &p {
        Placement::Doubtful { by, what, then } => {
            assert_eq!(by.text, "-A FORWARD -p tcp -m tcp --dport 80 -j DROP");
            assert_eq!(what, "the port the runtime's DNAT sends it to");
            assert!(matches!(**then, Placement::At { .. }), "{then:?}");
        }
        p => panic!("{p:?}"),
    }
    // Before DNAT (mangle's PREROUTING) the packet carries the published port.
    let m = legacy(
        "mangle",
        "*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p tcp -m tcp --dport 8082 -j DROP\nCOMMIT\n",
    );
    let p = place(
        &m,
        "iptables-legacy mangle",
        "PREROUTING",
        &unpublished(8082),
    );
    assert!(matches!(p, Placement::Refused(_)), "{p:?}");
}

#[test]
fn a_verdict_it_cannot_follow_makes_the_layer_doubtful() {
    let m =
        filter("*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -i eth0 -j NFQUEUE --queue-num 1\nCOMMIT\n");
    let p = input(&m, 9000);
    match &p {
        Placement::Doubtful { by, then, .. } => {
            assert!(by.text.contains("NFQUEUE"), "{by}");
            assert!(matches!(**then, Placement::NotNeeded(_)), "{then:?}");
        }
        p => panic!("{p:?}"),
    }
    // The operator's own refusal of the port ahead of it is still just that.
    let m = filter(
        "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 9000 -j DROP\n-A INPUT -i eth0 -j NFQUEUE --queue-num 1\nCOMMIT\n",
    );
    assert!(matches!(input(&m, 9000), Placement::Refused(_)));
}

/// The mesh's rule for `web/api` (incoming tcp 9000 from anywhere) as iptables-save prints it.
const MARKED: &str =
    "-p tcp -m tcp --dport 9000 -m comment --comment \"mesh-host:web/api#0011aabb\" -j ACCEPT";

fn api() -> Opening {
    Opening {
        id: "web/api".into(),
        port: 9000,
        proto: Proto::Tcp,
        from: From::Anywhere,
        path: OPath::Incoming,
    }
}

fn eth0() -> Vec<Iface> {
    vec![Iface {
        name: "eth0".into(),
        index: 2,
        addrs: vec![("192.0.2.10".parse().unwrap(), 24)],
        way_in: true,
    }]
}

fn stands(rules: &[&str], policy: &str) -> bool {
    let mut save = format!("*filter\n:INPUT {policy} [0:0]\n");
    for r in rules {
        save.push_str(&format!("-A INPUT {r}\n"));
    }
    save.push_str("COMMIT\n");
    filter(&save)
        .stands(
            "iptables-legacy filter",
            "INPUT",
            crate::netlink::Family::Ipv4,
            &api(),
            &eth0(),
            &[],
        )
        .expect("the base chain is in the model")
}

#[test]
fn marked_rules_are_left_out_when_placing_and_checked_for_where_they_stand() {
    let ban = "-s 203.0.113.0/24 -j DROP";
    let m = filter(&format!(
        "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT {MARKED}\n-A INPUT {ban}\n-A INPUT -j REJECT\nCOMMIT\n"
    ));
    assert_eq!(at(&input(&m, 9000)), Some(("INPUT", Some(2))));
    // Ahead of the ban: misplaced.
    assert!(!stands(&[MARKED, ban, "-j REJECT"], "ACCEPT"));
    // Behind the ban and ahead of the catch-all, an accept of loopback between: in place.
    assert!(stands(
        &[ban, MARKED, "-i lo -j ACCEPT", "-j REJECT"],
        "ACCEPT"
    ));
    // After the catch-all: never reached.
    assert!(!stands(&["-j REJECT", MARKED], "ACCEPT"));
    // At the end of a drop-policy chain, after every refusal.
    assert!(stands(&[ban, MARKED, MARKED], "DROP"));
    // Not there at all.
    assert!(!stands(&[ban], "DROP"));
}

#[test]
fn the_evaluator_reads_a_dnat_rule_for_its_protocol_and_port() {
    let spec = "! -i docker0 -p tcp -m tcp --dport 8085 -j DNAT --to-destination 172.17.0.2:80";
    assert!(saved_rule_is_for(spec, Fam::V4, 6, 8085));
    assert!(!saved_rule_is_for(spec, Fam::V4, 6, 8086));
    assert!(!saved_rule_is_for(spec, Fam::V4, 17, 8085));
    // A negated port or protocol is no match on it.
    let spec = "-p tcp -m tcp ! --dport 8085 -j DNAT --to-destination 172.17.0.2:80";
    assert!(!saved_rule_is_for(spec, Fam::V4, 6, 8085));
    let spec = "! -p tcp -m tcp --dport 8085 -j DNAT --to-destination 172.17.0.2:80";
    assert!(!saved_rule_is_for(spec, Fam::V4, 6, 8085));
}

#[test]
fn a_forwarded_rule_placed_while_nothing_publishes_its_port_stands_there() {
    let fwd = Opening {
        id: "web/fwd".into(),
        port: 8082,
        proto: Proto::Tcp,
        from: From::Anywhere,
        path: OPath::Forwarded,
    };
    let marked = format!(
        "-p tcp -m conntrack --ctstate DNAT --ctorigdstport 8082 -m comment --comment \"{}\" -j ACCEPT",
        crate::rules::mark(&fwd)
    );
    let stands = |rules: &[&str]| {
        let mut save = "*filter\n:FORWARD DROP [0:0]\n".to_string();
        for r in rules {
            save.push_str(&format!("-A FORWARD {r}\n"));
        }
        save.push_str("COMMIT\n");
        filter(&save)
            .stands(
                "iptables-legacy filter",
                "FORWARD",
                crate::netlink::Family::Ipv4,
                &fwd,
                &eth0(),
                &[],
            )
            .expect("the base chain is in the model")
    };
    let refusal = "-p tcp -m tcp --dport 80 -j DROP";
    // Ahead of a refusal of a port it may be sent to, or behind it: the doubt is said either
    // way, and the rule is not moved on every convergence.
    assert!(stands(&[&marked, refusal]));
    assert!(stands(&[refusal, &marked]));
    // Behind a catch-all it admits nothing.
    assert!(!stands(&["-j DROP", &marked]));
    // Ahead of a ban it would let the banned source in.
    assert!(!stands(&[&marked, "-s 203.0.113.0/24 -j DROP"]));
}

#[test]
fn detection_reads_whether_a_saved_rule_can_only_let_a_packet_on() {
    assert!(saved_rule_lets_on("-i lo -j ACCEPT", Fam::V4));
    assert!(saved_rule_lets_on("-p tcp --dport 22 -j RETURN", Fam::V4));
    // A refusal, a jump, a target that does not end the way, no verdict: it may lead to a drop.
    for spec in [
        "-s 203.0.113.0/24 -j DROP",
        "-j REJECT --reject-with icmp-port-unreachable",
        "-j f2b-sshd",
        "-j LOG --log-prefix \"in: \"",
        "-p tcp --dport 22",
    ] {
        assert!(!saved_rule_lets_on(spec, Fam::V4), "{spec}");
    }
}

#[test]
fn retiring_reads_whether_a_saved_rule_points_at_a_chain() {
    use super::saved_rule_goes_to;
    assert!(saved_rule_goes_to("-j svc", Fam::V4, "svc"));
    assert!(saved_rule_goes_to(
        "-p tcp -m tcp --dport 80 -g svc",
        Fam::V6,
        "svc"
    ));
    for spec in [
        "-j svc-other",
        "-m comment --comment \"-j svc\" -j ACCEPT",
        "-j LOG --log-prefix svc",
        "-p tcp --dport 22",
    ] {
        assert!(!saved_rule_goes_to(spec, Fam::V4, "svc"), "{spec}");
    }
}

/// Ports no rule but the mesh's is about walk alike when the mesh's rules are skipped
/// (`Model::unmarked_named_ports`), so placement and the standing of marked rules may share one
/// such walk across openings that differ only in their port: in every shape of chain below,
/// each unnamed port's own walks, placement and standing equal the ones shared from another
/// unnamed port's walks; and where a rule read for every port tests it, no port is unnamed.
#[test]
fn ports_no_rule_but_the_mesh_is_about_share_one_walk() {
    let head = "*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n\
        -A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n\
        -A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n-A INPUT -s 10.0.0.0/8 -j DROP\n";
    let mark = |port: u16| {
        format!(
            "-A INPUT -p tcp -m tcp --dport {port} -m comment --comment \"mesh-host:web/p{port}#0011aabb\" -j ACCEPT\n"
        )
    };
    let cases: [(&str, Option<Vec<u16>>); 5] = [
        ("", Some(vec![22])),
        (
            "-A INPUT -p tcp -m multiport --dports 80,443 -j ACCEPT\n",
            Some(vec![22, 80, 443]),
        ),
        ("-A INPUT -p tcp -m tcp --dport 1000:9000 -j DROP\n", None),
        ("-A INPUT -p tcp -m tcp ! --dport 22 -j REJECT\n", None),
        (
            "-A INPUT -p tcp -m conntrack --ctorigdstport 9000 -j DROP\n",
            None,
        ),
    ];
    let opening = |port: u16| Opening {
        id: format!("web/p{port}"),
        port,
        ..api()
    };
    let ifaces = eth0();
    let v4 = crate::netlink::Family::Ipv4;
    for (rule, want) in cases {
        // Marked rules for some ports, one of them after the catch-all ban (misplaced).
        let save = format!(
            "{head}{}{rule}{}-A INPUT -j REJECT\n{}COMMIT\n",
            mark(9000),
            mark(9001),
            mark(9002)
        );
        let m = filter(&save);
        let mut got: Option<Vec<u16>> = m.unmarked_named_ports().map(|n| n.into_iter().collect());
        if let Some(g) = got.as_mut() {
            g.sort_unstable();
        }
        assert_eq!(got, want, "{rule}");
        let table = "iptables-legacy filter";
        let shared = m
            .unmarked_walks(table, "INPUT", v4, &opening(9001), &ifaces, &[])
            .expect("the base chain is in the model");
        let first = m.place_opening(table, "INPUT", v4, &opening(9001), &ifaces, &[]);
        let mut standing = Vec::new();
        for port in [9000, 9002, 9003] {
            let o = opening(port);
            let own = m.unmarked_walks(table, "INPUT", v4, &o, &ifaces, &[]);
            let stands = m.stands(table, "INPUT", v4, &o, &ifaces, &[]);
            standing.push(stands);
            let against = m.stands_against(table, "INPUT", v4, &o, &ifaces, &[], &shared);
            let placed = m.place_opening(table, "INPUT", v4, &o, &ifaces, &[]);
            if want.is_some() {
                assert_eq!(own.as_ref(), Some(&shared), "{rule}: {port}");
                assert_eq!(against, stands, "{rule}: {port}");
                assert_eq!(placed, first, "{rule}: {port}");
            }
        }
        if want.is_some() {
            // The rule ahead of the catch-all stands, the one behind it does not, and the port
            // with no rule does not.
            assert_eq!(standing, [Some(true), Some(false), Some(false)], "{rule}");
        }
    }
}
