//! The scratch node's loader run again once when a signal killed it, and not past that, against
//! the recording runner: no namespace is made, only the argv each try would run is recorded.

use super::*;
use run::{Output, RecordingRunner};
use std::time::Duration;

const RULES: &str = "*filter\n:INPUT DROP [0:0]\nCOMMIT\n";

fn killed() -> Output {
    Output {
        code: None,
        signal: Some(9),
        ..Output::default()
    }
}

fn exited(code: i32) -> Output {
    Output {
        code: Some(code),
        ..Output::default()
    }
}

fn runner(answers: Vec<Output>) -> RecordingRunner {
    RecordingRunner {
        answers: RefCell::new(answers.into_iter().collect()),
        ..RecordingRunner::default()
    }
}

/// The ruleset loaded into `ns` through `exec` (nothing queued, so the load is the only call).
fn load_into(exec: &dyn Runner, ns: &str) -> Result<()> {
    let s = Scratch::new(exec, Instant::now() + Duration::from_secs(60));
    s.inside(ns, "iptables-nft-restore", &[], Some(RULES))
}

/// The one command a try runs: nsenter into the namespace, the loader, nothing else.
fn one_try(ns: &str) -> Vec<String> {
    args(&[
        "nsenter",
        &format!("--net={NETNS_DIR}/{ns}"),
        "iptables-nft-restore",
    ])
}

/// Proves a loader killed by a signal once is run again, the same argv fed the same ruleset,
/// and the load then stands.
#[test]
fn a_loader_killed_once_is_run_again_and_the_load_stands() {
    let exec = runner(vec![killed(), exited(0)]);
    load_into(&exec, "scratch-node").unwrap();
    let calls = crate::child::recorded(&exec);
    assert_eq!(calls.len(), 2, "{calls:?}");
    for (program, rest, stdin) in &calls {
        let mut argv = vec![program.clone()];
        argv.extend(rest.iter().cloned());
        assert_eq!(argv, one_try("scratch-node"));
        assert_eq!(stdin.as_deref(), Some(RULES));
    }
}

/// Proves the retry's limit: a loader killed twice is not run a third time, and the error says
/// it was killed twice, naming nsenter and the loader.
#[test]
fn a_loader_killed_twice_is_an_error_without_a_third_try() {
    let exec = RecordingRunner {
        otherwise: Some(killed()),
        ..runner(vec![killed(), killed()])
    };
    let e = load_into(&exec, "scratch-node").unwrap_err();
    assert_eq!(exec.calls.borrow().len(), 2);
    match e {
        Error::Command {
            program,
            args,
            status,
            ..
        } => {
            assert_eq!(program, "nsenter");
            assert_eq!(args[1], "iptables-nft-restore");
            assert_eq!(status, "was killed by signal 9, twice");
        }
        other => panic!("not a command's failure: {other}"),
    }
}

/// Proves only a signal earns a second try: a loader that exits with an error status (a ruleset
/// it refuses) fails at once, with that status.
#[test]
fn a_loader_that_exits_with_an_error_is_not_run_again() {
    let exec = RecordingRunner {
        otherwise: Some(exited(0)),
        ..runner(vec![exited(2)])
    };
    let e = load_into(&exec, "scratch-node").unwrap_err();
    assert_eq!(exec.calls.borrow().len(), 1);
    match e {
        Error::Command { status, .. } => assert_eq!(status, "exited with status 2"),
        other => panic!("not a command's failure: {other}"),
    }
}

/// A runner whose every call is past its deadline, counting the calls.
struct PastItsDeadline {
    calls: std::cell::Cell<usize>,
}

impl Runner for PastItsDeadline {
    fn call(&self, call: &run::Call<'_>) -> std::io::Result<Output> {
        self.calls.set(self.calls.get() + 1);
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            run::PastDeadline {
                argv: call.argv.to_vec(),
                deadline: Duration::from_secs(20),
                exited: None,
                stderr: Vec::new(),
                left_behind: Vec::new(),
            },
        ))
    }

    fn exists(&self, _: &str) -> bool {
        true
    }
}

/// Proves a loader killed at its deadline is not run again: that is an error of its own, said
/// as the deadline.
#[test]
fn a_loader_killed_at_its_deadline_is_not_run_again() {
    let exec = PastItsDeadline {
        calls: std::cell::Cell::new(0),
    };
    let e = load_into(&exec, "scratch-node").unwrap_err();
    assert_eq!(exec.calls.get(), 1);
    match e {
        Error::Command { status, .. } => {
            assert_eq!(status, "did not finish within 20 s and was killed")
        }
        other => panic!("not a command's failure: {other}"),
    }
}
