//! Account lookups: user and group names to ids, read from the machine's own `/etc/passwd` and
//! `/etc/group` (under the root).
//!
//! Not through the C library's name service: the host is one static binary, and a statically
//! linked glibc can only answer `getpwnam` by loading the very shared libraries it was meant to do
//! without. Accounts from a network directory (LDAP, SSSD) are therefore not names the host knows;
//! a declaration gives their numeric ids.

use std::path::{Path, PathBuf};

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
    /// The database has no entry for the name.
    #[error("{what} {name:?} does not exist on this machine ({} has no entry for it)", db.display())]
    Missing {
        what: &'static str,
        name: String,
        db: PathBuf,
    },
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
    let text = std::fs::read_to_string(&path).map_err(|source| AccountError::Read {
        what,
        name: name.to_string(),
        db: path.clone(),
        source,
    })?;
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
}
