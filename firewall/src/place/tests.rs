//! Placement, case by case: where an opening's rule goes in chains shaped like real found
//! firewalls (fail2ban's, an operator's blocklist, catch-all rejects, Docker's jumps).

use super::*;

const TCP: u8 = 6;

fn incoming(port: u16) -> Want {
    Want {
        proto: TCP,
        port,
        forwarded: false,
        before_dnat: false,
    }
}

fn forwarded(port: u16) -> Want {
    Want {
        proto: TCP,
        port,
        forwarded: true,
        before_dnat: false,
    }
}

/// A table from iptables-save-like specs: `(chain, [spec, …])`.
fn table(chains: &[(&str, &[&str])]) -> BTreeMap<String, Vec<Seen>> {
    let names: Vec<String> = chains.iter().map(|(c, _)| c.to_string()).collect();
    chains
        .iter()
        .map(|(c, specs)| {
            let seen = specs
                .iter()
                .map(|s| seen_xt(s, &names, crate::rules::spec_mark(s)))
                .collect();
            (c.to_string(), seen)
        })
        .collect()
}

fn at(chain: &str, before: Option<usize>) -> Place {
    Place::At {
        chain: chain.into(),
        before,
    }
}

#[test]
fn a_drop_policy_takes_the_rule_at_the_end_after_every_refusal() {
    let t = table(&[(
        "INPUT",
        &[
            "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
            "-i lo -j ACCEPT",
            "-s 203.0.113.0/24 -j DROP",
            "-p tcp -m tcp --dport 22 -j ACCEPT",
        ],
    )]);
    assert_eq!(place(&t, "INPUT", true, &incoming(9000)), at("INPUT", None));
}

#[test]
fn a_ban_in_a_chain_with_policy_accept_gets_no_rule() {
    // fail2ban's own chain: a set of banned sources rejected, then nothing.
    let t = table(&[(
        "f2b",
        &["-p tcp -m set --match-set f2b-sshd src -j REJECT --reject-with icmp-port-unreachable"],
    )]);
    assert!(matches!(
        place(&t, "f2b", false, &incoming(9000)),
        Place::NotNeeded(_)
    ));
    // An operator's blocklist at priority -300, likewise.
    let t = table(&[("pre", &["-s 203.0.113.0/24 -j DROP"])]);
    assert!(matches!(
        place(&t, "pre", false, &incoming(9000)),
        Place::NotNeeded(_)
    ));
}

#[test]
fn the_rule_goes_just_before_the_catch_all_refusal() {
    let t = table(&[(
        "INPUT",
        &[
            "-i lo -j ACCEPT",
            "-p tcp -m multiport --dports 22 -j f2b-sshd",
            "-m conntrack --ctstate INVALID -j DROP",
            "-p tcp -m tcp --dport 22 -j ACCEPT",
            "-j REJECT --reject-with icmp-host-prohibited",
            "-p tcp -m tcp --dport 80 -j ACCEPT",
        ],
    )]);
    assert_eq!(
        place(&t, "INPUT", false, &incoming(9000)),
        at("INPUT", Some(4))
    );
    // `ct state new drop` refuses every new connection: a catch-all too.
    let t = table(&[("c", &["-m conntrack --ctstate NEW -j DROP"])]);
    assert_eq!(place(&t, "c", false, &incoming(9000)), at("c", Some(0)));
    // A catch-all for another protocol is not one for tcp.
    let t = table(&[("c", &["-p udp -j DROP", "-p tcp -j DROP"])]);
    assert_eq!(place(&t, "c", false, &incoming(9000)), at("c", Some(1)));
}

