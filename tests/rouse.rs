//! What the packages ship to rouse the running host (`packaging/rouse/`): each network
//! dispatcher's script run against every event its dispatcher emits, the way the dispatcher runs it
//! (its arguments or environment, nothing else in the environment but PATH and the host's root),
//! against a real `mesh-host run` on a temporary root in a network namespace of its own; a rouse is
//! seen as the reconcile it asks for (`reconciled trigger="rouse"` on the host's stderr). With no
//! host running, or a pid file naming another process, each script does nothing and exits 0. The
//! sleep hook's rouse of a link attempt that never returns is in `link::resident`.

use crate::util::Node;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a script's event is given to show a rouse before it is taken as none. A rouse shows
/// in milliseconds (a reconcile of one file); this is the margin on a loaded machine.
const QUIET: Duration = Duration::from_millis(700);
const WAIT: Duration = Duration::from_secs(20);

pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging/rouse")
        .join(name)
}

/// The shell a script runs under: its own `#!/bin/sh` (dash here, as on Debian), or Alpine's,
/// BusyBox's ash with BusyBox's `cat`, `tr` and `grep` first on PATH.
#[derive(Clone, Copy, Debug)]
pub enum Shell {
    Own,
    Busybox,
}

/// Runs a rouse script as its dispatcher does: `args`, and an environment of `env`, PATH and
/// MESH_HOST_ROOT alone. Returns its exit status and stderr.
pub fn dispatch(name: &str, root: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    dispatch_in(Shell::Own, name, root, args, env)
}

/// A directory of the BusyBox applets the scripts use, made once.
fn busybox_bin() -> &'static Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        let busybox = ["/usr/bin/busybox", "/bin/busybox"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .expect("busybox is not installed (lab/test --prepare installs it)");
        for applet in ["cat", "tr", "grep", "sh"] {
            std::os::unix::fs::symlink(&busybox, d.path().join(applet)).unwrap();
        }
        d
    })
    .path()
}

