//! Why a stop waits: the resident host reads SIGTERM only between applies (it never cuts one
//! half way), so a stop that comes during one would otherwise wait in silence, for as long as a
//! package install may take. While an apply runs, a watcher looks at the signals pending for the
//! process (without taking them: the loop reads them after the apply), and once a stop is among
//! them it says "stopping: waiting for …" with what is under way, again every 30 s.

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the wait is said again.
const SAY_EVERY: Duration = Duration::from_secs(30);

/// Runs `apply` (`what`: "the reconcile", "the declaration from the link") while a watcher on
/// `signals` (the resident host's signalfd) says a stop's wait.
pub(super) fn watching<T>(signals: BorrowedFd<'_>, what: &str, apply: impl FnOnce() -> T) -> T {
    let done = AtomicBool::new(false);
    let begun = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| watch(signals, what, begun, &done));
        let out = apply();
        done.store(true, Ordering::Release);
        out
    })
}

fn watch(signals: BorrowedFd<'_>, what: &str, begun: Instant, done: &AtomicBool) {
    let mut said: Option<Instant> = None;
    while !done.load(Ordering::Acquire) {
        let mut fds = [PollFd::new(signals, PollFlags::POLLIN)];
        let ready = poll(&mut fds, PollTimeout::from(100u16)).is_ok_and(|n| n > 0);
        if !ready {
            continue;
        }
        if stop_pending() && said.is_none_or(|t| t.elapsed() >= SAY_EVERY) {
            let step = crate::progress::current()
                .map(|(step, running)| {
                    format!(
                        "; its step under way, {step}, has run for {}",
                        link::human::duration(running.as_secs())
                    )
                })
                .unwrap_or_default();
            tracing::info!(
                "stopping: waiting for {what} under way to end (begun {} ago{step}); an apply is \
                 never cut half way, and the host exits once it has ended",
                link::human::duration(begun.elapsed().as_secs())
            );
            said = Some(Instant::now());
        }
        // The signalfd stays readable until the loop reads it: look again in a while, not in a
        // busy loop.
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether SIGTERM or SIGINT is pending for the process (`/proc/self/status`, `ShdPnd`: the
/// signals sent to the process, blocked in every thread and not yet read).
fn stop_pending() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("ShdPnd:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|mask| {
            let bit = |sig: nix::sys::signal::Signal| 1u64 << (sig as i32 - 1);
            mask & (bit(nix::sys::signal::Signal::SIGTERM) | bit(nix::sys::signal::Signal::SIGINT))
                != 0
        })
}
