//! Bounded in what it reads and keeps, against the built binary: a child printing a gigabyte, a
//! declaration that is not a regular file or is too large, and temporary files that never take
//! another's name or outlive an error.

use crate::util::{measured, Node};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const GIB: u64 = 1 << 30;
/// The most the host may hold resident while it reads a gigabyte: 50 MiB.
const BOUND_KIB: i64 = 50 * 1024;

fn decl(resources: Value) -> Value {
    json!({"version": 1, "node": "workstation", "mode": "converged", "taken": [],
           "settings": {"ports": {"store": 5432, "bus": 5672, "broker_management": 15672,
                                  "registry": 5000, "hub": 51820}},
           "resources": resources})
}

fn store_bytes(node: &Node) -> u64 {
    ["state.json", "state.journal"]
        .iter()
        .map(|f| {
            std::fs::metadata(node.path(&format!("/var/lib/mesh-host/{f}"))).map_or(0, |m| m.len())
        })
        .sum()
}

/// A failing action whose verify prints 1 GiB on `stream` and then one line on stderr.
fn failing_verify(node: &Node, stream: &str) -> (i32, String, i64, Duration) {
    let verify = format!(
        "head -c {GIB} /dev/zero {stream}; echo 'verify: the migration is not done' >&2; exit 1"
    );
    let d = decl(
        json!([{"id": "db/migrate", "type": "action", "run": ["true"],
                         "verify": ["sh", "-c", verify]}]),
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), serde_json::to_vec(&d).unwrap()).unwrap();
    let started = Instant::now();
    let (code, out, rss) = measured(node, &["apply", file.path().to_str().unwrap(), "--json"]);
    (code, out, rss, started.elapsed())
}

/// Proves a child's output is kept bounded however much it prints: an action whose verify
/// fails after 1 GiB on stderr (it drove the host to the OOM killer), and one after 1 GiB on
/// stdout (1.05 GB RSS), each fail with the verify's last line in the report, a peak RSS under
/// 50 MiB and a store under 1 MiB (201 MB after 16 MiB of stderr before).
#[test]
fn a_verify_printing_a_gibibyte_costs_bounded_memory_and_store() {
    for stream in [">&2", ""] {
        let node = Node::new();
        let (code, out, rss, took) = failing_verify(&node, stream);
        assert_eq!(code, 1, "{out}");
        let report: Value = crate::util::contract(&out);
        let entry = &report["entries"][0];
        let detail = entry["detail"].as_str().unwrap_or_default();
        assert_eq!(entry["outcome"], "failed", "{out}");
        assert!(
            detail.ends_with("verify: the migration is not done"),
            "{detail}"
        );
        assert!(detail.len() < 2048, "a detail of {} bytes", detail.len());
        let store = store_bytes(&node);
        eprintln!(
            "verify printing 1 GiB (twice) on {}: exit {code} in {took:?}, peak RSS {rss} KiB, \
             store {store} bytes",
            if stream.is_empty() {
                "stdout"
            } else {
                "stderr"
            }
        );
        assert!(
            (1024..BOUND_KIB).contains(&rss),
            "peak RSS {rss} KiB: read at all, and under {BOUND_KIB} KiB"
        );
        assert!(store > 0 && store < 1 << 20, "store of {store} bytes");
    }
}

/// An apply of `file` with `extra` arguments, timed and measured, and whether the store was
/// left as it was (none made).
fn apply_file(node: &Node, file: &str, extra: &[&str]) -> (i32, String, i64, Duration) {
    let mut args = vec!["apply", file, "--json"];
    args.extend_from_slice(extra);
    let started = Instant::now();
    let (code, out, rss) = measured(node, &args);
    (code, out, rss, started.elapsed())
}

