//! Running programs from argv arrays: bounded runs through the workspace's `run` crate, captured
//! output, errors that carry the program, its arguments, its exit status and its stderr, and
//! background processes (daemons, listeners, started here with `Command` since they outlive any
//! deadline) killed with their process group on drop.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How long a foreground program may run before it is killed; generous because two cores are shared
/// with concurrent builds, bounded because a hung `docker` or `nft` must fail a test, not stall it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(180);

/// What a finished program printed and how it ended.
#[derive(Debug, Clone)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// Whether the program exited with status 0.
    pub fn success(&self) -> bool {
        self.status.success()
    }
}

/// The program as a person would name it in an error: inside which namespace, which program, which
/// arguments (the `nsenter` wrapper is left out because it is never the interesting part).
#[derive(Debug, Clone)]
pub(crate) struct Described {
    pub namespace: Option<String>,
    pub program: String,
    pub args: Vec<String>,
}

impl Described {
    pub fn of_argv<S: AsRef<OsStr>>(namespace: Option<&str>, argv: &[S]) -> Self {
        let mut words = argv
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned());
        Described {
            namespace: namespace.map(str::to_owned),
            program: words.next().unwrap_or_default(),
            args: words.collect(),
        }
    }

    pub fn of_command(cmd: &Command) -> Self {
        Described {
            namespace: None,
            program: cmd.get_program().to_string_lossy().into_owned(),
            args: cmd
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
        }
    }

    pub fn spawn_error(&self, source: std::io::Error) -> Error {
        Error::Spawn {
            namespace: self.namespace.clone(),
            program: self.program.clone(),
            args: self.args.clone(),
            source,
        }
    }

    pub fn failed(&self, output: &Output) -> Error {
        Error::Failed {
            namespace: self.namespace.clone(),
            program: self.program.clone(),
            args: self.args.clone(),
            status: output.status.to_string(),
            stderr: output.stderr.trim_end().to_owned(),
        }
    }

    fn timed_out(&self, waited: Duration) -> Error {
        Error::ProgramTimedOut {
            namespace: self.namespace.clone(),
            program: self.program.clone(),
            args: self.args.clone(),
            waited,
        }
    }
}

/// Runs a prepared command to completion within [`DEFAULT_TIMEOUT`] and returns its output whatever
/// its exit status; an error only when it could not start or had to be killed.
pub fn run(cmd: &mut Command) -> Result<Output> {
    let what = Described::of_command(cmd);
    run_described(cmd, &what, DEFAULT_TIMEOUT)
}

/// Like [`run`], but a non-zero exit status is an error carrying the program, arguments and stderr.
pub fn run_ok(cmd: &mut Command) -> Result<Output> {
    let what = Described::of_command(cmd);
    ok(run_described(cmd, &what, DEFAULT_TIMEOUT)?, &what)
}

pub(crate) fn ok(output: Output, what: &Described) -> Result<Output> {
    if output.success() {
        Ok(output)
    } else {
        Err(what.failed(&output))
    }
}

/// Runs a prepared command through the `run` crate (its process group killed at `timeout`, the
/// wait covering its output as well as its exit), its stdin as the command has it.
pub(crate) fn run_described(
    cmd: &mut Command,
    what: &Described,
    timeout: Duration,
) -> Result<Output> {
    match run::command(cmd, None, timeout) {
        Ok(out) => Ok(Output {
            status: exit_status(&out),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(what.timed_out(timeout)),
        Err(e) => Err(what.spawn_error(e)),
    }
}

/// The status `run` reported, as the `ExitStatus` the lab's callers read.
fn exit_status(out: &run::Output) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    // The wait status encoding: the exit code in the second byte, or the signal in the first.
    ExitStatus::from_raw(match (out.code, out.signal) {
        (Some(code), _) => (code & 0xff) << 8,
        (None, Some(signal)) => signal & 0x7f,
        (None, None) => 0,
    })
}

/// Waits for a background [`Process`] at most `timeout`; `None` when it is still running.
pub(crate) fn wait_bounded(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            // An error from waitpid means the child is gone from our view; treat it as finished.
            Err(_) => return None,
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(25));
    }
}

