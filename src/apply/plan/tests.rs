//! The preview's unit tests against the recording firewall fake: its text folded unless
//! verbose, its openings read layer by layer, the guard read from both layers, another node's
//! firewall refused.

use super::*;

/// A file's step with `outcome`, for the preview's tests here and its summary's.
pub(super) fn step(id: &str, outcome: Outcome) -> Step {
    Step {
        id: id.into(),
        shape: Shape::File,
        key: format!("/etc/{id}"),
        outcome,
        verb: verb(outcome),
        detail: "why".into(),
        diff: Vec::new(),
        attributes: Vec::new(),
    }
}

#[test]
fn unchanged_resources_are_folded_into_the_count_unless_verbose() {
    let mut p = Plan::empty("reconcile", "n1", "converged", Source::Local);
    p.entries = vec![
        step("same", Outcome::Unchanged),
        step("new", Outcome::Created),
    ];
    p.entries[1].diff = vec!["--- /etc/new (now)".into()];
    p.entries[1].attributes = vec!["mode 0600 → 0644".into()];
    p.summary = Summary::of(&p.entries);
    p.pending = true;
    let folded = p.render(false);
    assert!(!folded.contains("/etc/same"), "{folded}");
    assert!(folded.contains("would create   new"), "{folded}");
    assert!(
        folded.contains("\n    mode 0600 → 0644\n    --- /etc/new (now)\n"),
        "{folded}"
    );
    assert!(
        folded.contains("(1 unchanged not listed; --verbose lists them)"),
        "{folded}"
    );
    assert!(
        folded.ends_with("Plan: 1 to create, 1 unchanged.\n"),
        "{folded}"
    );
    let all = p.render(true);
    assert!(all.contains("unchanged      same"), "{all}");
    assert!(!all.contains("not listed"), "{all}");
}

/// The methods of the node's firewall that write: a preview calls none of them.
const WRITES: [&str; 12] = [
    "guard_table",
    "guard_bpf",
    "remove_guard_bpf",
    "remove_guard_table",
    "converge",
    "converge_all",
    "ensure_filter",
    "remove_filter",
    "survey",
    "flip",
    "unflip",
    "monitor",
];

fn adopted(resources: serde_json::Value) -> Declaration {
    let v = serde_json::json!({
        "version": 1, "node": "n1", "mode": "adopted",
        "settings": {
            "ports": {"store": 15432, "bus": 5672, "broker_management": 15672,
                      "registry": 5000, "hub": 51820}
        },
        "resources": resources
    });
    crate::declaration::validate_value(&v, Source::Local)
        .unwrap_or_else(|p| panic!("refused:\n{p}"))
}

/// A preview of `decl` under a fresh root, the node's firewall read through `fake`.
fn preview(fake: &node_firewall::fake::Recording, decl: &Declaration) -> Result<Plan, Refused> {
    let root = tempfile::tempdir().unwrap();
    let runner = run::RecordingRunner::default();
    let handed = fake.clone();
    let open = move |_: &Path,
                     _: &str,
                     _: run::Deadlines|
          -> Box<dyn node_firewall::NodeFirewallRead> { Box::new(handed.clone()) };
    plan_through(&open, root.path(), &runner, "apply", decl, Source::Local)
}