/// Proves the declaration is read with a type check and a bound: `/dev/zero` (read until memory
/// ran out before), a FIFO with no writer (hung for ever) and a 200 MB file (accepted at
/// 1.18 GB RSS) are each refused with exit 2 naming the file and why, within a second and
/// 50 MiB, the store not made; a link to a declaration is followed, and a limit raised by the
/// flag lets a larger one through.
#[test]
fn a_declaration_that_is_not_a_regular_file_or_too_large_is_refused_at_once() {
    let node = Node::new();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path that lives across the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let big = dir.path().join("big.json");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(200_000_000).unwrap();
    let cases = [
        (
            "/dev/zero",
            "is a character device, not a regular file".to_string(),
        ),
        (
            fifo.to_str().unwrap(),
            "is a FIFO, not a regular file".to_string(),
        ),
        (
            big.to_str().unwrap(),
            format!("is 200000000 bytes, over the limit of {} bytes", 16 << 20),
        ),
    ];
    for (file, why) in &cases {
        let (code, out, rss, took) = apply_file(&node, file, &[]);
        eprintln!("apply {file}: exit {code} in {took:?}, peak RSS {rss} KiB");
        assert_eq!(code, 2, "{out}");
        let refused: Value = crate::util::contract(&out);
        let problem = refused["refused"]["problems"][0]
            .as_str()
            .unwrap_or_default();
        assert!(
            problem.starts_with(&format!("declaration {file} {why}")),
            "{out}"
        );
        assert!(took < Duration::from_secs(1), "took {took:?}");
        assert!(rss < BOUND_KIB, "peak RSS {rss} KiB");
        assert!(
            !node.path("/var/lib/mesh-host").exists(),
            "the store was made by a refused apply"
        );
    }

    // A link to a regular declaration is an operator's normal use, and is followed; the flag
    // raises the limit.
    let good = dir.path().join("good.json");
    std::fs::write(&good, serde_json::to_vec(&decl(json!([]))).unwrap()).unwrap();
    let link = dir.path().join("current.json");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    let (code, out, _, _) = apply_file(&node, link.to_str().unwrap(), &[]);
    assert_eq!(code, 0, "{out}");
    let len = std::fs::metadata(&good).unwrap().len();
    let small = (len - 1).to_string();
    let (code, out, _, _) = apply_file(
        &node,
        link.to_str().unwrap(),
        &["--max-declaration-bytes", &small],
    );
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(&format!("is {len} bytes, over the limit of {small} bytes")),
        "{out}"
    );
    let exact = len.to_string();
    let (code, out, _, _) = apply_file(
        &node,
        link.to_str().unwrap(),
        &["--max-declaration-bytes", &exact],
    );
    assert_eq!(code, 0, "{out}");

    // Standard input is read through the same bound: endless zeroes are refused once past it.
    let started = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mesh-host"))
        .arg("--root")
        .arg(node.root())
        .args(["apply", "-", "--json"])
        .stdin(std::fs::File::open("/dev/zero").unwrap())
        .output()
        .unwrap();
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("apply - < /dev/zero: {:?} in {took:?}", out.status.code());
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "declaration standard input holds more than {} bytes",
            16 << 20
        )),
        "{stdout}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

/// The entries of a directory whose names look like the host's temporary files.
fn temporaries(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("mesh-host") && n.ends_with(".tmp"))
        .collect()
}

/// Proves a temporary file never takes another's name: an admin's file named as the host's
/// temporary file used to be (`.NAME.mesh-host.tmp`, which an apply unlinked) survives applies
/// that create and then rewrite the declared file, and no temporary file of the host's is left.
#[test]
fn an_admins_file_named_like_the_old_temporary_survives_an_apply() {
    let node = Node::new();
    node.write("/etc/.app.conf.mesh-host.tmp", "the admin's\n");
    for content in ["one\n", "two\n"] {
        let f = json!([{"id": "app/conf", "type": "file", "path": "/etc/app.conf", "content": content}]);
        node.apply(&decl(f));
        assert_eq!(node.read("/etc/app.conf").as_deref(), Some(content));
        assert_eq!(
            node.read("/etc/.app.conf.mesh-host.tmp").as_deref(),
            Some("the admin's\n"),
            "the admin's file was removed or changed"
        );
        assert_eq!(
            temporaries(&node.path("/etc")),
            vec![".app.conf.mesh-host.tmp".to_string()]
        );
    }
}

