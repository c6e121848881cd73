//! The command runner seam: how the host starts a child process, and a recording fake for tests.
//!
//! Children always get an argv array; nothing the host runs passes through a shell. Every child
//! has a deadline: it runs in a process group of its own, and at its deadline the whole group is
//! killed, so a runtime or service manager that never answers fails its resource instead of
//! holding the store's lock for ever.

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
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
    /// Runs `argv` to completion in `cwd` with `env` added to the host's environment, within the
    /// default deadline for its kind of call ([`Deadlines::default`]).
    fn run(&self, argv: &[String], cwd: &Path, env: &[(&str, &str)]) -> std::io::Result<RunOutput>;

    /// Runs `argv` within `deadline`. Past it the child and its process group are killed and the
    /// call fails with [`std::io::ErrorKind::TimedOut`], naming the command and the deadline.
    /// Fakes that never wait ignore the deadline.
    fn run_within(
        &self,
        argv: &[String],
        cwd: &Path,
        env: &[(&str, &str)],
        deadline: Duration,
    ) -> std::io::Result<RunOutput> {
        let _ = deadline;
        self.run(argv, cwd, env)
    }
}

/// The real runner: `std::process::Command` with an argv array, each child in a process group of
/// its own and killed with it at its deadline.
pub struct SystemRunner;

impl Runner for SystemRunner {
    fn run(&self, argv: &[String], cwd: &Path, env: &[(&str, &str)]) -> std::io::Result<RunOutput> {
        self.run_within(argv, cwd, env, Deadlines::default().for_argv(argv))
    }

    fn run_within(
        &self,
        argv: &[String],
        cwd: &Path,
        env: &[(&str, &str)],
        deadline: Duration,
    ) -> std::io::Result<RunOutput> {
        run_within(argv, cwd, env, deadline)
    }
}

fn run_within(
    argv: &[String],
    cwd: &Path,
    env: &[(&str, &str)],
    deadline: Duration,
) -> std::io::Result<RunOutput> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty argv"))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let mut child = cmd.spawn()?;
    // The pipes are drained on threads of their own, so a child that writes a lot never blocks
    // on a full pipe while the deadline is watched here; the deadline covers the pipes too, since
    // something the child started may hold them open after the child itself exited.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = mpsc::channel();
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
    let pgid = child.id() as i32;
    // The child is reaped only after both pipes closed, so until then its pid stays reserved and
    // the group id it names cannot belong to anything else when the group is killed.
    let (mut stdout, mut stderr) = (None, None);
    let status = loop {
        if stdout.is_none() {
            stdout = out.try_recv().ok();
        }
        if stderr.is_none() {
            stderr = err.try_recv().ok();
        }
        if stdout.is_some() && stderr.is_some() {
            if let Some(status) = child.try_wait()? {
                break status;
            }
        }
        if started.elapsed() >= deadline {
            // The child's own process group, whose id process_group(0) made equal to the
            // child's pid; the child is not reaped yet, so the id is still its.
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            let _ = child.wait();
            return Err(past_deadline(argv, deadline));
        }
        // Short at first, so quick queries return quickly; never more than 20 ms.
        let waited = started.elapsed().as_millis() as u64;
        std::thread::sleep(Duration::from_millis((waited / 10).clamp(1, 20)));
    };
    Ok(RunOutput {
        code: status.code(),
        stdout: stdout.unwrap_or_default(),
        stderr: stderr.unwrap_or_default(),
    })
}

/// The error of a child killed at its deadline: "docker inspect web did not finish within 120 s
/// and was killed".
fn past_deadline(argv: &[String], deadline: Duration) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "{} did not finish within {} and was killed",
            command_line(argv),
            seconds(deadline)
        ),
    )
}

