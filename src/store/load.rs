//! The store read from disk: the snapshot, checked, with its journal replayed over it; and a look
//! taken without the lock that the open under the lock takes over when the files still hold the
//! bytes it read.

use super::{
    checksum, confined_dir, digest, io, journal, store_dir, Confined, Named, State, StoreError,
    LEGACY, STORE_VERSION, UNCHECKED_VERSION,
};
use std::path::Path;

/// The store's two files as read: the snapshot's bytes and the journal's, each `None` when its
/// file is absent. What a store holds is a function of these bytes alone ([`parse`]), so two
/// reads of equal bytes hold the same state ([`Files::still_in`] compares them with the files).
pub(super) struct Files {
    pub(super) snapshot: Option<Vec<u8>>,
    pub(super) journal: Option<Vec<u8>>,
}

impl Files {
    pub(super) fn read(dir: &Named) -> Result<Files, StoreError> {
        let path = dir.shown("state.json");
        let snapshot = dir.read("state.json").map_err(io(&path))?;
        let jpath = dir.shown(journal::FILE);
        let journal = dir.read(journal::FILE).map_err(io(&jpath))?;
        Ok(Files { snapshot, journal })
    }

    /// Whether the files of `dir` are still these very bytes: what [`Files::read`] and `==`
    /// would say, without a second copy of them.
    pub(super) fn still_in(&self, dir: &Named) -> Result<bool, StoreError> {
        let path = dir.shown("state.json");
        let jpath = dir.shown(journal::FILE);
        Ok(dir
            .holds("state.json", self.snapshot.as_deref())
            .map_err(io(&path))?
            && dir
                .holds(journal::FILE, self.journal.as_deref())
                .map_err(io(&jpath))?)
    }
}

/// A store as read from disk.
pub(super) struct Loaded {
    pub(super) state: State,
    /// The snapshot's digest, when the journal's replay made it (see `Snapshot`).
    pub(super) digest: Option<String>,
    /// The snapshot is of the previous format, without a checksum.
    pub(super) unchecked: bool,
    /// Whether a journal file was there (replayed, stale or empty).
    pub(super) journal_found: bool,
}

/// The store as a look without its lock read it ([`peek_to_open`]): its state, and the bytes the
/// state was read from. The open under the lock ([`super::Store::open_after`]) takes the state
/// over, rather than reading it again, only when the files hold those very bytes.
pub struct Peeked {
    pub(super) loaded: Loaded,
    pub(super) files: Files,
}

impl Peeked {
    /// The state the look read.
    pub fn state(&self) -> &State {
        &self.loaded.state
    }
}

/// What the open under the lock made of the look before it.
pub enum Look {
    /// The store's files held the bytes the look read: the look's state is the store's, taken
    /// over without reading it again.
    TakenOver,
    /// The store changed between the look and the lock: it was read again, and this is the look
    /// as it was.
    Changed(Box<Peeked>),
}

/// Reads the state without taking the lock, for commands that only look: the snapshot with its
/// journal replayed, changing nothing on disk. (An apply running meanwhile may fold between the
/// two reads; the journal then names another snapshot and the view is that of the snapshot.)
pub fn peek(root: &Path) -> Result<Option<State>, StoreError> {
    Ok(peek_to_open(root)?.map(|p| p.loaded.state))
}

/// Like [`peek`], for an act that opens the store next: the look keeps the bytes it read, so
/// [`super::Store::open_after`] reads the files again under the lock and parses them only if they
/// changed. `None` when there is no store (no directory, or neither file in it).
pub fn peek_to_open(root: &Path) -> Result<Option<Peeked>, StoreError> {
    let dir = store_dir(root);
    let named = match confined_dir(root, false)? {
        Confined::Missing => return Ok(None),
        Confined::Dir(d) => Named::confined(&d, &dir).map_err(io(&dir))?,
        Confined::Machine => match Named::open(&dir) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&dir)(e)),
        },
    };
    let files = Files::read(&named)?;
    Ok(parse(&named, &files)?.map(|loaded| Peeked { loaded, files }))
}

