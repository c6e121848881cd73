//! The legacy x_tables' fingerprint: every iptables and ip6tables table as the kernel holds it,
//! read with `getsockopt` (no child process, nothing parsed into rules), its counters left out.
//!
//! Legacy tables have no generation to ask, so a reconcile used to read both families' saves
//! (two child processes, every rule parsed) only to learn that nothing had changed. The kernel
//! hands out each table as one blob (`IPT_SO_GET_ENTRIES`, what `iptables-legacy-save` itself
//! reads): the fingerprint is a sha256 over each table's name, its hooks and size
//! (`IPT_SO_GET_INFO`) and that blob with each rule's packet and byte counters (which traffic
//! changes) and its `comefrom` (the kernel's own bookkeeping) zeroed. What a match or target keeps
//! of its own at run time (a rate limit's credit, a quota's remainder) is not copied out: the
//! kernel gives only each extension's `usersize` bytes and zeroes the rest. So the fingerprint
//! changes when and only when a rule, a chain, a policy or a table does.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use sha2::{Digest, Sha256};

use crate::error::{Errno, Error, Result};

/// `IPT_SO_GET_INFO` and `IP6T_SO_GET_INFO` (`IPT_BASE_CTL`).
const SO_GET_INFO: libc::c_int = 64;
/// `IPT_SO_GET_ENTRIES` and `IP6T_SO_GET_ENTRIES`.
const SO_GET_ENTRIES: libc::c_int = 65;
/// `XT_TABLE_MAXNAMELEN`.
const NAME_LEN: usize = 32;
/// `struct ipt_getinfo` (and `ip6t_getinfo`): the name, valid hooks, five hook entries, five
/// underflows, the number of entries and the blob's size, all `u32`.
const INFO_LEN: usize = NAME_LEN + 4 * (1 + 5 + 5 + 1 + 1);
/// `struct ipt_get_entries`' header: the name and the size, padded to the entries' alignment
/// (8: each entry holds `u64` counters).
const ENTRIES_HEAD: usize = 40;
/// A blob larger than this (about a million rules) is refused rather than read.
const MAX_BLOB: usize = 256 << 20;
/// Tries when the table changes between the two requests (the kernel answers `EAGAIN`).
const TRIES: usize = 5;

/// One family's legacy tables: where its table names are listed and how its entries are laid
/// out.
struct Legacy {
    tag: &'static [u8],
    names: &'static str,
    domain: libc::c_int,
    level: libc::c_int,
    /// `offsetof(entry, next_offset)` (a `u16`).
    next_offset_at: usize,
    /// `offsetof(entry, comefrom)` (a `u32`), followed by the counters.
    comefrom_at: usize,
    /// `offsetof(entry, counters)` (two `u64`).
    counters_at: usize,
    /// `sizeof(entry)`: the least an entry can be.
    entry_len: usize,
}

/// `struct ipt_entry`: `ipt_ip` (84 bytes), nfcache, target_offset, next_offset, comefrom,
/// counters.
const IPV4: Legacy = Legacy {
    tag: b"ip",
    names: "/proc/thread-self/net/ip_tables_names",
    domain: libc::AF_INET,
    level: libc::IPPROTO_IP,
    next_offset_at: 90,
    comefrom_at: 92,
    counters_at: 96,
    entry_len: 112,
};

/// `struct ip6t_entry`: `ip6t_ip6` (136 bytes), nfcache, target_offset, next_offset, comefrom,
/// padding, counters.
const IPV6: Legacy = Legacy {
    tag: b"ip6",
    names: "/proc/thread-self/net/ip6_tables_names",
    domain: libc::AF_INET6,
    level: libc::IPPROTO_IPV6,
    next_offset_at: 142,
    comefrom_at: 144,
    counters_at: 152,
    entry_len: 168,
};

/// The fingerprint of every legacy table of both families in the calling thread's network
/// namespace, as `sha256:<hex>`; `None` when there is none (nothing listed in
/// `/proc/net/ip_tables_names` or `ip6_tables_names`).
pub fn fingerprint() -> Result<Option<String>> {
    let mut hash = Sha256::new();
    // One buffer for every table, read into in place: a table of 10,000 rules is megabytes,
    // and neither copied out nor faulted in afresh for the next.
    let mut buf = Vec::new();
    let mut any = false;
    for family in [&IPV4, &IPV6] {
        let mut names = table_names(family.names)?;
        if names.is_empty() {
            continue;
        }
        names.sort();
        let sock = raw_socket(family)?;
        for name in &names {
            any = true;
            let (info, entries) = read_table(&sock, family, name, &mut buf)?;
            hash.update(family.tag);
            hash.update([0]);
            hash.update(info);
            hash.update((entries.len() as u64).to_le_bytes());
            hash.update(entries);
        }
    }
    if !any {
        return Ok(None);
    }
    let digest = hash.finalize();
    let mut text = String::with_capacity(7 + 64);
    text.push_str("sha256:");
    for b in digest {
        text.push_str(&format!("{b:02x}"));
    }
    Ok(Some(text))
}

/// The table names a family's `/proc/net` file lists (none when the file is missing: the module
/// is not loaded).
fn table_names(path: &str) -> Result<Vec<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::Socket {
            op: "reading the legacy table names",
            errno: Errno(e.raw_os_error().unwrap_or(libc::EIO)),
        }),
    }
}

