//! Fuzz tests of the store's readers: the snapshot (`state.json`, sealed with its checksum) and
//! the journal replayed over it (chained checksums), from stores written by the store's own
//! functions, then mutated (a flipped byte, a torn tail, a line duplicated, dropped or moved).
//! Whatever of a mutated store is read must be a state the store really held (the snapshot
//! itself; the journal's state after some whole prefix of its records), never another, and must
//! save and read back the same. On the seeded harness in `fuzz/`; `MESH_FUZZ_CASES` scales them
//! (`bench/fuzz`); both readers also run coverage-guided (bolero) over their corpus in `__fuzz__/`.

use super::checksum;
use super::journal::{self, Chain, Header, Op, Replayed, JOURNAL_VERSION};
use super::{read_snapshot, Held, Original, Owned, State, STORE_VERSION};
use crate::declaration::Shape;
use fuzz::{mutate, run, Rng};
use std::path::Path;

const SNAPSHOT: &str = "sha256:snap";

fn id(rng: &mut Rng) -> String {
    format!("r{}", rng.below(6))
}

fn shape(rng: &mut Rng) -> Shape {
    *rng.pick(&Shape::ALL)
}

fn owned(rng: &mut Rng) -> Owned {
    Owned {
        parents: Vec::new(),
        id: id(rng),
        module: rng.bool().then(|| rng.word(6)),
        shape: shape(rng),
        key: format!("/etc/{}", rng.below(6)),
        digest: rng
            .bool()
            .then(|| format!("sha256:{}", fuzz::hex(&rng.bytes(4)))),
        found: rng.bool(),
        stamp: None,
    }
}

/// One record as the store writes it, about the few ids and keys a case shares.
fn op(rng: &mut Rng) -> Op {
    match rng.below(7) {
        0 => Op::Intend(owned(rng)),
        1 => Op::Commit(id(rng)),
        2 => Op::Own(owned(rng)),
        3 => Op::Hold(Held {
            id: id(rng),
            module: None,
            shape: shape(rng),
            key: format!("/srv/{}", rng.below(6)),
            digest: None,
            stamp: None,
        }),
        4 => Op::Unown {
            id: id(rng),
            shape: shape(rng),
            key: format!("/etc/{}", rng.below(6)),
        },
        5 => Op::Release(id(rng)),
        _ => Op::Original(Original {
            key: format!("/etc/{}", rng.below(6)),
            saved: format!("originals/{}", rng.below(6)),
            digest: "sha256:00".into(),
            mode: None,
            uid: None,
            gid: None,
        }),
    }
}

/// A store as the host leaves it: a sealed snapshot, and a journal of the records since.
fn store(rng: &mut Rng) -> (Vec<u8>, Vec<u8>, State) {
    let mut state = State {
        version: STORE_VERSION,
        node: rng.bool().then(|| "node-a".to_string()),
        ..State::default()
    };
    for _ in 0..rng.below(8) {
        let _ = state.apply_op(&op(rng));
    }
    let mut body = serde_json::to_vec_pretty(&state).unwrap();
    body.push(b'\n');
    let snapshot = checksum::seal(&body);
    let mut chain = Chain::new();
    let (mut journal_bytes, crc) = chain.line(&Header {
        journal: JOURNAL_VERSION,
        over: SNAPSHOT.into(),
    });
    chain.advance(crc);
    let mut live = state.clone();
    for _ in 0..rng.below(12) {
        let o = op(rng);
        // Only what applied live is appended, as the store does.
        if live.apply_op(&o).is_ok() {
            let (line, crc) = chain.line(&o);
            chain.advance(crc);
            journal_bytes.extend(line);
        }
    }
    (snapshot, journal_bytes, live)
}

/// A line of the journal duplicated, dropped or swapped, whole.
fn shuffle_lines(rng: &mut Rng, bytes: &[u8]) -> Vec<u8> {
    let mut lines: Vec<&[u8]> = bytes.split_inclusive(|&b| b == b'\n').collect();
    if lines.is_empty() {
        return bytes.to_vec();
    }
    let i = rng.below(lines.len());
    match rng.below(3) {
        0 => lines.insert(i, lines[i]),
        1 => {
            lines.remove(i);
        }
        _ => {
            let j = rng.below(lines.len());
            lines.swap(i, j);
        }
    }
    lines.concat()
}

/// Reads back what a replayed state saves as: a state the host can hold is one it can store.
fn saves_and_reads_back(state: &State) {
    let bytes = serde_json::to_vec(state).unwrap();
    let again: State = serde_json::from_slice(&bytes).expect("a replayed state reads back");
    assert_eq!(&again, state);
}

