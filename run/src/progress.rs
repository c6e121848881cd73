//! Progress of long children: a process-wide hook told when a child has run past
//! [`REPORT_AFTER`], then about once a second while it runs, and once when it ends. The product
//! binary sets it (`mesh-host`'s `progress` module), so an install of fifteen minutes shows what
//! runs and for how long; libraries and tests leave it unset and nothing is reported.

use std::sync::OnceLock;
use std::time::Duration;

/// How long a child runs before it is reported.
pub const REPORT_AFTER: Duration = Duration::from_secs(3);

/// How often a running child is reported again.
pub const REPORT_EVERY: Duration = Duration::from_secs(1);

/// What the hook is told.
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    /// The child is still running after `elapsed`.
    Running {
        argv: &'a [String],
        elapsed: Duration,
    },
    /// A child that was reported has ended (exited, or killed at its deadline) after `elapsed`.
    Ended {
        argv: &'a [String],
        elapsed: Duration,
    },
}

/// The hook's type: called on the thread that runs the child.
pub type Hook = fn(Progress<'_>);

static HOOK: OnceLock<Hook> = OnceLock::new();

/// Sets the process's progress hook; the first call wins.
pub fn set_progress_hook(hook: Hook) {
    let _ = HOOK.set(hook);
}

/// The hook, when one is set.
pub(crate) fn hook() -> Option<Hook> {
    HOOK.get().copied()
}
