//! Account lookups: user and group names to ids, read from the machine's own `/etc/passwd` and
//! `/etc/group` (under the root).
//!
//! Not through the C library's name service: the host is one static binary, and a statically
//! linked glibc can only answer `getpwnam` by loading the very shared libraries it was meant to do
//! without. Accounts from a network directory (LDAP, SSSD) are therefore not names the host knows;
//! a declaration gives their numeric ids.

use nix::errno::Errno;
use nix::fcntl::OFlag;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The most of an account database the host reads: a machine's `/etc/passwd` is kilobytes, and
/// one larger than this is refused rather than read into memory.
pub const MAX_DATABASE: u64 = 16 * 1024 * 1024;

/// Why a declared user or group has no id on this machine.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    /// The account database could not be read.
    #[error("{what} {name:?}: reading {}: {source}", db.display())]
    Read {
        what: &'static str,
        name: String,
        db: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The database is not a regular file (a FIFO, a device, a socket, a directory or a
    /// symbolic link), so it is not opened for reading: a FIFO would block the apply for ever.
    #[error("{what} {name:?}: {} is {kind}, not a regular file; the host reads accounts only from a regular file", db.display())]
    NotRegular {
        what: &'static str,
        name: String,
        db: PathBuf,
        kind: &'static str,
    },
    /// The database is larger than the host reads.
    #[error("{what} {name:?}: {} is larger than {} MiB; the host does not read an account database that large", db.display(), MAX_DATABASE >> 20)]
    TooLarge {
        what: &'static str,
        name: String,
        db: PathBuf,
    },
    /// The database has no entry for the name.
    #[error("{what} {name:?} does not exist on this machine ({} has no entry for it)", db.display())]
    Missing {
        what: &'static str,
        name: String,
        db: PathBuf,
    },
}

/// What a non-regular file is, for [`AccountError::NotRegular`].
fn kind(t: std::fs::FileType) -> &'static str {
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// The text of an account database, read only if it is a regular file and at most
/// [`MAX_DATABASE`] bytes: opened without blocking (a FIFO's open would wait for a writer) and
/// without following a link at its name, judged by `fstat` on the open file (so what is read is
/// what was judged), and read through a bound.
fn read_database(path: &Path, what: &'static str, name: &str) -> Result<String, AccountError> {
    let read_err = |source| AccountError::Read {
        what,
        name: name.to_string(),
        db: path.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC).bits())
        .open(path)
        .map_err(|e| {
            // O_NOFOLLOW refuses a link at the name with ELOOP: said as what it is.
            if e.raw_os_error() == Some(Errno::ELOOP as i32) {
                return AccountError::NotRegular {
                    what,
                    name: name.to_string(),
                    db: path.to_path_buf(),
                    kind: "a symbolic link",
                };
            }
            read_err(e)
        })?;
    let meta = file.metadata().map_err(read_err)?;
    if !meta.file_type().is_file() {
        return Err(AccountError::NotRegular {
            what,
            name: name.to_string(),
            db: path.to_path_buf(),
            kind: kind(meta.file_type()),
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_DATABASE + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_DATABASE {
        return Err(AccountError::TooLarge {
            what,
            name: name.to_string(),
            db: path.to_path_buf(),
        });
    }
    String::from_utf8(bytes).map_err(|e| {
        read_err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            e.utf8_error(),
        ))
    })
}

/// The id in field `field` of the `name` line of a colon-separated database under `root`.
fn lookup(
    root: &Path,
    db: &str,
    what: &'static str,
    name: &str,
    field: usize,
) -> Result<u32, AccountError> {
    if let Ok(n) = name.parse::<u32>() {
        return Ok(n);
    }
    let path = root.join(db.trim_start_matches('/'));
    let text = read_database(&path, what, name)?;
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.first() == Some(&name))
        .and_then(|f| f.get(field).and_then(|id| id.parse().ok()))
        .ok_or_else(|| AccountError::Missing {
            what,
            name: name.to_string(),
            db: path.clone(),
        })
}

/// The uid of a user name or a numeric id.
pub fn uid(root: &Path, name: &str) -> Result<u32, AccountError> {
    lookup(root, "/etc/passwd", "user", name, 2)
}

/// The gid of a group name or a numeric id.
pub fn gid(root: &Path, name: &str) -> Result<u32, AccountError> {
    lookup(root, "/etc/group", "group", name, 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_from_the_machines_files() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("etc")).unwrap();
        std::fs::write(root.path().join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n# comment\ncaddy:x:998:997::/var/lib/caddy:/usr/sbin/nologin\n").unwrap();
        std::fs::write(root.path().join("etc/group"), "root:x:0:\ncaddy:x:997:\n").unwrap();
        assert_eq!(uid(root.path(), "caddy").unwrap(), 998);
        assert_eq!(gid(root.path(), "caddy").unwrap(), 997);
        assert_eq!(uid(root.path(), "1234").unwrap(), 1234);
        let e = uid(root.path(), "nobody").unwrap_err().to_string();
        assert!(
            e.starts_with("user \"nobody\" does not exist on this machine"),
            "{e}"
        );
    }

    /// Proves that a FIFO at `/etc/passwd` is refused at once, never opened for a read that
    /// would wait for a writer for ever: the lookup runs on a thread and must answer within 2 s.
    #[test]
    fn a_fifo_database_is_refused_without_blocking() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("etc")).unwrap();
        let db = root.path().join("etc/passwd");
        nix::unistd::mkfifo(&db, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let r = root.path().to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(uid(&r, "caddy").map_err(|e| e.to_string())));
        let e = rx
            .recv_timeout(std::time::Duration::from_secs(2))
            .expect("the lookup blocked on the FIFO")
            .unwrap_err();
        assert!(
            e.contains(&format!("{} is a FIFO, not a regular file", db.display())),
            "{e}"
        );
    }

    /// Proves the other refusals: a link at the database's name is not followed, and a database
    /// one byte past the bound is not read.
    #[test]
    fn a_linked_or_oversized_database_is_refused() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("etc")).unwrap();
        std::fs::write(root.path().join("real"), "caddy:x:998:997::/:/bin/sh\n").unwrap();
        std::os::unix::fs::symlink(root.path().join("real"), root.path().join("etc/passwd"))
            .unwrap();
        let e = uid(root.path(), "caddy").unwrap_err().to_string();
        assert!(e.contains("is a symbolic link, not a regular file"), "{e}");
        let big = std::fs::File::create(root.path().join("etc/group")).unwrap();
        big.set_len(MAX_DATABASE + 1).unwrap();
        let e = gid(root.path(), "caddy").unwrap_err().to_string();
        assert!(e.contains("is larger than 16 MiB"), "{e}");
        big.set_len(MAX_DATABASE).unwrap();
        let e = gid(root.path(), "caddy").unwrap_err().to_string();
        assert!(
            e.contains("has no entry for it"),
            "at the bound it is read: {e}"
        );
    }
}
