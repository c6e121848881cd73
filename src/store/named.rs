//! The store's files opened by name in its directory's handle, never by path: no symbolic link at
//! a file's name is followed (`O_NOFOLLOW`, and a name is one component), and a directory swapped
//! in on the way after the store's directory was checked is never reached.

use nix::fcntl::{self, AtFlags, OFlag};
use nix::sys::stat::{self, Mode};
use nix::unistd::UnlinkatFlags;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// A directory of the store (its own, or `originals/`), open, with the path it is shown by.
#[derive(Debug)]
pub struct Named {
    fd: OwnedFd,
    path: PathBuf,
}

impl Named {
    /// The directory at `path`, opened by that path: under the machine's `/`, where its place is
    /// the machine's own layout.
    pub fn open(path: &Path) -> io::Result<Named> {
        let fd = fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Named {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The directory `beneath` opened (no link and no mount on the way), shown as `path`.
    pub fn confined(dir: &crate::beneath::Dir, path: &Path) -> io::Result<Named> {
        Ok(Named {
            fd: dir.fd().try_clone_to_owned()?,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The path a file of this directory is shown by, in messages.
    pub fn shown(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// The directory `name` inside this one, made (0755) when `make` and missing; a link there is
    /// refused (ELOOP or ENOTDIR), not followed. `None` when missing and not made.
    pub fn subdir(&self, name: &str, make: bool) -> io::Result<Option<Named>> {
        if make {
            match stat::mkdirat(&self.fd, name, Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        match fcntl::openat(
            &self.fd,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Some(Named {
                fd,
                path: self.path.join(name),
            })),
            Err(nix::errno::Errno::ENOENT) => Ok(None),
            Err(e) => Err(self.unfollowed(name, e)),
        }
    }

    /// The error of an open that met a link at `name` (ELOOP, or ENOTDIR for a directory), said
    /// as such.
    fn unfollowed(&self, name: &str, e: nix::errno::Errno) -> io::Error {
        let link = stat::fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok_and(|st| {
            stat::SFlag::from_bits_truncate(st.st_mode & stat::SFlag::S_IFMT.bits())
                == stat::SFlag::S_IFLNK
        });
        if link {
            io::Error::other("a symbolic link, not followed")
        } else {
            e.into()
        }
    }

    /// Whether anything is at `name` (a link counts, unfollowed).
    pub fn exists(&self, name: &str) -> bool {
        stat::fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok()
    }

    /// Whether a regular file is at `name` (a link there is not one).
    pub fn is_file(&self, name: &str) -> bool {
        stat::fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok_and(|st| {
            stat::SFlag::from_bits_truncate(st.st_mode & stat::SFlag::S_IFMT.bits())
                == stat::SFlag::S_IFREG
        })
    }

    /// Opens the file `name` for reading, following no link (a link there fails with ELOOP);
    /// `None` when there is none.
    pub fn open_file(&self, name: &str) -> io::Result<Option<File>> {
        match fcntl::openat(
            &self.fd,
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
            Mode::empty(),
        ) {
            Ok(fd) => {
                let f = File::from(fd);
                if !f.metadata()?.is_file() {
                    return Err(io::Error::other("not a regular file"));
                }
                Ok(Some(f))
            }
            Err(nix::errno::Errno::ENOENT) => Ok(None),
            Err(e) => Err(self.unfollowed(name, e)),
        }
    }

    /// Opens (creating, 0600) the file `name` for reading and writing as it is, following no
    /// link: a lock file, whose identity is its inode and must not be made again.
    pub fn open_kept(&self, name: &str) -> io::Result<File> {
        let fd = fcntl::openat(
            &self.fd,
            name,
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| self.unfollowed(name, e))?;
        Ok(File::from(fd))
    }

    /// Reads the file `name` whole (see [`Named::open_file`]).
    pub fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        use std::io::Read;
        let Some(mut f) = self.open_file(name)? else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    }

    /// Whether `name` holds exactly `bytes` (`None`: that it is missing), read a piece at a time
    /// into one small buffer rather than whole into a second copy of what is already held.
    pub fn holds(&self, name: &str, bytes: Option<&[u8]>) -> io::Result<bool> {
        use std::io::Read;
        let Some(mut f) = self.open_file(name)? else {
            return Ok(bytes.is_none());
        };
        let Some(mut left) = bytes else {
            return Ok(false);
        };
        if f.metadata()?.len() != left.len() as u64 {
            return Ok(false);
        }
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match f.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                return Ok(left.is_empty());
            }
            match left.strip_prefix(&buf[..n]) {
                Some(rest) => left = rest,
                None => return Ok(false),
            }
        }
    }

    /// Creates `name` fresh (0600): whatever was there (a stale temporary file, a link someone
    /// planted at the name) is removed first, and the new file is made exclusively without
    /// following links, so the bytes land nowhere but in a new file of the host's own.
    /// `append` opens it for appending.
    pub fn create(&self, name: &str, append: bool) -> io::Result<File> {
        self.remove(name)?;
        let mut flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        if append {
            flags |= OFlag::O_APPEND;
        }
        let fd = fcntl::openat(&self.fd, name, flags, Mode::from_bits_truncate(0o600))?;
        Ok(File::from(fd))
    }

    /// Writes `bytes` to a fresh `name` (see [`Named::create`]) and fsyncs it. A write that
    /// failed (a full disk) removes what it made.
    pub fn write_synced(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        use std::io::Write;
        let written = self.create(name, false).and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        });
        if written.is_err() {
            let _ = self.remove(name);
        }
        written
    }

    /// Renames `from` to `to` in this directory (a link at `to` is replaced, never followed).
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fcntl::renameat(&self.fd, from, &self.fd, to)?;
        Ok(())
    }

    /// Removes `name` (a link there is removed, not followed); nothing there is fine.
    pub fn remove(&self, name: &str) -> io::Result<()> {
        match nix::unistd::unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(nix::errno::Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Fsyncs the directory, so a name made or renamed in it survives a power cut.
    pub fn sync(&self) -> io::Result<()> {
        nix::unistd::fsync(self.fd.as_fd())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `holds` says what reading the file whole and comparing would: across its pieces, at the
    /// last byte, by length, and for a file that is missing.
    #[test]
    fn holds_is_reading_whole_and_comparing() {
        let root = tempfile::tempdir().unwrap();
        let dir = Named::open(root.path()).unwrap();
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        dir.write_synced("f", &big).unwrap();
        assert!(dir.holds("f", Some(&big)).unwrap());
        let mut last = big.clone();
        *last.last_mut().unwrap() ^= 1;
        assert!(!dir.holds("f", Some(&last)).unwrap());
        let mut early = big.clone();
        early[70_000] ^= 1;
        assert!(!dir.holds("f", Some(&early)).unwrap());
        assert!(!dir.holds("f", Some(&big[..big.len() - 1])).unwrap());
        assert!(!dir.holds("f", None).unwrap());
        assert!(dir.holds("missing", None).unwrap());
        assert!(!dir.holds("missing", Some(b"")).unwrap());
        dir.write_synced("empty", b"").unwrap();
        assert!(dir.holds("empty", Some(b"")).unwrap());
    }
}
