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
    let _ = nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::Signal::SIGKILL);
    unreachable!("SIGKILL is not survived")
}
