//! The resident host's pid file beside the store, and the signal a command sends through it: how
//! `mesh-host apply`, `converge` or `enrol` tell a running `mesh-host run` that the store changed.

use crate::store;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};

/// The file beside the store that names the resident host's pid, for `mesh-host apply` to
/// rouse it after storing a new declaration.
pub fn pid_file(root: &Path) -> PathBuf {
    store::store_dir(root).join("run.pid")
}

/// Tells a resident host on this root that a new declaration is stored (SIGUSR1), if one runs.
/// Returns whether one was told.
pub fn tell_resident(root: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(pid_file(root)) else {
        return false;
    };
    let Ok(pid) = text.trim().parse::<i32>() else {
        return false;
    };
    if pid <= 1 || pid == std::process::id() as i32 {
        return false;
    }
    // Only a process that is mesh-host, so a stale pid file never signals a stranger.
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if comm.trim() != "mesh-host" {
        return false;
    }
    kill(Pid::from_raw(pid), Signal::SIGUSR1).is_ok()
}
