//! The seam for child programs (iptables and its kin): argv arrays only, and a recording fake.

use crate::error::{Error, Result};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::Write;
use std::process::{Command, Stdio};

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

/// The real thing: `std::process::Command`.
pub struct SystemExec;

impl Exec for SystemExec {
    fn run(&self, program: &str, args: &[String], stdin: Option<&str>) -> Result<Output> {
        let spawn = |source| Error::Spawn {
            program: program.to_string(),
            source,
        };
        let mut child = Command::new(program)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn)?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes()).map_err(spawn)?;
        }
        let out = child.wait_with_output().map_err(spawn)?;
        Ok(Output {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    fn exists(&self, program: &str) -> bool {
        std::env::var_os("PATH")
            .map(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
            .unwrap_or(false)
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
