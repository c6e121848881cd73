//! The evaluator against rulesets read from iptables-save text, where every step is visible.

use super::*;

fn v4(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn legacy(save: &str) -> Model {
    let mut m = Model::default();
    m.add_legacy(Fam::V4, "filter", save);
    m
}

fn conn(port: u16) -> Conn {
    let mut c = Conn::incoming(Fam::V4, 6, port, "eth0");
    c.iif_index = Some(2);
    c
}

const STATEFUL: &str = "*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:TCP - [0:0]
:UDP - [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -i lo -j ACCEPT
-A INPUT -m conntrack --ctstate INVALID -j DROP
-A INPUT -s 10.200.1.2/32 -j DROP
-A INPUT -p udp -m conntrack --ctstate NEW -j UDP
-A INPUT -p tcp --tcp-flags FIN,SYN,RST,ACK SYN -m conntrack --ctstate NEW -j TCP
-A INPUT -p tcp -m multiport --dports 9000:9010 -j DROP
-A INPUT -p tcp -j REJECT --reject-with tcp-reset
-A INPUT -j REJECT --reject-with icmp-proto-unreachable
-A TCP -p tcp --dport 22 -j ACCEPT
COMMIT
";

#[test]
fn a_catch_all_reject_is_not_admitted_and_a_banned_source_is_refused() {
    let m = legacy(STATEFUL);
    let a = m.evaluate(&conn(8080), &Addrs::all(Fam::V4));
    let banned = a.fate_of(v4("10.200.1.2")).unwrap();
    assert!(
        matches!(
            banned,
            Fate::Refused {
                why: Refusal::Ban,
                ..
            }
        ),
        "{banned:?}"
    );
    let other = a.fate_of(v4("192.0.2.1")).unwrap();
    match other {
        Fate::NotAdmitted { by } => assert!(by.text.contains("tcp-reset"), "{by}"),
        f => panic!("{f:?}"),
    }
}

#[test]
fn ssh_is_admitted_through_the_jump_except_from_the_ban() {
    let m = legacy(STATEFUL);
    let a = m.evaluate(&conn(22), &Addrs::all(Fam::V4));
    assert_eq!(a.fate_of(v4("192.0.2.1")), Some(&Fate::Admitted));
    assert_eq!(a.summary(), &Fate::Admitted);
    assert_eq!(a.exceptions().count(), 1);
}

#[test]
fn a_port_in_a_refused_range_is_refused_by_the_operator() {
    let m = legacy(STATEFUL);
    let a = m.evaluate(&conn(9005), &Addrs::all(Fam::V4));
    assert!(
        matches!(
            a.fate_of(v4("192.0.2.1")),
            Some(Fate::Refused {
                why: Refusal::Port,
                ..
            })
        ),
        "{a:?}"
    );
    let p = m.place(
        "iptables-legacy filter",
        "INPUT",
        &conn(9005),
        &Addrs::all(Fam::V4),
    );
    assert!(matches!(p, Some(Placement::Refused(_))), "{p:?}");
}

#[test]
fn placement_goes_before_the_catch_all_and_behind_the_ban() {
    let m = legacy(STATEFUL);
    let p = m
        .place(
            "iptables-legacy filter",
            "INPUT",
            &conn(8080),
            &Addrs::all(Fam::V4),
        )
        .unwrap();
    match p {
        Placement::At { chain, index, .. } => {
            assert_eq!(chain, "INPUT");
            // The tcp-reset REJECT is the seventh INPUT rule, at index 7 of the listing.
            assert_eq!(index, Some(7));
        }
        p => panic!("{p:?}"),
    }
}

#[test]
fn a_negated_port_refusal_is_a_catch_all() {
    let m = legacy(
        "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp -m multiport ! --dports 22,8080 -j DROP\nCOMMIT\n",
    );
    let a = m.evaluate(&conn(9000), &Addrs::all(Fam::V4));
    assert!(matches!(a.summary(), Fate::NotAdmitted { .. }), "{a:?}");
    let a = m.evaluate(&conn(8080), &Addrs::all(Fam::V4));
    assert_eq!(a.summary(), &Fate::Admitted);
}

#[test]
fn an_undecidable_test_that_changes_nothing_is_no_doubt() {
    let m = legacy(
        "*filter\n:INPUT DROP [0:0]\n-A INPUT -m recent --name x --rcheck -j LOG\n-A INPUT -p tcp --dport 9000 -j ACCEPT\nCOMMIT\n",
    );
    assert_eq!(
        m.evaluate(&conn(9000), &Addrs::all(Fam::V4)).summary(),
        &Fate::Admitted
    );
    let m = legacy(
        "*filter\n:INPUT DROP [0:0]\n-A INPUT -m recent --name x --rcheck -j DROP\n-A INPUT -p tcp --dport 9000 -j ACCEPT\nCOMMIT\n",
    );
    let a = m.evaluate(&conn(9000), &Addrs::all(Fam::V4));
    match a.summary() {
        Fate::Doubtful { what, .. } => assert!(what.contains("recent"), "{what}"),
        f => panic!("{f:?}"),
    }
}

#[test]
fn a_mark_set_earlier_on_the_way_is_followed() {
    let mut m = Model::default();
    m.add_legacy(
        Fam::V4,
        "mangle",
        "*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p tcp --dport 9000 -j MARK --set-xmark 0x66/0xffffffff\nCOMMIT\n",
    );
    m.add_legacy(
        Fam::V4,
        "filter",
        "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m mark --mark 0x66 -j DROP\nCOMMIT\n",
    );
    // The mark was set because of the port: its drop is the operator refusing the port.
    assert!(matches!(
        m.evaluate(&conn(9000), &Addrs::all(Fam::V4)).summary(),
        Fate::Refused {
            why: Refusal::Port,
            ..
        }
    ));
    assert_eq!(
        m.evaluate(&conn(9001), &Addrs::all(Fam::V4)).summary(),
        &Fate::Admitted
    );
}

#[test]
fn a_blocklist_written_as_rules_refuses_each_source_and_no_other() {
    let mut save = String::from("*filter\n:INPUT DROP [0:0]\n");
    for i in 0..40 {
        save += &format!("-A INPUT -s 198.18.0.{}/32 -j DROP\n", i + 1);
    }
    save += "-A INPUT -s 10.9.0.0/16 -j DROP\n-A INPUT -p tcp --dport 9000 -j ACCEPT\nCOMMIT\n";
    let m = legacy(&save);
    let chain = &m.tables[0].chains["INPUT"];
    assert_eq!(chain.runs.len(), 1, "one run of 41 bans");
    let a = m.evaluate(&conn(9000), &Addrs::all(Fam::V4));
    for banned in ["198.18.0.1", "198.18.0.40", "10.9.200.3"] {
        assert!(
            matches!(
                a.fate_of(v4(banned)),
                Some(Fate::Refused {
                    why: Refusal::Ban,
                    ..
                })
            ),
            "{banned}"
        );
    }
    for open in ["198.18.0.41", "10.10.0.1", "192.0.2.1"] {
        assert_eq!(a.fate_of(v4(open)), Some(&Fate::Admitted), "{open}");
    }
    assert_eq!(a.summary(), &Fate::Admitted);
}

#[test]
fn a_doubt_does_not_hide_the_branch_that_is_refused_by_default() {
    // One branch of the undecidable test is admitted, the other dies at the catch-all: the
    // opening's rule goes before the catch-all (the doubt is said beside it), so both are.
    let m = legacy(
        "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp -m recent --name temp --rcheck -m tcp --dport 9000 -j ACCEPT\n-A INPUT -j DROP\nCOMMIT\n",
    );
    let a = m.evaluate(&conn(9000), &Addrs::all(Fam::V4));
    assert!(matches!(a.summary(), Fate::Doubtful { .. }), "{a:?}");
    let p = m
        .place(
            "iptables-legacy filter",
            "INPUT",
            &conn(9000),
            &Addrs::all(Fam::V4),
        )
        .unwrap();
    match p {
        Placement::Doubtful { then, .. } => match *then {
            Placement::At { chain, index, .. } => {
                assert_eq!((chain.as_str(), index), ("INPUT", Some(1)));
            }
            p => panic!("the refused branch has no place: {p:?}"),
        },
        p => panic!("{p:?}"),
    }
}

#[test]
fn explain_names_for_each_part_the_rule_that_decided_it() {
    // 8.8.8.8 is admitted by its own rule, everyone else by the port's: two parts, two traces.
    let m = legacy(
        "*filter\n:INPUT DROP [0:0]\n-A INPUT -s 8.8.8.8/32 -p tcp -j ACCEPT\n-A INPUT -p tcp --dport 9000 -j ACCEPT\nCOMMIT\n",
    );
    let a = m.explain(&conn(9000), &Addrs::all(Fam::V4));
    let admitted: Vec<&Outcome> = a
        .parts
        .iter()
        .filter(|o| o.fate == Fate::Admitted)
        .collect();
    assert_eq!(admitted.len(), 2, "{a:#?}");
    for o in admitted {
        let by_source = o.trace.iter().any(|t| t.contains("8.8.8.8"));
        assert_eq!(by_source, o.sources.contains(v4("8.8.8.8")), "{o:#?}");
    }
}
