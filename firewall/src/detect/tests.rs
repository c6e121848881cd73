//! Detection, case by case: who wrote a table, which layers can drop, which legacy tables are
//! read, and the kind a set of layers makes.

use super::*;
use crate::netlink::{Chain, ChainHook, CmpOp, MetaKey, Rule, RuleBody};

#[test]
fn parses_iptables_save() {
    // Detection reads a legacy table through the evaluator's reader of a save: built-in chains
    // with their policies, user chains with none, rules in order.
    let t = crate::eval::parse_save(
        "# Generated\n*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
         :f2b-sshd - [0:0]\n-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n-A INPUT -i lo -j ACCEPT\nCOMMIT\n",
        "filter",
    );
    assert_eq!(t.len(), 1);
    let (name, chains, rules) = &t[0];
    assert_eq!(name, "filter");
    assert_eq!(chains[0], ("INPUT".into(), Some("DROP".into())));
    assert_eq!(chains[3], ("f2b-sshd".into(), None));
    assert_eq!(rules.len(), 2);
    assert_eq!(
        rules[0],
        ("INPUT".into(), "-p tcp -m tcp --dport 22 -j ACCEPT".into())
    );
}

/// A chain of `table`, a base chain at input with a drop policy when it has a `priority`.
pub(crate) fn chain(family: Family, table: &str, name: &str, priority: Option<i32>) -> Chain {
    Chain {
        family,
        table: table.into(),
        name: name.into(),
        handle: 1,
        hook: priority.map(|priority| ChainHook {
            hook: Hook::Input,
            hook_num: 1,
            priority,
            device: None,
        }),
        policy: priority.map(|_| Policy::Drop),
        chain_type: priority.map(|_| ChainType::Filter),
        flags: 0,
        use_count: 0,
        userdata: None,
        comment: None,
    }
}

fn rule(family: Family, table: &str, chain: &str, body: RuleBody) -> Rule {
    Rule {
        family,
        table: table.into(),
        chain: chain.into(),
        handle: 2,
        position: None,
        exprs: body.exprs,
        userdata: None,
        comment: None,
    }
}

/// `ip filter INPUT` with policy drop and the given rules.
fn ip_filter(rules: Vec<RuleBody>) -> Ruleset {
    Ruleset {
        chains: vec![chain(Family::Ipv4, "filter", "INPUT", Some(0))],
        rules: rules
            .into_iter()
            .map(|b| rule(Family::Ipv4, "filter", "INPUT", b))
            .collect(),
        ..Ruleset::default()
    }
}

fn backend_of(rs: &Ruleset) -> Backend {
    writer(rs, Family::Ipv4, "filter", "INPUT").0
}

/// `-i lo`, as iptables-nft encodes it: the name and its NUL only.
fn xt_iifname(name: &str) -> RuleBody {
    let mut data = name.as_bytes().to_vec();
    data.push(0);
    RuleBody::new()
        .expr(Expr::Meta {
            key: MetaKey::IifName,
            dreg: 1,
        })
        .expr(Expr::Cmp {
            sreg: 1,
            op: CmpOp::Eq,
            data,
        })
}

#[test]
fn iptables_names_with_counted_rules_are_iptables_nft() {
    let rs = ip_filter(vec![
        xt_iifname("lo").counter().accept(),
        RuleBody::new().tcp_dport(22).counter().accept(),
    ]);
    assert_eq!(backend_of(&rs), Backend::IptablesNft);
    // A 15-byte name fills the register with its one NUL in iptables' encoding too.
    let rs = ip_filter(vec![xt_iifname("br-0123456789ab").counter().accept()]);
    assert_eq!(backend_of(&rs), Backend::IptablesNft);
    // An empty table of iptables' shape cannot be told apart; iptables-nft keeps it readable
    // by both.
    assert_eq!(backend_of(&ip_filter(vec![])), Backend::IptablesNft);
}

