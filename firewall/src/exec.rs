//! The seam for child programs (iptables and its kin): a thin adapter over the workspace's `run`
//! crate (argv arrays only, one deadline over the whole call), and a recording fake.

use crate::error::{Error, Result};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::time::Duration;

/// What a finished child left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs programs. Arguments are passed as an array; nothing goes through a shell.
pub trait Exec {
    /// Runs `program args…` with `stdin` fed to it, and returns whatever it did.
    fn run(&self, program: &str, args: &[String], stdin: Option<&str>) -> Result<Output>;

    /// Whether `program` can be found on PATH.
    fn exists(&self, program: &str) -> bool;

    /// Runs and insists on exit status 0, naming program, arguments, status and stderr if not.
    fn run_ok(&self, program: &str, args: &[String], stdin: Option<&str>) -> Result<Output> {
        let out = self.run(program, args, stdin)?;
        if out.code == Some(0) {
            Ok(out)
        } else {
            Err(Error::Command {
                program: program.to_string(),
                args: args.to_vec(),
                status: match out.code {
                    Some(c) => format!("exited with status {c}"),
                    None => "was killed by a signal".into(),
                },
                stderr: out.stderr.trim().to_string(),
            })
        }
    }
}

/// How long a firewall program may run by default (the `firewall_s` deadline of [`run::Kind`]):
/// iptables' restore waits at most 5 s for the xtables lock, and a save of a large table takes
/// well under a second.
pub const DEADLINE: Duration = Duration::from_secs(run::Kind::Firewall.default_s() as u64);

/// The firewall's programs through a workspace runner (the `run` crate's one implementation):
/// built from the core's `run::Deadlined`, every call carries the node's `firewall_s`.
#[derive(Clone, Copy)]
pub struct Runs<'a>(pub &'a dyn run::Runner);

impl Exec for Runs<'_> {
    fn run(&self, program: &str, args: &[String], stdin: Option<&str>) -> Result<Output> {
        let mut argv = Vec::with_capacity(args.len() + 1);
        argv.push(program.to_string());
        argv.extend_from_slice(args);
        let call = run::Call::new(&argv).stdin(stdin.map(str::as_bytes));
        match self.0.call(&call) {
            Ok(out) => Ok(Output {
                code: out.code,
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }),
            Err(e) => match e
                .get_ref()
                .and_then(|e| e.downcast_ref::<run::PastDeadline>())
            {
                Some(past) => Err(Error::Command {
                    program: program.to_string(),
                    args: args.to_vec(),
                    status: past.status_text(),
                    stderr: String::from_utf8_lossy(&past.stderr).trim().to_string(),
                }),
                None => Err(Error::Spawn {
                    program: program.to_string(),
                    source: e,
                }),
            },
        }
    }

    fn exists(&self, program: &str) -> bool {
        run::on_path(program)
    }
}

/// The real thing with a node's deadlines: [`Runs`] over `run::SystemRunner` with them, plain
/// data so that it can live as long as the engine that holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadlinedExec(pub run::Deadlines);

impl Exec for DeadlinedExec {
    fn run(&self, program: &str, args: &[String], stdin: Option<&str>) -> Result<Output> {
        let node = run::Deadlined {
            runner: &run::SystemRunner,
            deadlines: self.0,
        };
        Runs(&node).run(program, args, stdin)
    }

    fn exists(&self, program: &str) -> bool {
        run::on_path(program)
    }
}

/// The real thing with the default deadlines: [`Runs`] over `run::SystemRunner`, each child in a
/// process group of its own and killed with it at [`DEADLINE`].
pub struct SystemExec;

impl Exec for SystemExec {
    fn run(&self, program: &str, args: &[String], stdin: Option<&str>) -> Result<Output> {
        Runs(&run::SystemRunner).run(program, args, stdin)
    }

    fn exists(&self, program: &str) -> bool {
        run::on_path(program)
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
        let e = Runs(&short)
            .run(
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
        let out = SystemExec
            .run("sh", &args(&["-c", "cat; echo done >&2"]), Some("in"))
            .unwrap();
        assert_eq!(
            (out.code, out.stdout.as_str(), out.stderr.trim()),
            (Some(0), "in", "done")
        );
        assert!(matches!(
            SystemExec.run_ok("sh", &args(&["-c", "exit 3"]), None),
            Err(Error::Command { status, .. }) if status == "exited with status 3"
        ));
        assert!(matches!(
            SystemExec.run("/nonexistent/iptables", &[], None),
            Err(Error::Spawn { .. })
        ));
        assert!(SystemExec.exists("sh") && !SystemExec.exists("no-such-program-here"));
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
        Runs(&node)
            .run_ok(
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

/// One recorded call: the program, its arguments, and what was fed to its stdin.
pub type Call = (String, Vec<String>, Option<String>);

/// A fake that records each call and answers from a script, for unit tests.
#[derive(Default)]
pub struct RecordingExec {
    pub calls: RefCell<Vec<Call>>,
    pub answers: RefCell<VecDeque<Output>>,
    pub programs: Vec<String>,
}

impl Exec for RecordingExec {
    fn run(&self, program: &str, args: &[String], stdin: Option<&str>) -> Result<Output> {
        self.calls.borrow_mut().push((
            program.to_string(),
            args.to_vec(),
            stdin.map(str::to_string),
        ));
        Ok(self.answers.borrow_mut().pop_front().unwrap_or(Output {
            code: Some(0),
            ..Output::default()
        }))
    }

    fn exists(&self, program: &str) -> bool {
        self.programs.iter().any(|p| p == program)
    }
}
