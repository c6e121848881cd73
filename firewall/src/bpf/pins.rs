//! Where the guard's layer is pinned: the bpffs (mounted on the machine's own `/` when none is
//! there) and the pins' directory, locked while one host changes the layer.

use super::{BPFFS_SUBDIR, PIN_SUBDIR};
use crate::error::{Errno, Error, Result};
use nix::fcntl::{Flock, FlockArg, OFlag};
use nix::sys::stat::Mode;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

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
    pub(super) fn lock(&self) -> Result<Flock<OwnedFd>> {
        let failed = |errno: nix::errno::Errno| Error::Bpf {
            op: "lock",
            what: format!("pin directory {}", self.dir.display()),
            errno: Errno(errno as i32),
            log: None,
        };
        let fd = nix::fcntl::open(
            &self.dir,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(failed)?;
        Flock::lock(fd, FlockArg::LockExclusive).map_err(|(_, e)| failed(e))
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
                errno: Errno(nix::errno::Errno::ENOENT as i32),
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
    nix::sys::statfs::statfs(path)
        .is_ok_and(|st| st.filesystem_type() == nix::sys::statfs::BPF_FS_MAGIC)
}

fn mount_bpffs(at: &Path) -> Result<()> {
    nix::mount::mount(
        Some("bpf"),
        at,
        Some("bpf"),
        nix::mount::MsFlags::empty(),
        Some("mode=0700"),
    )
    .map_err(|e| Error::Bpf {
        op: "mount",
        what: format!("bpffs at {}", at.display()),
        errno: Errno(e as i32),
        log: None,
    })
}
