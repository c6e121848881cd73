//! Digests that never go stale and files that are not read again, through the built binary: an
//! owned file someone already rewrote as the next declaration says has its record brought to
//! disk (so a recovery after a lost store removes it as the host's own); an unchanged held file
//! of 4 GiB costs no read on the next apply, while a change that restores its size and
//! modification time is still seen by its change time; a found file over the read limit is
//! refused unread.

use crate::util::{Node, PRIVATE_ADDR, PRIVATE_IF};
use serde_json::{json, Value};
use std::io::{Seek, SeekFrom, Write};
use std::process::Command;
use std::time::{Duration, Instant};

fn decl(mode: &str, resources: Value) -> Value {
    json!({"version": 1, "node": "n1", "mode": mode, "taken": [], "resources": resources})
}

fn digest(s: &str) -> String {
    mesh_host::store::digest(s.as_bytes())
}

/// Proves issue 33's stale-digest case: an owned file v1 that someone rewrote as v2, with v2
/// then declared, is unchanged, and its record says v2's digest (store = disk); after the store
/// is lost, the recovery removes it as the host's own rather than calling it changed since.
#[test]
fn a_file_already_as_declared_has_its_record_brought_to_disk_and_recovers_as_the_hosts() {
    let node = Node::new();
    let file = |content: &str| json!([{"id": "conf", "type": "file", "path": "/etc/app.conf", "content": content}]);
    node.apply(&decl("converged", file("v1\n")));
    assert_eq!(node.state()["owned"][0]["digest"], digest("v1\n"));
    node.write("/etc/app.conf", "v2\n");
    let r = node.apply(&decl("converged", file("v2\n")));
    assert_eq!(r.outcome("conf"), "unchanged");
    let owned = node.state()["owned"].clone();
    assert_eq!(
        owned[0]["digest"],
        digest(&node.read("/etc/app.conf").unwrap()),
        "the record says what is on disk"
    );
    assert_eq!(owned[0]["digest"], digest("v2\n"));

    // The store lost; the mesh hands the records of the last report back.
    for f in ["state.json", "state.journal"] {
        let _ = std::fs::remove_file(node.path(&format!("/var/lib/mesh-host/{f}")));
    }
    let mut none = decl("converged", json!([]));
    none["recovered"] = owned;
    let r = node.apply(&none);
    assert_eq!(r.outcome("conf"), "removed", "{:#}", r.json());
    assert!(!node.path("/etc/app.conf").exists());
}

/// One apply through `unshare --net` with the private network up (as `Node::with_private_network`
/// runs it), inside a shell that prints its own `/proc/$$/io` once the host has been reaped: the
/// kernel adds a reaped child's counters to its parent's, so the shell's `rchar` is every byte
/// the host read (and the few the shell did). Returns the report, the bytes read, the time and
/// the exit code.
fn apply_counting_reads(node: &Node, decl: &Value) -> (Value, u64, Duration, u64) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("decl.json");
    std::fs::write(&file, serde_json::to_vec(decl).unwrap()).unwrap();
    let out = dir.path().join("out.json");
    let script = format!(
        "ip link add {PRIVATE_IF} type veth peer name {PRIVATE_IF}-peer; ip addr add \
         {PRIVATE_ADDR} dev {PRIVATE_IF}; ip link set {PRIVATE_IF}-peer up; ip link set \
         {PRIVATE_IF} up; rc=0; \"$@\" >\"$OUT\" 2>/dev/null || rc=$?; echo \"rc: $rc\"; cat \
         /proc/$$/io"
    );
    let started = Instant::now();
    let shell = Command::new("timeout")
        .args(["120", "unshare", "--net", "--", "sh", "-ec", &script, "sh"])
        .arg(env!("CARGO_BIN_EXE_mesh-host"))
        .arg("--root")
        .arg(node.root())
        .args(["apply", file.to_str().unwrap(), "--json"])
        .env("OUT", &out)
        .env_remove("MESH_HOST_FAILPOINT")
        .output()
        .expect("running the shell");
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&shell.stdout).into_owned();
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    let report = std::fs::read_to_string(&out).unwrap_or_default();
    let report: Value = serde_json::from_str(&report).unwrap_or_else(|e| panic!("{e}: {report}"));
    (report, field("rchar:"), took, field("rc:"))
}

fn outcome(report: &Value, id: &str) -> String {
    report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id)
        .unwrap_or_else(|| panic!("no entry for {id} in {report:#}"))["outcome"]
        .as_str()
        .unwrap()
        .to_string()
}

const GIB: u64 = 1 << 30;