/// A deadline as an operator writes it: whole seconds, or milliseconds below one second.
fn seconds(d: Duration) -> String {
    if d.as_millis() % 1000 == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// The command as one line for a message: the arguments joined by spaces, each one that is empty
/// or holds a space or quote shown quoted, so the line can be typed back by hand.
pub fn command_line(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '"' || c == '\'') {
                format!("{a:?}")
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The deadlines of the host's children, in seconds, per kind of call: `settings.deadlines` in a
/// declaration, each one optional, the default in its place when absent (docs/operator.md says
/// why each default is what it is).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct Deadlines {
    /// Questions that change nothing: `inspect`, `ps`, `version`, `systemctl show`, `dpkg-query`,
    /// `pacman -Q`, `apk list`, `rc-service … status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_s: Option<u32>,
    /// Container runtime changes: `create` (which pulls a missing image), `start`, `stop`, `rm`,
    /// `network connect`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_s: Option<u32>,
    /// Service manager changes: `systemctl start|stop|enable|disable`, `rc-service`, `rc-update`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_s: Option<u32>,
    /// Package installs and removals: `apt-get`, `pacman -S`, `apk add`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package_s: Option<u32>,
    /// Any other program: an action's `run` and `verify`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_s: Option<u32>,
}

/// The kind of a call, which picks its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Query,
    Container,
    Service,
    Package,
    Action,
}

impl Kind {
    /// The default deadline of each kind, in seconds.
    pub const fn default_s(self) -> u32 {
        match self {
            Kind::Query => 60,
            Kind::Container => 300,
            Kind::Service => 120,
            Kind::Package => 900,
            Kind::Action => 600,
        }
    }

    /// What kind of call `argv` is, read from its program and verb.
    pub fn of(argv: &[String]) -> Kind {
        let program = argv
            .first()
            .map(|p| p.rsplit('/').next().unwrap_or(p))
            .unwrap_or_default();
        let mut words = argv
            .iter()
            .skip(1)
            .map(String::as_str)
            .filter(|a| !a.starts_with('-'));
        let first = words.next().unwrap_or_default();
        let second = words.next().unwrap_or_default();
        let has = |w: &str| argv.iter().skip(1).any(|a| a == w);
        match program {
            "docker" | "podman" => {
                let reads = ["inspect", "ls", "list", "ps", "version", "info", "images"];
                let objects = ["container", "network", "image", "volume", "system"];
                if reads.contains(&first) || (objects.contains(&first) && reads.contains(&second)) {
                    Kind::Query
                } else {
                    Kind::Container
                }
            }
            "systemctl" => match first {
                "show" | "status" | "is-active" | "is-enabled" | "is-failed" | "cat"
                | "list-units" | "list-unit-files" => Kind::Query,
                _ => Kind::Service,
            },
            "rc-service" if has("status") || has("--exists") || has("-e") => Kind::Query,
            "rc-update" if first == "show" => Kind::Query,
            "rc-status" => Kind::Query,
            "rc-service" | "rc-update" | "openrc" => Kind::Service,
            "dpkg-query" => Kind::Query,
            "pacman" if argv.get(1).is_some_and(|a| a.starts_with("-Q")) => Kind::Query,
            "apk" if matches!(first, "list" | "info" | "policy" | "search") => Kind::Query,
            "apt-get" | "apt" | "dpkg" | "pacman" | "apk" => Kind::Package,
            _ => Kind::Action,
        }
    }
}

impl Deadlines {
    /// The deadline of one kind of call: the declared one, else the default.
    pub fn of(&self, kind: Kind) -> Duration {
        let declared = match kind {
            Kind::Query => self.query_s,
            Kind::Container => self.container_s,
            Kind::Service => self.service_s,
            Kind::Package => self.package_s,
            Kind::Action => self.action_s,
        };
        Duration::from_secs(u64::from(declared.unwrap_or(kind.default_s())))
    }

    /// The deadline of the call `argv`.
    pub fn for_argv(&self, argv: &[String]) -> Duration {
        self.of(Kind::of(argv))
    }
}

/// A runner whose calls get the node's declared deadlines: what an apply hands its appliers.
pub struct Deadlined<'a> {
    pub runner: &'a dyn Runner,
    pub deadlines: Deadlines,
}

