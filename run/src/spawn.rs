//! The one implementation of starting a child: spawned in a process group of its own, killed
//! (`PR_SET_PDEATHSIG`) if the thread that started it dies first, its input written and its output
//! read on one thread with `poll(2)`, all of it within one deadline, at which the whole group is
//! killed, and with it whatever the child started that left the group (`leftovers`); reachable by
//! an interrupt the process catches (`interrupt`) while it runs.

use crate::capture::{Capture, Keep, PastLimit};
use std::ffi::OsStr;
use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What a finished child left behind.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Output {
    /// The exit code, or `None` when a signal ended it.
    pub code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Output {
    /// Whether the child exited with status 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// How the child ended, as a message says it: "exited with status 3", "was killed by signal
    /// 9".
    pub fn status_text(&self) -> String {
        match (self.code, self.signal) {
            (Some(c), _) => format!("exited with status {c}"),
            (None, Some(s)) => format!("was killed by signal {s}"),
            (None, None) => "was killed by a signal".to_string(),
        }
    }
}

/// Why a call failed at its deadline: the error inside an [`io::ErrorKind::TimedOut`], so a
/// caller that wants the parts (an adapter with an error type of its own) can downcast to it.
#[derive(Debug)]
pub struct PastDeadline {
    pub argv: Vec<String>,
    pub deadline: Duration,
    /// How the child itself had ended when the deadline came, if it had: then something it
    /// started (a daemonising helper, a hung hook) was still holding its output.
    pub exited: Option<String>,
    /// What the child had written on stderr by then.
    pub stderr: Vec<u8>,
    /// The processes it had started that had left its process group (`setsid`), killed with
    /// it.
    pub left_behind: Vec<crate::LeftBehind>,
}

impl PastDeadline {
    /// "did not finish within 2 s and was killed", with why when the child itself had ended.
    pub fn status_text(&self) -> String {
        let mut text = format!(
            "did not finish within {} and was killed",
            seconds(self.deadline)
        );
        if let Some(exited) = &self.exited {
            text.push_str(&format!(
                " (it had {exited}, but a process it started still held its output)"
            ));
        }
        if let Some(killed) = crate::leftovers::said(&self.left_behind) {
            text.push_str(&format!("; {killed}"));
        }
        text
    }
}

impl fmt::Display for PastDeadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", command_line(&self.argv), self.status_text())
    }
}

impl std::error::Error for PastDeadline {}

/// Runs a prepared command to completion within `deadline`, with `stdin` fed to it when given
/// (else its stdin is left as the command has it). Its stdout is captured whole up to
/// [`crate::WHOLE_LIMIT`] (past it the call fails with [`PastLimit`]), its stderr as an excerpt
/// (see [`command_keeping`]).
///
/// The child runs in a process group of its own. The deadline covers everything: writing its
/// input, reading its output and waiting for it. Past it the whole group is killed and the call
/// fails with [`io::ErrorKind::TimedOut`] holding a [`PastDeadline`], which names the command and
/// the deadline. Nothing is waited for after that: a grandchild that keeps the output open is
/// killed with the group, and one that left the group holds nothing of this call (no thread
/// reads for it). A child that could not be started gives the error `spawn` gave.
///
/// The child never outlives the host: it is sent SIGKILL when the thread that started it ends
/// (the whole process ending included). That reaches the child itself, not what it started.
pub fn command(cmd: &mut Command, stdin: Option<&[u8]>, deadline: Duration) -> io::Result<Output> {
    command_keeping(cmd, stdin, deadline, Keep::WHOLE)
}

