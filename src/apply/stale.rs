//! Digests that never go stale: a store left by a killed apply has its journal cut at 1,000 byte
//! positions, each followed by an apply (or a reconcile) of the same declaration in process, and
//! every owned file's record must then say what is on disk.

use super::{apply, reconcile, Host};
use crate::declaration::{validate_value, Declaration, Shape, Source};
use crate::failpoint::here;
use crate::store;
use serde_json::{json, Value};
use std::path::Path;

fn decl(mode: &str, resources: Value) -> Declaration {
    let v =
        json!({"version": 1, "node": "n1", "mode": mode, "taken": ["app"], "resources": resources});
    validate_value(&v, Source::Local).unwrap_or_else(|p| panic!("refused:\n{p}"))
}

fn file(id: &str, path: &str, content: &str) -> Value {
    json!({"id": id, "type": "file", "path": path, "content": content})
}

/// The first declaration, and the second: files rewritten, created, one created once (edited by
/// hand in between), one already written by hand as the second declares it, found files (kept
/// when adopted and untaken, taken over otherwise), and one undeclared (removed).
fn declarations(mode: &str) -> (Declaration, Declaration) {
    let once = json!({"id": "once", "type": "file", "path": "/etc/once.conf", "content": "first", "create_once": true});
    let first = decl(
        mode,
        json!([
            {"id": "c", "type": "directory", "path": "/srv/c"},
            file("c/f1", "/srv/c/f1", "one"),
            file("a", "/etc/a.conf", "a"),
            once.clone(),
            file("gone", "/etc/gone.conf", "gone"),
        ]),
    );
    let second = decl(
        mode,
        json!([
            {"id": "c", "type": "directory", "path": "/srv/c"},
            file("c/f1", "/srv/c/f1", "one, again"),
            file("c/f2", "/srv/c/f2", "two"),
            file("a", "/etc/a.conf", "a, again"),
            once,
            {"id": "web/found", "module": "web", "type": "file", "path": "/etc/web.conf", "content": "mesh's web"},
            {"id": "app/found", "module": "app", "type": "file", "path": "/etc/app.conf", "content": "mesh's app"},
            file("c/f3", "/srv/c/f3", "three"),
        ]),
    );
    (first, second)
}

/// Every owned file's record against the file on disk: the records whose digest is not the
/// file's (or whose file is gone), by id.
fn stale(root: &Path) -> Vec<String> {
    let state = store::peek(root).expect("store reads").expect("a store");
    state
        .owned
        .iter()
        .filter(|o| o.shape == Shape::File)
        .filter(|o| {
            let on_disk = std::fs::read(root.join(o.key.trim_start_matches('/')))
                .ok()
                .map(|b| store::digest(&b));
            on_disk.is_none() || on_disk != o.digest
        })
        .map(|o| o.id.clone())
        .collect()
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let meta = std::fs::symlink_metadata(&src).unwrap();
        if meta.is_dir() {
            copy_tree(&src, &dst);
            std::fs::set_permissions(&dst, meta.permissions()).unwrap();
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// Where the sweep's roots are made: memory, where the store's fsyncs cost nothing.
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap())
}

fn on<'a>(
    root: &'a Path,
    runner: &'a dyn run::Runner,
    firewall: crate::node_firewall::Open<'a>,
) -> Host<'a> {
    Host {
        root,
        runner,
        firewall,
        confirm: false,
    }
}

fn sweep(mode: &str) {
    let fake = crate::node_firewall::fake::Recording::default();
    let open = move |_: &Path, _: &Declaration| -> Box<dyn crate::node_firewall::NodeFirewall> {
        Box::new(fake.clone())
    };
    // A recording runner: nothing of this machine's own (its service manager) is ever asked.
    let runner = run::RecordingRunner::default();
    let host = |root| on(root, &runner, &open);
    let (first, second) = declarations(mode);

    // The store a host killed in its second apply leaves: its last removal done, not recorded.
    let left = scratch();
    let root = left.path();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/web.conf"), "predecessor's web").unwrap();
    std::fs::write(root.join("etc/app.conf"), "predecessor's app").unwrap();
    let r = apply(&host(root), &first, Source::Local).unwrap();
    assert!(r.failed().is_none(), "{mode}: the first apply failed");
    std::fs::write(root.join("etc/once.conf"), "edited by hand").unwrap();
    std::fs::write(root.join("etc/a.conf"), "a, again").unwrap();
    let killed = {
        let _armed = here::arm("after-change:gone#1");
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            apply(&host(root), &second, Source::Local)
        }))
    };
    let why = killed.expect_err("the failpoint stopped the second apply");
    assert!(why.is::<here::Killed>(), "{mode}: stopped by another panic");
    assert!(!root.join("etc/gone.conf").exists(), "the removal was done");
    let journal = std::fs::read(root.join("var/lib/mesh-host/state.journal"))
        .expect("the killed apply left a journal");
    assert!(
        journal.iter().filter(|&&b| b == b'\n').count() > 8,
        "{mode}"
    );
    let whole_stale = stale(root);

    // Every byte when the journal is short, else 1,000 positions spread over it, the whole
    // journal last.
    let n = journal.len();
    let cuts: Vec<usize> = if n <= 1000 {
        (0..=n).collect()
    } else {
        (0..1000).map(|i| i * n / 999).collect()
    };
    let started = std::time::Instant::now();
    let (mut left_stale, mut healed) = (0, 0);
    for (i, &cut) in cuts.iter().enumerate() {
        let node = scratch();
        let at = node.path();
        copy_tree(root, at);
        std::fs::write(at.join("var/lib/mesh-host/state.journal"), &journal[..cut]).unwrap();
        let before = stale(at);
        if !before.is_empty() {
            left_stale += 1;
        }
        // Half are applies of the same declaration, half reconciles of the stored one.
        let report = if i % 2 == 0 {
            apply(&on(at, &runner, &open), &second, Source::Local).unwrap()
        } else {
            reconcile(&on(at, &runner, &open))
                .unwrap()
                .expect("a stored declaration")
        };
        assert!(
            report.failed().is_none(),
            "{mode} cut {cut}: the apply failed: {:?}",
            report.failed()
        );
        let after = stale(at);
        assert!(
            after.is_empty(),
            "{mode} cut {cut} of {n}: store differs from disk for {after:?} (before: {before:?})"
        );
        if !before.is_empty() {
            healed += 1;
        }
        assert_eq!(
            std::fs::read_to_string(at.join("etc/once.conf")).unwrap(),
            "edited by hand",
            "{mode} cut {cut}: a file created once is never written again"
        );
    }
    eprintln!(
        "{mode}: {} cuts of a {n}-byte journal in {:?}; {left_stale} left a record stale, all \
         healed ({healed}); the whole journal left {whole_stale:?} stale",
        cuts.len(),
        started.elapsed()
    );
    assert_eq!(cuts.len(), if n <= 1000 { n + 1 } else { 1000 });
    assert!(
        left_stale > cuts.len() / 4,
        "{mode}: only {left_stale} cuts left a stale record: the sweep proves little"
    );
}

#[test]
fn a_thousand_journal_cuts_end_with_store_equal_to_disk_converged() {
    sweep("converged");
}

#[test]
fn a_thousand_journal_cuts_end_with_store_equal_to_disk_adopted() {
    sweep("adopted");
}
