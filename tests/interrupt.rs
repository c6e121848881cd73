//! An interrupted `mesh-host apply`: SIGTERM (or Ctrl-C's SIGINT) is passed on to the child under
//! way, the apply stops before the next resource, says "interrupted by SIGTERM after N of M
//! resources" and exits 128 + the signal, with no child left running and the store telling the
//! truth about what was done; and a host killed outright takes its child with it
//! (`PR_SET_PDEATHSIG`), so the next apply never runs beside it.

use crate::util::Node;
use serde_json::{json, Value};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(20);

/// A file, an action that writes its shell's and its sleep's pids and sleeps 30 s (unless the
/// root holds `fast`), and a file after it.
fn declaration() -> Value {
    json!({"version": 1, "node": "n1", "mode": "converged", "resources": [
        {"id": "etc/before", "module": "etc", "type": "file", "path": "/etc/before", "content": "1\n"},
        {"id": "db/migrate", "type": "action",
         "run": ["sh", "-c", "echo $$ > \"$MESH_HOST_ROOT/shell.pid\"; \
                  [ -e \"$MESH_HOST_ROOT/fast\" ] || { sleep 30 & echo $! > \"$MESH_HOST_ROOT/sleep.pid\"; wait $!; }; \
                  touch \"$MESH_HOST_ROOT/migrated\""],
         "verify": ["sh", "-c", "test -e \"$MESH_HOST_ROOT/migrated\""]},
        {"id": "etc/after", "module": "etc", "type": "file", "path": "/etc/after", "content": "2\n"}
    ]})
}

/// Starts `mesh-host apply` in a network namespace of its own (`unshare` execs the host, so the
/// child's pid is the host's), its output in files under the root's sibling.
fn start_apply(node: &Node, decl: &Value) -> (Child, std::path::PathBuf) {
    let file = node.root().with_extension("json");
    std::fs::write(&file, serde_json::to_vec(decl).unwrap()).unwrap();
    let out = node.root().with_extension("out");
    let child = Command::new("unshare")
        .args(["--net", "--"])
        .arg(env!("CARGO_BIN_EXE_mesh-host"))
        .arg("--root")
        .arg(node.root())
        .args(["apply", file.to_str().unwrap(), "--json"])
        .env_remove("MESH_HOST_FAILPOINT")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(out.with_extension("err")).unwrap())
        .spawn()
        .unwrap();
    (child, out)
}