/// Proves a declared file that is a mount point (a file bind-mounted over it, in a mount
/// namespace of the test's own, so the host's mounts are untouched) is refused before anything
/// is staged under a root other than `/` (the rename over it failed with EBUSY before, and left
/// its temporary file for good): exit 3 naming the path and the mount, and the directory holds
/// nothing of the host's. The rename's own cleanup, below the refusal, is proved in
/// `beneath`'s unit tests.
#[test]
fn a_file_mounted_over_a_declared_one_is_refused_and_leaves_no_temporary_file() {
    let node = Node::new();
    node.write("/etc/app.conf", "the mounted one\n");
    let over = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(over.path(), "bound over it\n").unwrap();
    let d = decl(
        json!([{"id": "app/conf", "type": "file", "path": "/etc/app.conf", "content": "declared\n"}]),
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), serde_json::to_vec(&d).unwrap()).unwrap();
    let script = r#"mount --bind "$1" "$2" && exec "$3" --root "$4" apply "$5" --json"#;
    let out = std::process::Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "--net",
            "--",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(over.path())
        .arg(node.path("/etc/app.conf"))
        .arg(env!("CARGO_BIN_EXE_mesh-host"))
        .arg(node.root())
        .arg(file.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "apply over a mount point: {:?}\n{stdout}",
        out.status.code()
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("/etc/app.conf: /etc/app.conf is on another mount than the root (mount "),
        "{stdout}"
    );
    assert_eq!(temporaries(&node.path("/etc")), Vec::<String>::new());
    assert_eq!(
        node.read("/etc/app.conf").as_deref(),
        Some("the mounted one\n")
    );
}

/// Proves a `--root` that is not there is refused (it was created silently, with a store in it
/// describing no machine): exit 2 naming it, and nothing made; a file as the root is refused the
/// same way; `version` needs no root.
#[test]
fn a_root_that_does_not_exist_is_refused_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("mnt/sysimage");
    let d = decl(json!([{"id": "f", "type": "file", "path": "/etc/f", "content": "x"}]));
    let file = dir.path().join("d.json");
    std::fs::write(&file, serde_json::to_vec(&d).unwrap()).unwrap();
    let mesh = |root: &std::path::Path, args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_mesh-host"))
            .arg("--root")
            .arg(root)
            .args(args)
            .output()
            .unwrap()
    };
    for args in [
        vec!["apply", file.to_str().unwrap(), "--json"],
        vec!["reconcile", "--json"],
        vec!["briefing", "--json"],
    ] {
        let out = mesh(&missing, &args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stdout}");
        assert!(
            stdout.contains(&format!("--root {} does not exist", missing.display())),
            "{stdout}"
        );
        assert!(!dir.path().join("mnt").exists(), "{args:?} made the root");
    }
    let out = mesh(&file, &["owned", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("is not a directory"));
    assert!(mesh(&missing, &["version"]).status.success());
}

/// Runs, in a mount namespace of its own (none of it reaches the machine), the node's root moved
/// onto a 256 KiB tmpfs filled to the last page but `free_pages`: an apply of `d` (JSON) with
/// `--json`, then copies of the store's directory and the root's `/etc` and `/srv` out to
/// `out`, then, the filler removed, the same apply again. Returns both runs' exit codes and
/// stdout.
fn apply_on_a_full_disk(
    node: &Node,
    d: &Value,
    free_pages: u32,
    out: &std::path::Path,
) -> ((i32, String), (i32, String)) {
    let file = out.join("d.json");
    std::fs::write(&file, serde_json::to_vec(d).unwrap()).unwrap();
    let script = r#"set -eu
bin=$1 root=$2 out=$3 free=$4 decl=$5
cp -a "$root/." "$out/saved"
mount -t tmpfs -o size=256k tmpfs "$root"
cp -a "$out/saved/." "$root/"
dd if=/dev/zero of="$root/filler" bs=4k 2>/dev/null || true
truncate -s "-$((free * 4096))" "$root/filler"
set +e
"$bin" --root "$root" apply "$decl" --json > "$out/stdout1" 2> "$out/stderr1"
echo $? > "$out/code1"
set -e
cp -a "$root/var/lib/mesh-host" "$out/store"
cp -a "$root/etc" "$out/etc"
cp -a "$root/srv" "$out/srv" 2>/dev/null || true
rm "$root/filler"
set +e
"$bin" --root "$root" apply "$decl" --json > "$out/stdout2" 2> "$out/stderr2"
echo $? > "$out/code2"
"#;
    let status = std::process::Command::new("timeout")
        .args([
            "120",
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--net",
        ])
        .args(["--", "sh", "-c", script, "sh"])
        .arg(env!("CARGO_BIN_EXE_mesh-host"))
        .arg(node.root())
        .arg(out)
        .arg(free_pages.to_string())
        .arg(&file)
        .env(crate::util::HOST_TOOLS, "1")
        .env_remove("MESH_HOST_FAILPOINT")
        .status()
        .unwrap();
    assert!(status.success(), "the full-disk bed failed: {status:?}");
    let read = |n: &str| std::fs::read_to_string(out.join(n)).unwrap();
    let code = |n: &str| read(n).trim().parse::<i32>().unwrap();
    (
        (code("code1"), read("stdout1")),
        (code("code2"), read("stdout2")),
    )
}

