//! Packages through the built binary against this machine's real apt and dpkg. These change the
//! machine itself (as root), which is acceptable for packages on a throw-away CI machine: the
//! package used is `sl`, small and depending only on libraries every Debian has, and it is purged
//! again at the end. Everything happens in one test, because dpkg is one database for the machine.
//!
//! Unlike the other tests, the binary runs in the machine's own network namespace, because apt
//! fetches from the network. It touches no firewall there: the declarations carry no settings
//! and no openings, so no guard and no opening is loaded.

use crate::util::{Node, Run};
use serde_json::{json, Value};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

const PACKAGE: &str = "sl";

fn decl(mode: &str, resources: Value) -> Value {
    json!({"version": 1, "node": "n1", "mode": mode, "resources": resources})
}

fn sl(version: Option<&str>) -> Value {
    let mut v = json!({"id": "fun/sl", "module": "fun", "type": "package", "name": PACKAGE});
    if let Some(version) = version {
        v["version"] = json!(version);
    }
    v
}

/// `mesh-host --root ROOT apply FILE --json` in the machine's own network namespace.
fn apply_env(node: &Node, d: &Value) -> Run {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), serde_json::to_vec(d).unwrap()).unwrap();
    assert!(
        d.get("settings").is_none(),
        "no settings: no guard in the machine's firewall"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_mesh-host"))
        .arg("--root")
        .arg(node.root())
        .arg("apply")
        .arg(file.path())
        .arg("--json")
        .env_remove("MESH_HOST_FAILPOINT")
        // This throw-away machine's own apt is meant here (see the module's doc).
        .env(crate::util::HOST_TOOLS, "1")
        .output()
        .expect("running mesh-host");
    Run {
        code: out.status.code(),
        signal: out.status.signal(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn apply(node: &Node, d: &Value) -> Run {
    let r = apply_env(node, d);
    assert_eq!(r.code, Some(0), "apply failed:\n{}\n{}", r.stdout, r.stderr);
    r
}

/// The version dpkg says is installed, if it is.
fn dpkg_version() -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f", "${db:Status-Abbrev}|${Version}", PACKAGE])
        .output()
        .expect("dpkg-query runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (status, version) = text.split_once('|')?;
    (status.as_bytes().get(1) == Some(&b'i')).then(|| version.to_string())
}

/// Purges the package, waiting for the package database like the host does (another apt on the
/// machine must not fail the test).
fn purge() {
    let out = Command::new("apt-get")
        .args([
            "purge",
            "-y",
            "-q",
            "-o",
            "DPkg::Lock::Timeout=120",
            PACKAGE,
        ])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .expect("apt-get runs");
    assert!(
        out.status.success(),
        "apt-get purge {PACKAGE}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(dpkg_version(), None);
}

#[test]
fn apt_installs_a_real_package_on_this_machine_reads_it_back_and_never_uninstalls_it() {
    purge();

    let node = Node::new();
    let r = apply(&node, &decl("converged", json!([sl(None)])));
    assert_eq!(r.outcome("fun/sl"), "created");
    let version = dpkg_version().expect("installed by the host");
    assert!(
        r.stdout.contains(&format!("{version} installed")),
        "the report names what dpkg has: {}",
        r.stdout
    );
    assert_eq!(
        apply(&node, &decl("converged", json!([sl(None)]))).outcome("fun/sl"),
        "unchanged"
    );
    assert_eq!(
        apply(&node, &decl("converged", json!([sl(Some(&version))]))).outcome("fun/sl"),
        "unchanged"
    );

    // A version apt cannot install fails, naming the package, and changes nothing.
    let r = apply_env(
        &node,
        &decl("converged", json!([sl(Some("0.0-not-a-version"))])),
    );
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    assert_eq!(r.outcome("fun/sl"), "failed");
    assert!(r.stdout.contains("installing package sl"), "{}", r.stdout);
    assert_eq!(dpkg_version().as_deref(), Some(version.as_str()));

    // Undeclared: forgotten, never uninstalled.
    let r = apply(&node, &decl("converged", json!([])));
    assert_eq!(r.outcome("fun/sl"), "forgotten");
    assert_eq!(dpkg_version().as_deref(), Some(version.as_str()));

    // On an adopted node, the same package found installed with no record is held as it is.
    let adopted = Node::new();
    let r = apply(
        &adopted,
        &decl("adopted", json!([sl(Some("0.0-not-a-version"))])),
    );
    assert_eq!(r.outcome("fun/sl"), "held");
    assert_eq!(dpkg_version().as_deref(), Some(version.as_str()));

    purge();
    let r = apply(
        &adopted,
        &decl("adopted", json!([sl(Some("0.0-not-a-version"))])),
    );
    assert_eq!(r.outcome("fun/sl"), "changed-by-something-else");
    assert_eq!(dpkg_version(), None, "not reinstalled while held");
}

/// The .deb's maintainer scripts, run with every argument dpkg can give them against stub
/// deb-systemd-helper, deb-systemd-invoke and systemctl (first on PATH, recording their calls):
/// each argument is honoured, an unknown one refused, the enablement kept through
/// deb-systemd-helper, and nothing ever started or restarted.
#[test]
fn the_maintainer_scripts_honour_every_argument_and_start_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let stub = tempfile::tempdir().unwrap();
    let bin = stub.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["deb-systemd-helper", "deb-systemd-invoke", "systemctl"] {
        let p = bin.join(tool);
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\necho \"{tool} $*\" >> \"$STUB/calls\"\n\
                 case \"$*\" in *was-enabled*) [ -f \"$STUB/enabled\" ] ;; *debian-installed*) [ -f \"$STUB/installed\" ] ;; esac\n"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let run = |script: &str, arg: &str| -> (Option<i32>, Vec<String>) {
        let _ = std::fs::remove_file(stub.path().join("calls"));
        let out = Command::new("/bin/sh")
            .arg(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("packaging/debian")
                    .join(script),
            )
            .arg(arg)
            .arg("0.1.0")
            .env("STUB", stub.path())
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .output()
            .unwrap();
        let calls = std::fs::read_to_string(stub.path().join("calls"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect();
        (out.status.code(), calls)
    };
    let args: &[(&str, &[&str])] = &[
        (
            "postinst",
            &[
                "configure",
                "abort-upgrade",
                "abort-deconfigure",
                "abort-remove",
                "triggered",
            ],
        ),
        (
            "prerm",
            &["remove", "upgrade", "deconfigure", "failed-upgrade"],
        ),
        (
            "postrm",
            &[
                "remove",
                "purge",
                "upgrade",
                "failed-upgrade",
                "abort-install",
                "abort-upgrade",
                "disappear",
            ],
        ),
    ];
    for (script, list) in args {
        for arg in *list {
            let (code, calls) = run(script, arg);
            assert_eq!(code, Some(0), "{script} {arg}: {calls:?}");
            for c in &calls {
                assert!(
                    !c.contains(" start") && !c.contains("restart") && !c.contains("enable --now"),
                    "{script} {arg} started something: {c}"
                );
            }
        }
        let (code, _) = run(script, "no-such-argument");
        assert_eq!(code, Some(1), "{script} refuses an unknown argument");
    }
    // A first install keeps the unit's state through deb-systemd-helper and enables nothing.
    let (_, calls) = run("postinst", "configure");
    assert!(
        calls
            .iter()
            .any(|c| c == "deb-systemd-helper update-state mesh-host.service"),
        "{calls:?}"
    );
    assert!(!calls.iter().any(|c| c.contains(" enable ")), "{calls:?}");
    // An upgrade of an enabled unit keeps it enabled; an aborted upgrade does the same.
    std::fs::write(stub.path().join("installed"), "").unwrap();
    std::fs::write(stub.path().join("enabled"), "").unwrap();
    for arg in ["configure", "abort-upgrade"] {
        let (_, calls) = run("postinst", arg);
        assert!(
            calls
                .iter()
                .any(|c| c == "deb-systemd-helper enable mesh-host.service"),
            "{arg}: {calls:?}"
        );
    }
    // An upgrade never stops the host (it may be the one upgrading); a removal does, through
    // deb-systemd-invoke, only where systemd runs (not here: nothing is called).
    assert!(run("prerm", "upgrade").1.is_empty());
    // Purge forgets the enablement and lifts the removal's mask.
    let (_, calls) = run("postrm", "purge");
    assert!(
        calls
            .iter()
            .any(|c| c == "deb-systemd-helper purge mesh-host.service"),
        "{calls:?}"
    );
    let (_, calls) = run("postrm", "remove");
    assert!(
        calls
            .iter()
            .any(|c| c == "deb-systemd-helper mask mesh-host.service"),
        "{calls:?}"
    );
}
