//! The store's journal: one line per record, appended and fsynced beside the snapshot, so a
//! record costs the same however large the store is.
//!
//! `state.journal` opens with a header naming the snapshot it applies over, by the digest of
//! `state.json`'s bytes; every later line is one [`Op`]. Each line is `<crc> <json>`: the CRC-32C
//! of the JSON, seeded with the CRC of the line before (see `checksum`), in 8 hex digits.
//! Replaying it means reading the snapshot and applying each line in order. A journal whose
//! header names another snapshot is stale (a fold renamed the new snapshot into place and died
//! before removing it): everything in it is already in the snapshot, and it is ignored. The last
//! line is where a crash tears the journal: without its newline (the host died inside the
//! append) or failing its checksum, it ends the replay, and the truth is what came before it
//! (the host had not gone on past it). Any line before the last that fails its checksum or does
//! not read is corruption, refused with its line number and byte offset: whole records after it
//! say the host went on, so no truth can be read past it.
//!
//! A journal of the previous format (version 1: bare JSON lines, no checksum) is replayed as it
//! was, only over a snapshot of the previous format (see `store::load`).

use super::checksum::{crc32c, crc_text};
use super::{Held, Original, Owned, State};
use crate::declaration::Shape;
use serde::{Deserialize, Serialize};

/// The journal's file name, beside `state.json`.
pub const FILE: &str = "state.journal";

/// The first line of a journal: which snapshot it applies over.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// The journal's own format version.
    pub journal: u32,
    /// The digest of the snapshot's bytes (`store::digest`).
    pub over: String,
}

/// The journal's format version: 2 since its lines carry checksums.
pub const JOURNAL_VERSION: u32 = 2;

/// The previous format's version, read over a snapshot of the previous format.
pub const UNCHECKED_VERSION: u32 = 1;

/// One change to the store's records, as journaled and as applied.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum Op {
    /// What the host is about to write: the pending intent.
    Intend(Owned),
    /// The pending intent of resource `id` worked and was read back: it becomes its record.
    Commit(String),
    /// An owned record, after it worked (it also settles any pending intent).
    Own(Owned),
    Hold(Held),
    /// An owned record dropped: the thing was removed, or forgotten by the asymmetry.
    Unown {
        id: String,
        shape: Shape,
        key: String,
    },
    /// A held resource released.
    Release(String),
    /// The original of a found file, saved.
    Original(Original),
}

