//! Listing what other tools wrote: `firewall status` reads every fixture ruleset.

use super::*;

use lab::fixture;

#[test]
fn firewall_status_lists_every_fixture_ruleset() {
    let lab = new_lab();
    let node = lab.machine("fx").expect("a machine");
    let host = Host::new(&node);

    // A hand-written /etc/nftables.conf with sets, maps, vmaps, ct status, meta pkttype, and
    // same-named chains in ip, ip6 and inet tables.
    run_ok(
        &node,
        &["nft", "-f", fixture("hand-written.nft").to_str().unwrap()],
    );
    let status = host.status();
    assert_eq!(status["kind"], "nftables", "{status:#}");
    assert!(status["refusal"].is_null(), "{status:#}");
    assert_eq!(
        layers(&status),
        [
            "inet filter input (nftables) incoming can-drop",
            "ip filter INPUT (nftables) incoming can-drop",
            "ip6 filter INPUT (nftables) incoming can-drop",
        ],
        "{status:#}"
    );
    run_ok(&node, &["nft", "flush", "ruleset"]);

    // Rules in the shape Docker and an operator leave through iptables on the nf_tables backend.
    let version = run_ok(&node, &["iptables", "--version"]);
    assert!(
        version.contains("nf_tables"),
        "iptables must be iptables-nft: {version}"
    );
    run_ok(
        &node,
        &[
            "sh",
            fixture("docker-like-iptables-nft.sh").to_str().unwrap(),
        ],
    );
    let status = host.status();
    assert_eq!(status["kind"], "iptables-nft", "{status:#}");
    assert_eq!(
        layers(&status),
        [
            // The jump to DOCKER-USER could drop; INPUT only accepts.
            "ip filter FORWARD (iptables-nft) forwarded can-drop",
            "ip filter INPUT (iptables-nft) incoming passes",
        ],
        "{status:#}"
    );
    let forward = status["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["chain"] == "FORWARD")
        .unwrap();
    assert!(
        forward["evidence"].as_str().unwrap().contains("Docker"),
        "{forward:#}"
    );
    View::Save("iptables-nft-save").read(&node);
    run_ok(&node, &["nft", "flush", "ruleset"]);

    // Every single-rule construct, each listed right after it is added, so a construct that
    // breaks the listing is named.
    load_nft(
        &node,
        lab.dir(),
        "constructs.nft",
        "table inet t {
	set s4 { type ipv4_addr; }
	set cc { type ipv4_addr . inet_service; }
	chain x { }
	chain input { type filter hook input priority 0; policy accept; }
}
",
    );
    let text = std::fs::read_to_string(fixture("single-rule-constructs.txt")).unwrap();
    let mut added = 0;
    let mut refused_by_nft = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let out = node
            .run(&["nft", "add", "rule", "inet", "t", "input", line])
            .unwrap();
        if !out.success() {
            refused_by_nft.push(line.to_string());
            continue;
        }
        added += 1;
        let out = host.run(&["firewall", "status", "--json"]);
        assert!(
            out.success(),
            "firewall status failed after {line:?}:\n{}",
            out.stderr
        );
        let status: Value = crate::util::contract(&out.stdout);
        let input = status["layers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["table"] == "t" && l["chain"] == "input")
            .unwrap_or_else(|| panic!("no layer inet t input after {line:?}: {status:#}"));
        assert_eq!(input["rules"], added, "after {line:?}");
    }
    // nft 1.0.6 cannot parse a construct or two; the rest must have gone in.
    assert!(refused_by_nft.len() <= 2, "{refused_by_nft:#?}");
    let status = host.status();
    assert_eq!(status["kind"], "nftables", "{status:#}");
    assert_eq!(
        layers(&status),
        ["inet t input (nftables) incoming can-drop"],
        "{status:#}"
    );
}

/// Detection only reads: on a machine with no firewall at all, neither `firewall status` nor an
/// apply with openings creates a legacy table (listing one would make the kernel create it) or
/// any nf_tables table but the mesh's own guard.
#[test]
fn detection_creates_no_table_it_looks_for() {
    let lab = new_lab();
    let node = lab.machine("ro").expect("a machine");
    let host = Host::new(&node);
    let tables = |m: &Machine| {
        let legacy4 = run_ok(m, &["cat", "/proc/net/ip_tables_names"]);
        let legacy6 = run_ok(m, &["cat", "/proc/net/ip6_tables_names"]);
        let nft = run_ok(m, &["nft", "list", "tables"]);
        (legacy4, legacy6, nft)
    };
    let before = tables(&node);
    assert_eq!(
        before,
        (String::new(), String::new(), String::new()),
        "a fresh namespace has no tables"
    );

    let status = host.status();
    assert_eq!(status["kind"], "none", "{status:#}");
    assert_eq!(tables(&node), before, "firewall status created a table");

    // This bare machine has no private interface and no runtime publishes 8443: the briefing says
    // failed, and the apply exits 5.
    let report = host.apply_not_in_force(&declaration(&[
        opening("web/api", OPENED, "incoming"),
        opening("web/fwd", 8443, "forwarded"),
    ]));
    assert_eq!(outcome(&report, "web/api"), "unchanged", "{report:#}");
    let (legacy4, legacy6, nft) = tables(&node);
    assert_eq!(
        (legacy4.as_str(), legacy6.as_str()),
        ("", ""),
        "an apply created a legacy table"
    );
    assert_eq!(
        nft.trim(),
        "table inet mesh_host",
        "only the guard's table may appear"
    );
}
