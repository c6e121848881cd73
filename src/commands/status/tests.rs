//! The unit tests of `firewall status`: the typed status read through the recording fake, its
//! JSON against the contract and its text, the guard's words.

use super::*;
use crate::node_firewall::fake::{input_layer, Recording};
use crate::node_firewall::{bpf::BpfStatus, Backend, Found, GuardStatus, Held, Presence};
use serde_json::json;

#[test]
fn a_verdict_s_json_says_its_state_words_and_summary_from_one_summary() {
    use node_firewall::eval::{Addrs, Decider, Fam, Fate, Part, Refusal};
    let by = Decider {
        table: "netdev filter".into(),
        chain: "ingress_eth0".into(),
        handle: Some(3),
        index: Some(0),
        text: "tcp dport 9000 drop".into(),
    };
    let part = |fam: Fam, iif: &str, fate: Fate| Part {
        fam,
        iif: iif.into(),
        sources: Addrs::all(fam),
        fate,
    };
    let refused = Fate::Refused {
        by,
        why: Refusal::Port,
    };
    let v = Verdict {
        parts: vec![
            part(Fam::V4, "eth0", refused.clone()),
            part(Fam::V4, "mesh0", Fate::Admitted),
            part(Fam::V6, "eth0", refused),
            part(Fam::V6, "mesh0", Fate::Admitted),
        ],
        none: None,
    };
    let j = serde_json::to_value(VerdictStatus::of(&v)).unwrap();
    assert_eq!(j["state"], "refused");
    assert_eq!(j["detail"], v.describe());
    assert_eq!(
        j["summary"],
        json!([
            {"fate": "refused", "on": [{"interface": "eth0", "families": ["ipv4", "ipv6"]}],
             "sources": null, "everywhere": false,
             "rule": "netdev filter ingress_eth0: tcp dport 9000 drop"},
            {"fate": "admitted", "on": [{"interface": "mesh0", "families": ["ipv4", "ipv6"]}],
             "sources": null, "everywhere": false, "rule": null},
        ])
    );
    assert_eq!(j["parts"].as_array().map(Vec::len), Some(4));
}

#[test]
fn the_guards_layers_are_named_by_what_holds() {
    assert_eq!(
        super::layers_named(true, true, false),
        "guard: table inet mesh_host + netfilter BPF (pinned): holds through any ruleset change"
    );
    assert!(
        super::layers_named(true, false, false).starts_with("guard: table inet mesh_host alone")
    );
    assert!(super::layers_named(true, false, false).contains("8.6 ms per reload"));
    assert!(super::layers_named(false, true, false).starts_with("guard: netfilter BPF alone"));
    assert_eq!(
        super::layers_named(false, false, false),
        "guard: no layer in force"
    );
    // After converge: the table holds the derived filter, not the guard.
    assert!(super::layers_named(false, false, true)
        .starts_with("guard: none; the derived filter (table inet mesh_host"));
}

/// The guard's table as read: `flags` one of `plain`, `owned` (by port 7), `orphan`,
/// `dormant`; with the derived filter's two chains when `filter`.
fn table(present: bool, table: bool, flags: &str, filter: bool) -> GuardTableState {
    GuardTableState::Read {
        present,
        table,
        plain: flags == "plain",
        owned: flags == "owned",
        orphan: flags == "orphan",
        dormant: flags == "dormant",
        owner: (flags == "owned").then_some(7),
        chains: Vec::new(),
        rules: Vec::new(),
        filter: filter.then(|| FilterChains {
            chains: vec!["input".into(), "forward".into()],
            rules: 9,
        }),
    }
}

#[test]
fn the_guard_is_rendered_by_its_table() {
    let render = |g: GuardTableState| super::guard_state(&g);
    assert!(render(table(false, false, "", false)).starts_with("absent"));
    let none = GuardTableState::NoNfTables {
        present: false,
        table: false,
        note: "the kernel has no nf_tables",
    };
    assert!(render(none).starts_with("absent"));
    assert!(render(table(true, true, "plain", false)).starts_with("present, plain table"));
    assert!(
        render(table(true, true, "owned", false)).starts_with("present, held by netlink port 7")
    );
    assert!(render(table(true, true, "orphan", false)).contains("orphaned"));
    assert!(render(table(true, true, "dormant", false)).contains("dormant"));
    // The table's name alone is no guard: after converge it holds only the derived filter.
    let converged = render(table(false, true, "plain", true));
    assert_eq!(
        converged,
        "no guard: table inet mesh_host holds only the derived filter (chains input and \
         forward), as on a converged node"
    );
    assert!(!converged.contains("present"));
    assert_eq!(
        render(table(false, true, "dormant", false)),
        "no guard: table inet mesh_host holds no guard rules; it is dormant, so not in force; \
         the next apply or reconcile replaces it"
    );
}

