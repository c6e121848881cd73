//! `mesh-host release` on a node that was never enrolled: what the host created is removed with
//! the directories it made on the way, every file it took over gets its original back byte for
//! byte with the mode it was found with, and the machine outside the store is exactly as it was
//! before the host came; the preview changes nothing; an enrolled node is refused.

use crate::util::Node;
use serde_json::json;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

/// Everything under the root but the store: the machine as a person would compare it.
fn machine(node: &Node) -> BTreeMap<String, String> {
    node.snapshot()
        .into_iter()
        .filter(|(p, _)| !p.starts_with("var"))
        .collect()
}

fn declaration() -> serde_json::Value {
    json!({"version": 1, "node": "n1", "mode": "converged", "resources": [
        {"id": "app/config", "type": "file", "path": "/etc/app/app.conf",
         "content": "written by the mesh\n", "mode": "0644"},
        {"id": "app/new", "type": "file", "path": "/etc/app/new.conf", "content": "new\n"},
        {"id": "app/deep", "type": "file", "path": "/opt/mesh/a/b/deep.conf", "content": "deep\n"},
        {"id": "app/data", "type": "directory", "path": "/srv/data"}
    ]})
}

#[test]
fn a_release_gives_the_machine_back_as_it_was_before_the_host_came() {
    let node = Node::new();
    node.write("/etc/app/app.conf", "found by the host\n");
    node.write("/etc/app/other.conf", "not the host's\n");
    std::fs::set_permissions(
        node.path("/etc/app/app.conf"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    let before = machine(&node);

    let out = node.apply(&declaration());
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(
        node.read("/etc/app/app.conf").unwrap(),
        "written by the mesh\n"
    );
    assert!(node.path("/opt/mesh/a/b/deep.conf").exists());
    let applied = node.snapshot();

    let preview = node.run(&["release", "--preview"]);
    assert_eq!(
        preview.code,
        Some(4),
        "{}\n{}",
        preview.stdout,
        preview.stderr
    );
    assert!(
        preview
            .stdout
            .contains("its original would be put back byte for byte"),
        "{}",
        preview.stdout
    );
    assert_eq!(node.snapshot(), applied, "the preview changed something");

    let out = node.run(&["release", "--json"]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    let report = out.json();
    assert!(
        report["entries"].to_string().contains("given back"),
        "{report:#}"
    );
    let after = machine(&node);
    assert_eq!(
        after, before,
        "the machine outside the store differs from before the host came"
    );
    let mode = std::fs::metadata(node.path("/etc/app/app.conf"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o640, "the original's mode");
    // The store is retired: its originals stay (nothing is lost), and a second release has
    // nothing to give back.
    assert!(!node.path("/var/lib/mesh-host/state.json").exists());
    assert!(node.path("/var/lib/mesh-host/released.json").exists());
    let again = node.run(&["release"]);
    assert_eq!(again.code, Some(3), "{}\n{}", again.stdout, again.stderr);
}

#[test]
fn an_enrolled_node_is_released_by_its_controller_not_by_hand() {
    let node = Node::new();
    let out = node.apply(&json!({"version": 1, "node": "n1", "mode": "converged",
        "resources": [{"id": "f", "type": "file", "path": "/etc/f", "content": "x\n"}]}));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    node.write("/var/lib/mesh-host/link.json", "{}");
    let applied = node.snapshot();
    let out = node.run(&["release", "--json"]);
    assert_eq!(out.code, Some(3), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.json()["refused"].to_string().contains("is enrolled"),
        "{}",
        out.stdout
    );
    assert_eq!(
        node.snapshot(),
        applied,
        "a refused release changed something"
    );
}

#[test]
fn a_recovered_record_naming_a_parent_not_above_its_key_is_refused() {
    let node = Node::new();
    let decl = json!({"version": 1, "node": "n1", "mode": "converged", "resources": [],
        "recovered": [{"id": "x", "shape": "file", "key": "/srv/x/f",
                       "parents": ["/etc", "/srv/x"]}]});
    let file = node.dir.path().join("decl.json");
    std::fs::write(&file, decl.to_string()).unwrap();
    let out = node.run(&["apply", file.to_str().unwrap()]);
    assert_eq!(out.code, Some(2), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("recovered[0].parents[0]") && !out.stderr.contains("parents[1]"),
        "{}",
        out.stderr
    );
    assert!(!node.path("/var/lib/mesh-host/state.json").exists());
}
