//! The crash-safety sweep: the host is killed with SIGKILL at every resource boundary (after a
//! change, before its record; and after the record), then applied again; the machine and store
//! must end exactly as after an uninterrupted apply.

use crate::util::Node;
use serde_json::{json, Value};

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
                let again = node.apply_env(&second(mode), &[], &[]);
                assert_eq!(
                    again.code,
                    Some(0),
                    "{point}: re-apply failed: {}",
                    again.stderr
                );
                let got = node.snapshot();
                for (k, v) in &want {
                    assert_eq!(got.get(k), Some(v), "{mode} {point}: {k} differs");
                }
                assert_eq!(got, want, "{mode} {point}: machine or store differs");
                n += 1;
            }
        }
    }
    eprintln!("{mode}: {kills} kills");
    assert!(kills >= ids.len(), "only {kills} boundaries were exercised");
}

#[test]
fn crash_at_every_boundary_converged() {
    sweep("converged");
}

#[test]
fn crash_at_every_boundary_adopted() {
    sweep("adopted");
}
