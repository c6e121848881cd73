//! Who holds the store's lock, said to whoever waits for it: the holder writes its pid, its
//! command and when it took the lock into the lock file, and a second act that finds the lock
//! taken says "waiting for the lock held by pid N (apply since 12:03:04 UTC, 2 min ago)" before it
//! waits, instead of waiting without a word.

use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::io::Read as _;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::FileExt as _;
use std::path::Path;

/// The store's lock, held: the holder's record is blanked when it is let go, so a lock file
/// holds a record only while some process holds the lock (or one that died did: the kernel's
/// word on the holder then disowns it).
pub(super) struct Held(Flock<File>);

/// The record's slot: written in place at the file's start, padded with spaces, and blanked (not
/// truncated) when the lock is let go, so the file keeps the one block it was given and a later
/// holder on a full disk takes no space the store's own writes need.
const SLOT: usize = 128;

impl Drop for Held {
    fn drop(&mut self) {
        let _ = (*self.0).write_all_at(&[b' '; SLOT], 0);
    }
}

/// Takes the exclusive lock on `lock` (the store's lock file at `path`), saying who holds it when
/// it must wait, then records this process as the holder.
pub(super) fn lock(lock: File, path: &Path) -> Result<Held, nix::errno::Errno> {
    let lock = match Flock::lock(lock, FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        Err((f, nix::errno::Errno::EWOULDBLOCK)) => {
            tracing::info!(
                target: "mesh_host::progress",
                "{}",
                waiting_line(&f, path)
            );
            Flock::lock(f, FlockArg::LockExclusive).map_err(|(_, e)| e)?
        }
        Err((_, e)) => return Err(e),
    };
    // The record is a courtesy to a waiter: a lock file that cannot be written is still a lock.
    let mut record =
        format!("{} {} {}", std::process::id(), link::now_secs(), command()).into_bytes();
    record.truncate(SLOT - 1);
    record.resize(SLOT - 1, b' ');
    record.push(b'\n');
    let _ = (*lock).write_all_at(&record, 0);
    Ok(Held(lock))
}

/// What a waiter says: the kernel's holder (`/proc/locks`), with the command and start time the
/// holder recorded when the record is its own.
fn waiting_line(lock: &File, path: &Path) -> String {
    let pid = lock.metadata().ok().and_then(|m| locked_by(&m));
    let record = recorded(lock).filter(|(p, _, _)| pid.is_none_or(|pid| pid == *p));
    match (pid, record) {
        (_, Some((pid, since, command))) => format!(
            "waiting for the lock held by pid {pid} ({command} since {}, {} ago) on store {}",
            clock(since),
            link::human::duration(link::now_secs().saturating_sub(since)),
            parent(path)
        ),
        (Some(pid), None) => format!(
            "waiting for the lock held by pid {pid} on store {}",
            parent(path)
        ),
        (None, None) => format!(
            "waiting for the lock of store {}, held by another process",
            parent(path)
        ),
    }
}

fn parent(path: &Path) -> String {
    path.parent().unwrap_or(path).display().to_string()
}

/// The holder's record, read through this process's own descriptor of the lock file (opened
/// for writing): the same file, whatever the path resolves to now.
fn recorded(lock: &File) -> Option<(u32, u64, String)> {
    let mut text = String::new();
    File::open(format!("/proc/self/fd/{}", lock.as_raw_fd()))
        .ok()?
        .take(512)
        .read_to_string(&mut text)
        .ok()?;
    let mut words = text.trim().splitn(3, ' ');
    let pid = words.next()?.parse().ok()?;
    let since = words.next()?.parse().ok()?;
    let command = words.next()?.to_string();
    Some((pid, since, command))
}

/// This process's command: the first word of its arguments that is not an option (nor
/// `--root`'s value), as `apply`, `reconcile` or `run`.
fn command() -> String {
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--root" {
            args.next();
        } else if !a.starts_with('-') {
            return a
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
        }
    }
    "mesh-host".to_string()
}

/// Seconds since the epoch as the time of day in UTC, `12:03:04 UTC`.
fn clock(secs: u64) -> String {
    let day = secs % 86_400;
    format!(
        "{:02}:{:02}:{:02} UTC",
        day / 3600,
        day % 3600 / 60,
        day % 60
    )
}

/// The pid `/proc/locks` gives the FLOCK on the file with this device and inode.
pub(crate) fn locked_by(m: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::MetadataExt as _;
    let dev = m.dev();
    // The kernel writes the device as `%02x:%02x` of its major and minor numbers.
    let want = format!(
        "{:02x}:{:02x}:{}",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev),
        m.ino()
    );
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    text.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 17383 fe:00:10019573 0 EOF"
        (f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&want.as_str()))
            .then(|| f.get(4)?.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_start_is_said_as_the_time_of_day_in_utc() {
        assert_eq!(super::clock(1_733_313_784), "12:03:04 UTC");
        assert_eq!(super::clock(0), "00:00:00 UTC");
    }
}
