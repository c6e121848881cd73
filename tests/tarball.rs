//! The tarball for a machine with no repository: unpacked into a fresh directory, the binary runs
//! there and says its version, and it runs even with that directory as the whole filesystem (a
//! chroot holding nothing but the tarball's two files: no C library, no loader, no /etc), which
//! is what "it needs nothing installed first" means.
//!
//! The tarball is the one `packaging/build-static debian` made (`.ci/run` runs it before the
//! tests); without it this test fails and says so.

use std::path::PathBuf;
use std::process::{Command, Output};

fn tarball() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    let t = target.join(format!(
        "packaging/mesh-host-debian-{}-x86_64.tar.gz",
        env!("CARGO_PKG_VERSION")
    ));
    assert!(
        t.is_file(),
        "{} is missing: run packaging/build-static debian first (.ci/run does)",
        t.display()
    );
    t
}

/// Runs a short command, killed by `timeout` if it outlives its deadline.
fn run(argv: &[&str]) -> Output {
    let out = Command::new("timeout")
        .arg("60")
        .args(argv)
        .env_clear()
        .output()
        .expect("running a command");
    assert_ne!(
        out.status.code(),
        Some(124),
        "{argv:?} outlived its deadline"
    );
    out
}

#[test]
fn the_tarball_unpacks_into_a_fresh_directory_and_runs_with_nothing_else_there() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let t = tarball();
    let out = run(&["/bin/tar", "-xzf", t.to_str().unwrap(), "-C", d]);
    assert!(out.status.success(), "{out:?}");
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["mesh-host", "mesh-host-launch"]);

    let want = format!("mesh-host {} (debian)\n", env!("CARGO_PKG_VERSION"));
    let out = run(&[&format!("{d}/mesh-host"), "version"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);

    // The directory as the whole filesystem: nothing but the binary and the launcher.
    let out = run(&[
        "/usr/bin/unshare",
        &format!("--root={d}"),
        "/mesh-host",
        "version",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);

    // The launcher starts the binary beside it and rolls back through apt on this system.
    let launch = std::fs::read_to_string(dir.path().join("mesh-host-launch")).unwrap();
    assert!(launch.starts_with("#!/bin/sh\n"));
    assert!(launch.contains("\npackage_manager=${MESH_HOST_PACKAGE_MANAGER:-apt}\n"));
    assert!(launch.contains("elif [ -x \"$here/mesh-host\" ]; then"));
}