fn snapshot_of(bytes: &[u8]) -> Result<(State, bool), super::StoreError> {
    read_snapshot(Path::new("state.json"), bytes)
}

#[test]
fn fuzz_store_snapshot() {
    run(
        "store-snapshot",
        3_000,
        |rng| {
            let (snapshot, _, _) = store(rng);
            let mut case = snapshot.clone();
            if !rng.one_in(5) {
                mutate(rng, &mut case);
            }
            // The case is the snapshot as read, a 0xff (never in JSON), then the one written.
            case.push(0xff);
            case.extend(snapshot);
            case
        },
        |bytes| {
            let at = bytes.iter().rposition(|&b| b == 0xff).unwrap_or(0);
            let (read, written) = (&bytes[..at], bytes.get(at + 1..).unwrap_or(&[]));
            if let Ok((state, unchecked)) = snapshot_of(read) {
                saves_and_reads_back(&state);
                if !unchecked {
                    // What passes its checksum is the state written, never another.
                    let (want, _) = snapshot_of(written).expect("the written snapshot reads");
                    assert_eq!(state, want, "a damaged snapshot read as another state");
                }
            }
        },
    );
}

#[test]
fn fuzz_store_journal_replay() {
    run(
        "store-journal",
        2_000,
        |rng| {
            let (snapshot, journal_bytes, live) = store(rng);
            // An untouched journal replays to the state the live applies reached.
            let (mut replayed, _) = snapshot_of(&snapshot).unwrap();
            journal::replay(&journal_bytes, SNAPSHOT, false, &mut replayed)
                .expect("a journal replays");
            assert_eq!(replayed, live);
            // The case: the snapshot, 0xff (never in JSON), the journal written, 0xff, then
            // the journal as read.
            let mut case = snapshot;
            case.push(0xff);
            case.extend(&journal_bytes);
            case.push(0xff);
            let mutated = match rng.below(4) {
                0 => journal_bytes,
                1 => shuffle_lines(rng, &journal_bytes),
                _ => {
                    let mut j = journal_bytes;
                    mutate(rng, &mut j);
                    j
                }
            };
            case.extend(mutated);
            case
        },
        |bytes| {
            let mut parts = bytes.splitn(3, |&b| b == 0xff);
            let (Some(snapshot), Some(written), Some(read)) =
                (parts.next(), parts.next(), parts.next())
            else {
                return;
            };
            let Ok((mut state, _)) = snapshot_of(snapshot) else {
                return;
            };
            // Every state the journal written held: after each whole prefix of its lines.
            let mut held = Vec::new();
            let mut end = 0;
            for line in written.split_inclusive(|&b| b == b'\n') {
                end += line.len();
                let mut s = state.clone();
                journal::replay(&written[..end], SNAPSHOT, false, &mut s).unwrap();
                held.push(s);
            }
            match journal::replay(read, SNAPSHOT, false, &mut state) {
                Ok(Replayed::Applied { ops, .. }) => {
                    assert!(ops <= read.len() / 2);
                    assert!(
                        held.is_empty() && ops == 0 || held.contains(&state),
                        "a damaged journal replayed to a state it never held"
                    );
                    saves_and_reads_back(&state);
                }
                Ok(Replayed::Stale) => panic!("a damaged header read as another snapshot's"),
                Err(_) => {}
            }
        },
    );
}

// The readers coverage-guided (bolero), over the bytes alone: under `cargo test` each replays its
// committed corpus (`__fuzz__/` beside this file) and random bytes; `cargo bolero test` grows the
// corpus. What reads must save and read back the same; a journal replays at most one record per
// two bytes.

fn check_snapshot(bytes: &[u8]) {
    if let Ok((state, _)) = snapshot_of(bytes) {
        saves_and_reads_back(&state);
    }
}

fn check_journal(bytes: &[u8]) {
    let mut state = State {
        version: STORE_VERSION,
        ..State::default()
    };
    if let Ok(Replayed::Applied { ops, .. }) = journal::replay(bytes, SNAPSHOT, false, &mut state) {
        assert!(ops <= bytes.len() / 2);
        saves_and_reads_back(&state);
    }
}

#[test]
fn coverage_store_snapshot() {
    fuzz::coverage!("store-snapshot", 1_000, |rng| store(rng).0, check_snapshot);
}

#[test]
fn coverage_store_journal() {
    fuzz::coverage!("store-journal", 1_000, |rng| store(rng).1, check_journal);
}
