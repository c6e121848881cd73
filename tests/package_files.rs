//! The packages' files as the tools that judge them read them: lintian on the `.deb` (an error or
//! a warning fails; what is overridden says why in `packaging/debian/build-deb`), `systemd-analyze
//! verify` on the units (not a word on standard error), logrotate on the OpenRC log's rotation,
//! the OpenRC file with its `conf.d`, and the `.deb`'s ifupdown hook as a conffile. The `.deb` and
//! the tree are the ones `packaging/build-static debian` and `packaging/debian/build-deb` made
//! (`lab/test --prepare` runs both); without them these tests fail and say so.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn packaging() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest().join("target"))
        .join("packaging")
}

fn deb() -> PathBuf {
    let d = packaging().join(format!("mesh-host_{}_amd64.deb", env!("CARGO_PKG_VERSION")));
    assert!(
        d.is_file(),
        "{} is missing: run packaging/build-static debian and packaging/debian/build-deb \
         (lab/test --prepare does)",
        d.display()
    );
    d
}

/// Runs `argv` with a deadline (`timeout`), its output kept.
fn run(seconds: u32, argv: &[&str]) -> Output {
    let out = Command::new("timeout")
        .arg(seconds.to_string())
        .args(argv)
        .output()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    assert_ne!(
        out.status.code(),
        Some(124),
        "{argv:?} outlived its deadline"
    );
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn lintian_finds_neither_an_error_nor_a_warning_in_the_deb() {
    let deb = deb();
    let out = run(
        600,
        &[
            "lintian",
            "--fail-on",
            "error,warning",
            "--display-info",
            deb.to_str().unwrap(),
        ],
    );
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "lintian: {said}");
    for line in said.lines() {
        assert!(
            !line.starts_with("E: ") && !line.starts_with("W: "),
            "lintian: {line}\n{said}"
        );
    }
}

#[test]
fn the_deb_installs_the_ifupdown_hook_as_a_conffile() {
    let deb = deb();
    let list = text(&run(60, &["dpkg-deb", "-c", deb.to_str().unwrap()]).stdout);
    let hook = list
        .lines()
        .find(|l| l.ends_with(" ./etc/network/if-up.d/mesh-host"))
        .unwrap_or_else(|| panic!("no ifupdown hook in the .deb:\n{list}"));
    assert!(hook.starts_with("-rwxr-xr-x root/root"), "{hook}");
    let conffiles = run(60, &["dpkg-deb", "-I", deb.to_str().unwrap(), "conffiles"]);
    assert!(conffiles.status.success(), "{conffiles:?}");
    assert_eq!(text(&conffiles.stdout), "/etc/network/if-up.d/mesh-host\n");
    // The hook is the packaging's own script.
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        60,
        &[
            "dpkg-deb",
            "-x",
            deb.to_str().unwrap(),
            dir.path().to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read(dir.path().join("etc/network/if-up.d/mesh-host")).unwrap(),
        std::fs::read(manifest().join("packaging/rouse/ifupdown")).unwrap()
    );
}

