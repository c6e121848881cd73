//! The launcher driven the way the init files drive it, with the real host behind it. systemd
//! cannot run as PID 1 here, so each test stands in for one thing the unit asks of systemd and
//! says which: `systemctl stop` under `KillMode=mixed` is TERM to the launcher alone (the unit's
//! main process; the rest of the cgroup is killed only after it exits), `systemctl reload` is the
//! unit's `ExecReload` (`kill -HUP $MAINPID`), and `RestartPreventExitStatus` is read from the unit
//! and compared with what a halted launcher exits with. The host is the built binary on a
//! temporary root, in a network namespace of its own, started by the launcher through a
//! one-line wrapper (`exec unshare --net -- mesh-host --root R "$@"`, the same pid); apt-get and
//! dpkg-query are stubs first on PATH (the machine's own packages are not touched).

use crate::util::Node;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(60);

/// apt-get: `install … NAME` takes `$STUB/install-seconds` (default 0) to install, writes
/// `$STUB/in-apt` while it runs, and records a TERM that reaches it (it then exits 143 without
/// installing, as apt does when it is killed).
const APT_GET: &str = r#"#!/bin/sh
trap 'echo "apt-get got TERM" >> "$STUB/log"; exit 143' TERM
echo "apt-get $*" >> "$STUB/log"
touch "$STUB/in-apt"
n=$(cat "$STUB/install-seconds" 2>/dev/null || echo 0)
i=0
while [ "$i" -lt "$((n * 10))" ]; do sleep 0.1; i=$((i + 1)); done
for last; do :; done
echo "1.0" > "$STUB/installed-$last"
echo "apt-get installed $last" >> "$STUB/log"
rm -f "$STUB/in-apt"
"#;

/// dpkg-query: a package is installed at 1.0 when `$STUB/installed-NAME` exists.
const DPKG_QUERY: &str = r#"#!/bin/sh
for last; do :; done
if [ -f "$STUB/installed-$last" ]; then printf 'ii \t%s\n' "$(cat "$STUB/installed-$last")"; exit 0; fi
echo "dpkg-query: no packages found matching $last" >&2
exit 1
"#;

fn unit() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/systemd/mesh-host.service"),
    )
    .unwrap()
}

/// Every value of `KEY=` in the unit, in order.
fn values(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(String::from)
        .collect()
}

/// systemd's time span in seconds, for the forms the unit uses (`1200`, `20min`, `1h`).
fn seconds(span: &str) -> u64 {
    let digits: String = span.chars().take_while(char::is_ascii_digit).collect();
    let n: u64 = digits.parse().unwrap();
    match &span[digits.len()..] {
        "" | "s" => n,
        "min" | "m" => n * 60,
        "h" => n * 3600,
        other => panic!("unit of {span}: {other}"),
    }
}

struct Bed {
    node: Node,
    stub: tempfile::TempDir,
}

impl Bed {
    fn new() -> Bed {
        let bed = Bed {
            node: Node::new(),
            stub: tempfile::tempdir().unwrap(),
        };
        let s = bed.stub.path();
        exe(&s.join("bin/apt-get"), APT_GET);
        exe(&s.join("bin/dpkg-query"), DPKG_QUERY);
        let host = format!(
            "#!/bin/sh\nexec unshare --net -- {} --root {} \"$@\"\n",
            env!("CARGO_BIN_EXE_mesh-host"),
            bed.node.root().display()
        );
        exe(&s.join("host"), &host);
        std::fs::create_dir_all(bed.state()).unwrap();
        bed
    }

    fn env(&self) -> Vec<(String, String)> {
        vec![
            ("STUB".into(), self.stub.path().display().to_string()),
            // The host runs under a throw-away root with stub package tools first on PATH: the
            // harness asks for the host's tools (docs/operator.md, "Under a root other than /").
            ("MESH_HOST_HOST_TOOLS".into(), "1".into()),
            (
                "PATH".into(),
                format!(
                    "{}:{}",
                    self.stub.path().join("bin").display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            ),
        ]
    }

    fn state(&self) -> PathBuf {
        self.stub.path().join("state")
    }

    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.stub.path().join("log"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    /// Stores a declaration through `mesh-host apply`, the stubs on PATH.
    fn apply(&self, resources: serde_json::Value) {
        let d = json!({"version": 1, "node": "n1", "mode": "converged", "resources": resources});
        let env = self.env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let r = self.node.apply_env(&d, &[], &env);
        assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    }

    /// The launcher as the unit's ExecStart runs it, its stderr to `$STUB/stderr`.
    fn launch(&self) -> Child {
        let launch = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/launch");
        let err = std::fs::File::create(self.stub.path().join("stderr")).unwrap();
        let mut cmd = Command::new("/bin/sh");
        // A signal ignored when a shell starts cannot be trapped (POSIX), and this test may run
        // under `nohup` (SIGHUP ignored, inherited): the launcher starts with HUP at its default,
        // as an init system starts it.
        // SAFETY: between fork and exec only signal(2), which is async-signal-safe, is called.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGHUP, libc::SIG_DFL);
                Ok(())
            });
        }
        cmd.arg(launch)
            .envs(self.env())
            .env("MESH_HOST_STATE_DIR", self.state())
            .env("MESH_HOST_BINARY", self.stub.path().join("host"))
            .env("MESH_HOST_PACKAGE_MANAGER", "apt")
            .env("MESH_HOST_RESTART_DELAY", "0")
            .env("RUST_LOG", "info")
            .env_remove("MESH_HOST_FAILPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.stub.path().join("stderr")).unwrap_or_default()
    }