/// Proves a full disk never takes the apply's report with it nor leaves the store untrue: with
/// no page free the very first write of the store fails, and the report is printed all the same
/// with the store's error naming the file and ENOSPC (exit 1, failed part-way), the snapshot
/// byte for byte as it was; with one page free a directory is made, the next file fails for want
/// of space and the store's last write fails too: the report says both, no temporary file is
/// left, and the journal keeps the directory's record (the next apply, with room again, finds it
/// unchanged and finishes the rest).
#[test]
fn a_full_disk_still_reports_the_apply_and_leaves_the_store_true() {
    let first = decl(json!([
        {"id": "app/a", "type": "file", "path": "/etc/a.conf", "content": "one\n"}
    ]));
    let second = decl(json!([
        {"id": "app/d", "type": "directory", "path": "/srv/d"},
        {"id": "app/a", "type": "file", "path": "/etc/a.conf", "content": "one\n", "mode": "0600"},
        {"id": "app/b", "type": "file", "path": "/etc/b.conf", "content": "two\n"}
    ]));
    let entry = |report: &Value, id: &str| -> (String, String) {
        let e = report["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == id)
            .unwrap_or_else(|| panic!("no entry {id} in {report:#}"));
        (
            e["outcome"].as_str().unwrap().to_string(),
            e["detail"].as_str().unwrap_or_default().to_string(),
        )
    };
    for free in [0, 1] {
        let node = Node::new();
        let r = node.apply(&first);
        assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
        let store = node.path("/var/lib/mesh-host");
        let before = std::fs::read(store.join("state.json")).unwrap();
        let out = tempfile::tempdir().unwrap();
        let ((code, stdout), (again, stdout2)) =
            apply_on_a_full_disk(&node, &second, free, out.path());
        if let Err(e) = serde_json::from_str::<Value>(&stdout) {
            panic!("{free} free: no report ({e}): {stdout}");
        }
        let report = crate::util::contract(&stdout);
        assert_eq!(code, 1, "{free} free: {report:#}");
        assert_eq!(report["outcome"], "failed", "{report:#}");
        let said = report["store_error"].as_str().unwrap_or_default();
        let kept = out.path().join("store");
        let tmp = format!("{}/state.json.tmp", store.display());
        assert!(
            said.starts_with(&format!(
                "store {tmp}: No space left on device (os error 28)"
            )),
            "{free} free: {report:#}"
        );
        let left: Vec<String> = std::fs::read_dir(&kept)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("tmp"))
            .collect();
        assert_eq!(
            left,
            Vec::<String>::new(),
            "{free} free: a temporary file left"
        );
        assert_eq!(
            temporaries(&out.path().join("etc")),
            Vec::<String>::new(),
            "{free} free"
        );
        if free == 0 {
            // Nothing could be written: nothing was done, and the snapshot is as it was.
            assert_eq!(report["entries"], json!([]), "{report:#}");
            assert_eq!(
                std::fs::read(kept.join("state.json")).unwrap(),
                before,
                "the snapshot changed"
            );
            assert!(!kept.join("state.journal").exists());
        } else {
            assert_eq!(entry(&report, "app/d").0, "created", "{report:#}");
            let (outcome, detail) = entry(&report, "app/a");
            assert_eq!(outcome, "failed", "{report:#}");
            assert!(
                detail.ends_with("No space left on device (os error 28)"),
                "{detail}"
            );
            assert!(out.path().join("srv/d").is_dir());
            let journal = std::fs::read_to_string(kept.join("state.journal")).unwrap();
            assert!(journal.contains("\"/srv/d\""), "{journal}");
        }
        // With room again the store is read as it was left: what the failed apply did is
        // recorded (the directory unchanged, not made again), and the rest is done.
        if let Err(e) = serde_json::from_str::<Value>(&stdout2) {
            panic!("{free} free, again: ({e}): {stdout2}");
        }
        let report2 = crate::util::contract(&stdout2);
        assert_eq!(again, 0, "{free} free, again: {report2:#}");
        let d = entry(&report2, "app/d").0;
        assert_eq!(
            d,
            if free == 0 { "created" } else { "unchanged" },
            "{report2:#}"
        );
        assert_eq!(entry(&report2, "app/b").0, "created", "{report2:#}");
    }
}
