//! The firewall's programs (iptables and its kin, nft, ip, ufw, ipset) through the workspace's one
//! runner interface, `run::Runner` (argv arrays only, one deadline over the whole call, what is
//! kept of the output bounded): a call's failure said in the crate's error, naming the program,
//! its arguments, how it ended and its stderr.

use crate::error::{Error, Result};
use run::{Call, Output, Runner};
use std::time::Duration;

/// How long a firewall program may run by default (the `firewall_s` deadline of [`run::Kind`]):
/// iptables' restore waits at most 5 s for the xtables lock, and a save of a large table takes
/// well under a second.
pub const DEADLINE: Duration = Duration::from_secs(run::Kind::Firewall.default_s() as u64);

/// Runs `program args…` through `runner` with `stdin` fed to it (within the runner's deadline for
/// it: a [`run::Deadlined`]'s `firewall_s` for the firewall's programs), and returns whatever it
/// did. Past the deadline it is [`Error::Command`] naming the deadline; a program that cannot be
/// started is [`Error::Spawn`].
pub fn run(
    runner: &dyn Runner,
    program: &str,
    args: &[String],
    stdin: Option<&str>,
) -> Result<Output> {
    let mut argv = Vec::with_capacity(args.len() + 1);
    argv.push(program.to_string());
    argv.extend_from_slice(args);
    let call = Call::new(&argv).stdin(stdin.map(str::as_bytes));
    runner.call(&call).map_err(|e| {
        match e
            .get_ref()
            .and_then(|e| e.downcast_ref::<run::PastDeadline>())
        {
            Some(past) => Error::Command {
                program: program.to_string(),
                args: args.to_vec(),
                status: past.status_text(),
                stderr: String::from_utf8_lossy(&past.stderr).trim().to_string(),
            },
            None => Error::Spawn {
                program: program.to_string(),
                source: e,
            },
        }
    })
}

/// [`run`], insisting on exit status 0: otherwise [`Error::Command`] naming the program, its
/// arguments, its status and its stderr.
pub fn run_ok(
    runner: &dyn Runner,
    program: &str,
    args: &[String],
    stdin: Option<&str>,
) -> Result<Output> {
    let out = run(runner, program, args, stdin)?;
    if out.success() {
        Ok(out)
    } else {
        Err(failed(program, args, &out, &out.status_text()))
    }
}

/// [`run_ok`]'s stdout as text (what a program's listing or save is read as).
pub fn stdout(
    runner: &dyn Runner,
    program: &str,
    args: &[String],
    stdin: Option<&str>,
) -> Result<String> {
    run_ok(runner, program, args, stdin).map(|out| text(&out.stdout))
}

/// A child's output as text, anything not UTF-8 replaced.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// [`Error::Command`] for `program args…` that ended as `status` says, with its stderr.
pub fn failed(program: &str, args: &[String], out: &Output, status: &str) -> Error {
    Error::Command {
        program: program.to_string(),
        args: args.to_vec(),
        status: status.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    }
}

/// What a recording runner was asked, as the firewall's tests read it: each call's program, its
/// arguments and what it was fed on stdin.
#[cfg(test)]
pub(crate) fn recorded(r: &run::RecordingRunner) -> Vec<(String, Vec<String>, Option<String>)> {
    r.calls
        .borrow()
        .iter()
        .zip(r.inputs.borrow().iter())
        .map(|(argv, input)| {
            (
                argv[0].clone(),
                argv[1..].to_vec(),
                input.as_deref().map(text),
            )
        })
        .collect()
}

/// A program's answer for a recording runner: exit status 0 and `stdout`.
#[cfg(test)]
pub(crate) fn answer(stdout: &str) -> Output {
    Output {
        code: Some(0),
        stdout: stdout.as_bytes().to_vec(),
        ..Output::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    /// Through a runner with a short deadline: a child past it is named with the deadline, one
    /// within it gives its output and what it read.
    #[test]
    fn a_child_past_its_deadline_is_named_and_one_within_it_answers() {
        let short = run::Deadlined {
            runner: &run::SystemRunner,
            deadlines: run::Deadlines {
                action_s: Some(1),
                ..run::Deadlines::default()
            },
        };
        let started = Instant::now();
        let e = run(
            &short,
            "sh",
            &args(&["-c", "echo held >&2; sleep 30 & exit 0"]),
            None,
        )
        .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            e.to_string(),
            "sh [\"-c\", \"echo held >&2; sleep 30 & exit 0\"] did not finish within 1 s and was \
             killed (it had exited with status 0, but a process it started still held its output): held"
        );
        let sys = &run::SystemRunner;
        let out = run(sys, "sh", &args(&["-c", "cat; echo done >&2"]), Some("in")).unwrap();
        assert_eq!(
            (
                out.code,
                text(&out.stdout).as_str(),
                text(&out.stderr).trim()
            ),
            (Some(0), "in", "done")
        );
        assert!(matches!(
            run_ok(sys, "sh", &args(&["-c", "exit 3"]), None),
            Err(Error::Command { status, .. }) if status == "exited with status 3"
        ));
        assert!(matches!(
            run_ok(sys, "sh", &args(&["-c", "kill -9 $$"]), None),
            Err(Error::Command { status, .. }) if status == "was killed by signal 9"
        ));
        assert_eq!(
            stdout(sys, "sh", &args(&["-c", "printf 'a\\n'"]), None).unwrap(),
            "a\n"
        );
        assert!(matches!(
            run(sys, "/nonexistent/iptables", &[], None),
            Err(Error::Spawn { .. })
        ));
    }

    /// The firewall's programs get the runner's `firewall_s`.
    #[test]
    fn the_firewall_deadline_reaches_its_programs() {
        let recorded = run::RecordingRunner::answering(&[0]);
        struct Seen<'a>(&'a run::RecordingRunner, std::cell::Cell<Option<Duration>>);
        impl run::Runner for Seen<'_> {
            fn call(&self, call: &run::Call<'_>) -> std::io::Result<run::Output> {
                self.1.set(call.deadline);
                self.0.call(call)
            }
        }
        let seen = Seen(&recorded, Default::default());
        let node = run::Deadlined {
            runner: &seen,
            deadlines: run::Deadlines {
                firewall_s: Some(7),
                ..run::Deadlines::default()
            },
        };
        run_ok(
            &node,
            "iptables-nft-restore",
            &args(&["--noflush"]),
            Some("*filter\nCOMMIT\n"),
        )
        .unwrap();
        assert_eq!(seen.1.get(), Some(Duration::from_secs(7)));
        assert_eq!(
            *recorded.calls.borrow(),
            [args(&["iptables-nft-restore", "--noflush"])]
        );
        assert_eq!(
            *recorded.inputs.borrow(),
            [Some(b"*filter\nCOMMIT\n".to_vec())]
        );
    }
}
