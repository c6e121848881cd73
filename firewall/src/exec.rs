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
    // blocks on a full pipe while the deadline is watched here; each hands its bytes over a
    // channel, so waiting for them is bounded too.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            let _ = tx.send(buf);
        });
        rx
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
    let started = Instant::now();
    // The input is written on a thread too, inside the deadline: a child that never reads a
    // large input cannot hold the call on a full pipe.
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let text = text.to_string();
        std::thread::spawn(move || {
            // A child that exits without reading its input is judged by its status, not EPIPE.
            let _ = pipe.write_all(text.as_bytes());
        });
    }
    let group = child.id() as i32;
    let kill_group = || {
        // SAFETY: kill(2) with the child's own process group id, which process_group(0) made
        // equal to its pid; what it started and left in the group goes with it.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    };
    let failed = |status: String, err: &std::sync::mpsc::Receiver<Vec<u8>>| Error::Command {
        program: program.to_string(),
        args: args.to_vec(),
        status,
        stderr: String::from_utf8_lossy(
            &err.recv_timeout(Duration::from_millis(200))
                .unwrap_or_default(),
        )
        .trim()
        .to_string(),
    };
    let status = loop {
        if let Some(status) = child.try_wait().map_err(spawn)? {
            break status;
        }
        if started.elapsed() >= deadline {
            kill_group();
            let _ = child.wait();
            return Err(failed(
                format!(
                    "did not finish within its deadline of {} ms and was killed",
                    deadline.as_millis()
                ),
                &err,
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    // The child has exited; what it started may still hold its output open (a daemonising
    // helper, a hung hook). Its output is waited for until the deadline, then that group is
    // killed, and a pipe still held after that fails the call instead of hanging it.
    let collect = |rx: &std::sync::mpsc::Receiver<Vec<u8>>| -> Option<Vec<u8>> {
        let left = deadline.saturating_sub(started.elapsed());
        rx.recv_timeout(left.max(Duration::from_millis(50)))
            .or_else(|_| {
                kill_group();
                rx.recv_timeout(Duration::from_millis(500))
            })
            .ok()
    };
    let (Some(stdout), Some(stderr)) = (collect(&out), collect(&err)) else {
        return Err(Error::Command {
            program: program.to_string(),
            args: args.to_vec(),
            status: format!(
                "exited ({status}), but something it started kept its output open past its \
                 deadline of {} ms",
                deadline.as_millis()
            ),
            stderr: String::new(),
        });
    };
    Ok(Output {
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
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

    /// A child that leaves a process of its group holding its output (what a daemonising
    /// helper or a hung hook does) ends the call at its deadline with what it printed, that
    /// process killed; one that never reads a large input cannot hold the call either.
    #[test]
    fn a_grandchild_holding_the_output_or_an_unread_input_never_hangs_the_call() {
        let started = Instant::now();
        let out = run_within(
            "sh",
            &["-c".into(), "echo printed; sleep 37 &".into()],
            None,
            Duration::from_millis(300),
        )
        .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!((out.code, out.stdout.trim()), (Some(0), "printed"));
        // The sleep went with the group.
        let left = std::process::Command::new("pgrep")
            .args(["-f", "^sleep 37$"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        assert!(left.is_empty(), "still running: {left}");
        let started = Instant::now();
        let big = "x".repeat(1 << 20);
        let e = run_within(
            "sh",
            &["-c".into(), "sleep 30".into()],
            Some(&big),
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(e.to_string().contains("deadline of 300 ms"), "{e}");
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