/// [`command`], keeping of stdout what `stdout` says. Stderr is always kept as
/// [`Keep::EXCERPT`]: its first and last 64 KiB, with the count of the bytes dropped between.
/// Every stream is read to its end whatever is kept, so memory stays bounded however much the
/// child prints; a [`Keep::Whole`] past its limit fails the call with [`PastLimit`] once the
/// child ended (it is not killed for it: what it was doing is let finish).
pub fn command_keeping(
    cmd: &mut Command,
    stdin: Option<&[u8]>,
    deadline: Duration,
    stdout: Keep,
) -> io::Result<Output> {
    let argv: Vec<String> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a: &OsStr| a.to_string_lossy().into_owned())
        .collect();
    if stdin.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mark = format!(
        "{}.{}",
        std::process::id(),
        CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env(crate::leftovers::MARK, &mark)
        .process_group(0);
    let parent = std::process::id() as libc::pid_t;
    let image = Image::of(cmd);
    // SAFETY: the closure runs in the forked child before exec and makes only async-signal-safe
    // system calls (prctl, getppid, execv) on memory made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent died before the setting was made: nobody would kill this child.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            // What the child starts and leaves (a double fork's daemon) is handed to the child,
            // not to init, while the child lives: still its descendant when the deadline comes.
            // Kept across exec.
            if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) != 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(image) = &image {
                // Returns only when it failed.
                libc::execve(
                    image.path.as_ptr(),
                    image.argv.as_ptr(),
                    image.envp.as_ptr(),
                );
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let seen = crate::interrupt::seen();
    let started = Instant::now();
    let mut child = cmd.spawn()?;
    let mut reachable = crate::interrupt::Reachable::new(child.id() as i32, seen);
    let mut told = Told::new(&argv, started);
    let result = supervise(
        &mut child,
        stdin,
        started,
        deadline,
        stdout,
        &mut told,
        &mut reachable,
    );
    told.ended();
    if let Ok(Ok(ended)) = result {
        return ended.output(&argv);
    }
    // The child is not reaped yet, so its pid, the group's id, still names this group.
    let exited = exited_unreaped(child.id() as i32);
    // SAFETY: kill(2) has no memory effects; the negative id is the child's own process group
    // (`process_group(0)` made it equal to the unreaped child's pid).
    unsafe {
        libc::kill(-(child.id() as i32), libc::SIGSTOP);
    }
    // What left the group (`setsid`, `setpgid`) is found and killed as well, named.
    let left_behind = crate::leftovers::kill_all(child.id() as i32, &mark, exited.is_some());
    // SAFETY: as above.
    unsafe {
        libc::kill(-(child.id() as i32), libc::SIGKILL);
    }
    // A child that moved to a group of its own goes too.
    let _ = child.kill();
    reachable.clear();
    let _ = child.wait();
    match result {
        Ok(Err(stderr)) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            PastDeadline {
                argv,
                deadline,
                exited,
                left_behind,
                stderr: stderr.finish().unwrap_or_default(),
            },
        )),
        Err(e) => Err(e),
        Ok(Ok(_)) => unreachable!("returned above"),
    }
}

/// The number of the next call, for its mark.
static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A child that exited, with what was kept of its output.
struct Ended {
    status: std::process::ExitStatus,
    stdout: Capture,
    stderr: Capture,
}

impl Ended {
    fn output(self, argv: &[String]) -> io::Result<Output> {
        use std::os::unix::process::ExitStatusExt;
        let mut out = Output {
            code: self.status.code(),
            signal: self.status.signal(),
            stdout: Vec::new(),
            stderr: self.stderr.finish().unwrap_or_default(),
        };
        let limit = self.stdout.limit();
        match self.stdout.finish() {
            Ok(kept) => out.stdout = kept,
            Err(printed) => {
                return Err(io::Error::other(PastLimit {
                    argv: argv.to_vec(),
                    limit,
                    printed,
                    status: out.status_text(),
                }))
            }
        }
        Ok(out)
    }
}

/// The file a child execs, its argv and its environment, made before the fork. A child set up by
/// a closure is started by `fork` and the standard library's `execvp`, which runs a file of no
/// executable format through `/bin/sh`: a binary for another machine would be read as a shell
/// script. The child execs this itself with `execve`, which fails with ENOEXEC instead, as the
/// `posix_spawnp` the standard library uses without a closure does. The environment is this
/// process's with the command's own variables set or removed (`env_clear` is not seen here: a
/// command given it still gets this process's environment).
struct Image {
    path: std::ffi::CString,
    /// Pointers into `_args`, ended by a null pointer.
    argv: Vec<*const libc::c_char>,
    /// Pointers into `_vars`, ended by a null pointer.
    envp: Vec<*const libc::c_char>,
    _args: Vec<std::ffi::CString>,
    _vars: Vec<std::ffi::CString>,
}

