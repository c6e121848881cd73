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
    // As the operator's guide says: the binary and the launcher alone into the directory.
    let out = run(&[
        "/bin/tar",
        "-xzf",
        t.to_str().unwrap(),
        "-C",
        d,
        "mesh-host",
        "mesh-host-launch",
    ]);
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

/// The tarball's hooks, put in place as the operator's guide says (`tar -xzf T -C /
/// --strip-components=1 hooks`, here into a fresh directory): the packaging's own rouse scripts,
/// executable, at the paths the .deb installs them.
#[test]
fn the_tarball_carries_the_rouse_hooks_at_their_installed_paths() {
    let dir = tempfile::tempdir().unwrap();
    let t = tarball();
    let out = run(&[
        "/bin/tar",
        "-xzf",
        t.to_str().unwrap(),
        "-C",
        dir.path().to_str().unwrap(),
        "--strip-components=1",
        "hooks",
    ]);
    assert!(out.status.success(), "{out:?}");
    let rouse = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("packaging/rouse");
    let mut found = Vec::new();
    for (path, script) in [
        ("etc/network/if-up.d/mesh-host", "ifupdown"),
        (
            "usr/lib/NetworkManager/dispatcher.d/90-mesh-host",
            "nm-dispatcher",
        ),
        (
            "usr/lib/networkd-dispatcher/routable.d/50-mesh-host",
            "networkd-dispatcher",
        ),
        (
            "usr/lib/networkd-dispatcher/configured.d/50-mesh-host",
            "networkd-dispatcher",
        ),
        ("usr/lib/systemd/system-sleep/mesh-host", "sleep"),
    ] {
        let hook = dir.path().join(path);
        let meta = std::fs::metadata(&hook).unwrap_or_else(|e| panic!("{path}: {e}"));
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(meta.permissions().mode() & 0o777, 0o755, "{path}");
        assert_eq!(
            std::fs::read(&hook).unwrap(),
            std::fs::read(rouse.join(script)).unwrap(),
            "{path} is not packaging/rouse/{script}"
        );
        found.push(path);
    }
    // Nothing else is put in place.
    let out = run(&["/usr/bin/find", dir.path().to_str().unwrap(), "-type", "f"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        found.len(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The `.SRCINFO` beside the PKGBUILD is what `packaging/arch/srcinfo` makes of it (makepkg's
/// `--printsrcinfo`, which Debian has not), so it never drifts; the release's carries the
/// tarball's checksum and the optional dependencies.
#[test]
fn the_srcinfo_is_the_pkgbuilds_own() {
    let arch = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("packaging/arch");
    let made = |pkgbuild: &std::path::Path| {
        let out = run(&[
            "/bin/bash",
            arch.join("srcinfo").to_str().unwrap(),
            pkgbuild.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let checked_in = std::fs::read_to_string(arch.join(".SRCINFO")).unwrap();
    assert_eq!(made(&arch.join("PKGBUILD")), checked_in);
    assert!(
        checked_in.contains("\toptdepends = nftables: "),
        "{checked_in}"
    );
    assert!(checked_in.contains(&format!("\tpkgver = {}\n", env!("CARGO_PKG_VERSION"))));
    let r = release();
    let srcinfo = std::fs::read_to_string(r.join(".SRCINFO")).unwrap();
    assert_eq!(srcinfo, made(&r.join("PKGBUILD")));
    let tarball = r.join(format!("mesh-host-{}.tar.gz", env!("CARGO_PKG_VERSION")));
    assert!(
        srcinfo.contains(&format!(
            "\tsha256sums = {}\n",
            digest("/usr/bin/sha256sum", &tarball)
        )),
        "{srcinfo}"
    );
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
}

/// What `packaging/build-static` made for the packages that build from source: the release's
/// source tarball and the PKGBUILD and APKBUILD beside it.
fn release() -> PathBuf {
    let r = target_dir().join("packaging/release");
    assert!(
        r.join(format!("mesh-host-{}.tar.gz", env!("CARGO_PKG_VERSION")))
            .is_file(),
        "{} has no source tarball: run packaging/build-static debian in a git checkout first",
        r.display()
    );
    r
}

/// Evaluates `expr` after sourcing a package recipe with `shell`, as makepkg and abuild do.
fn recipe(shell: &str, file: &std::path::Path, expr: &str) -> String {
    let out = Command::new(shell)
        .arg("-c")
        .arg(format!(". \"$1\"; {expr}"))
        .arg(shell)
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn digest(tool: &str, file: &std::path::Path) -> String {
    let out = run(&[tool, file.to_str().unwrap()]);
    String::from_utf8_lossy(&out.stdout)
        .split(' ')
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn the_pkgbuild_and_apkbuild_name_the_source_tarball_packaging_makes_and_its_checksum() {
    let r = release();
    let version = env!("CARGO_PKG_VERSION");
    let name = format!("mesh-host-{version}.tar.gz");
    let tarball = r.join(&name);

    let pkgbuild = r.join("PKGBUILD");
    assert_eq!(recipe("bash", &pkgbuild, "echo \"$pkgver\""), version);
    assert_eq!(
        recipe("bash", &pkgbuild, "echo \"${source[0]%%::*}\""),
        name,
        "the PKGBUILD's source is saved as the tarball's name"
    );
    assert_eq!(
        recipe("bash", &pkgbuild, "echo \"${sha256sums[0]}\""),
        digest("/usr/bin/sha256sum", &tarball)
    );
    // The checked-in PKGBUILD is the same but for the checksum it cannot hold.
    let ours = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("packaging/arch/PKGBUILD"),
    )
    .unwrap();
    let made = std::fs::read_to_string(&pkgbuild).unwrap();
    let strip = |s: &str| {
        s.lines()
            .filter(|l| !l.starts_with("sha256sums="))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(strip(&ours), strip(&made));
    assert!(made.contains("cargo fetch --locked"));

    let apkbuild = r.join("APKBUILD");
    assert_eq!(recipe("sh", &apkbuild, "echo \"$pkgver\""), version);
    assert_eq!(recipe("sh", &apkbuild, "echo \"${source%%::*}\""), name);
    assert_eq!(
        recipe("sh", &apkbuild, "echo \"$sha512sums\""),
        format!("{}  {name}", digest("/usr/bin/sha512sum", &tarball))
    );
    assert!(recipe("sh", &apkbuild, "echo $subpackages")
        .split(' ')
        .any(|s| s == "mesh-host-openrc"));

    // The tarball is the source: one top directory, the lock file and the build script in it.
    let out = run(&["/bin/tar", "-tzf", tarball.to_str().unwrap()]);
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    let top = format!("mesh-host-{version}/");
    assert!(list.lines().all(|l| l.starts_with(&top)), "{list}");
    for f in [
        "Cargo.toml",
        "Cargo.lock",
        "packaging/build-static",
        "src/main.rs",
    ] {
        assert!(
            list.lines().any(|l| l == format!("{top}{f}")),
            "{f} not in the tarball"
        );
    }
}

/// The PKGBUILD's own functions, run as makepkg runs them (srcdir holding the unpacked release
/// tarball, pkgdir empty), here with this machine's cargo: prepare() fetches against the lock
/// file, build() builds offline, package() lays the tree out. The crates already built for the
/// release are copied into the build's own target directory first, so only the workspace is
/// compiled again.
#[test]
fn the_pkgbuild_builds_from_the_release_tarball() {
    let r = release();
    let version = env!("CARGO_PKG_VERSION");
    let work = tempfile::tempdir().unwrap();
    let srcdir = work.path().join("src");
    let pkgdir = work.path().join("pkg");
    std::fs::create_dir_all(&srcdir).unwrap();
    std::fs::create_dir_all(&pkgdir).unwrap();
    let tarball = r.join(format!("mesh-host-{version}.tar.gz"));
    let out = run(&[
        "/bin/tar",
        "-xzf",
        tarball.to_str().unwrap(),
        "-C",
        srcdir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let target = work.path().join("target");
    let built = target_dir();
    for d in ["release", "x86_64-unknown-linux-gnu/release"] {
        if built.join(d).is_dir() {
            std::fs::create_dir_all(target.join(d).parent().unwrap()).unwrap();
            let out = Command::new("cp")
                .args(["-a", "--reflink=auto"])
                .arg(built.join(d))
                .arg(target.join(d))
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
        }
    }
    let out = Command::new("timeout")
        .arg("1500")
        .arg("bash")
        .arg("-euc")
        .arg(
            ". \"$startdir/PKGBUILD\"; set -o pipefail; \
             cd \"$srcdir\"; prepare; cd \"$srcdir\"; build; cd \"$srcdir\"; check; \
             cd \"$srcdir\"; package",
        )
        .env("startdir", &r)
        .env("srcdir", &srcdir)
        .env("pkgdir", &pkgdir)
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let binary = pkgdir.join("usr/bin/mesh-host");
    let out = run(&[binary.to_str().unwrap(), "version"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("mesh-host {version} (arch)\n")
    );
    for f in [
        "usr/lib/mesh-host/launch",
        "usr/lib/systemd/system/mesh-host.service",
        "usr/lib/systemd/system-sleep/mesh-host",
        "usr/lib/NetworkManager/dispatcher.d/90-mesh-host",
        "usr/lib/networkd-dispatcher/routable.d/50-mesh-host",
        "usr/lib/networkd-dispatcher/configured.d/50-mesh-host",
        "usr/share/man/man1/mesh-host.1.gz",
        "usr/share/man/man1/mesh-host-run.1.gz",
        "usr/share/zsh/site-functions/_mesh-host",
        "usr/share/licenses/mesh-host/copyright",
    ] {
        assert!(pkgdir.join(f).is_file(), "{f} is not in the package");
    }
    let launch = std::fs::read_to_string(pkgdir.join("usr/lib/mesh-host/launch")).unwrap();
    assert!(launch.contains("\npackage_manager=${MESH_HOST_PACKAGE_MANAGER:-pacman}\n"));
}
