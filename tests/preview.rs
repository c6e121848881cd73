//! `--preview` of the acts through the built binary, in a lab machine of the test's own with a
//! real Docker engine, a found nftables ruleset, a stub `systemctl` and stub apt: for a
//! declaration with every shape, each preview changes nothing (the root's files and the store,
//! the machine's `nft list ruleset`, the engine's containers, the stubs' state, compared before
//! and after) and names the same resources with the same outcomes as the act that follows it.

use crate::util::Node;
use lab::Machine;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const MESH: &str = env!("CARGO_BIN_EXE_mesh-host");

/// systemctl: `show` prints the unit's state from `$STUB/units/NAME`; the verbs rewrite it.
const SYSTEMCTL: &str = r#"#!/bin/bash
set -euo pipefail
verb=$1
name=${@: -1}
unit="$STUB/units/$name"
active=inactive enabled=disabled
if [ -f "$unit" ]; then . "$unit"; fi
if [ "$verb" = show ]; then
  if [ -f "$unit" ]; then
    printf 'LoadState=loaded\nActiveState=%s\nUnitFileState=%s\n' "$active" "$enabled"
  else
    printf 'LoadState=not-found\nActiveState=inactive\nUnitFileState=\n'
  fi
  exit 0
fi
case "$verb" in
  start) active=active ;; stop) active=inactive ;;
  enable) enabled=enabled ;; disable) enabled=disabled ;;
esac
printf 'active=%s\nenabled=%s\n' "$active" "$enabled" > "$unit"
"#;

/// apt-get: `install … NAME` records the package installed at 1.0-1.
const APT_GET: &str = r#"#!/bin/sh
for a in "$@"; do case $a in -*) ;; *) last=$a ;; esac; done
echo "1.0-1" > "$STUB/pkg-$last"
"#;

/// dpkg-query: the recorded version, as dpkg shows an installed package.
const DPKG_QUERY: &str = r#"#!/bin/sh
for a in "$@"; do last=$a; done
if [ -f "$STUB/pkg-$last" ]; then printf 'ii \t%s\n' "$(cat "$STUB/pkg-$last")"; exit 0; fi
echo "dpkg-query: no packages found matching $last" >&2
exit 1
"#;

/// A found ruleset dropping by default on the incoming path.
const FOUND: &str = "table inet host {
	chain input {
		type filter hook input priority 0; policy drop;
		ct state established,related accept
		iif \"lo\" accept
		tcp dport 22 accept
	}
}
";

struct Bed {
    machine: Machine,
    engine: lab::Docker,
    stub: tempfile::TempDir,
    node: Node,
}