/// Whether a program is on PATH, so a missing package is named before anything runs.
pub(crate) fn on_path(program: &str) -> bool {
    which(program).is_some()
}

/// The caller's PATH with `dir` put first, for a program that must find what `dir` holds before
/// the machine's own (links to another iptables, a stand-in for systemctl).
pub(crate) fn path_with_first(dir: &Path) -> std::ffi::OsString {
    let mut path = dir.as_os_str().to_owned();
    if let Some(rest) = std::env::var_os("PATH") {
        path.push(":");
        path.push(rest);
    }
    path
}

/// Where a program is on PATH.
pub(crate) fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

pub(crate) fn require(program: &str, package: &str) -> Result<()> {
    if on_path(program) {
        Ok(())
    } else {
        Err(Error::MissingProgram {
            program: program.to_owned(),
            package: package.to_owned(),
        })
    }
}

/// The pids of background processes a lab started and has not yet reaped, so the lab can kill them
/// even when a test leaked or forgot the handle.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    next: AtomicU64,
    pids: Mutex<HashMap<u64, i32>>,
}

impl Registry {
    fn add(&self, pid: i32) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.pids).insert(id, pid);
        id
    }

    fn remove(&self, id: u64) {
        lock(&self.pids).remove(&id);
    }

    /// Kills every registered process group; the handles still reap them when dropped, and until
    /// then the zombie keeps the pid from being reused, so this never hits a stranger.
    pub fn kill_all(&self) {
        for pid in lock(&self.pids).values() {
            kill_group(*pid, libc::SIGKILL);
        }
    }
}

/// Locks a mutex even if a panicking test poisoned it: teardown must still run.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn kill_group(pid: i32, signal: i32) {
    // SAFETY: kill has no memory effects; a negative pid addresses the process group the lab gave
    // the child at spawn, and the plain pid covers a child that moved to another group.
    unsafe {
        libc::kill(-pid, signal);
        libc::kill(pid, signal);
    }
}

/// A background program started by the lab (a listener, a daemon); killed with its process group
/// and reaped on drop.
#[derive(Debug)]
pub struct Process {
    child: Child,
    what: Described,
    log: PathBuf,
    registration: Option<(Arc<Registry>, u64)>,
}

impl Process {
    pub(crate) fn spawn(
        mut cmd: Command,
        what: Described,
        log: PathBuf,
        registry: Arc<Registry>,
    ) -> Result<Process> {
        use std::os::unix::process::CommandExt;
        let out = File::create(&log).map_err(|e| Error::io(&log, e))?;
        let err = out.try_clone().map_err(|e| Error::io(&log, e))?;
        // Its own process group, so the lab can kill what the program forks along with it.
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = cmd.spawn().map_err(|e| what.spawn_error(e))?;
        let id = registry.add(child.id() as i32);
        Ok(Process {
            child,
            what,
            log,
            registration: Some((registry, id)),
        })
    }

    /// The process id (that of the program itself: `nsenter` execs it rather than forking).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The file receiving the program's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// What the program has printed so far, stdout and stderr interleaved.
    pub fn log(&self) -> String {
        std::fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_else(|e| format!("(cannot read log {}: {e})", self.log.display()))
    }

    /// Whether the program is still running (reaps it if it exited).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Asks the program to stop with SIGTERM, waits up to `grace`, then kills its process group.
    pub fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        // SAFETY: signalling our own unreaped child cannot reach another process.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = wait_bounded(&mut self.child, grace);
        self.kill();
        status.or_else(|| self.child.wait().ok())
    }

    /// Kills the program's process group and reaps it.
    pub fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            kill_group(self.child.id() as i32, libc::SIGKILL);
        }
        let _ = self.child.wait();
        if let Some((registry, id)) = self.registration.take() {
            registry.remove(id);
        }
    }

    pub(crate) fn described(&self) -> String {
        format!("{} {}", self.what.program, self.what.args.join(" "))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}
