//! The store detects its own corruption: a store left by a few applies and a crash (a snapshot
//! and a journal of the records since) has every byte flipped in turn, and each flip is refused
//! naming its file, or, in the journal's last record, ends the replay just before that record;
//! no flip is ever read as another state.

use crate::util::Node;
use serde_json::{json, Value};
use std::path::Path;

fn decl(resources: Value) -> Value {
    json!({"version": 1, "node": "n1", "mode": "converged", "resources": resources})
}

fn file(id: &str, path: &str, content: &str) -> Value {
    json!({"id": id, "type": "file", "path": path, "content": content})
}

/// A store after two applies, the second killed after its last file's record: `state.json` and
/// a `state.journal` of the second apply's records, among them `/srv/c/f2`'s.
fn store_with_a_journal() -> Node {
    let node = Node::new();
    node.apply(&decl(json!([
        {"id": "c", "type": "directory", "path": "/srv/c"},
        file("c/f1", "/srv/c/f1", "one"),
        file("a", "/etc/a.conf", "a"),
    ])));
    let second = decl(json!([
        {"id": "c", "type": "directory", "path": "/srv/c"},
        file("c/f1", "/srv/c/f1", "one, again"),
        file("c/f2", "/srv/c/f2", "two"),
        file("a", "/etc/a.conf", "a, again"),
        file("c/f3", "/srv/c/f3", "three"),
    ]));
    let r = node.apply_env(
        &second,
        &[],
        &[("MESH_HOST_FAILPOINT", "after-record:c/f3#1")],
    );
    assert_eq!(
        r.signal,
        Some(9),
        "the failpoint killed the apply: {}",
        r.stderr
    );
    node
}