#[test]
fn an_operator_refusing_the_port_itself_is_obeyed_and_said() {
    let t = table(&[("c", &["-p tcp -m tcp --dport 9000 -j DROP", "-j DROP"])]);
    assert_eq!(
        place(&t, "c", true, &incoming(9000)),
        Place::Refused {
            chain: "c".into(),
            rule: "-p tcp -m tcp --dport 9000 -j DROP".into()
        }
    );
    // Another port refused is no concern of this opening's.
    assert_eq!(place(&t, "c", true, &incoming(9001)), at("c", Some(1)));
    // Refusing it from some sources only is a particular refusal: the rule goes after it.
    let t = table(&[("c", &["-s 192.0.2.0/24 -p tcp -m tcp --dport 9000 -j DROP"])]);
    assert_eq!(place(&t, "c", true, &incoming(9000)), at("c", None));
}

#[test]
fn an_accept_of_the_port_already_admits_it() {
    let t = table(&[("c", &["-p tcp -m tcp --dport 9000 -j ACCEPT"])]);
    assert!(matches!(
        place(&t, "c", true, &incoming(9000)),
        Place::NotNeeded(_)
    ));
}

#[test]
fn unconditional_jumps_are_followed_to_their_catch_all() {
    // Docker's FORWARD: DOCKER-USER holds an operator's catch-all drop.
    let t = table(&[
        (
            "FORWARD",
            &[
                "-j DOCKER-USER",
                "-j DOCKER-ISOLATION-STAGE-1",
                "-o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
                "-o docker0 -j DOCKER",
            ],
        ),
        ("DOCKER-USER", &["-s 198.51.100.0/24 -j DROP", "-j DROP"]),
        (
            "DOCKER-ISOLATION-STAGE-1",
            &[
                "-i docker0 ! -o docker0 -j DOCKER-ISOLATION-STAGE-2",
                "-j RETURN",
            ],
        ),
        (
            "DOCKER-ISOLATION-STAGE-2",
            &["-o docker0 -j DROP", "-j RETURN"],
        ),
        ("DOCKER", &[]),
    ]);
    assert_eq!(
        place(&t, "FORWARD", true, &forwarded(8082)),
        at("DOCKER-USER", Some(1))
    );
    // Without the operator's drop, the opening goes at FORWARD's end (policy drop).
    let mut t = t;
    t.insert("DOCKER-USER".into(), vec![seen_xt("-j RETURN", &[], None)]);
    assert_eq!(
        place(&t, "FORWARD", true, &forwarded(8082)),
        at("FORWARD", None)
    );
}

#[test]
fn after_dnat_a_port_match_is_the_containers_and_so_particular() {
    let t = table(&[("FORWARD", &["-p tcp -m tcp --dport 80 -j DROP"])]);
    assert_eq!(
        place(&t, "FORWARD", true, &forwarded(8082)),
        at("FORWARD", None)
    );
    // Before DNAT (ingress, early prerouting) the packet carries the published port.
    let early = Want {
        before_dnat: true,
        ..forwarded(8082)
    };
    let t = table(&[("pre", &["-p tcp -m tcp --dport 8082 -j DROP"])]);
    assert!(matches!(
        place(&t, "pre", false, &early),
        Place::Refused { .. }
    ));
}

#[test]
fn marked_rules_are_ignored_when_placing_and_checked_for_their_place() {
    let mark =
        "-p tcp -m tcp --dport 9000 -m comment --comment \"mesh-host:web/api#0011aabb\" -j ACCEPT";
    let t = table(&[("c", &[mark, "-s 203.0.113.0/24 -j DROP", "-j REJECT"])]);
    let w = incoming(9000);
    assert_eq!(place(&t, "c", false, &w), at("c", Some(2)));
    let rules = &t["c"];
    assert!(rules[0].mark.is_some());
    // Ahead of the ban: misplaced.
    assert!(!well_placed(&t, "c", 0, Some(2), &w));
    let t = table(&[(
        "c",
        &[
            "-s 203.0.113.0/24 -j DROP",
            mark,
            "-i lo -j ACCEPT",
            "-j REJECT",
        ],
    )]);
    assert!(well_placed(&t, "c", 1, Some(3), &w));
    // After the catch-all: never reached.
    let t = table(&[("c", &["-j REJECT", mark])]);
    assert!(!well_placed(&t, "c", 1, Some(0), &w));
    // At the end of a drop-policy chain, after every refusal.
    let t = table(&[("c", &["-s 203.0.113.0/24 -j DROP", mark, mark])]);
    assert!(well_placed(&t, "c", 1, None, &w) && well_placed(&t, "c", 2, None, &w));
}