fn write_exe(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

impl Bed {
    fn new(lab: &lab::Lab) -> Bed {
        let machine = lab.machine("preview").expect("a lab machine");
        let engine = machine
            .start_docker(&lab.dir().join("docker"))
            .expect("dockerd in the lab machine");
        let stub = tempfile::tempdir().unwrap();
        write_exe(&stub.path().join("bin/systemctl"), SYSTEMCTL);
        write_exe(&stub.path().join("bin/apt-get"), APT_GET);
        write_exe(&stub.path().join("bin/dpkg-query"), DPKG_QUERY);
        std::fs::create_dir_all(stub.path().join("units")).unwrap();
        std::fs::write(
            stub.path().join("units/web.service"),
            "active=inactive\nenabled=disabled\n",
        )
        .unwrap();
        let found = lab.dir().join("found.nft");
        std::fs::write(&found, FOUND).unwrap();
        machine
            .run_ok(&["nft", "-f", found.to_str().unwrap()])
            .expect("loading the found ruleset");
        Bed {
            machine,
            engine,
            stub,
            node: Node::new(),
        }
    }

    /// `mesh-host --root ROOT ARGS… --json` inside the machine: its exit code and its JSON.
    fn mesh(&self, args: &[&str]) -> (i32, Value) {
        let path = format!(
            "PATH={}:{}",
            self.stub.path().join("bin").display(),
            std::env::var("PATH").unwrap()
        );
        let stub = format!("STUB={}", self.stub.path().display());
        let docker = format!("DOCKER_HOST={}", self.engine.docker_host());
        let root = self.node.root().display().to_string();
        let mut argv = vec![
            "env",
            &path,
            &stub,
            &docker,
            "CONTAINER_HOST=",
            MESH,
            "--root",
        ];
        argv.push(&root);
        argv.extend_from_slice(args);
        argv.push("--json");
        let out = self.machine.run(&argv).expect("running mesh-host");
        if let Err(e) = serde_json::from_str::<Value>(&out.stdout) {
            panic!("{args:?}: not JSON ({e}):\n{}\n{}", out.stdout, out.stderr);
        }
        let v = crate::util::contract(&out.stdout);
        (out.status.code().unwrap_or(-1), v)
    }

    /// Everything a preview must leave as it was.
    fn everything(&self) -> (BTreeMap<String, String>, String, String, Vec<String>) {
        let ruleset = self
            .machine
            .run_ok(&["nft", "list", "ruleset"])
            .unwrap()
            .stdout;
        let containers = self
            .machine
            .run_ok(&[
                "env",
                &format!("DOCKER_HOST={}", self.engine.docker_host()),
                "docker",
                "ps",
                "-a",
                "--format",
                "{{.Names}} {{.ID}} {{.Status}}",
            ])
            .unwrap()
            .stdout;
        let mut stubs: Vec<String> = std::fs::read_dir(self.stub.path())
            .unwrap()
            .chain(std::fs::read_dir(self.stub.path().join("units")).unwrap())
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .map(|p| format!("{}={}", p.display(), std::fs::read_to_string(&p).unwrap()))
            .collect();
        stubs.sort();
        let containers = containers
            .lines()
            .map(|l| l.split(" Up ").next().unwrap_or(l).to_string())
            .collect::<Vec<_>>()
            .join("\n");
        (self.node.snapshot(), ruleset, containers, stubs)
    }

    /// Previews `act`, checks it changed nothing, runs the act, and checks the preview named the
    /// same resources with the same outcomes. Returns the preview's exit code and each
    /// resource's outcome.
    fn preview_then_act(&self, act: &[&str], preview: &[&str]) -> (i32, BTreeMap<String, String>) {
        let before = self.everything();
        let (code, plan) = self.mesh(preview);
        assert!(
            code == 0 || code == 4,
            "{preview:?} exited {code}: {plan:#}"
        );
        assert_eq!(plan["pending"], json!(code == 4), "{plan:#}");
        let after = self.everything();
        assert_eq!(
            before.0, after.0,
            "{preview:?} changed the root or the store"
        );
        assert_eq!(before.1, after.1, "{preview:?} changed the ruleset");
        assert_eq!(before.2, after.2, "{preview:?} changed the containers");
        assert_eq!(before.3, after.3, "{preview:?} changed the stubs' state");
        let (done, report) = self.mesh(act);
        assert_eq!(done, 0, "{act:?}: {report:#}");
        let outcomes = |v: &Value| -> Vec<(String, String)> {
            let mut o: Vec<(String, String)> = v["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    (
                        e["id"].as_str().unwrap().to_string(),
                        e["outcome"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            o.sort();
            o
        };
        assert_eq!(
            outcomes(&plan),
            outcomes(&report),
            "the preview and the act differ:\npreview {plan:#}\nact {report:#}"
        );
        (code, outcomes(&plan).into_iter().collect())
    }
}

fn declaration(taken: &[&str]) -> Value {
    json!({"version": 1, "node": "n1", "mode": "adopted", "taken": taken,
        "settings": {"ports": {"store": 5432, "bus": 5672, "broker_management": 15672,
                               "registry": 5000, "hub": 51820}},
        "resources": [
        {"id": "web/conf", "module": "web", "type": "file", "path": "/etc/web.conf",
         "content": "declared\n"},
        {"id": "web/found", "module": "web", "type": "file", "path": "/etc/found.conf",
         "content": "declared\n"},
        {"id": "web/dir", "module": "web", "type": "directory", "path": "/srv/web"},
        {"id": "web/init", "module": "web", "type": "action",
         "run": ["sh", "-c", "touch \"$MESH_HOST_ROOT/srv/ran\""],
         "verify": ["sh", "-c", "test -e \"$MESH_HOST_ROOT/srv/ran\""]},
        {"id": "web/app", "module": "web", "type": "container", "name": "pv-web",
         "image": lab::BUSYBOX_IMAGE,
         "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; httpd -f -p 80 -h /www & wait"],
         "ports": [{"host_port": 8088, "container_port": 80, "proto": "tcp"}]},
        {"id": "web/svc", "module": "web", "type": "service", "name": "web.service",
         "state": "running", "enabled": true},
        {"id": "web/pkg", "module": "web", "type": "package", "name": "sl"},
        {"id": "web/open", "module": "web", "type": "opening", "port": 9000, "proto": "tcp",
         "from": "anywhere", "path": "incoming"}
    ]})
}

#[test]
fn a_preview_of_each_act_changes_nothing_and_says_what_the_act_then_does() {
    let lab = lab::Lab::new().expect("the lab needs root, iproute2 and nsenter; it never skips");
    let bed = Bed::new(&lab);
    bed.node.write("/etc/found.conf", "found before the host\n");
    let file = bed.node.root().join("..").join(format!(
        "preview-{}.json",
        bed.node.root().file_name().unwrap().to_str().unwrap()
    ));
    std::fs::write(&file, serde_json::to_vec(&declaration(&[])).unwrap()).unwrap();
    let file = file.to_str().unwrap().to_string();

    // The first apply: everything created, the found file held, the opening written.
    let (_, plan) = bed.mesh(&["apply", &file, "--preview"]);
    assert!(
        plan["openings"][0]["layers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["writes"] == json!(true) && l["layer"].as_str().unwrap().contains("host")),
        "the opening would be written in the found table: {plan:#}"
    );
    assert!(plan["guard"]["in_force"] == json!(false), "{plan:#}");
    let (code, first) = bed.preview_then_act(&["apply", &file], &["apply", &file, "--preview"]);
    assert_eq!(code, 4);
    let want = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        first,
        want(&[
            ("web/app", "created"),
            ("web/conf", "created"),
            ("web/dir", "created"),
            ("web/found", "held"),
            ("web/init", "changed"),
            ("web/open", "created"),
            ("web/pkg", "created"),
            ("web/svc", "changed"),
        ])
    );
    // Nothing left to do: the reconcile's preview says so, exit 0.
    let (code, again) = bed.preview_then_act(&["reconcile"], &["reconcile", "--preview"]);
    assert_eq!(code, 0);
    assert!(
        again.iter().all(|(_, o)| o == "unchanged" || o == "held"),
        "{again:?}"
    );
    // Drift: the file rewritten, the service stopped; the preview sees both.
    bed.node.write("/etc/web.conf", "drifted\n");
    std::fs::write(
        bed.stub.path().join("units/web.service"),
        "active=inactive\nenabled=enabled\n",
    )
    .unwrap();
    let (code, drift) = bed.preview_then_act(&["reconcile"], &["reconcile", "--preview"]);
    assert_eq!(code, 4);
    assert_eq!(
        (drift["web/conf"].as_str(), drift["web/svc"].as_str()),
        ("changed", "changed")
    );
    // Taking the module: the found file is replaced, as previewed.
    let (code, taken) = bed.preview_then_act(&["take", "web"], &["take", "web", "--preview"]);
    assert_eq!(code, 4);
    assert_eq!(taken["web/found"], "changed");
    // Converged, then back to adopted: the return's preview says what the return then does.
    let (code, flip) = bed.mesh(&["converge"]);
    assert_eq!(code, 0, "{flip:#}");
    let (code, back) = bed.preview_then_act(&["adopt"], &["adopt", "--preview"]);
    assert_eq!(code, 4, "{back:?}");
    // Back where it was: nothing pending.
    let (code, after) = bed.preview_then_act(&["reconcile"], &["reconcile", "--preview"]);
    assert_eq!(code, 0, "{after:?}");
    let _ = std::fs::remove_file(&file);
}

#[test]
fn refusals_are_json_with_their_exit_code_and_the_briefing_before_any_apply_is_empty() {
    let node = Node::new();
    let r = node.run(&["briefing", "--json"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let none = r.json();
    assert_eq!(
        (&none["outcome"], &none["lines"], &none["status"]),
        (&json!(null), &json!([]), &json!("ok")),
        "{none:#}"
    );
    let r = node.run(&["reconcile", "--json"]);
    assert_eq!(r.code, Some(2));
    assert_eq!(r.json()["refused"]["exit_code"], json!(2), "{}", r.stdout);
    let r = node.run(&["take", "web", "--preview", "--json"]);
    assert_eq!(r.code, Some(3));
    assert_eq!(r.json()["refused"]["exit_code"], json!(3));
    let r = node.apply_env(&json!({"node": "n1"}), &["--preview"], &[]);
    assert_eq!(r.code, Some(2));
    assert!(!r.json()["refused"]["problems"]
        .as_array()
        .unwrap()
        .is_empty());
    let r = node.run(&["version", "--json"]);
    assert_eq!(r.code, Some(0));
    assert_eq!(r.json()["version"], json!(env!("CARGO_PKG_VERSION")));
    let r = node.run(&["adopt", "--preview", "--json"]);
    assert_eq!(r.code, Some(3));
    assert_eq!(r.json()["refused"]["exit_code"], json!(3));
    // Genesis previewed: checked as genesis checks, its plan shown, nothing written.
    let r = node.run(&[
        "genesis",
        "--adopted",
        "--node",
        "n1",
        "--preview",
        "--json",
    ]);
    assert_eq!(r.code, Some(4), "{}\n{}", r.stdout, r.stderr);
    let plan = r.json();
    assert_eq!(
        (plan["act"].as_str(), plan["pending"].as_bool()),
        (Some("genesis"), Some(true))
    );
    assert_eq!(plan["entries"][0]["outcome"], "created", "{plan:#}");
    assert!(
        node.snapshot().is_empty(),
        "genesis --preview wrote under the root"
    );
    // A bad IPv6 private range is refused before anything is checked (exit 2), each named.
    for (bad, why) in [
        ("10.78.0.0/24", "is not an IPv6 network"),
        ("fd77::1/64", "has host bits set"),
    ] {
        let r = node.run(&[
            "genesis",
            "--adopted",
            "--node",
            "n1",
            "--private-range-v6",
            bad,
            "--preview",
            "--json",
        ]);
        assert_eq!(r.code, Some(2), "{bad}: {}\n{}", r.stdout, r.stderr);
        let problems = r.json()["refused"]["problems"].to_string();
        assert!(
            problems.contains("--private-range-v6") && problems.contains(why),
            "{bad}: {problems}"
        );
    }
    let r = node.run(&["enrol", "--token", "nonsense", "--json"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert_eq!(r.json()["refused"]["exit_code"], json!(2));
}

/// A package install that takes five seconds: said on stderr while it runs (what and how long)
/// and when it ends, never on stdout, where `--json` stays one document.
#[test]
fn a_slow_install_is_said_while_it_runs_and_never_on_json_stdout() {
    let node = Node::new();
    let stub = tempfile::tempdir().unwrap();
    write_exe(
        &stub.path().join("bin/apt-get"),
        &format!(
            "#!/bin/sh\nsleep 5\n{}",
            APT_GET.trim_start_matches("#!/bin/sh\n")
        ),
    );
    write_exe(&stub.path().join("bin/dpkg-query"), DPKG_QUERY);
    let path = format!(
        "{}:{}",
        stub.path().join("bin").display(),
        std::env::var("PATH").unwrap()
    );
    let d = json!({"version": 1, "node": "n1", "mode": "converged", "resources": [
        {"id": "fun/sl", "module": "fun", "type": "package", "name": "sl"}]});
    let r = node.apply_env(
        &d,
        &[],
        &[
            ("PATH", &path),
            ("STUB", stub.path().to_str().unwrap()),
            ("RUST_LOG", mesh_host::logging::DEFAULT_FILTER),
        ],
    );
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.outcome("fun/sl"), "created");
    let running = r
        .stderr
        .lines()
        .find(|l| l.contains("apt-get install sl: still running after 3 s"));
    assert!(running.is_some(), "no progress line:\n{}", r.stderr);
    assert!(
        r.stderr
            .lines()
            .any(|l| l.contains("apt-get install sl: finished after ")),
        "no end line:\n{}",
        r.stderr
    );
    assert!(!r.stdout.contains("still running"), "{}", r.stdout);
}
