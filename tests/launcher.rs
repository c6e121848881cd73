//! The launcher (`packaging/launch`) run as the init runs it, under dash and under BusyBox's ash
//! (Alpine's shell), against a stub host and stub package managers. The stubs stand in for what
//! cannot run here per test: a host whose every start behaves as the test says (exits 0, exits 1,
//! crashes, serves until TERM, ignores TERM for a while), and apt-get, apk and pacman that record
//! what they were asked and "install" a version by writing it down. Every launcher runs with a
//! deadline and is killed, failing the test, if it outlives it.

mod init;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The shells the launcher must work under: Debian's and Arch's `/bin/sh`, and Alpine's.
const SHELLS: &[&[&str]] = &[&["/bin/sh"], &["busybox", "sh"]];

const DEADLINE: Duration = Duration::from_secs(30);

/// A halted launcher's exit status (packaging/launch's HALTED; the unit's
/// RestartPreventExitStatus, checked in `init`).
const HALTED: i32 = 78;

/// The stub host: each start takes the next line of `$T/plan` and logs the version "installed"
/// and the launcher's attempt count as it found them.
const HOST: &str = r#"#!/bin/sh
[ "$1" = run ] || { echo "stub host: expected run, got $*" >&2; exit 64; }
step=$(head -n 1 "$T/plan")
tail -n +2 "$T/plan" > "$T/plan.next"; mv "$T/plan.next" "$T/plan"
echo "start $(cat "$T/installed") attempts=$(cat "$MESH_HOST_STATE_DIR/attempts") $step" >> "$T/log"
case $step in
  exit0) exit 0 ;;
  exit1) exit 1 ;;
  crash) kill -SEGV $$ ;;
  reconcile)
    # What the real host does when it completes a reconcile (src/launch.rs).
    cat "$T/installed" > "$MESH_HOST_STATE_DIR/known-good"
    rm -f "$MESH_HOST_STATE_DIR/attempts"
    exit 1 ;;
  serve)
    trap 'echo "got TERM" >> "$T/log"; exit 0' TERM
    echo $$ > "$T/ready"
    while :; do sleep 0.05; done ;;
  stubborn)
    trap 'echo "got TERM, finishing" >> "$T/log"; touch "$T/term"' TERM
    echo $$ > "$T/ready"
    while [ ! -f "$T/term" ]; do sleep 0.05; done
    sleep 1
    echo finished >> "$T/log"
    exit 7 ;;
  *) echo "stub host: no plan left" >> "$T/log"; exit 1 ;;
esac
"#;

/// apt-get: logs its arguments; `install … mesh-host=V` installs V unless `$T/fail` exists; it
/// takes a second when `$T/slow` exists; when `$T/stale` exists it says it did and installs
/// nothing, as apt does when its cache is stale ("already the newest version").
const APT: &str = r#"#!/bin/sh
echo "apt-get $*" >> "$T/calls"
[ -f "$T/slow" ] && { touch "$T/in-apt"; sleep 1; }
[ -f "$T/fail" ] && { echo "E: Version not found" >&2; exit 100; }
[ -f "$T/stale" ] && { echo "mesh-host is already the newest version"; exit 0; }
for a in "$@"; do case $a in mesh-host=*) echo "${a#mesh-host=}" > "$T/installed" ;; esac; done
"#;

/// dpkg-query: `-W -f '${Version}' mesh-host` prints the version installed.
const DPKG_QUERY: &str = r#"#!/bin/sh
tr -d '\n' < "$T/installed"
"#;

/// apk: logs its arguments; `add mesh-host~V` installs V.
const APK: &str = r#"#!/bin/sh
echo "apk $*" >> "$T/calls"
for a in "$@"; do case $a in mesh-host~*) echo "${a#mesh-host~}" > "$T/installed" ;; esac; done
"#;

/// pacman: logs its arguments; `-U FILE` installs the version in the file's name.
const PACMAN: &str = r#"#!/bin/sh
echo "pacman $*" >> "$T/calls"
for a in "$@"; do case $a in */mesh-host-*) v=${a##*/mesh-host-}; echo "${v%%-*}" > "$T/installed" ;; esac; done
"#;

struct Bed {
    dir: tempfile::TempDir,
    shell: &'static [&'static str],
}

struct Ended {
    code: Option<i32>,
    stderr: String,
}