/// `systemd-analyze verify` on both units, under a root holding what they name: the package's
/// tree (the launcher and the binary), the machine's targets they are ordered against, and
/// `/bin/kill` for `ExecReload`. The man pages they cite are checked by tests/launcher/init.rs
/// against the pages the binary generates (`--man=no` here: the machine's man has not them).
#[test]
fn systemd_analyze_verifies_both_units_without_a_word() {
    let tree = packaging().join("debian/root");
    assert!(
        tree.join("usr/lib/mesh-host/launch").is_file(),
        "{} is missing: run packaging/build-static debian",
        tree.display()
    );
    let root = tempfile::tempdir().unwrap();
    let units = root.path().join("usr/lib/systemd/system");
    std::fs::create_dir_all(&units).unwrap();
    std::fs::create_dir_all(root.path().join("bin")).unwrap();
    for (from, to) in [
        (
            tree.join("usr/lib/mesh-host"),
            root.path().join("usr/lib/mesh-host"),
        ),
        (tree.join("usr/bin"), root.path().join("usr/bin")),
        (PathBuf::from("/bin/kill"), root.path().join("bin/kill")),
    ] {
        let out = run(
            60,
            &["cp", "-a", from.to_str().unwrap(), to.to_str().unwrap()],
        );
        assert!(out.status.success(), "{out:?}");
    }
    for e in std::fs::read_dir("/lib/systemd/system").unwrap().flatten() {
        if e.file_name().to_string_lossy().ends_with(".target") {
            std::fs::copy(e.path(), units.join(e.file_name())).unwrap();
        }
    }
    for unit in ["mesh-host.service", "mesh-host-boot.service"] {
        std::fs::copy(
            tree.join("usr/lib/systemd/system").join(unit),
            units.join(unit),
        )
        .unwrap();
    }
    let root_arg = format!("--root={}", root.path().display());
    let out = run(
        120,
        &[
            "systemd-analyze",
            "verify",
            "--man=no",
            &root_arg,
            "mesh-host.service",
            "mesh-host-boot.service",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "systemd-analyze said something");
    // It does catch what it should: an unknown key is said.
    let unit = units.join("mesh-host.service");
    let mut bad = std::fs::read_to_string(&unit).unwrap();
    bad = bad.replace("KillMode=mixed", "KillMode=mixed\nKillModes=mixed");
    std::fs::write(&unit, bad).unwrap();
    let out = run(
        120,
        &[
            "systemd-analyze",
            "verify",
            "--man=no",
            &root_arg,
            "mesh-host.service",
        ],
    );
    assert!(text(&out.stderr).contains("Unknown key"), "{out:?}");
}

/// The OpenRC log's rotation, by logrotate itself: the file parses, and forced on a copy pointed
/// at a log of the test's, the log is copied aside and emptied in place (supervise-daemon keeps
/// it open).
#[test]
fn logrotate_rotates_the_openrc_log_in_place() {
    let conf =
        std::fs::read_to_string(manifest().join("packaging/openrc/mesh-host.logrotate")).unwrap();
    assert!(conf.contains("/var/log/mesh-host.log {"), "{conf}");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("mesh-host.log");
    std::fs::write(&log, "a line of the host\n").unwrap();
    let ours = dir.path().join("rotate.conf");
    std::fs::write(
        &ours,
        conf.replace("/var/log/mesh-host.log", log.to_str().unwrap()),
    )
    .unwrap();
    let state = dir.path().join("state");
    let out = run(
        60,
        &[
            "logrotate",
            "--force",
            "--state",
            state.to_str().unwrap(),
            ours.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "",
        "emptied in place"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("mesh-host.log.1")).unwrap(),
        "a line of the host\n",
        "copied aside (compressed only at the next rotation: delaycompress)"
    );
}

/// The OpenRC file read with its `conf.d` as openrc-run reads them (the `conf.d` first): as
/// shipped, every setting is its default; set, each reaches the stop's wait or the launcher's
/// environment (`supervise-daemon --env`).
#[test]
fn the_openrc_confd_sets_the_stop_wait_and_the_launchers_settings() {
    let dir = manifest().join("packaging/openrc");
    let read = |confd: &Path| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(". \"$1\"; . \"$2\"; printf '%s|%s' \"$retry\" \"$supervise_daemon_args\"")
            .arg("sh")
            .arg(confd)
            .arg(dir.join("mesh-host"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        text(&out.stdout)
    };
    assert_eq!(read(&dir.join("mesh-host.confd")), "TERM/960/KILL/5|");
    let set = tempfile::NamedTempFile::new().unwrap();
    let shipped = std::fs::read_to_string(dir.join("mesh-host.confd")).unwrap();
    let uncommented = shipped
        .replace("#MESH_HOST_STOP_TIMEOUT=960", "MESH_HOST_STOP_TIMEOUT=300")
        .replace("#MESH_HOST_MAX_ATTEMPTS=3", "MESH_HOST_MAX_ATTEMPTS=5")
        .replace("#RUST_LOG=", "RUST_LOG=info");
    std::fs::write(set.path(), uncommented).unwrap();
    assert_eq!(
        read(set.path()),
        "TERM/300/KILL/5| --env MESH_HOST_MAX_ATTEMPTS=5 --env RUST_LOG=info"
    );
}
