//! What an operator meets at the prompt, against the built binary: a user other than root told
//! so before anything is read, a mistyped command offered the right one, a reader that goes away
//! (`| head`) ending a listing quietly with 0 and an act with 141 and a word, a missing
//! declaration refused as bad input, `converge --preview` answering as every preview, and a held
//! resource in no module worded as what it is; the previews behind a dropping firewall in
//! `prompt/preview.rs`, what an act says while it runs in `prompt/acts.rs`.

use crate::util::Node;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

mod acts;
mod preview;

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
        &["link", "status"],
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
