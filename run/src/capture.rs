//! What a call keeps of a child's output stream: a bounded head and tail with the count of what
//! was read between them and dropped, or the whole stream up to a limit for a caller that parses
//! it. Either way the stream is read to its end, so the child never blocks on a full pipe.

use std::fmt;

/// How many bytes an excerpt keeps at each end of a stream: 64 KiB of head, 64 KiB of tail.
pub const EXCERPT_BYTES: usize = 64 * 1024;

/// How much of its stdout a call that reads it whole may be given: 64 MiB.
pub const WHOLE_LIMIT: usize = 64 << 20;

/// How much of one output stream a call keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The first `head` and the last `tail` bytes. What lies between is read and dropped, and
    /// the kept bytes say how much: `\n… N bytes elided …\n` between the two ends.
    Ends { head: usize, tail: usize },
    /// All of it, up to `limit` bytes: for output that is parsed, where a cut would be read as a
    /// smaller truth. Past the limit the rest is read and dropped and the call fails with
    /// [`PastLimit`] once the child ended.
    Whole { limit: usize },
}

impl Keep {
    /// What stderr is kept as, always, and stdout where the caller only shows it (an action's
    /// commands): [`EXCERPT_BYTES`] at each end.
    pub const EXCERPT: Keep = Keep::Ends {
        head: EXCERPT_BYTES,
        tail: EXCERPT_BYTES,
    };

    /// What stdout is kept as unless a call says otherwise: whole, up to [`WHOLE_LIMIT`].
    pub const WHOLE: Keep = Keep::Whole { limit: WHOLE_LIMIT };
}

/// Why a call that reads its stdout whole failed: the child printed more than the limit.
#[derive(Debug)]
pub struct PastLimit {
    pub argv: Vec<String>,
    pub limit: usize,
    /// How many bytes it printed in all.
    pub printed: u64,
    /// How it ended: "exited with status 0".
    pub status: String,
}

impl fmt::Display for PastLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} printed {} bytes on stdout, more than the {} bytes read from it, and {}",
            crate::spawn::command_line(&self.argv),
            self.printed,
            self.limit,
            self.status
        )
    }
}

impl std::error::Error for PastLimit {}

/// One stream being read under a [`Keep`].
pub(crate) struct Capture {
    keep: Keep,
    head: Vec<u8>,
    tail: Ring,
    /// Every byte read, kept or not.
    seen: u64,
}

impl Capture {
    pub(crate) fn new(keep: Keep) -> Capture {
        let tail = match keep {
            Keep::Ends { tail, .. } => tail,
            Keep::Whole { .. } => 0,
        };
        Capture {
            keep,
            head: Vec::new(),
            tail: Ring::new(tail),
            seen: 0,
        }
    }

    /// How many bytes of the stream are kept at most, for a message.
    pub(crate) fn limit(&self) -> usize {
        match self.keep {
            Keep::Ends { head, tail } => head + tail,
            Keep::Whole { limit } => limit,
        }
    }

    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        self.seen += bytes.len() as u64;
        let head = match self.keep {
            Keep::Ends { head, .. } => head,
            Keep::Whole { limit } => limit,
        };
        let room = head.saturating_sub(self.head.len()).min(bytes.len());
        self.head.extend_from_slice(&bytes[..room]);
        bytes = &bytes[room..];
        self.tail.push(bytes);
    }

    /// What is kept: the whole stream, or its two ends with the count of the bytes between; for
    /// [`Keep::Whole`] past its limit, how many bytes were printed.
    pub(crate) fn finish(self) -> Result<Vec<u8>, u64> {
        if let Keep::Whole { limit } = self.keep {
            return if self.seen > limit as u64 {
                Err(self.seen)
            } else {
                Ok(self.head)
            };
        }
        let mut kept = self.head;
        let tail = self.tail.into_bytes();
        let elided = self.seen - kept.len() as u64 - tail.len() as u64;
        if elided > 0 {
            kept.extend_from_slice(format!("\n… {elided} bytes elided …\n").as_bytes());
        }
        kept.extend_from_slice(&tail);
        Ok(kept)
    }
}

/// The last `cap` bytes written to it, in a buffer allocated once.
struct Ring {
    buf: Vec<u8>,
    /// Where the next byte goes.
    at: usize,
    full: bool,
}

impl Ring {
    fn new(cap: usize) -> Ring {
        Ring {
            buf: vec![0; cap],
            at: 0,
            full: false,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        let cap = self.buf.len();
        if cap == 0 || bytes.is_empty() {
            return;
        }
        if bytes.len() >= cap {
            self.buf.copy_from_slice(&bytes[bytes.len() - cap..]);
            self.at = 0;
            self.full = true;
            return;
        }
        let first = (cap - self.at).min(bytes.len());
        self.buf[self.at..self.at + first].copy_from_slice(&bytes[..first]);
        let rest = &bytes[first..];
        self.buf[..rest.len()].copy_from_slice(rest);
        let end = self.at + bytes.len();
        if end >= cap {
            self.full = true;
        }
        self.at = end % cap;
    }

    fn into_bytes(mut self) -> Vec<u8> {
        if self.full {
            self.buf.rotate_left(self.at);
        } else {
            self.buf.truncate(self.at);
        }
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through(keep: Keep, chunks: &[&[u8]]) -> Result<Vec<u8>, u64> {
        let mut c = Capture::new(keep);
        for chunk in chunks {
            c.push(chunk);
        }
        c.finish()
    }

    #[test]
    fn ends_keep_the_head_and_the_tail_and_count_what_lies_between() {
        let keep = Keep::Ends { head: 4, tail: 3 };
        assert_eq!(through(keep, &[b"abc"]).unwrap(), b"abc");
        assert_eq!(through(keep, &[b"abcdefg"]).unwrap(), b"abcdefg");
        assert_eq!(
            through(keep, &[b"ab", b"cdef", b"ghij", b"k"]).unwrap(),
            "abcd\n… 4 bytes elided …\nijk".as_bytes()
        );
        // A chunk longer than the tail, then short ones wrapping around the ring.
        assert_eq!(
            through(keep, &[b"abcd", b"0123456789", b"x", b"yz"]).unwrap(),
            "abcd\n… 10 bytes elided …\nxyz".as_bytes()
        );
        assert_eq!(
            through(keep, &[b"abcd", b"12", b"345"]).unwrap(),
            "abcd\n… 2 bytes elided …\n345".as_bytes()
        );
    }

    #[test]
    fn whole_keeps_everything_to_its_limit_and_says_how_much_past_it() {
        let keep = Keep::Whole { limit: 5 };
        assert_eq!(through(keep, &[b"ab", b"cde"]).unwrap(), b"abcde");
        assert_eq!(through(keep, &[b"ab", b"cdef", b"gh"]), Err(8));
    }
}
