//! The upgrade path through the built binary: a declaration names mesh-host itself at a new
//! version, the package manager installs it, and the host runs the new binary's `version` before
//! it records anything. apt-get and dpkg-query are stubs first on PATH (this test must not
//! replace the machine's own packages) that "install" a version by copying a prepared file to
//! `<root>/usr/bin/mesh-host`: a script printing another version, a copy of this very build, this
//! build made for another architecture (its ELF machine field changed), and a dynamically linked
//! program whose loader is not on this machine. The files run are real; only the package
//! manager is a stand-in.

use crate::util::{Node, Run};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// apt-get: `install … mesh-host=V` copies `$STUB/repo/V` to the root's binary and records V.
const APT_GET: &str = r#"#!/bin/sh
echo "apt-get $*" >> "$STUB/calls"
for a in "$@"; do
  case $a in
    mesh-host=*)
      v=${a#mesh-host=}
      [ -f "$STUB/repo/$v" ] || { echo "E: Version '$v' for 'mesh-host' was not found" >&2; exit 100; }
      mkdir -p "$NODE_ROOT/usr/bin"
      cp "$STUB/repo/$v" "$NODE_ROOT/usr/bin/mesh-host"
      chmod 755 "$NODE_ROOT/usr/bin/mesh-host"
      echo "$v" > "$STUB/installed" ;;
  esac
done
"#;

/// dpkg-query: the recorded version, as dpkg shows an installed package.
const DPKG_QUERY: &str = r#"#!/bin/sh
if [ -f "$STUB/installed" ]; then printf 'ii \t%s\n' "$(cat "$STUB/installed")"; exit 0; fi
echo "dpkg-query: no packages found matching mesh-host" >&2
exit 1
"#;

fn decl(version: &str) -> Value {
    json!({"version": 1, "node": "n1", "mode": "converged", "resources": [
        {"id": "host", "type": "package", "name": "mesh-host", "version": version}
    ]})
}

fn write_exe(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn entry(r: &Run) -> Value {
    r.json()["entries"][0].clone()
}

#[test]
fn the_host_upgrades_itself_only_to_a_binary_that_runs_here() {
    let node = Node::new();
    let stub = tempfile::tempdir().unwrap();
    let s = stub.path();
    write_exe(&s.join("bin/apt-get"), APT_GET.as_bytes());
    write_exe(&s.join("bin/dpkg-query"), DPKG_QUERY.as_bytes());
    let system = mesh_host::build::BUILD.system;
    let built = std::fs::read(env!("CARGO_BIN_EXE_mesh-host")).unwrap();

    // A second build: a program printing a later version of this system's host.
    write_exe(
        &s.join("repo/0.2.0"),
        format!("#!/bin/sh\necho 'mesh-host 0.2.0 ({system})'\n").as_bytes(),
    );
    // This very build, packaged again.
    write_exe(&s.join("repo/0.1.0+copy"), &built);
    // This build for another architecture: e_machine (bytes 18-19) says AArch64.
    let mut foreign = built.clone();
    assert_eq!(&foreign[..4], b"\x7fELF");
    foreign[18..20].copy_from_slice(&183u16.to_le_bytes());
    write_exe(&s.join("repo/0.3.0"), &foreign);
    // A dynamically linked program whose program loader this machine does not have.
    let mut dynamic = std::fs::read("/bin/true").unwrap();
    let loader = b"/lib64/ld-linux-x86-64.so.2";
    let at = dynamic
        .windows(loader.len())
        .position(|w| w == loader)
        .expect("/bin/true names the x86-64 loader");
    dynamic[at..at + loader.len()].copy_from_slice(b"/lib64/ld-absent-x86-64.so.");
    write_exe(&s.join("repo/0.4.0"), &dynamic);

    let path = format!(
        "{}:{}",
        s.join("bin").display(),
        std::env::var("PATH").unwrap()
    );
    let root = node.root().display().to_string();
    let env = [
        ("PATH", path.as_str()),
        ("STUB", s.to_str().unwrap()),
        ("NODE_ROOT", root.as_str()),
    ];

    // The new binary runs: recorded, reported, and the host says it stands aside.
    let r = node.apply_env(&decl("0.2.0"), &[], &env);
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    let e = entry(&r);
    assert_eq!(e["outcome"], "created", "{e:#}");
    let detail = e["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("its binary runs (mesh-host 0.2.0 ({system}))")),
        "{detail}"
    );
    assert!(
        r.stderr
            .contains("the launcher starts the new binary when the host exits"),
        "{}",
        r.stderr
    );
    assert_eq!(node.state()["owned"][0]["key"], "mesh-host");

    // Another architecture: the apply fails and says why; the record stays the earlier one.
    let owned_before = node.state()["owned"].clone();
    for (version, why) in [
        ("0.3.0", "exec format error"),
        (
            "0.4.0",
            "the program loader or C library it needs is not on this machine",
        ),
    ] {
        let r = node.apply_env(&decl(version), &[], &env);
        assert_eq!(r.code, Some(1), "{version}: {}\n{}", r.stdout, r.stderr);
        let e = entry(&r);
        assert_eq!(e["outcome"], "failed", "{e:#}");
        let detail = e["detail"].as_str().unwrap();
        assert!(
            detail.starts_with(
                "package mesh-host: the new binary /usr/bin/mesh-host does not run here"
            ) && detail.contains(why),
            "{version}: {detail}"
        );
        assert!(!r.stderr.contains("the launcher starts"), "{}", r.stderr);
        assert_eq!(node.state()["owned"], owned_before, "{version}");
        // The package stays installed at that version, and a reconcile checks it again rather
        // than finding it "installed as declared"; failing, it proves nothing, so known-good is
        // not written.
        let rec = node.run_env(&["reconcile", "--json"], &env);
        assert_eq!(rec.code, Some(1), "{}\n{}", rec.stdout, rec.stderr);
        assert!(
            entry(&rec)["detail"].as_str().unwrap().contains(why),
            "{}",
            rec.stdout
        );
        assert!(node.read("/var/lib/mesh-host/known-good").is_none());
    }

    // A copy of this build runs: the upgrade is recorded.
    let r = node.apply_env(&decl("0.1.0+copy"), &[], &env);
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert!(entry(&r)["detail"].as_str().unwrap().contains(&format!(
        "mesh-host {} ({system})",
        env!("CARGO_PKG_VERSION")
    )));

    // A reconcile that completes: the running version is known good and the count is cleared.
    node.write("/var/lib/mesh-host/attempts", "2\n");
    let rec = node.run_env(&["reconcile", "--json"], &env);
    assert_eq!(rec.code, Some(0), "{}", rec.stderr);
    assert_eq!(entry(&rec)["outcome"], "unchanged");
    assert_eq!(
        node.read("/var/lib/mesh-host/known-good").as_deref(),
        Some(format!("{}\n", env!("CARGO_PKG_VERSION")).as_str())
    );
    assert!(node.read("/var/lib/mesh-host/attempts").is_none());
}