/// Proves the held file's stamp: a 4 GiB sparse file (no disk used) found on an adopted node is
/// read once, when it is first held, and not again while its device, inode, size, modification
/// and change times are as they were; rewritten in place with the same size and its modification
/// time put back by `utime`, it is read again and reported changed by something else.
#[test]
fn an_unchanged_held_file_of_4_gib_costs_no_read_on_the_next_apply() {
    let node = Node::with_private_network();
    let big = node.path("/srv/data/big.img");
    std::fs::create_dir_all(big.parent().unwrap()).unwrap();
    std::fs::File::create(&big)
        .unwrap()
        .set_len(4 * GIB)
        .unwrap();
    let mut d = crate::util::workstation(
        "adopted",
        &[],
        json!([{"id": "data/img", "module": "data", "type": "file", "path": "/srv/data/big.img", "content": "declared"}]),
    );
    d["settings"]["found_read_limit_bytes"] = json!(8 * GIB);

    let (first, read, took, rc) = apply_counting_reads(&node, &d);
    assert_eq!(rc, 0, "{first:#}");
    eprintln!("first apply: {read} bytes read in {took:?}");
    assert_eq!(outcome(&first, "data/img"), "held", "{first:#}");
    assert!(read >= 4 * GIB, "the first apply digests it: {read} bytes");
    let held = node.state()["held"][0].clone();
    assert_eq!(held["id"], "data/img");
    assert!(held["stamp"].is_string(), "its stamp kept: {held:#}");

    let (again, read, took, rc) = apply_counting_reads(&node, &d);
    assert_eq!(rc, 0, "{again:#}");
    eprintln!("unchanged: {read} bytes read in {took:?}");
    assert_eq!(outcome(&again, "data/img"), "held", "{again:#}");
    assert!(
        read < 64 << 20,
        "an unchanged held file is not read again: {read} bytes read"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");

    // Same size, new bytes, the modification time put back: only the change time moved.
    let mtime = std::fs::metadata(&big).unwrap().modified().unwrap();
    let mut f = std::fs::OpenOptions::new().write(true).open(&big).unwrap();
    f.seek(SeekFrom::Start(GIB)).unwrap();
    f.write_all(b"someone else").unwrap();
    f.set_modified(mtime).unwrap();
    drop(f);
    let meta = std::fs::metadata(&big).unwrap();
    assert_eq!((meta.len(), meta.modified().unwrap()), (4 * GIB, mtime));
    let (changed, read, took, _) = apply_counting_reads(&node, &d);
    eprintln!("changed, mtime restored: {read} bytes read in {took:?}");
    assert_eq!(
        outcome(&changed, "data/img"),
        "changed-by-something-else",
        "{changed:#}"
    );
    assert!(read >= 4 * GIB, "read again: {read} bytes");
}

/// Proves the read limit: a found file over `settings.found_read_limit_bytes` (default 1 GiB)
/// fails its resource, named, without being read.
#[test]
fn a_found_file_over_the_read_limit_is_refused_unread() {
    let node = Node::with_private_network();
    let big = node.path("/srv/data/big.img");
    std::fs::create_dir_all(big.parent().unwrap()).unwrap();
    std::fs::File::create(&big)
        .unwrap()
        .set_len(2 * GIB)
        .unwrap();
    let d = crate::util::workstation(
        "adopted",
        &[],
        json!([{"id": "data/img", "module": "data", "type": "file", "path": "/srv/data/big.img", "content": "declared"}]),
    );
    let (report, read, took, rc) = apply_counting_reads(&node, &d);
    assert_ne!(rc, 0, "{report:#}");
    eprintln!("over the limit: {read} bytes read in {took:?}");
    assert_eq!(outcome(&report, "data/img"), "failed", "{report:#}");
    let entry = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == "data/img")
        .unwrap()
        .clone();
    let text = entry.to_string();
    assert!(
        text.contains(
            "/srv/data/big.img is 2147483648 bytes, over the found files' read limit of \
             1073741824 bytes (settings.found_read_limit_bytes)"
        ),
        "{entry:#}"
    );
    assert!(read < 64 << 20, "not read: {read} bytes");
}

/// Proves the read limit holds for a recovery too: a recovered record whose file is now a 2 GiB
/// file (over the default limit) is left in place unread, reported changed since the record.
#[test]
fn a_recovered_record_whose_file_is_over_the_read_limit_is_left_unread() {
    let node = Node::new();
    node.apply(&decl(
        "converged",
        json!([{"id": "conf", "type": "file", "path": "/etc/app.conf", "content": "v1\n"}]),
    ));
    let owned = node.state()["owned"].clone();
    for f in ["state.json", "state.journal"] {
        let _ = std::fs::remove_file(node.path(&format!("/var/lib/mesh-host/{f}")));
    }
    std::fs::File::create(node.path("/etc/app.conf"))
        .unwrap()
        .set_len(2 * GIB)
        .unwrap();
    let mut none = decl("converged", json!([]));
    none["recovered"] = owned;
    let started = Instant::now();
    let r = node.apply(&none);
    assert_eq!(
        r.outcome("conf"),
        "changed-by-something-else",
        "{:#}",
        r.json()
    );
    assert!(
        r.stdout.contains("over the found files' read limit"),
        "{}",
        r.stdout
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        std::fs::metadata(node.path("/etc/app.conf")).unwrap().len(),
        2 * GIB
    );
}

/// Proves the read's time bound: a found 4 GiB file under the size limit, with
/// `settings.found_read_s` at 1, fails its resource once its read passes the second, named,
/// instead of reading on (a whole read takes 5 s and more here).
#[test]
fn a_found_file_read_past_its_deadline_fails_named() {
    let node = Node::with_private_network();
    let big = node.path("/srv/data/big.img");
    std::fs::create_dir_all(big.parent().unwrap()).unwrap();
    std::fs::File::create(&big)
        .unwrap()
        .set_len(4 * GIB)
        .unwrap();
    let mut d = crate::util::workstation(
        "adopted",
        &[],
        json!([{"id": "data/img", "module": "data", "type": "file", "path": "/srv/data/big.img", "content": "declared"}]),
    );
    d["settings"]["found_read_limit_bytes"] = json!(8 * GIB);
    d["settings"]["found_read_s"] = json!(1);
    let (report, read, took, rc) = apply_counting_reads(&node, &d);
    eprintln!("past the deadline: {read} bytes read in {took:?}");
    assert_ne!(rc, 0, "{report:#}");
    assert_eq!(outcome(&report, "data/img"), "failed", "{report:#}");
    let entry = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == "data/img")
        .unwrap()
        .to_string();
    assert!(
        entry.contains("/srv/data/big.img")
            && entry.contains("past its deadline of 1 s (settings.found_read_s)"),
        "{entry}"
    );
    assert!(read < 4 * GIB, "stopped before the end: {read} bytes");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(node.state()["held"].as_array().is_none_or(Vec::is_empty));
}