fn stored(resources: serde_json::Value) -> State {
    let v = json!({
        "version": 1, "node": "n1", "mode": "adopted",
        "settings": {
            "ports": {"store": 15432, "bus": 5672, "broker_management": 15672,
                      "registry": 5000, "hub": 51820}
        },
        "resources": resources
    });
    let decl = crate::declaration::validate_value(&v, crate::declaration::Source::Local)
        .unwrap_or_else(|p| panic!("refused:\n{p}"));
    State {
        settings: decl.settings.clone(),
        declaration: Some(decl),
        ..State::default()
    }
}

/// A fake whose found firewall is iptables-nft with one dropping INPUT chain, where `web/http`
/// is missing and refused by the operator's rule, the guard's table stands with its BPF layer
/// pinned and attached.
fn scripted() -> Recording {
    let fake = Recording::default();
    {
        let mut s = fake.script.borrow_mut();
        s.found = Found {
            layers: vec![input_layer(Backend::IptablesNft, 4, true)],
            notes: vec!["ip6tables-legacy: not installed".into()],
            ..Found::default()
        };
        s.presence.insert(
            "web/http".into(),
            vec![Presence {
                layer: node_firewall::fake::layer_id(
                    node_firewall::Backend::IptablesNft,
                    node_firewall::Family::Ipv4,
                    "filter",
                    "INPUT",
                ),
                chain: None,
                state: node_firewall::State::Missing,
            }],
        );
        s.verdicts.insert("web/http".into(), refused_on_eth0());
        s.guard = Some(GuardStatus {
            present: true,
            table: true,
            plain: true,
            chains: vec!["prerouting".into(), "input".into(), "forward".into()],
            rules: vec!["mesh-host:guard/store/tcp/15432".into()],
            ..GuardStatus::default()
        });
        s.bpf = BpfStatus {
            program: Some("mh_guard_v2".into()),
            links: bpf::HOOKS.iter().map(|(_, _, n)| n.to_string()).collect(),
            link_ids: vec![11, 12, 13, 14],
            ..BpfStatus::default()
        };
        s.held = Held {
            links: bpf::HOOKS
                .iter()
                .zip(11..)
                .map(|((pf, hook, _), id)| {
                    let mut l = bpf::LinkInfo::default();
                    (l.id, l.pf, l.hooknum) = (id, *pf, *hook);
                    l
                })
                .collect(),
            refused: None,
        };
    }
    fake
}

fn refused_on_eth0() -> Verdict {
    use node_firewall::eval::{Addrs, Decider, Fam, Fate, Part, Refusal};
    let by = Decider {
        table: "ip filter".into(),
        chain: "INPUT".into(),
        handle: Some(3),
        index: Some(0),
        text: "tcp dport 80 drop".into(),
    };
    Verdict {
        parts: vec![Part {
            fam: Fam::V4,
            iif: "eth0".into(),
            sources: Addrs::all(Fam::V4),
            fate: Fate::Refused {
                by,
                why: Refusal::Port,
            },
        }],
        none: None,
    }
}

