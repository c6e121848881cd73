//! Failpoints for the crash-safety tests: kill the process at a named boundary of a resource.
//!
//! `MESH_HOST_FAILPOINT=after-change:ID` sends SIGKILL to the host right after resource `ID`
//! changed the machine and before that was recorded; `after-record:ID` right after the record
//! reached the store. A `#N` suffix picks the N-th such boundary of that resource (a found file
//! that is replaced has two: its original saved, then its new content written).
//!
//! The store has boundaries of its own: `append:ID` kills the host before a journal line about
//! resource `ID` is written, `torn-append:ID` after half of it was written (a line cut short),
//! `fold-torn:store` after half of a new snapshot reached its temporary file, and
//! `fold-renamed:store` after the new snapshot was renamed into place and before the journal it
//! replaces was removed. The flip has `flip:saved` (the found firewall saved, nothing else done),
//! `flip:loaded` (the filter loaded and the found firewall retired, the store not yet told) and
//! `return:restored` (the found firewall back, the store not yet told). Nothing else reads this variable, and when it is unset every call here
//! is a comparison and nothing more.

use std::sync::Mutex;

static SEEN: Mutex<Vec<(String, usize)>> = Mutex::new(Vec::new());

/// The environment variable that arms a failpoint.
pub const VAR: &str = "MESH_HOST_FAILPOINT";

/// Called at each boundary; kills the process if this boundary is the armed one.
pub fn hit(kind: &str, id: &str) {
    if armed(kind, id) {
        kill();
    }
}

/// Whether this boundary is the armed one (counting it), for a boundary that must do something
/// of its own before the kill, such as leaving half a line in the store's journal.
pub fn armed(kind: &str, id: &str) -> bool {
    #[cfg(test)]
    if let Some(hit) = here::armed(kind, id) {
        return hit;
    }
    let Ok(spec) = std::env::var(VAR) else {
        return false;
    };
    let (point, nth) = match spec.rsplit_once('#') {
        Some((p, n)) => (p.to_string(), n.parse::<usize>().unwrap_or(1)),
        None => (spec.clone(), 1),
    };
    let here = format!("{kind}:{id}");
    if point != here {
        return false;
    }
    let count = {
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        match seen.iter_mut().find(|(p, _)| *p == here) {
            Some((_, n)) => {
                *n += 1;
                *n
            }
            None => {
                seen.push((here.clone(), 1));
                1
            }
        }
    };
    if count == nth {
        tracing::warn!(failpoint = %here, nth, "failpoint reached; killing the host");
    }
    count == nth
}

/// Kills the host at once, as a power cut or the OOM killer would.
pub fn kill() -> ! {
    #[cfg(test)]
    here::unwind();
    let _ = nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::Signal::SIGKILL);
    unreachable!("SIGKILL is not survived")
}

/// Failpoints armed by a unit test in its own thread, so an in-process apply stops at a boundary
/// as a killed host would (its store's lock and files let go by the unwinding): what the store
/// holds on disk then is what a kill there leaves. Other tests' threads, and the environment
/// variable, are not affected.
#[cfg(test)]
pub mod here {
    use std::cell::RefCell;

    /// The panic an armed boundary unwinds with.
    #[derive(Debug)]
    pub struct Killed;

    thread_local! {
        /// The armed point, the N-th boundary of it that kills, and how many were seen.
        static ARMED: RefCell<Option<(String, usize, usize)>> = const { RefCell::new(None) };
    }

    /// Arms `point` (`KIND:ID#N`, as the environment variable) in this thread until the guard
    /// is dropped.
    pub fn arm(point: &str) -> Disarm {
        let (p, nth) = match point.rsplit_once('#') {
            Some((p, n)) => (p.to_string(), n.parse().unwrap_or(1)),
            None => (point.to_string(), 1),
        };
        ARMED.with(|a| *a.borrow_mut() = Some((p, nth, 0)));
        Disarm
    }

    /// Disarms this thread's failpoint when dropped.
    pub struct Disarm;

    impl Drop for Disarm {
        fn drop(&mut self) {
            ARMED.with(|a| *a.borrow_mut() = None);
        }
    }

    /// `Some(hit)` when a failpoint is armed in this thread (the environment is then not read).
    pub(super) fn armed(kind: &str, id: &str) -> Option<bool> {
        ARMED.with(|a| {
            let mut a = a.borrow_mut();
            let (point, nth, seen) = a.as_mut()?;
            if *point != format!("{kind}:{id}") {
                return Some(false);
            }
            *seen += 1;
            Some(*seen == *nth)
        })
    }

    /// Unwinds with [`Killed`] when this thread armed the failpoint being hit.
    pub(super) fn unwind() {
        if ARMED.with(|a| a.borrow().is_some()) {
            std::panic::panic_any(Killed);
        }
    }
}
