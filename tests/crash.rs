//! The crash-safety sweep: the host is killed with SIGKILL at every resource boundary (after a
//! change, before its record; and after the record), in the middle of every journal append and
//! of every fold of the journal into the snapshot, then applied again; the machine and store must
//! end exactly as after an uninterrupted apply. A journal line cut short must neither lose a
//! record nor invent one: the store then reads exactly as if the host had died just before it.

use crate::util::Node;
use serde_json::{json, Value};
use std::collections::BTreeMap;

fn decl(mode: &str, resources: Value) -> Value {
    json!({"version": 1, "node": "n1", "mode": mode, "taken": ["web"], "resources": resources})
}

/// The first declaration: leaves behind things the second one removes.
fn first(mode: &str) -> Value {
    decl(
        mode,
        json!([
            {"id": "old/file", "type": "file", "path": "/etc/old.conf", "content": "old"},
            {"id": "old/dir", "type": "directory", "path": "/srv/old"},
            {"id": "kept/conf", "module": "app", "type": "file", "path": "/etc/kept.conf", "content": "mesh"}
        ]),
    )
}

/// The second declaration: a create, a found file (held when adopted, replaced when converged),
/// a taken module's found file, a directory, an action and a changed file.
fn second(mode: &str) -> Value {
    decl(
        mode,
        json!([
            {"id": "new/file", "type": "file", "path": "/etc/new.conf", "content": "new", "mode": "0600"},
            {"id": "app/found", "module": "app", "type": "file", "path": "/etc/found.conf", "content": "mesh's"},
            {"id": "web/found", "module": "web", "type": "file", "path": "/etc/web.conf", "content": "mesh's web"},
            {"id": "new/dir", "type": "directory", "path": "/srv/new", "mode": "0700"},
            {"id": "act", "type": "action", "run": ["touch", "acted"], "verify": ["test", "-e", "acted"]},
            {"id": "kept/conf", "module": "app", "type": "file", "path": "/etc/kept.conf", "content": "mesh v2"}
        ]),
    )
}

fn prepared(mode: &str) -> Node {
    let node = Node::new();
    node.write("/etc/found.conf", "predecessor's");
    node.write("/etc/web.conf", "predecessor's web");
    node.apply(&first(mode));
    node
}

/// The store as the host reads it, with the briefing's time and the records' stamps (this
/// root's inodes and times) blanked.
fn state(node: &Node) -> Value {
    let mut v = node.state();
    if let Some(b) = v.get_mut("briefing") {
        b["at"] = Value::Null;
    }
    crate::util::without_stamps(&mut v);
    v
}

fn journal(node: &Node) -> Option<Vec<u8>> {
    std::fs::read(node.path("/var/lib/mesh-host/state.journal")).ok()
}

/// Applies the second declaration again after a kill at `point` and checks the machine and store
/// end as after an uninterrupted apply.
fn recovers(node: &Node, mode: &str, point: &str, want: &BTreeMap<String, String>) {
    let again = node.apply_env(&second(mode), &[], &[]);
    assert_eq!(
        again.code,
        Some(0),
        "{point}: re-apply failed: {}",
        again.stderr
    );
    let got = node.snapshot();
    for (k, v) in want {
        assert_eq!(got.get(k), Some(v), "{mode} {point}: {k} differs");
    }
    assert_eq!(&got, want, "{mode} {point}: machine or store differs");
}

fn sweep(mode: &str) {
    let reference = prepared(mode);
    reference.apply(&second(mode));
    let want = reference.snapshot();
    let ids = [
        "new/file",
        "app/found",
        "web/found",
        "new/dir",
        "act",
        "kept/conf",
        "old/file",
        "old/dir",
    ];
    let mut kills = 0;
    for id in ids {
        for kind in ["after-change", "after-record"] {
            let mut n = 1;
            loop {
                let node = prepared(mode);
                let point = format!("{kind}:{id}#{n}");
                let r = node.apply_env(&second(mode), &[], &[("MESH_HOST_FAILPOINT", &point)]);
                if r.signal.is_none() {
                    assert_eq!(r.code, Some(0), "{point}: {}", r.stderr);
                    // Every resource of this declaration changes the machine and is recorded,
                    // so each of its boundaries must be reached at least once.
                    assert!(n > 1, "{mode} {point}: this boundary was never reached");
                    break;
                }
                assert_eq!(r.signal, Some(9), "{point}");
                kills += 1;
                recovers(&node, mode, &point, &want);
                n += 1;
            }
        }
    }
    eprintln!("{mode}: {kills} kills");
    assert!(kills >= ids.len(), "only {kills} boundaries were exercised");
}