#[test]
fn the_fake_drives_the_preview_of_openings_layer_by_layer_and_of_the_guard() {
    use node_firewall::{Presence, State as Layer};
    let fake = node_firewall::fake::Recording::default();
    {
        let mut s = fake.script.borrow_mut();
        s.presence.insert(
            "web/http".into(),
            vec![
                Presence {
                    layer: node_firewall::fake::layer_id(
                        node_firewall::Backend::IptablesNft,
                        node_firewall::Family::Ipv4,
                        "filter",
                        "INPUT",
                    ),
                    chain: None,
                    state: Layer::Missing,
                },
                Presence {
                    layer: node_firewall::fake::layer_id(
                        node_firewall::Backend::Nftables,
                        node_firewall::Family::Inet,
                        "fw",
                        "input",
                    ),
                    chain: Some("input".into()),
                    state: Layer::Present,
                },
            ],
        );
        s.presence.insert(
            "web/https".into(),
            vec![Presence {
                layer: node_firewall::fake::layer_id(
                    node_firewall::Backend::Nftables,
                    node_firewall::Family::Inet,
                    "fw",
                    "input",
                ),
                chain: Some("input".into()),
                state: Layer::Present,
            }],
        );
    }
    let decl = adopted(serde_json::json!([
        {"id": "web/http", "type": "opening", "port": 80, "proto": "tcp",
         "from": "anywhere", "path": "incoming"},
        {"id": "web/https", "type": "opening", "port": 443, "proto": "tcp",
         "from": "anywhere", "path": "incoming"}
    ]));
    let plan = preview(&fake, &decl).expect("a plan");

    let methods = fake.methods();
    assert!(
        methods.iter().all(|m| !WRITES.contains(m)),
        "a preview wrote: {methods:?}"
    );
    // The claim first, then the guard's two layers, then each opening's layers and verdict.
    assert_eq!(
        methods,
        [
            "claimed_by",
            "guard_status",
            "bpffs",
            "kind",
            "presence",
            "verdicts",
            "kind",
            "presence",
            "verdicts"
        ]
    );
    assert_eq!(fake.first("presence").unwrap().openings, ["web/http"]);

    let by_id = |id: &str| plan.entries.iter().find(|e| e.id == id).unwrap();
    assert_eq!(by_id("web/http").outcome, Outcome::Created);
    assert_eq!(
        by_id("web/http").detail,
        "would be written in ip filter INPUT (iptables-nft)"
    );
    assert_eq!(by_id("web/https").outcome, Outcome::Unchanged);
    assert_eq!(
        by_id("web/https").detail,
        "in force through the found firewall (nftables (fake))"
    );
    let http = &plan.openings[0];
    assert_eq!(http.kind, "nftables (fake)");
    assert_eq!(
        http.layers
            .iter()
            .map(|l| (l.layer.as_str(), l.writes))
            .collect::<Vec<_>>(),
        [
            ("ip filter INPUT (iptables-nft)", true),
            ("inet fw input (nftables)", false)
        ]
    );
    assert_eq!(http.verdict_now, None);

    let guard = plan.guard.expect("an adopted node's guard");
    assert!(!guard.in_force && !guard.table && !guard.bpf);
    assert_eq!(guard.ports, [15432, 15672]);
    assert_eq!(
        guard.detail,
        "no nf_tables socket; table inet mesh_host would be written; no bpffs at \
         /sys/fs/bpf, so no netfilter BPF layer here (the table holds alone)"
    );
}

#[test]
fn a_preview_reads_the_guard_as_standing_from_both_layers() {
    let fake = node_firewall::fake::Recording::default();
    {
        let mut s = fake.script.borrow_mut();
        s.guard = Some(node_firewall::GuardStatus {
            present: true,
            table: true,
            plain: true,
            rules: vec![
                "mesh-host:guard/store/tcp/15432".into(),
                "mesh-host:guard/broker-management/tcp/15672".into(),
            ],
            ..Default::default()
        });
        s.bpffs = true;
        s.bpf = node_firewall::bpf::BpfStatus {
            program: Some("mh_guard_v2".into()),
            links: node_firewall::bpf::HOOKS
                .iter()
                .map(|(_, _, n)| n.to_string())
                .collect(),
            ..Default::default()
        };
    }
    let plan = preview(&fake, &adopted(serde_json::json!([]))).expect("a plan");
    let guard = plan.guard.expect("an adopted node's guard");
    assert!(
        guard.in_force && guard.table && guard.bpf,
        "{}",
        guard.detail
    );
    assert!(
        guard
            .detail
            .starts_with("table inet mesh_host in force (2 rules); would be checked again; "),
        "{}",
        guard.detail
    );
    assert!(!fake.methods().contains(&"bpf_supported"));
}

#[test]
fn a_preview_refuses_another_node_s_firewall_as_the_act_would() {
    let fake = node_firewall::fake::Recording::default();
    fake.script.borrow_mut().claimed_by = Some("n2".into());
    let decl = adopted(serde_json::json!([
        {"id": "web/http", "type": "opening", "port": 80, "proto": "tcp",
         "from": "anywhere", "path": "incoming"}
    ]));
    let refused = preview(&fake, &decl).expect_err("another node's rules are in force");
    assert_eq!(refused.code, 3);
    let claimed = node_firewall::Error::Claimed {
        other: "n2".into(),
        node: "n1".into(),
    };
    assert_eq!(refused.why, claimed.to_string());
    assert_eq!(fake.methods(), ["claimed_by"]);
}
