//! The resident host's claim on a store and its pid file beside it, and the signal a command
//! sends through that file: one `mesh-host run` per store, and how `mesh-host apply`, `converge`
//! or `enrol` tell it that the store changed.
//!
//! The claim is an exclusive `flock` on `run.lock`, taken without waiting and held for the
//! process's life (the kernel lets go of it when the process ends, however it ends), so it never
//! depends on a file's existence: a second host on the same store is refused at once and told the
//! first's pid. `run.pid` is written only once the lock is held and removed only by its holder.
//! The lock's descriptor is close-on-exec, so no child of the host holds it: a helper that
//! outlived the host must not keep the next host from starting.

use crate::store::{self, locked_by};
use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The exit code of a `mesh-host run` refused because another resident host holds the store.
pub const ALREADY_RUNNING: u8 = 6;

/// The file beside the store that names the resident host's pid, for `mesh-host apply` to
/// rouse it after storing a new declaration.
pub fn pid_file(root: &Path) -> PathBuf {
    store::store_dir(root).join("run.pid")
}

/// The file whose lock the resident host holds for its life.
pub fn run_lock(root: &Path) -> PathBuf {
    store::store_dir(root).join("run.lock")
}

/// Why the resident host could not claim the store.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// Another `mesh-host run` holds the store's run lock.
    #[error(
        "another resident host already runs on store {store} (pid {}): it holds {lock}; stop it \
         first (one `mesh-host run` per store)",
        pid.map_or("unknown".to_string(), |p| p.to_string())
    )]
    AlreadyRunning {
        store: PathBuf,
        lock: PathBuf,
        pid: Option<u32>,
    },
    /// Under a root other than `/`, a link or a mount on the way to the store or in it.
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The resident host's hold on a store: the run lock, and the pid file it wrote under it. Dropped,
/// it removes the pid file (if it still names this process) and then lets go of the lock.
#[derive(Debug)]
pub struct Claim {
    /// The store's directory, held open: the pid file is removed by name in it.
    named: store::Named,
    // Declared after `named` and released by `Drop` only after the file is gone.
    _lock: Flock<File>,
}

