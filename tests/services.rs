//! Services through the built binary against a stub `systemctl`: no systemd runs as PID 1 on these
//! machines, so a small script placed first on PATH stands in for it. Each test says how the stub
//! behaves; the stub keeps each unit in a file and logs every call, so the tests see what the host
//! asked and what it left.

use crate::util::{Node, Run};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Stands in for `systemctl`: `show -p … NAME` prints LoadState/ActiveState/UnitFileState from
/// `$STUB/units/NAME` (a unit with no file is `LoadState=not-found`); `start`, `stop`, `enable`,
/// `disable` rewrite that file, unless it holds `inert=1`, in which case they exit 0 and change
/// nothing (the lie read-back exists to catch). Every call is appended to `$STUB/calls`.
const SYSTEMCTL: &str = r#"#!/bin/bash
set -euo pipefail
echo "$*" >> "$STUB/calls"
verb=$1
name=${@: -1}
unit="$STUB/units/$name"
active=inactive enabled=disabled inert=0
if [ -f "$unit" ]; then . "$unit"; fi
case "$verb" in
  show)
    if [ -f "$unit" ]; then
      printf 'LoadState=loaded\nActiveState=%s\nUnitFileState=%s\n' "$active" "$enabled"
    else
      printf 'LoadState=not-found\nActiveState=inactive\nUnitFileState=\n'
    fi
    exit 0 ;;
esac
if [ ! -f "$unit" ]; then
  echo "Failed to $verb $name: Unit $name not found." >&2
  exit 5
fi
if [ "$inert" = 1 ]; then exit 0; fi
case "$verb" in
  start) active=active ;;
  stop) active=inactive ;;
  enable) enabled=enabled ;;
  disable) enabled=disabled ;;
  *) echo "stub systemctl: unknown verb $verb" >&2; exit 1 ;;
esac
printf 'active=%s\nenabled=%s\ninert=%s\n' "$active" "$enabled" "$inert" > "$unit"
"#;

/// A node whose PATH starts with a stub `systemctl`.
struct Stub {
    node: Node,
    dir: tempfile::TempDir,
    path: String,
}

