//! A file record's stamp: what its digest was taken of, so an unchanged file is not read again.

use serde::{Deserialize, Serialize};

/// What a file's digest was taken of, read by `fstat` on the handle it was read through: its
/// device and inode, its size, and its modification and change times with their nanoseconds.
/// Any write to the file moves its change time (so does `utime` putting its modification time
/// back, a `chmod`, a `chown`, a rename onto it makes another inode), so a file that still shows
/// the same stamp holds the bytes its digest was taken of, and is not read again.
///
/// A stamp is kept only when it is *settled*: its change time is older than the coarse clock
/// read before the `fstat`. A write in the same clock tick as the reading could otherwise leave
/// the change time as it was (the racy case); one that is older than the reading's tick cannot be
/// repeated by any later write.
///
/// Stored as one short string, `dev:ino:size:mtime:ctime` with each time as
/// `seconds.nanoseconds` (`2049:1835016:4294967296:1764871200.123456789:1764871200.123456789`):
/// a stamp is kept for every file larger than one read, and the store is read whole by every
/// command, so it costs a line, not an object of seven.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(into = "String", try_from = "String")]
pub struct Stamp {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    /// Seconds and nanoseconds.
    pub mtime: [i64; 2],
    pub ctime: [i64; 2],
}

impl From<Stamp> for String {
    fn from(s: Stamp) -> String {
        format!(
            "{}:{}:{}:{}.{:09}:{}.{:09}",
            s.dev, s.ino, s.size, s.mtime[0], s.mtime[1], s.ctime[0], s.ctime[1]
        )
    }
}

/// A stamp's text that does not read as one.
#[derive(Debug, thiserror::Error)]
#[error("not a file's stamp (dev:ino:size:mtime:ctime): {0:?}")]
pub struct BadStamp(String);

impl TryFrom<String> for Stamp {
    type Error = BadStamp;
    fn try_from(text: String) -> Result<Stamp, BadStamp> {
        let bad = || BadStamp(text.clone());
        let time = |t: &str| -> Option<[i64; 2]> {
            let (s, ns) = t.split_once('.')?;
            let ns: i64 = ns.parse().ok()?;
            (0..1_000_000_000)
                .contains(&ns)
                .then_some([s.parse().ok()?, ns])
        };
        let parts: Vec<&str> = text.split(':').collect();
        let [dev, ino, size, mtime, ctime] = parts[..] else {
            return Err(bad());
        };
        Ok(Stamp {
            dev: dev.parse().map_err(|_| bad())?,
            ino: ino.parse().map_err(|_| bad())?,
            size: size.parse().map_err(|_| bad())?,
            mtime: time(mtime).ok_or_else(bad)?,
            ctime: time(ctime).ok_or_else(bad)?,
        })
    }
}
