//! The found firewall keeps its word: a ban (fail2ban's set, an operator's blocklist) still
//! refuses its source after an opening is written; drops before the input hook (a netdev or
//! inet ingress chain, a prerouting chain) are seen, written through where the host may, and
//! reported where it may not; saved rulesets reload with the distribution's tools and the host
//! converges back without duplicates; a second store on the machine is refused. Each for
//! hand-written nftables, iptables-nft and iptables-legacy where the kind has the construct,
//! probed from the outside machine over IPv4 and IPv6.

use super::*;
use lab::addr::{OUTSIDE_PUBLIC_V4, OUTSIDE_PUBLIC_V6};

/// The kinds of found firewall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Nftables,
    IptablesNft,
    IptablesLegacy,
}

impl Kind {
    fn programs(self) -> [&'static str; 2] {
        match self {
            Kind::Nftables => unreachable!("nftables has no iptables program"),
            Kind::IptablesNft => ["iptables-nft", "ip6tables-nft"],
            Kind::IptablesLegacy => ["iptables-legacy", "ip6tables-legacy"],
        }
    }

    fn status_kind(self) -> &'static str {
        match self {
            Kind::Nftables => "nftables",
            Kind::IptablesNft => "iptables-nft",
            Kind::IptablesLegacy => "iptables-legacy",
        }
    }
}

/// The node with listeners on ssh, the served port and the opened one, and the host on it.
struct Bed {
    _lab: Lab,
    net: Adoption,
    _listeners: Vec<lab::Process>,
    host: Host,
}

fn bed() -> Bed {
    let lab = new_lab();
    let net = adoption(&lab);
    let listeners = [SSH, SERVED, OPENED]
        .iter()
        .map(|p| net.node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    let host = Host::new(&net.node);
    Bed {
        _lab: lab,
        net,
        _listeners: listeners,
        host,
    }
}

/// The outside machine, banned by address in both families.
fn ban_set_nft() -> String {
    format!(
        "table inet f2b-table {{
	set addr-set-sshd {{
		type ipv4_addr
		elements = {{ {OUTSIDE_PUBLIC_V4} }}
	}}
	set addr6-set-sshd {{
		type ipv6_addr
		elements = {{ {OUTSIDE_PUBLIC_V6} }}
	}}
	chain f2b-chain {{
		type filter hook input priority filter - 1; policy accept;
		ip saddr @addr-set-sshd reject
		ip6 saddr @addr6-set-sshd reject
	}}
}}
"
    )
}

/// fail2ban's iptables-allports action: a chain that rejects the banned source, jumped to from
/// the head of INPUT for every tcp packet.
fn ban_xt(kind: Kind) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (program, banned) in kind
        .programs()
        .iter()
        .zip([OUTSIDE_PUBLIC_V4.to_string(), OUTSIDE_PUBLIC_V6.to_string()])
    {
        for rule in [
            vec!["-N", "f2b-sshd"],
            vec!["-A", "f2b-sshd", "-s", &banned, "-j", "REJECT"],
            vec!["-A", "f2b-sshd", "-j", "RETURN"],
            vec!["-I", "INPUT", "1", "-p", "tcp", "-j", "f2b-sshd"],
        ] {
            let mut argv = vec![program.to_string(), "-w".into()];
            argv.extend(rule.iter().map(|s| s.to_string()));
            out.push(argv);
        }
    }
    out
}

fn run_owned(m: &Machine, commands: &[Vec<String>]) {
    for argv in commands {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        run_ok(m, &argv);
    }
}

/// Loads a found input chain with policy drop serving ssh and the served port, in `kind`.
fn load_found(bed: &Bed, kind: Kind, extra_nft: &str) {
    let node = &bed.net.node;
    match kind {
        Kind::Nftables => {
            let text = format!("{INET_INPUT_DROP}{extra_nft}");
            load_nft(node, bed.host.dir.path(), "nftables.conf", &text);
        }
        Kind::IptablesNft | Kind::IptablesLegacy => {
            for program in kind.programs() {
                run_all(node, &xt_input_drop(program));
            }
        }
    }
}

