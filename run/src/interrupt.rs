//! Interrupts of an act a person runs: SIGINT and SIGTERM caught (once [`forward`] is called),
//! passed on to the process group of every child running at that moment, and remembered, so the
//! caller stops at its next boundary instead of dying with its child still running.
//!
//! A child is spawned in a process group of its own ([`crate::command`]), so a terminal's Ctrl-C
//! or a SIGTERM to the host alone never reaches it: the handler sends it there. The first signal
//! is passed on as it came; any further one kills those groups (SIGKILL), for an operator who will
//! not wait for the child to finish. Children started after the first signal are not signalled by
//! it: they belong to what the caller does on its way out.

use std::io;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering::SeqCst};

/// How many children may run at once and still be reached; more are run but not signalled.
const SLOTS: usize = 32;
static GROUPS: [AtomicI32; SLOTS] = [const { AtomicI32::new(0) }; SLOTS];
/// The first interrupt's signal, 0 before one came.
static FIRST: AtomicI32 = AtomicI32::new(0);
/// How many interrupts came.
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// Catches SIGINT and SIGTERM for the rest of the process's life: each is passed on to the
/// children running, and [`signal`] says the first one came. Without this call the two keep their
/// default (the process ends; its children get `PR_SET_PDEATHSIG`'s SIGKILL).
pub fn forward() -> io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler only touches atomics and calls
        // kill(2), which is async-signal-safe. SA_RESTART keeps every call it interrupts going
        // (a wait on the store's lock, a read of a child's output).
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            act.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut act.sa_mask);
            if libc::sigaction(sig, &act, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// The first interrupt caught since [`forward`], if one was: SIGINT or SIGTERM.
pub fn signal() -> Option<i32> {
    match FIRST.load(SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// The name of a signal number as a person reads it.
pub fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGKILL => "SIGKILL".into(),
        s => format!("signal {s}"),
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    let before = COUNT.fetch_add(1, SeqCst);
    let _ = FIRST.compare_exchange(0, sig, SeqCst, SeqCst);
    let to = if before == 0 { sig } else { libc::SIGKILL };
    for g in &GROUPS {
        let group = g.load(SeqCst);
        if group > 0 {
            // SAFETY: kill(2) is async-signal-safe and has no memory effects.
            unsafe {
                libc::kill(-group, to);
            }
        }
    }
}

/// How many interrupts came so far: read before a child is started, to catch one that comes
/// while it is being started.
pub(crate) fn seen() -> usize {
    COUNT.load(SeqCst)
}

/// A running child's group, reachable by the handler until [`Reachable::clear`] (called before
/// the child is reaped, so its id never names another group) or drop.
pub(crate) struct Reachable(Option<usize>);

impl Reachable {
    /// Makes `group` reachable. An interrupt that came since `seen` (while the child was being
    /// started, before the handler could see it) is passed on here.
    pub(crate) fn new(group: i32, seen: usize) -> Reachable {
        let slot = GROUPS
            .iter()
            .position(|g| g.compare_exchange(0, group, SeqCst, SeqCst).is_ok());
        let now = COUNT.load(SeqCst);
        if now != seen {
            let to = if now > 1 {
                libc::SIGKILL
            } else {
                FIRST.load(SeqCst)
            };
            // SAFETY: as in the handler; `group` is the unreaped child's own group.
            unsafe {
                libc::kill(-group, to);
            }
        }
        Reachable(slot)
    }

    pub(crate) fn clear(&mut self) {
        if let Some(i) = self.0.take() {
            GROUPS[i].store(0, SeqCst);
        }
    }
}

impl Drop for Reachable {
    fn drop(&mut self) {
        self.clear();
    }
}
