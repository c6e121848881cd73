//! Declared paths beneath the root, against the built binary: a link planted at the temporary
//! name or on a declared path is never followed out of the root, a directory swapped for a link
//! out of the root while applies run writes nothing outside it, and a 1 GiB found file is kept
//! as an original in bounded memory.

use crate::util::{workstation, Node};
use serde_json::{json, Value};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

fn decl(mode: &str, settings: Value, resources: Value) -> Value {
    json!({"version": 1, "node": "workstation", "mode": mode, "taken": [],
           "settings": settings, "resources": resources})
}

fn settings() -> Value {
    json!({"ports": {"store": 5432, "bus": 5672, "broker_management": 15672, "registry": 5000, "hub": 51820}})
}

fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    let a = CString::new(a.as_os_str().as_bytes()).unwrap();
    let b = CString::new(b.as_os_str().as_bytes()).unwrap();
    // SAFETY: two NUL-terminated paths that live across the call.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Proves that a path checked and then used again by name is gone: a thread exchanges the real
/// directory `$ROOT/etc/race` with a symbolic link out of the root 10,000 times while applies
/// of `/etc/race/f.conf` run one after another; the directory the link points to stays empty
/// (it would hold `f.conf` after one write through the link), and every apply either wrote
/// inside the root or was refused naming the link.
#[test]
fn a_directory_swapped_for_a_link_mid_apply_never_writes_outside_the_root() {
    const SWAPS: usize = 10_000;
    let node = Node::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(node.path("/etc/race")).unwrap();
    std::os::unix::fs::symlink(outside.path(), node.path("/etc/race-link")).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let (a, b) = (node.path("/etc/race"), node.path("/etc/race-link"));
        let (done, swaps) = (done.clone(), swaps.clone());
        std::thread::spawn(move || {
            for _ in 0..SWAPS {
                exchange(&a, &b).expect("renameat2(RENAME_EXCHANGE)");
                swaps.fetch_add(1, Ordering::Relaxed);
                // Paced so the swaps span many applies rather than the first one alone.
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
            done.store(true, Ordering::Relaxed);
        })
    };
    let (mut wrote, mut refused, mut i) = (0usize, 0usize, 0usize);
    while !done.load(Ordering::Relaxed) || i < 20 {
        // New content each time, so every apply that gets through writes again.
        let f = json!([{"id": "race/f", "type": "file", "path": "/etc/race/f.conf", "content": format!("n{i}\n")}]);
        let r = node.apply_env(&decl("converged", settings(), f), &[], &[]);
        match r.code {
            Some(0) => wrote += 1,
            // 3: the link was there when the plan walked the path, before the first resource;
            // 1: it appeared after, and the handle opened beneath the root refused it.
            Some(1 | 3) => {
                assert!(
                    r.stdout.contains("is a symbolic link")
                        || r.stdout.contains("changed while it was resolved"),
                    "a failure other than the link's refusal: {}\n{}",
                    r.stdout,
                    r.stderr
                );
                refused += 1;
            }
            other => panic!("apply ended {other:?}: {}\n{}", r.stdout, r.stderr),
        }
        let leaked: Vec<_> = std::fs::read_dir(outside.path()).unwrap().collect();
        assert!(
            leaked.is_empty(),
            "apply {i} wrote outside the root: {leaked:?}"
        );
        i += 1;
    }
    swapper.join().unwrap();
    assert_eq!(swaps.load(Ordering::Relaxed), SWAPS);
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    eprintln!(
        "race: {SWAPS} swaps, {i} applies: {wrote} wrote inside the root, {refused} refused, 0 \
         wrote outside"
    );
    assert_eq!(wrote + refused, i);
    assert!(
        refused > 0,
        "no apply met the link: the race was not exercised"
    );
}

/// An apply of `decl` with the host's peak resident memory in KiB ([`crate::util::measured`]).
fn run_measured(node: &Node, decl: &Value) -> (i32, String, i64) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), serde_json::to_vec(decl).unwrap()).unwrap();
    crate::util::measured(node, &["apply", file.path().to_str().unwrap(), "--json"])
}

fn big_file(node: &Node, p: &str, len: u64) {
    let f = std::fs::File::create(node.path(p)).unwrap();
    // Sparse: the host still reads every byte of it to digest or copy it.
    f.set_len(len).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(b"the predecessor's\n", 0).unwrap();
}

