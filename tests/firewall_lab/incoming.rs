//! Found rulesets on the incoming path: an opening goes through every layer that could drop it,
//! in each layer's own terms, and removing it restores each ruleset exactly.

use super::*;

/// A found firewall on the incoming path, and how to check it.
struct FoundRuleset {
    /// Loads it into the node.
    load: fn(&Machine, &Path),
    /// The kind `firewall status` must report.
    kind: &'static str,
    /// The layers the opening must be present in.
    layers: &'static [&'static str],
    /// Each view with how many marked lines the opening adds to it; `None` where the view cannot
    /// show the mark (nft does not print an iptables comment), so only its restoration is
    /// compared there.
    views: &'static [(View, Option<usize>)],
}

fn load_inet_drop(m: &Machine, dir: &Path) {
    load_nft(m, dir, "found.nft", INET_INPUT_DROP);
}

fn load_iptables_nft(m: &Machine, _: &Path) {
    run_all(m, &xt_input_drop("iptables-nft"));
    run_all(m, &xt_input_drop("ip6tables-nft"));
}

fn load_iptables_legacy(m: &Machine, _: &Path) {
    run_all(m, &xt_input_drop("iptables-legacy"));
    run_all(m, &xt_input_drop("ip6tables-legacy"));
}

/// Legacy iptables dropping in the mangle table's INPUT chain, the filter table untouched: a
/// drop there is as final as one in filter.
fn load_legacy_mangle(m: &Machine, _: &Path) {
    run_all(m, &xt_input_drop_in("iptables-legacy", "mangle"));
    run_all(m, &xt_input_drop_in("ip6tables-legacy", "mangle"));
}

fn load_legacy_and_nftables(m: &Machine, dir: &Path) {
    load_iptables_legacy(m, dir);
    // A native table beside the legacy one, written by someone else and dropping by default
    // too: a packet must pass both, so the opening must be in both.
    load_nft(
        m,
        dir,
        "native.nft",
        "table inet host {
	chain input {
		type filter hook input priority 10; policy drop;
		ct state established,related accept
		iif \"lo\" accept
		tcp dport { 22, 8080 } accept
		meta l4proto ipv6-icmp accept
	}
}
",
    );
}

/// A hand-written ruleset that uses iptables' table and chain names and counts every rule, as
/// people who learned iptables write it; it is nft's, so openings go in natively with a mark nft
/// can show.
fn load_handwritten_ip_filter(m: &Machine, dir: &Path) {
    let mut text = String::from("flush ruleset\n");
    for family in ["ip", "ip6"] {
        let _ = write!(
            text,
            "table {family} filter {{
	chain INPUT {{
		type filter hook input priority 0; policy drop;
		ct state established,related counter accept
		iifname \"lo\" counter accept
		tcp dport 22 counter accept
		tcp dport 8080 counter accept
		meta l4proto ipv6-icmp counter accept
	}}
}}
"
        );
    }
    load_nft(m, dir, "iptables-style.nft", &text);
}