// SAFETY: the pointers point into the heap buffers of `_args` and `_vars`, owned by the same value
// and never changed; the child only reads them.
unsafe impl Send for Image {}
unsafe impl Sync for Image {}

impl Image {
    /// The program resolved as `execvp` resolves it (the PATH the command is given, else this
    /// process's); `None` when it is not found there (the standard library's exec then says
    /// so), or an argument holds a NUL (and the standard library refuses it).
    fn of(cmd: &Command) -> Option<Image> {
        use std::os::unix::ffi::OsStrExt;
        let program = cmd.get_program();
        let path = if program.as_bytes().contains(&b'/') {
            std::path::PathBuf::from(program)
        } else {
            let given = cmd
                .get_envs()
                .find(|(k, _)| *k == "PATH")
                .and_then(|(_, v)| v.map(OsStr::to_os_string));
            let paths = given
                .or_else(|| std::env::var_os("PATH"))
                .unwrap_or_else(|| {
                    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()
                });
            std::env::split_paths(&paths)
                .map(|d| d.join(program))
                .find(|p| {
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::metadata(p)
                        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                })?
        };
        let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
        let args = std::iter::once(program)
            .chain(cmd.get_args())
            .map(|a| std::ffi::CString::new(a.as_bytes()).ok())
            .collect::<Option<Vec<_>>>()?;
        let mut env: std::collections::BTreeMap<std::ffi::OsString, std::ffi::OsString> =
            std::env::vars_os().collect();
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => env.insert(k.to_os_string(), v.to_os_string()),
                None => env.remove(k),
            };
        }
        let vars = env
            .iter()
            .map(|(k, v)| std::ffi::CString::new([k.as_bytes(), b"=", v.as_bytes()].concat()).ok())
            .collect::<Option<Vec<_>>>()?;
        let nul_ended = |cs: &[std::ffi::CString]| {
            cs.iter()
                .map(|a| a.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        };
        Some(Image {
            path,
            argv: nul_ended(&args),
            envp: nul_ended(&vars),
            _args: args,
            _vars: vars,
        })
    }
}

/// Feeds the input, reads the output and waits for the child until the deadline: its output once
/// both pipes closed and the child exited (reaped then), or at the deadline what it wrote on
/// stderr so far (the caller kills the group).
fn supervise(
    child: &mut Child,
    stdin: Option<&[u8]>,
    started: Instant,
    deadline: Duration,
    keep: Keep,
    told: &mut Told<'_>,
    reachable: &mut crate::interrupt::Reachable,
) -> io::Result<Result<Ended, Capture>> {
    let mut input = match (stdin, child.stdin.take()) {
        (Some(bytes), Some(pipe)) => {
            set_nonblocking(&pipe)?;
            Some((bytes, pipe))
        }
        _ => None,
    };
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let (mut stdout, mut stderr) = (Capture::new(keep), Capture::new(Keep::EXCERPT));
    let mut buf = vec![0u8; 64 * 1024];
    let mut pause = Duration::from_millis(1);
    loop {
        // Seen exited before it is reaped: past the reap its id may name another group.
        if out.is_none() && err.is_none() && exited_unreaped(child.id() as i32).is_some() {
            reachable.clear();
            if let Some(status) = child.try_wait()? {
                return Ok(Ok(Ended {
                    status,
                    stdout,
                    stderr,
                }));
            }
        }
        let left = deadline.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Ok(Err(stderr));
        }
        told.tick();
        let mut fds = Vec::with_capacity(3);
        let watch = |fd: i32, events: i16| libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        if let Some(p) = &out {
            fds.push(watch(p.as_raw_fd(), libc::POLLIN));
        }
        if let Some(p) = &err {
            fds.push(watch(p.as_raw_fd(), libc::POLLIN));
        }
        if let Some((_, p)) = &input {
            fds.push(watch(p.as_raw_fd(), libc::POLLOUT));
        }
        // With both outputs closed only the child's exit is left to see, which poll cannot
        // watch: look again after a short pause, growing to 20 ms.
        let wait = if out.is_none() && err.is_none() {
            let w = left.min(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
            w
        } else {
            left
        };
        let wait = told.until_next().map_or(wait, |n| wait.min(n));
        let ms = wait.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: `fds` is a live array of `fds.len()` pollfd structs for the duration of the
        // call; poll only writes their `revents`.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let ready = |fd: i32| fds.iter().find(|p| p.fd == fd).map_or(0, |p| p.revents);
        if let Some(p) = &mut out {
            if ready(p.as_raw_fd()) != 0 && !drain(p, &mut buf, &mut stdout) {
                out = None;
            }
        }
        if let Some(p) = &mut err {
            if ready(p.as_raw_fd()) != 0 && !drain(p, &mut buf, &mut stderr) {
                err = None;
            }
        }
        if let Some((bytes, pipe)) = &mut input {
            let revents = ready(pipe.as_raw_fd());
            if revents & libc::POLLOUT != 0 {
                match pipe.write(bytes) {
                    Ok(n) => *bytes = &bytes[n..],
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    // A child that exits without reading its input is judged by its status.
                    Err(_) => *bytes = &[],
                }
            } else if revents != 0 {
                *bytes = &[];
            }
            if bytes.is_empty() {
                // Closing the pipe is the end of the input the child reads.
                input = None;
            }
        }
    }
}

