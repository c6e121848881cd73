//! The runner seam: one call described as a value, the trait the workspace's code starts children
//! through, the real runner, the runner carrying a node's deadlines, and a recording fake.

use crate::capture::Keep;
use crate::deadlines::Deadlines;
use crate::spawn::{self, command_line, Output};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// One child to run: its argv (never a shell line), where, with what added to the environment,
/// what to feed its stdin, its deadline (`None`: the runner's for the call's kind), and what is
/// kept of its stdout (whole up to a limit unless it says an excerpt will do).
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub argv: &'a [String],
    pub cwd: &'a Path,
    pub env: &'a [(&'a str, &'a str)],
    pub stdin: Option<&'a [u8]>,
    pub deadline: Option<Duration>,
    pub stdout: Keep,
}

impl<'a> Call<'a> {
    /// `argv` in `/`, with the host's environment, no input, the default deadline of its kind.
    pub fn new(argv: &'a [String]) -> Self {
        Call {
            argv,
            cwd: Path::new("/"),
            env: &[],
            stdin: None,
            deadline: None,
            stdout: Keep::WHOLE,
        }
    }

    pub fn cwd(self, cwd: &'a Path) -> Self {
        Call { cwd, ..self }
    }

    pub fn env(self, env: &'a [(&'a str, &'a str)]) -> Self {
        Call { env, ..self }
    }

    pub fn stdin(self, stdin: Option<&'a [u8]>) -> Self {
        Call { stdin, ..self }
    }

    /// Keeps only an excerpt of stdout ([`Keep::EXCERPT`]): for a command whose output is shown,
    /// never parsed, such as an action's.
    pub fn excerpt(self) -> Self {
        Call {
            stdout: Keep::EXCERPT,
            ..self
        }
    }

    pub fn within(self, deadline: Duration) -> Self {
        Call {
            deadline: Some(deadline),
            ..self
        }
    }
}

/// Starts child processes.
pub trait Runner {
    /// Runs one call to completion. Past its deadline the child and its process group are killed
    /// and the call fails with [`io::ErrorKind::TimedOut`], naming the command and the deadline.
    /// Fakes that never wait ignore the deadline.
    fn call(&self, call: &Call<'_>) -> io::Result<Output>;

    /// Runs `argv` in `cwd` with `env` added to the host's environment, within the deadline for
    /// its kind of call.
    fn run(&self, argv: &[String], cwd: &Path, env: &[(&str, &str)]) -> io::Result<Output> {
        self.call(&Call::new(argv).cwd(cwd).env(env))
    }

    /// Runs `argv` within `deadline`.
    fn run_within(
        &self,
        argv: &[String],
        cwd: &Path,
        env: &[(&str, &str)],
        deadline: Duration,
    ) -> io::Result<Output> {
        self.call(&Call::new(argv).cwd(cwd).env(env).within(deadline))
    }

    /// Whether `program` can be started: on PATH (or, holding a slash, a file) for a real runner;
    /// what its script says for a fake, so a test decides which programs a machine has.
    fn exists(&self, program: &str) -> bool {
        on_path(program)
    }
}

/// The real runner: [`spawn::command`] with an argv array, stdin closed unless the call feeds
/// it, the default deadline of its kind unless the call names one.
pub struct SystemRunner;

impl Runner for SystemRunner {
    fn call(&self, call: &Call<'_>) -> io::Result<Output> {
        let (program, args) = call
            .argv
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty argv"))?;
        let mut cmd = Command::new(program);
        cmd.args(args).current_dir(call.cwd).stdin(Stdio::null());
        for (k, v) in call.env {
            cmd.env(k, v);
        }
        let deadline = call
            .deadline
            .unwrap_or_else(|| Deadlines::default().for_argv(call.argv));
        spawn::command_keeping(&mut cmd, call.stdin, deadline, call.stdout)
    }
}

/// A runner whose calls get the node's declared deadlines: what an apply hands its appliers, and
/// what the firewall's programs run through.
#[derive(Clone, Copy)]
pub struct Deadlined<'a> {
    pub runner: &'a dyn Runner,
    pub deadlines: Deadlines,
}

