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

/// `n` files under /etc/many, each its own resource.
fn many_files(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"id": format!("f{i}"), "type": "file", "path": format!("/etc/many/f{i}"), "content": "x\n"}))
        .collect()
}

/// A SIGINT into a 2,000-file apply whose standard output is a pipe: the lines of what was done
/// reach the reader as each resource is done (the first before the signal is sent), and every
/// file the act wrote has its line there when the act ends.
#[test]
fn an_interrupted_apply_into_a_pipe_has_delivered_the_lines_of_what_was_done() {
    use std::io::BufRead as _;
    let node = Node::new();
    let file = node.path("/d.json");
    let d = decl("converged", Value::Array(many_files(2000)));
    std::fs::write(&file, serde_json::to_vec(&d).unwrap()).unwrap();
    let started = std::time::Instant::now();
    let mut child = Command::new("unshare")
        .args(["--net", "--"])
        .arg(MESH)
        .arg("--root")
        .arg(node.root())
        .args(["apply", file.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader: every line with the moment it arrived.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send((std::time::Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    // 0.7 s in, and not before the first line came (a line only at the end fails below).
    let first = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("no line reached the pipe within 60 s");
    let wait = std::time::Duration::from_millis(700).saturating_sub(started.elapsed());
    std::thread::sleep(wait);
    let signalled = std::time::Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the apply did not end"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    reader.join().unwrap();
    let mut lines = vec![first];
    lines.extend(rx.try_iter());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    let created: Vec<&String> = lines
        .iter()
        .map(|(_, l)| l)
        .filter(|l| l.starts_with("created ") && l.contains("/etc/many/f"))
        .collect();
    let written = std::fs::read_dir(node.path("/etc/many")).unwrap().count();
    assert!(
        written > 0 && written < 2000,
        "{written} files: the signal did not stop the act part-way"
    );
    assert_eq!(created.len(), written, "a line for each file written");
    assert!(
        lines.iter().any(|(at, _)| *at < signalled),
        "no line reached the reader before the signal"
    );
    // The report's end follows the lines, which are not printed twice.
    let text: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
    assert!(
        text.iter().any(|l| l.contains("interrupted by SIGINT")),
        "{}",
        text[text.len().saturating_sub(5)..].join("\n")
    );
    assert_eq!(
        text.iter().filter(|l| l.contains("/etc/many/f0:")).count(),
        1,
        "a line said twice"
    );
}

/// Files, an action that sleeps past the counter's threshold, then files again: what the act
/// says on standard error.
fn slow_act(node: &Node) -> std::path::PathBuf {
    let mut resources = many_files(3);
    resources.push(json!({"id": "pause", "type": "action",
        "run": ["sh", "-c", "sleep 2.5; touch \"$MESH_HOST_ROOT/paused\""],
        "verify": ["sh", "-c", "test -e \"$MESH_HOST_ROOT/paused\""]}));
    resources.extend(
        (3..6).map(|i| json!({"id": format!("f{i}"), "type": "file", "path": format!("/etc/many/f{i}"), "content": "x\n"})),
    );
    let file = node.path("/d.json");
    let d = decl("converged", Value::Array(resources));
    std::fs::write(&file, serde_json::to_vec(&d).unwrap()).unwrap();
    file
}

/// On a terminal an act past 2 s draws `N/M resources` on standard error (wiped at its end);
/// into a pipe it draws nothing, and its lines alone are said.
#[test]
fn an_act_past_two_seconds_counts_its_resources_on_a_terminal_and_not_into_a_pipe() {
    // A terminal: `script` gives the command a pty for standard error; standard output is a file.
    let node = Node::new();
    let file = slow_act(&node);
    let out = node.root().with_extension("out");
    let command = format!(
        "unshare --net -- '{MESH}' --root '{}' apply '{}' > '{}'",
        node.root().display(),
        file.display(),
        out.display()
    );
    let tty = Command::new("timeout")
        .args(["60", "script", "-qec", &command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("script (util-linux)");
    let terminal = String::from_utf8_lossy(&tty.stdout);
    assert_eq!(tty.status.code(), Some(0), "{terminal}");
    // Drawn while the action sleeps past 2 s, its three files done before it.
    assert!(terminal.contains("3/7 resources"), "{terminal:?}");
    assert!(
        terminal.ends_with("\r\x1b[K"),
        "the counter was not wiped: {terminal:?}"
    );
    let lines = std::fs::read_to_string(&out).unwrap();
    assert!(
        lines.contains("created") && !lines.contains(" resources"),
        "{lines}"
    );
    assert!(node.read("/etc/many/f5").is_some());

    // A pipe: the same act counts nothing.
    let node = Node::new();
    let file = slow_act(&node);
    let r = node.run(&["apply", file.to_str().unwrap()]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(!r.stderr.contains("resources"), "{:?}", r.stderr);
    assert!(!r.stderr.contains('\r'), "{:?}", r.stderr);
    assert_eq!(
        r.stdout
            .lines()
            .filter(|l| l.starts_with("created"))
            .count(),
        6,
        "{}",
        r.stdout
    );
}

/// A token file that its group or others can read is used, with a warning that names it.
#[test]
fn a_token_file_others_can_read_is_warned_of() {
    let node = Node::new();
    let token = node.path("/token");
    std::fs::write(&token, "not-a-token\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let r = node.run(&["enrol", "--token-file", token.to_str().unwrap()]);
    // Refused as a token (it is none), after the word about its mode.
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "token file {} can be read by its group and every user (mode 0644)",
            token.display()
        )),
        "{}",
        r.stderr
    );
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let r = node.run(&["enrol", "--token-file", token.to_str().unwrap()]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(!r.stderr.contains("can be read by"), "{}", r.stderr);
}

/// A second apply that finds the store's lock taken says whose it is before it waits: the pid
/// the kernel gives, the holder's command and when it began.
#[test]
fn a_second_apply_says_whose_lock_it_waits_for() {
    let node = Node::new();
    // The first apply holds the store while its action waits for `go` (at most 60 s).
    let first = node.path("/first.json");
    let d = decl(
        "converged",
        json!([{"id": "hold", "type": "action",
            "run": ["sh", "-c", "for i in $(seq 600); do [ -e \"$MESH_HOST_ROOT/go\" ] && break; sleep 0.1; done; touch \"$MESH_HOST_ROOT/held\""],
            "verify": ["sh", "-c", "test -e \"$MESH_HOST_ROOT/held\""]}]),
    );
    std::fs::write(&first, serde_json::to_vec(&d).unwrap()).unwrap();
    let spawn = |file: &std::path::Path, err: &std::path::Path| {
        Command::new("unshare")
            .args(["--net", "--"])
            .arg(MESH)
            .arg("--root")
            .arg(node.root())
            .args(["apply", file.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(err).unwrap())
            .spawn()
            .unwrap()
    };
    let first_err = node.root().with_extension("first.err");
    let mut holder = spawn(&first, &first_err);
    // Once the action runs, the store is held.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !std::fs::read_to_string(node.path("/var/lib/mesh-host/lock"))
        .is_ok_and(|t| t.starts_with(&format!("{} ", holder.id())))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the first apply never held the store"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let second_err = node.root().with_extension("second.err");
    let mut waiter = spawn(&first, &second_err);
    let said = format!(
        "waiting for the lock held by pid {} (apply since ",
        holder.id()
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !std::fs::read_to_string(&second_err)
        .unwrap()
        .contains(&said)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the waiter said: {}",
            std::fs::read_to_string(&second_err).unwrap()
        );
        assert!(
            waiter.try_wait().unwrap().is_none(),
            "the second apply did not wait"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let text = std::fs::read_to_string(&second_err).unwrap();
    assert!(
        text.contains(" UTC, ") && text.contains(" s ago) on store "),
        "{text}"
    );
    node.write("/go", "");
    let within = |child: &mut std::process::Child| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            assert!(std::time::Instant::now() < deadline, "an apply did not end");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    assert!(
        within(&mut holder).success(),
        "{}",
        std::fs::read_to_string(&first_err).unwrap()
    );
    assert!(
        within(&mut waiter).success(),
        "{}",
        std::fs::read_to_string(&second_err).unwrap()
    );
    // Let go, the lock file names no holder (its slot blanked, its block kept).
    let left = node.read("/var/lib/mesh-host/lock").unwrap_or_default();
    assert!(left.trim().is_empty(), "{left:?}");
}

/// A store lost (its state.json gone, an earlier store's files beside it) is said as lost by
/// every command that reads it, never passed off as a node never applied; the apply that
/// rebuilds it warns, and its briefing says so.
#[test]
fn a_lost_store_is_said_loudly_until_an_apply_rebuilds_it() {
    let node = Node::new();
    let d = decl(
        "converged",
        json!([{"id": "f", "type": "file", "path": "/etc/f", "content": "x\n"}]),
    );
    node.apply(&d);
    // Before anything was applied: nothing said of a loss.
    let fresh = Node::new();
    let r = fresh.run(&["owned"]);
    assert!(
        r.stdout.contains("nothing applied yet") && !r.stderr.contains("lost"),
        "{r:?}"
    );

    std::fs::remove_file(node.path("/var/lib/mesh-host/state.json")).unwrap();
    let r = node.run(&["owned"]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(
        r.stderr.contains("WARN") && r.stderr.contains("was lost"),
        "{}",
        r.stderr
    );
    assert!(r.stdout.contains("store lost"), "{}", r.stdout);
    assert!(!r.stdout.contains("nothing applied yet"), "{}", r.stdout);
    let r = node.run(&["briefing"]);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(r.stderr.contains("was lost"), "{}", r.stderr);
    let r = node.run(&["reconcile", "--json"]);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(
        r.json()["refused"]["problems"]
            .to_string()
            .contains("was lost"),
        "{}",
        r.stdout
    );

    let r = node.apply(&d);
    assert!(
        r.stderr.contains("was lost") && r.stderr.contains("rebuilding it"),
        "{}",
        r.stderr
    );
    let briefing = node.run(&["briefing"]);
    assert!(
        briefing.stdout.contains("rebuilt: state.json was missing"),
        "{}",
        briefing.stdout
    );
    let r = node.run(&["owned"]);
    assert!(
        !r.stderr.contains("lost") && !r.stdout.contains("lost"),
        "{r:?}"
    );
}

/// `openings derive --json` gives each opening once, and what it gives, pasted into a
/// declaration, is accepted: the round trip an operator makes.
#[test]
fn derived_openings_pasted_into_a_declaration_are_accepted() {
    let node = Node::new();
    let r = node.run(&["openings", "derive", "--json"]);
    assert_eq!(r.code, Some(0), "{r:?}");
    // The document's `openings` list is what an operator pastes (docs/json.md).
    let derived = r.json()["openings"].clone();
    let list = derived.as_array().expect("a list of resources");
    let ids: Vec<&str> = list.iter().map(|o| o["id"].as_str().unwrap()).collect();
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "an id given twice: {ids:?}");
    assert!(ids.len() >= 5, "the foundation's openings: {ids:?}");
    for mode in ["adopted", "converged"] {
        let file = node.path(&format!("/{mode}.json"));
        std::fs::write(
            &file,
            serde_json::to_vec(&decl(mode, derived.clone())).unwrap(),
        )
        .unwrap();
        let r = node.run(&["apply", file.to_str().unwrap(), "--preview", "--json"]);
        assert!(
            matches!(r.code, Some(0 | 4)),
            "{mode}: refused ({:?}): {}\n{}",
            r.code,
            r.stdout,
            r.stderr
        );
        assert!(r.json().get("refused").is_none(), "{}", r.stdout);
    }
}

/// A reader that does not read yet (`| less` on its first page) holds the lines, never the act:
/// a 2,000-file apply into a pipe nobody reads writes every file and lets the store's lock go,
/// and its lines are all there when the reader comes.
#[test]
fn a_reader_that_does_not_read_holds_the_lines_not_the_act() {
    use std::io::Read as _;
    let node = Node::new();
    let file = node.path("/d.json");
    let d = decl("converged", Value::Array(many_files(2000)));
    std::fs::write(&file, serde_json::to_vec(&d).unwrap()).unwrap();
    let mut child = Command::new("unshare")
        .args(["--net", "--"])
        .arg(MESH)
        .arg("--root")
        .arg(node.root())
        .args(["apply", file.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // 2,000 lines are well past a pipe's 64 KiB: written in the act, they would stop it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let lock = node.path("/var/lib/mesh-host/lock");
    loop {
        let written = std::fs::read_dir(node.path("/etc/many")).map_or(0, |d| d.count());
        let let_go =
            written == 2000 && std::fs::read_to_string(&lock).is_ok_and(|t| t.trim().is_empty());
        if let_go {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the act did not end while its reader did not read ({written} files written)"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(
        out.lines().filter(|l| l.starts_with("created ")).count(),
        2000
    );
    assert!(
        out.lines()
            .last()
            .is_some_and(|l| l.starts_with("outcome ")),
        "{out}"
    );
}
