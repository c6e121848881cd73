//! Writing with the codec in a fresh namespace and checking the result with `nft` as the oracle,
//! and the other way round.

mod common;

use common::{dmesg_invalid_length_lines, in_fresh_netns, nft, nft_load, nft_rule_count};
use firewall::netlink::*;
use firewall::Error;

/// The two tests that read the kernel's log take turns, so one's deliberate complaint is never
/// read as the other's.
static DMESG: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn guard_batch(flags: TableFlags) -> Batch {
    let mut b = Batch::new();
    b.add_table(Family::Inet, "meshguard", flags).unwrap();
    common::add_guard_chain(&mut b);
    b
}

#[test]
fn the_guard_table_reads_back_in_nft_exactly() {
    in_fresh_netns();
    let mut s = NfSocket::open().unwrap();
    s.send(&guard_batch(TableFlags::NONE)).unwrap();
    // nft names priority -150 "mangle".
    assert_eq!(
        nft(&["list", "ruleset"]),
        "table inet meshguard {\n\
         \tchain pre {\n\
         \t\ttype filter hook prerouting priority mangle; policy accept;\n\
         \t\tiifname != \"lo\" tcp dport 5432 drop comment \"mesh: guard store\"\n\
         \t}\n\
         }\n"
    );
}

/// Each construct the builder offers, with the line nft 1.0.6 prints for it.
fn constructs() -> Vec<(RuleBody, &'static str)> {
    let ip = |s: &str| s.parse().unwrap();
    let ip6 = |s: &str| s.parse().unwrap();
    vec![
        (
            RuleBody::new().iifname_ne("lo").tcp_dport(5432).drop().comment("mesh: guard store"),
            "iifname != \"lo\" tcp dport 5432 drop comment \"mesh: guard store\"",
        ),
        (RuleBody::new().iifname_eq("br-*").accept(), "iifname \"br-*\" accept"),
        (
            RuleBody::new().iifname_ne("br-*").udp_dport(53).accept(),
            "iifname != \"br-*\" udp dport 53 accept",
        ),
        (RuleBody::new().iifname_eq("wg0").ret(), "iifname \"wg0\" return"),
        (RuleBody::new().nfproto(Family::Ipv4).accept(), "meta nfproto ipv4 accept"),
        (RuleBody::new().nfproto(Family::Ipv6).accept(), "meta nfproto ipv6 accept"),
        (RuleBody::new().l4proto(L4Proto::Tcp).accept(), "meta l4proto tcp accept"),
        (RuleBody::new().l4proto(L4Proto::Udp).accept(), "meta l4proto udp accept"),
        (RuleBody::new().th_dport(22).accept(), "th dport 22 accept"),
        (RuleBody::new().tcp_dport(22).accept(), "tcp dport 22 accept"),
        (RuleBody::new().ip_saddr(ip("10.0.0.0"), 8).accept(), "ip saddr 10.0.0.0/8 accept"),
        (
            RuleBody::new().ip_saddr(ip("10.1.3.7"), 23).accept(),
            "ip saddr 10.1.2.0/23 accept",
        ),
        (RuleBody::new().ip_saddr(ip("10.0.0.1"), 32).accept(), "ip saddr 10.0.0.1 accept"),
        (RuleBody::new().ip_daddr(ip("192.168.1.0"), 24).drop(), "ip daddr 192.168.1.0/24 drop"),
        (RuleBody::new().ip6_saddr(ip6("fd00::"), 8).accept(), "ip6 saddr fd00::/8 accept"),
        (
            RuleBody::new().ip6_saddr(ip6("fd12:3456::"), 48).drop(),
            "ip6 saddr fd12:3456::/48 drop",
        ),
        (RuleBody::new().ip6_saddr(ip6("::1"), 128).accept(), "ip6 saddr ::1 accept"),
        (
            RuleBody::new().ct_state(CtState::ESTABLISHED | CtState::RELATED).accept(),
            "ct state established,related accept",
        ),
        (
            RuleBody::new().ct_original_proto_dst(L4Proto::Tcp, 8080).accept(),
            "meta l4proto tcp ct original proto-dst 8080 accept",
        ),
        (RuleBody::new().ct_status_dnat().accept(), "ct status dnat accept"),
        (
            // A forwarded opening's rule, as iptables-nft stores `--ctstate DNAT --ctorigdstport`.
            RuleBody::new()
                .l4proto(L4Proto::Tcp)
                .ct_status_dnat()
                .ct_original_proto_dst_only(443)
                .accept(),
            "meta l4proto tcp ct status dnat ct original proto-dst 443 accept",
        ),
        (
            RuleBody::new().ct_original_proto_dst(L4Proto::Udp, 5353).counter().ret(),
            "meta l4proto udp ct original proto-dst 5353 counter packets 0 bytes 0 return",
        ),
        (RuleBody::new().counter().drop(), "counter packets 0 bytes 0 drop"),
        (RuleBody::new().jump("x"), "jump x"),
        (
            RuleBody::new().fib_daddr_oifname(CmpOp::Eq, "docker0").drop(),
            "fib daddr oifname \"docker0\" drop",
        ),
        (
            RuleBody::new().fib_daddr_oifname(CmpOp::Eq, "br-*").drop(),
            "fib daddr oifname \"br-*\" drop",
        ),
        (
            // The guard's refusal of a container's own port.
            RuleBody::new()
                .iifname_ne("lo")
                .iifname_ne("wg0")
                .fib_daddr_oifname(CmpOp::Eq, "docker0")
                .tcp_dport(5432)
                .drop(),
            "iifname != \"lo\" iifname != \"wg0\" fib daddr oifname \"docker0\" tcp dport 5432 drop",
        ),
        (
            // The guard's refusal of a port on the node's own addresses.
            RuleBody::new()
                .iifname_ne("lo")
                .iifname_ne("wg0")
                .fib_daddr_type_local()
                .tcp_dport(5432)
                .drop(),
            "iifname != \"lo\" iifname != \"wg0\" fib daddr type local tcp dport 5432 drop",
        ),
        (
            RuleBody::new().iifname_ne("lo").iifname_ne("wg0").iifname_ne("docker0").iifname_ne("br-*").tcp_dport(5432).drop(),
            "iifname != \"lo\" iifname != \"wg0\" iifname != \"docker0\" iifname != \"br-*\" tcp dport 5432 drop",
        ),
    ]
}

