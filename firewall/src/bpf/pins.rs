//! Where the guard's layer is pinned: the bpffs (mounted on the machine's own `/` when none is
//! there) and the pins' directory, locked while one host changes the layer.

use super::{BPFFS_SUBDIR, PIN_SUBDIR};
use crate::error::{Errno, Error, Result};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Where the layer's pins live for a root, and the bpffs they live in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pins {
    /// The bpffs mount point (`/sys/fs/bpf`).
    pub fs: PathBuf,
    /// The directory of the pins (`/sys/fs/bpf/mesh-host`).
    pub dir: PathBuf,
    /// Whether a bpffs may be mounted at `fs` when none is there: on the machine's own `/`,
    /// where `/sys/fs/bpf` is the standard place; never below another root, where a mount would
    /// outlive the directory (a test that wants the layer there mounts one itself).
    pub may_mount: bool,
}

impl Pins {
    /// The pins under `root` (`/` on a node; a test's directory in the lab).
    pub fn under(root: &Path) -> Pins {
        Pins {
            fs: root.join(BPFFS_SUBDIR),
            dir: root.join(PIN_SUBDIR),
            may_mount: root == Path::new("/"),
        }
    }

    /// The pins in a bpffs this caller has mounted or lets be mounted at `root/sys/fs/bpf`.
    pub fn mounting(root: &Path) -> Pins {
        Pins {
            may_mount: true,
            ..Pins::under(root)
        }
    }

    /// An exclusive lock on the pins' directory, held until dropped.
    pub(super) fn lock(&self) -> Result<OwnedFd> {
        use std::os::fd::FromRawFd;
        let failed = |errno| Error::Bpf {
            op: "lock",
            what: format!("pin directory {}", self.dir.display()),
            errno,
            log: None,
        };
        let c = std::ffi::CString::new(self.dir.as_os_str().as_encoded_bytes())
            .map_err(|_| failed(Errno(libc::EINVAL)))?;
        // SAFETY: open reads the NUL-terminated path; the descriptor is owned at once.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(failed(Errno::last()));
        }
        // SAFETY: fd is a new descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(failed(Errno::last()));
        }
        Ok(fd)
    }

    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Mounts a bpffs at `fs` unless one is there, and makes the pins' directory.
    pub(super) fn prepare(&self) -> Result<()> {
        let shown = self.fs.display().to_string();
        if !is_bpffs(&self.fs) && !self.may_mount {
            return Err(Error::Bpf {
                op: "pin",
                what: format!("the guard's links in {}", self.dir.display()),
                errno: Errno(libc::ENOENT),
                log: Some(format!("no bpffs is mounted at {shown}")),
            });
        }
        if !is_bpffs(&self.fs) {
            std::fs::create_dir_all(&self.fs).map_err(|e| Error::Bpf {
                op: "mkdir",
                what: format!("bpffs mount point {shown}"),
                errno: Errno(e.raw_os_error().unwrap_or(0)),
                log: None,
            })?;
            mount_bpffs(&self.fs)?;
        }
        match std::fs::create_dir(&self.dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(Error::Bpf {
                op: "mkdir",
                what: format!("pin directory {}", self.dir.display()),
                errno: Errno(e.raw_os_error().unwrap_or(0)),
                log: None,
            }),
        }
    }
}

/// Whether `path` is the root of a mounted bpffs.
pub fn is_bpffs(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes into the zeroed struct we pass and reads the NUL-terminated path.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == BPF_FS_MAGIC
    }
}

fn mount_bpffs(at: &Path) -> Result<()> {
    let target =
        std::ffi::CString::new(at.as_os_str().as_encoded_bytes()).map_err(|_| Error::Bpf {
            op: "mount",
            what: format!("bpffs at {}", at.display()),
            errno: Errno(libc::EINVAL),
            log: None,
        })?;
    // SAFETY: every argument is a NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            c"bpf".as_ptr(),
            target.as_ptr(),
            c"bpf".as_ptr(),
            0,
            c"mode=0700".as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(Error::Bpf {
            op: "mount",
            what: format!("bpffs at {}", at.display()),
            errno: Errno::last(),
            log: None,
        });
    }
    Ok(())
}
