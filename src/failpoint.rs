//! Failpoints for the crash-safety tests: kill the process at a named boundary of a resource.
//!
//! `MESH_HOST_FAILPOINT=after-change:ID` sends SIGKILL to the host right after resource `ID`
//! changed the machine and before that was recorded; `after-record:ID` right after the record
//! reached the store. A `#N` suffix picks the N-th such boundary of that resource (a found file
//! that is replaced has two: its original saved, then its new content written). Nothing else
//! reads this variable, and when it is unset every call here is a comparison and nothing more.

use std::sync::Mutex;

static SEEN: Mutex<Vec<(String, usize)>> = Mutex::new(Vec::new());

/// The environment variable that arms a failpoint.
pub const VAR: &str = "MESH_HOST_FAILPOINT";

/// Called at each boundary; kills the process if this boundary is the armed one.
pub fn hit(kind: &str, id: &str) {
    let Ok(spec) = std::env::var(VAR) else { return };
    let (point, nth) = match spec.rsplit_once('#') {
        Some((p, n)) => (p.to_string(), n.parse::<usize>().unwrap_or(1)),
        None => (spec.clone(), 1),
    };
    let here = format!("{kind}:{id}");
    if point != here {
        return;
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
        // SAFETY: sending a signal to our own process.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}