/// A journal record without the stamps it carries, wherever they are.
fn unstamped(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("stamp");
            m.values_mut().for_each(unstamped);
        }
        Value::Array(a) => a.iter_mut().for_each(unstamped),
        _ => {}
    }
}

/// Every journal append, killed before it and killed half-way through it: the two stores must
/// read the same, and applying again must end as the uninterrupted apply.
fn torn_sweep(mode: &str) {
    let reference = prepared(mode);
    reference.apply(&second(mode));
    let want = reference.snapshot();
    let ids = [
        "new/file",
        "app/found",
        "web/found",
        "new/dir",
        "act",
        "kept/conf",
        "old/file",
        "old/dir",
    ];
    let mut torn = 0;
    for id in ids {
        let mut n = 1;
        loop {
            let before = prepared(mode);
            let point = format!("append:{id}#{n}");
            let r = before.apply_env(&second(mode), &[], &[("MESH_HOST_FAILPOINT", &point)]);
            let cut = prepared(mode);
            let torn_point = format!("torn-append:{id}#{n}");
            let c = cut.apply_env(&second(mode), &[], &[("MESH_HOST_FAILPOINT", &torn_point)]);
            if r.signal.is_none() {
                assert_eq!(r.code, Some(0), "{point}: {}", r.stderr);
                assert_eq!(c.code, Some(0), "{torn_point}: {}", c.stderr);
                // Every resource of this declaration is recorded, so each journals something.
                assert!(n > 1, "{mode} {point}: no append was ever reached");
                break;
            }
            assert_eq!(r.signal, Some(9), "{point}");
            assert_eq!(c.signal, Some(9), "{torn_point}: {}", c.stderr);
            // The torn run really left part of a line behind, after what the other run has
            // (the header names each node's own snapshot, whose briefing time differs, and every
            // line's checksum is chained from the header's: the records are compared without
            // the header and without their checksums).
            // A whole line's record is compared without its stamps (each root's own inodes and
            // times); the torn last line, which does not read, as it is.
            let records = |j: Option<Vec<u8>>| -> Vec<u8> {
                let j = j.unwrap_or_default();
                let mut out = Vec::new();
                for line in j.split_inclusive(|&b| b == b'\n').skip(1) {
                    let record = line.get(9..).unwrap_or(line);
                    match serde_json::from_slice::<Value>(record) {
                        Ok(mut v) => {
                            unstamped(&mut v);
                            out.extend(serde_json::to_vec(&v).unwrap());
                            out.push(b'\n');
                        }
                        Err(_) => out.extend_from_slice(record),
                    }
                }
                out
            };
            let (j0, j1) = (records(journal(&before)), records(journal(&cut)));
            assert!(
                j1.len() > j0.len() && j1.starts_with(&j0) && !j1.ends_with(b"\n"),
                "{mode} {torn_point}: no torn line in the journal"
            );
            assert_eq!(
                state(&cut),
                state(&before),
                "{mode} {torn_point}: a torn line lost or invented a record"
            );
            torn += 1;
            recovers(&cut, mode, &torn_point, &want);
            n += 1;
        }
    }
    eprintln!("{mode}: {torn} torn appends");
    assert!(torn >= 2 * ids.len() - 2, "only {torn} appends were torn");
}