/// Why a journal does not apply over its snapshot.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// A commit with no intent of the same resource before it.
    #[error("resource {id:?} is committed without its pending intent")]
    Uncommitted { id: String },
    #[error("line 1 is not a header: {0}")]
    Header(#[source] serde_json::Error),
    #[error("journal format version {0}; this host reads versions {UNCHECKED_VERSION} and {JOURNAL_VERSION}")]
    Version(u32),
    /// A line before the last fails its checksum: lines after it were written whole, so this is
    /// damage, not a torn append.
    #[error("line {line} (byte {offset}) fails its checksum and whole lines follow it: the journal is damaged, not torn")]
    Damaged { line: usize, offset: usize },
    /// The last line holds a whole record that passes its checksum, and more after it: the
    /// newline between two records was damaged.
    #[error("line {line} (byte {offset}) holds a whole record and more after it: the journal is damaged, not torn")]
    Joined { line: usize, offset: usize },
    #[error("a journal of format version {UNCHECKED_VERSION} (no checksums) over a snapshot that has one")]
    Unchecked,
    #[error("line {line} does not read: {source}")]
    Unreadable {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    /// A line that reads but does not apply.
    #[error("line {line}: {source}")]
    Line {
        line: usize,
        #[source]
        source: Box<JournalError>,
    },
}

impl State {
    /// Applies one change: the same function records it live and replays it from the journal,
    /// so the two can never disagree.
    pub fn apply_op(&mut self, op: &Op) -> Result<(), JournalError> {
        match op {
            Op::Intend(rec) => {
                self.pending = Some(super::Pending {
                    record: rec.clone(),
                })
            }
            Op::Commit(id) => match self.pending.take() {
                Some(p) if p.record.id == *id => self.record_owned(p.record),
                other => {
                    self.pending = other;
                    return Err(JournalError::Uncommitted { id: id.clone() });
                }
            },
            Op::Own(rec) => {
                self.pending = None;
                self.record_owned(rec.clone());
            }
            Op::Hold(rec) => self.record_held(rec.clone()),
            Op::Unown { id, shape, key } => self.forget_owned(id, *shape, key),
            Op::Release(id) => self.release_held(id),
            Op::Original(o) => self.add_original(o.clone()),
        }
        Ok(())
    }
}

/// One line of the journal, newline included, checksummed and chained to the line before it,
/// whose CRC is `prev` (0 for the header); with its own CRC, the next line's `prev`.
pub fn line<T: Serialize>(prev: u32, value: &T) -> (Vec<u8>, u32) {
    let json = serde_json::to_vec(value).expect("a journal line serializes");
    let crc = crc32c(prev, &json);
    let mut bytes = Vec::with_capacity(json.len() + 10);
    bytes.extend_from_slice(&crc_text(crc));
    bytes.push(b' ');
    bytes.extend_from_slice(&json);
    bytes.push(b'\n');
    (bytes, crc)
}

/// Lines of the journal one after another, each chained to the one before: the header first.
#[derive(Debug, Default, Clone)]
pub struct Chain(u32);

impl Chain {
    /// A new journal's chain, before its header.
    pub fn new() -> Chain {
        Chain(0)
    }

    /// The next line; the chain moves on only when [`Chain::advance`] is given its CRC (after
    /// the append holds it).
    pub fn line<T: Serialize>(&self, value: &T) -> (Vec<u8>, u32) {
        line(self.0, value)
    }

    pub fn advance(&mut self, crc: u32) {
        self.0 = crc;
    }
}

/// The JSON of a whole line (its newline already removed) when its checksum holds over `prev`.
fn checked(line: &[u8], prev: u32) -> Option<(&[u8], u32)> {
    let (crc, rest) = line.split_at_checked(8)?;
    let json = rest.strip_prefix(b" ")?;
    let computed = crc32c(prev, json);
    (crc == crc_text(computed)).then_some((json, computed))
}

/// Whether a line that fails its checksum begins with a whole record that passes it: two lines
/// joined by a damaged newline, never what a torn append leaves.
fn joined(line: &[u8], prev: u32) -> bool {
    let Some(rest) = line.get(9..) else {
        return false;
    };
    let mut values =
        serde_json::Deserializer::from_slice(rest).into_iter::<serde::de::IgnoredAny>();
    if !matches!(values.next(), Some(Ok(_))) {
        return false;
    }
    let end = 9 + values.byte_offset();
    end < line.len() && checked(&line[..end], prev).is_some()
}

/// What reading a journal over a snapshot found.
#[derive(Debug, PartialEq, Eq)]
pub enum Replayed {
    /// The journal applies over this snapshot; `ops` lines were applied, and `torn` says whether
    /// an unfinished last line was left out.
    Applied { ops: usize, torn: bool },
    /// The journal names another snapshot (or none could be read): nothing applied.
    Stale,
}

/// Applies the journal's lines over `state`, whose snapshot has digest `snapshot`. `unchecked`
/// allows a journal of the previous format (no checksums), for a snapshot of the previous
/// format. Errors name the line and, for a checksum, its byte offset.
pub fn replay(
    bytes: &[u8],
    snapshot: &str,
    unchecked: bool,
    state: &mut State,
) -> Result<Replayed, JournalError> {
    if bytes.first() == Some(&b'{') {
        return replay_unchecked(bytes, snapshot, unchecked, state);
    }
    let (complete, torn) = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(end) => (&bytes[..=end], end + 1 < bytes.len()),
        None => (&bytes[..0], !bytes.is_empty()),
    };
    // Each whole line with its offset; the last is the one a crash may have damaged.
    let mut lines = Vec::new();
    let mut offset = 0;
    for l in complete.split_inclusive(|&b| b == b'\n') {
        lines.push((offset, &l[..l.len() - 1]));
        offset += l.len();
    }
    let last = lines.len();
    let mut prev = 0;
    let mut ops = 0;
    for (n, &(offset, l)) in lines.iter().enumerate() {
        let line = n + 1;
        let Some((json, crc)) = checked(l, prev) else {
            if line < last {
                return Err(JournalError::Damaged { line, offset });
            }
            if joined(l, prev) {
                return Err(JournalError::Joined { line, offset });
            }
            // The last line, torn by a crash: the truth is what came before it.
            return Ok(Replayed::Applied { ops, torn: true });
        };
        prev = crc;
        if line == 1 {
            let header: Header = serde_json::from_slice(json).map_err(JournalError::Header)?;
            if header.journal != JOURNAL_VERSION {
                return Err(JournalError::Version(header.journal));
            }
            if header.over != snapshot {
                return Ok(Replayed::Stale);
            }
            continue;
        }
        apply_line(state, line, json)?;
        ops += 1;
    }
    Ok(Replayed::Applied { ops, torn })
}