/// The store the files of `dir` hold, as read by [`Files::read`].
pub(super) fn parse(dir: &Named, files: &Files) -> Result<Option<Loaded>, StoreError> {
    let path = dir.shown("state.json");
    let jpath = dir.shown(journal::FILE);
    let Some(bytes) = &files.snapshot else {
        // A journal is only ever begun over a snapshot; without one it holds nothing to keep.
        return Ok(files.journal.as_ref().map(|_| Loaded {
            state: State {
                version: STORE_VERSION,
                ..State::default()
            },
            digest: None,
            unchecked: false,
            journal_found: true,
        }));
    };
    let (mut state, unchecked) = read_snapshot(&path, bytes)?;
    // The snapshot's digest is made only to replay a journal, which names the snapshot it was
    // begun over.
    let made = files.journal.as_ref().map(|_| digest(bytes));
    if let (Some(j), Some(over)) = (&files.journal, &made) {
        let replayed = journal::replay(j, over, unchecked, &mut state).map_err(|source| {
            StoreError::Journal {
                path: jpath.clone(),
                source,
            }
        })?;
        match replayed {
            // Everything in it is in the snapshot already, or it is another store's: said, not
            // hidden at debug (issue 33: a journal from another store was dropped silently).
            journal::Replayed::Stale => tracing::warn!(
                "journal {} names another snapshot than {}: ignored (a fold that died after \
                 renaming its snapshot leaves one behind, and so does a journal copied from \
                 another store); it is replaced at the next record",
                jpath.display(),
                path.display()
            ),
            journal::Replayed::Applied { ops, torn } => {
                tracing::debug!(ops, torn, journal = %jpath.display(), "journal read")
            }
        }
    }
    // The legacy fingerprint goes with this very snapshot and no journal over it: an apply
    // that journals has begun changing things, and its end writes both again. The snapshot is
    // named by its seal, checked above (one without is of an earlier format, which the next
    // write replaces, and has none believed).
    if files.journal.is_none() && !unchecked {
        if let (Some(seal), Some(beside)) = (checksum::recorded(bytes), legacy_file(dir)) {
            state.firewall_legacy = legacy_beside(&beside, seal);
        }
    }
    Ok(Some(Loaded {
        state,
        digest: made,
        unchecked,
        journal_found: files.journal.is_some(),
    }))
}

/// The bytes of [`LEGACY`], when it is there and reads.
fn legacy_file(dir: &Named) -> Option<Vec<u8>> {
    dir.read(LEGACY).ok()?
}

/// What [`LEGACY`] holds: the snapshot's seal and the fingerprint that goes with it, read back
/// by [`legacy_beside`].
pub(super) fn legacy_line(snapshot: &str, fingerprint: &str) -> String {
    format!("{snapshot} {fingerprint}\n")
}

/// The fingerprint in [`LEGACY`]'s bytes when they name the snapshot sealed with `seal`; nothing
/// otherwise (a file torn, or left beside an earlier snapshot).
fn legacy_beside(bytes: &[u8], seal: &str) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (over, fp) = text.strip_suffix('\n')?.split_once(' ')?;
    let hex = fp.strip_prefix("sha256:")?;
    (over == seal && hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| fp.to_string())
}

/// The state a snapshot's bytes hold, and whether it is of the previous format (no checksum).
/// A snapshot that begins with its checksum line is read only if the checksum holds; one without
/// is read only if its version is one that had none.
pub(super) fn read_snapshot(path: &Path, bytes: &[u8]) -> Result<(State, bool), StoreError> {
    let body = checksum::unseal(bytes).map_err(|source| StoreError::Checksum {
        path: path.to_path_buf(),
        source,
    })?;
    let unchecked = body.is_none();
    let state: State =
        serde_json::from_slice(body.as_deref().unwrap_or(bytes)).map_err(|source| {
            StoreError::Corrupt {
                path: path.to_path_buf(),
                source,
            }
        })?;
    if !(1..=STORE_VERSION).contains(&state.version) {
        return Err(StoreError::Version {
            path: path.to_path_buf(),
            found: state.version,
        });
    }
    if unchecked && state.version > UNCHECKED_VERSION {
        return Err(StoreError::Unsealed {
            path: path.to_path_buf(),
            version: state.version,
        });
    }
    Ok((state, unchecked))
}