/// Proves a 1 GiB found file is kept as an original by streaming: saved whole under a limit
/// above it, and by its digest only (said in the briefing) under the default 64 MiB limit, each
/// with the host's peak RSS under 64 MiB (it was 1.05 GB when the file was read into memory).
#[test]
fn a_one_gib_found_file_is_kept_as_an_original_in_bounded_memory() {
    const GIB: u64 = 1 << 30;
    const BOUND_KIB: i64 = 64 * 1024;
    let node = Node::new();
    std::fs::create_dir_all(node.path("/etc")).unwrap();
    big_file(&node, "/etc/big.conf", GIB);
    let f = json!([{"id": "big", "type": "file", "path": "/etc/big.conf", "content": "mesh\n"}]);
    let mut s = settings();
    s["originals_limit_bytes"] = json!(2 * GIB);
    let started = std::time::Instant::now();
    let (code, out, rss) = run_measured(&node, &decl("converged", s, f.clone()));
    let took = started.elapsed();
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("found file replaced; original saved at"),
        "{out}"
    );
    let state = node.state();
    let saved = node.path(state["originals"][0]["saved"].as_str().unwrap());
    assert_eq!(std::fs::metadata(&saved).unwrap().len(), GIB);
    eprintln!("1 GiB original saved whole: peak RSS {rss} KiB in {took:?}");
    assert!(
        (1024..BOUND_KIB).contains(&rss),
        "peak RSS {rss} KiB: read at all, and under {BOUND_KIB} KiB"
    );
    std::fs::remove_file(&saved).unwrap();

    // Under the default limit only the digest is recorded, and the briefing names the file.
    let other = Node::new();
    std::fs::create_dir_all(other.path("/etc")).unwrap();
    big_file(&other, "/etc/big.conf", GIB);
    let started = std::time::Instant::now();
    let (code, out, rss) = run_measured(&other, &decl("converged", settings(), f));
    let took = started.elapsed();
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("original not saved: 1073741824 bytes, over the originals limit of 67108864"),
        "{out}"
    );
    let originals = other.path("/var/lib/mesh-host/originals");
    assert!(std::fs::read_dir(&originals).map_or(true, |d| d.count() == 0));
    let briefing = other.run(&["briefing", "--json"]).json();
    let line = briefing["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["subject"] == "/etc/big.conf")
        .unwrap_or_else(|| panic!("no briefing line for the file: {briefing:#}"));
    let detail = line["detail"].as_str().unwrap();
    assert!(
        detail.contains("1073741824 bytes") && detail.contains("sha256:"),
        "{detail}"
    );
    eprintln!("1 GiB original by digest only: peak RSS {rss} KiB in {took:?}");
    assert!(
        (1024..BOUND_KIB).contains(&rss),
        "peak RSS {rss} KiB: read at all, and under {BOUND_KIB} KiB"
    );
}

/// Proves a FIFO at a declared file's path is refused at once, without blocking on a writer
/// (it hung before), and with the store's lock freed.
#[test]
fn a_fifo_at_a_declared_file_is_refused_without_hanging() {
    let node = Node::new();
    std::fs::create_dir_all(node.path("/etc")).unwrap();
    nix_mkfifo(&node.path("/etc/app.conf"));
    let f = json!([{"id": "app", "type": "file", "path": "/etc/app.conf", "content": "x"}]);
    let started = std::time::Instant::now();
    let r = node.apply_env(&decl("converged", settings(), f.clone()), &[], &[]);
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    // Refused by the plan's walk before the first resource (exit 3); the handle opened beneath
    // the root refuses it as well, which the unit tests of `beneath` prove without the plan.
    assert_eq!(r.code, Some(3), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("/etc/app.conf is a FIFO where a regular file is declared"),
        "{}",
        r.stdout
    );
    // The lock was freed: the next apply runs (and is refused the same way).
    let r = node.apply_env(&decl("converged", settings(), f), &[], &[]);
    assert_eq!(r.code, Some(3), "{}\n{}", r.stdout, r.stderr);
}

fn nix_mkfifo(p: &Path) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path that lives across the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

