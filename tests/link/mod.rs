//! The link against a real RabbitMQ with TLS: the broker is Debian's `rabbitmq-server`, started
//! by these tests on ports of their own with a certificate made for it (`lab::Rabbit`), shared by
//! the tests of this binary (the broker-restart test has one of its own), and stopped at exit.
//! Nodes run the built binary inside a lab namespace of their own, reaching the broker through a
//! relay (`lab::Relay`), so nothing of the machine's own network or firewall is touched. The
//! controller is the lab's stand-in (`lab::Controller`).

mod absence;
mod broker_side;
mod by_name;
mod cluster;
mod enrol;
mod recover;
mod release;
mod resident;
mod status;
mod token_file;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The binary the nodes run: the built one, or another named by `MESH_HOST_LINK_BIN` (the
/// static binary `packaging/build-static` makes, to check the link works in it too).
pub fn bin() -> String {
    std::env::var("MESH_HOST_LINK_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mesh-host").into())
}

/// The broker, the node's namespace and the relay between them.
pub struct Bed {
    pub rabbit: lab::Rabbit,
    pub node: lab::Machine,
    pub relay: lab::Relay,
}

impl Bed {
    pub fn new() -> Bed {
        Bed::around(lab::Rabbit::start().expect("a RabbitMQ broker with TLS"))
    }

    /// A node's namespace and a relay to `rabbit`.
    pub fn around(rabbit: lab::Rabbit) -> Bed {
        let lab = shared_lab();
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let node = lab
            .machine(&format!("ln{n}"))
            .expect("the node's namespace");
        let to = rabbit.addr().parse().unwrap();
        let relay = lab::Relay::start(&node, to).expect("a relay to the broker");
        Bed {
            rabbit,
            node,
            relay,
        }
    }

    /// A controller whose tokens name the relay (the broker as the node reaches it).
    pub fn controller(&self) -> lab::Controller {
        lab::Controller::connect_to(&self.rabbit, vec![self.relay.addr()]).expect("controller")
    }

    /// `mesh-host --root ROOT enrol --token-file FILE` inside the node's namespace, the token
    /// written to a file beside the root (mode 0600), as an operator is told to.
    pub fn enrol(&self, root: &Path, token: &str) -> lab::Output {
        let file = root.with_file_name("token");
        std::fs::write(&file, token).unwrap();
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        self.enrol_with(root, &["--token-file", file.to_str().unwrap()])
    }

    /// `mesh-host --root ROOT enrol ARGS…` inside the node's namespace.
    pub fn enrol_with(&self, root: &Path, args: &[&str]) -> lab::Output {
        let mut argv = vec![
            bin(),
            "--root".into(),
            root.to_str().unwrap().into(),
            "enrol".into(),
        ];
        argv.extend(args.iter().map(|a| a.to_string()));
        self.node
            .run_timeout(&argv, Duration::from_secs(120))
            .expect("running mesh-host enrol")
    }

    /// Starts `mesh-host run` inside the node's namespace with a one-second heartbeat; its log
    /// goes to a file in the lab's directory.
    pub fn resident(&self, root: &Path) -> Resident {
        let bin = bin();
        let process = self
            .node
            .spawn_env(
                &[
                    bin.as_str(),
                    "--root",
                    root.to_str().unwrap(),
                    "run",
                    "--heartbeat",
                    "1",
                    "--legacy-period",
                    "0",
                ],
                &[("RUST_LOG".into(), "info".into())],
            )
            .expect("starting mesh-host run");
        Resident { process }
    }
}

static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn shared_lab() -> &'static lab::Lab {
    static LAB: OnceLock<&'static lab::Lab> = OnceLock::new();
    LAB.get_or_init(|| lab::Lab::new().expect("lab").until_exit())
}

/// The bed every test of this binary shares (one broker).
pub fn bed() -> &'static Bed {
    static BED: OnceLock<Bed> = OnceLock::new();
    BED.get_or_init(Bed::new)
}

/// A `mesh-host run` in the background, stopped with SIGTERM when dropped.
pub struct Resident {
    process: lab::Process,
}

impl Resident {
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid (nsenter execs mesh-host, so it is the host).
        unsafe {
            libc::kill(self.process.pid() as i32, sig);
        }
    }

    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Waits until the log holds `needle` `n` times; returns whether it did within `within`.
    pub fn wait_log(&self, needle: &str, n: usize, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.log().matches(needle).count() >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Resident {
    fn drop(&mut self) {
        // SIGTERM, up to ten seconds to finish, then killed.
        self.process.terminate(Duration::from_secs(10));
    }
}

/// A fresh node root (0755, so nothing about it depends on the test's umask).
pub fn root() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let r = d.path().join("root");
    std::fs::create_dir_all(&r).unwrap();
    (d, r)
}

/// A declaration of one file for `node`.
pub fn file_decl(node: &str, path: &str, content: &str) -> Value {
    json!({
        "version": 1, "node": node, "mode": "converged", "taken": [],
        "resources": [
            {"id": "motd", "type": "file", "path": path, "content": content, "mode": "0644"}
        ]
    })
}

/// Waits up to `wait` for a verified heartbeat from `node` (the resident host is linked).
pub fn linked(ctl: &mut lab::Controller, node: &str, wait: Duration) -> lab::Upward {
    ctl.wait_for(node, "heartbeat", wait, |_| true)
        .unwrap_or_else(|| panic!("no heartbeat from {node}"))
}

/// Declares version `v` of `content` in `/etc/motd` and waits up to `wait` for its verified
/// report.
pub fn declare_and_wait(
    ctl: &mut lab::Controller,
    node: &str,
    v: u64,
    content: &str,
    wait: Duration,
) -> Value {
    ctl.declare(
        node,
        v,
        Duration::from_secs(300),
        file_decl(node, "/etc/motd", content),
    )
    .unwrap();
    ctl.wait_for(node, "report", wait, |p| p["version"] == v)
        .unwrap_or_else(|| panic!("no report of version {v} from {node}"))
        .payload
}

/// Enrols a fresh node `name` with a token from `ctl`; returns its root.
pub fn enrolled(bed: &Bed, ctl: &mut lab::Controller, name: &str) -> (tempfile::TempDir, PathBuf) {
    let (d, r) = root();
    let issued = ctl.issue(name, Duration::from_secs(600)).unwrap();
    let out = bed.enrol(&r, &issued.text);
    assert!(
        out.success(),
        "enrol failed: {}\n{}",
        out.stdout,
        out.stderr
    );
    let got = ctl.take_enrolments(Duration::from_secs(20)).unwrap();
    assert_eq!(got.len(), 1, "the controller read the enrolment request");
    (d, r)
}