/// Reads what one pipe has into what is kept of it; false once it is closed (end of file or an
/// error).
fn drain(pipe: &mut impl Read, buf: &mut [u8], into: &mut Capture) -> bool {
    match pipe.read(buf) {
        Ok(0) => false,
        Ok(n) => {
            into.push(&buf[..n]);
            true
        }
        Err(e) => matches!(
            e.kind(),
            io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
        ),
    }
}

fn set_nonblocking(pipe: &impl AsRawFd) -> io::Result<()> {
    let fd = pipe.as_raw_fd();
    // SAFETY: fcntl on a descriptor this process owns (the pipe's write end), changing only its
    // status flags; the child's end is another open file description and keeps blocking reads.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// How the child ended, if it has, without reaping it: "exited with status 0".
fn exited_unreaped(pid: i32) -> Option<String> {
    // SAFETY: a zeroed siginfo_t is a valid value for waitid to fill; WNOWAIT leaves the child
    // waitable, so the pid stays reserved for the kill that follows.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        if r != 0 || info.si_pid() == 0 {
            return None;
        }
        Some(if info.si_code == libc::CLD_EXITED {
            format!("exited with status {}", info.si_status())
        } else {
            format!("been killed by signal {}", info.si_status())
        })
    }
}

/// A deadline as an operator writes it: whole seconds, or milliseconds below one second.
pub fn seconds(d: Duration) -> String {
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

/// The progress hook's view of one child: reported once it passed [`REPORT_AFTER`], again
/// every [`REPORT_EVERY`], and at its end if it was reported at all.
struct Told<'a> {
    argv: &'a [String],
    started: Instant,
    hook: Option<crate::Hook>,
    next: Duration,
    reported: bool,
}

impl<'a> Told<'a> {
    fn new(argv: &'a [String], started: Instant) -> Told<'a> {
        Told {
            argv,
            started,
            hook: crate::progress::hook(),
            next: crate::REPORT_AFTER,
            reported: false,
        }
    }

    /// How long until the next report is due, when a hook listens.
    fn until_next(&self) -> Option<Duration> {
        self.hook?;
        Some(self.next.saturating_sub(self.started.elapsed()))
    }

    fn tick(&mut self) {
        let Some(hook) = self.hook else { return };
        let elapsed = self.started.elapsed();
        if elapsed >= self.next {
            hook(crate::Progress::Running {
                argv: self.argv,
                elapsed,
            });
            self.reported = true;
            self.next = elapsed + crate::REPORT_EVERY;
        }
    }

    fn ended(&self) {
        if let (Some(hook), true) = (self.hook, self.reported) {
            hook(crate::Progress::Ended {
                argv: self.argv,
                elapsed: self.started.elapsed(),
            });
        }
    }
}