#[test]
fn nft_rules_are_read_from_their_expressions() {
    use crate::netlink::{L4Proto, RuleBody};
    let seen = |b: RuleBody| seen_nft(&b.exprs, None, "rule".into());
    let r = seen(RuleBody::new().tcp_dport(9000).drop());
    assert_eq!(
        (r.does.clone(), r.proto, r.dports.clone(), r.narrow),
        (Does::Refuse, Some(6), Some(vec![9000]), false)
    );
    assert_eq!(fit(&r, &incoming(9000)), Fit::Port);
    let r = seen(
        RuleBody::new()
            .ip_saddr("203.0.113.0".parse().unwrap(), 24)
            .drop(),
    );
    assert_eq!(fit(&r, &incoming(9000)), Fit::Some);
    let r = seen(
        RuleBody::new()
            .ct_state(CtState::ESTABLISHED | CtState::RELATED)
            .accept(),
    );
    assert_eq!(fit(&r, &incoming(9000)), Fit::No);
    let r = seen(RuleBody::new().ct_state(CtState::NEW).drop());
    assert_eq!(fit(&r, &incoming(9000)), Fit::All);
    let r = seen(RuleBody::new().counter().drop());
    assert_eq!(fit(&r, &incoming(9000)), Fit::All);
    // Refusing an interface refuses everything arriving there; accepting one is particular.
    let r = seen(RuleBody::new().iifname_eq("eth1").drop());
    assert_eq!(fit(&r, &incoming(9000)), Fit::All);
    let r = seen(RuleBody::new().iifname_eq("eth1").accept());
    assert_eq!(fit(&r, &incoming(9000)), Fit::Some);
    let r = seen(
        RuleBody::new()
            .l4proto(L4Proto::Tcp)
            .ct_status_dnat()
            .ct_original_proto_dst_only(8082)
            .accept(),
    );
    assert_eq!(fit(&r, &forwarded(8082)), Fit::Port);
    assert_eq!(fit(&r, &incoming(8082)), Fit::No);
    // A set lookup narrows; a verdict map may drop.
    let r = seen(
        RuleBody::new()
            .expr(Expr::Lookup {
                set: "blocklist".into(),
                sreg: 1,
                dreg: None,
                set_id: None,
                flags: 0,
            })
            .drop(),
    );
    assert_eq!(
        (fit(&r, &incoming(1)), r.does.clone()),
        (Fit::Some, Does::Refuse)
    );
    // Something this crate does not know narrows, so it is never a catch-all.
    let r = seen(
        RuleBody::new()
            .expr(Expr::Raw {
                name: "socket".into(),
                data: vec![],
            })
            .drop(),
    );
    assert_eq!(fit(&r, &incoming(1)), Fit::Some);
    let r = seen(RuleBody::new().expr(Expr::Raw {
        name: "reject".into(),
        data: vec![],
    }));
    assert_eq!(
        (r.does.clone(), fit(&r, &incoming(1))),
        (Does::Refuse, Fit::All)
    );
}

#[test]
fn a_refusal_by_interface_is_a_catch_all_for_what_arrives_there() {
    // Docker's documented way to keep the outside from containers.
    let t = table(&[("DOCKER-USER", &["-i eth0 -j DROP", "-j RETURN"])]);
    assert_eq!(
        place(&t, "DOCKER-USER", false, &forwarded(8082)),
        at("DOCKER-USER", Some(0))
    );
    // An accept or a jump by interface is particular: a jump taken only from docker0 is not
    // where an opening from outside goes.
    let t = table(&[
        (
            "FORWARD",
            &["-i docker0 ! -o docker0 -j STAGE2", "-i lo -j ACCEPT"],
        ),
        ("STAGE2", &["-o docker0 -j DROP"]),
    ]);
    assert_eq!(
        place(&t, "FORWARD", true, &forwarded(8082)),
        at("FORWARD", None)
    );
}

