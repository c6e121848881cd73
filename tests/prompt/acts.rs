//! What an act says while it runs and around it: its lines reaching a pipe as each resource is
//! done (even when interrupted, even to a reader that does not read), its count on a terminal, the
//! lock it waits for, a lost store, a token file others can read, and derived openings pasted back.

use super::*;

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
