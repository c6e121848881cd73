//! The package's life on the boot bed, under systemd as PID 1: `systemctl stop` during a
//! reconcile that is installing a package waits for the install to finish; a newer `.deb` installed by hand
//! with `dpkg -i` whose host cannot start is rolled back by the launcher through apt to the
//! version the host last reconciled with (from a local repository, the way a node's own mirror
//! serves it), the store's port refused from outside the whole time the host is down; then
//! `apt-get purge` removes every file the package installed, stops and forgets both units, and
//! leaves only the store and what the host made.

use super::*;
use sha2::{Digest, Sha256};

/// The newer version the bed installs by hand.
const NEWER: &str = "9.9.9";

/// A `.deb` of version [`NEWER`] made from the project's: the same files, but a
/// `/usr/bin/mesh-host` that fails at every start, as a release built wrongly would.
fn newer_that_cannot_start(into: &Path) -> PathBuf {
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let tree = work.path().join("tree");
    let (deb, tree_s) = (deb().display().to_string(), tree.display().to_string());
    run_ok(&["dpkg-deb", "-R", &deb, &tree_s], Duration::from_secs(60));
    let control = tree.join("DEBIAN/control");
    let text = std::fs::read_to_string(&control).unwrap();
    let text: String = text
        .lines()
        .map(|l| {
            if l.starts_with("Version:") {
                format!("Version: {NEWER}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    std::fs::write(&control, text).unwrap();
    // md5sums would name the real binary's digest: dropped, as dpkg allows.
    let _ = std::fs::remove_file(tree.join("DEBIAN/md5sums"));
    let host = tree.join("usr/bin/mesh-host");
    std::fs::write(
        &host,
        format!("#!/bin/sh\necho \"mesh-host {NEWER}: this build cannot start\" >&2\nexit 1\n"),
    )
    .unwrap();
    std::fs::set_permissions(&host, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = into.join(format!("mesh-host_{NEWER}_amd64.deb"));
    let out_s = out.display().to_string();
    run_ok(
        &["dpkg-deb", "--root-owner-group", "-b", &tree_s, &out_s],
        Duration::from_secs(120),
    );
    out
}

/// The package the bed declares: its postinst writes `/opt/bed/slow.started`, takes
/// [`SLOW_FOR`], then writes `/opt/bed/slow.done`: an install long enough to stop the host
/// in the middle of.
const SLOW: &str = "mesh-bed-slow";
const SLOW_FOR: &str = "3";

fn slow_package(into: &Path) -> PathBuf {
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let tree = work.path().join("tree");
    std::fs::create_dir_all(tree.join("DEBIAN")).unwrap();
    std::fs::write(
        tree.join("DEBIAN/control"),
        format!(
            "Package: {SLOW}\nVersion: 1.0\nArchitecture: all\nMaintainer: mesh-host lab \
             <lab@mesh.invalid>\nDescription: the boot bed's slow install\n"
        ),
    )
    .unwrap();
    let postinst = tree.join("DEBIAN/postinst");
    std::fs::write(
        &postinst,
        format!(
            "#!/bin/sh\n[ \"$1\" = configure ] || exit 0\ntouch /opt/bed/slow.started\n\
             sleep {SLOW_FOR}\ntouch /opt/bed/slow.done\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &postinst,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = into.join(format!("{SLOW}_1.0_all.deb"));
    let (tree_s, out_s) = (tree.display().to_string(), out.display().to_string());
    run_ok(
        &["dpkg-deb", "--root-owner-group", "-b", &tree_s, &out_s],
        Duration::from_secs(60),
    );
    out
}

/// A flat apt repository at `/opt/bed/repo` in `tree` holding the project's `.deb` and the
/// slow package, and the tree's apt pointed at it alone (the bed has no other network): what a
/// package resource and a rollback install from.
fn local_repository(tree: &Tree) {
    let repo = tree.root.join("opt/bed/repo");
    std::fs::create_dir_all(&repo).unwrap();
    let name = format!("mesh-host_{}_amd64.deb", env!("CARGO_PKG_VERSION"));
    std::fs::copy(deb(), repo.join(&name)).unwrap();
    slow_package(&repo);
    let mut packages = String::new();
    let mut debs: Vec<_> = std::fs::read_dir(&repo)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    debs.sort();
    for deb in debs {
        let bytes = std::fs::read(&deb).unwrap();
        let fields = run_ok(
            &["dpkg-deb", "-f", &deb.display().to_string()],
            Duration::from_secs(30),
        );
        let digest: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let file = deb.file_name().unwrap().to_string_lossy();
        packages += &format!(
            "{fields}Filename: ./{file}\nSize: {}\nSHA256: {digest}\n\n",
            bytes.len()
        );
    }
    std::fs::write(repo.join("Packages"), packages).unwrap();
    tree.write(
        "/etc/apt/sources.list",
        "deb [trusted=yes] file:/opt/bed/repo ./\n",
    );
    let out = tree.nspawn(&["apt-get", "update", "-q"]);
    assert!(out.code == Some(0), "apt-get update: {}", text(&out));
}

fn installed_version(boot: &Boot) -> String {
    let out = boot
        .inside(&[
            "dpkg-query",
            "-W",
            "-f",
            "${Version} ${Status}",
            "mesh-host",
        ])
        .expect("inside");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn a_newer_deb_that_cannot_start_is_rolled_back_and_a_purge_leaves_only_the_store() {
    let tree = Tree::new();
    local_repository(&tree);
    let newer = newer_that_cannot_start(&tree.root.join("opt/bed"));
    // The launcher's delay between failed starts shortened (a documented setting), so three
    // failed starts take seconds, not 15.
    tree.write(
        "/etc/systemd/system/mesh-host.service.d/bed.conf",
        "[Service]\nEnvironment=MESH_HOST_RESTART_DELAY=1\n",
    );
    tree.declare(
        "adopted",
        vec![
            json!({"id": "app/config", "type": "file", "path": "/etc/app/app.conf",
                   "content": "written by the mesh\n"}),
            json!({"id": "app/slow", "type": "package", "name": SLOW}),
        ],
    );
    let (code, report) = tree.host(&["apply", "/opt/bed/decl.json"]);
    assert_eq!(code, Some(0), "the adopted apply: {report:#}");

    let outside = lab()
        .machine(&format!("bp{}", std::process::id() % 100_000))
        .unwrap();
    let mut boot = Boot::start(&tree, &name("p"), &outside);
    let state = tree.root.join("var/lib/mesh-host");
    let version = env!("CARGO_PKG_VERSION");
    let until = Instant::now() + Duration::from_secs(90);
    while !(boot.reconciled()
        && std::fs::read_to_string(state.join("known-good")).is_ok_and(|v| v.trim() == version))
    {
        assert!(
            Instant::now() < until,
            "the resident host never recorded {version} as known-good: {}",
            boot.journal(&[])
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // `systemctl stop` while the resident host's reconcile is putting back a package removed by
    // hand: the stop returns only once the install has finished, and the store records it.
    let out = boot
        .inside_for(&["dpkg", "-r", SLOW], Duration::from_secs(60))
        .expect("inside");
    assert_eq!(out.code, Some(0), "dpkg -r: {}", text(&out));
    let (started, done) = (
        tree.root.join("opt/bed/slow.started"),
        tree.root.join("opt/bed/slow.done"),
    );
    let _ = std::fs::remove_file(&started);
    let _ = std::fs::remove_file(&done);
    let out = boot
        .inside(&["systemctl", "reload", "mesh-host.service"])
        .expect("inside");
    assert_eq!(out.code, Some(0), "systemctl reload: {}", text(&out));
    let until = Instant::now() + Duration::from_secs(60);
    while !started.exists() {
        assert!(
            Instant::now() < until,
            "the reconcile never began putting {SLOW} back: {}",
            boot.journal(&["-u", "mesh-host.service"])
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !done.exists(),
        "the install finished before the stop was asked"
    );
    let out = boot
        .inside_for(
            &["systemctl", "stop", "mesh-host.service"],
            Duration::from_secs(120),
        )
        .expect("inside");
    assert_eq!(out.code, Some(0), "systemctl stop: {}", text(&out));
    assert!(
        done.exists(),
        "systemctl stop returned before the install under way had finished"
    );
    let out = boot
        .inside(&["dpkg-query", "-W", "-f", "${Status}", SLOW])
        .expect("inside");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "install ok installed",
        "the package the stop waited for"
    );
    let stopped = boot.journal(&["-u", "mesh-host.service"]);
    let last = stopped
        .rsplit_once("reconcile started")
        .map(|(_, l)| l)
        .unwrap_or("");
    assert!(
        last.contains("reconciled") && !last.contains("failed=Some"),
        "the reconcile the stop waited for did not complete: {stopped}"
    );
    let store = std::fs::read_to_string(state.join("state.json")).unwrap();
    assert!(
        store.contains("app/slow"),
        "the store does not record the package: {store}"
    );

    // The operator installs the newer package by hand and restarts the service to run it.
    let probing = Probing::start(&outside, &[STORE]);
    let name_in = format!("/opt/bed/{}", newer.file_name().unwrap().to_string_lossy());
    let out = boot
        .inside_for(&["dpkg", "-i", &name_in], Duration::from_secs(120))
        .expect("inside");
    assert_eq!(
        out.code,
        Some(0),
        "dpkg -i of the newer .deb: {}",
        text(&out)
    );
    assert!(
        installed_version(&boot).starts_with(&format!("{NEWER} install ok installed")),
        "{}",
        installed_version(&boot)
    );
    let out = boot
        .inside_for(
            &["systemctl", "restart", "mesh-host.service"],
            Duration::from_secs(120),
        )
        .expect("inside");
    assert_eq!(out.code, Some(0), "systemctl restart: {}", text(&out));

    // Three failed starts, the rollback through apt, the known-good version reconciling.
    let until = Instant::now() + Duration::from_secs(180);
    let rolled_back = |b: &Boot| {
        let journal = b.journal(&["-u", "mesh-host.service"]);
        let after = journal
            .rsplit_once(&format!("rolling back to known-good mesh-host {version}"))
            .map(|(_, after)| after.to_string());
        after.is_some_and(|a| a.contains("reconciled"))
    };
    while !rolled_back(&boot) {
        assert!(
            Instant::now() < until,
            "no rollback to {version} and reconcile after it: {}",
            boot.journal(&["-u", "mesh-host.service"])
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let down = probing.stop();
    let journal = boot.journal(&["-u", "mesh-host.service"]);
    eprintln!(
        "from dpkg -i of {NEWER} to the rollback's reconcile: {:?}, {down:?}",
        down.window
    );
    assert_eq!(
        journal
            .matches(&format!("mesh-host {NEWER}: this build cannot start"))
            .count(),
        3,
        "three failed starts before the rollback: {journal}"
    );
    assert!(
        installed_version(&boot).starts_with(&format!("{version} install ok installed")),
        "{}",
        installed_version(&boot)
    );
    assert_eq!(
        std::fs::read_to_string(state.join("rolled-back"))
            .unwrap()
            .trim(),
        version
    );
    let errors = boot.journal(&["-t", "mesh-host", "-p", "warning"]);
    assert!(
        errors.contains("rolling back to known-good"),
        "the rollback is not a warning in the journal: {errors}"
    );
    assert_eq!(
        down.reached(STORE),
        0,
        "the store's port was reached while the host was down: {down:?}"
    );
    assert!(down.tried_of(STORE, "v4") > 0 && down.tried_of(STORE, "v6") > 0);

    // The purge: every file the package installed is gone, both units stopped and forgotten;
    // the store and what the host made stay.
    let listed = std::fs::read_to_string(tree.root.join("var/lib/dpkg/info/mesh-host.list"))
        .expect("dpkg's list of the package's files");
    let files: Vec<&str> = listed
        .lines()
        .filter(|p| {
            let p = tree.root.join(p.trim_start_matches('/'));
            p.symlink_metadata().is_ok_and(|m| !m.is_dir())
        })
        .collect();
    assert!(files.contains(&"/usr/bin/mesh-host"), "{listed}");
    let out = boot
        .inside_for(
            &["apt-get", "purge", "-y", "-q", "mesh-host"],
            Duration::from_secs(300),
        )
        .expect("inside");
    assert_eq!(out.code, Some(0), "apt-get purge: {}", text(&out));
    let left: Vec<&&str> = files
        .iter()
        .filter(|p| {
            tree.root
                .join(p.trim_start_matches('/'))
                .symlink_metadata()
                .is_ok()
        })
        .collect();
    assert!(left.is_empty(), "the purge left the package's {left:?}");
    let out = boot
        .inside(&["dpkg-query", "-W", "-f", "${Status}", "mesh-host"])
        .expect("inside");
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.code != Some(0) || status.contains("not-installed"),
        "dpkg still knows mesh-host: {status}"
    );
    for unit in ["mesh-host.service", "mesh-host-boot.service"] {
        let out = boot
            .inside(&["systemctl", "is-active", unit])
            .expect("inside");
        assert_ne!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "active",
            "{unit} still runs after the purge"
        );
        let enablement = walk(&tree.root.join("etc/systemd/system"))
            .into_iter()
            .filter(|p| p.file_name().is_some_and(|n| n == unit))
            .collect::<Vec<_>>();
        assert!(
            enablement.is_empty(),
            "the purge left {unit}'s enablement or mask: {enablement:?}"
        );
    }
    let out = boot.inside(&["pgrep", "-f", "mesh-host"]).expect("inside");
    assert_ne!(
        out.code,
        Some(0),
        "a mesh-host process outlived the purge: {}",
        text(&out)
    );
    assert!(
        state.join("state.json").exists(),
        "the purge took the store with it"
    );
    assert_eq!(
        std::fs::read_to_string(tree.root.join("etc/app/app.conf")).unwrap(),
        "written by the mesh\n",
        "the purge removed what the host made (a purge is not a release)"
    );
    boot.halt();
}

/// Every path under `dir`, directories included, symlinks not followed.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}
