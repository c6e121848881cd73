//! Which processes hold a socket: every `/proc/PID/fd/*` link reading `socket:[INODE]`, with the
//! process's name from `/proc/PID/comm`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;

/// A process holding a socket open.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Owner {
    pub pid: u32,
    /// The kernel's name for the process (`/proc/PID/comm`, at most 15 bytes).
    pub name: String,
}

/// Maps each wanted socket inode to the processes holding it. Processes that vanish mid-scan or
/// whose descriptors cannot be read (another user's, when not root) are passed over: the socket is
/// still listed, only without that owner. A child caught between fork and exec briefly shares its
/// parent's descriptors, so it can show up as an extra owner for that instant.
pub(crate) fn owners_of(inodes: &BTreeSet<u64>) -> BTreeMap<u64, Vec<Owner>> {
    let mut found: BTreeMap<u64, BTreeSet<Owner>> = BTreeMap::new();
    if inodes.is_empty() {
        return BTreeMap::new();
    }
    let Ok(procs) = fs::read_dir("/proc") else {
        return BTreeMap::new();
    };
    for entry in procs.filter_map(|e| e.ok()) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let mut name: Option<String> = None;
        for fd in fds.filter_map(|e| e.ok()) {
            let Ok(target) = fs::read_link(fd.path()) else {
                continue;
            };
            let Some(inode) = target.to_str().and_then(socket_inode) else {
                continue;
            };
            if !inodes.contains(&inode) {
                continue;
            }
            let name = name
                .get_or_insert_with(|| {
                    fs::read_to_string(entry.path().join("comm"))
                        .map(|c| c.trim_end_matches('\n').to_owned())
                        .unwrap_or_default()
                })
                .clone();
            found.entry(inode).or_default().insert(Owner { pid, name });
        }
    }
    found
        .into_iter()
        .map(|(inode, owners)| (inode, owners.into_iter().collect()))
        .collect()
}

/// The inode in a descriptor link of the form `socket:[12345]`.
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_links_are_recognised() {
        assert_eq!(socket_inode("socket:[12345]"), Some(12345));
        assert_eq!(socket_inode("pipe:[12345]"), None);
        assert_eq!(socket_inode("/dev/null"), None);
        assert_eq!(socket_inode("socket:[x]"), None);
    }

    #[test]
    fn this_process_owns_its_own_socket() {
        use std::os::unix::fs::MetadataExt;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
        let inode = fs::metadata(format!("/proc/self/fd/{fd}")).unwrap().ino();
        let owners = owners_of(&BTreeSet::from([inode]));
        let me = std::process::id();
        assert!(owners[&inode].iter().any(|o| o.pid == me), "{owners:?}");
    }
}