impl Stub {
    fn new() -> Stub {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::create_dir_all(dir.path().join("units")).unwrap();
        let prog = dir.path().join("bin/systemctl");
        std::fs::write(&prog, SYSTEMCTL).unwrap();
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!(
            "{}:{}",
            dir.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Stub {
            node: Node::new(),
            dir,
            path,
        }
    }

    fn home(&self) -> &Path {
        self.dir.path()
    }

    /// Installs a unit in the stub in the given state.
    fn unit(&self, name: &str, active: &str, enabled: &str, inert: bool) {
        std::fs::write(
            self.unit_file(name),
            format!(
                "active={active}\nenabled={enabled}\ninert={}\n",
                u8::from(inert)
            ),
        )
        .unwrap();
    }

    fn unit_file(&self, name: &str) -> PathBuf {
        self.home().join("units").join(name)
    }

    /// The unit's `active=` and `enabled=` as the stub holds them.
    fn state(&self, name: &str) -> String {
        std::fs::read_to_string(self.unit_file(name))
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with("inert"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The calls the host made, one per line, and forgets them.
    fn calls(&self) -> Vec<String> {
        let file = self.home().join("calls");
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let _ = std::fs::remove_file(&file);
        text.lines().map(String::from).collect()
    }

    fn apply(&self, d: &Value) -> Run {
        let home = self.home().display().to_string();
        self.node
            .apply_env(d, &[], &[("PATH", &self.path), ("STUB", &home)])
    }
}

fn decl(mode: &str, taken: &[&str], resources: Value) -> Value {
    json!({"version": 1, "node": "n1", "mode": mode, "taken": taken, "resources": resources})
}

fn nginx(state: &str, enabled: bool) -> Value {
    json!({"id": "web/nginx", "module": "web", "type": "service", "name": "nginx.service",
           "state": state, "enabled": enabled})
}

fn ok(r: &Run) {
    assert_eq!(r.code, Some(0), "apply failed:\n{}\n{}", r.stdout, r.stderr);
}

#[test]
fn a_declared_service_that_is_not_installed_fails_and_is_never_reported_as_success() {
    // The stub knows no unit at all: `show` answers LoadState=not-found.
    let stub = Stub::new();
    for state in ["running", "stopped"] {
        let r = stub.apply(&decl("converged", &[], json!([nginx(state, false)])));
        assert_eq!(r.code, Some(1), "{}", r.stdout);
        assert_eq!(r.outcome("web/nginx"), "failed");
        assert!(
            r.stdout
                .contains("nginx.service is not installed (LoadState=not-found"),
            "{}",
            r.stdout
        );
    }
    assert_eq!(
        stub.calls(),
        [
            "show -p LoadState,ActiveState,UnitFileState nginx.service",
            "show -p LoadState,ActiveState,UnitFileState nginx.service"
        ],
        "nothing but the question was asked"
    );
    assert_eq!(stub.node.state()["owned"], json!([]));
}

#[test]
fn a_service_is_started_enabled_read_back_and_stopped_not_deleted_when_undeclared() {
    // The stub holds nginx installed, stopped and disabled; its verbs do what they say.
    let stub = Stub::new();
    stub.unit("nginx.service", "inactive", "disabled", false);
    let d = decl("converged", &[], json!([nginx("running", true)]));
    let r = stub.apply(&d);
    ok(&r);
    assert_eq!(r.outcome("web/nginx"), "changed");
    assert_eq!(stub.state("nginx.service"), "active=active enabled=enabled");
    let calls = stub.calls();
    assert_eq!(calls[1..3], ["start nginx.service", "enable nginx.service"]);
    assert_eq!(calls.len(), 4, "asked, changed, read back: {calls:?}");

    let r = stub.apply(&d);
    ok(&r);
    assert_eq!(r.outcome("web/nginx"), "unchanged");
    assert_eq!(stub.calls().len(), 1, "only asked");

    let r = stub.apply(&decl("converged", &[], json!([])));
    ok(&r);
    assert_eq!(r.outcome("web/nginx"), "forgotten");
    assert!(r.stdout.contains("stopped; left installed"), "{}", r.stdout);
    assert_eq!(
        stub.state("nginx.service"),
        "active=inactive enabled=enabled"
    );
    assert!(stub.unit_file("nginx.service").exists(), "never deleted");
    assert!(stub.calls().contains(&"stop nginx.service".to_string()));
}

#[test]
fn a_start_that_exits_zero_without_starting_is_a_failure() {
    // The stub's nginx is inert: start exits 0 and nothing starts.
    let stub = Stub::new();
    stub.unit("nginx.service", "inactive", "enabled", true);
    let r = stub.apply(&decl("converged", &[], json!([nginx("running", true)])));
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    assert_eq!(r.outcome("web/nginx"), "failed");
    assert!(
        r.stdout
            .contains("was started without an error, but reads back stopped enabled"),
        "{}",
        r.stdout
    );
    assert_eq!(stub.node.state()["owned"], json!([]));
}

#[test]
fn a_service_found_running_on_an_adopted_node_is_held_and_a_stop_by_something_else_is_reported() {
    // The stub's nginx runs, enabled, before the host ever saw it: the predecessor's.
    let stub = Stub::new();
    stub.unit("nginx.service", "active", "enabled", false);
    let d = decl("adopted", &[], json!([nginx("stopped", false)]));
    let r = stub.apply(&d);
    ok(&r);
    assert_eq!(r.outcome("web/nginx"), "held");
    assert_eq!(stub.state("nginx.service"), "active=active enabled=enabled");
    assert_eq!(
        stub.calls().len(),
        1,
        "only asked: a held service is not touched"
    );

    stub.unit("nginx.service", "inactive", "enabled", false);
    let r = stub.apply(&d);
    ok(&r);
    assert_eq!(r.outcome("web/nginx"), "changed-by-something-else");
    assert_eq!(stub.calls().len(), 1, "not restarted");

    // Taking the module converges it as declared.
    let r = stub.apply(&decl("adopted", &["web"], json!([nginx("stopped", false)])));
    ok(&r);
    assert_eq!(r.outcome("web/nginx"), "changed");
    assert_eq!(
        stub.state("nginx.service"),
        "active=inactive enabled=disabled"
    );
}

#[test]
fn the_hosts_own_unit_is_refused_and_nothing_is_asked_or_written() {
    // The stub would answer anything; it must never be called.
    let stub = Stub::new();
    stub.unit("mesh-host.service", "active", "enabled", false);
    let own = json!({"id": "host", "type": "service", "name": "mesh-host.service",
                     "state": "stopped", "enabled": false});
    let r = stub.apply(&decl("converged", &[], json!([own])));
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("resources[0].name: mesh-host.service is the host's own unit"),
        "{}",
        r.stderr
    );
    assert!(stub.calls().is_empty());
    assert!(!stub.node.path("/var/lib/mesh-host").exists());
    assert_eq!(
        stub.state("mesh-host.service"),
        "active=active enabled=enabled"
    );
}