/// Proves the originals limit is checked as a whole number of bytes, before anything changes.
#[test]
fn an_originals_limit_that_is_not_a_number_of_bytes_is_refused() {
    let node = Node::new();
    let mut s = settings();
    s["originals_limit_bytes"] = json!("64M");
    let f = json!([{"id": "a", "type": "file", "path": "/etc/a.conf", "content": "x"}]);
    let r = node.apply_env(&decl("converged", s, f), &[], &[]);
    assert_eq!(r.code, Some(2), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("settings.originals_limit_bytes: must be a whole number of bytes"),
        "{}",
        r.stderr
    );
    assert!(!node.path("/etc/a.conf").exists());
}

#[test]
fn a_symlink_planted_at_the_temporary_name_is_never_written_through() {
    use std::os::unix::fs::PermissionsExt;
    let node = Node::new();
    node.write("/victim", "secret\n");
    std::fs::set_permissions(node.path("/victim"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir_all(node.path("/etc")).unwrap();
    std::os::unix::fs::symlink(
        node.path("/victim"),
        node.path("/etc/.app.conf.mesh-host.tmp"),
    )
    .unwrap();
    let f =
        json!({"id": "app/conf", "type": "file", "path": "/etc/app.conf", "content": "declared\n"});
    assert_eq!(
        node.apply(&workstation("converged", &[], json!([f])))
            .outcome("app/conf"),
        "created"
    );
    assert_eq!(
        node.read("/victim").as_deref(),
        Some("secret\n"),
        "the link's target was written"
    );
    let victim_mode = std::fs::metadata(node.path("/victim"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(victim_mode, 0o600, "the link's target was chmodded");
    let meta = std::fs::symlink_metadata(node.path("/etc/app.conf")).unwrap();
    assert!(
        meta.file_type().is_file(),
        "the declared path is a regular file, not the planted link"
    );
    assert_eq!(node.read("/etc/app.conf").as_deref(), Some("declared\n"));
    // The temporary name is drawn afresh and never taken from another: the planted link is
    // neither followed nor removed.
    assert!(
        std::fs::symlink_metadata(node.path("/etc/.app.conf.mesh-host.tmp"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn a_symbolic_link_never_takes_a_declared_path_outside_the_root_or_onto_the_host() {
    let node = Node::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "host secret\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), node.path("/etc")).unwrap();
    let f = json!({"id": "app/conf", "type": "file", "path": "/etc/app.conf", "content": "x"});
    // A link on the way is refused before the first resource (exit 3, nothing changed).
    let r = node.apply_env(&workstation("converged", &[], json!([f])), &[], &[]);
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    assert!(r.stderr.contains("/etc is a symbolic link"), "{}", r.stderr);
    assert!(
        !outside.path().join("app.conf").exists(),
        "written outside the root"
    );
    // A link at the path itself, to a file outside the root, is not read as a found original.
    std::fs::remove_file(node.path("/etc")).unwrap();
    std::fs::create_dir(node.path("/etc")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), node.path("/etc/app.conf")).unwrap();
    let r = node.apply_env(&workstation("converged", &[], json!([f])), &[], &[]);
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret")).unwrap(),
        "host secret\n"
    );
    // A merged /usr: /bin is a link to /usr/bin. No link the declaration did not name is
    // followed, even inside the root: the operator declares the real path, /usr/bin/mesh-tool.
    std::fs::create_dir_all(node.path("/usr/bin")).unwrap();
    std::os::unix::fs::symlink("usr/bin", node.path("/bin")).unwrap();
    let own = json!({"id": "x", "type": "file", "path": "/bin/mesh-tool", "content": "x"});
    let r = node.apply_env(&workstation("converged", &[], json!([own])), &[], &[]);
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    assert!(r.stderr.contains("/bin is a symbolic link"), "{}", r.stderr);
    assert!(!node.path("/usr/bin/mesh-tool").exists());
    let real = json!({"id": "x", "type": "file", "path": "/usr/bin/mesh-tool", "content": "x"});
    assert_eq!(
        node.apply_env(&workstation("converged", &[], json!([real])), &[], &[])
            .code,
        Some(0)
    );
    let own = json!({"id": "x", "type": "file", "path": "/bin/mesh-host", "content": "x"});
    let r = node.apply_env(&workstation("converged", &[], json!([own])), &[], &[]);
    assert_eq!(
        r.code,
        Some(2),
        "validation refuses the spelling itself: {}",
        r.stderr
    );
}