#[test]
fn a_hand_written_table_with_iptables_names_is_nftables() {
    // Counted rules, but an interface compared over 16 bytes as nft does.
    let rs = ip_filter(vec![
        RuleBody::new().iifname_eq("lo").counter().accept(),
        RuleBody::new().tcp_dport(22).counter().accept(),
    ]);
    let (backend, evidence) = writer(&rs, Family::Ipv4, "filter", "INPUT");
    assert_eq!(backend, Backend::Nftables, "{evidence}");
    assert!(evidence.contains("16 bytes"), "{evidence}");
    // A rule without a counter.
    let rs = ip_filter(vec![RuleBody::new().tcp_dport(22).accept()]);
    assert_eq!(backend_of(&rs), Backend::Nftables);
    // A set lookup (`tcp dport { 22, 80 }`).
    let lookup = RuleBody::new()
        .expr(Expr::Lookup {
            set: "__set0".into(),
            sreg: 1,
            dreg: None,
            set_id: None,
            flags: 0,
        })
        .counter()
        .accept();
    assert_eq!(
        backend_of(&ip_filter(vec![lookup.clone()])),
        Backend::Nftables
    );
    // A base chain at a priority iptables never uses.
    let mut rs = ip_filter(vec![]);
    rs.chains[0].hook.as_mut().unwrap().priority = 10;
    assert_eq!(backend_of(&rs), Backend::Nftables);
    // But x_tables compat expressions make it iptables-nft's whatever else is there.
    let xt = RuleBody::new()
        .expr(Expr::Raw {
            name: "match".into(),
            data: vec![],
        })
        .counter()
        .accept();
    assert_eq!(
        backend_of(&ip_filter(vec![lookup, xt])),
        Backend::IptablesNft
    );
}

#[test]
fn a_verdict_map_or_an_unknown_raw_expression_can_drop() {
    let lookup = |dreg| Expr::Lookup {
        set: "__map0".into(),
        sreg: 1,
        dreg,
        set_id: None,
        flags: 0,
    };
    let raw = |name: &str| Expr::Raw {
        name: name.into(),
        data: vec![],
    };
    // `iifname vmap { ... }`: the verdict comes from the map.
    assert!(expr_can_drop(&lookup(Some(NFT_REG_VERDICT))));
    // A set match, or a map into a data register, decides nothing.
    assert!(!expr_can_drop(&lookup(None)));
    assert!(!expr_can_drop(&lookup(Some(1))));
    for name in [
        "reject",
        "queue",
        "target",
        "synproxy",
        "fwd",
        "objref",
        "immediate",
        "lookup",
        "something-new",
    ] {
        assert!(expr_can_drop(&raw(name)), "{name}");
    }
    for name in ["log", "limit", "counter", "match", "fib", "meta", "ct"] {
        assert!(!expr_can_drop(&raw(name)), "{name}");
    }
    // A chain with policy accept whose one rule is a vmap is a layer that can drop.
    let mut rs = Ruleset {
        chains: vec![chain(Family::Inet, "filter", "input", Some(0))],
        rules: vec![rule(
            Family::Inet,
            "filter",
            "input",
            RuleBody::new()
                .expr(Expr::Meta {
                    key: MetaKey::IifName,
                    dreg: 1,
                })
                .expr(lookup(Some(NFT_REG_VERDICT))),
        )],
        ..Ruleset::default()
    };
    rs.chains[0].policy = Some(Policy::Accept);
    let mut found = Found::default();
    nft_layers(&rs, &mut found);
    assert_eq!(found.layers.len(), 1);
    assert!(found.layers[0].can_drop, "{:?}", found.layers[0]);
}

