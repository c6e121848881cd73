//! A regular file found at a declared path, open for reading: streamed, compared, digested,
//! and stamped so that an unchanged file is not read again.

use super::*;
use nix::time::{clock_gettime, ClockId};

/// A regular file found at a declared path, open for reading.
#[derive(Debug)]
pub struct Found {
    pub file: File,
    pub size: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Its identity and times, by `fstat` on this handle.
    pub stamp: super::Stamp,
    /// Whether its change time was older than the clock's tick before the `fstat` (see
    /// [`super::Stamp`]): only then is the stamp kept beside a digest read through this
    /// handle.
    pub settled: bool,
    /// When a whole read of it gives up (`settings.found_read_s`), with the seconds it was given:
    /// a read past it fails with `TimedOut`, naming them. `None`: no deadline.
    pub deadline: Option<(std::time::Instant, u64)>,
}

/// Bytes read per call when a found file is streamed.
const CHUNK: usize = 64 * 1024;

impl Found {
    /// Reads the whole file through `each` in chunks from offset 0 (never all at once).
    pub fn stream(
        &self,
        mut each: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<u64> {
        let mut buf = vec![0u8; CHUNK];
        let mut at = 0u64;
        loop {
            if let Some((by, secs)) = self.deadline {
                if std::time::Instant::now() > by {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "read stopped after {at} of {} bytes: past its deadline of {secs} s \
                             (settings.found_read_s)",
                            self.size
                        ),
                    ));
                }
            }
            let n = match self.file.read_at(&mut buf, at) {
                Ok(0) => return Ok(at),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            each(&buf[..n])?;
            at += n as u64;
        }
    }

    /// Whether the file holds exactly `bytes`: the length first, then streamed.
    pub fn holds(&self, bytes: &[u8]) -> std::io::Result<bool> {
        if self.size != bytes.len() as u64 {
            return Ok(false);
        }
        let mut rest = bytes;
        let mut same = true;
        let read = self.stream(|chunk| {
            if same {
                same = rest.len() >= chunk.len() && rest[..chunk.len()] == *chunk;
                if same {
                    rest = &rest[chunk.len()..];
                }
            }
            Ok(())
        })?;
        Ok(same && rest.is_empty() && read == bytes.len() as u64)
    }

    /// The stamp to keep beside a digest read through this handle: `None` when it is not settled,
    /// or when the file is read in one call (no larger than a chunk), which costs no more than
    /// its stamp would cost the store.
    pub fn settled_stamp(&self) -> Option<super::Stamp> {
        (self.settled && self.size > CHUNK as u64).then_some(self.stamp)
    }

    /// Whether `recorded` is a stamp this file still shows: its digest is then the record's, and
    /// nothing need be read.
    pub fn unchanged_since(&self, recorded: Option<&super::Stamp>) -> bool {
        recorded == Some(&self.stamp)
    }

    /// The file's digest as the store writes digests (`sha256:<hex>`), streamed.
    pub fn digest(&self) -> std::io::Result<String> {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        self.stream(|c| {
            h.update(c);
            Ok(())
        })?;
        Ok(hex(&h.finalize()))
    }
}

/// `sha256:<hex>` of a finished sha256.
pub fn hex(sum: &[u8]) -> String {
    let mut out = String::with_capacity(71);
    out.push_str("sha256:");
    for b in sum {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The coarse real-time clock (seconds, nanoseconds): the clock the kernel stamps a file's change
/// time from (or a finer one), read before a file's `fstat` to tell whether the change time it
/// shows is settled.
pub(super) fn coarse_now() -> [i64; 2] {
    // CLOCK_REALTIME_COARSE always exists on Linux; on failure the time is zero, and no change
    // time is then settled.
    clock_gettime(ClockId::CLOCK_REALTIME_COARSE).map_or([0, 0], |ts| [ts.tv_sec(), ts.tv_nsec()])
}