/// [`dispatch`] under `shell`.
pub fn dispatch_in(
    shell: Shell,
    name: &str,
    root: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (i32, String) {
    let system = "/usr/sbin:/usr/bin:/sbin:/bin";
    let (mut cmd, path) = match shell {
        Shell::Own => (Command::new(script(name)), system.to_string()),
        Shell::Busybox => {
            let mut c = Command::new(busybox_bin().join("sh"));
            c.arg(script(name));
            (c, format!("{}:{system}", busybox_bin().display()))
        }
    };
    let out = cmd
        .args(args)
        .env_clear()
        .env("PATH", path)
        .env("MESH_HOST_ROOT", root)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {name}: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A real `mesh-host run` on a root holding one file's declaration, in a network namespace of its
/// own (`unshare` execs the host, so the pid in `run.pid` is the child's); killed when dropped.
struct Host {
    node: Node,
    child: Child,
    log: PathBuf,
}

impl Host {
    fn start() -> Host {
        let node = Node::new();
        node.apply(
            &json!({"version": 1, "node": "n1", "mode": "converged", "resources": [
            {"id": "etc/motd", "module": "etc", "type": "file", "path": "/etc/motd",
             "content": "mesh\n"}]}),
        );
        let log = node.root().with_extension("log");
        let child = Command::new("unshare")
            .args(["--net", "--"])
            .arg(env!("CARGO_BIN_EXE_mesh-host"))
            .arg("--root")
            .arg(node.root())
            .args(["run", "--legacy-period", "0"])
            .env("RUST_LOG", "info")
            .env_remove("MESH_HOST_FAILPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let host = Host { node, child, log };
        host.until("the first reconcile and the pid file", |h| {
            h.stderr().contains("reconciled") && h.node.path("/var/lib/mesh-host/run.pid").exists()
        });
        host
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn rouses(&self) -> usize {
        self.stderr()
            .matches("reconciled trigger=\"rouse\"")
            .count()
    }

    fn until(&self, what: &str, f: impl Fn(&Host) -> bool) {
        let start = Instant::now();
        while !f(self) {
            assert!(
                start.elapsed() < WAIT,
                "{what} never happened:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Runs the script for one event; returns whether the host was roused by it. A rousing event
    /// is waited for until its reconcile has finished, so the next event starts from quiet.
    fn roused_by(&self, name: &str, args: &[&str], env: &[(&str, &str)]) -> bool {
        self.roused_in(Shell::Own, name, args, env)
    }

    fn roused_in(&self, shell: Shell, name: &str, args: &[&str], env: &[(&str, &str)]) -> bool {
        let before = self.rouses();
        let (code, err) = dispatch_in(shell, name, self.node.root(), args, env);
        assert_eq!(code, 0, "{name} {args:?} {env:?} exited {code}: {err}");
        let start = Instant::now();
        while start.elapsed() < QUIET {
            if self.rouses() > before {
                assert!(
                    err.contains("roused the host"),
                    "{name} said nothing: {err}"
                );
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            err.is_empty(),
            "{name} {args:?} said {err} and roused nothing"
        );
        false
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Which of `events` rouse, each run through `run`; compared whole so a failure shows the table.
fn table(events: &[(&str, bool)], run: impl Fn(&str) -> bool) {
    let got: Vec<(&str, bool)> = events.iter().map(|(e, _)| (*e, run(e))).collect();
    assert_eq!(
        got, events,
        "which events roused the host (left: what happened)"
    );
}

/// Every action NetworkManager's dispatcher runs its scripts with (NetworkManager-dispatcher(8)):
/// those that change where packets go rouse, `down` and the rest do not.
const NM_EVENTS: &[(&str, bool)] = &[
    ("pre-up", false),
    ("up", true),
    ("pre-down", false),
    ("down", false),
    ("vpn-pre-up", false),
    ("vpn-up", true),
    ("vpn-pre-down", false),
    ("vpn-down", true),
    ("hostname", false),
    ("dhcp4-change", true),
    ("dhcp6-change", true),
    ("connectivity-change", false),
    ("reapply", true),
];

#[test]
fn the_network_manager_dispatcher_rouses_on_what_changes_where_packets_go() {
    let host = Host::start();
    table(NM_EVENTS, |e| {
        // `hostname` and `connectivity-change` come with no interface (an empty argument).
        let iface = if matches!(e, "hostname" | "connectivity-change") {
            ""
        } else {
            "eth0"
        };
        host.roused_by("nm-dispatcher", &[iface, e], &[])
    });
    // The loopback coming up changes nothing the link uses.
    assert!(!host.roused_by("nm-dispatcher", &["lo", "up"], &[]));
}

/// Every state networkd-dispatcher runs scripts for: systemd-networkd's operational and
/// administrative states (networkctl(1)), in STATE with the interface in IFACE.
const NETWORKD_STATES: &[(&str, bool)] = &[
    ("missing", false),
    ("off", false),
    ("no-carrier", false),
    ("dormant", false),
    ("degraded-carrier", false),
    ("carrier", false),
    ("degraded", false),
    ("enslaved", false),
    ("routable", true),
    ("pending", false),
    ("initialized", false),
    ("configuring", false),
    ("configured", true),
    ("unmanaged", false),
    ("failed", false),
    ("linger", false),
];

#[test]
fn the_networkd_dispatcher_script_rouses_on_routable_and_configured_only() {
    let host = Host::start();
    table(NETWORKD_STATES, |s| {
        host.roused_by(
            "networkd-dispatcher",
            &[],
            &[("STATE", s), ("IFACE", "eth0")],
        )
    });
    assert!(!host.roused_by(
        "networkd-dispatcher",
        &[],
        &[("STATE", "routable"), ("IFACE", "lo")]
    ));
}

/// Every phase ifupdown-ng runs executors and hooks in (ifupdown-executor(7)), with the MODE it
/// gives them: an interface brought up rouses, nothing else does.
const IFUPDOWN_PHASES: &[(&str, bool)] = &[
    ("depend", false),
    ("create", false),
    ("pre-up", false),
    ("up", true),
    ("post-up", true),
    ("pre-down", false),
    ("down", false),
    ("post-down", false),
    ("destroy", false),
];

/// Alpine's hook, so under Alpine's shell and tools as well as dash.
#[test]
fn the_ifupdown_hook_rouses_when_an_interface_is_up_only() {
    let host = Host::start();
    for shell in [Shell::Own, Shell::Busybox] {
        table(IFUPDOWN_PHASES, |p| {
            let mode = if matches!(p, "pre-down" | "down" | "post-down" | "destroy") {
                "stop"
            } else {
                "start"
            };
            host.roused_in(
                shell,
                "ifupdown",
                &[],
                &[("PHASE", p), ("MODE", mode), ("IFACE", "eth0")],
            )
        });
        assert!(!host.roused_in(
            shell,
            "ifupdown",
            &[],
            &[("PHASE", "up"), ("MODE", "start"), ("IFACE", "lo")]
        ));
    }
}

/// systemd's sleep hook, and (on Alpine, under its shell) elogind's.
#[test]
fn the_sleep_hook_rouses_after_a_resume_not_before_the_sleep() {
    let host = Host::start();
    for shell in [Shell::Own, Shell::Busybox] {
        for kind in [
            "suspend",
            "hibernate",
            "hybrid-sleep",
            "suspend-then-hibernate",
        ] {
            assert!(
                !host.roused_in(shell, "sleep", &["pre", kind], &[]),
                "pre {kind} ({shell:?})"
            );
            assert!(
                host.roused_in(shell, "sleep", &["post", kind], &[]),
                "post {kind} ({shell:?})"
            );
        }
    }
}

/// A script, its arguments and its environment.
type Call = (
    &'static str,
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
);

/// A rousing event of each script, as its dispatcher gives it.
const ROUSING: &[Call] = &[
    ("sleep", &["post", "suspend"], &[]),
    ("nm-dispatcher", &["eth0", "up"], &[]),
    (
        "networkd-dispatcher",
        &[],
        &[("STATE", "routable"), ("IFACE", "eth0")],
    ),
    (
        "ifupdown",
        &[],
        &[("PHASE", "up"), ("MODE", "start"), ("IFACE", "eth0")],
    ),
];

#[test]
fn with_no_host_running_the_scripts_do_nothing_and_exit_0() {
    let node = Node::new();
    let pid_file = node.path("/var/lib/mesh-host/run.pid");
    // No store at all, then a store with no pid file.
    for (name, args, env) in ROUSING {
        assert_eq!(dispatch(name, node.root(), args, env), (0, String::new()));
    }
    std::fs::create_dir_all(pid_file.parent().unwrap()).unwrap();
    for (name, args, env) in ROUSING {
        assert_eq!(dispatch(name, node.root(), args, env), (0, String::new()));
    }
    // A stale pid file naming a live process that is not the host (a HUP would end it), then one
    // naming no process, then one holding nonsense: nothing is signalled.
    let mut stranger = Command::new("sleep").arg("60").spawn().unwrap();
    for pid in [stranger.id().to_string(), "4194304".into(), "x1".into()] {
        std::fs::write(&pid_file, format!("{pid}\n")).unwrap();
        for (name, args, env) in ROUSING {
            for shell in [Shell::Own, Shell::Busybox] {
                assert_eq!(
                    dispatch_in(shell, name, node.root(), args, env),
                    (0, String::new()),
                    "{name} with pid file {pid} ({shell:?})"
                );
            }
        }
    }
    assert!(
        stranger.try_wait().unwrap().is_none(),
        "a script signalled the process a stale pid file named"
    );
    let _ = stranger.kill();
    let _ = stranger.wait();
}
