//! One resident host per store: a second `mesh-host run` on the same root is refused at once,
//! names the first's pid and exits 6, changing nothing (the first's pid file stays, and it goes on
//! answering SIGHUP); the pid file is removed by its holder when it stops, and a host started
//! after that claims the store. The host runs without transparent huge pages.

use crate::util::Node;
use serde_json::json;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(20);

/// The exit code of a `mesh-host run` refused because another holds the store.
const ALREADY_RUNNING: i32 = 6;

fn run_host(node: &Node, log: &PathBuf) -> Child {
    // `unshare` execs the host: the child's pid is the host's.
    Command::new("unshare")
        .args(["--net", "--"])
        .arg(env!("CARGO_BIN_EXE_mesh-host"))
        .arg("--root")
        .arg(node.root())
        .args(["run", "--legacy-period", "0"])
        .env("RUST_LOG", "info")
        .env_remove("MESH_HOST_FAILPOINT")
        .env_remove("MIMALLOC_ALLOW_THP")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

fn until(what: &str, f: impl Fn() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < WAIT, "{what} never happened");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn exited(child: &mut Child) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if start.elapsed() > WAIT {
            let _ = child.kill();
            panic!("the host did not exit within {WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) to a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
}

#[test]
fn a_second_resident_host_on_a_store_is_refused_naming_the_first_and_the_first_goes_on() {
    let node = Node::new();
    node.apply(&json!({"version": 1, "node": "n1", "mode": "converged", "resources": [
        {"id": "etc/motd", "module": "etc", "type": "file", "path": "/etc/motd", "content": "mesh\n"}]}));
    let pid_file = node.path("/var/lib/mesh-host/run.pid");
    let log = node.root().with_extension("log");
    let mut first = run_host(&node, &log);
    let stderr = || std::fs::read_to_string(&log).unwrap_or_default();
    until("the first reconcile", || stderr().contains("reconciled"));
    let pid = first.id();
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap().trim(),
        pid.to_string()
    );
    // It started itself again without transparent huge pages (src/main.rs): the same process,
    // its allocator told so by its environment, and the kernel holding them off for it.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(
        environ
            .split(|b| *b == 0)
            .any(|v| v == b"MIMALLOC_ALLOW_THP=0"),
        "{}",
        String::from_utf8_lossy(&environ)
    );
    // Named as before: a local apply tells only a process named mesh-host.
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .unwrap()
            .trim(),
        "mesh-host"
    );
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(
        status
            .lines()
            .any(|l| l.split_whitespace().eq(["THP_enabled:", "0"])),
        "{status}"
    );

    let second_log = node.root().with_extension("second.log");
    let mut second = run_host(&node, &second_log);
    let status = exited(&mut second);
    let said = std::fs::read_to_string(&second_log).unwrap();
    assert_eq!(status.code(), Some(ALREADY_RUNNING), "{said}");
    assert!(
        said.contains(&format!(
            "error: another resident host already runs on store {} (pid {pid})",
            node.path("/var/lib/mesh-host").display()
        )),
        "{said}"
    );
    assert!(!said.contains("resident host started"), "{said}");
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap().trim(),
        pid.to_string(),
        "the refused host touched the pid file"
    );

    // The first still answers: a SIGHUP is a reconcile.
    let rouses = || stderr().matches("reconciled trigger=\"rouse\"").count();
    let before = rouses();
    signal(pid, libc::SIGHUP);
    until("the rouse's reconcile", || rouses() > before);

    // Stopped, it removes its pid file; the next host claims the store.
    signal(pid, libc::SIGTERM);
    assert_eq!(exited(&mut first).code(), Some(0), "{}", stderr());
    assert!(!pid_file.exists(), "the stopped host left its pid file");
    let third_log = node.root().with_extension("third.log");
    let mut third = run_host(&node, &third_log);
    let third_said = || std::fs::read_to_string(&third_log).unwrap_or_default();
    until("the third host's reconcile", || {
        third_said().contains("reconciled")
    });
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap().trim(),
        third.id().to_string()
    );
    signal(third.id(), libc::SIGTERM);
    assert_eq!(exited(&mut third).code(), Some(0), "{}", third_said());
}