impl Bed {
    fn new(shell: &'static [&'static str], installed: &str, plan: &[&str]) -> Bed {
        let dir = tempfile::tempdir().unwrap();
        let bed = Bed { dir, shell };
        std::fs::create_dir_all(bed.state()).unwrap();
        std::fs::create_dir_all(bed.path("bin")).unwrap();
        bed.program("host", HOST);
        bed.program("bin/apt-get", APT);
        bed.program("bin/dpkg-query", DPKG_QUERY);
        bed.program("bin/apk", APK);
        bed.program("bin/pacman", PACMAN);
        bed.write("installed", &format!("{installed}\n"));
        bed.write(
            "plan",
            &plan.iter().map(|s| format!("{s}\n")).collect::<String>(),
        );
        bed
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn state(&self) -> PathBuf {
        self.path("state")
    }

    fn program(&self, rel: &str, text: &str) {
        self.write(rel, text);
        std::fs::set_permissions(self.path(rel), std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn write(&self, rel: &str, text: &str) {
        std::fs::write(self.path(rel), text).unwrap();
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.path(rel)).ok()
    }

    fn lines(&self, rel: &str) -> Vec<String> {
        self.read(rel)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    /// Starts the launcher; `env` adds to or overrides the defaults (apt, 2 attempts, no delay).
    fn start(&self, env: &[(&str, &str)]) -> Child {
        let launch = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/launch");
        let path = format!(
            "{}:{}",
            self.path("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new(self.shell[0]);
        cmd.args(&self.shell[1..])
            .arg(launch)
            .env("T", self.dir.path())
            .env("PATH", path)
            .env("MESH_HOST_STATE_DIR", self.state())
            .env("MESH_HOST_BINARY", self.path("host"))
            .env("MESH_HOST_PACKAGE_MANAGER", "apt")
            .env("MESH_HOST_MAX_ATTEMPTS", "2")
            .env("MESH_HOST_RESTART_DELAY", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.spawn().expect("starting the launcher")
    }

    /// Runs the launcher to its end, within the deadline.
    fn run(&self, env: &[(&str, &str)]) -> Ended {
        end(self.start(env), self.shell)
    }

    /// Waits until the stub host says it is serving; returns its pid.
    fn serving(&self) -> i32 {
        let start = Instant::now();
        loop {
            if let Some(pid) = self.read("ready").and_then(|p| p.trim().parse().ok()) {
                return pid;
            }
            assert!(start.elapsed() < DEADLINE, "the host never started serving");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Waits for the launcher within the deadline; kills it and fails when it outlives it.
fn end(mut child: Child, shell: &[&str]) -> Ended {
    use std::io::Read;
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the launcher under {shell:?} outlived its deadline of {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    Ended {
        code: status.code(),
        stderr,
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

fn alive(pid: i32) -> bool {
    // SAFETY: kill(2) with signal 0 only asks whether the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[test]
fn failed_starts_are_counted_rolled_back_once_then_halted() {
    for &shell in SHELLS {
        let bed = Bed::new(shell, "0.2.0", &["exit1", "crash", "exit1", "exit1"]);
        bed.write("state/known-good", "0.1.0\n");
        let r = bed.run(&[]);
        assert_eq!(r.code, Some(HALTED), "{shell:?}: {}", r.stderr);
        assert_eq!(
            bed.lines("log"),
            [
                "start 0.2.0 attempts=1 exit1",
                "start 0.2.0 attempts=2 crash",
                "start 0.1.0 attempts=1 exit1",
                "start 0.1.0 attempts=2 exit1",
            ],
            "{shell:?}: {}",
            r.stderr
        );
        // One rollback, to the known-good version, through the package manager.
        let calls = bed.lines("calls");
        assert_eq!(calls.len(), 1, "{shell:?}: {calls:?}");
        assert!(
            calls[0].starts_with("apt-get install -y")
                && calls[0].contains("--allow-downgrades")
                && calls[0].ends_with(" mesh-host=0.1.0"),
            "{shell:?}: {calls:?}"
        );
        assert_eq!(bed.read("state/rolled-back").as_deref(), Some("0.1.0\n"));
        let halted = bed.read("state/halted").expect("halted");
        assert!(
            halted.contains("2 failed starts after rolling back to mesh-host 0.1.0"),
            "{halted}"
        );

        // Halted, it says so and starts nothing, however often the init starts it again.
        let again = bed.run(&[]);
        assert_eq!(again.code, Some(HALTED));
        assert!(
            again.stderr.contains("halted: 2 failed starts"),
            "{}",
            again.stderr
        );
        assert_eq!(bed.lines("log").len(), 4, "{shell:?}: nothing started");
        assert_eq!(bed.lines("calls").len(), 1, "{shell:?}: no second rollback");
    }
}

#[test]
fn a_completed_reconcile_clears_the_count_so_failures_count_afresh() {
    for &shell in SHELLS {
        // The host fails once, then completes a reconcile (clearing the count) and fails: the
        // count starts again from nothing, so it takes two more failures to roll back.
        let bed = Bed::new(
            shell,
            "0.2.0",
            &["exit1", "reconcile", "exit1", "exit1", "exit1", "exit1"],
        );
        let r = bed.run(&[]);
        assert_eq!(r.code, Some(HALTED), "{shell:?}: {}", r.stderr);
        assert_eq!(
            bed.lines("log"),
            [
                "start 0.2.0 attempts=1 exit1",
                "start 0.2.0 attempts=2 reconcile",
                "start 0.2.0 attempts=1 exit1",
                "start 0.2.0 attempts=2 exit1",
                "start 0.2.0 attempts=1 exit1",
                "start 0.2.0 attempts=2 exit1",
            ],
            "{shell:?}: {}",
            r.stderr
        );
        assert_eq!(
            bed.lines("calls"),
            [
                "apt-get install -y -q --allow-downgrades -o DPkg::Lock::Timeout=120 \
                 -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= mesh-host=0.2.0"
            ]
        );
        // The reinstalled version is the one that reconciled; failing again, the node halts.
        let halted = bed.read("state/halted").expect("halted");
        assert!(
            halted.contains("after rolling back to mesh-host 0.2.0"),
            "{halted}"
        );
    }
}

#[test]
fn exit_zero_restarts_at_once_and_is_never_counted() {
    for &shell in SHELLS {
        // One failure already counted; four clean exits on a limit of two would roll back if any
        // were counted, and a delay of ten minutes would outlive the deadline if any waited.
        let bed = Bed::new(
            shell,
            "0.2.0",
            &["exit0", "exit0", "exit0", "exit0", "serve"],
        );
        bed.write("state/attempts", "1\n");
        let launcher = bed.start(&[("MESH_HOST_RESTART_DELAY", "600")]);
        bed.serving();
        signal(&launcher, libc::SIGTERM);
        let r = end(launcher, shell);
        assert_eq!(r.code, Some(0), "{shell:?}: {}", r.stderr);
        let log = bed.lines("log");
        assert_eq!(log.len(), 6, "{shell:?}: {log:?}");
        for line in &log[..5] {
            assert!(line.contains("attempts=2"), "{shell:?}: {log:?}");
        }
        assert_eq!(log[5], "got TERM");
        assert!(bed.lines("calls").is_empty(), "{shell:?}: no rollback");
        assert!(!bed.path("state/halted").exists());
    }
}

#[test]
fn the_shutdown_is_passed_down_and_the_launcher_waits_for_the_host_to_finish() {
    for &shell in SHELLS {
        for (sig, name) in [(libc::SIGTERM, "TERM"), (libc::SIGINT, "INT")] {
            let bed = Bed::new(shell, "0.2.0", &["stubborn"]);
            let launcher = bed.start(&[]);
            let host = bed.serving();
            signal(&launcher, sig);
            // The host takes a second to finish; the launcher is still there, waiting for it.
            std::thread::sleep(Duration::from_millis(300));
            let mut launcher = launcher;
            assert!(
                launcher.try_wait().unwrap().is_none(),
                "{shell:?} {name}: the launcher left before the host finished"
            );
            assert!(
                alive(host),
                "{shell:?} {name}: the host was killed, not asked"
            );
            let r = end(launcher, shell);
            // The launcher ends with the host's own status, once the host has finished.
            assert_eq!(r.code, Some(7), "{shell:?} {name}: {}", r.stderr);
            assert_eq!(
                bed.lines("log"),
                [
                    "start 0.2.0 attempts=1 stubborn",
                    "got TERM, finishing",
                    "finished"
                ],
                "{shell:?} {name}"
            );
            assert!(!alive(host), "{shell:?} {name}");
        }
    }
}

#[test]
fn a_shutdown_between_starts_stops_the_launcher_without_starting_again() {
    for &shell in SHELLS {
        let bed = Bed::new(shell, "0.2.0", &["exit1", "serve"]);
        let launcher = bed.start(&[("MESH_HOST_RESTART_DELAY", "600")]);
        let start = Instant::now();
        while bed.lines("log").is_empty() {
            assert!(start.elapsed() < DEADLINE, "never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(200));
        signal(&launcher, libc::SIGTERM);
        let r = end(launcher, shell);
        assert_eq!(r.code, Some(0), "{shell:?}: {}", r.stderr);
        assert!(r.stderr.contains("stopped (TERM)"), "{}", r.stderr);
        assert_eq!(bed.lines("log"), ["start 0.2.0 attempts=1 exit1"]);
    }
}

#[test]
fn a_shutdown_during_the_rollback_starts_nothing_afterwards() {
    for &shell in SHELLS {
        let bed = Bed::new(shell, "0.2.0", &["exit1", "exit1", "serve"]);
        bed.write("state/known-good", "0.1.0\n");
        bed.write("slow", "");
        let launcher = bed.start(&[]);
        let start = Instant::now();
        while !bed.path("in-apt").exists() {
            assert!(start.elapsed() < DEADLINE, "{shell:?}: never rolled back");
            std::thread::sleep(Duration::from_millis(20));
        }
        signal(&launcher, libc::SIGTERM);
        let r = end(launcher, shell);
        assert_eq!(r.code, Some(0), "{shell:?}: {}", r.stderr);
        assert!(r.stderr.contains("stopped (TERM)"), "{}", r.stderr);
        // The rollback finished (it is not interrupted half way), and nothing started after it.
        assert_eq!(bed.read("installed").as_deref(), Some("0.1.0\n"));
        assert_eq!(bed.lines("log").len(), 2, "{shell:?}");
    }
}

#[test]
fn a_rollback_that_cannot_happen_halts_and_says_why() {
    for &shell in SHELLS {
        // Nothing recorded as known good: nothing to roll back to.
        let bed = Bed::new(shell, "0.2.0", &["exit1", "exit1"]);
        let r = bed.run(&[]);
        assert_eq!(r.code, Some(HALTED));
        assert!(
            r.stderr.contains("no known-good version is recorded"),
            "{}",
            r.stderr
        );
        assert!(bed
            .read("state/halted")
            .unwrap()
            .contains("the rollback to the known-good version failed"));
        assert!(bed.lines("calls").is_empty());

        // The package manager fails: halted, and the failing binary is not started a third time.
        let bed = Bed::new(shell, "0.2.0", &["exit1", "exit1", "exit1"]);
        bed.write("state/known-good", "0.1.0\n");
        bed.write("fail", "");
        let r = bed.run(&[]);
        assert_eq!(r.code, Some(HALTED));
        assert_eq!(bed.lines("log").len(), 2, "{shell:?}: {}", r.stderr);
        assert_eq!(bed.lines("calls").len(), 1);
        assert!(!bed.path("state/rolled-back").exists());
        assert!(bed.path("state/halted").exists());

        // apt says it is done but dpkg still has the failing version: what dpkg says decides.
        let bed = Bed::new(shell, "0.2.0", &["exit1", "exit1", "exit1"]);
        bed.write("state/known-good", "0.1.0\n");
        bed.write("stale", "");
        let r = bed.run(&[]);
        assert_eq!(r.code, Some(HALTED), "{shell:?}: {}", r.stderr);
        assert!(
            r.stderr
                .contains("apt finished, but dpkg has mesh-host 0.2.0, not 0.1.0"),
            "{shell:?}: {}",
            r.stderr
        );
        assert_eq!(bed.lines("log").len(), 2, "{shell:?}: {}", r.stderr);
        assert!(!bed.path("state/rolled-back").exists());
    }
}

#[test]
fn apk_and_pacman_reinstall_the_known_good_version_their_own_way() {
    for &shell in SHELLS {
        let bed = Bed::new(shell, "0.2.0", &["exit1", "exit1", "exit1", "exit1"]);
        bed.write("state/known-good", "0.1.0\n");
        bed.run(&[("MESH_HOST_PACKAGE_MANAGER", "apk")]);
        assert_eq!(bed.lines("calls"), ["apk add mesh-host~0.1.0"], "{shell:?}");
        assert!(bed.lines("log")[2].starts_with("start 0.1.0 "));

        // pacman installs only the repository's version: the known-good one comes from its cache.
        let bed = Bed::new(shell, "0.2.0", &["exit1", "exit1", "exit1", "exit1"]);
        bed.write("state/known-good", "0.1.0\n");
        std::fs::create_dir_all(bed.path("cache")).unwrap();
        for f in [
            "mesh-host-0.0.9-1-x86_64.pkg.tar.zst",
            "mesh-host-0.1.0-1-x86_64.pkg.tar.zst",
            "mesh-host-0.2.0-1-x86_64.pkg.tar.zst",
        ] {
            bed.write(&format!("cache/{f}"), "");
        }
        let cache = bed.path("cache").display().to_string();
        bed.run(&[
            ("MESH_HOST_PACKAGE_MANAGER", "pacman"),
            ("MESH_HOST_PACMAN_CACHE", &cache),
        ]);
        assert_eq!(
            bed.lines("calls"),
            [format!(
                "pacman -U --noconfirm {cache}/mesh-host-0.1.0-1-x86_64.pkg.tar.zst"
            )],
            "{shell:?}"
        );
        assert!(bed.lines("log")[2].starts_with("start 0.1.0 "));
    }
}