#[test]
fn legacy_raw_mangle_and_filter_are_layers_nat_is_kept_and_unlisted_tables_are_never_read() {
    use run::RecordingRunner;
    let proc = std::env::temp_dir().join(format!("fw-detect-legacy-{}", std::process::id()));
    std::fs::create_dir_all(proc.join("net")).unwrap();
    // raw, mangle and filter exist for IPv4; nothing for IPv6 (so ip6tables is never asked).
    std::fs::write(
        proc.join("net/ip_tables_names"),
        "raw\nmangle\nfilter\nnat\n",
    )
    .unwrap();
    let save = crate::child::answer;
    let raw = save("*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A PREROUTING -s 203.0.113.0/24 -j DROP\nCOMMIT\n");
    let mangle = save("*mangle\n:PREROUTING ACCEPT [0:0]\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\nCOMMIT\n");
    let filter =
        save("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n");
    // nat is no layer (it refuses nothing), but its DNAT rules say where a published port leads.
    let nat = save("*nat\n:PREROUTING ACCEPT [0:0]\n-A DOCKER ! -i docker0 -p tcp -m tcp --dport 8084 -j DNAT --to-destination 172.17.0.2:80\nCOMMIT\n");
    let exec = RecordingRunner {
        answers: std::cell::RefCell::new([raw, mangle, filter, nat.clone()].into()),
        programs: vec!["iptables-legacy-save".into(), "iptables-legacy".into()],
        ..RecordingRunner::succeeding()
    };
    let mut found = Found::default();
    legacy_layers(&exec, &proc, &mut found).unwrap();
    std::fs::remove_dir_all(&proc).unwrap();
    let asked: Vec<Vec<String>> = crate::child::recorded(&exec)
        .iter()
        .map(|c| c.1.clone())
        .collect();
    assert_eq!(
        asked,
        [
            ["-t", "raw"],
            ["-t", "mangle"],
            ["-t", "filter"],
            ["-t", "nat"]
        ]
    );
    assert_eq!(
        found.legacy_saves.get(&(Family::Ipv4, "nat".to_string())),
        Some(&crate::child::text(&nat.stdout))
    );
    assert_eq!(
        crate::published::targets(
            &crate::netlink::Ruleset::default(),
            &found.legacy_saves,
            crate::opening::Proto::Tcp,
            8084
        )
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>(),
        ["172.17.0.2:80"]
    );
    let layers: Vec<(String, &str, i32, bool)> = found
        .layers
        .iter()
        .map(|l| (l.describe(), l.paths(), l.priority, l.can_drop))
        .collect();
    let l = |d: &str, p, prio, c| (d.to_string(), p, prio, c);
    assert_eq!(
        layers,
        [
            l("ip raw PREROUTING (iptables-legacy)", "both", -300, true),
            l(
                "ip mangle PREROUTING (iptables-legacy)",
                "both",
                -150,
                false
            ),
            l("ip mangle INPUT (iptables-legacy)", "incoming", -150, true),
            l(
                "ip mangle FORWARD (iptables-legacy)",
                "forwarded",
                -150,
                false
            ),
            l("ip filter INPUT (iptables-legacy)", "incoming", 0, false),
            l("ip filter FORWARD (iptables-legacy)", "forwarded", 0, false),
        ]
    );
}

#[test]
fn kind_joins_the_backends_that_can_drop() {
    let layer = |backend, can_drop| Layer {
        backend,
        hook: Hook::Input,
        device: None,
        unwritable: None,
        family: Family::Inet,
        table: "t".into(),
        chain: "c".into(),
        priority: 0,
        policy: Policy::Accept,
        rules: 0,
        can_drop,
        evidence: String::new(),
    };
    let mut f = Found::default();
    assert_eq!(f.kind(), "none");
    f.layers.push(layer(Backend::Nftables, false));
    assert_eq!(f.kind(), "none");
    f.layers.push(layer(Backend::IptablesLegacy, true));
    f.layers.push(layer(Backend::Nftables, true));
    assert_eq!(f.kind(), "nftables+iptables-legacy");
}

#[test]
fn legacy_saves_compare_by_their_rules_not_their_time_or_counts() {
    // The same rules saved a second later after traffic: the same. A rule more, a policy
    // changed, a table more: not the same.
    let save = |when: &str, counts: &str, policy: &str, rules: &str| {
        format!(
            "# Generated by iptables-save v1.8.9 on {when}\n*filter\n:INPUT {policy} {counts}\n\
             :FORWARD ACCEPT {counts}\n{rules}COMMIT\n# Completed on {when}\n"
        )
    };
    let one = |text: String| {
        std::collections::BTreeMap::from([((Family::Ipv4, "filter".to_string()), text)])
    };
    let rule = "-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n";
    let before = one(save("Fri Dec  4 21:00:00 2026", "[0:0]", "DROP", rule));
    let later = one(save("Fri Dec  4 21:00:01 2026", "[12:3456]", "DROP", rule));
    assert!(same_saves(&before, &later));
    let more = one(save(
        "Fri Dec  4 21:00:01 2026",
        "[0:0]",
        "DROP",
        &format!("{rule}-A INPUT -p tcp -m tcp --dport 80 -j ACCEPT\n"),
    ));
    assert!(!same_saves(&before, &more));
    let policy = one(save("Fri Dec  4 21:00:00 2026", "[0:0]", "ACCEPT", rule));
    assert!(!same_saves(&before, &policy));
    let mut two = before.clone();
    two.insert(
        (Family::Ipv6, "filter".into()),
        save("x", "[0:0]", "DROP", rule),
    );
    assert!(!same_saves(&before, &two));
    assert!(!same_saves(&two, &before));
}