/// The pid a file under the root names, once it does.
fn pid_in(node: &Node, name: &str) -> i32 {
    let start = Instant::now();
    loop {
        if let Some(pid) = node.read(name).and_then(|t| t.trim().parse().ok()) {
            return pid;
        }
        assert!(start.elapsed() < WAIT, "{name} was never written");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether process `pid` runs: it exists and is not a zombie.
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// Polls until `pid` no longer runs, to a deadline.
fn gone_within(pid: i32, within: Duration) -> bool {
    let start = Instant::now();
    while running(pid) {
        if start.elapsed() > within {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > WAIT {
            let _ = child.kill();
            panic!("the apply did not end within {WAIT:?} of the signal");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) to a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
}

fn ids(v: &Value) -> Vec<(String, String)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_string(),
                e["outcome"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn sigterm_to_an_apply_stops_its_child_says_how_far_it_got_and_exits_143() {
    let node = Node::new();
    let (mut apply, out) = start_apply(&node, &declaration());
    let shell = pid_in(&node, "shell.pid");
    let sleep = pid_in(&node, "sleep.pid");
    signal(apply.id(), libc::SIGTERM);
    let status = wait_exit(&mut apply);
    // The child the host started was reaped before the host let go of the store and exited.
    let shell_ran_on = running(shell);
    let stdout = std::fs::read_to_string(&out).unwrap();
    let stderr = std::fs::read_to_string(out.with_extension("err")).unwrap();
    assert_eq!(
        (status.code(), status.signal()),
        (Some(143), None),
        "{stdout}\n{stderr}"
    );
    assert!(
        !shell_ran_on,
        "the action's shell {shell} outlived the apply"
    );
    assert!(
        gone_within(sleep, Duration::from_secs(5)),
        "the action's sleep {sleep}, in the child's group, still runs"
    );
    assert!(
        stderr.contains("interrupted by SIGTERM after 2 of 3 resources"),
        "{stderr}"
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["outcome"], "failed", "{report:#}");
    assert_eq!(
        report["interrupted"],
        json!({"signal": "SIGTERM", "after": 2, "of": 3})
    );
    assert_eq!(
        ids(&report["entries"]),
        [
            ("etc/before".to_string(), "created".to_string()),
            ("db/migrate".to_string(), "failed".to_string())
        ]
    );
    let detail = report["entries"][1]["detail"].as_str().unwrap();
    assert!(detail.contains("was killed by signal 15"), "{detail}");

    // The store matches the disk: the first file is the host's, the action and the last file
    // were not done and are not recorded.
    let state = node.state();
    let owned: Vec<&str> = state["owned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert_eq!(owned, ["etc/before"], "{state:#}");
    assert!(state["pending"].is_null(), "{state:#}");
    assert_eq!(node.read("/etc/before").as_deref(), Some("1\n"));
    assert!(node.read("/etc/after").is_none() && node.read("migrated").is_none());
    let briefing = node.run(&["briefing", "--json"]).json();
    assert_eq!(briefing["outcome"], "failed", "{briefing:#}");
    assert!(
        briefing["lines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["subject"] == "apply"
                && l["detail"]
                    .as_str()
                    .unwrap()
                    .starts_with("interrupted by SIGTERM after 2 of 3 resources")),
        "{briefing:#}"
    );

    // The next apply takes the lock at once and finishes it, saying truthfully what it did.
    node.write("fast", "");
    let r = node.apply(&declaration());
    assert_eq!(
        ids(&r.json()["entries"]),
        [
            ("etc/before".to_string(), "unchanged".to_string()),
            ("db/migrate".to_string(), "changed".to_string()),
            ("etc/after".to_string(), "created".to_string())
        ]
    );
    assert_eq!(r.json()["outcome"], "ok");
}

/// An action whose program ends at SIGINT (a `sleep` it execs), then the host.
#[test]
fn sigint_to_an_apply_exits_130_after_the_child_is_gone() {
    let node = Node::new();
    let decl = json!({"version": 1, "node": "n1", "mode": "converged", "resources": [
        {"id": "db/migrate", "type": "action",
         "run": ["sh", "-c", "echo $$ > \"$MESH_HOST_ROOT/shell.pid\"; exec sleep 30"],
         "verify": ["false"]}
    ]});
    let (mut apply, out) = start_apply(&node, &decl);
    let child = pid_in(&node, "shell.pid");
    signal(apply.id(), libc::SIGINT);
    let status = wait_exit(&mut apply);
    let child_ran_on = running(child);
    let stderr = std::fs::read_to_string(out.with_extension("err")).unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(!child_ran_on, "the action {child} outlived the apply");
    assert!(
        stderr.contains("interrupted by SIGINT after 1 of 1 resource"),
        "{stderr}"
    );
}

/// Whether `sig` is pending for process `pid` (sent to the process, not yet delivered).
fn pending(pid: u32, sig: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .filter_map(|l| {
            l.strip_prefix("ShdPnd:")
                .or_else(|| l.strip_prefix("SigPnd:"))
        })
        .filter_map(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .any(|mask| mask & (1 << (sig - 1)) != 0)
}

/// A child that does not end at SIGINT (a shell's background job ignores it) holds the apply
/// until its deadline; a second SIGINT kills its whole group at once.
#[test]
fn a_second_sigint_kills_a_child_that_does_not_end_at_the_first() {
    let node = Node::new();
    let (mut apply, out) = start_apply(&node, &declaration());
    pid_in(&node, "shell.pid");
    let sleep = pid_in(&node, "sleep.pid");
    signal(apply.id(), libc::SIGINT);
    // Two signals pending at once are one: the second is sent once the first was delivered.
    let start = Instant::now();
    while pending(apply.id(), libc::SIGINT) {
        assert!(
            start.elapsed() < WAIT,
            "the first SIGINT was never delivered"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    signal(apply.id(), libc::SIGINT);
    let status = wait_exit(&mut apply);
    let stderr = std::fs::read_to_string(out.with_extension("err")).unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        gone_within(sleep, Duration::from_secs(5)),
        "the action's sleep {sleep} still runs"
    );
    assert!(
        stderr.contains("interrupted by SIGINT after 2 of 3 resources"),
        "{stderr}"
    );
}

#[test]
fn a_host_killed_outright_takes_its_child_with_it() {
    let node = Node::new();
    let decl = json!({"version": 1, "node": "n1", "mode": "converged", "resources": [
        {"id": "db/migrate", "type": "action",
         "run": ["sh", "-c", "echo $$ > \"$MESH_HOST_ROOT/shell.pid\"; exec sleep 30"],
         "verify": ["false"]}
    ]});
    let (mut apply, _) = start_apply(&node, &decl);
    let child = pid_in(&node, "shell.pid");
    apply.kill().unwrap();
    apply.wait().unwrap();
    assert!(
        gone_within(child, Duration::from_secs(5)),
        "the action {child} outlived the host that was killed"
    );
}
