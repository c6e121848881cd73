//! The store's journal: one JSON line per record, appended and fsynced beside the snapshot, so a
//! record costs the same however large the store is.
//!
//! `state.journal` opens with a header naming the snapshot it applies over, by the digest of
//! `state.json`'s bytes; every later line is one [`Op`]. Replaying it means reading the snapshot
//! and applying each line in order. A journal whose header names another snapshot is stale (a
//! fold renamed the new snapshot into place and died before removing it): everything in it is
//! already in the snapshot, and it is ignored. A last line without its newline is an append that
//! never finished (the host died inside it): the host had not gone on past it, so it is ignored
//! and the truth is what came before it. Any other line that does not read is corruption, named
//! with its line number.

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

/// The journal's format version.
pub const JOURNAL_VERSION: u32 = 1;

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
    #[error("journal format version {0}; this host reads version {JOURNAL_VERSION}")]
    Version(u32),
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

/// One line of the journal, newline included.
pub fn line<T: Serialize>(value: &T) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(value).expect("a journal line serializes");
    bytes.push(b'\n');
    bytes
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

/// Applies the journal's lines over `state`, whose snapshot has digest `snapshot`. Errors name
/// the line.
pub fn replay(bytes: &[u8], snapshot: &str, state: &mut State) -> Result<Replayed, JournalError> {
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
    if header.journal != JOURNAL_VERSION {
        return Err(JournalError::Version(header.journal));
    }
    if header.over != snapshot {
        return Ok(Replayed::Stale);
    }
    let mut ops = 0;
    for (n, l) in lines.enumerate() {
        let line = n + 2;
        let op: Op = serde_json::from_slice(l)
            .map_err(|source| JournalError::Unreadable { line, source })?;
        state.apply_op(&op).map_err(|e| JournalError::Line {
            line,
            source: Box::new(e),
        })?;
        ops += 1;
    }
    Ok(Replayed::Applied { ops, torn })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(id: &str) -> Owned {
        Owned {
            id: id.into(),
            module: None,
            shape: Shape::File,
            key: format!("/etc/{id}"),
            digest: Some("sha256:00".into()),
            found: false,
        }
    }

    fn journal(ops: &[Op]) -> Vec<u8> {
        let mut out = line(&Header {
            journal: JOURNAL_VERSION,
            over: "sha256:snap".into(),
        });
        for op in ops {
            out.extend(line(op));
        }
        out
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
        let r = replay(&bytes, "sha256:snap", &mut s).unwrap();
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
            let r = replay(&whole[..cut], "sha256:snap", &mut s).unwrap();
            assert_eq!(r, Replayed::Applied { ops: 1, torn: true }, "cut {cut}");
            assert_eq!(s.owned.len(), 1, "cut {cut}");
            assert_eq!(s.owned[0].id, "a");
        }
        // A power cut can leave zeros where the last line should be.
        let mut zeros = before_b.clone();
        zeros.extend([0u8; 40]);
        let mut s = State::default();
        let r = replay(&zeros, "sha256:snap", &mut s).unwrap();
        assert_eq!(r, Replayed::Applied { ops: 1, torn: true });
        // A header cut short holds nothing.
        let mut s = State::default();
        let r = replay(&whole[..10], "sha256:snap", &mut s).unwrap();
        assert_eq!(r, Replayed::Applied { ops: 0, torn: true });
        assert_eq!(s, State::default());
    }

    #[test]
    fn a_journal_over_another_snapshot_is_stale() {
        let bytes = journal(&[Op::Own(owned("a"))]);
        let mut s = State::default();
        assert_eq!(
            replay(&bytes, "sha256:other", &mut s).unwrap(),
            Replayed::Stale
        );
        assert!(s.owned.is_empty());
    }

    #[test]
    fn a_broken_line_before_the_last_is_corruption_named_by_line() {
        let mut bytes = journal(&[Op::Own(owned("a"))]);
        bytes.extend(b"{\"own\": nonsense}\n");
        bytes.extend(line(&Op::Own(owned("b"))));
        let e = replay(&bytes, "sha256:snap", &mut State::default())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("line 3 does not read"), "{e}");
        let bytes = journal(&[Op::Commit("a".into())]);
        let e = replay(&bytes, "sha256:snap", &mut State::default())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "line 2: resource \"a\" is committed without its pending intent"
        );
    }
}