impl Runner for Deadlined<'_> {
    fn run(&self, argv: &[String], cwd: &Path, env: &[(&str, &str)]) -> std::io::Result<RunOutput> {
        self.runner
            .run_within(argv, cwd, env, self.deadlines.for_argv(argv))
    }

    fn run_within(
        &self,
        argv: &[String],
        cwd: &Path,
        env: &[(&str, &str)],
        deadline: Duration,
    ) -> std::io::Result<RunOutput> {
        self.runner.run_within(argv, cwd, env, deadline)
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

/// Describes a finished child for an error message: the command as it would be typed, its status
/// and the tail of its stderr.
pub fn describe(argv: &[String], out: &RunOutput) -> String {
    let command = command_line(argv);
    let status = match out.code {
        Some(c) => format!("exited with status {c}"),
        None => "was killed by a signal".to_string(),
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stderr = stderr.trim();
    if stderr.is_empty() {
        format!("{command} {status}")
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
        format!("{command} {status}: {tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_child_past_its_deadline_is_killed_with_its_process_group() {
        let started = Instant::now();
        let e = SystemRunner
            .run_within(
                &argv(&["sh", "-c", "sleep 30 & sleep 30"]),
                Path::new("/"),
                &[],
                Duration::from_millis(200),
            )
            .unwrap_err();
        // Had the background sleep outlived the shell, it would hold stdout open and the call
        // would not return before it ended: returning at once shows the whole group went.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(
            e.to_string(),
            "sh -c \"sleep 30 & sleep 30\" did not finish within 200 ms and was killed"
        );
    }

    #[test]
    fn a_child_that_leaves_a_grandchild_holding_its_output_is_killed_at_the_deadline() {
        let started = Instant::now();
        let e = SystemRunner
            .run_within(
                &argv(&["sh", "-c", "sleep 30 & exit 0"]),
                Path::new("/"),
                &[],
                Duration::from_millis(300),
            )
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    }

    #[test]
    fn a_child_within_its_deadline_gives_its_status_and_output() {
        let out = SystemRunner
            .run_within(
                &argv(&["sh", "-c", "echo out; echo err >&2; exit 3"]),
                Path::new("/"),
                &[("X", "1")],
                Duration::from_secs(10),
            )
            .unwrap();
        assert_eq!(out.code, Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
    }

    #[test]
    fn a_child_that_writes_more_than_a_pipe_holds_is_drained() {
        let out = SystemRunner
            .run(
                &argv(&["sh", "-c", "head -c 1000000 /dev/zero"]),
                Path::new("/"),
                &[],
            )
            .unwrap();
        assert!(out.success());
        assert_eq!(out.stdout.len(), 1_000_000);
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
    }

    #[test]
    fn a_declared_deadline_reaches_the_runner() {
        struct Seen(RefCell<Vec<Duration>>);
        impl Runner for Seen {
            fn run(
                &self,
                _: &[String],
                _: &Path,
                _: &[(&str, &str)],
            ) -> std::io::Result<RunOutput> {
                unreachable!("the deadlined runner always passes a deadline")
            }
            fn run_within(
                &self,
                _: &[String],
                _: &Path,
                _: &[(&str, &str)],
                deadline: Duration,
            ) -> std::io::Result<RunOutput> {
                self.0.borrow_mut().push(deadline);
                Ok(RunOutput::default())
            }
        }
        let seen = Seen(RefCell::default());
        let r = Deadlined {
            runner: &seen,
            deadlines: Deadlines {
                service_s: Some(3),
                ..Deadlines::default()
            },
        };
        r.run(&argv(&["systemctl", "stop", "x"]), Path::new("/"), &[])
            .unwrap();
        r.run(&argv(&["sh", "-c", "true"]), Path::new("/"), &[])
            .unwrap();
        assert_eq!(
            *seen.0.borrow(),
            [Duration::from_secs(3), Duration::from_secs(600)]
        );
    }
}