impl Claim {
    /// Takes the run lock of the store under `root` without waiting, then writes the pid file.
    pub fn take(root: &Path) -> Result<Claim, ClaimError> {
        let dir = store::store_dir(root);
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ClaimError::Io { path, source }
        };
        // The store's directory, made and (under a root other than `/`) checked beneath the
        // root, then held open: the lock and the pid file are opened by name in that handle,
        // following no link, so neither lands outside the store however its path changes.
        let named = store::named_dir(root, true)?
            .ok_or_else(|| io(&dir)(std::io::ErrorKind::NotFound.into()))?;
        let lock_path = run_lock(root);
        // Close-on-exec, as every file opened here: no child inherits the lock.
        let file = named.open_kept("run.lock").map_err(io(&lock_path))?;
        let lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((file, nix::errno::Errno::EWOULDBLOCK)) => {
                return Err(ClaimError::AlreadyRunning {
                    pid: holder(&file, root),
                    store: dir,
                    lock: lock_path,
                })
            }
            Err((_, errno)) => return Err(io(&lock_path)(std::io::Error::from(errno))),
        };
        // Written whole or not at all: the rouse scripts read it at any moment.
        named
            .write_synced(
                "run.pid.tmp",
                format!("{}\n", std::process::id()).as_bytes(),
            )
            .map_err(io(&dir.join("run.pid.tmp")))?;
        named
            .rename("run.pid.tmp", "run.pid")
            .map_err(io(&pid_file(root)))?;
        Ok(Claim { named, _lock: lock })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        // Only the holder removes it, and only while it still names the holder.
        let mine = self
            .named
            .read("run.pid")
            .ok()
            .flatten()
            .and_then(|b| String::from_utf8(b).ok()?.trim().parse::<u32>().ok());
        if mine == Some(std::process::id()) {
            let _ = self.named.remove("run.pid");
        }
    }
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The pid of the process holding the flock on `file`: the kernel's word (`/proc/locks`, by the
/// file's device and inode), else the pid file once it names a running mesh-host (the holder
/// writes it just after taking the lock, so it is waited for briefly).
fn holder(file: &File, root: &Path) -> Option<u32> {
    if let Some(pid) = file.metadata().ok().and_then(|m| locked_by(&m)) {
        return Some(pid);
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        if let Some(pid) = read_pid(&pid_file(root)).filter(|p| is_mesh_host(*p)) {
            return Some(pid);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn is_mesh_host(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "mesh-host")
}

/// The pid of the resident host running on the store under `root`: the holder of `run.lock` as
/// the kernel gives it (`/proc/locks`), so a pid file a crashed host left names no one.
pub fn resident(root: &Path) -> Option<u32> {
    let m = std::fs::metadata(run_lock(root)).ok()?;
    locked_by(&m)
}

/// Tells a resident host on this root that a new declaration is stored (SIGUSR1), if one runs.
/// Returns whether one was told.
pub fn tell_resident(root: &Path) -> bool {
    let Some(pid) = read_pid(&pid_file(root)) else {
        return false;
    };
    if pid <= 1 || pid == std::process::id() {
        return false;
    }
    // Only a process that is mesh-host, so a stale pid file never signals a stranger.
    if !is_mesh_host(pid) {
        return false;
    }
    kill(Pid::from_raw(pid as i32), Signal::SIGUSR1).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under a root other than `/`, a link planted in the store's directory at the run lock or
    /// the pid file is refused, naming it, and the file it points to outside is untouched; the
    /// store's directory itself replaced by a link after it was opened is not followed either.
    #[test]
    fn links_at_the_run_lock_or_the_pid_file_are_never_followed() {
        for name in ["run.lock", "run.pid", "run.pid.tmp"] {
            let root = tempfile::tempdir().unwrap();
            let outside = tempfile::tempdir().unwrap();
            let target = outside.path().join("victim");
            std::fs::write(&target, "kept\n").unwrap();
            let dir = store::store_dir(root.path());
            std::fs::create_dir_all(&dir).unwrap();
            std::os::unix::fs::symlink(&target, dir.join(name)).unwrap();
            let e = Claim::take(root.path()).expect_err(name);
            assert!(e.to_string().contains(name), "{name}: {e}");
            assert_eq!(
                std::fs::read_to_string(&target).unwrap(),
                "kept\n",
                "{name}"
            );
        }
        // A claim taken, then the directory swapped for a link to outside: the holder removes
        // its pid file in the directory it opened, and writes nothing through the link.
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(
            outside.path().join("run.pid"),
            format!("{}\n", std::process::id()),
        )
        .unwrap();
        let claim = Claim::take(root.path()).expect("the claim");
        let dir = store::store_dir(root.path());
        let moved = root.path().join("moved");
        std::fs::rename(&dir, &moved).unwrap();
        std::os::unix::fs::symlink(outside.path(), &dir).unwrap();
        drop(claim);
        assert!(
            !moved.join("run.pid").exists(),
            "its own pid file is removed"
        );
        assert!(
            outside.path().join("run.pid").exists(),
            "nothing removed through the link"
        );
    }

    #[test]
    fn a_second_claim_on_a_store_is_refused_with_the_holders_pid_and_the_pid_file_stays() {
        let root = tempfile::tempdir().unwrap();
        let first = Claim::take(root.path()).expect("the first claim");
        let pid = read_pid(&pid_file(root.path()));
        assert_eq!(pid, Some(std::process::id()));
        // flock is per open file description: a second open in this process is refused too.
        match Claim::take(root.path()) {
            Err(ClaimError::AlreadyRunning { pid, .. }) => {
                assert_eq!(pid, Some(std::process::id()))
            }
            other => panic!("a second claim was not refused: {other:?}"),
        }
        assert_eq!(
            read_pid(&pid_file(root.path())),
            Some(std::process::id()),
            "the refused claim touched the pid file"
        );
        drop(first);
        assert!(
            !pid_file(root.path()).exists(),
            "the holder left its pid file"
        );
        let again = Claim::take(root.path()).expect("claimed again once let go");
        drop(again);
    }

    #[test]
    fn a_stale_pid_file_is_replaced_by_the_holder_and_never_removed_by_another() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(store::store_dir(root.path())).unwrap();
        std::fs::write(pid_file(root.path()), "999999\n").unwrap();
        let claim = Claim::take(root.path()).unwrap();
        assert_eq!(read_pid(&pid_file(root.path())), Some(std::process::id()));
        // Another process's pid written meanwhile is not the holder's to remove.
        std::fs::write(pid_file(root.path()), "999999\n").unwrap();
        drop(claim);
        assert_eq!(read_pid(&pid_file(root.path())), Some(999_999));
    }
}
