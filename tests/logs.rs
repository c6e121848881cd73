//! The resident host's log as journald keeps it. systemd cannot run here, so the journal is
//! stood in for by a file on the host's stderr whose device and inode `JOURNAL_STREAM` names, as
//! systemd sets it for a unit whose output is the journal; the test then filters the lines by
//! their `<N>` priority the way `journalctl -p warning` does (priorities 0 to 4). The default
//! filter (no `RUST_LOG`) is the one in force, so the resident host's info lines must be there.

use crate::util::Node;
use serde_json::json;
use std::os::unix::fs::MetadataExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(60);

/// A node with a declaration stored, whose launcher state cannot be written (`known-good` is a
/// directory holding a file), so every reconcile logs a warning beside its info line.
fn node() -> Node {
    let node = Node::new();
    node.apply(&json!({"version": 1, "node": "n1", "mode": "converged", "resources": [
        {"id": "etc/motd", "module": "etc", "type": "file", "path": "/etc/motd", "content": "hi\n"}
    ]}));
    node.write("/var/lib/mesh-host/known-good/blocked", "");
    node
}

/// `mesh-host run` with stderr to `err`, until its first reconcile is logged; then TERM.
fn run_until_reconciled(node: &Node, err: &std::path::Path, journal: Option<String>) -> String {
    let file = std::fs::File::create(err).unwrap();
    let mut cmd = Command::new("unshare");
    cmd.args(["--net", "--"])
        .arg(env!("CARGO_BIN_EXE_mesh-host"))
        .arg("--root")
        .arg(node.root())
        .arg("run")
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .env_remove("JOURNAL_STREAM")
        .env_remove("MESH_HOST_FAILPOINT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file);
    if let Some(j) = journal {
        cmd.env("JOURNAL_STREAM", j);
    }
    let child = cmd.spawn().unwrap();
    let start = Instant::now();
    while !std::fs::read_to_string(err)
        .unwrap_or_default()
        .contains("reconciled")
    {
        assert!(
            start.elapsed() < DEADLINE,
            "no reconcile logged: {}",
            std::fs::read_to_string(err).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    stop(child);
    std::fs::read_to_string(err).unwrap()
}

fn stop(mut child: Child) {
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("the host did not stop on TERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The line's priority, as journald reads a `<N>` prefix.
fn priority(line: &str) -> Option<u8> {
    let rest = line.strip_prefix('<')?;
    let (n, _) = rest.split_once('>')?;
    n.parse().ok().filter(|n| *n <= 7)
}

fn has_timestamp(line: &str) -> bool {
    // tracing's own: 2026-12-01T12:34:56.789Z
    line.as_bytes().windows(11).any(|w| {
        w[4] == b'-' && w[7] == b'-' && w[10] == b'T' && w[..4].iter().all(u8::is_ascii_digit)
    })
}

#[test]
fn under_the_journal_lines_carry_priorities_that_journalctl_p_filters() {
    let node = node();
    let dir = tempfile::tempdir().unwrap();
    let err = dir.path().join("journal");
    std::fs::write(&err, "").unwrap();
    let meta = std::fs::metadata(&err).unwrap();
    // The file is created again by File::create with the same inode (truncated, not replaced).
    let text = run_until_reconciled(&node, &err, Some(format!("{}:{}", meta.dev(), meta.ino())));
    let lines: Vec<&str> = text.lines().collect();
    assert!(!lines.is_empty());
    for l in &lines {
        assert!(priority(l).is_some(), "no priority prefix: {l:?}\n{text}");
        assert!(!has_timestamp(l), "a timestamp of its own: {l:?}");
        assert!(!l.contains('\x1b'), "colour in the journal: {l:?}");
    }
    // At info by default: the resident host's start and its reconcile.
    let info: Vec<&&str> = lines.iter().filter(|l| priority(l) == Some(6)).collect();
    assert!(
        info.iter().any(|l| l.contains("resident host started")),
        "{text}"
    );
    assert!(info.iter().any(|l| l.contains("reconciled")), "{text}");
    // journalctl -p warning: 0 to 4 alone, which is the warning about known-good and nothing
    // of the info lines.
    let warned: Vec<&&str> = lines.iter().filter(|l| priority(l).unwrap() <= 4).collect();
    assert!(!warned.is_empty(), "{text}");
    assert!(
        warned
            .iter()
            .all(|l| l.starts_with("<4>") && l.contains("known-good")),
        "{warned:?}"
    );
    assert!(!warned.iter().any(|l| l.contains("reconciled")));
}

#[test]
fn a_journal_stream_that_is_not_this_stderr_is_ignored() {
    // Inherited by a process whose stderr went elsewhere: plain lines, stamped, never coloured
    // (a file is not a terminal).
    let node = node();
    let dir = tempfile::tempdir().unwrap();
    let err = dir.path().join("stderr");
    let text = run_until_reconciled(&node, &err, Some("1:1".into()));
    for l in text.lines() {
        assert!(priority(l).is_none(), "{l:?}");
        assert!(!l.contains('\x1b'), "{l:?}");
    }
    assert!(text.lines().any(has_timestamp), "{text}");
    assert!(text.contains(" WARN "), "{text}");
}

/// On a terminal (a pty from script(1)), lines are coloured unless NO_COLOR is set.
#[test]
fn no_color_is_honoured_on_a_terminal() {
    let node = node();
    let run = |no_color: bool| {
        let mut cmd = Command::new("script");
        cmd.args(["-qec"])
            .arg(format!(
                "timeout -s TERM 3 unshare --net -- {} --root {} run",
                env!("CARGO_BIN_EXE_mesh-host"),
                node.root().display()
            ))
            .arg("/dev/null")
            .env_remove("RUST_LOG")
            .env_remove("JOURNAL_STREAM")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null());
        if no_color {
            cmd.env("NO_COLOR", "1");
        }
        let out = cmd.output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let coloured = run(false);
    assert!(coloured.contains("resident host started"), "{coloured}");
    assert!(
        coloured.contains('\x1b'),
        "no colour on a terminal: {coloured:?}"
    );
    let plain = run(true);
    assert!(plain.contains("resident host started"), "{plain}");
    assert!(
        !plain.contains('\x1b'),
        "colour despite NO_COLOR: {plain:?}"
    );
}