/// The banned outside machine is not answered on `port` over either family (a reject or a
/// silence both say so).
fn refused_from_outside(bed: &Bed, port: u16, why: &str) {
    for addr in node_public() {
        let got = bed
            .net
            .outside
            .probe_tcp(addr, port, SILENCE)
            .expect("probe from outside");
        assert_ne!(
            got,
            Probe::Reached,
            "{why}: outside -> [{addr}]:{port} was reached"
        );
    }
}

/// fail2ban's ban and an operator's blocklist keep refusing the outside machine on the opened
/// port after the opening is written; the peer (not banned) reaches it over both families.
fn a_ban_keeps_refusing(kind: Kind) {
    let bed = bed();
    let node = &bed.net.node;
    match kind {
        Kind::Nftables => {
            // fail2ban's own table, and an operator's blocklist at priority -300.
            let blocklist = format!(
                "table inet blocklist {{
	chain early {{
		type filter hook input priority -300; policy accept;
		ip saddr {OUTSIDE_PUBLIC_V4} drop
		ip6 saddr {OUTSIDE_PUBLIC_V6} drop
	}}
}}
"
            );
            load_found(&bed, kind, &format!("{}{blocklist}", ban_set_nft()));
        }
        _ => {
            load_found(&bed, kind, "");
            run_owned(node, &ban_xt(kind));
        }
    }
    let public = node_public();
    refused_from_outside(&bed, SERVED, "the ban, before");
    expect(
        &bed.net.peer,
        &public,
        SERVED,
        Probe::Reached,
        "peer, before",
    );

    bed.host
        .apply(&declaration(&[opening("web/api", OPENED, "incoming")]));
    expect(
        &bed.net.peer,
        &public,
        OPENED,
        Probe::Reached,
        "the opening admits a source nobody banned",
    );
    refused_from_outside(
        &bed,
        OPENED,
        "the ban still refuses its source on the opened port",
    );
    refused_from_outside(
        &bed,
        SERVED,
        "the ban still refuses its source on the served port",
    );
    let status = bed.host.status();
    assert_eq!(status["kind"], kind.status_kind(), "{status:#}");
    // The ban's own chains got no rule: they refuse nothing by default.
    let states = presence(&status, "web/api");
    assert!(
        states.iter().all(|s| s.ends_with("=present")),
        "every layer admits the opening: {states:?}"
    );
    match kind {
        Kind::Nftables => {
            let text = run_ok(node, &["nft", "list", "ruleset"]);
            for chain in ["chain f2b-chain", "chain early"] {
                let body = text.split(chain).nth(1).unwrap().split('}').next().unwrap();
                assert!(!body.contains("mesh-host:"), "{chain} got a rule:\n{text}");
            }
        }
        _ => {
            for program in kind.programs() {
                let save = run_ok(node, &[&format!("{program}-save"), "-t", "filter"]);
                let lines: Vec<&str> = save.lines().filter(|l| l.starts_with("-A INPUT")).collect();
                let jump = lines
                    .iter()
                    .position(|l| l.contains("-j f2b-sshd"))
                    .unwrap();
                let ours = lines.iter().position(|l| l.contains("mesh-host:")).unwrap();
                assert!(jump < ours, "the ban's jump stays first:\n{save}");
                assert!(!save.contains("-A f2b-sshd -p tcp"), "{save}");
            }
        }
    }
}

#[test]
fn a_fail2ban_set_and_a_blocklist_keep_refusing_through_an_nftables_opening() {
    a_ban_keeps_refusing(Kind::Nftables);
}

#[test]
fn a_fail2ban_chain_keeps_refusing_through_an_iptables_nft_opening() {
    a_ban_keeps_refusing(Kind::IptablesNft);
}

#[test]
fn a_fail2ban_chain_keeps_refusing_through_an_iptables_legacy_opening() {
    a_ban_keeps_refusing(Kind::IptablesLegacy);
}