/// Every fold of the journal into a new snapshot, killed with half the snapshot written and
/// killed after the rename but before the journal was removed.
fn fold_sweep(mode: &str) {
    let reference = prepared(mode);
    reference.apply(&second(mode));
    let want = reference.snapshot();
    let final_state = state(&reference);
    let mut stale = 0;
    for kind in ["fold-torn", "fold-renamed"] {
        let mut n = 1;
        loop {
            let node = prepared(mode);
            let point = format!("{kind}:store#{n}");
            let r = node.apply_env(&second(mode), &[], &[("MESH_HOST_FAILPOINT", &point)]);
            if r.signal.is_none() {
                assert_eq!(r.code, Some(0), "{point}: {}", r.stderr);
                // An apply folds at its start and at its end.
                assert!(n > 2, "{mode} {point}: only {} folds", n - 1);
                break;
            }
            assert_eq!(r.signal, Some(9), "{point}");
            if kind == "fold-renamed" && journal(&node).is_some() {
                // The last fold's snapshot is in place and its journal is stale: read as the
                // snapshot alone, which is the finished apply's store.
                assert_eq!(state(&node), final_state, "{mode} {point}: stale journal");
                stale += 1;
            }
            recovers(&node, mode, &point, &want);
            n += 1;
        }
    }
    assert!(stale >= 1, "{mode}: no fold ever left a stale journal");
}
#[test]
fn crash_at_every_boundary_converged() {
    sweep("converged");
}

#[test]
fn crash_at_every_boundary_adopted() {
    sweep("adopted");
}

#[test]
fn torn_journal_appends_converged() {
    torn_sweep("converged");
}

#[test]
fn torn_journal_appends_adopted() {
    torn_sweep("adopted");
}

#[test]
fn crash_in_every_fold_converged() {
    fold_sweep("converged");
}

#[test]
fn crash_in_every_fold_adopted() {
    fold_sweep("adopted");
}

/// A store the host wrote before the journal existed (`state.json` alone, format version 1)
/// opens: reconcile applies its declaration, keeps its records, and writes it back in the new
/// format.
#[test]
fn a_store_of_the_previous_format_opens_and_reconciles() {
    let node = Node::new();
    node.write("/etc/a.conf", "a");
    node.write("/etc/found.conf", "predecessor's");
    let decl = decl(
        "adopted",
        json!([
            {"id": "a", "type": "file", "path": "/etc/a.conf", "content": "a"},
            {"id": "app/found", "module": "app", "type": "file", "path": "/etc/found.conf", "content": "mesh's"},
            {"id": "b", "type": "file", "path": "/etc/b.conf", "content": "b"}
        ]),
    );
    let digest = |s: &str| mesh_host::store::digest(s.as_bytes());
    let v1 = json!({
        "version": 1,
        "node": "n1",
        "mode": "adopted",
        "taken": ["web"],
        "declaration": decl,
        "source": "link",
        "owned": [{"id": "a", "shape": "file", "key": "/etc/a.conf", "digest": digest("a")}],
        "held": [{"id": "app/found", "module": "app", "shape": "file", "key": "/etc/found.conf", "digest": digest("predecessor's")}],
        "originals": [],
        "pending": {"record": {"id": "b", "shape": "file", "key": "/etc/b.conf", "digest": digest("b")}}
    });
    node.write(
        "/var/lib/mesh-host/state.json",
        &serde_json::to_string_pretty(&v1).unwrap(),
    );
    let r = node.run(&["reconcile", "--json"]);
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.outcome("a"), "unchanged");
    assert_eq!(r.outcome("app/found"), "held");
    assert_eq!(r.outcome("b"), "created");
    let s = node.state();
    assert_eq!(s["version"], mesh_host::store::STORE_VERSION);
    let written = node.read("/var/lib/mesh-host/state.json").unwrap();
    assert!(
        written.starts_with("{\n  \"checksum\": \"sha256:"),
        "written back with its checksum: {written}"
    );
    let owned: Vec<&str> = s["owned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert_eq!(owned, ["a", "b"]);
    assert_eq!(s["held"][0]["id"], "app/found");
    assert_eq!(
        node.read("/etc/found.conf").as_deref(),
        Some("predecessor's")
    );
    assert_eq!(node.read("/etc/b.conf").as_deref(), Some("b"));
}
