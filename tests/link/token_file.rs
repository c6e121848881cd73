//! `mesh-host enrol --token-file`: the token read from a file or standard input never appears
//! in the process's command line (what `ps` shows every user), where `--token` puts it; and a
//! missing or empty file, or both flags, is refused with exit 2 and nothing stored.

use super::{bed, bin, root};
use std::io::Write as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Runs `command` to its end, reading `/proc/PID/cmdline` of it all the while (as `ps` does);
/// returns every distinct command line seen and the output.
fn watched(mut command: std::process::Command, stdin: Option<&str>) -> (Vec<String>, String) {
    command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let cmdline = format!("/proc/{}/cmdline", child.id());
    let mut seen: Vec<String> = Vec::new();
    let look = |seen: &mut Vec<String>| {
        if let Ok(b) = std::fs::read(&cmdline) {
            let line = String::from_utf8_lossy(&b).replace('\0', " ");
            if !line.is_empty() && !seen.contains(&line) {
                seen.push(line);
            }
        }
    };
    look(&mut seen);
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        look(&mut seen);
        pipe.write_all(text.as_bytes()).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "enrol did not end");
        look(&mut seen);
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (seen, text)
}

#[test]
fn the_token_from_a_file_or_standard_input_never_appears_in_the_command_line() {
    let bed = bed();
    let mut ctl = bed.controller();
    for (n, how) in ["file", "stdin", "argument"].iter().enumerate() {
        let node = format!("token-{how}");
        let (_d, r) = root();
        let issued = ctl.issue(&node, Duration::from_secs(600)).unwrap();
        let file = r.with_file_name("token");
        std::fs::write(&file, format!("{}\n", issued.text)).unwrap();
        let mut argv = vec![
            bin(),
            "--root".into(),
            r.display().to_string(),
            "enrol".into(),
        ];
        let stdin = match *how {
            "file" => {
                argv.extend(["--token-file".into(), file.display().to_string()]);
                None
            }
            "stdin" => {
                argv.extend(["--token-file".into(), "-".into()]);
                Some(issued.text.as_str())
            }
            _ => {
                argv.extend(["--token".into(), issued.text.clone()]);
                None
            }
        };
        let (seen, out) = watched(bed.node.command(&argv), stdin);
        assert!(
            out.contains(&format!("enrolled as node {node}")),
            "{how}: {out}"
        );
        assert!(
            seen.iter().any(|l| l.contains("enrol")),
            "{how}: the command line was read while enrol ran: {seen:?}"
        );
        let shown = seen
            .iter()
            .any(|l| l.contains(&issued.text) || l.contains(&issued.token.secret));
        // The one way that shows it is the one the docs warn of: the probe sees what ps sees.
        assert_eq!(shown, *how == "argument", "{how} (case {n}): {seen:?}");
        assert_eq!(
            ctl.take_enrolments(Duration::from_secs(20)).unwrap().len(),
            1
        );
    }
}

#[test]
fn a_missing_or_empty_token_file_or_both_flags_is_refused_with_exit_2() {
    let (d, r) = root();
    let missing = d.path().join("no-such-token");
    let empty = d.path().join("empty");
    std::fs::write(&empty, " \n\t\n").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--token-file".into(), missing.display().to_string()],
            "no-such-token: No such file",
        ),
        (
            vec!["--token-file".into(), empty.display().to_string()],
            "is empty: it holds no token",
        ),
        (
            vec![
                "--token-file".into(),
                empty.display().to_string(),
                "--token".into(),
                "mesh1.x".into(),
            ],
            "cannot be used with",
        ),
        (vec![], "required"),
    ];
    for (args, reason) in cases {
        let out = std::process::Command::new(bin())
            .arg("--root")
            .arg(&r)
            .arg("enrol")
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(reason),
            "{args:?}: expected {reason:?} in {stderr}"
        );
        assert!(
            !r.join("var/lib/mesh-host").exists(),
            "{args:?} stored something"
        );
    }
    // An empty standard input too.
    let out = std::process::Command::new(bin())
        .args(["--root", r.to_str().unwrap(), "enrol", "--token-file", "-"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("standard input is empty"), "{stderr}");
}
