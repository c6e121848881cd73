//! The seam for child programs (iptables and its kin): argv arrays only, and a recording fake.

use crate::error::{Error, Result};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

/// How long a firewall program may run before it is killed: iptables' restore waits at most 5 s
/// for the xtables lock, and a save of a large table takes well under a second.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The real thing: `std::process::Command`, each child in a process group of its own and
/// killed with it at [`DEADLINE`].
pub struct SystemExec;

impl Exec for SystemExec {
    fn run(&self, program: &str, args: &[String], stdin: Option<&str>) -> Result<Output> {
        run_within(program, args, stdin, DEADLINE)
    }

    fn exists(&self, program: &str) -> bool {
        std::env::var_os("PATH")
            .map(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
            .unwrap_or(false)
    }
}

/// Runs a child with `deadline`; past it the child and its process group are killed and the
/// call fails naming the program and the deadline.
fn run_within(
    program: &str,
    args: &[String],
    stdin: Option<&str>,
    deadline: Duration,
) -> Result<Output> {
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
        .process_group(0)
        .spawn()
        .map_err(spawn)?;
    // The pipes are drained on threads of their own, so a child that writes a lot never
    // blocks on a full pipe while the deadline is watched here.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // A child that exits without reading its input is judged by its status, not EPIPE.
        let _ = pipe.write_all(text.as_bytes());
    }
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(spawn)? {
            break status;
        }
        if started.elapsed() >= deadline {
            // SAFETY: kill(2) with the child's own process group id, which process_group(0)
            // made equal to its pid.
            unsafe {
                libc::kill(-(child.id() as i32), libc::SIGKILL);
            }
            let _ = child.wait();
            return Err(Error::Command {
                program: program.to_string(),
                args: args.to_vec(),
                status: format!(
                    "did not finish within its deadline of {} ms and was killed",
                    deadline.as_millis()
                ),
                stderr: String::from_utf8_lossy(&err.join().unwrap_or_default())
                    .trim()
                    .to_string(),
            });
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    Ok(Output {
        code: status.code(),
        stdout: String::from_utf8_lossy(&out.join().unwrap_or_default()).into_owned(),
        stderr: String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_past_its_deadline_is_killed_with_its_group_and_named() {
        let started = Instant::now();
        let e = run_within(
            "sh",
            &["-c".into(), "sleep 30 & sleep 30".into()],
            None,
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        let text = e.to_string();
        assert!(
            text.contains("sh") && text.contains("deadline of 200 ms"),
            "{text}"
        );
        let out = run_within(
            "sh",
            &["-c".into(), "cat; echo done >&2".into()],
            Some("in"),
            DEADLINE,
        )
        .unwrap();
        assert_eq!(
            (out.code, out.stdout.as_str(), out.stderr.trim()),
            (Some(0), "in", "done")
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