/// ARP and neighbour discovery, without which nothing arrives through a netdev chain that drops.
const NETDEV_BASICS: &str = "meta protocol arp accept
		meta protocol ip6 meta l4proto ipv6-icmp accept
		meta protocol ip icmp type echo-reply accept";

#[test]
fn a_netdev_ingress_chain_with_policy_drop_is_a_layer_and_gets_the_opening() {
    let bed = bed();
    let netdev = format!(
        "table netdev edge {{
	chain in {{
		type filter hook ingress device \"{PUBLIC_IF}\" priority 0; policy drop;
		{NETDEV_BASICS}
		tcp dport {{ 22, 8080 }} accept
	}}
}}
"
    );
    load_found(&bed, Kind::Nftables, &netdev);
    let public = node_public();
    expect(
        &bed.net.outside,
        &public,
        SERVED,
        Probe::Reached,
        "served, before",
    );
    expect(
        &bed.net.outside,
        &public,
        OPENED,
        Probe::TimedOut,
        "not yet opened",
    );
    let status = bed.host.status();
    assert!(
        layers(&status)
            .iter()
            .any(|l| l.starts_with("netdev edge in (nftables) both can-drop")),
        "{:?}",
        layers(&status)
    );
    bed.host
        .apply(&declaration(&[opening("web/api", OPENED, "incoming")]));
    expect(
        &bed.net.outside,
        &public,
        OPENED,
        Probe::Reached,
        "opened through ingress",
    );
    let states = presence(&bed.host.status(), "web/api");
    assert!(
        states.contains(&"netdev edge in (nftables)=present".to_string()),
        "{states:?}"
    );
    assert!(states.iter().all(|s| s.ends_with("=present")), "{states:?}");
}

#[test]
fn an_operators_refusal_of_the_port_at_ingress_is_kept_and_reported_not_admitted() {
    let bed = bed();
    let ingress = format!(
        "table inet early {{
	chain ingress {{
		type filter hook ingress device \"{PUBLIC_IF}\" priority 0; policy accept;
		tcp dport {OPENED} drop
	}}
}}
"
    );
    load_found(&bed, Kind::Nftables, &ingress);
    // Not admitted, so the briefing says failed and the apply exits 5, never 0.
    let report = bed
        .host
        .apply_not_in_force(&declaration(&[opening("web/api", OPENED, "incoming")]));
    // The operator's word stands: still unreachable, and said so everywhere.
    expect(
        &bed.net.outside,
        &node_public(),
        OPENED,
        Probe::TimedOut,
        "refused by the operator at ingress",
    );
    let not = report["not_admitted"].as_array().expect("not_admitted");
    assert!(
        not.iter().any(|n| n["id"] == "web/api"
            && n["layer"] == "inet early ingress (nftables)"
            && n["why"]
                .as_str()
                .unwrap()
                .contains("refused by the operator")),
        "{report:#}"
    );
    let states = presence(&bed.host.status(), "web/api");
    assert!(
        states.contains(&"inet early ingress (nftables)=refused".to_string()),
        "{states:?}"
    );
    let briefing = bed.host.json(&["briefing", "--json"]);
    assert_eq!(briefing["outcome"], "failed", "{briefing:#}");
    assert!(
        briefing["lines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["subject"] == "web/api"
                && l["detail"].as_str().unwrap().contains("inet early ingress")),
        "{briefing:#}"
    );
}