#[test]
fn a_verdict_it_cannot_follow_makes_the_layer_doubtful() {
    use crate::netlink::RuleBody;
    let vmap = RuleBody::new().iifname_eq("eth0").expr(Expr::Lookup {
        set: "__map0".into(),
        sreg: 1,
        dreg: Some(NFT_REG_VERDICT),
        set_id: None,
        flags: 0,
    });
    let mut t: BTreeMap<String, Vec<Seen>> = BTreeMap::new();
    t.insert(
        "input".into(),
        vec![seen_nft(&vmap.exprs, None, "handle 3".into())],
    );
    let p = place(&t, "input", false, &incoming(9000));
    assert!(
        matches!(&p, Place::Doubtful { rule, then } if rule.contains("handle 3") && matches!(**then, Place::NotNeeded(_))),
        "{p:?}"
    );
    // The operator's own refusal of the port is still just that.
    t.get_mut("input").unwrap().push(seen_nft(
        &RuleBody::new().tcp_dport(9000).drop().exprs,
        None,
        "handle 4".into(),
    ));
    assert!(matches!(
        place(&t, "input", false, &incoming(9000)),
        Place::Refused { .. }
    ));
}

#[test]
fn a_family_or_ethertype_accept_admits_no_opening() {
    use crate::netlink::{Family, RuleBody};
    // `meta protocol arp accept` at the head of a netdev chain, and `meta nfproto ipv6 accept`.
    let arp = RuleBody::new()
        .expr(Expr::Meta {
            key: MetaKey::Protocol,
            dreg: 1,
        })
        .expr(Expr::Cmp {
            sreg: 1,
            op: CmpOp::Eq,
            data: 0x0806u16.to_be_bytes().to_vec(),
        });
    let mut t: BTreeMap<String, Vec<Seen>> = BTreeMap::new();
    t.insert(
        "in".into(),
        vec![
            seen_nft(&arp.accept().exprs, None, "arp".into()),
            seen_nft(
                &RuleBody::new().nfproto(Family::Ipv6).accept().exprs,
                None,
                "v6".into(),
            ),
        ],
    );
    assert_eq!(place(&t, "in", true, &incoming(9000)), at("in", None));
    // Refusing a family is a catch-all for it: the rule goes before it.
    t.get_mut("in").unwrap().push(seen_nft(
        &RuleBody::new().nfproto(Family::Ipv4).drop().exprs,
        None,
        "v4".into(),
    ));
    assert_eq!(place(&t, "in", true, &incoming(9000)), at("in", Some(2)));
}

#[test]
fn iptables_nft_conntrack_and_state_matches_are_read_for_their_states() {
    // xt_conntrack_mtinfo3 with only the state flag, NEW (8) in the mask.
    let mut info = vec![0u8; 168];
    info[146..148].copy_from_slice(&1u16.to_ne_bytes());
    info[150..152].copy_from_slice(&8u16.to_ne_bytes());
    assert_eq!(xt_states("conntrack", 3, &info), Some(8));
    // Inverted, or checking anything more than the state: not read.
    info[148..150].copy_from_slice(&1u16.to_ne_bytes());
    assert_eq!(xt_states("conntrack", 3, &info), None);
    info[148..150].copy_from_slice(&0u16.to_ne_bytes());
    info[146..148].copy_from_slice(&3u16.to_ne_bytes());
    assert_eq!(xt_states("conntrack", 3, &info), None);
    // Revision 1 keeps them as bytes; `-m state` as one int.
    let mut v1 = vec![0u8; 152];
    v1[146] = 1;
    v1[148] = 6;
    assert_eq!(xt_states("conntrack", 1, &v1), Some(6));
    assert_eq!(xt_states("state", 0, &1u32.to_ne_bytes()), Some(1));
    assert_eq!(xt_states("conntrack", 3, &[0u8; 4]), None);
}
