//! Which mount a file is on (`statx`'s mount id, its device as the fallback), and whether a
//! root is the machine's own `/`: under any other root a mount is a way out of it.

use super::*;

/// Which mount a file is on: `statx`'s mount id where the kernel gives it (Linux 5.8), and its
/// device (a bind mount of a directory on the same file system has the same device, so the id
/// is what tells it; the device is the fallback).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mount {
    id: Option<u64>,
    dev: (u32, u32),
}

impl Mount {
    /// Whether `other` is this same mount.
    pub fn same(&self, other: &Mount) -> bool {
        match (self.id, other.id) {
            (Some(a), Some(b)) => a == b,
            _ => self.dev == other.dev,
        }
    }

    /// The mount in words, for a refusal: its id, where it is mounted and what of which file
    /// system it shows, from `/proc/self/mountinfo` when that can be read.
    pub fn describe(&self) -> String {
        let (major, minor) = self.dev;
        let Some(id) = self.id else {
            return format!("device {major}:{minor}");
        };
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let line = info.lines().find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.first() == Some(&id.to_string().as_str()) && f.len() > 4).then(|| (f[3], f[4]))
        });
        match line {
            Some((from, at)) => {
                format!("mount {id} at {at}, {from} of device {major}:{minor}")
            }
            None => format!("mount {id}, device {major}:{minor}"),
        }
    }
}

/// The mount of what `path` names relative to `dirfd` (the handle itself with an empty path),
/// never following a link.
pub(super) fn mount_at(dirfd: std::os::fd::RawFd, path: &std::ffi::CStr) -> Result<Mount, Errno> {
    let mut stx = std::mem::MaybeUninit::<nix::libc::statx>::zeroed();
    let mut flags = nix::libc::AT_SYMLINK_NOFOLLOW | nix::libc::AT_NO_AUTOMOUNT;
    if path.is_empty() {
        flags |= nix::libc::AT_EMPTY_PATH;
    }
    // SAFETY: `path` is a valid C string, `stx` a buffer of the size the kernel writes.
    let rc = unsafe {
        nix::libc::statx(
            dirfd,
            path.as_ptr(),
            flags,
            nix::libc::STATX_MNT_ID,
            stx.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(Errno::last());
    }
    // SAFETY: statx returned 0, so it filled the buffer.
    let stx = unsafe { stx.assume_init() };
    Ok(Mount {
        id: (stx.stx_mask & nix::libc::STATX_MNT_ID != 0).then_some(stx.stx_mnt_id),
        dev: (stx.stx_dev_major, stx.stx_dev_minor),
    })
}

/// The mount an open handle is on.
pub fn mount_of(fd: BorrowedFd<'_>) -> Result<Mount, Errno> {
    use std::os::fd::AsRawFd;
    mount_at(fd.as_raw_fd(), c"")
}

/// The mount of a path (the link itself when it is one).
pub fn mount_of_path(path: &Path) -> Result<Mount, Errno> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
    mount_at(nix::libc::AT_FDCWD, &c)
}

/// Whether `path` is the machine's own `/` (the same directory, however it is spelled): under it
/// mounts are the machine's layout; under any other root, a mount is a way out of it.
pub fn is_machine_root(path: &Path) -> bool {
    match (std::fs::metadata(path), std::fs::metadata("/")) {
        (Ok(a), Ok(b)) => {
            use std::os::unix::fs::MetadataExt;
            a.dev() == b.dev() && a.ino() == b.ino()
        }
        _ => false,
    }
}