/// The operator's own rule refuses exactly the opening's port, before the chain's catch-all: the
/// host writes its rule after that refusal, never before it, so the port stays refused, and an
/// act whose briefing says `failed` never exits 0: `apply` and `reconcile` both exit 5, and the
/// human report ends with the outcome.
#[test]
fn an_opening_the_operators_rule_refuses_keeps_it_refused_and_the_apply_exits_5() {
    let bed = bed();
    let node = &bed.net.node;
    load_nft(
        node,
        bed.host.dir.path(),
        "nftables.conf",
        &format!(
            "flush ruleset
table inet filter {{
	chain input {{
		type filter hook input priority filter; policy accept;
		ct state established,related accept
		iifname \"lo\" accept
		meta l4proto ipv6-icmp accept
		tcp dport {OPENED} drop
		tcp dport {{ {SSH}, {SERVED} }} accept
		ct state new drop
	}}
}}
"
        ),
    );
    let public = node_public();
    expect(
        &bed.net.outside,
        &public,
        SERVED,
        Probe::Reached,
        "the found firewall serves",
    );
    let decl = declaration(&[opening("web/api", OPENED, "incoming")]);
    let report = bed.host.apply_not_in_force(&decl);
    let not = report["not_admitted"].as_array().expect("not_admitted");
    assert!(
        not.iter().any(|n| n["id"] == "web/api"
            && n["why"]
                .as_str()
                .unwrap()
                .contains("refused by the operator")),
        "{report:#}"
    );
    expect(
        &bed.net.outside,
        &public,
        OPENED,
        Probe::TimedOut,
        "the operator's rule still drops it",
    );
    let briefing = bed.host.json(&["briefing", "--json"]);
    assert_eq!(briefing["outcome"], "failed", "{briefing:#}");
    // Applied again (the ruleset as the first apply left it), and reconciled: the same answer.
    bed.host.apply_not_in_force(&decl);
    let out = bed.host.run(&["reconcile"]);
    assert_eq!(
        out.status.code(),
        Some(NOT_IN_FORCE),
        "reconcile exited {}:\n{}\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    // The opening's own line never reads "in force" beside REFUSED.
    assert!(
        out.stdout
            .contains("web/api                  opening web/api: NOT in force: ")
            && out.stdout.contains("REFUSED on ")
            && out
                .stdout
                .contains(") by the operator's rule inet filter input: ")
            && out.stdout.contains(", which names the port")
            && !out.stdout.contains("in force in the found firewall")
            && out.stdout.contains("not admitted: web/api by ")
            && out.stdout.ends_with("outcome failed\n"),
        "{}",
        out.stdout
    );
    expect(
        &bed.net.outside,
        &public,
        OPENED,
        Probe::TimedOut,
        "still dropped after the reconcile",
    );
}

/// A prerouting chain that drops every new connection it does not accept, written by nft or by
/// iptables in the mangle table: the opening goes before that catch-all.
fn a_prerouting_catch_all_gets_the_opening(kind: Kind) {
    let bed = bed();
    let node = &bed.net.node;
    match kind {
        Kind::Nftables => load_found(
            &bed,
            kind,
            "table inet pre {
	chain pre {
		type filter hook prerouting priority -150; policy accept;
		ct state established,related accept
		iif \"lo\" accept
		meta l4proto ipv6-icmp accept
		tcp dport { 22, 8080 } accept
		ct state new drop
	}
}
",
        ),
        _ => {
            load_found(&bed, kind, "");
            for program in kind.programs() {
                let mut rules: Vec<Vec<&str>> = vec![
                    vec![
                        "-A",
                        "PREROUTING",
                        "-m",
                        "conntrack",
                        "--ctstate",
                        "RELATED,ESTABLISHED",
                        "-j",
                        "ACCEPT",
                    ],
                    vec!["-A", "PREROUTING", "-i", "lo", "-j", "ACCEPT"],
                    vec![
                        "-A",
                        "PREROUTING",
                        "-p",
                        "tcp",
                        "-m",
                        "multiport",
                        "--dports",
                        "22,8080",
                        "-j",
                        "ACCEPT",
                    ],
                ];
                if program.starts_with("ip6") {
                    rules.push(vec!["-A", "PREROUTING", "-p", "ipv6-icmp", "-j", "ACCEPT"]);
                }
                rules.push(vec![
                    "-A",
                    "PREROUTING",
                    "-m",
                    "conntrack",
                    "--ctstate",
                    "NEW",
                    "-j",
                    "DROP",
                ]);
                for rule in rules {
                    let mut argv = vec![program, "-w", "-t", "mangle"];
                    argv.extend(rule);
                    run_ok(node, &argv);
                }
            }
        }
    }
    let public = node_public();
    expect(
        &bed.net.outside,
        &public,
        SERVED,
        Probe::Reached,
        "served, before",
    );
    expect(
        &bed.net.outside,
        &public,
        OPENED,
        Probe::TimedOut,
        "dropped at prerouting",
    );
    bed.host
        .apply(&declaration(&[opening("web/api", OPENED, "incoming")]));
    expect(
        &bed.net.outside,
        &public,
        OPENED,
        Probe::Reached,
        "opened before the catch-all",
    );
    let states = presence(&bed.host.status(), "web/api");
    let pre = states
        .iter()
        .filter(|l| l.contains("pre ") || l.contains("PREROUTING"))
        .collect::<Vec<_>>();
    assert!(
        !pre.is_empty() && pre.iter().all(|s| s.ends_with("=present")),
        "{states:?}"
    );
    if kind != Kind::Nftables {
        for program in kind.programs() {
            let save = run_ok(node, &[&format!("{program}-save"), "-t", "mangle"]);
            let lines: Vec<&str> = save
                .lines()
                .filter(|l| l.starts_with("-A PREROUTING"))
                .collect();
            let ours = lines.iter().position(|l| l.contains("mesh-host:")).unwrap();
            assert!(lines[ours + 1].contains("--ctstate NEW -j DROP"), "{save}");
        }
    }
}