#[test]
fn every_builder_construct_reads_back_in_nft_and_in_the_codec() {
    in_fresh_netns();
    // The kernel's log is how a wrong attribute length shows; a check that cannot read it would
    // pass without checking, so it fails instead.
    let _turn = DMESG.lock().unwrap_or_else(|e| e.into_inner());
    let log_before =
        dmesg_invalid_length_lines().expect("dmesg must be readable for the invalid-length check");
    let mut s = NfSocket::open().unwrap();
    let mut b = Batch::new();
    b.add_table(Family::Inet, "t", TableFlags::NONE).unwrap();
    b.add_chain(Family::Inet, "t", "x", None).unwrap();
    b.add_chain(
        Family::Inet,
        "t",
        "c",
        Some(&BaseChain::filter(Hook::Forward, 0)),
    )
    .unwrap();
    let cases = constructs();
    for (body, _) in &cases {
        b.add_rule(Family::Inet, "t", "c", body, Position::Append)
            .unwrap();
    }
    s.send(&b).unwrap();

    let listed = nft(&["list", "chain", "inet", "t", "c"]);
    let lines: Vec<&str> = listed
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("table") && !l.starts_with("chain"))
        .filter(|l| !l.starts_with("type ") && *l != "}")
        .collect();
    let expected: Vec<&str> = cases.iter().map(|(_, line)| *line).collect();
    assert_eq!(lines, expected, "nft printed:\n{listed}");

    // The codec reads back exactly the expressions and comments it wrote.
    let rules = s.rules_of(Family::Inet, "t", Some("c")).unwrap();
    assert_eq!(rules.len(), cases.len());
    for (rule, (body, line)) in rules.iter().zip(&cases) {
        assert_eq!(rule.exprs, body.exprs, "{line}");
        assert_eq!(rule.comment, body.comment, "{line}");
        assert_eq!(rule.family, Family::Inet);
        assert!(rule.handle > 0);
    }

    // The ct direction is one byte, so the kernel has nothing to complain about.
    let log_after =
        dmesg_invalid_length_lines().expect("dmesg must be readable for the invalid-length check");
    assert_eq!(
        log_before, log_after,
        "the kernel logged an invalid attribute length"
    );
}

