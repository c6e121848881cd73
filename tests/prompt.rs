//! What an operator meets at the prompt, against the built binary: a user other than root told
//! so before anything is read, a mistyped command offered the right one, a reader that goes away
//! (`| head`) ending a listing quietly with 0 and an act with 141 and a word, a missing
//! declaration refused as bad input, `converge --preview` answering as every preview, and a held
//! resource in no module worded as what it is.

use crate::util::Node;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

const MESH: &str = env!("CARGO_BIN_EXE_mesh-host");

fn decl(mode: &str, resources: Value) -> Value {
    crate::util::workstation(mode, &[], resources)
}

/// A user other than root: every command but `version` and `generate` is refused at once with
/// exit 2 and the reason, as JSON under `--json`, and the root it was pointed at is not read.
#[test]
fn a_user_other_than_root_is_told_mesh_host_must_run_as_root() {
    // The binary and a root where the unprivileged user can reach them.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("mesh-host");
    std::fs::copy(MESH, &bin).unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args([
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                "--",
            ])
            .arg(&bin)
            .arg("--root")
            .arg(&root)
            .args(args)
            .output()
            .expect("setpriv (util-linux)")
    };
    for args in [
        &["briefing", "--json"][..],
        &["reconcile", "--preview", "--json"],
        &["genesis", "--preview", "--json"],
    ] {
        let out = as_nobody(args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stdout}");
        let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
        assert_eq!(v["refused"]["exit_code"], 2, "{v:#}");
        let problems = v["refused"]["problems"].to_string();
        assert!(
            problems.contains("mesh-host must run as root") && problems.contains("uid 65534"),
            "{v:#}"
        );
    }
    let out = as_nobody(&["briefing"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("mesh-host must run as root"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_dir(&root).unwrap().count(),
        0,
        "the root was written"
    );
    // What needs no store works as anyone.
    assert!(as_nobody(&["version"]).status.success());
}

#[test]
fn a_mistyped_command_is_offered_the_one_it_resembles() {
    let out = Command::new(MESH).arg("aply").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("similar subcommand exists: 'apply'"),
        "{stderr}"
    );
}