#[test]
fn an_nftables_prerouting_catch_all_gets_the_opening_before_it() {
    a_prerouting_catch_all_gets_the_opening(Kind::Nftables);
}

#[test]
fn an_iptables_nft_mangle_prerouting_catch_all_gets_the_opening_before_it() {
    a_prerouting_catch_all_gets_the_opening(Kind::IptablesNft);
}

#[test]
fn an_iptables_legacy_mangle_prerouting_catch_all_gets_the_opening_before_it() {
    a_prerouting_catch_all_gets_the_opening(Kind::IptablesLegacy);
}

/// `iptables-save | iptables-restore` (and ip6tables) with the marks in place: the rules load
/// back, the opening still works, and a reconcile finds its marks and adds no duplicate.
fn saved_iptables_reload_and_the_host_converges_back(kind: Kind) {
    let bed = bed();
    let node = &bed.net.node;
    load_found(&bed, kind, "");
    bed.host
        .apply(&declaration(&[opening("web/api", OPENED, "incoming")]));
    let mut saved = Vec::new();
    for program in kind.programs() {
        let text = run_ok(node, &[&format!("{program}-save")]);
        let file = bed.host.dir.path().join(format!("{program}.rules"));
        std::fs::write(&file, &text).unwrap();
        run_ok(
            node,
            &[
                &format!("{program}-restore"),
                "-w",
                "30",
                file.to_str().unwrap(),
            ],
        );
        saved.push((program, save_text(&text)));
    }
    expect(
        &bed.net.outside,
        &node_public(),
        OPENED,
        Probe::Reached,
        "after the reload",
    );
    let report = bed.host.reconcile();
    assert_eq!(outcome(&report, "web/api"), "unchanged", "{report:#}");
    for (program, before) in saved {
        let after = save_text(&run_ok(node, &[&format!("{program}-save")]));
        assert_eq!(before, after, "{program}: the reconcile changed nothing");
        assert_eq!(marked_lines(&after).len(), 1, "{after}");
    }
}

#[test]
fn saved_iptables_nft_rules_reload_and_the_host_converges_back() {
    saved_iptables_reload_and_the_host_converges_back(Kind::IptablesNft);
}

#[test]
fn saved_iptables_legacy_rules_reload_and_the_host_converges_back() {
    saved_iptables_reload_and_the_host_converges_back(Kind::IptablesLegacy);
}

