//! Deadlines through the built binary: a `systemctl` that never answers (a stub placed first on
//! PATH, standing in for a systemd that hangs; no systemd runs as PID 1 on these machines) fails
//! its resource at the node's declared deadline, naming the command, with its process group
//! killed; the store's lock is let go, and the next apply runs.

use crate::util::Node;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

/// Stands in for `systemctl`. While `$STUB/hang` exists it never answers: it starts a `sleep`
/// of its own (logging its pid to `$STUB/pids`) and waits for it, so only a kill of the whole
/// process group ends both. Otherwise `show` answers that the unit is loaded and running and
/// enabled, and every other verb exits 0.
const SYSTEMCTL: &str = r#"#!/bin/sh
echo "$*" >> "$STUB/calls"
if [ -f "$STUB/hang" ]; then
  echo $$ >> "$STUB/pids"
  sleep 1000 &
  echo $! >> "$STUB/pids"
  wait
fi
case "$1" in
  show) printf 'LoadState=loaded\nActiveState=active\nUnitFileState=enabled\n' ;;
esac
exit 0
"#;

fn decl() -> Value {
    json!({
        "version": 1, "node": "n1", "mode": "converged",
        "settings": {
            "ports": {"store": 5432, "bus": 5672, "broker_management": 15672, "registry": 5000, "hub": 51820},
            "deadlines": {"query_s": 1, "service_s": 1}
        },
        "resources": [
            {"id": "web/nginx", "module": "web", "type": "service", "name": "nginx.service",
             "state": "running", "enabled": true}
        ]
    })
}

/// Whether a process is still alive (a zombie awaiting its reaper counts as gone).
pub(crate) fn alive(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[test]
fn a_service_manager_that_never_answers_fails_at_the_deadline_and_the_next_apply_runs() {
    let node = Node::new();
    let stub = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(stub.path().join("bin")).unwrap();
    let prog = stub.path().join("bin/systemctl");
    std::fs::write(&prog, SYSTEMCTL).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        stub.path().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let home = stub.path().display().to_string();
    let env = [("PATH", path.as_str()), ("STUB", home.as_str())];

    std::fs::write(stub.path().join("hang"), "").unwrap();
    let started = Instant::now();
    let r = node.apply_env(&decl(), &[], &env);
    let took = started.elapsed();
    assert_eq!(r.code, Some(1), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.outcome("web/nginx"), "failed");
    let report = r.json();
    let entry = &report["entries"][0];
    assert_eq!(
        entry["detail"],
        "reading service nginx.service through systemd: systemctl show -p \
         LoadState,ActiveState,UnitFileState nginx.service did not finish within 1 s and was killed",
        "{report:#}"
    );
    // The stub would sleep 1000 s: the apply returned because the deadline ended it.
    assert!(took < Duration::from_secs(60), "took {took:?}");
    let pids = std::fs::read_to_string(stub.path().join("pids")).unwrap();
    assert_eq!(pids.lines().count(), 2, "the stub and its sleep: {pids}");
    // The group was killed: neither the stub nor its own child outlives it (allowing the
    // machine's init a moment to reap them).
    let until = Instant::now() + Duration::from_secs(10);
    while pids.lines().any(alive) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    for pid in pids.lines() {
        assert!(
            !alive(pid),
            "process {pid} of the stub's group outlived the deadline"
        );
    }
    assert_eq!(node.state()["owned"], json!([]), "nothing was recorded");

    // The lock was let go: the next apply, with a systemctl that answers, runs and succeeds.
    std::fs::remove_file(stub.path().join("hang")).unwrap();
    let r = node.apply_env(&decl(), &[], &env);
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.outcome("web/nginx"), "unchanged");
    assert_eq!(node.state()["owned"][0]["id"], "web/nginx");
}

/// The pids of the live processes whose command line is exactly `line` and whose environment
/// holds `MESH_TEST_TAG=tag` (so another run's processes on the machine are not counted).
fn tagged(line: &str, tag: &str) -> Vec<String> {
    let want = format!("MESH_TEST_TAG={tag}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        let (Ok(cmdline), Ok(env)) = (
            std::fs::read(entry.path().join("cmdline")),
            std::fs::read(entry.path().join("environ")),
        ) else {
            continue;
        };
        let words: Vec<&[u8]> = cmdline
            .split(|b| *b == 0)
            .filter(|w| !w.is_empty())
            .collect();
        if words.join(&b' ') == line.as_bytes()
            && env.split(|b| *b == 0).any(|v| v == want.as_bytes())
            && alive(&pid)
        {
            found.push(pid);
        }
    }
    found
}

#[test]
fn a_daemon_an_action_starts_with_setsid_is_killed_at_the_deadline_and_named() {
    let node = Node::new();
    let tag = format!("setsid-{}", std::process::id());
    let decl = json!({
        "version": 1, "node": "n1", "mode": "converged",
        "settings": {
            "ports": {"store": 5432, "bus": 5672, "broker_management": 15672, "registry": 5000, "hub": 51820},
            "deadlines": {"action_s": 1}
        },
        "resources": [
            {"id": "ops/daemon", "module": "ops", "type": "action",
             "run": ["sh", "-c", "setsid sh -c 'sleep 1000' & sleep 30"],
             "verify": ["false"]}
        ]
    });
    let started = Instant::now();
    let r = node.apply_env(&decl, &[], &[("MESH_TEST_TAG", tag.as_str())]);
    let took = started.elapsed();
    assert_eq!(r.code, Some(1), "{}\n{}", r.stdout, r.stderr);
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert_eq!(r.outcome("ops/daemon"), "failed");
    let report = r.json();
    let detail = report["entries"][0]["detail"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // Nothing is left of the daemon once the apply has returned (a killed process is gone when
    // it is next scheduled, and its reaper may take a moment).
    let until = Instant::now() + Duration::from_secs(10);
    while !tagged("sleep 1000", &tag).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        tagged("sleep 1000", &tag),
        Vec::<String>::new(),
        "the setsid daemon outlived the action's deadline: {detail}"
    );
    // The report names what was killed: the new session's shell and its sleep.
    let said = detail
        .split_once("; killed 2 processes left behind: ")
        .map(|(_, s)| s.to_string())
        .unwrap_or_else(|| panic!("no kill named in {detail:?}"));
    let names: Vec<&str> = said
        .split(", pid ")
        .map(|p| {
            p.split_once(" (")
                .map_or("", |(_, c)| c.trim_end_matches(')'))
        })
        .collect();
    assert_eq!(names, ["sh -c sleep 1000", "sleep 1000"], "{detail}");
    assert!(
        detail.contains("did not finish within 1 s and was killed"),
        "{detail}"
    );
}