fn raw_socket(family: &Legacy) -> Result<OwnedFd> {
    // SAFETY: socket returns a new descriptor or -1; it is owned at once.
    let fd = unsafe {
        libc::socket(
            family.domain,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::IPPROTO_RAW,
        )
    };
    if fd < 0 {
        return Err(Error::Socket {
            op: "socket for the legacy tables",
            errno: Errno::last(),
        });
    }
    // SAFETY: fd is a new descriptor no one else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `getsockopt(fd, level, opt, buf)`, the length the kernel says it wrote.
fn get(fd: &OwnedFd, level: libc::c_int, opt: libc::c_int, buf: &mut [u8]) -> Result<usize, Errno> {
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `buf`, which is that long.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            buf.as_mut_ptr().cast::<libc::c_void>(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(Errno::last());
    }
    Ok(len as usize)
}

/// One table's info and its entries with counters and `comefrom` zeroed, both read into `buf`.
fn read_table<'b>(
    sock: &OwnedFd,
    family: &Legacy,
    name: &str,
    buf: &'b mut Vec<u8>,
) -> Result<(&'b [u8], &'b [u8])> {
    if name.len() >= NAME_LEN || name.contains('\0') {
        return Err(Error::Socket {
            op: "a legacy table name longer than the kernel's",
            errno: Errno(libc::EINVAL),
        });
    }
    for _ in 0..TRIES {
        let mut info = [0u8; INFO_LEN];
        info[..name.len()].copy_from_slice(name.as_bytes());
        get(sock, family.level, SO_GET_INFO, &mut info).map_err(|errno| Error::Socket {
            op: "getsockopt IPT_SO_GET_INFO",
            errno,
        })?;
        let size = u32::from_ne_bytes(info[INFO_LEN - 4..].try_into().expect("4 bytes")) as usize;
        if size > MAX_BLOB {
            return Err(Error::Socket {
                op: "a legacy table larger than 256 MiB",
                errno: Errno(libc::EFBIG),
            });
        }
        // The info first, then the request's head and the entries the kernel writes after it.
        buf.clear();
        buf.extend_from_slice(&info);
        buf.resize(INFO_LEN + ENTRIES_HEAD + size, 0);
        let request = &mut buf[INFO_LEN..];
        request[..ENTRIES_HEAD].fill(0);
        request[..name.len()].copy_from_slice(name.as_bytes());
        request[NAME_LEN..NAME_LEN + 4].copy_from_slice(&(size as u32).to_ne_bytes());
        match get(sock, family.level, SO_GET_ENTRIES, request) {
            Ok(_) => {}
            // The table was replaced between the two requests, with another size.
            Err(Errno(libc::EAGAIN)) => continue,
            Err(errno) => {
                return Err(Error::Socket {
                    op: "getsockopt IPT_SO_GET_ENTRIES",
                    errno,
                })
            }
        }
        let (info, rest) = buf.split_at_mut(INFO_LEN);
        let entries = &mut rest[ENTRIES_HEAD..];
        without_counters(family, entries)?;
        return Ok((info, entries));
    }
    Err(Error::Socket {
        op: "getsockopt IPT_SO_GET_ENTRIES (the table kept changing)",
        errno: Errno(libc::EAGAIN),
    })
}

/// Zeroes each entry's `comefrom` and counters, walking the entries by their `next_offset`; a
/// blob that does not walk to its end is refused.
fn without_counters(family: &Legacy, blob: &mut [u8]) -> Result<()> {
    let malformed = || Error::Socket {
        op: "walking a legacy table's entries",
        errno: Errno(libc::EBADMSG),
    };
    let mut at = 0;
    while at < blob.len() {
        let entry = blob.get_mut(at..).ok_or_else(malformed)?;
        if entry.len() < family.entry_len {
            return Err(malformed());
        }
        let next = u16::from_ne_bytes([
            entry[family.next_offset_at],
            entry[family.next_offset_at + 1],
        ]) as usize;
        if next < family.entry_len || next > entry.len() {
            return Err(malformed());
        }
        entry[family.comefrom_at..family.comefrom_at + 4].fill(0);
        entry[family.counters_at..family.counters_at + 16].fill(0);
        at += next;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A blob of `n` minimal entries of `family`, each with counters and comefrom set.
    fn blob(family: &Legacy, n: usize, fill: u8) -> Vec<u8> {
        let mut b = vec![0u8; family.entry_len * n];
        for i in 0..n {
            let e = &mut b[i * family.entry_len..(i + 1) * family.entry_len];
            e[family.next_offset_at..family.next_offset_at + 2]
                .copy_from_slice(&(family.entry_len as u16).to_ne_bytes());
            e[family.comefrom_at..family.comefrom_at + 4].fill(fill);
            e[family.counters_at..family.counters_at + 16].fill(fill);
            e[0] = i as u8;
        }
        b
    }

    #[test]
    fn counters_and_comefrom_are_zeroed_and_nothing_else() {
        for family in [&IPV4, &IPV6] {
            let mut a = blob(family, 3, 0xaa);
            let mut b = blob(family, 3, 0x55);
            assert_ne!(a, b);
            without_counters(family, &mut a).unwrap();
            without_counters(family, &mut b).unwrap();
            assert_eq!(a, b, "{}", String::from_utf8_lossy(family.tag));
            // The rule's own bytes are kept.
            assert_eq!(a[family.entry_len], 1);
        }
    }

    #[test]
    fn a_blob_that_does_not_walk_to_its_end_is_refused() {
        let mut short = blob(&IPV4, 2, 0);
        short.truncate(IPV4.entry_len + 10);
        assert!(without_counters(&IPV4, &mut short).is_err());
        let mut zero = blob(&IPV4, 1, 0);
        zero[IPV4.next_offset_at..IPV4.next_offset_at + 2].fill(0);
        assert!(without_counters(&IPV4, &mut zero).is_err());
    }
}
