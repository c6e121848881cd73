//! What the host would refuse part-way is refused before anything changes: a symbolic link on a
//! declared path, a FIFO where a file is declared and the host's own running binary under
//! `--root` leave the root and the store byte for byte as they were; and a FIFO at the machine's
//! `/etc/passwd` fails an apply at once, with the store's lock freed.

use crate::util::Node;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn decl(resources: Value) -> Value {
    crate::util::workstation("converged", &[], resources)
}

/// The resources every test begins with: fine on their own, each of them a change.
fn fine(v: &str) -> Vec<Value> {
    vec![
        json!({"id": "app/conf", "type": "file", "path": "/etc/app.conf", "content": v, "mode": "0640"}),
        json!({"id": "app/data", "type": "directory", "path": format!("/srv/app-{v}")}),
    ]
}

/// Every path under `dir` with its kind, mode, owner, size, modification time and content (a
/// link's target), read without following anything: two equal trees are the same bytes, modes,
/// owners and links, and nothing was created and removed meanwhile.
fn tree(dir: &Path) -> BTreeMap<String, (String, Vec<u8>)> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (String, Vec<u8>)>) {
        let meta = std::fs::symlink_metadata(dir).unwrap();
        let rel = dir.strip_prefix(root).unwrap().display().to_string();
        let head = format!(
            "{:o} {}:{} {} {}.{}",
            meta.mode(),
            meta.uid(),
            meta.gid(),
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec()
        );
        let t = meta.file_type();
        let body = if t.is_symlink() {
            std::fs::read_link(dir)
                .unwrap()
                .into_os_string()
                .into_encoded_bytes()
        } else if t.is_file() {
            // A digest, not the bytes: the running-binary test's root holds the binary.
            let mut h = std::collections::hash_map::DefaultHasher::new();
            std::hash::Hash::hash(&std::fs::read(dir).unwrap(), &mut h);
            std::hash::Hasher::finish(&h).to_be_bytes().to_vec()
        } else {
            Vec::new()
        };
        out.insert(rel, (head, body));
        if t.is_dir() {
            for e in std::fs::read_dir(dir).unwrap() {
                walk(root, &e.unwrap().path(), out);
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

/// Applies `resources` after the fine ones and asserts the refusal: its exit code, every
/// expected line on stderr, the root (store included) and `outside` unchanged, and the preview
/// refusing the same way.
fn refused_unchanged(node: &Node, outside: &Path, bad: Vec<Value>, code: i32, lines: &[&str]) {
    let mut resources = fine("v2");
    resources.extend(bad);
    let d = decl(Value::Array(resources));
    let (root_before, outside_before) = (tree(node.root()), tree(outside));
    let r = node.apply_env(&d, &[], &[]);
    assert_eq!(r.code, Some(code), "{}\n{}", r.stdout, r.stderr);
    for line in lines {
        assert!(r.stderr.contains(line), "{line:?} not in:\n{}", r.stderr);
    }
    assert!(r.stderr.contains("nothing was changed"), "{}", r.stderr);
    let root_after = tree(node.root());
    assert_eq!(
        root_before.len(),
        root_after.len(),
        "paths were added or removed: {:?}",
        root_after
            .keys()
            .filter(|k| !root_before.contains_key(*k))
            .collect::<Vec<_>>()
    );
    for (k, v) in &root_before {
        assert_eq!(Some(v), root_after.get(k), "{k} changed");
    }
    assert_eq!(
        outside_before,
        tree(outside),
        "something outside the root changed"
    );
    eprintln!(
        "refused with exit {code}: {} paths under the root identical",
        root_after.len()
    );
    let p = node.apply_env(&d, &["--preview"], &[]);
    assert_eq!(
        p.code,
        Some(code),
        "the preview refuses as the apply: {}",
        p.stderr
    );
}

/// Proves that links found at apply time — one out of the root, one onto the store, one inside
/// the root — are refused, all three named at once, before the first resource (the fine file
/// and directory before them are not written, the store not touched, exit 3), on a fresh node
/// (no store is made) and on one whose store exists.
#[test]
fn a_link_found_at_apply_time_leaves_the_root_byte_identical() {
    let node = Node::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(node.path("/etc")).unwrap();
    std::fs::create_dir_all(node.path("/srv/real")).unwrap();
    std::os::unix::fs::symlink(outside.path(), node.path("/etc/race")).unwrap();
    std::os::unix::fs::symlink("real", node.path("/srv/linked")).unwrap();
    let bad = || {
        vec![
            json!({"id": "race/conf", "type": "file", "path": "/etc/race/f.conf", "content": "x"}),
            json!({"id": "in/conf", "type": "file", "path": "/srv/linked/f.conf", "content": "x"}),
            json!({"id": "store/over", "type": "file", "path": "/srv/store/state.json", "content": "{}"}),
        ]
    };
    let lines = [
        "error: refused: resources[2].path: /etc/race/f.conf: /etc/race is a symbolic link (to ",
        "error: refused: resources[3].path: /srv/linked/f.conf: /srv/linked is a symbolic link (to real)",
        "error: refused: resources[4].path: /srv/store/state.json: /srv/store is a symbolic link",
        "the machine refuses what the declaration asks (3 paths)",
    ];
    // Fresh: the link onto the store's place is there before the store is.
    std::os::unix::fs::symlink(node.path("/var/lib/mesh-host"), node.path("/srv/store")).unwrap();
    refused_unchanged(&node, outside.path(), bad(), 3, &lines);
    assert!(
        !node.path("/var/lib/mesh-host").exists(),
        "no store was made"
    );
    // With a store of an earlier apply.
    node.apply(&decl(Value::Array(fine("v1"))));
    refused_unchanged(&node, outside.path(), bad(), 3, &lines);
    assert_eq!(node.read("/etc/app.conf").as_deref(), Some("v1"));
}

/// Proves that a FIFO (and a socket) where a file is declared is refused before the first
/// resource, exit 3, the root and the store byte-identical.
#[test]
fn a_special_file_where_a_file_is_declared_leaves_the_root_byte_identical() {
    let node = Node::new();
    let outside = tempfile::tempdir().unwrap();
    node.apply(&decl(Value::Array(fine("v1"))));
    nix::unistd::mkfifo(&node.path("/etc/pipe.conf"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(node.path("/etc/sock.conf")).unwrap();
    let bad = vec![
        json!({"id": "pipe", "type": "file", "path": "/etc/pipe.conf", "content": "x"}),
        json!({"id": "sock", "type": "file", "path": "/etc/sock.conf", "content": "x"}),
    ];
    let lines = [
        "error: refused: resources[2].path: /etc/pipe.conf is a FIFO where a regular file is declared",
        "error: refused: resources[3].path: /etc/sock.conf is a socket where a regular file is declared",
    ];
    refused_unchanged(&node, outside.path(), bad, 3, &lines);
}

/// Proves that the host's own running binary, reached under `--root`, is refused by validation
/// (exit 2) when it lies under the root: the binary is linked into the root and run from there,
/// and declaring its machine path changes nothing — before, validation compared the declared
/// path with the binary's path outside the root and the apply overwrote it.
#[test]
fn the_running_binary_under_the_root_leaves_the_root_byte_identical() {
    let node = Node {
        dir: tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap(),
        private_network: false,
    };
    let outside = tempfile::tempdir().unwrap();
    node.apply(&decl(Value::Array(fine("v1"))));
    std::fs::create_dir_all(node.path("/opt/mh")).unwrap();
    let exe = node.path("/opt/mh/tool");
    std::fs::hard_link(env!("CARGO_BIN_EXE_mesh-host"), &exe)
        .or_else(|_| std::fs::copy(env!("CARGO_BIN_EXE_mesh-host"), &exe).map(|_| ()))
        .unwrap();
    let mut resources = fine("v2");
    resources.push(json!({"id": "own", "type": "file", "path": "/opt/mh/tool", "content": "x"}));
    let d = decl(Value::Array(resources));
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), serde_json::to_vec(&d).unwrap()).unwrap();
    let before = tree(node.root());
    let out = Command::new("unshare")
        .args(["--net", "--"])
        .arg(&exe)
        .arg("--root")
        .arg(node.root())
        .args(["apply", file.path().to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("error: resources[2].path: /opt/mh/tool is this host's own running binary"),
        "{stderr}"
    );
    assert_eq!(before, tree(node.root()), "the root changed");
    let _ = outside;
}

/// Runs `mesh-host --root ROOT apply FILE --json` in its own network namespace, killed at
/// `deadline`: its exit code (`None` when killed), its output and how long it ran.
fn apply_within(node: &Node, d: &Value, deadline: Duration) -> (Option<i32>, String, Duration) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), serde_json::to_vec(d).unwrap()).unwrap();
    let start = Instant::now();
    let mut child = Command::new("unshare")
        .args(["--net", "--"])
        .arg(env!("CARGO_BIN_EXE_mesh-host"))
        .arg("--root")
        .arg(node.root())
        .args(["apply", file.path().to_str().unwrap(), "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if start.elapsed() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = start.elapsed();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (code, text, took)
}

/// Proves that a FIFO at the machine's `/etc/passwd` with a file declaring `owner` fails the
/// apply in well under its deadline (2 s of a 10 s deadline; before, the lookup blocked in
/// `open` for ever holding the store's lock), naming the file, and that the store's lock is free
/// after: taken at once with `LOCK_NB`, and a second apply succeeds.
#[test]
fn a_fifo_at_etc_passwd_fails_the_apply_at_once_and_frees_the_lock() {
    let node = Node::new();
    std::fs::create_dir_all(node.path("/etc")).unwrap();
    nix::unistd::mkfifo(&node.path("/etc/passwd"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let owned = json!([{"id": "app/conf", "type": "file", "path": "/etc/app.conf", "content": "x", "owner": "caddy"}]);
    let (code, out, took) = apply_within(&node, &decl(owned), Duration::from_secs(10));
    eprintln!("the FIFO case failed in {} ms", took.as_millis());
    assert_eq!(
        code,
        Some(1),
        "killed at the deadline or wrong code:\n{out}"
    );
    assert!(took < Duration::from_secs(2), "took {took:?}:\n{out}");
    let db = node.path("/etc/passwd");
    assert!(
        out.contains(&format!("{} is a FIFO, not a regular file", db.display())),
        "{out}"
    );
    let lock = std::fs::File::open(node.path("/var/lib/mesh-host/lock")).unwrap();
    let held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| e)
        .expect("the store's lock is free");
    drop(held);
    let free = json!([{"id": "app/conf", "type": "file", "path": "/etc/app.conf", "content": "x"}]);
    let (code, out, _) = apply_within(&node, &decl(free), Duration::from_secs(10));
    assert_eq!(code, Some(0), "{out}");
}