#[test]
fn a_ruleset_written_by_nft_reads_back_per_family() {
    in_fresh_netns();
    nft_load(
        "table ip filter {\n\
           chain INPUT { type filter hook input priority 0; policy drop; tcp dport 1 drop; }\n\
         }\n\
         table ip6 filter {\n\
           chain INPUT { type filter hook input priority 0; policy accept; tcp dport 2 drop; }\n\
         }\n\
         table inet filter {\n\
           chain INPUT { type filter hook input priority -300; policy accept; tcp dport 3 drop; }\n\
           chain post { type nat hook postrouting priority srcnat; }\n\
         }\n\
         table ip raw {\n\
           chain PREROUTING { type filter hook prerouting priority raw; policy drop; }\n\
         }\n",
    );
    let mut s = NfSocket::open().unwrap();
    let rs = s.ruleset(None).unwrap();
    assert_eq!(rs.tables.len(), 4);
    let ip = rs.chain(Family::Ipv4, "filter", "INPUT").unwrap();
    let ip6 = rs.chain(Family::Ipv6, "filter", "INPUT").unwrap();
    let inet = rs.chain(Family::Inet, "filter", "INPUT").unwrap();
    assert_eq!(ip.policy, Some(Policy::Drop));
    assert_eq!(ip6.policy, Some(Policy::Accept));
    assert_eq!(inet.hook.as_ref().unwrap().priority, -300);
    assert_eq!(inet.hook.as_ref().unwrap().hook, Hook::Input);
    assert_eq!(inet.chain_type, Some(ChainType::Filter));
    let raw = rs.chain(Family::Ipv4, "raw", "PREROUTING").unwrap();
    assert_eq!(raw.hook.as_ref().unwrap().priority, -300);
    assert_eq!(raw.policy, Some(Policy::Drop));
    let post = rs.chain(Family::Inet, "filter", "post").unwrap();
    assert_eq!(post.chain_type, Some(ChainType::Nat));
    assert_eq!(post.hook.as_ref().unwrap().priority, 100);
    assert_eq!(post.hook.as_ref().unwrap().hook, Hook::Postrouting);

    // Same-named chains keep their own rules: the port tells them apart.
    let port_of = |f: Family| {
        let rules: Vec<_> = rs.rules_of(f, "filter", "INPUT").collect();
        assert_eq!(rules.len(), 1, "{f}");
        match &rules[0].exprs[3] {
            Expr::Cmp { data, .. } => u16::from_be_bytes([data[0], data[1]]),
            other => panic!("{f}: {other:?}"),
        }
    };
    assert_eq!(port_of(Family::Ipv4), 1);
    assert_eq!(port_of(Family::Ipv6), 2);
    assert_eq!(port_of(Family::Inet), 3);

    // A per-family listing sees only that family.
    let v6 = s.chains(Some(Family::Ipv6)).unwrap();
    assert_eq!(v6.len(), 1);
    assert_eq!(v6[0].family, Family::Ipv6);
    let v6_rules = s.rules(Some(Family::Ipv6)).unwrap();
    assert_eq!(v6_rules.len(), 1);
    assert_eq!(v6_rules[0].table, "filter");
}