    /// Waits until `what` holds, failing with the launcher's stderr at the deadline.
    fn until(&self, what: &str, f: impl Fn() -> bool) {
        let start = Instant::now();
        while !f() {
            assert!(
                start.elapsed() < DEADLINE,
                "{what} never happened:\n{}\n{:?}",
                self.stderr(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn end(&self, mut child: Child) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s.code();
            }
            if start.elapsed() > DEADLINE {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the launcher outlived its deadline:\n{}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn exe(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

#[test]
fn the_unit_asks_systemd_for_what_the_launcher_promises() {
    let u = unit();
    assert_eq!(values(&u, "KillMode"), ["mixed"], "{u}");
    // The longest step a stop waits for: the longest default deadline of any kind of call (a
    // package install's, 900 s).
    use run::Kind;
    let longest = [
        Kind::Query,
        Kind::Container,
        Kind::Service,
        Kind::Package,
        Kind::Action,
        Kind::Firewall,
    ]
    .map(|k| u64::from(k.default_s()))
    .into_iter()
    .max()
    .unwrap();
    let stop = seconds(&values(&u, "TimeoutStopSec")[0]);
    assert!(
        stop >= longest + 60,
        "TimeoutStopSec {stop} s against {longest} s"
    );
    // No longer than it must be: a shutdown waits this long at most.
    assert!(
        stop <= longest + 120,
        "TimeoutStopSec {stop} s holds a shutdown past the longest step ({longest} s)"
    );
    assert_eq!(values(&u, "ExecReload"), ["/bin/kill -HUP $MAINPID"]);
    assert_eq!(values(&u, "ExecStart"), ["/usr/lib/mesh-host/launch"]);
    assert_eq!(values(&u, "Restart"), ["always"]);
    let after = values(&u, "After").join(" ");
    for unit in ["nftables.service", "firewalld.service", "docker.service"] {
        assert!(after.split(' ').any(|a| a == unit), "After= lacks {unit}");
    }
    // Ordered after, never required (nor wanted: that would start a disabled firewall).
    assert!(values(&u, "Requires").is_empty() && values(&u, "BindsTo").is_empty());
    for wanted in values(&u, "Wants") {
        assert!(
            !wanted.contains("firewall") && !wanted.contains("nftables"),
            "{wanted}"
        );
    }
    // Every page it points at is one the binary makes.
    let pages = mesh_host::commands::man::page_names();
    let docs = values(&u, "Documentation").join(" ");
    assert!(!docs.is_empty());
    for d in docs.split(' ') {
        let page = d.strip_prefix("man:").unwrap().strip_suffix("(1)").unwrap();
        assert!(pages.iter().any(|p| p == page), "{d} is not a page");
    }
    assert!(
        u.contains("No sandboxing"),
        "the unit says why it has no sandboxing"
    );

    let rc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/openrc/mesh-host"),
    )
    .unwrap();
    for line in [
        "supervisor=supervise-daemon",
        "command=/usr/lib/mesh-host/launch",
        "output_log=/var/log/mesh-host.log",
        "error_log=/var/log/mesh-host.log",
    ] {
        assert!(
            rc.lines().any(|l| l == line),
            "the OpenRC file lacks {line}"
        );
    }
    assert!(rc.contains("\ndepend() {\n"));
    let retry = rc
        .lines()
        .find_map(|l| l.strip_prefix("retry=\"TERM/${MESH_HOST_STOP_TIMEOUT:-"))
        .expect("a stop timeout, MESH_HOST_STOP_TIMEOUT by default");
    let wait: u64 = retry.split('}').next().unwrap().parse().unwrap();
    assert!(wait >= longest + 60, "retry waits {wait} s");
}

/// `systemctl stop` under `KillMode=mixed`: TERM to the launcher alone, while the host installs a
/// package. The install finishes (apt-get never sees TERM), the package is recorded, and the
/// host and the launcher exit 0.
#[test]
fn a_stop_during_a_package_install_lets_the_install_finish() {
    let bed = Bed::new();
    bed.apply(json!([{"id": "tools/sl", "module": "tools", "type": "package", "name": "sl"}]));
    // Drift: the package is gone; the resident host's first reconcile installs it, slowly.
    std::fs::remove_file(bed.stub.path().join("installed-sl")).unwrap();
    std::fs::write(bed.stub.path().join("install-seconds"), "2").unwrap();
    let launcher = bed.launch();
    bed.until("the install", || bed.stub.path().join("in-apt").exists());
    signal(&launcher, libc::SIGTERM);
    let code = bed.end(launcher);
    let log = bed.log();
    assert!(
        !log.iter().any(|l| l.contains("got TERM")),
        "apt-get was signalled: {log:?}"
    );
    assert_eq!(log.last().map(String::as_str), Some("apt-get installed sl"));
    assert_eq!(code, Some(0), "{}", bed.stderr());
    let err = bed.stderr();
    assert!(
        err.contains("the host finished with status 0 after TERM"),
        "{err}"
    );
    assert!(err.contains("reconciled"), "{err}");
    // The stop's wait was said while the install ran.
    assert!(
        err.contains("stopping: waiting for the reconcile under way to end (begun "),
        "{err}"
    );
}

/// `systemctl reload` (ExecReload: HUP to the launcher): the launcher passes it to the host, which
/// reconciles at once and repairs drift; the launcher goes on serving.
#[test]
fn a_hup_through_the_launcher_reconciles() {
    let bed = Bed::new();
    bed.apply(
        json!([{"id": "etc/motd", "module": "etc", "type": "file", "path": "/etc/motd",
                      "content": "mesh\n"}]),
    );
    let launcher = bed.launch();
    bed.until("the first reconcile", || {
        bed.stderr().matches("reconciled").count() >= 1
    });
    std::fs::remove_file(bed.node.path("/etc/motd")).unwrap();
    signal(&launcher, libc::SIGHUP);
    bed.until("the reconcile the HUP asked for", || {
        bed.stderr().contains("reconciled trigger=\"rouse\"")
    });
    assert_eq!(bed.node.read("/etc/motd").as_deref(), Some("mesh\n"));
    let err = bed.stderr();
    assert!(err.contains("HUP: asking the host"), "{err}");
    let mut launcher = launcher;
    assert!(launcher.try_wait().unwrap().is_none(), "the launcher left");
    signal(&launcher, libc::SIGTERM);
    assert_eq!(bed.end(launcher), Some(0), "{}", bed.stderr());
}

/// A halted launcher exits with the status the unit's RestartPreventExitStatus names, so systemd
/// does not start it again every RestartSec; and the launcher says so at error priority when its
/// stderr is the journal.
#[test]
fn a_halted_launcher_exits_with_the_status_the_unit_does_not_restart() {
    let prevent: Vec<i32> = values(&unit(), "RestartPreventExitStatus")
        .iter()
        .flat_map(|v| v.split(' ').map(|c| c.parse::<i32>().unwrap()))
        .collect();
    assert_eq!(prevent.len(), 1, "{prevent:?}");
    let bed = Bed::new();
    std::fs::write(
        bed.state().join("halted"),
        "3 failed starts after rolling back\n",
    )
    .unwrap();
    let launcher = bed.launch();
    let code = bed.end(launcher);
    assert_eq!(code, Some(prevent[0]), "{}", bed.stderr());
    assert!(bed.stderr().contains("halted: 3 failed starts"));
    assert!(bed.log().is_empty(), "nothing was started");

    // The same under a stand-in journal: stderr is a file whose device and inode JOURNAL_STREAM
    // names, as systemd sets it.
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(bed.stub.path().join("stderr")).unwrap();
    let launch = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/launch");
    let err = std::fs::OpenOptions::new()
        .append(true)
        .open(bed.stub.path().join("stderr"))
        .unwrap();
    let status = Command::new("/bin/sh")
        .arg(launch)
        .env("MESH_HOST_STATE_DIR", bed.state())
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .stderr(err)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(prevent[0]));
    assert!(
        bed.stderr()
            .lines()
            .any(|l| l.starts_with("<3>mesh-host-launch: halted: 3 failed starts")),
        "{}",
        bed.stderr()
    );
}
