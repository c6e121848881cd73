//! The runner against real processes: deadlines over input, output and waiting, the process group
//! killed, statuses, environment and working directory; the kinds of call and their deadlines.

use super::*;
use std::cell::RefCell;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

fn sh(script: &str) -> Vec<String> {
    argv(&["sh", "-c", script])
}

/// The pids of the processes whose command line is exactly `line`.
fn running(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let words: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|w| !w.is_empty())
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        if words.join(" ") == line {
            found.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

/// Whether every process whose command line is `line` is gone within a second: a SIGKILL is
/// delivered at once but the process dies when next scheduled, which on a loaded machine is a few
/// milliseconds later. A process that was not killed lives on for its whole `sleep`.
fn gone(line: &str) -> bool {
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        if running(line).is_empty() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn past_deadline(e: &io::Error) -> &PastDeadline {
    e.get_ref()
        .and_then(|e| e.downcast_ref::<PastDeadline>())
        .expect("a past-deadline error")
}

#[test]
fn a_grandchild_holding_stdout_ends_the_call_at_the_deadline_and_goes_with_the_group() {
    let started = Instant::now();
    let e = SystemRunner
        .run_within(
            &sh("echo printed; sleep 41 & exit 0"),
            Path::new("/"),
            &[],
            Duration::from_millis(400),
        )
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    assert_eq!(
        e.to_string(),
        "sh -c \"echo printed; sleep 41 & exit 0\" did not finish within 400 ms and was killed \
         (it had exited with status 0, but a process it started still held its output)"
    );
    assert!(gone("sleep 41"), "the grandchild outlived its group");
}

/// Runs `script` under `sh -c` within 500 ms, which it must outlast: the error, and the
/// command lines of what it left behind outside its group, sorted.
fn past_deadline_leaving(script: &str) -> (io::Error, Vec<String>) {
    let e = SystemRunner
        .run_within(&sh(script), Path::new("/"), &[], Duration::from_millis(500))
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    let mut commands: Vec<String> = past_deadline(&e)
        .left_behind
        .iter()
        .map(|l| l.command.clone())
        .collect();
    commands.sort();
    (e, commands)
}

#[test]
fn a_grandchild_that_left_the_group_with_setsid_is_killed_at_the_deadline_and_named() {
    let (e, commands) = past_deadline_leaving("setsid sh -c 'sleep 1044' & sleep 1045");
    let past = past_deadline(&e);
    // The new session's shell and its sleep (dash forks for a `-c` line's last command).
    assert_eq!(commands, ["sh -c sleep 1044", "sleep 1044"]);
    let named: Vec<String> = past
        .left_behind
        .iter()
        .map(|l| format!("pid {} ({})", l.pid, l.command))
        .collect();
    assert_eq!(
        e.to_string(),
        format!(
            "sh -c \"setsid sh -c 'sleep 1044' & sleep 1045\" did not finish within 500 ms and \
             was killed; killed 2 processes left behind: {}",
            named.join(", ")
        )
    );
    assert!(
        gone("sleep 1044"),
        "the setsid grandchild outlived the deadline"
    );
    assert!(gone("sleep 1045"));
}

#[test]
fn a_daemon_double_forked_out_of_an_ended_child_is_killed_at_the_deadline() {
    // The child ends at once; the daemon it left (its own session, handed to init) holds its
    // output, so the call waits to the deadline, and goes then, found by its mark.
    let (e, commands) = past_deadline_leaving("(setsid sh -c 'sleep 1046' &) ; exit 0");
    assert_eq!(
        past_deadline(&e).exited.as_deref(),
        Some("exited with status 0")
    );
    assert_eq!(commands, ["sh -c sleep 1046", "sleep 1046"]);
    assert!(gone("sleep 1046"), "the daemon outlived the deadline");
}

#[test]
fn a_daemon_started_by_a_child_that_ends_in_time_is_left_running() {
    // A service's start script daemonises on purpose: nothing is killed after a call that
    // ended within its deadline.
    let out = SystemRunner
        .run_within(
            &sh("setsid sh -c 'sleep 1047' </dev/null >/dev/null 2>&1 & exit 0"),
            Path::new("/"),
            &[],
            Duration::from_secs(5),
        )
        .unwrap();
    assert!(out.success());
    let until = Instant::now() + Duration::from_secs(5);
    while running("sleep 1047").is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    let pids = running("sleep 1047");
    assert_eq!(pids.len(), 1, "the daemon runs after the call: {pids:?}");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(running("sleep 1047"), pids, "and still runs");
    for pid in pids {
        // SAFETY: kill(2) of the test's own daemon, found by its command line just now.
        unsafe {
            libc::kill(pid.parse().unwrap(), libc::SIGKILL);
        }
    }
    assert!(gone("sleep 1047"));
}

#[test]
fn a_child_that_never_reads_a_large_input_is_killed_at_the_deadline() {
    let big = vec![b'x'; 4 << 20];
    let started = Instant::now();
    let e = SystemRunner
        .call(
            &Call::new(&argv(&["sleep", "42"]))
                .stdin(Some(&big))
                .within(Duration::from_millis(300)),
        )
        .unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    assert_eq!(past_deadline(&e).deadline, Duration::from_millis(300));
    assert_eq!(past_deadline(&e).exited, None);
    assert!(gone("sleep 42"));
}

#[test]
fn a_child_and_its_group_past_the_deadline_are_killed_and_its_stderr_kept() {
    let started = Instant::now();
    let e = SystemRunner
        .run_within(
            &sh("echo waiting >&2; sleep 43 & sleep 43"),
            Path::new("/"),
            &[],
            Duration::from_millis(300),
        )
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    let past = past_deadline(&e);
    assert_eq!(past.stderr, b"waiting\n");
    assert_eq!(
        past.status_text(),
        "did not finish within 300 ms and was killed"
    );
    assert!(gone("sleep 43"), "a process of the group outlived it");
}

#[test]
fn input_is_fed_and_output_read_in_full() {
    let input: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let out = SystemRunner
        .call(
            &Call::new(&sh("cat; head -c 2000000 /dev/zero >&2"))
                .stdin(Some(&input))
                .within(Duration::from_secs(20)),
        )
        .unwrap();
    assert!(out.success(), "{}", out.status_text());
    assert_eq!(out.stdout, input);
    // Stderr is kept as an excerpt: its two ends and the count of the bytes between.
    let elided = 2_000_000 - 2 * EXCERPT_BYTES;
    let marker = format!("\n… {elided} bytes elided …\n");
    assert_eq!(out.stderr.len(), 2 * EXCERPT_BYTES + marker.len());
    assert_eq!(
        &out.stderr[EXCERPT_BYTES..EXCERPT_BYTES + marker.len()],
        marker.as_bytes()
    );
}

/// Proves a child's output is read to its end but kept bounded: 256 MiB on each stream, kept as
/// 64 KiB at each end with the count of what was dropped, the last line of stderr reaching the
/// description cut to 200 characters, and a stdout read whole refused past its limit with the
/// count printed, once the child ended by itself.
#[test]
fn output_past_the_bound_is_drained_and_kept_as_its_ends() {
    const MIB: usize = 1 << 20;
    let script = "head -c 268435456 /dev/zero; head -c 268435456 /dev/zero >&2; \
                  printf 'started\nthe end of it %0300d\n' 0 >&2; exit 5";
    let out = SystemRunner
        .call(
            &Call::new(&sh(script))
                .excerpt()
                .within(Duration::from_secs(120)),
        )
        .unwrap();
    assert_eq!(out.code, Some(5));
    let elided = 256 * MIB - 2 * EXCERPT_BYTES;
    assert_eq!(
        out.stdout.len(),
        2 * EXCERPT_BYTES + format!("\n… {elided} bytes elided …\n").len()
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Stderr's tail ends with the two printf lines (323 bytes), so 323 more bytes were dropped.
    let said = format!("… {} bytes elided …", 256 * MIB + 323 - 2 * EXCERPT_BYTES);
    assert!(stderr.contains(&said), "no {said:?} in stderr");
    assert!(stderr.ends_with(&format!("started\nthe end of it {:0300}\n", 0)));
    let d = describe(&sh("x"), &out);
    let last = format!(
        "the end of it {}…",
        "0".repeat(200 - "the end of it ".len())
    );
    assert!(d.ends_with(&format!("elided … / started / {last}")), "{d}");
    assert!(d.len() < 1024, "{} bytes of description", d.len());

    let e = SystemRunner
        .call(
            &Call::new(&sh("head -c 100000000 /dev/zero; exit 0")).within(Duration::from_secs(60)),
        )
        .unwrap_err();
    let past = e
        .get_ref()
        .and_then(|e| e.downcast_ref::<PastLimit>())
        .expect("a past-limit error");
    assert_eq!((past.printed, past.limit), (100_000_000, WHOLE_LIMIT));
    assert_eq!(
        e.to_string(),
        format!(
            "sh -c \"head -c 100000000 /dev/zero; exit 0\" printed 100000000 bytes on stdout, \
             more than the {WHOLE_LIMIT} bytes read from it, and exited with status 0"
        )
    );
}

#[test]
fn a_child_that_exits_without_reading_its_input_is_judged_by_its_status() {
    let big = vec![b'x'; 4 << 20];
    let out = SystemRunner
        .call(&Call::new(&sh("exit 4")).stdin(Some(&big)))
        .unwrap();
    assert_eq!(out.code, Some(4));
}

#[test]
fn exit_codes_and_signals_are_reported() {
    let out = SystemRunner
        .run(&sh("echo out; echo err >&2; exit 3"), Path::new("/"), &[])
        .unwrap();
    assert_eq!((out.code, out.signal), (Some(3), None));
    assert_eq!(
        (out.stdout.as_slice(), out.stderr.as_slice()),
        (&b"out\n"[..], &b"err\n"[..])
    );
    assert_eq!(
        describe(&sh("exit 3"), &out),
        "sh -c \"exit 3\" exited with status 3: err"
    );

    let out = SystemRunner
        .run(&sh("kill -TERM $$"), Path::new("/"), &[])
        .unwrap();
    assert_eq!((out.code, out.signal), (None, Some(libc::SIGTERM)));
    assert_eq!(out.status_text(), "was killed by signal 15");
    assert!(!out.success());
}

#[test]
fn env_is_added_and_cwd_is_where_the_child_runs() {
    let dir = std::env::temp_dir();
    let out = SystemRunner
        .run(
            &sh("printf '%s %s %s' \"$RUN_TEST_A\" \"$RUN_TEST_B\" \"$(pwd -P)\"; test -n \"$PATH\""),
            &dir,
            &[("RUN_TEST_A", "one"), ("RUN_TEST_B", "two words")],
        )
        .unwrap();
    assert!(out.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let real = std::fs::canonicalize(&dir).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("one two words {}", real.display())
    );
}

#[test]
fn a_missing_program_is_the_spawn_error() {
    let e = SystemRunner
        .run(&argv(&["/nonexistent/program"]), Path::new("/"), &[])
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    let e = SystemRunner.run(&[], Path::new("/"), &[]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn a_quick_child_returns_quickly() {
    let started = Instant::now();
    for _ in 0..20 {
        assert!(SystemRunner
            .run(&argv(&["true"]), Path::new("/"), &[])
            .unwrap()
            .success());
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn each_kind_of_call_has_its_deadline() {
    let kind = |a: &[&str]| Kind::of(&argv(a));
    assert_eq!(
        kind(&["docker", "container", "inspect", "web"]),
        Kind::Query
    );
    assert_eq!(
        kind(&["podman", "network", "ls", "--format", "x"]),
        Kind::Query
    );
    assert_eq!(kind(&["docker", "ps", "--format", "x"]), Kind::Query);
    assert_eq!(kind(&["docker", "version", "--format", "x"]), Kind::Query);
    assert_eq!(
        kind(&["docker", "create", "--name", "web", "nginx"]),
        Kind::Container
    );
    assert_eq!(
        kind(&["docker", "network", "connect", "n", "web"]),
        Kind::Container
    );
    assert_eq!(
        kind(&["/usr/bin/podman", "rm", "-f", "web"]),
        Kind::Container
    );
    assert_eq!(
        kind(&["systemctl", "show", "-p", "LoadState", "x"]),
        Kind::Query
    );
    assert_eq!(kind(&["systemctl", "start", "nginx"]), Kind::Service);
    assert_eq!(kind(&["rc-service", "nginx", "status"]), Kind::Query);
    assert_eq!(kind(&["rc-service", "--exists", "nginx"]), Kind::Query);
    assert_eq!(kind(&["rc-service", "nginx", "start"]), Kind::Service);
    assert_eq!(kind(&["rc-update", "show"]), Kind::Query);
    assert_eq!(
        kind(&["rc-update", "add", "nginx", "default"]),
        Kind::Service
    );
    assert_eq!(kind(&["dpkg-query", "-W", "sl"]), Kind::Query);
    assert_eq!(kind(&["apt-get", "install", "-y", "sl"]), Kind::Package);
    assert_eq!(kind(&["pacman", "-Q", "nginx"]), Kind::Query);
    assert_eq!(
        kind(&["pacman", "-S", "--noconfirm", "nginx"]),
        Kind::Package
    );
    assert_eq!(kind(&["apk", "list", "--installed", "nginx"]), Kind::Query);
    assert_eq!(
        kind(&["apk", "add", "--no-progress", "nginx"]),
        Kind::Package
    );
    for program in [
        "nft",
        "iptables",
        "ip6tables",
        "/usr/sbin/iptables-nft",
        "iptables-legacy-save",
        "ip6tables-nft-restore",
        "iptables-save",
        "ebtables",
        "arptables-nft",
        "ufw",
        "/lib/ufw/ufw-init",
        "firewall-cmd",
    ] {
        assert_eq!(kind(&[program, "-L"]), Kind::Firewall, "{program}");
    }
    assert_eq!(kind(&["iptablesx"]), Kind::Action);
    assert_eq!(kind(&["/usr/local/bin/migrate", "--up"]), Kind::Action);

    let d = Deadlines {
        container_s: Some(7),
        ..Deadlines::default()
    };
    assert_eq!(
        d.for_argv(&argv(&["docker", "start", "web"])),
        Duration::from_secs(7)
    );
    assert_eq!(
        d.for_argv(&argv(&["docker", "inspect", "web"])),
        Duration::from_secs(60)
    );
    assert_eq!(
        d.for_argv(&argv(&["apt-get", "install", "sl"])),
        Duration::from_secs(900)
    );
    assert_eq!(
        d.for_argv(&argv(&["ufw", "status"])),
        Duration::from_secs(60)
    );
    let d = Deadlines {
        firewall_s: Some(2),
        ..Deadlines::default()
    };
    assert_eq!(
        d.for_argv(&argv(&["iptables-nft-restore", "-w", "5"])),
        Duration::from_secs(2)
    );
}

#[test]
fn a_declared_deadline_reaches_the_runner() {
    struct Seen(RefCell<Vec<Option<Duration>>>);
    impl Runner for Seen {
        fn call(&self, call: &Call<'_>) -> io::Result<Output> {
            self.0.borrow_mut().push(call.deadline);
            Ok(Output::default())
        }
    }
    let seen = Seen(RefCell::default());
    let r = Deadlined {
        runner: &seen,
        deadlines: Deadlines {
            service_s: Some(3),
            firewall_s: Some(5),
            ..Deadlines::default()
        },
    };
    r.run(&argv(&["systemctl", "stop", "x"]), Path::new("/"), &[])
        .unwrap();
    r.run(&sh("true"), Path::new("/"), &[]).unwrap();
    r.call(&Call::new(&argv(&["nft", "-f", "-"])).stdin(Some(b"flush ruleset")))
        .unwrap();
    r.run_within(
        &argv(&["ufw", "status"]),
        Path::new("/"),
        &[],
        Duration::from_secs(9),
    )
    .unwrap();
    assert_eq!(
        *seen.0.borrow(),
        [3, 600, 5, 9].map(|s| Some(Duration::from_secs(s)))
    );
}

#[test]
fn the_recording_runner_records_argv_and_input_and_answers_in_order() {
    let r = RecordingRunner::answering(&[0, 2]);
    assert!(r.run(&argv(&["a"]), Path::new("/"), &[]).unwrap().success());
    let out = r
        .call(&Call::new(&argv(&["b", "c"])).stdin(Some(b"in")))
        .unwrap();
    assert_eq!(out.code, Some(2));
    assert!(r.run(&argv(&["d"]), Path::new("/"), &[]).is_err());
    assert_eq!(
        *r.calls.borrow(),
        [argv(&["a"]), argv(&["b", "c"]), argv(&["d"])]
    );
    assert_eq!(*r.inputs.borrow(), [None, Some(b"in".to_vec()), None]);
}

#[test]
fn the_recording_runner_answers_its_default_once_the_script_is_done() {
    let r = RecordingRunner::succeeding();
    r.answers.borrow_mut().push_back(Output {
        code: Some(4),
        ..Output::default()
    });
    let codes: Vec<_> = (0..3)
        .map(|_| r.run(&argv(&["a"]), Path::new("/"), &[]).unwrap().code)
        .collect();
    assert_eq!(codes, [Some(4), Some(0), Some(0)]);
}

/// Which programs exist is the runner's to say: the real one looks on PATH, a fake answers from
/// its list whatever the machine has, and a runner with deadlines asks the runner it wraps.
#[test]
fn whether_a_program_exists_is_the_runners_to_say() {
    assert!(SystemRunner.exists("sh") && !SystemRunner.exists("no-such-program-here"));
    assert!(SystemRunner.exists("/bin/sh") && !SystemRunner.exists("/nonexistent/sh"));
    let fake = RecordingRunner {
        programs: vec!["iptables-nft".into()],
        ..RecordingRunner::default()
    };
    assert!(fake.exists("iptables-nft") && !fake.exists("sh"));
    let node = Deadlined {
        runner: &fake,
        deadlines: Deadlines::default(),
    };
    assert!(node.exists("iptables-nft") && !node.exists("sh"));
    assert!(fake.calls.borrow().is_empty());
}

#[test]
fn a_command_line_quotes_what_a_shell_would_split() {
    assert_eq!(
        command_line(&argv(&["ufw", "allow", "", "a b", "it's", "plain"])),
        "ufw allow \"\" \"a b\" \"it's\" plain"
    );
    assert_eq!(seconds(Duration::from_secs(60)), "60 s");
    assert_eq!(seconds(Duration::from_millis(1500)), "1500 ms");
}

/// When set, the test named by it runs as the parent process of the two tests below: it starts a
/// child that writes its pid into the file the variable's value names, then sleeps.
const PARENT: &str = "RUN_TEST_AS_PARENT";

/// Whether this process is the parent of `test`: then it plays that part and the test returns.
fn as_parent(test: &str, forward: bool) -> bool {
    let Ok(spec) = std::env::var(PARENT) else {
        return false;
    };
    let Some(pid_file) = spec.strip_prefix(&format!("{test}:")) else {
        return false;
    };
    if forward {
        interrupt::forward().unwrap();
    }
    let out = command(
        std::process::Command::new("sh").args(["-c", "echo $$ > \"$0\"; exec sleep 30", pid_file]),
        None,
        Duration::from_secs(60),
    )
    .unwrap();
    println!(
        "child {}; interrupted by {:?}",
        out.status_text(),
        interrupt::signal()
    );
    true
}

/// Starts this test binary as the parent of `test` and returns it with the pid of its child.
fn start_parent(test: &str) -> (std::process::Child, i32, std::path::PathBuf) {
    let pid_file = std::env::temp_dir().join(format!("run-parent-{}-{test}", std::process::id()));
    let _ = std::fs::remove_file(&pid_file);
    let parent = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &format!("tests::{test}"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PARENT, format!("{test}:{}", pid_file.display()))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    let pid = loop {
        if let Some(p) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<i32>().ok())
        {
            break p;
        }
        assert!(Instant::now() < until, "the parent's child never started");
        std::thread::sleep(Duration::from_millis(10));
    };
    (parent, pid, pid_file)
}

/// Whether process `pid` is gone (or a zombie nobody reaps) within `within`.
fn process_gone(pid: i32, within: Duration) -> bool {
    let until = Instant::now() + within;
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
        // The state is the field after the command's closing parenthesis.
        let zombie = state
            .as_deref()
            .and_then(|s| s.rsplit_once(") "))
            .is_some_and(|(_, rest)| rest.starts_with('Z'));
        if state.is_none() || zombie {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_child_is_killed_when_the_process_that_started_it_dies() {
    const ME: &str = "a_child_is_killed_when_the_process_that_started_it_dies";
    if as_parent(ME, false) {
        return;
    }
    let (mut parent, child, pid_file) = start_parent(ME);
    parent.kill().unwrap();
    parent.wait().unwrap();
    let _ = std::fs::remove_file(pid_file);
    assert!(
        process_gone(child, Duration::from_secs(5)),
        "the child {child} outlived the process that started it"
    );
}

#[test]
fn an_interrupt_caught_is_passed_on_to_the_running_childs_group() {
    const ME: &str = "an_interrupt_caught_is_passed_on_to_the_running_childs_group";
    if as_parent(ME, true) {
        return;
    }
    let (parent, child, pid_file) = start_parent(ME);
    // SAFETY: kill(2) to the parent this test started and has not reaped.
    unsafe {
        libc::kill(parent.id() as i32, libc::SIGTERM);
    }
    let out = parent.wait_with_output().unwrap();
    let _ = std::fs::remove_file(pid_file);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the parent died of the signal: {said}"
    );
    assert!(
        said.contains("child was killed by signal 15; interrupted by Some(15)"),
        "{said}"
    );
    assert!(process_gone(child, Duration::from_secs(1)), "{said}");
}

#[test]
fn a_file_of_no_executable_format_is_refused_by_exec_and_never_read_as_a_script() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("run-noexec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("not-a-program");
    let marker = dir.join("ran");
    // A shell would run this; the kernel knows no such format.
    std::fs::write(&file, format!("touch {}\n", marker.display())).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = SystemRunner
        .run(&argv(&[file.to_str().unwrap()]), Path::new("/"), &[])
        .unwrap_err();
    let ran = marker.exists();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(e.raw_os_error(), Some(libc::ENOEXEC), "{e}");
    assert!(!ran, "the file was run through a shell");
}