fn read(root: &Path) -> Result<Value, String> {
    match mesh_host::store::peek(root) {
        Ok(Some(s)) => Ok(serde_json::to_value(s).unwrap()),
        Ok(None) => Err("no store".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Proves that a flipped byte anywhere in the snapshot or the journal is detected: refused with
/// the file named, or (in the journal's last record, where a crash tears it) read as the store
/// just before that record. It fails if any flip reads as a state other than those two, or if a
/// flip inside the journal or snapshot is taken for a torn tail.
#[test]
fn a_flipped_byte_anywhere_in_the_store_is_detected() {
    let node = store_with_a_journal();
    let root = node.root();
    let snapshot = node.path("/var/lib/mesh-host/state.json");
    let journal = node.path("/var/lib/mesh-host/state.journal");
    let snap_bytes = std::fs::read(&snapshot).unwrap();
    let jbytes = std::fs::read(&journal).expect("the killed apply left a journal");
    let lines = jbytes.iter().filter(|&&b| b == b'\n').count();
    assert!(
        lines >= 6,
        "a header and the second apply's records: {lines} lines"
    );
    assert!(jbytes.ends_with(b"\n"));
    let whole = read(root).unwrap();
    // The store just before the journal's last record: the journal without its last line.
    let last = jbytes[..jbytes.len() - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .unwrap()
        + 1;
    std::fs::write(&journal, &jbytes[..last]).unwrap();
    let before_last = read(root).unwrap();
    assert_ne!(before_last, whole, "the last record changes the store");
    std::fs::write(&journal, &jbytes).unwrap();

    let mut figures = Vec::new();
    for (path, bytes) in [(&snapshot, &snap_bytes), (&journal, &jbytes)] {
        let name = path.display().to_string();
        for mask in [0x01u8, 0xff] {
            let (mut refused, mut stopped, mut refused_last) = (0, 0, 0);
            for i in 0..bytes.len() {
                let mut flipped = bytes.clone();
                flipped[i] ^= mask;
                std::fs::write(path, &flipped).unwrap();
                let in_last = path == &journal && i >= last;
                match read(root) {
                    Err(e) => {
                        assert!(e.contains(&name), "byte {i} of {name}: {e}");
                        if in_last {
                            refused_last += 1;
                        } else {
                            refused += 1;
                        }
                    }
                    Ok(state) => {
                        assert!(
                            in_last,
                            "byte {i} of {name} ^ {mask:#04x} was accepted: {state:#}"
                        );
                        assert_eq!(
                            state, before_last,
                            "byte {i} of {name} ^ {mask:#04x} read as another state"
                        );
                        stopped += 1;
                    }
                }
            }
            std::fs::write(path, bytes).unwrap();
            assert_eq!(refused + stopped + refused_last, bytes.len());
            figures.push(format!(
                "{name} ^ {mask:#04x}: {} bytes, {refused} refused, {stopped} in the last record \
                 ended the replay before it, {refused_last} in the last record refused",
                bytes.len()
            ));
        }
    }
    for f in &figures {
        eprintln!("{f}");
    }
    assert_eq!(
        read(root).unwrap(),
        whole,
        "the store restored reads as before"
    );
}

/// Proves issue 25's case through the binary: `/srv/c/f2` turned into `/srv.c/f2` in a record
/// inside `state.journal` (one flipped bit) is refused with exit 1 naming the file and the line,
/// by a look and by an apply, which changes nothing; the same for a flipped byte in the snapshot.
#[test]
fn a_damaged_record_inside_the_journal_refuses_the_store_with_exit_1() {
    let node = store_with_a_journal();
    let journal = node.path("/var/lib/mesh-host/state.journal");
    let bytes = std::fs::read(&journal).unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    let at = text
        .find("/srv/c/f2")
        .expect("f2's record is in the journal");
    let line = text[..at].matches('\n').count() + 1;
    let lines = text.matches('\n').count();
    assert!(line < lines, "f2's first record is not the last line");
    let line_start = text[..at].rfind('\n').unwrap() + 1;
    let mut damaged = bytes.clone();
    damaged[at + "/srv".len()] ^= 0x01;
    assert!(String::from_utf8_lossy(&damaged).contains("/srv.c/f2"));
    std::fs::write(&journal, &damaged).unwrap();
    let f1 = node.read("/srv/c/f1");
    for args in [&["owned"][..], &["reconcile"][..]] {
        let r = node.run(args);
        assert_eq!(r.code, Some(1), "{args:?}: {}\n{}", r.stdout, r.stderr);
        let want = format!(
            "store journal {}: line {line} (byte {line_start}) fails its checksum",
            journal.display()
        );
        assert!(
            r.stderr.contains(&want),
            "{args:?}: want {want:?} in {}",
            r.stderr
        );
    }
    assert_eq!(
        std::fs::read(&journal).unwrap(),
        damaged,
        "the journal is left as found"
    );
    assert_eq!(
        node.read("/srv/c/f1"),
        f1,
        "a refused store changes nothing"
    );

    std::fs::write(&journal, &bytes).unwrap();
    let snapshot = node.path("/var/lib/mesh-host/state.json");
    let snap = std::fs::read(&snapshot).unwrap();
    let mut damaged = snap.clone();
    let at = String::from_utf8_lossy(&snap).find("/srv/c/f1").unwrap();
    damaged[at + "/srv".len()] ^= 0x01;
    std::fs::write(&snapshot, &damaged).unwrap();
    let r = node.run(&["owned"]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr
            .contains(&format!("store {} fails its checksum", snapshot.display())),
        "{}",
        r.stderr
    );
}

/// Proves that a journal from another store is said, not dropped silently: `state.journal` of
/// one node laid beside another node's `state.json` is ignored (its header names the other
/// snapshot), the store reads as its own snapshot says, and a warning names both files.
#[test]
fn a_journal_from_another_store_is_ignored_and_said() {
    let donor = store_with_a_journal();
    let node = Node::new();
    node.apply(&decl(json!([file("a", "/etc/a.conf", "mine")])));
    let before = read(node.root()).expect("the node's store reads");
    let store = |n: &Node| n.root().join("var/lib/mesh-host");
    std::fs::copy(
        store(&donor).join("state.journal"),
        store(&node).join("state.journal"),
    )
    .expect("the donor's journal copied");
    let r = node.run(&["owned"]);
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("names another snapshot") && r.stderr.contains("state.journal"),
        "the foreign journal is said: {}",
        r.stderr
    );
    assert_eq!(
        read(node.root()).expect("the store still reads"),
        before,
        "nothing of the other store's journal was applied"
    );
}