#[test]
fn rules_go_to_the_head_or_a_position_and_delete_by_handle() {
    in_fresh_netns();
    let mut s = NfSocket::open().unwrap();
    let mut b = Batch::new();
    b.add_table(Family::Inet, "t", TableFlags::NONE).unwrap();
    b.add_chain(Family::Inet, "t", "c", None).unwrap();
    b.add_rule(
        Family::Inet,
        "t",
        "c",
        &RuleBody::new().th_dport(1).accept(),
        Position::Append,
    )
    .unwrap();
    b.add_rule(
        Family::Inet,
        "t",
        "c",
        &RuleBody::new().th_dport(2).accept(),
        Position::Append,
    )
    .unwrap();
    s.send(&b).unwrap();
    let ports = |s: &mut NfSocket| -> Vec<(u16, u64)> {
        s.rules_of(Family::Inet, "t", Some("c"))
            .unwrap()
            .iter()
            .map(|r| match &r.exprs[1] {
                Expr::Cmp { data, .. } => (u16::from_be_bytes([data[0], data[1]]), r.handle),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    let before = ports(&mut s);
    let (h1, h2) = (before[0].1, before[1].1);

    let mut b = Batch::new();
    let rule = |p| RuleBody::new().th_dport(p).accept();
    b.add_rule(Family::Inet, "t", "c", &rule(0), Position::Prepend)
        .unwrap();
    b.add_rule(Family::Inet, "t", "c", &rule(15), Position::Before(h2))
        .unwrap();
    b.add_rule(Family::Inet, "t", "c", &rule(25), Position::After(h2))
        .unwrap();
    s.send(&b).unwrap();
    let now: Vec<u16> = ports(&mut s).iter().map(|p| p.0).collect();
    assert_eq!(now, [0, 1, 15, 2, 25]);

    let mut b = Batch::new();
    b.del_rule(Family::Inet, "t", "c", h1).unwrap();
    s.send(&b).unwrap();
    let now: Vec<u16> = ports(&mut s).iter().map(|p| p.0).collect();
    assert_eq!(now, [0, 15, 2, 25]);

    let mut b = Batch::new();
    b.flush(Family::Inet, "t", Some("c")).unwrap();
    b.del_chain(Family::Inet, "t", "c").unwrap();
    s.send(&b).unwrap();
    assert!(s.chains(Some(Family::Inet)).unwrap().is_empty());
    let mut b = Batch::new();
    b.del_table(Family::Inet, "t").unwrap();
    s.send(&b).unwrap();
    assert!(s.tables(None).unwrap().is_empty());
    assert_eq!(nft(&["list", "ruleset"]), "");
}

/// Proves that only the last message's acknowledgement is needed to read a batch's outcome: a
/// refusal deep inside a batch of 2,000 rules is named, nothing of it is applied, and the same
/// batch without the bad message is applied whole. It fails if a refusal goes unread (the ACK of
/// the last message taken for success) or if a successful batch is reported refused or missing.
#[test]
fn a_refusal_deep_in_a_long_batch_is_named_and_the_batch_without_it_applied() {
    in_fresh_netns();
    let mut s = NfSocket::open().unwrap();
    let mut b = Batch::new();
    b.add_table(Family::Inet, "t", TableFlags::NONE).unwrap();
    b.add_chain(Family::Inet, "t", "c", None).unwrap();
    s.send(&b).unwrap();
    let batch = |bad: Option<u16>| {
        let mut b = Batch::new();
        for port in 1..=2000u16 {
            let chain = if Some(port) == bad { "missing" } else { "c" };
            b.add_rule(
                Family::Inet,
                "t",
                chain,
                &RuleBody::new().tcp_dport(port).accept(),
                Position::Append,
            )
            .unwrap();
        }
        b
    };
    match s.send(&batch(Some(1234))).unwrap_err() {
        Error::Refused { what, errno, .. } => {
            assert_eq!(what, "add rule to chain inet t missing");
            assert_eq!(errno.0, libc::ENOENT);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(nft_rule_count(), 0, "the batch must be atomic");
    s.send(&batch(None)).unwrap();
    assert_eq!(nft_rule_count(), 2000);
    // Nothing of the batch is left queued to be taken for the answer to the next request.
    assert!(s.generation().is_ok());
}

#[test]
fn a_refusal_names_its_message_and_nothing_of_the_batch_is_applied() {
    in_fresh_netns();
    let mut s = NfSocket::open().unwrap();
    let mut b = Batch::new();
    b.add_table(Family::Inet, "t", TableFlags::NONE).unwrap();
    b.add_chain(Family::Inet, "t", "c", None).unwrap();
    b.add_rule(
        Family::Inet,
        "t",
        "missing",
        &RuleBody::new().accept(),
        Position::Append,
    )
    .unwrap();
    b.add_rule(
        Family::Inet,
        "t",
        "c",
        &RuleBody::new().accept(),
        Position::Append,
    )
    .unwrap();
    let err = s.send(&b).unwrap_err();
    match &err {
        Error::Refused { what, errno, .. } => {
            assert_eq!(what, "add rule to chain inet t missing");
            assert_eq!(errno.0, libc::ENOENT);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.to_string().contains("ENOENT"), "{err}");
    assert!(
        s.tables(None).unwrap().is_empty(),
        "the batch must be atomic"
    );

    // The socket stays usable after a refusal.
    let mut b = Batch::new();
    b.add_table(Family::Inet, "t", TableFlags::NONE).unwrap();
    s.send(&b).unwrap();
    assert_eq!(s.tables(None).unwrap().len(), 1);

    // Deleting what is not there names it too.
    let mut b = Batch::new();
    b.del_table(Family::Ipv6, "nope").unwrap();
    let err = s.send(&b).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("kernel refused delete table ip6 nope"),
        "{err}"
    );
}

#[test]
fn two_thousand_rules_go_in_one_batch_and_list_back() {
    in_fresh_netns();
    let mut s = NfSocket::open().unwrap();
    let mut b = Batch::new();
    b.add_table(Family::Inet, "big", TableFlags::NONE).unwrap();
    b.add_chain(
        Family::Inet,
        "big",
        "in",
        Some(&BaseChain::filter(Hook::Input, 0)),
    )
    .unwrap();
    for i in 0..2000u16 {
        let body = RuleBody::new()
            .iifname_ne("lo")
            .tcp_dport(10000 + i)
            .counter()
            .accept()
            .comment(&format!("mesh: opening {}", 10000 + i));
        b.add_rule(Family::Inet, "big", "in", &body, Position::Append)
            .unwrap();
    }
    assert_eq!(b.len(), 2002);
    s.send(&b).unwrap();
    let rules = s.rules_of(Family::Inet, "big", Some("in")).unwrap();
    assert_eq!(rules.len(), 2000);
    assert_eq!(rules[1999].comment.as_deref(), Some("mesh: opening 11999"));
    assert_eq!(nft_rule_count(), 2000);

    // And replacing them all at once works on the same socket.
    let mut b = Batch::new();
    b.flush(Family::Inet, "big", None).unwrap();
    for r in rules.iter().take(1500) {
        b.add_rule(Family::Inet, "big", "in", &r.body(), Position::Prepend)
            .unwrap();
    }
    s.send(&b).unwrap();
    assert_eq!(s.rules(Some(Family::Inet)).unwrap().len(), 1500);
}

#[test]
fn the_generation_moves_with_each_batch() {
    in_fresh_netns();
    let mut s = NfSocket::open().unwrap();
    let g0 = s.generation().unwrap();
    let mut b = Batch::new();
    b.add_table(Family::Ipv4, "t", TableFlags::NONE).unwrap();
    s.send(&b).unwrap();
    assert_ne!(s.generation().unwrap(), g0);
}

#[test]
fn arp_bridge_and_netdev_tables_list_under_their_own_family() {
    in_fresh_netns();
    nft_load(
        "table bridge filter {\n\
           chain forward { type filter hook forward priority -200; policy drop; }\n\
         }\n\
         table arp filter {\n\
           chain output { type filter hook output priority 0; policy accept; }\n\
         }\n\
         table netdev filter {\n\
           chain ingress { type filter hook ingress device lo priority -500; policy accept; }\n\
         }\n",
    );
    let mut s = NfSocket::open().unwrap();
    let rs = s.ruleset(None).unwrap();
    let bridge = rs.chain(Family::Bridge, "filter", "forward").unwrap();
    assert_eq!(bridge.hook.as_ref().unwrap().hook, Hook::Forward);
    assert_eq!(bridge.hook.as_ref().unwrap().priority, -200);
    assert_eq!(bridge.policy, Some(Policy::Drop));
    let arp = rs.chain(Family::Arp, "filter", "output").unwrap();
    assert_eq!(arp.hook.as_ref().unwrap().hook, Hook::Output);
    let netdev = rs.chain(Family::Netdev, "filter", "ingress").unwrap();
    let hook = netdev.hook.as_ref().unwrap();
    assert_eq!(hook.hook, Hook::Ingress);
    assert_eq!(hook.priority, -500);
    assert_eq!(hook.device.as_deref(), Some("lo"));
    for f in [Family::Bridge, Family::Arp, Family::Netdev] {
        let tables = s.tables(Some(f)).unwrap();
        assert_eq!(tables.len(), 1, "{f}");
        assert_eq!(tables[0].family, f);
    }
    assert!(s.tables(Some(Family::Inet)).unwrap().is_empty());
}

#[test]
fn base_chains_of_every_family_read_back_in_nft() {
    in_fresh_netns();
    let mut s = NfSocket::open().unwrap();
    let mut b = Batch::new();
    let chain = |t: ChainType, hook, priority, policy| BaseChain {
        chain_type: t,
        hook,
        priority,
        policy,
    };
    b.add_table(Family::Ipv4, "filter", TableFlags::NONE)
        .unwrap();
    b.add_chain(
        Family::Ipv4,
        "filter",
        "INPUT",
        Some(&chain(ChainType::Filter, Hook::Input, -300, Policy::Drop)),
    )
    .unwrap();
    b.add_table(Family::Ipv6, "filter", TableFlags::NONE)
        .unwrap();
    b.add_chain(
        Family::Ipv6,
        "filter",
        "INPUT",
        Some(&chain(ChainType::Filter, Hook::Input, 0, Policy::Accept)),
    )
    .unwrap();
    b.add_rule(
        Family::Ipv6,
        "filter",
        "INPUT",
        &RuleBody::new().tcp_dport(2).drop(),
        Position::Append,
    )
    .unwrap();
    b.add_table(Family::Inet, "nat", TableFlags::NONE).unwrap();
    b.add_chain(
        Family::Inet,
        "nat",
        "post",
        Some(&chain(
            ChainType::Nat,
            Hook::Postrouting,
            100,
            Policy::Accept,
        )),
    )
    .unwrap();
    b.add_chain(
        Family::Inet,
        "nat",
        "pre",
        Some(&chain(
            ChainType::Nat,
            Hook::Prerouting,
            -101,
            Policy::Accept,
        )),
    )
    .unwrap();
    b.add_table(Family::Arp, "filter", TableFlags::NONE)
        .unwrap();
    b.add_chain(
        Family::Arp,
        "filter",
        "output",
        Some(&chain(ChainType::Filter, Hook::Output, 0, Policy::Accept)),
    )
    .unwrap();
    s.send(&b).unwrap();
    assert_eq!(
        nft(&["list", "ruleset"]),
        "table ip filter {\n\
         \tchain INPUT {\n\
         \t\ttype filter hook input priority raw; policy drop;\n\
         \t}\n\
         }\n\
         table ip6 filter {\n\
         \tchain INPUT {\n\
         \t\ttype filter hook input priority filter; policy accept;\n\
         \t\ttcp dport 2 drop\n\
         \t}\n\
         }\n\
         table inet nat {\n\
         \tchain post {\n\
         \t\ttype nat hook postrouting priority srcnat; policy accept;\n\
         \t}\n\
         \n\
         \tchain pre {\n\
         \t\ttype nat hook prerouting priority dstnat - 1; policy accept;\n\
         \t}\n\
         }\n\
         table arp filter {\n\
         \tchain output {\n\
         \t\ttype filter hook output priority filter; policy accept;\n\
         \t}\n\
         }\n"
    );
}

/// The negative control for the dmesg check above: a four-byte ct direction, as a naive encoder
/// writes it, is what makes the kernel complain, so the check can see a complaint.
#[test]
fn a_four_byte_ct_direction_is_what_the_kernel_complains_about() {
    in_fresh_netns();
    let _turn = DMESG.lock().unwrap_or_else(|e| e.into_inner());
    let before =
        dmesg_invalid_length_lines().expect("dmesg must be readable for the negative control");
    let attr = |ty: u16, data: &[u8]| {
        let mut a = ((4 + data.len()) as u16).to_ne_bytes().to_vec();
        a.extend_from_slice(&ty.to_ne_bytes());
        a.extend_from_slice(data);
        a
    };
    let mut data = attr(2, &12u32.to_be_bytes()); // NFTA_CT_KEY = proto-dst
    data.extend(attr(1, &1u32.to_be_bytes())); // NFTA_CT_DREG = 1
    data.extend(attr(3, &0u32.to_be_bytes())); // NFTA_CT_DIRECTION as a u32: wrong
    let body = RuleBody::new()
        .l4proto(L4Proto::Tcp)
        .expr(Expr::Raw {
            name: "ct".into(),
            data,
        })
        .expr(Expr::Cmp {
            sreg: 1,
            op: CmpOp::Eq,
            data: 8080u16.to_be_bytes().to_vec(),
        })
        .accept();
    let mut s = NfSocket::open().unwrap();
    let mut b = Batch::new();
    b.add_table(Family::Inet, "t", TableFlags::NONE).unwrap();
    b.add_chain(Family::Inet, "t", "c", None).unwrap();
    b.add_rule(Family::Inet, "t", "c", &body, Position::Append)
        .unwrap();
    let sent = s.send(&b);
    let after = dmesg_invalid_length_lines().unwrap();
    // The kernel's warning is rate limited; either it logged, or it refused the rule.
    assert!(
        after.len() > before.len() || sent.is_err(),
        "no complaint for a four-byte NFTA_CT_DIRECTION"
    );
}

/// A forwarded opening's native rule, as the engine writes it, reads back in nft as the
/// translated-connection match iptables' `--ctstate DNAT --ctorigdstport` is.
#[test]
fn a_forwarded_opening_reads_back_in_nft_as_a_translated_connection_match() {
    in_fresh_netns();
    let o = firewall::Opening {
        id: "web/https".into(),
        port: 443,
        proto: firewall::Proto::Tcp,
        from: firewall::opening::From::Anywhere,
        path: firewall::Path::Forwarded,
    };
    let bodies = firewall::rules::nft_bodies(&o, firewall::rules::Site::late(Family::Inet));
    assert_eq!(bodies.len(), 1);
    let mut s = NfSocket::open().unwrap();
    let mut b = Batch::new();
    b.add_table(Family::Inet, "t", TableFlags::NONE).unwrap();
    b.add_chain(
        Family::Inet,
        "t",
        "forward",
        Some(&BaseChain::filter(Hook::Forward, 0)),
    )
    .unwrap();
    b.add_rule(Family::Inet, "t", "forward", &bodies[0], Position::Prepend)
        .unwrap();
    s.send(&b).unwrap();
    let listed = nft(&["list", "chain", "inet", "t", "forward"]);
    let want = format!(
        "meta l4proto tcp ct status dnat ct original proto-dst 443 accept comment \"{}\"",
        firewall::rules::mark(&o)
    );
    assert!(
        listed.lines().any(|l| l.trim() == want),
        "nft printed:\n{listed}\nwanted: {want}"
    );
}