#[test]
fn status_through_the_fake_says_each_opening_each_layer_and_the_guard() {
    let fake = scripted();
    let state = stored(json!([
        {"id": "web/http", "type": "opening", "port": 80, "proto": "tcp", "from": "anywhere",
         "path": "incoming"}
    ]));
    let st = read_status(&mut fake.clone(), Some(&state)).expect("the fake answers");
    // Only reads were asked, the openings' in one call each.
    assert_eq!(
        fake.methods(),
        [
            "detected",
            "presence",
            "verdicts",
            "guard_status",
            "bpf_held",
            "bpf_pinned"
        ]
    );
    assert_eq!(fake.first("presence").unwrap().openings, ["web/http"]);

    let doc = crate::json_contract::document("firewall_status", 0, &st);
    crate::json_contract::check(&doc).unwrap_or_else(|p| panic!("{p:?}\n{doc:#}"));
    let v = serde_json::to_value(&st).unwrap();
    assert_eq!(v["kind"], "iptables-nft");
    assert_eq!(v["refusal"], serde_json::Value::Null);
    assert_eq!(v["notes"], json!(["ip6tables-legacy: not installed"]));
    assert_eq!(
        v["layers"],
        json!([{"layer": "ip filter INPUT (iptables-nft)", "backend": "iptables-nft",
                "hook": "input", "path": "incoming", "device": null, "unwritable": null,
                "family": "ip", "table": "filter", "chain": "INPUT", "priority": 0,
                "policy": "drop", "rules": 4, "can_drop": true, "evidence": "the fake's"}])
    );
    let o = &v["openings"][0];
    assert_eq!(
        (&o["id"], &o["port"], &o["proto"], &o["path"]),
        (
            &json!("web/http"),
            &json!(80),
            &json!("tcp"),
            &json!("incoming")
        )
    );
    assert_eq!(o["verdict"]["state"], "refused");
    assert_eq!(
        o["verdict"]["parts"][0]["rule"],
        "ip filter INPUT: tcp dport 80 drop"
    );
    assert_eq!(
        o["layers"],
        json!([{"layer": "ip filter INPUT (iptables-nft)", "chain": null, "present": false,
                "state": "missing", "detail": node_firewall::State::Missing.describe()}])
    );
    assert_eq!(
        v["guard"],
        json!({"present": true, "table": true, "plain": true, "owned": false,
               "orphan": false, "dormant": false, "owner": null,
               "chains": ["prerouting", "input", "forward"],
               "rules": ["mesh-host:guard/store/tcp/15432"], "filter": null,
               "layers": node_firewall::LAYERS_BOTH,
               "bpf": {"pinned": true, "pins": "/sys/fs/bpf/mesh-host",
                       "program": "mh_guard_v2",
                       "links": ["link-ipv4-input", "link-ipv4-forward", "link-ipv6-input",
                                 "link-ipv6-forward"],
                       "link_ids": [11, 12, 13, 14], "ports": [], "interfaces": [],
                       "nets": [], "kernel": null, "error": null, "held": [11, 12, 13, 14],
                       "attached": true, "held_error": null}})
    );

    let text = render(&st);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "found firewall  iptables-nft");
    assert_eq!(lines[1], "note            ip6tables-legacy: not installed");
    assert_eq!(
        lines[4],
        "  input      ip filter INPUT (iptables-nft)           priority 0     policy drop     \
         4 rules  can drop  [the fake's]"
    );
    assert_eq!(
        lines[7],
        format!(
            "  web/http                 tcp/80 incoming  {}",
            refused_on_eth0().describe()
        )
    );
    assert_eq!(
        lines[8],
        format!(
            "      ip filter INPUT (iptables-nft)           rule {}",
            node_firewall::State::Missing.describe()
        )
    );
    assert!(
        lines[10].starts_with("guard           present, plain table"),
        "{text}"
    );
    assert_eq!(
        lines[11],
        format!("layers          {}", node_firewall::LAYERS_BOTH)
    );
    assert_eq!(
        lines[12],
        "bpf             mh_guard_v2 pinned in /sys/fs/bpf/mesh-host: links \
         link-ipv4-input, link-ipv4-forward, link-ipv6-input, link-ipv6-forward; ports ; \
         interfaces ; private ranges "
    );
    assert_eq!(lines[13], "  mesh-host:guard/store/tcp/15432");
    assert_eq!(lines.len(), 14, "{text}");
}

#[test]
fn status_without_nf_tables_keeps_every_key_a_script_reads() {
    let fake = Recording::default();
    fake.script.borrow_mut().held.refused = Some("EPERM".into());
    let st = read_status(&mut fake.clone(), None).expect("the fake answers");
    let doc = crate::json_contract::document("firewall_status", 0, &st);
    crate::json_contract::check(&doc).unwrap_or_else(|p| panic!("{p:?}\n{doc:#}"));
    let v = serde_json::to_value(&st).unwrap();
    assert_eq!(v["kind"], "none");
    assert_eq!(v["openings"], json!([]));
    let mut keys: Vec<&String> = v["guard"].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["bpf", "layers", "note", "present", "table"]);
    assert_eq!(v["guard"]["note"], "the kernel has no nf_tables");
    assert_eq!(v["guard"]["layers"], "guard: no layer in force");
    assert_eq!(v["guard"]["bpf"]["kernel"], "refuses the program: EPERM");
    assert_eq!(v["guard"]["bpf"]["attached"], false);
    let text = render(&st);
    assert!(text.contains("\nguard           absent: "), "{text}");
    assert!(
        text.contains("\nbpf             not attached; this kernel refuses the program: EPERM\n"),
        "{text}"
    );
}

#[test]
fn a_status_that_cannot_read_the_found_firewall_says_so() {
    let fake = Recording::default();
    fake.script.borrow_mut().fail.push("detected");
    let e = read_status(&mut fake.clone(), None).unwrap_err();
    assert!(
        format!("{e:#}").starts_with("reading the found firewall: "),
        "{e:#}"
    );
}
