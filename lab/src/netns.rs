//! Kernel-facing helpers: entering a namespace on a helper thread, finding the processes inside a
//! namespace or under a directory, and unmounting what a daemon left under its directories.

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Where `ip netns add` keeps the bind mounts that name namespaces (`/var/run` links to `/run`).
pub const NETNS_DIR: &str = "/var/run/netns";

pub(crate) fn netns_path(name: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(name)
}

/// Runs `f` on a fresh thread that first joins the named network namespace.
///
/// The network namespace is a per-thread attribute, so `setns(CLONE_NEWNET)` on a throwaway thread
/// leaves the test's own threads where they were. Sockets made by `f` stay in that namespace for
/// their whole life, whichever thread uses them later.
pub(crate) fn in_netns<T, F>(namespace: &str, f: F) -> Result<T>
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let path = netns_path(namespace);
    let enter_error = |source| Error::EnterNamespace {
        namespace: namespace.to_owned(),
        path: path.clone(),
        source,
    };
    let outcome = thread::scope(|scope| {
        scope
            .spawn(|| {
                let file = File::open(&path)?;
                // SAFETY: setns only reads the descriptor; it changes this helper thread alone.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                if rc != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(f())
            })
            .join()
    });
    match outcome {
        Ok(result) => result.map_err(enter_error),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Every named network namespace currently mounted.
pub(crate) fn list_netns() -> Vec<String> {
    let Ok(entries) = fs::read_dir(NETNS_DIR) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// A network namespace's identity: the device and inode of its nsfs file.
pub(crate) type Identity = (u64, u64);

/// The identity of the namespace mounted at `path`.
pub(crate) fn identity(path: &Path) -> Option<Identity> {
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// A namespace held open by a descriptor of its nsfs file, with its identity: while held, the
/// namespace lives on after its name is deleted, so its identity (the nsfs inode number, which
/// the kernel gives again to the next namespace made once this one is freed) names it alone.
/// Without the hold, a teardown that looked for processes by a deleted namespace's identity
/// could find and kill those of a namespace made since by someone else (another test's scratch
/// namespace, whose `ip -n NS …` was seen killed by signal 9).
pub(crate) struct Held {
    _file: File,
    pub(crate) identity: Identity,
}

/// Holds the namespace mounted at `path`, if it is there.
pub(crate) fn hold(path: &Path) -> Option<Held> {
    let file = File::open(path).ok()?;
    let m = file.metadata().ok()?;
    Some(Held {
        identity: (m.dev(), m.ino()),
        _file: file,
    })
}

/// Pids of the processes whose network namespace is the one mounted at `path` (what
/// `ip netns pids` reports).
pub(crate) fn pids_in_netns(path: &Path) -> Vec<i32> {
    identity(path).map(pids_in).unwrap_or_default()
}

/// Pids of the processes whose network namespace has this identity.
pub(crate) fn pids_in(target: Identity) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|pid| identity(Path::new(&format!("/proc/{pid}/ns/net"))) == Some(target))
        .collect()
}

/// Pids of processes that belong to a directory the lab made: their command line names a path
/// below it (dockerd, containerd, the shims of a lab Docker engine).
pub(crate) fn pids_under(dir: &Path) -> Vec<i32> {
    // With a trailing slash, so a sibling directory sharing the prefix is never matched.
    let mut needle = dir.as_os_str().as_encoded_bytes().to_vec();
    needle.push(b'/');
    all_pids()
        .into_iter()
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle.as_slice()))
        })
        .collect()
}

/// Pids of processes whose cgroup path names one of `ids` (a container's processes, which the
/// cgroupfs driver puts under `/docker/<id>`).
pub(crate) fn pids_in_cgroups(ids: &[String]) -> Vec<i32> {
    if ids.is_empty() {
        return Vec::new();
    }
    all_pids()
        .into_iter()
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|text| ids.iter().any(|id| text.contains(id.as_str())))
        })
        .collect()
}

fn all_pids() -> Vec<i32> {
    let me = std::process::id() as i32;
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != me)
        .collect()
}

/// Whether a process exists and has not yet exited (a zombie counts as gone).
pub(crate) fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the parenthesised command name, which may itself hold spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Sends SIGKILL to every pid and waits (bounded) until none is alive; returns those killed.
pub(crate) fn kill_and_wait(pids: &[i32], timeout: Duration) -> Vec<i32> {
    for pid in pids {
        // SAFETY: kill has no memory effects; the pids were just read from /proc.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    let deadline = Instant::now() + timeout;
    while pids.iter().any(|p| alive(*p)) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    pids.to_vec()
}

/// Mount points at or below `dir`, deepest first, read from /proc/self/mountinfo.
pub(crate) fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = info
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_mountinfo(p)))
        .filter(|p| p.starts_with(dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

/// Detaches every mount at or below `dir` (overlays, the data-root bind, container namespaces).
pub(crate) fn unmount_under(dir: &Path) -> Vec<Error> {
    let mut errors = Vec::new();
    // A stacked mount needs one detach per layer, so repeat while something is still mounted.
    for _ in 0..8 {
        let mounts = mounts_under(dir);
        if mounts.is_empty() {
            break;
        }
        for mount in mounts {
            let Ok(c) = std::ffi::CString::new(mount.as_os_str().as_encoded_bytes()) else {
                continue;
            };
            // SAFETY: c is a valid NUL-terminated path that outlives the call.
            if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
                let err = std::io::Error::last_os_error();
                if err.raw_os_error() != Some(libc::EINVAL)
                    && err.raw_os_error() != Some(libc::ENOENT)
                {
                    errors.push(Error::io(&mount, err));
                }
            }
        }
    }
    errors
}

fn unescape_mountinfo(field: &str) -> String {
    // mountinfo escapes space, tab, newline and backslash as a backslash and three octal digits.
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                let value = d.iter().fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
                out.push(value as u8);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape_mountinfo(r"/tmp/a\040b"), "/tmp/a b");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
        assert_eq!(unescape_mountinfo(r"/end\"), r"/end\");
    }
}