/// Runs `mesh-host ARGS…` in a network namespace of its own with its standard output a pipe
/// whose reading end is already closed: every write to it fails with EPIPE.
fn with_stdout_closed(root: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = nix::unistd::pipe().unwrap();
    drop(reader);
    let out = Command::new("unshare")
        .args(["--net", "--"])
        .arg(MESH)
        .arg("--root")
        .arg(root)
        .args(args)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_reader_gone_ends_a_listing_with_0_and_an_act_with_141_and_a_word_never_a_panic() {
    let node = Node::new();
    for args in [
        &["generate", "completions", "bash"][..],
        &["generate", "man"],
        &["version", "--json"],
        &["owned"],
    ] {
        let (code, stderr) = with_stdout_closed(node.root(), args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // An act goes to its end; its answer reached no one, and it says where the briefing is.
    let file = node.path("/d.json");
    let d = decl(
        "converged",
        json!([{"id": "f", "type": "file", "path": "/etc/f", "content": "x\n"}]),
    );
    std::fs::write(&file, serde_json::to_vec(&d).unwrap()).unwrap();
    let (code, stderr) = with_stdout_closed(node.root(), &["apply", file.to_str().unwrap()]);
    assert_eq!(code, Some(141), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains("`mesh-host briefing` says how it ended"),
        "{stderr}"
    );
    assert_eq!(
        node.read("/etc/f").as_deref(),
        Some("x\n"),
        "the act did its work"
    );
    let briefing = node.run(&["briefing", "--json"]).json();
    assert_eq!(briefing["outcome"], "ok", "{briefing:#}");
}

#[test]
fn a_declaration_that_does_not_exist_is_refused_with_exit_2() {
    let node = Node::new();
    let missing = node.path("/nowhere.json");
    let r = node.run(&["apply", missing.to_str().unwrap(), "--json"]);
    assert_eq!(r.code, Some(2), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.json()["refused"]["problems"]
            .to_string()
            .contains("does not exist"),
        "{}",
        r.stdout
    );
    assert!(
        !node.path("/var/lib/mesh-host").exists(),
        "a store was made"
    );
}

/// A held resource in no module is held until the node converges, and the briefing says that,
/// not "until module no module is taken".
#[test]
fn a_held_resource_in_no_module_is_said_to_be_held_until_the_node_converges() {
    let node = Node::with_private_network();
    node.write("/etc/motd", "the predecessor's\n");
    let r = node.apply(&decl(
        "adopted",
        json!([{"id": "motd", "type": "file", "path": "/etc/motd", "content": "the mesh's\n"}]),
    ));
    assert_eq!(r.outcome("motd"), "held");
    let briefing = node.run(&["briefing"]).stdout;
    assert!(
        briefing.contains("held as it is until the node converges"),
        "{briefing}"
    );
    assert!(!briefing.contains("no module is taken"), "{briefing}");
}

/// A found ruleset that drops every new connection but ssh's, as an operator's own firewall.
const DROPPING: &str = "table inet host {
	chain input {
		type filter hook input priority 0; policy drop;
		ct state established,related accept
		iif \"lo\" accept
		tcp dport 22 accept
	}
}
";

/// Runs `mesh-host --root ROOT ARGS…` in a network namespace of its own holding `DROPPING` and a
/// TCP listener on `port` on every address (busybox httpd, waited for in /proc/net/tcp to a
/// deadline), after `first` (another command run the same way, whose output must be success);
/// the whole run bounded by `timeout`.
fn behind_dropping_firewall(
    root: &std::path::Path,
    port: u16,
    first: Option<&[&str]>,
    args: &[&str],
) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let ruleset = dir.path().join("found.nft");
    std::fs::write(&ruleset, DROPPING).unwrap();
    const SCRIPT: &str = r#"
ip link set lo up
nft -f "$RULESET"
busybox httpd -f -p "0.0.0.0:$PORT" -h "$WWW" & httpd=$!
trap 'kill $httpd' EXIT
hex=$(printf '%04X' "$PORT")
i=0
until grep -q "^ *[0-9]*: 00000000:$hex 00000000:0000 0A" /proc/net/tcp; do
  i=$((i+1)); [ $i -lt 250 ] || { echo "no listener on $PORT after 5 s" >&2; exit 99; }
  sleep 0.02
done
if [ -n "$FIRST" ]; then
  eval "set -- $FIRST"; "$MESH" --root "$ROOT" "$@" > /dev/null || { echo "first command failed" >&2; exit 98; }
fi
shift $#
"$MESH" --root "$ROOT" $ARGS
"#;
    let quote = |a: &[&str]| {
        a.iter()
            .map(|s| format!("'{}'", s.replace('\'', "'\\''")))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let out = Command::new("timeout")
        .args(["120", "unshare", "--net", "--", "sh", "-ec", SCRIPT])
        .env("RULESET", &ruleset)
        .env("PORT", port.to_string())
        .env("WWW", dir.path())
        .env("MESH", MESH)
        .env("ROOT", root)
        .env("FIRST", first.map(quote).unwrap_or_default())
        .env("ARGS", args.join(" "))
        .env(crate::util::HOST_TOOLS, "1")
        .output()
        .expect("timeout, unshare, sh, nft and busybox (busybox-static)");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// genesis --preview on a machine whose own firewall closes the registry's port to everyone: the
/// derived filter admits it from anywhere, so the preview says it opens, not that it is kept.
#[test]
fn genesis_preview_says_a_port_the_found_firewall_closes_and_the_filter_admits_opens() {
    let node = Node::new();
    let (code, stdout, stderr) = behind_dropping_firewall(
        node.root(),
        5000,
        None,
        &["genesis", "--node", "n1", "--preview", "--json"],
    );
    // A listener on the registry's port is in use: genesis would refuse, and says each fate.
    assert_eq!(code, Some(3), "{stdout}\n{stderr}");
    let plan = crate::util::contract(&stdout);
    let registry = plan["filter"]["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["listener"].as_str().unwrap().contains(":5000 "))
        .unwrap_or_else(|| panic!("no listener on 5000: {plan:#}"))
        .clone();
    assert_eq!(registry["fate"], "opens", "{registry:#}");
    assert_eq!(
        registry["why"],
        "the found firewall closes it now; opening registry/port admits it from anywhere",
        "{registry:#}"
    );
    let (_, text, _) = behind_dropping_firewall(
        node.root(),
        5000,
        None,
        &["genesis", "--node", "n1", "--preview"],
    );
    assert!(
        text.lines().any(|l| l.starts_with("  opens ")
            && l.contains(":5000 ")
            && l.ends_with(
                "the found firewall closes it now; opening registry/port admits it from anywhere"
            )),
        "{text}"
    );
    assert!(!text.contains("kept      tcp 0.0.0.0:5000"), "{text}");
}

/// converge --preview on an adopted node whose found firewall already closes a listener that no
/// opening admits: its line says it stays closed, and the closing count agrees (none closes).
#[test]
fn converge_preview_counts_a_port_closed_now_as_staying_closed_not_closing() {
    let node = Node::new();
    let file = node.path("/adopted.json");
    node.write("/etc/web.conf", "found\n");
    // No private network: the guard and the flip need none, and an adopted apply that declares
    // one whose interface is missing says so (exit 5).
    let d = json!({"version": 1, "node": "n1", "mode": "adopted",
        "settings": {"ports": {"store": 5432, "bus": 5672, "broker_management": 15672,
                               "registry": 5000, "hub": 51820}},
        "resources": [{"id": "web/conf", "module": "web", "type": "file",
                       "path": "/etc/web.conf", "content": "declared\n"}]});
    std::fs::write(&file, serde_json::to_vec(&d).unwrap()).unwrap();
    let apply = ["apply", file.to_str().unwrap()];
    let (code, stdout, stderr) =
        behind_dropping_firewall(node.root(), 8081, Some(&apply), &["converge", "--preview"]);
    assert_eq!(code, Some(4), "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.contains("0.0.0.0:8081"))
        .unwrap_or_else(|| panic!("no line for the listener:\n{stdout}"));
    assert!(line.ends_with("stays closed"), "{line}");
    assert!(
        stdout.contains(
            "the flip would go ahead (no port reached now closes; 1 port closed now stays closed)"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("would close)"), "{stdout}");
    assert!(
        stdout.contains("Plan: ") && stdout.contains("; the flip to the derived filter."),
        "{stdout}"
    );
    // The same preview as JSON: a plan like every preview's, the flip's account beside it.
    let (code, stdout, stderr) = behind_dropping_firewall(
        node.root(),
        8081,
        None,
        &["converge", "--preview", "--json"],
    );
    assert_eq!(code, Some(4), "{stdout}\n{stderr}");
    let plan = crate::util::contract(&stdout);
    assert_eq!(
        (
            plan["document"].as_str(),
            plan["act"].as_str(),
            plan["status"].as_str()
        ),
        (Some("plan"), Some("converge"), Some("changes"))
    );
    let reach = plan["listening"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["port"] == 8081)
        .unwrap_or_else(|| panic!("{plan:#}"))
        .clone();
    assert_eq!(
        (reach["now"].as_str(), reach["change"].as_str()),
        (Some("nowhere"), Some("stays closed"))
    );
    assert_eq!(
        plan["summary"]["change"], 1,
        "the held file is replaced: {plan:#}"
    );
    assert_eq!(
        plan["entries"][0]["diff"],
        json!([
            "--- /etc/web.conf (now)",
            "+++ /etc/web.conf (declared)",
            "@@ -1,1 +1,1 @@",
            "-found",
            "+declared"
        ]),
        "{plan:#}"
    );
}

/// Every command that answers in JSON, run with `--json` against a node of its own: each prints
/// one document of the contract (`docs/json/schema.json`, checked by `Run::json`), whose status
/// and exit_code agree with the process's exit code; a mistyped command and a missing argument
/// are refusal documents too, with clap's own words still on stderr.
#[test]
fn every_command_prints_one_document_of_the_json_contract() {
    let node = Node::new();
    node.write("/etc/found.conf", "found\n");
    let file = node.path("/d.json");
    let d = json!({"version": 1, "node": "n1", "mode": "adopted",
        "settings": {"ports": {"store": 5432, "bus": 5672, "broker_management": 15672,
                               "registry": 5000, "hub": 51820}},
        "resources": [
            {"id": "web/conf", "module": "web", "type": "file", "path": "/etc/found.conf",
             "content": "declared\n"},
            {"id": "web/dir", "module": "web", "type": "directory", "path": "/srv/web"}]});
    std::fs::write(&file, serde_json::to_vec(&d).unwrap()).unwrap();
    let decl = file.to_str().unwrap();
    let mut kinds = std::collections::BTreeSet::new();
    let status = |code: i32| match code {
        0 => "ok",
        1 => "failed",
        2 | 3 | 6 => "refused",
        4 => "changes",
        5 => "not_in_force",
        7 => "disagrees",
        _ => "interrupted",
    };
    for (args, want) in [
        (&["version", "--json"][..], 0),
        (&["briefing", "--json"], 0),
        (&["reconcile", "--json"], 2),
        (&["apply", decl, "--preview", "--json"], 4),
        (&["apply", decl, "--json"], 0),
        // Each run has a network namespace of its own: the guard's table is never there yet.
        (&["reconcile", "--preview", "--json"], 4),
        (&["reconcile", "--json"], 0),
        (&["take", "web", "--preview", "--json"], 4),
        (&["converge", "--preview", "--json"], 4),
        (&["adopt", "--preview", "--json"], 3),
        (&["release", "--preview", "--json"], 4),
        (&["owned", "--json"], 0),
        (&["briefing", "--json"], 0),
        (&["openings", "derive", "--json"], 0),
        (&["firewall", "status", "--json"], 0),
        (&["firewall", "explain", "22", "--json"], 0),
        (&["inventory", "--json"], 0),
        (&["profile", "--json"], 0),
        (&["genesis", "--node", "n1", "--preview", "--json"], 3),
        (&["enrol", "--token", "nonsense", "--json"], 2),
        (&["aply", "--json"], 2),
        (&["apply", "--json"], 2),
        (&["release", "--json"], 0),
    ] {
        let r = node.run(args);
        assert_eq!(r.code, Some(want), "{args:?}:\n{}\n{}", r.stdout, r.stderr);
        let v = r.json();
        assert_eq!(
            (v["exit_code"].as_i64(), v["status"].as_str()),
            (Some(i64::from(want)), Some(status(want))),
            "{args:?}: {v:#}"
        );
        kinds.insert(v["document"].as_str().unwrap().to_string());
    }
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            "briefing",
            "firewall_explain",
            "firewall_status",
            "inventory",
            "openings",
            "owned",
            "plan",
            "profile",
            "refused",
            "release",
            "report",
            "version"
        ]
    );
    // clap's words stay on stderr beside the document.
    let r = node.run(&["aply", "--json"]);
    assert!(
        r.stderr.contains("similar subcommand exists: 'apply'"),
        "{}",
        r.stderr
    );
    // An error that ended a command is a document too (kind error, exit 1).
    node.apply(&json!({"version": 1, "node": "n1", "mode": "converged", "resources": []}));
    std::fs::write(node.path("/var/lib/mesh-host/state.json"), "garbage").unwrap();
    let r = node.run(&["reconcile", "--json"]);
    assert_eq!(r.code, Some(1), "{}\n{}", r.stdout, r.stderr);
    let v = r.json();
    assert_eq!(
        (v["document"].as_str(), v["status"].as_str()),
        (Some("error"), Some("failed"))
    );
}