/// Applies the record on journal line `line` (its JSON) to `state`: the step both formats'
/// replays share.
fn apply_line(state: &mut State, line: usize, json: &[u8]) -> Result<(), JournalError> {
    let op: Op =
        serde_json::from_slice(json).map_err(|source| JournalError::Unreadable { line, source })?;
    state.apply_op(&op).map_err(|e| JournalError::Line {
        line,
        source: Box::new(e),
    })
}

/// The previous format: bare JSON lines; a last line without its newline is torn.
fn replay_unchecked(
    bytes: &[u8],
    snapshot: &str,
    allowed: bool,
    state: &mut State,
) -> Result<Replayed, JournalError> {
    let (complete, torn) = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(end) => (&bytes[..=end], end + 1 < bytes.len()),
        None => (&bytes[..0], !bytes.is_empty()),
    };
    let mut lines = complete.split(|&b| b == b'\n').filter(|l| !l.is_empty());
    let Some(first) = lines.next() else {
        // Not even the header was finished: the journal never held a record.
        return Ok(Replayed::Applied { ops: 0, torn });
    };
    let header: Header = serde_json::from_slice(first).map_err(JournalError::Header)?;
    if header.journal != UNCHECKED_VERSION {
        return Err(JournalError::Version(header.journal));
    }
    if header.over != snapshot {
        return Ok(Replayed::Stale);
    }
    if !allowed {
        return Err(JournalError::Unchecked);
    }
    let mut ops = 0;
    for (n, l) in lines.enumerate() {
        apply_line(state, n + 2, l)?;
        ops += 1;
    }
    Ok(Replayed::Applied { ops, torn })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(id: &str) -> Owned {
        Owned {
            parents: Vec::new(),
            id: id.into(),
            module: None,
            shape: Shape::File,
            key: format!("/etc/{id}"),
            digest: Some("sha256:00".into()),
            found: false,
            stamp: None,
        }
    }

    fn journal(ops: &[Op]) -> Vec<u8> {
        let mut chain = Chain::new();
        let (mut out, crc) = chain.line(&Header {
            journal: JOURNAL_VERSION,
            over: "sha256:snap".into(),
        });
        chain.advance(crc);
        for op in ops {
            let (l, crc) = chain.line(op);
            chain.advance(crc);
            out.extend(l);
        }
        out
    }

    fn replay_new(bytes: &[u8], s: &mut State) -> Result<Replayed, JournalError> {
        replay(bytes, "sha256:snap", false, s)
    }

    #[test]
    fn replay_applies_every_line_in_order() {
        let bytes = journal(&[
            Op::Intend(owned("a")),
            Op::Commit("a".into()),
            Op::Own(owned("b")),
            Op::Unown {
                id: "a".into(),
                shape: Shape::File,
                key: "/etc/a".into(),
            },
            Op::Intend(owned("c")),
        ]);
        let mut s = State::default();
        let r = replay_new(&bytes, &mut s).unwrap();
        assert_eq!(
            r,
            Replayed::Applied {
                ops: 5,
                torn: false
            }
        );
        assert_eq!(
            s.owned.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(),
            ["b"]
        );
        assert_eq!(s.pending.map(|p| p.record), Some(owned("c")));
    }

    #[test]
    fn a_torn_last_line_is_left_out_at_every_cut() {
        let whole = journal(&[Op::Own(owned("a")), Op::Own(owned("b"))]);
        let before_b = journal(&[Op::Own(owned("a"))]);
        // Every cut inside the last line: the state is exactly the one before it.
        for cut in before_b.len() + 1..whole.len() {
            let mut s = State::default();
            let r = replay_new(&whole[..cut], &mut s).unwrap();
            assert_eq!(r, Replayed::Applied { ops: 1, torn: true }, "cut {cut}");
            assert_eq!(s.owned.len(), 1, "cut {cut}");
            assert_eq!(s.owned[0].id, "a");
        }
        // A power cut can leave zeros where the last line should be.
        let mut zeros = before_b.clone();
        zeros.extend([0u8; 40]);
        let mut s = State::default();
        let r = replay_new(&zeros, &mut s).unwrap();
        assert_eq!(r, Replayed::Applied { ops: 1, torn: true });
        // A header cut short holds nothing.
        let mut s = State::default();
        let r = replay_new(&whole[..10], &mut s).unwrap();
        assert_eq!(r, Replayed::Applied { ops: 0, torn: true });
        assert_eq!(s, State::default());
    }

    #[test]
    fn a_journal_over_another_snapshot_is_stale() {
        let bytes = journal(&[Op::Own(owned("a"))]);
        let mut s = State::default();
        assert_eq!(
            replay(&bytes, "sha256:other", false, &mut s).unwrap(),
            Replayed::Stale
        );
        assert!(s.owned.is_empty());
    }

    /// A record that fails its checksum with whole lines after it refuses the journal, naming its
    /// line and offset; the last one ends the replay before it; two lines joined by a damaged
    /// newline are refused, not taken for a torn tail.
    #[test]
    fn a_damaged_line_is_refused_inside_and_ends_the_replay_at_the_tail() {
        let ops = [
            Op::Own(owned("a")),
            Op::Own(owned("b")),
            Op::Own(owned("c")),
        ];
        let bytes = journal(&ops);
        let starts: Vec<usize> = std::iter::once(0)
            .chain(
                bytes
                    .iter()
                    .enumerate()
                    .filter(|(_, &b)| b == b'\n')
                    .map(|(i, _)| i + 1),
            )
            .collect();
        // In line 3 (the record of "b"): refused, named.
        let mut bad = bytes.clone();
        bad[starts[2] + 20] ^= 0x20;
        let e = replay_new(&bad, &mut State::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "line 3 (byte {}) fails its checksum and whole lines follow it: the journal is \
                 damaged, not torn",
                starts[2]
            )
        );
        // In the last line: the replay stops before it.
        let mut bad = bytes.clone();
        bad[starts[3] + 20] ^= 0x20;
        let mut s = State::default();
        assert_eq!(
            replay_new(&bad, &mut s).unwrap(),
            Replayed::Applied { ops: 2, torn: true }
        );
        assert_eq!(s.owned.len(), 2);
        // The newline between the last two lines: refused.
        let mut bad = bytes.clone();
        bad[starts[3] - 1] = b' ';
        let e = replay_new(&bad, &mut State::default()).unwrap_err();
        assert!(matches!(e, JournalError::Joined { line: 3, .. }), "{e}");
        // A line moved: its chain breaks.
        let mut lines: Vec<&[u8]> = bytes.split_inclusive(|&b| b == b'\n').collect();
        lines.swap(1, 2);
        let e = replay_new(&lines.concat(), &mut State::default()).unwrap_err();
        assert!(matches!(e, JournalError::Damaged { line: 2, .. }), "{e}");
    }

    #[test]
    fn a_broken_line_before_the_last_is_corruption_named_by_line() {
        let bytes = journal(&[Op::Commit("a".into())]);
        let e = replay_new(&bytes, &mut State::default())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "line 2: resource \"a\" is committed without its pending intent"
        );
    }

    /// The previous format (bare JSON lines) replays over a snapshot of the previous format, and
    /// is refused over one with a checksum.
    #[test]
    fn a_journal_of_the_previous_format_replays_only_over_a_previous_snapshot() {
        let mut bytes = serde_json::to_vec(&Header {
            journal: UNCHECKED_VERSION,
            over: "sha256:snap".into(),
        })
        .unwrap();
        bytes.push(b'\n');
        bytes.extend(serde_json::to_vec(&Op::Own(owned("a"))).unwrap());
        bytes.push(b'\n');
        let mut s = State::default();
        assert_eq!(
            replay(&bytes, "sha256:snap", true, &mut s).unwrap(),
            Replayed::Applied {
                ops: 1,
                torn: false
            }
        );
        assert_eq!(s.owned.len(), 1);
        let e = replay(&bytes, "sha256:snap", false, &mut State::default()).unwrap_err();
        assert!(matches!(e, JournalError::Unchecked), "{e}");
        assert_eq!(
            replay(&bytes, "sha256:other", false, &mut State::default()).unwrap(),
            Replayed::Stale
        );
    }
}
