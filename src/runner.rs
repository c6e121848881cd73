//! The command runner seam: how the host starts a child process, and a recording fake for tests.
//!
//! Children always get an argv array; nothing the host runs passes through a shell.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::Path;
use std::process::Command;

/// What a finished child left behind.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunOutput {
    /// The exit code, or `None` when a signal ended it.
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl RunOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// Starts child processes.
pub trait Runner {
    /// Runs `argv` to completion in `cwd` with `env` added to the host's environment.
    fn run(&self, argv: &[String], cwd: &Path, env: &[(&str, &str)]) -> std::io::Result<RunOutput>;
}

/// The real runner: `std::process::Command` with an argv array.
pub struct SystemRunner;

impl Runner for SystemRunner {
    fn run(&self, argv: &[String], cwd: &Path, env: &[(&str, &str)]) -> std::io::Result<RunOutput> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty argv"))?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(cwd)
            .stdin(std::process::Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output()?;
        Ok(RunOutput {
            code: out.status.code(),
            stdout: out.stdout,
            stderr: out.stderr,
        })
    }
}

/// A fake that records every argv and answers from a script, for unit tests.
#[derive(Default)]
pub struct RecordingRunner {
    pub calls: RefCell<Vec<Vec<String>>>,
    pub answers: RefCell<VecDeque<RunOutput>>,
}

impl RecordingRunner {
    /// Queues the exit codes the next calls will report, in order.
    pub fn answering(codes: &[i32]) -> Self {
        let r = RecordingRunner::default();
        for c in codes {
            r.answers.borrow_mut().push_back(RunOutput {
                code: Some(*c),
                ..RunOutput::default()
            });
        }
        r
    }
}

impl Runner for RecordingRunner {
    fn run(
        &self,
        argv: &[String],
        _cwd: &Path,
        _env: &[(&str, &str)],
    ) -> std::io::Result<RunOutput> {
        self.calls.borrow_mut().push(argv.to_vec());
        self.answers.borrow_mut().pop_front().ok_or_else(|| {
            std::io::Error::other(format!("recording runner has no answer for {argv:?}"))
        })
    }
}

/// Describes a finished child for an error message: program, arguments, status and stderr.
pub fn describe(argv: &[String], out: &RunOutput) -> String {
    let status = match out.code {
        Some(c) => format!("exited with status {c}"),
        None => "was killed by a signal".to_string(),
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stderr = stderr.trim();
    if stderr.is_empty() {
        format!("{argv:?} {status}")
    } else {
        let tail: String = stderr
            .lines()
            .rev()
            .take(3)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join(" / ");
        format!("{argv:?} {status}: {tail}")
    }
}
