//! Declared paths resolved once, beneath the machine's root, without following what the
//! declaration did not name: every read, write, mkdir, chmod, chown and unlink of a declared path
//! goes through a directory handle opened beneath the root, never by name after a check.
//!
//! The root is opened once ([`Root::open`]); a declared path is resolved under it with
//! `openat2(2)` (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`) where the kernel
//! has it, else by a walk of one `openat(O_NOFOLLOW | O_DIRECTORY)` per component. A symbolic
//! link anywhere in a declared path is refused, naming the component: the operator declares the
//! real path (docs/operator.md). What is at a declared file's path is opened `O_NONBLOCK |
//! O_NOFOLLOW` and refused unless `fstat` says it is a regular file, so a FIFO, device or socket
//! is never read.
//!
//! Under a root other than the machine's own `/` (`--root /mnt/sysimage`, a test's throw-away
//! root) nothing is resolved across a mount either: `RESOLVE_NO_XDEV` is added, the walk compares
//! each component's mount (`statx`'s mount id) with the root's, and a found file on another mount
//! (a file bind-mounted over it) is refused, each naming the component and the mount. Such a root
//! is a copy of a machine the host writes into; a bind mount inside it pointing elsewhere would
//! carry the declared writes, and the originals copied, out of it. Under `/` itself mounts are
//! the machine's own layout (`/var` or `/srv` on a file system of its own) and are crossed.

use nix::errno::Errno;
use nix::fcntl::{self, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{self, FileStat, Mode, SFlag};
use nix::unistd::UnlinkatFlags;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use found::coarse_now;
pub use found::{hex, Found};
use mount::mount_at;
pub use mount::{is_machine_root, mount_of, mount_of_path, Mount};
pub use stamp::Stamp;

/// Why a declared path could not be resolved or used beneath the root. Each message names the
/// declared path (the resource) and, for a refusal, the component that caused it.
#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    #[error("opening the root {}: {source}", root.display())]
    Root {
        root: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{declared}: {component} is a symbolic link; the host does not follow links a declaration \
         did not name (declare the real path)"
    )]
    Symlink { declared: String, component: String },
    #[error(
        "{declared}: a directory on the way changed while it was resolved (a link and a \
         directory in turn); the host will not write through it"
    )]
    Changing { declared: String },
    #[error("{declared}: {component} is not a directory")]
    NotDirectory { declared: String, component: String },
    #[error(
        "{declared}: {component} is on another mount than the root ({mount}); under a root other \
         than / the host reads and writes nothing across a mount"
    )]
    Mount {
        declared: String,
        component: String,
        mount: String,
    },
    #[error("{declared}: the path must be absolute, without `.`, `..` or empty components")]
    Unclean { declared: String },
    #[error(
        "{declared} exists and is {kind}, not a regular file; the host will not open or replace it"
    )]
    Special {
        declared: String,
        kind: &'static str,
    },
    #[error("{declared} exists and is not a directory; the host will not replace it")]
    NotADirectory { declared: String },
    #[error("{doing} {declared}: {source}")]
    Io {
        doing: &'static str,
        declared: String,
        #[source]
        source: std::io::Error,
    },
}

fn io<'d>(doing: &'static str, declared: &'d str) -> impl FnOnce(Errno) -> BeneathError + 'd {
    move |e| BeneathError::Io {
        doing,
        declared: declared.to_string(),
        source: std::io::Error::from(e),
    }
}

/// Whether the kernel refused `openat2` once (ENOSYS, EINVAL): the walk is used from then on.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// A directory opened beneath the root (readable, so it can be fsynced, chmodded and chowned).
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

impl Dir {
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub fn stat(&self) -> Result<FileStat, Errno> {
        stat::fstat(&self.fd)
    }

    /// Fsyncs the directory, so a rename inside it survives a power cut.
    pub fn sync(&self) -> Result<(), Errno> {
        nix::unistd::fsync(&self.fd)
    }
}

/// What a removal found.
#[derive(Debug, PartialEq, Eq)]
pub enum Removed {
    Removed,
    Absent,
    NotEmpty,
}

