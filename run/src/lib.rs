//! The workspace's one way of starting a child process: an argv array (never a shell line), a
//! working directory, environment added, optional input, and one deadline over writing the
//! input, reading the output and waiting, the child's process group killed at it with whatever
//! the child started that left the group; what is kept of its output bounded however much it
//! prints. The core, the firewall engine and the lab's
//! bounded runs all start their children here.

mod capture;
mod deadlines;
pub mod interrupt;
mod leftovers;
mod progress;
mod runner;
mod spawn;

pub use capture::{Keep, PastLimit, EXCERPT_BYTES, WHOLE_LIMIT};
pub use deadlines::{Deadlines, Kind};
pub use leftovers::{LeftBehind, MARK};
pub use progress::{set_progress_hook, Hook, Progress, REPORT_AFTER, REPORT_EVERY};
pub use runner::{
    describe, excerpt, on_path, Call, Deadlined, RecordingRunner, Runner, SystemRunner,
};
pub use spawn::{command, command_keeping, command_line, seconds, Output, PastDeadline};

#[cfg(test)]
mod tests;