impl Runner for Deadlined<'_> {
    fn call(&self, call: &Call<'_>) -> io::Result<Output> {
        let deadline = call
            .deadline
            .unwrap_or_else(|| self.deadlines.for_argv(call.argv));
        self.runner.call(&call.within(deadline))
    }

    fn exists(&self, program: &str) -> bool {
        self.runner.exists(program)
    }
}

/// A fake that records every argv (and what each was fed) and answers from a script, for unit
/// tests.
#[derive(Default)]
pub struct RecordingRunner {
    pub calls: RefCell<Vec<Vec<String>>>,
    /// What each call was fed on stdin, in the order of `calls`.
    pub inputs: RefCell<Vec<Option<Vec<u8>>>>,
    pub answers: RefCell<VecDeque<Output>>,
    /// What a call gets once `answers` is empty: `None` (the default) fails the call, naming it.
    pub otherwise: Option<Output>,
    /// The programs [`Runner::exists`] says this machine has (none by default): a fake never
    /// looks at the real PATH.
    pub programs: Vec<String>,
}

impl RecordingRunner {
    /// Queues the exit codes the next calls will report, in order.
    pub fn answering(codes: &[i32]) -> Self {
        let r = RecordingRunner::default();
        for c in codes {
            r.answers.borrow_mut().push_back(Output {
                code: Some(*c),
                ..Output::default()
            });
        }
        r
    }

    /// A fake whose every call exits 0 with no output unless an answer is queued.
    pub fn succeeding() -> Self {
        RecordingRunner {
            otherwise: Some(Output {
                code: Some(0),
                ..Output::default()
            }),
            ..RecordingRunner::default()
        }
    }
}

impl Runner for RecordingRunner {
    fn call(&self, call: &Call<'_>) -> io::Result<Output> {
        self.calls.borrow_mut().push(call.argv.to_vec());
        self.inputs
            .borrow_mut()
            .push(call.stdin.map(<[u8]>::to_vec));
        let next = self.answers.borrow_mut().pop_front();
        next.or_else(|| self.otherwise.clone()).ok_or_else(|| {
            io::Error::other(format!(
                "recording runner has no answer for {:?}",
                call.argv
            ))
        })
    }

    fn exists(&self, program: &str) -> bool {
        self.programs.iter().any(|p| p == program)
    }
}

/// How many of the last lines of a child's stderr a message keeps, and how many characters of
/// each.
const EXCERPT_LINES: usize = 3;
const EXCERPT_LINE_CHARS: usize = 200;

/// Describes a finished child for an error message: the command as it would be typed, its status
/// and an [`excerpt`] of its stderr.
pub fn describe(argv: &[String], out: &Output) -> String {
    let command = command_line(argv);
    let status = out.status_text();
    let tail = excerpt(&out.stderr);
    if tail.is_empty() {
        format!("{command} {status}")
    } else {
        format!("{command} {status}: {tail}")
    }
}

/// The last [`EXCERPT_LINES`] non-empty lines of a child's output joined by " / ", each cut to
/// [`EXCERPT_LINE_CHARS`] characters (a cut line ends in "…"), control characters left out: what of a child's words goes into
/// a report, the log and the store, bounded however long its lines.
pub fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    // A terminal's controls and NULs say nothing in a report, and would go into the store.
    let text: String = text
        .chars()
        .map(|c| if c == '\t' { ' ' } else { c })
        .filter(|c| *c == '\n' || !c.is_control())
        .collect();
    let mut lines: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .rev()
        .take(EXCERPT_LINES)
        .map(|l| match l.char_indices().nth(EXCERPT_LINE_CHARS) {
            Some((cut, _)) => format!("{}…", &l[..cut]),
            None => l.to_string(),
        })
        .collect();
    lines.reverse();
    lines.join(" / ")
}

/// Whether `program` names a file in a directory of PATH (or, holding a slash, is a file).
pub fn on_path(program: &str) -> bool {
    if program.contains('/') {
        return Path::new(program).is_file();
    }
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
}