/// The machine's root, opened once; every declared path is resolved beneath it.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    path: PathBuf,
    /// The root's own mount, when it is not the machine's `/`: nothing beneath may be on another.
    xdev: Option<Mount>,
}

/// The components of a declared path, refused if it is not clean.
fn components(declared: &str) -> Result<Vec<&str>, BeneathError> {
    let unclean = || BeneathError::Unclean {
        declared: declared.to_string(),
    };
    let rest = declared.strip_prefix('/').ok_or_else(unclean)?;
    if rest.is_empty() {
        return Ok(Vec::new());
    }
    let parts: Vec<&str> = rest.split('/').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == ".." || p.contains('\0'))
    {
        return Err(unclean());
    }
    Ok(parts)
}

/// The declared spelling of the first `n` components, for messages.
fn spelled(parts: &[&str], n: usize) -> String {
    format!("/{}", parts[..n].join("/"))
}

fn kind(mode: u32) -> &'static str {
    match SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFIFO => "a FIFO",
        SFlag::S_IFCHR => "a character device",
        SFlag::S_IFBLK => "a block device",
        SFlag::S_IFSOCK => "a socket",
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFLNK => "a symbolic link",
        _ => "not a regular file",
    }
}

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

impl Root {
    /// Opens the root directory (`/` in production) once.
    pub fn open(path: &Path) -> Result<Root, BeneathError> {
        let fd = fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| BeneathError::Root {
            root: path.to_path_buf(),
            source: e.into(),
        })?;
        let xdev = if is_machine_root(path) {
            None
        } else {
            Some(mount_of(fd.as_fd()).map_err(|e| BeneathError::Root {
                root: path.to_path_buf(),
                source: e.into(),
            })?)
        };
        Ok(Root {
            fd,
            path: path.to_path_buf(),
            xdev,
        })
    }

    /// Whether this root refuses mount crossings (it is not the machine's `/`).
    pub fn confined(&self) -> bool {
        self.xdev.is_some()
    }

    /// Refuses what `fd` (the `n`th component of `parts`, or the declared path itself) is when it
    /// is on another mount than a confined root.
    fn same_mount(
        &self,
        fd: BorrowedFd<'_>,
        declared: &str,
        component: String,
    ) -> Result<(), BeneathError> {
        let Some(root) = &self.xdev else {
            return Ok(());
        };
        let here = mount_of(fd).map_err(io("resolving", declared))?;
        if root.same(&here) {
            Ok(())
        } else {
            Err(BeneathError::Mount {
                declared: declared.to_string(),
                component,
                mount: here.describe(),
            })
        }
    }

    /// The root's path, for messages only.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The machine path of a declared path under this root, for messages only: nothing is ever
    /// opened through it.
    pub fn shown(&self, declared: &str) -> PathBuf {
        self.path.join(declared.trim_start_matches('/'))
    }

    fn root_dir(&self) -> Result<Dir, Errno> {
        fcntl::openat(&self.fd, ".", DIR_FLAGS, Mode::empty()).map(|fd| Dir { fd })
    }

    /// Opens the directory at the first `n` components of `parts`; `None` when one is missing.
    fn resolve(
        &self,
        declared: &str,
        parts: &[&str],
        n: usize,
    ) -> Result<Option<Dir>, BeneathError> {
        if n == 0 {
            return self
                .root_dir()
                .map(Some)
                .map_err(io("opening the root for", declared));
        }
        if !NO_OPENAT2.load(Ordering::Relaxed) {
            let mut resolve = ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS;
            if self.xdev.is_some() {
                resolve |= ResolveFlag::RESOLVE_NO_XDEV;
            }
            let how = OpenHow::new().flags(DIR_FLAGS).resolve(resolve);
            match fcntl::openat2(&self.fd, parts[..n].join("/").as_str(), how) {
                Ok(fd) => return Ok(Some(Dir { fd })),
                Err(Errno::ENOENT) => return Ok(None),
                Err(Errno::ENOSYS | Errno::EINVAL) => NO_OPENAT2.store(true, Ordering::Relaxed),
                // A link, a file or a mount on the way (or a rename racing the lookup): the walk
                // names the component, and is as safe as openat2.
                Err(Errno::ELOOP | Errno::ENOTDIR | Errno::EXDEV | Errno::EAGAIN) => {}
                Err(e) => return Err(io("resolving", declared)(e)),
            }
        }
        self.walk(declared, parts, n)
    }

    /// The component-by-component resolution: one `openat(O_NOFOLLOW | O_DIRECTORY)` each. A
    /// component found a directory again just after it failed to open as one is changing under
    /// the host: the walk starts again, a few times, then refuses.
    fn walk(&self, declared: &str, parts: &[&str], n: usize) -> Result<Option<Dir>, BeneathError> {
        for _ in 0..3 {
            match self.walk_once(declared, parts, n) {
                Err(None) => continue,
                Err(Some(e)) => return Err(e),
                Ok(d) => return Ok(d),
            }
        }
        Err(BeneathError::Changing {
            declared: declared.to_string(),
        })
    }

    /// One walk; `Err(None)` when a component changed between its failure and the look at it.
    fn walk_once(
        &self,
        declared: &str,
        parts: &[&str],
        n: usize,
    ) -> Result<Option<Dir>, Option<BeneathError>> {
        let mut cur = self
            .root_dir()
            .map_err(io("opening the root for", declared))?;
        for (i, name) in parts[..n].iter().enumerate() {
            match fcntl::openat(&cur.fd, *name, DIR_FLAGS, Mode::empty()) {
                Ok(fd) => {
                    self.same_mount(fd.as_fd(), declared, spelled(parts, i + 1))
                        .map_err(Some)?;
                    cur = Dir { fd }
                }
                Err(Errno::ENOENT) => return Ok(None),
                Err(Errno::ELOOP | Errno::ENOTDIR) => {
                    return Err(self.not_dir(&cur, declared, parts, i))
                }
                Err(e) => return Err(Some(io("resolving", declared)(e))),
            }
        }
        Ok(Some(cur))
    }

    /// Why component `i` could not be opened as a directory (looked at only to say so); `None`
    /// when it is a directory now, so it changed since.
    fn not_dir(&self, dir: &Dir, declared: &str, parts: &[&str], i: usize) -> Option<BeneathError> {
        let component = spelled(parts, i + 1);
        let now = stat::fstatat(&dir.fd, parts[i], fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
            .map(|s| SFlag::from_bits_truncate(s.st_mode & SFlag::S_IFMT.bits()));
        let declared = declared.to_string();
        match now {
            Ok(SFlag::S_IFLNK) => Some(BeneathError::Symlink {
                declared,
                component,
            }),
            Ok(SFlag::S_IFDIR) | Err(Errno::ENOENT) => None,
            _ => Some(BeneathError::NotDirectory {
                declared,
                component,
            }),
        }
    }

    /// Refuses what stands at the declared path `declared`, a name in the already resolved
    /// `dir`, when it is a symbolic link or (under a confined root) on another mount; nothing
    /// there is fine. For the store, whose files are then opened by name in a checked directory.
    pub fn entry(&self, dir: &Dir, declared: &str) -> Result<(), BeneathError> {
        use std::os::fd::AsRawFd;
        let parts = components(declared)?;
        let Some(name) = parts.last().copied() else {
            return Ok(());
        };
        match stat::fstatat(&dir.fd, name, fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(io("reading", declared)(e)),
            Ok(st) if st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFLNK.bits() => {
                return Err(BeneathError::Symlink {
                    declared: declared.to_string(),
                    component: declared.to_string(),
                })
            }
            Ok(_) => {}
        }
        let Some(root) = &self.xdev else {
            return Ok(());
        };
        let c = std::ffi::CString::new(name).map_err(|_| BeneathError::Unclean {
            declared: declared.to_string(),
        })?;
        match mount_at(dir.fd.as_raw_fd(), &c) {
            Ok(m) if !root.same(&m) => Err(BeneathError::Mount {
                declared: declared.to_string(),
                component: declared.to_string(),
                mount: m.describe(),
            }),
            Ok(_) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(io("resolving", declared)(e)),
        }
    }

    /// The directory a declared path names, if it is there.
    pub fn dir(&self, declared: &str) -> Result<Option<Dir>, BeneathError> {
        let parts = components(declared)?;
        match self.resolve(declared, &parts, parts.len()) {
            Err(BeneathError::NotDirectory { component, .. }) if component == declared => {
                Err(BeneathError::NotADirectory {
                    declared: declared.to_string(),
                })
            }
            other => other,
        }
    }

    /// Creates the directory a declared path names and every missing one above it (`mkdir -p`,
    /// new ones `0755`), each by `mkdirat` in its parent's handle; returns the last one opened.
    pub fn mkdir_all(&self, declared: &str) -> Result<Dir, BeneathError> {
        let parts = components(declared)?;
        self.mkdir_parts(declared, &parts, parts.len())
    }

    fn mkdir_parts(&self, declared: &str, parts: &[&str], n: usize) -> Result<Dir, BeneathError> {
        if let Some(d) = self.resolve(declared, parts, n)? {
            return Ok(d);
        }
        let mut cur = self
            .root_dir()
            .map_err(io("opening the root for", declared))?;
        for (i, name) in parts[..n].iter().enumerate() {
            match stat::mkdirat(&cur.fd, *name, Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(io("creating a directory of", declared)(e)),
            }
            match fcntl::openat(&cur.fd, *name, DIR_FLAGS, Mode::empty()) {
                Ok(fd) => {
                    self.same_mount(fd.as_fd(), declared, spelled(parts, i + 1))?;
                    cur = Dir { fd }
                }
                Err(Errno::ELOOP | Errno::ENOTDIR) => {
                    return Err(self.not_dir(&cur, declared, parts, i).unwrap_or(
                        BeneathError::Changing {
                            declared: declared.to_string(),
                        },
                    ))
                }
                Err(e) => return Err(io("resolving", declared)(e)),
            }
        }
        Ok(cur)
    }

    /// The parent's handle and the last name of a declared path; `None` when the parent is not
    /// there.
    fn parent<'p>(&self, declared: &'p str) -> Result<Option<(Dir, &'p str)>, BeneathError> {
        let parts = components(declared)?;
        let Some(name) = parts.last().copied() else {
            return Err(BeneathError::Unclean {
                declared: declared.to_string(),
            });
        };
        Ok(self
            .resolve(declared, &parts, parts.len() - 1)?
            .map(|d| (d, name)))
    }

    /// The regular file at a declared path, open for reading; `None` when nothing is there. It
    /// is opened `O_NONBLOCK | O_NOFOLLOW` and refused unless it is a regular file, so a FIFO
    /// never blocks and a device or socket is never read.
    pub fn read_file(&self, declared: &str) -> Result<Option<Found>, BeneathError> {
        let Some((dir, name)) = self.parent(declared)? else {
            return Ok(None);
        };
        let flags = OFlag::O_RDONLY
            | OFlag::O_NONBLOCK
            | OFlag::O_NOFOLLOW
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC;
        let fd = match fcntl::openat(&dir.fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP) => {
                return Err(BeneathError::Symlink {
                    declared: declared.to_string(),
                    component: declared.to_string(),
                })
            }
            // Opening a FIFO with no writer, or a device, in non-blocking mode may still refuse.
            Err(Errno::ENXIO | Errno::EWOULDBLOCK) => {
                return Err(BeneathError::Special {
                    declared: declared.to_string(),
                    kind: "a special file",
                })
            }
            Err(e) => return Err(io("opening", declared)(e)),
        };
        // A file bind-mounted over the declared one is another machine's (or the host's own).
        self.same_mount(fd.as_fd(), declared, declared.to_string())?;
        let tick = coarse_now();
        let st = stat::fstat(&fd).map_err(io("reading", declared))?;
        if st.st_mode & SFlag::S_IFMT.bits() != SFlag::S_IFREG.bits() {
            return Err(BeneathError::Special {
                declared: declared.to_string(),
                kind: kind(st.st_mode),
            });
        }
        let stamp = Stamp {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size as u64,
            mtime: [st.st_mtime, st.st_mtime_nsec],
            ctime: [st.st_ctime, st.st_ctime_nsec],
        };
        Ok(Some(Found {
            file: File::from(fd),
            size: st.st_size as u64,
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            settled: stamp.ctime < tick,
            stamp,
            deadline: None,
        }))
    }

    /// Writes a declared file atomically: its parent made (`mkdir -p`) and opened beneath the
    /// root, the bytes written to a temporary file in that handle (never through a link),
    /// `prepare`d (mode and owner set on the open file), fsynced, renamed within the same handle
    /// over the declared name, and the directory fsynced.
    ///
    /// The temporary file is unnamed (`O_TMPFILE`) until it is whole, then linked under a name
    /// no one can guess (`.mesh-host.<16 hex>.tmp`) just for the rename; where the file system
    /// has no `O_TMPFILE` it is created under such a name `O_EXCL`. Nothing of another's is ever
    /// unlinked for it (a name taken is another name drawn), and on every error, the rename's
    /// included (EBUSY on a mount point), it is removed.
    pub fn write_file(
        &self,
        declared: &str,
        bytes: &[u8],
        prepare: impl Fn(&File) -> Result<(), std::io::Error>,
    ) -> Result<(), BeneathError> {
        let parts = components(declared)?;
        let Some(name) = parts.last().copied() else {
            return Err(BeneathError::Unclean {
                declared: declared.to_string(),
            });
        };
        let dir = self.mkdir_parts(declared, &parts, parts.len() - 1)?;
        // A file mounted over the declared one: refused before anything is staged.
        if self.xdev.is_some() {
            match self.entry(&dir, declared) {
                // A link at the name is replaced by the rename, never followed.
                Ok(()) | Err(BeneathError::Symlink { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let tmp = staged(&dir, declared, bytes, &prepare, true)?;
        if let Err(e) = fcntl::renameat(&dir.fd, tmp.as_str(), &dir.fd, name) {
            let _ = nix::unistd::unlinkat(&dir.fd, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
            return Err(io("renaming into", declared)(e));
        }
        dir.sync().map_err(io("syncing the directory of", declared))
    }

    /// The ancestors of a declared path that are not there now, shallowest first: what writing
    /// it would make (`mkdir -p`), for the record of what the host created.
    pub fn missing_parents(&self, declared: &str) -> Result<Vec<String>, BeneathError> {
        let parts = components(declared)?;
        for i in 1..parts.len() {
            if self.resolve(declared, &parts, i)?.is_none() {
                return Ok((i..parts.len())
                    .map(|n| format!("/{}", parts[..n].join("/")))
                    .collect());
            }
        }
        Ok(Vec::new())
    }

    /// Removes the file at a declared path (`unlinkat` in its parent's handle).
    pub fn remove_file(&self, declared: &str) -> Result<Removed, BeneathError> {
        self.unlink(declared, UnlinkatFlags::NoRemoveDir)
    }

    /// Removes the directory at a declared path if it is empty.
    pub fn remove_dir(&self, declared: &str) -> Result<Removed, BeneathError> {
        self.unlink(declared, UnlinkatFlags::RemoveDir)
    }

    fn unlink(&self, declared: &str, how: UnlinkatFlags) -> Result<Removed, BeneathError> {
        let Some((dir, name)) = self.parent(declared)? else {
            return Ok(Removed::Absent);
        };
        match nix::unistd::unlinkat(&dir.fd, name, how) {
            Ok(()) => dir
                .sync()
                .map(|()| Removed::Removed)
                .map_err(io("syncing the directory of", declared)),
            Err(Errno::ENOENT) => Ok(Removed::Absent),
            Err(Errno::ENOTEMPTY | Errno::EEXIST) => Ok(Removed::NotEmpty),
            Err(e) => Err(io("removing", declared)(e)),
        }
    }
}

/// A name for a temporary file that no one can guess beforehand: `.mesh-host.<16 hex>.tmp`, from
/// the standard library's random hash keys (seeded from the kernel) and a counter. It is the same
/// length whatever the declared name, so it fits wherever that does.
fn temp_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::AtomicU64;
    static DRAWN: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(DRAWN.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    format!(".mesh-host.{:016x}.tmp", h.finish())
}

/// How many names are drawn before a directory full of them is given up on.
const DRAWS: usize = 16;

/// Writes `bytes` to a new temporary file in `dir` and returns the name it is linked under, for
/// the rename: unnamed (`O_TMPFILE`) while it is written, else created under a drawn name
/// `O_EXCL` (always, without `unnamed`: the fallback's test). On an error nothing is left: an
/// unnamed file goes with its handle, a named one is unlinked.
fn staged(
    dir: &Dir,
    declared: &str,
    bytes: &[u8],
    prepare: &impl Fn(&File) -> Result<(), std::io::Error>,
    unnamed: bool,
) -> Result<String, BeneathError> {
    let fill = |mut file: &File| {
        file.write_all(bytes)
            .and_then(|()| prepare(file))
            .and_then(|()| file.sync_all())
            .map_err(|source| BeneathError::Io {
                doing: "writing",
                declared: declared.to_string(),
                source,
            })
    };
    let flags = OFlag::O_TMPFILE | OFlag::O_WRONLY | OFlag::O_CLOEXEC;
    let opened = if unnamed {
        fcntl::openat(&dir.fd, ".", flags, Mode::from_bits_truncate(0o600))
    } else {
        Err(Errno::EOPNOTSUPP)
    };
    match opened {
        Ok(fd) => {
            let file = File::from(fd);
            fill(&file)?;
            if let Some(tmp) = link_unnamed(dir, &file, declared)? {
                return Ok(tmp);
            }
            // Not linkable here (no CAP_DAC_READ_SEARCH and no /proc): written again by name.
        }
        // A file system without O_TMPFILE.
        Err(Errno::EOPNOTSUPP | Errno::EISDIR | Errno::EINVAL) => {}
        Err(e) => return Err(io("creating the temporary file of", declared)(e)),
    }
    let create =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    for _ in 0..DRAWS {
        let tmp = temp_name();
        let fd = match fcntl::openat(
            &dir.fd,
            tmp.as_str(),
            create,
            Mode::from_bits_truncate(0o600),
        ) {
            Ok(fd) => fd,
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(io("creating the temporary file of", declared)(e)),
        };
        let file = File::from(fd);
        if let Err(e) = fill(&file) {
            let _ = nix::unistd::unlinkat(&dir.fd, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
            return Err(e);
        }
        return Ok(tmp);
    }
    Err(io("creating the temporary file of", declared)(
        Errno::EEXIST,
    ))
}

/// Links a whole unnamed file into `dir` under a drawn name: by its handle (`AT_EMPTY_PATH`,
/// which needs `CAP_DAC_READ_SEARCH`), else through `/proc/self/fd`. `None` when neither may.
fn link_unnamed(dir: &Dir, file: &File, declared: &str) -> Result<Option<String>, BeneathError> {
    use std::os::fd::AsRawFd;
    let by_proc = format!("/proc/self/fd/{}", file.as_raw_fd());
    for _ in 0..DRAWS {
        let tmp = temp_name();
        let linked = match nix::unistd::linkat(
            file,
            "",
            &dir.fd,
            tmp.as_str(),
            nix::fcntl::AtFlags::AT_EMPTY_PATH,
        ) {
            Err(Errno::EPERM | Errno::ENOENT) => nix::unistd::linkat(
                nix::fcntl::AT_FDCWD,
                by_proc.as_str(),
                &dir.fd,
                tmp.as_str(),
                nix::fcntl::AtFlags::AT_SYMLINK_FOLLOW,
            ),
            other => other,
        };
        match linked {
            Ok(()) => return Ok(Some(tmp)),
            Err(Errno::EEXIST) => continue,
            Err(Errno::EPERM | Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(io("linking the temporary file of", declared)(e)),
        }
    }
    Err(io("linking the temporary file of", declared)(Errno::EEXIST))
}

/// Copies a found file by streaming into `out`, returning its digest; at most one chunk is held.
pub fn copy_digest(found: &Found, out: Option<&mut File>) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut out = out;
    found.stream(|c| {
        h.update(c);
        match out.as_mut() {
            Some(o) => o.write_all(c),
            None => Ok(()),
        }
    })?;
    Ok(hex(&h.finalize()))
}

mod found;
mod mount;
mod stamp;
#[cfg(test)]
mod tests;
