//! A lost store recovered for removal, through the built binary with source `local`: the records
//! of what the node owned, handed back in the declaration's `recovered`, remove what is no longer
//! declared only where the machine still shows what a record says, and a store that exists
//! ignores them.

use crate::util::Node;
use serde_json::{json, Value};

fn file(id: &str, content: &str) -> Value {
    json!({"id": id, "type": "file", "path": format!("/etc/recover/{id}"), "content": content, "mode": "0644"})
}

fn decl(resources: Value) -> Value {
    json!({"version": 1, "node": "recovering", "mode": "converged", "taken": [], "resources": resources})
}

/// Applies four files and a directory, then loses `state.json` (and its journal), keeping the
/// records as the mesh would have them from the report.
fn applied_then_lost(node: &Node) -> Value {
    let all = json!([
        file("a", "a\n"),
        file("b", "b\n"),
        file("c", "c\n"),
        file("d", "d\n"),
        {"id": "dir", "type": "directory", "path": "/srv/recover", "mode": "0755"}
    ]);
    node.apply(&decl(all));
    let owned = node.state()["owned"].clone();
    assert_eq!(owned.as_array().unwrap().len(), 5, "{owned:#}");
    for f in ["state.json", "state.journal"] {
        let _ = std::fs::remove_file(node.path(&format!("/var/lib/mesh-host/{f}")));
    }
    owned
}

#[test]
fn recovered_records_remove_the_orphans_as_recorded_and_keep_what_changed() {
    let node = Node::new();
    let owned = applied_then_lost(&node);
    // Someone changes one orphan meanwhile.
    node.write("/etc/recover/d", "edited by hand\n");
    let mut smaller = decl(json!([file("a", "a\n")]));
    smaller["recovered"] = owned;
    let r = node.apply(&smaller);
    assert_eq!(r.outcome("a"), "unchanged");
    for id in ["b", "c", "dir"] {
        assert_eq!(r.outcome(id), "removed", "{id}: {:#}", r.json());
    }
    assert_eq!(r.outcome("d"), "changed-by-something-else");
    assert!(!node.path("/etc/recover/b").exists());
    assert!(!node.path("/etc/recover/c").exists());
    assert!(!node.path("/srv/recover").exists());
    assert_eq!(
        node.read("/etc/recover/d").as_deref(),
        Some("edited by hand\n")
    );
    let report = r.json();
    assert_eq!(report["recovered"]["records"], 5, "{report:#}");
    assert_eq!(report["recovered"]["kept"], json!(["d"]));
    // The briefing says the store was rebuilt and what the recovered records did.
    let state = node.state();
    let store_line = state["briefing"]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["subject"] == "store")
        .unwrap_or_else(|| panic!("no store line: {:#}", state["briefing"]))
        .clone();
    let detail = store_line["detail"].as_str().unwrap();
    assert!(detail.starts_with("rebuilt"), "{detail}");
    assert!(detail.contains("(dir, c, b)"), "{detail}");
    assert!(detail.contains("changed since (d)"), "{detail}");
    // The records are never stored: the stored declaration has none, and nothing was recorded
    // from them.
    assert!(state["declaration"].get("recovered").is_none(), "{state:#}");
    let ids: Vec<&str> = state["owned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a"]);
}

#[test]
fn a_store_that_exists_ignores_recovered_records() {
    let node = Node::new();
    let owned = applied_then_lost(&node);
    node.apply(&decl(json!([file("a", "a\n"), file("b", "b\n")])));
    // The store exists again: records handed back now are not read.
    let mut smaller = decl(json!([file("a", "a\n")]));
    smaller["recovered"] = owned;
    let r = node.apply(&smaller);
    assert_eq!(r.outcome("b"), "forgotten", "{:#}", r.json());
    assert!(r.json()["recovered"].is_null());
    for id in ["c", "d"] {
        assert!(node.path(&format!("/etc/recover/{id}")).exists(), "{id}");
    }
}

#[test]
fn a_declared_resource_at_a_recorded_key_is_the_declarations() {
    let node = Node::new();
    let owned = applied_then_lost(&node);
    // The file once recorded as `c` is now declared under another id: the declaration wins.
    let mut moved = decl(json!([
        {"id": "c-renamed", "type": "file", "path": "/etc/recover/c", "content": "c\n", "mode": "0644"}
    ]));
    moved["recovered"] = owned;
    let r = node.apply(&moved);
    assert_eq!(r.outcome("c-renamed"), "unchanged", "{:#}", r.json());
    assert!(r.json()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["id"] != "c"));
    assert_eq!(node.read("/etc/recover/c").as_deref(), Some("c\n"));
}

#[test]
fn malformed_recovered_records_are_refused_with_the_document() {
    let node = Node::new();
    let mut d = decl(json!([file("a", "a\n")]));
    d["recovered"] = json!([
        {"id": "x", "shape": "file", "key": "relative/path", "digest": "sha256:00"},
        {"id": "y", "shape": "teapot", "key": "k"},
        {"id": "z", "shape": "file", "key": "/etc/z", "extra": 1}
    ]);
    let r = node.apply_env(&d, &[], &[]);
    assert_eq!(r.code, Some(2), "{}\n{}", r.stdout, r.stderr);
    for p in [
        "recovered[0].key",
        "recovered[1].shape",
        "recovered[2].extra",
    ] {
        assert!(
            r.stderr.contains(p) || r.stdout.contains(p),
            "{p}: {}",
            r.stderr
        );
    }
    assert!(!node.path("/etc/recover/a").exists());
}