/// A hand-written ruleset whose input chain accepts by policy and drops through a verdict map:
/// the public interface jumps to a chain that serves ssh and the served port and drops the rest.
fn load_vmap_drop(m: &Machine, dir: &Path) {
    let text = format!(
        "flush ruleset
table inet filter {{
	chain input {{
		type filter hook input priority filter; policy accept;
		iifname vmap {{ \"lo\" : accept, \"{PUBLIC_IF}\" : jump public }}
	}}
	chain public {{
		ct state established,related accept
		meta l4proto ipv6-icmp accept
		tcp dport 22 accept
		tcp dport 8080 accept
		drop
	}}
}}
"
    );
    load_nft(m, dir, "vmap.nft", &text);
}

/// The whole check of one found ruleset on the incoming path: before, with the opening, and
/// after it is removed again.
fn incoming_opening_through(found: &FoundRuleset) {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [SSH, SERVED, OPENED, CLOSED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    (found.load)(node, lab.dir());
    let before: Vec<String> = found.views.iter().map(|(v, _)| v.read(node)).collect();

    // The found firewall does what it says before the host touches it.
    let public = node_public();
    expect(&net.outside, &public, SSH, Probe::Reached, "ssh, before");
    expect(
        &net.outside,
        &public,
        SERVED,
        Probe::Reached,
        "served, before",
    );
    expect(
        &net.outside,
        &public,
        OPENED,
        Probe::TimedOut,
        "not yet opened",
    );

    let host = Host::new(node);
    let report = host.apply(&declaration(&[opening("web/api", OPENED, "incoming")]));
    assert_eq!(outcome(&report, "web/api"), "created", "{report:#}");

    expect(&net.outside, &public, OPENED, Probe::Reached, "the opening");
    expect(&net.outside, &public, SSH, Probe::Reached, "ssh stays");
    expect(
        &net.outside,
        &public,
        SERVED,
        Probe::Reached,
        "served stays",
    );
    expect(
        &net.outside,
        &public,
        CLOSED,
        Probe::TimedOut,
        "nothing else opened",
    );

    for ((view, marks), before) in found.views.iter().zip(&before) {
        let now = view.read(node);
        if let Some(n) = marks {
            assert_eq!(
                marked_lines(&now).len(),
                *n,
                "{view:?}: marked rules of the opening\n{now}"
            );
            assert!(
                marked_lines(&now)
                    .iter()
                    .all(|l| l.contains("mesh-host:web/api#")),
                "{view:?}: every marked rule is the opening's\n{now}"
            );
            assert_eq!(
                &without_marked(&now),
                before,
                "{view:?}: the found ruleset differs by more than the mesh's marked rules"
            );
        }
    }

    let status = host.status();
    assert_eq!(status["kind"], found.kind, "{status:#}");
    assert!(status["refusal"].is_null(), "{status:#}");
    let mut want: Vec<String> = found
        .layers
        .iter()
        .map(|l| format!("{l}=present"))
        .collect();
    want.sort();
    assert_eq!(presence(&status, "web/api"), want, "{status:#}");
    assert_eq!(status["guard"]["present"], true, "{status:#}");

    // Applying the same again changes nothing.
    let again = host.apply(&declaration(&[opening("web/api", OPENED, "incoming")]));
    assert_eq!(outcome(&again, "web/api"), "unchanged", "{again:#}");

    let removed = host.apply(&declaration(&[]));
    assert_eq!(outcome(&removed, "web/api"), "removed", "{removed:#}");
    expect(
        &net.outside,
        &public,
        OPENED,
        Probe::TimedOut,
        "opening removed",
    );
    expect(&net.outside, &public, SSH, Probe::Reached, "ssh after");
    expect(
        &net.outside,
        &public,
        SERVED,
        Probe::Reached,
        "served after",
    );
    for ((view, _), before) in found.views.iter().zip(&before) {
        assert_eq!(
            &view.read(node),
            before,
            "{view:?}: removing the opening must restore the found ruleset exactly"
        );
    }
}

#[test]
fn an_opening_goes_through_a_hand_written_nftables_input_chain() {
    incoming_opening_through(&FoundRuleset {
        load: load_inet_drop,
        kind: "nftables",
        layers: &["inet filter input (nftables)"],
        views: &[(View::Nft, Some(1))],
    });
}

/// A chain that decides through a verdict map (`iifname vmap { "lo" : accept, "eth" : jump
/// public }`): the walk follows the map's jump, so the opening's rule goes into the chain the
/// map sends outside traffic to, just before its drop; reached from outside, and gone again
/// with nothing else changed once it is removed.
#[test]
fn a_chain_that_drops_through_a_verdict_map_gets_the_rule_where_the_map_sends_it() {
    let lab = new_lab();
    let net = adoption(&lab);
    let node = &net.node;
    let _listeners: Vec<_> = [SSH, SERVED, OPENED]
        .iter()
        .map(|p| node.listen_tcp(*p).expect("listener on the node"))
        .collect();
    load_vmap_drop(node, lab.dir());
    let before = View::Nft.read(node);
    expect(
        &net.outside,
        &node_public(),
        OPENED,
        Probe::TimedOut,
        "the map's chain drops it",
    );
    let host = Host::new(node);
    let report = host.apply(&declaration(&[opening("web/api", OPENED, "incoming")]));
    assert_eq!(outcome(&report, "web/api"), "created", "{report:#}");
    assert!(
        report["not_admitted"]
            .as_array()
            .is_none_or(|a| a.is_empty()),
        "{report:#}"
    );
    let status = host.status();
    assert_eq!(
        presence(&status, "web/api"),
        ["inet filter input (nftables)=present"]
    );
    assert_eq!(status_verdict(&status, "web/api"), "present", "{status:#}");
    let listed = run_ok(node, &["nft", "list", "chain", "inet", "filter", "public"]);
    let lines: Vec<&str> = listed.lines().map(str::trim).collect();
    let at = lines
        .iter()
        .position(|l| is_marked(l))
        .unwrap_or_else(|| panic!("no marked rule in chain public:\n{listed}"));
    assert_eq!(
        lines.get(at + 1),
        Some(&"drop"),
        "just before the drop:\n{listed}"
    );
    expect(
        &net.outside,
        &node_public(),
        OPENED,
        Probe::Reached,
        "opened",
    );
    expect(
        &net.outside,
        &node_public(),
        SERVED,
        Probe::Reached,
        "served stays",
    );
    expect(
        &net.outside,
        &node_public(),
        CLOSED,
        Probe::TimedOut,
        "undeclared stays closed",
    );
    let briefing = host.json(&["briefing", "--json"]);
    assert_eq!(briefing["outcome"], "ok", "{briefing:#}");
    host.apply(&declaration(&[]));
    assert_eq!(
        View::Nft.read(node),
        before,
        "removed, nothing else changed"
    );
    expect(
        &net.outside,
        &node_public(),
        OPENED,
        Probe::TimedOut,
        "closed again",
    );
}

#[test]
fn an_opening_goes_through_iptables_nft_in_its_own_terms() {
    incoming_opening_through(&FoundRuleset {
        load: load_iptables_nft,
        kind: "iptables-nft",
        layers: &[
            "ip filter INPUT (iptables-nft)",
            "ip6 filter INPUT (iptables-nft)",
        ],
        views: &[
            (View::Save("iptables-nft-save"), Some(1)),
            (View::Save("ip6tables-nft-save"), Some(1)),
            // nft shows iptables' comment match as nothing, so only restoration is compared.
            (View::Nft, None),
        ],
    });
}

#[test]
fn an_opening_goes_through_iptables_legacy() {
    incoming_opening_through(&FoundRuleset {
        load: load_iptables_legacy,
        kind: "iptables-legacy",
        layers: &[
            "ip filter INPUT (iptables-legacy)",
            "ip6 filter INPUT (iptables-legacy)",
        ],
        views: &[
            (View::Save("iptables-legacy-save"), Some(1)),
            (View::Save("ip6tables-legacy-save"), Some(1)),
            (View::Nft, Some(0)),
        ],
    });
}

#[test]
fn an_opening_goes_through_a_legacy_mangle_input_chain() {
    incoming_opening_through(&FoundRuleset {
        load: load_legacy_mangle,
        kind: "iptables-legacy",
        layers: &[
            "ip mangle INPUT (iptables-legacy)",
            "ip6 mangle INPUT (iptables-legacy)",
        ],
        views: &[
            (View::Save("iptables-legacy-save"), Some(1)),
            (View::Save("ip6tables-legacy-save"), Some(1)),
            (View::Nft, Some(0)),
        ],
    });
}

#[test]
fn an_opening_goes_through_iptables_legacy_and_a_native_table_together() {
    incoming_opening_through(&FoundRuleset {
        load: load_legacy_and_nftables,
        kind: "nftables+iptables-legacy",
        layers: &[
            "inet host input (nftables)",
            "ip filter INPUT (iptables-legacy)",
            "ip6 filter INPUT (iptables-legacy)",
        ],
        views: &[
            (View::Save("iptables-legacy-save"), Some(1)),
            (View::Save("ip6tables-legacy-save"), Some(1)),
            (View::Nft, Some(1)),
        ],
    });
}

#[test]
fn a_hand_written_ip_filter_table_is_nftables_not_iptables_nft() {
    incoming_opening_through(&FoundRuleset {
        load: load_handwritten_ip_filter,
        kind: "nftables",
        layers: &["ip filter INPUT (nftables)", "ip6 filter INPUT (nftables)"],
        views: &[(View::Nft, Some(2))],
    });
}

/// An iptables-legacy machine without `nft`: the host speaks nf_tables itself and iptables only
/// through the legacy programs, so an opening works with nothing else on PATH.
#[test]
fn an_opening_works_on_a_legacy_machine_with_no_nft_installed() {
    let lab = new_lab();
    let a = adoption(&lab);
    let node = &a.node;
    load_iptables_legacy(node, lab.dir());
    let mut listeners = Vec::new();
    for port in [SSH, SERVED, OPENED] {
        listeners.push(node.listen_tcp(port).expect("a listener"));
    }
    // A PATH holding only nsenter (to enter the node) and the legacy iptables programs.
    let bin = lab.dir().join("legacy-only-bin");
    std::fs::create_dir_all(&bin).unwrap();
    for program in [
        "iptables-legacy",
        "iptables-legacy-save",
        "iptables-legacy-restore",
        "ip6tables-legacy",
        "ip6tables-legacy-save",
        "ip6tables-legacy-restore",
        "nsenter",
    ] {
        let real = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(program))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{program} is not installed"));
        std::os::unix::fs::symlink(real, bin.join(program)).unwrap();
    }
    let host = Host::new(node);
    let decl = serde_json::to_vec(&declaration(&[opening("web/api", OPENED, "incoming")])).unwrap();
    let file = lab.dir().join("legacy-only.json");
    std::fs::write(&file, decl).unwrap();
    let root = host.root();
    let run = |args: &[&str]| {
        let mut argv = vec![MESH, "--root", root.to_str().unwrap()];
        argv.extend_from_slice(args);
        let mut cmd = node.command(&argv);
        cmd.env("PATH", &bin);
        lab::run(&mut cmd).expect("mesh-host runs")
    };
    let out = run(&["apply", file.to_str().unwrap(), "--json"]);
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
    let report: Value = crate::util::contract(&out.stdout);
    assert_eq!(outcome(&report, "web/api"), "created", "{report:#}");
    expect(
        &a.outside,
        &node_public(),
        OPENED,
        Probe::Reached,
        "the opening, written with no nft on PATH",
    );
    expect(
        &a.outside,
        &node_public(),
        SERVED,
        Probe::Reached,
        "the served port",
    );
    let status = run(&["firewall", "status", "--json"]);
    assert!(status.success(), "{}", status.stderr);
    let status: Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(status["kind"], "iptables-legacy", "{status:#}");
    assert_eq!(
        status["guard"]["present"], true,
        "the guard is written over netlink, not with nft"
    );
}