#[test]
fn the_longest_opening_id_yields_a_mark_a_saved_nftables_ruleset_loads_again() {
    let bed = bed();
    let node = &bed.net.node;
    load_found(&bed, Kind::Nftables, "");
    let longest = format!("web/{}", "a".repeat(109 - 4));
    bed.host
        .apply(&declaration(&[opening(&longest, OPENED, "incoming")]));
    let listing = run_ok(node, &["nft", "list", "ruleset"]);
    assert!(
        listing.contains(&format!("mesh-host:{longest}#")),
        "{listing}"
    );
    let file = bed.host.dir.path().join("saved.nft");
    std::fs::write(&file, format!("flush ruleset\n{listing}")).unwrap();
    run_ok(node, &["nft", "-f", file.to_str().unwrap()]);
    expect(
        &bed.net.outside,
        &node_public(),
        OPENED,
        Probe::Reached,
        "after the reload",
    );
    // One byte more is refused before anything is written, naming the id's path.
    let too_long = format!("web/{}", "a".repeat(110 - 4));
    let file = bed.host.dir.path().join("long.json");
    let decl = declaration(&[opening(&too_long, OPENED, "incoming")]);
    std::fs::write(&file, serde_json::to_vec(&decl).unwrap()).unwrap();
    let out = bed.host.run(&["apply", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("resources[0].id"), "{}", out.stderr);
}

#[test]
fn a_second_store_is_refused_and_leaves_the_first_nodes_marks() {
    let bed = bed();
    let node = &bed.net.node;
    load_found(&bed, Kind::Nftables, "");
    bed.host
        .apply(&declaration(&[opening("web/api", OPENED, "incoming")]));
    let before = run_ok(node, &["nft", "list", "ruleset"]);
    assert_eq!(marked_lines(&nft_text(&before)).len(), 1, "{before}");
    // Another store on the same machine, for another node, with no openings at all: its sweep
    // would remove every marked rule it does not declare.
    let other = Host::new(node);
    let mut decl = declaration(&[]);
    decl["node"] = json!("other-node");
    let file = other.dir.path().join("declaration.json");
    std::fs::write(&file, serde_json::to_vec(&decl).unwrap()).unwrap();
    let out = other.run(&["apply", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("\"lab-node\""),
        "names the node: {}",
        out.stderr
    );
    let after = run_ok(node, &["nft", "list", "ruleset"]);
    assert_eq!(nft_text(&before), nft_text(&after), "nothing changed");
    expect(
        &bed.net.outside,
        &node_public(),
        OPENED,
        Probe::Reached,
        "still open",
    );
}

#[test]
fn a_reconcile_lists_nothing_while_the_ruleset_is_at_the_generation_it_verified() {
    let bed = bed();
    let node = &bed.net.node;
    load_found(&bed, Kind::Nftables, "");
    bed.host
        .apply(&declaration(&[opening("web/api", OPENED, "incoming")]));
    let detail = |report: &Value| -> String {
        report["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == "web/api")
            .unwrap()["detail"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let quiet = bed.host.reconcile();
    assert_eq!(outcome(&quiet, "web/api"), "unchanged");
    assert!(detail(&quiet).contains("generation"), "{quiet:#}");
    assert!(
        quiet["guard"].as_str().unwrap().contains("unchanged"),
        "{quiet:#}"
    );
    // Anyone's change moves the generation: the next reconcile reads the firewall again, and
    // puts back what a reload took.
    let file = bed.host.dir.path().join("nftables.conf");
    run_ok(node, &["nft", "-f", file.to_str().unwrap()]);
    let after = bed.host.reconcile();
    assert_eq!(outcome(&after, "web/api"), "created", "{after:#}");
    assert!(!detail(&after).contains("generation"), "{after:#}");
    expect(
        &bed.net.outside,
        &node_public(),
        OPENED,
        Probe::Reached,
        "put back",
    );
    let again = bed.host.reconcile();
    assert!(detail(&again).contains("generation"), "{again:#}");
}
