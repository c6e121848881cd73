//! The command runner seam: how the host starts a child process, and a recording fake for tests.
//!
//! Children always get an argv array; nothing the host runs passes through a shell.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

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

    /// Runs `argv` like [`Runner::run`], but kills it and fails with `TimedOut` when it has not
    /// finished within `limit`. Fakes answer as they do for `run`.
    fn run_within(
        &self,
        argv: &[String],
        cwd: &Path,
        env: &[(&str, &str)],
        limit: Duration,
    ) -> std::io::Result<RunOutput> {
        let _ = limit;
        self.run(argv, cwd, env)
    }
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

    fn run_within(
        &self,
        argv: &[String],
        cwd: &Path,
        env: &[(&str, &str)],
        limit: Duration,
    ) -> std::io::Result<RunOutput> {
        SystemRunner::run_limited(argv, cwd, env, limit)
    }
}

impl SystemRunner {
    /// [`Runner::run_within`] for real: the child's output is read on two threads while this one
    /// waits for it, polling, and kills it at the deadline.
    fn run_limited(
        argv: &[String],
        cwd: &Path,
        env: &[(&str, &str)],
        limit: Duration,
    ) -> std::io::Result<RunOutput> {
        use std::io::Read;
        use std::process::Stdio;
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty argv"))?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn()?;
        let drain = |pipe: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(mut p) = pipe {
                    let _ = p.read_to_end(&mut buf);
                }
                buf
            })
        };
        let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
        let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{program} did not finish within {}s", limit.as_secs()),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        Ok(RunOutput {
            code: status.code(),
            stdout: out.join().unwrap_or_default(),
            stderr: err.join().unwrap_or_default(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_child_past_its_deadline_is_killed_and_one_within_it_answers() {
        let r = SystemRunner;
        let start = Instant::now();
        let e = r
            .run_within(
                &argv(&["sleep", "30"]),
                Path::new("/"),
                &[],
                Duration::from_millis(200),
            )
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
        // Killed at the deadline, not left to finish its thirty seconds.
        assert!(start.elapsed() < Duration::from_secs(10));

        let out = r
            .run_within(
                &argv(&["sh", "-c", "echo out; echo err >&2; exit 3"]),
                Path::new("/"),
                &[("X", "1")],
                Duration::from_secs(30),
            )
            .unwrap();
        assert_eq!(out.code, Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
    }
}
