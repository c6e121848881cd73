//! The store: what this host owns, what it holds, and what it was told, on disk as a snapshot and
//! a journal beside it.
//!
//! `<root>/var/lib/mesh-host/state.json` is the snapshot, written atomically (a temporary file,
//! fsync, rename, fsync of the directory); `state.journal` beside it holds the records made since,
//! one JSON line each, appended and fsynced (see `journal`). Both carry checksums (see
//! `checksum`): a snapshot that fails its own, or a journal line that fails its own with whole
//! lines after it, refuses the store, naming the file (and the line); only the journal's last
//! line may fail, torn by a crash, and it ends the replay. A record therefore costs one short
//! append however large the store is; the journal is folded into a new snapshot when it grows to
//! twice the snapshot, and at the end of every apply. Opening the store replays the journal
//! over the snapshot, and everything happens under an exclusive lock, so two processes never apply
//! at once and a crash leaves a store that tells the truth: the snapshot, and every record whose
//! append finished. A resource is recorded after it worked and was read back; the one thing
//! written before a change is the `pending` intent, which lets a host that died between changing
//! the machine and recording it recognise its own write instead of mistaking it for something
//! found.

mod checksum;
mod confined;
mod flip;
mod holder;
mod journal;
mod layout;
mod load;
mod named;
mod opened;
mod records;

#[cfg(test)]
mod fuzz;

pub use crate::beneath::Stamp;
use confined::open_lock_in;
pub use confined::{confined_dir, named_dir, Confined};
pub use flip::{Boot, BootUnit, Flip, FlipStage};
pub(crate) use holder::locked_by;
pub use journal::Op;
#[cfg(test)]
use load::read_snapshot;
use load::{parse, Files};
pub use load::{peek, peek_to_open, Look, Peeked};
pub use named::Named;
pub use opened::Opened;
pub use records::List;

use crate::briefing::Briefing;
use crate::declaration::{Declaration, Mode, Settings, Shape, Source};
use crate::failpoint;
use nix::fcntl::{Flock, FlockArg, OFlag};
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The store's own format version. Version 4 keeps a file record's [`Stamp`] beside its digest.
/// Version 3 carries checksums: the snapshot's first field, and one per journal line. Version 2
/// may have a journal beside its snapshot; a host that reads only version 1 would not replay it,
/// so it refuses the store rather than lose records. Versions 1 to 3 are read as they are, once,
/// and the next write rewrites the store whole as version 4 (no journal line with a stamp is
/// ever appended over a snapshot of an older version, which an older host would read); an older
/// host refuses version 4.
pub const STORE_VERSION: u32 = 4;

/// The last format version written without checksums.
const UNCHECKED_VERSION: u32 = 2;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("store {path} is not readable as a mesh-host store: {source}")]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "store {path} has format version {found}; this host reads versions 1 to {STORE_VERSION}"
    )]
    Version { path: PathBuf, found: u32 },
    /// The snapshot fails its checksum: damaged on disk (or edited), never read as a state.
    #[error("store {path} fails its checksum: {source}; it is damaged and is not read")]
    Checksum {
        path: PathBuf,
        #[source]
        source: checksum::SealError,
    },
    /// A snapshot of a version that carries a checksum without one.
    #[error(
        "store {path} has format version {version} but no checksum; it is damaged and is not read"
    )]
    Unsealed { path: PathBuf, version: u32 },
    /// Under a root other than `/`, a link or a mount on the way to the store or in it.
    #[error("store {path}: {source}")]
    Outside {
        path: PathBuf,
        #[source]
        source: crate::beneath::BeneathError,
    },
    #[error("store journal {path}: {source}")]
    Journal {
        path: PathBuf,
        #[source]
        source: journal::JournalError,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub use crate::declaration::Owned;

/// A resource found on an adopted node and kept as it is until its module is taken.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Held {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    pub shape: Shape,
    pub key: String,
    /// A digest of what was there when it was first held; a different digest later means
    /// something else changed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// A held file's identity and times when its digest was taken (see [`Owned::stamp`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamp: Option<Stamp>,
}

/// The saved original of a found file, kept for good.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Original {
    /// The machine path the file was found at.
    pub key: String,
    /// Where its original bytes are saved, under the store's `originals/`.
    pub saved: String,
    pub digest: String,
    /// Its mode bits and owner as found, so a release puts it back as it was (absent in a
    /// store from before they were recorded: the file then keeps the mode and owner it has).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
}

/// What the host was about to write, recorded before the write.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Pending {
    pub record: Owned,
}

/// A field this host does not know is refused, naming the file: a store of the wrong shape is
/// never read as an empty one.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct State {
    pub version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    #[serde(default)]
    pub taken: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<Settings>,
    /// The declaration last given, and where from: `reconcile` applies it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declaration: Option<Declaration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    #[serde(default)]
    pub owned: List<Owned>,
    #[serde(default)]
    pub held: List<Held>,
    #[serde(default)]
    pub originals: List<Original>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Pending>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub briefing: Option<Briefing>,
    /// The nf_tables ruleset generation after the last apply whose guard and openings were all
    /// in force: a reconcile of the same declaration that finds the kernel still at it has
    /// nothing of the firewall to look at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall_generation: Option<u32>,
    /// With that generation, where legacy x_tables were in force, their fingerprint then
    /// (`sha256:…`): they send no generation. Not in state.json, which an older host must still
    /// read (its fields are refused when unknown), but beside it in `firewall-legacy`, written
    /// after the snapshot and naming that snapshot's digest, so it is believed only with the
    /// very snapshot it was written with and no journal over it (`load`).
    #[serde(skip)]
    pub firewall_legacy: Option<String>,
    /// The guard that apply left in force (with the runtime's bridges it was told then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall_guard: Option<crate::firewall_terms::GuardSpec>,
    /// What the last apply put in force of the node's own firewall, with the runtime's bridges
    /// it was told then: what `mesh-host boot` loads before the network comes up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<Boot>,
    /// The flip: written before an adopted node's found firewall is touched (or by a converged
    /// genesis, before anything is applied), and kept until the return put it back. While it is
    /// here, the derived filter is the node's firewall.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flip: Option<Flip>,
}

impl State {
    pub fn owned(&self, id: &str) -> Option<&Owned> {
        self.owned.get(id)
    }

    pub fn owned_by_key(&self, shape: Shape, key: &str) -> Option<&Owned> {
        self.owned.get_at(shape, key)
    }

    pub fn held(&self, id: &str) -> Option<&Held> {
        self.held.get(id)
    }

    /// What resource `id` holds at `key`: a held record of the same id at another path or name
    /// is not this one (the resource moved), and says nothing about what is here.
    pub fn held_at(&self, id: &str, key: &str) -> Option<&Held> {
        self.held(id).filter(|h| h.key == key)
    }

    pub fn original(&self, key: &str) -> Option<&Original> {
        self.originals.get(key)
    }

    /// Records an owned resource, replacing any record with its id or its key (a resource that
    /// changed id keeps the record of what it wrote).
    pub fn record_owned(&mut self, rec: Owned) {
        self.held.remove(&rec.id);
        self.owned.put(rec);
    }

    pub fn record_held(&mut self, rec: Held) {
        self.held.put(rec);
    }

    /// Drops the owned record of `id` if it is the one at `shape` `key`.
    pub fn forget_owned(&mut self, id: &str, shape: Shape, key: &str) {
        if self
            .owned(id)
            .is_some_and(|o| o.shape == shape && o.key == key)
        {
            self.owned.remove(id);
        }
    }

    pub fn release_held(&mut self, id: &str) {
        self.held.remove(id);
    }

    /// Keeps the first original saved for a path; a later one never replaces it.
    pub fn add_original(&mut self, o: Original) {
        if self.original(&o.key).is_none() {
            self.originals.put(o);
        }
    }
}

/// The store of one root, open and locked.
pub struct Store {
    /// The store's directory, open: its files are opened by name in it, following no link.
    dir: Named,
    _lock: holder::Held,
    pub state: State,
    /// The snapshot on disk that the journal applies over, once this process has read or written
    /// one.
    snapshot: Option<Snapshot>,
    /// The journal, open for appending, once this process has begun one over `snapshot`.
    journal: Option<File>,
    /// The CRC of the journal's last line, which the next line's chains from.
    chain: journal::Chain,
    /// Bytes in the journal: when they exceed twice the snapshot's, the journal is folded.
    journal_len: u64,
    /// Whether a journal file may exist on disk (the fold removes it).
    journal_on_disk: bool,
    /// The store was lost and is being rebuilt: no `state.json` (nor journal), beside files an
    /// earlier store left (its lock, the launcher's state, saved originals).
    pub rebuilt: bool,
    /// A release left [`RELEASED`] here, which the first save removes.
    released: bool,
    /// No `state.json` (nor journal) was found: the store is new, or lost and being rebuilt.
    /// Only such a store reads the records the mesh recovered for it (a store that exists wins).
    pub fresh: bool,
    /// Whether this process has written a snapshot since it opened the store.
    saved: bool,
}

/// What identifies a snapshot on disk: its length, its digest, which names it in the header of a
/// journal begun over it, and its seal, which names it in [`LEGACY`].
struct Snapshot {
    len: u64,
    /// The checksum the snapshot was sealed with (checked when it was read): the sha256 of all
    /// of its bytes but that line's own, so it names the snapshot as its digest does, without a
    /// second pass over every byte.
    seal: Option<String>,
    /// The snapshot's bytes as on disk, kept until its digest is made from them.
    bytes: Vec<u8>,
    /// Made the first time a journal is begun over it (or read over it): most snapshots a
    /// process reads or writes (a reconcile's that changes nothing, the one every act ends
    /// with) never have one, and the digest is a pass over every byte.
    digest: Option<String>,
}

impl Snapshot {
    fn new(bytes: Vec<u8>, digest: Option<String>) -> Snapshot {
        Snapshot {
            len: bytes.len() as u64,
            seal: checksum::recorded(&bytes).map(str::to_string),
            bytes,
            digest,
        }
    }

    /// The snapshot's digest, made now if it was not yet.
    fn digest(&mut self) -> &str {
        self.digest
            .get_or_insert_with(|| digest(&std::mem::take(&mut self.bytes)))
    }
}

/// The journal is folded when it holds more than twice the snapshot's bytes, and never before it
/// holds this many: a small store is not rewritten every few records, and a fold costs no more
/// than half of the appends since the last one.
const FOLD_FLOOR: u64 = 64 * 1024;

/// Left in the store's directory by a release (`link::release`): the store is gone because the
/// node was released, not lost, so the next store made here is not a rebuilt one. Removed by that
/// store's first save.
pub const RELEASED: &str = "released.json";

/// Beside the snapshot: the legacy tables' fingerprint the state's generation was recorded with
/// (`State::firewall_legacy`), and the digest of the snapshot it goes with.
pub(super) const LEGACY: &str = "firewall-legacy";

/// The launcher's files in the store's directory (`packaging/launch`, `launch.rs`): the version
/// it reinstalls after too many failed starts, its count of start attempts since the last
/// completed reconcile, and the version it rolled back to. Named here, below `launch`, because
/// the store checks every name in its directory before it is used.
pub const KNOWN_GOOD: &str = "known-good";
/// See [`KNOWN_GOOD`].
pub const ATTEMPTS: &str = "attempts";
/// See [`KNOWN_GOOD`].
pub const ROLLED_BACK: &str = "rolled-back";

/// The snapshot's temporary name while it is written.
const TMP: &str = "state.json.tmp";

/// The directory of the store under a root.
pub fn store_dir(root: &Path) -> PathBuf {
    root.join("var/lib/mesh-host")
}

/// What an earlier store leaves beside its state (its lock, saved originals, the launcher's
/// known-good binary): if these are here and the state is not, the state was lost.
const EARLIER: [&str; 3] = ["lock", "originals", "known-good"];

/// Why the store under `root` is taken for lost, when it is: no `state.json` nor journal, beside
/// files an earlier store left, and no release that retired it. Said by the commands that read
/// the store (a listing of nothing would otherwise pass for a node never applied).
pub fn lost(root: &Path) -> Option<String> {
    let dir = store_dir(root);
    let lost = ["state.json", journal::FILE, RELEASED]
        .iter()
        .all(|f| !dir.join(f).exists())
        && EARLIER.iter().any(|f| dir.join(f).exists());
    lost.then(|| {
        format!(
            "store {} was lost: its state.json is missing beside an earlier store's files, so \
             what the host owned and held here is not known; the next apply or reconcile \
             rebuilds it from the declaration (what matches is taken as the host's own, never \
             removed), and a node enrolled again as itself is handed the mesh's copy of its \
             records",
            dir.display()
        )
    })
}

/// Whether another process holds the store under `root` open now (an apply, a converge, an
/// adopt under way): its lock cannot be taken without waiting. Asked without waiting, and let
/// go of at once; a store that has no lock file yet is held by no one.
pub fn held_elsewhere(root: &Path) -> bool {
    ["lock", ACTING].iter().any(|name| {
        File::open(store_dir(root).join(name))
            .is_ok_and(|f| Flock::lock(f, FlockArg::LockExclusiveNonblock).is_err())
    })
}

/// The file every act holds a shared lock on from before its first change to the firewall
/// (the guard is ensured before the store's own lock is waited for) to its end, so the resident
/// host knows another act's changes for what they are.
pub const ACTING: &str = "act.lock";

/// Says, for as long as the value is held, that an act is under way on the store under `root`
/// (a shared lock on [`ACTING`]: acts do not wait for each other here). `None` where the store
/// has no directory yet: no resident host remembers anything of it then.
pub fn acting(root: &Path) -> Option<Flock<File>> {
    let f = match confined_dir(root, false) {
        // A store outside the root is refused when it is opened; nothing is made for it here.
        Err(_) | Ok(Confined::Missing) => return None,
        Ok(Confined::Dir(d)) => open_lock_in(&d, ACTING).ok()?,
        Ok(Confined::Machine) => {
            let dir = store_dir(root);
            if !dir.is_dir() {
                return None;
            }
            OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join(ACTING))
                .ok()?
        }
    };
    Flock::lock(f, FlockArg::LockShared).ok()
}

impl Store {
    /// Opens the store under `root`, creating its directory, and waits for the exclusive lock.
    /// A journal left by a host that died is replayed and folded into the snapshot at once.
    pub fn open(root: &Path) -> Result<Store, StoreError> {
        Store::open_read(root, None).map(|(store, _)| store)
    }

    /// Like [`Store::open`], after a look at the store without its lock ([`peek_to_open`]): the
    /// files are read again under the lock, and when they hold the bytes the look read, the
    /// look's state is taken over rather than parsed again ([`Look::TakenOver`]); when anything
    /// in them changed meanwhile, they are parsed as read now, and the look is handed back as it
    /// was ([`Look::Changed`]), for the caller to tell what changed.
    pub fn open_after(root: &Path, peeked: Peeked) -> Result<(Store, Look), StoreError> {
        let (store, unused) = Store::open_read(root, Some(peeked))?;
        Ok((
            store,
            unused.map_or(Look::TakenOver, |p| Look::Changed(Box::new(p))),
        ))
    }

    /// Opens the store, taking over `peeked`'s state if the files under the lock are its bytes;
    /// hands `peeked` back when it was not taken over.
    fn open_read(
        root: &Path,
        peeked: Option<Peeked>,
    ) -> Result<(Store, Option<Peeked>), StoreError> {
        let dir = store_dir(root);
        // What an earlier store leaves beside its state: if these are here and the state is not,
        // the state was lost.
        let earlier = EARLIER.iter().any(|f| dir.join(f).exists());
        let lock_path = dir.join("lock");
        // Under a root other than `/` the directory is made and checked beneath the root, and
        // the lock opened in its handle; the files the store then opens by name are in a
        // directory known to be the root's own, and none of them is a link.
        let (lock, named) = match confined_dir(root, true)? {
            Confined::Dir(d) => (
                open_lock_in(&d, "lock").map_err(|e| StoreError::Io {
                    path: lock_path.clone(),
                    source: e.into(),
                })?,
                Named::confined(&d, &dir).map_err(io(&dir))?,
            ),
            Confined::Machine | Confined::Missing => {
                fs::create_dir_all(&dir).map_err(io(&dir))?;
                let named = Named::open(&dir).map_err(io(&dir))?;
                let lock = nix::fcntl::openat(
                    named.fd(),
                    "lock",
                    OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    nix::sys::stat::Mode::from_bits_truncate(0o644),
                )
                .map(File::from)
                .map_err(|e| StoreError::Io {
                    path: lock_path.clone(),
                    source: e.into(),
                })?;
                (lock, named)
            }
        };
        // Blocks until the other holder lets go, saying who that is; held until the store is
        // dropped.
        let lock = holder::lock(lock, &lock_path).map_err(|errno| StoreError::Io {
            path: lock_path,
            source: errno.into(),
        })?;
        // Read only now, under the lock: a look taken before it is trusted only for the very
        // bytes it read.
        let (loaded, unused, files) = match peeked {
            Some(p) if p.files.still_in(&named)? => (Some(p.loaded), None, p.files),
            unused => {
                let files = Files::read(&named)?;
                (parse(&named, &files)?, unused, files)
            }
        };
        let released = named.exists(RELEASED);
        let mut store = Store {
            dir: named,
            _lock: lock,
            state: State {
                version: STORE_VERSION,
                ..State::default()
            },
            snapshot: None,
            journal: None,
            chain: journal::Chain::new(),
            journal_len: 0,
            journal_on_disk: false,
            saved: false,
            rebuilt: loaded.is_none() && earlier && !released,
            released: loaded.is_none() && released,
            fresh: loaded.is_none(),
        };
        if let Some(l) = loaded {
            store.state = l.state;
            // A snapshot of an earlier format is not journaled over: the next write rewrites the
            // store whole, in this format (with its checksum, and stamps an older host would
            // refuse in a journal line it replays).
            let current = !l.unchecked && store.state.version == STORE_VERSION;
            store.snapshot = files
                .snapshot
                .filter(|_| current)
                .map(|bytes| Snapshot::new(bytes, l.digest));
            store.journal_on_disk = l.journal_found;
        }
        if store.journal_on_disk {
            store.save()?;
        }
        if store.rebuilt {
            // Loud where it happens: the briefing's store line says it too, once written.
            tracing::warn!(
                "store {} was lost (state.json is missing beside an earlier store's files): \
                 rebuilding it from this declaration; what matches is taken as the host's own \
                 and never removed, and what an older declaration left is no longer the host's",
                store.dir.path().display()
            );
        }
        Ok((store, unused))
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The saved originals' directory, opened by name in the store's (made when `make`): `None`
    /// when it is missing and not made.
    pub fn originals(&self, make: bool) -> std::io::Result<Option<Named>> {
        self.dir.subdir("originals", make)
    }

    fn journal_path(&self) -> PathBuf {
        self.dir.shown(journal::FILE)
    }

    /// Folds everything into a new snapshot, written atomically (temp file, fsync, rename, fsync
    /// of the directory), then removes the journal, whose every line the snapshot now holds.
    pub fn save(&mut self) -> Result<(), StoreError> {
        let path = self.dir.shown("state.json");
        let tmp = self.dir.shown(TMP);
        self.state.version = STORE_VERSION;
        // Sized by the snapshot it replaces, which it is usually about the size of.
        let hint = self.snapshot.as_ref().map_or(0, |s| s.len as usize);
        let bytes = checksum::seal_json(&self.state, hint).expect("state serializes");
        if failpoint::armed("fold-torn", "store") {
            let _ = self.dir.write_synced(TMP, &bytes[..bytes.len() / 2]);
            failpoint::kill();
        }
        // A temporary snapshot that failed (a full disk) is removed, not left half written.
        self.dir.write_synced(TMP, &bytes).map_err(io(&tmp))?;
        if let Err(e) = self.dir.rename(TMP, "state.json") {
            let _ = self.dir.remove(TMP);
            return Err(io(&path)(e));
        }
        self.dir.sync().map_err(io(self.dir.path()))?;
        self.saved = true;
        let snapshot = Snapshot::new(bytes, None);
        self.keep_legacy(&snapshot);
        self.snapshot = Some(snapshot);
        failpoint::hit("fold-renamed", "store");
        if self.released {
            // A store again: a loss from now on is a loss.
            let marker = self.dir.shown(RELEASED);
            self.dir.remove(RELEASED).map_err(io(&marker))?;
            self.released = false;
        }
        // From here the journal is stale (it names the snapshot just replaced), so a host that
        // dies before it is gone ignores it on the next start.
        self.journal = None;
        self.chain = journal::Chain::new();
        self.journal_len = 0;
        if self.journal_on_disk {
            let jpath = self.journal_path();
            self.dir.remove(journal::FILE).map_err(io(&jpath))?;
            self.dir.sync().map_err(io(self.dir.path()))?;
            self.journal_on_disk = false;
        }
        Ok(())
    }

    /// Saves the state unless it is `opened` (the state this act opened the store with, kept by
    /// the caller) and the snapshot on disk already holds it whole, with no journal over it: an
    /// act that changed nothing writes nothing, and a reconcile of 10,000 resources neither
    /// serializes nor fsyncs 3 MB to say so. Whether it wrote.
    pub fn save_unless(&mut self, opened: Option<&Opened>) -> Result<bool, StoreError> {
        let held = opened.is_some_and(|o| self.state.unchanged_since(o))
            && self.state.version == STORE_VERSION
            && self.snapshot.is_some()
            && !self.saved
            && self.journal.is_none()
            && !self.journal_on_disk
            && !self.released;
        if held {
            return Ok(false);
        }
        self.save().map(|()| true)
    }

    /// The legacy tables' fingerprint beside the snapshot just written (named by its seal), or
    /// none. A cache of what the state recorded, not a record: one that cannot be written is
    /// said and the next reconcile reads the firewall whole; one left from an earlier snapshot
    /// names another digest and is never believed (`legacy_beside`).
    fn keep_legacy(&self, snapshot: &Snapshot) {
        let kept = match (&self.state.firewall_legacy, &snapshot.seal) {
            (Some(fp), Some(snapshot)) => self.dir.create(LEGACY, false).and_then(|mut f| {
                std::io::Write::write_all(&mut f, load::legacy_line(snapshot, fp).as_bytes())
            }),
            _ => self.dir.remove(LEGACY),
        };
        if let Err(e) = kept {
            let _ = self.dir.remove(LEGACY);
            tracing::warn!(
                "{}: {e}; the next reconcile reads the legacy tables whole",
                self.dir.shown(LEGACY).display()
            );
        }
    }

    /// Ends this store, for a release: its snapshot and journal are removed under its lock, so
    /// nothing is left to reconcile. The saved originals, the lock and the launcher's files stay;
    /// the caller has written [`RELEASED`] first, so the next store is not taken for a rebuilt one.
    pub fn retire(mut self) -> Result<(), StoreError> {
        for f in ["state.json", journal::FILE, LEGACY] {
            self.dir.remove(f).map_err(io(&self.dir.shown(f)))?;
        }
        self.journal = None;
        self.snapshot = None;
        self.dir.sync().map_err(io(self.dir.path()))
    }

    /// Records one change: applied to the state, then appended to the journal and fsynced, so
    /// it is durable when this returns. `id` names the resource the change is about (for the
    /// failpoints). The journal is folded when it has grown to twice the snapshot (and past
    /// [`FOLD_FLOOR`]): each fold then writes no more than half of what the appends before it
    /// did, which keeps the bytes written by N records proportional to N.
    pub fn record(&mut self, id: &str, op: Op) -> Result<(), StoreError> {
        self.record_all(vec![(id.to_string(), op)])
    }

    /// Records several changes that happened together (the openings of one firewall
    /// transaction) in one append and one fsync: each is one journal line, so a torn append keeps
    /// every whole line before the tear, each of them true.
    pub fn record_all(&mut self, ops: Vec<(String, Op)>) -> Result<(), StoreError> {
        let Some((first, _)) = ops.first() else {
            return Ok(());
        };
        let first = first.clone();
        let jpath = self.journal_path();
        for (_, op) in &ops {
            self.state
                .apply_op(op)
                .map_err(|source| StoreError::Journal {
                    path: jpath.clone(),
                    source,
                })?;
        }
        let Some(snapshot) = &mut self.snapshot else {
            // Nothing on disk to journal over yet: the first snapshot is the record.
            return self.save();
        };
        let fold_at = (2 * snapshot.len).max(FOLD_FLOOR);
        let header = self.journal.is_none().then(|| journal::Header {
            journal: journal::JOURNAL_VERSION,
            over: snapshot.digest().to_string(),
        });
        if failpoint::armed("append", &first) {
            failpoint::kill();
        }
        let created = header.is_some();
        if let Some(header) = header {
            self.chain = journal::Chain::new();
            let (line, crc) = self.chain.line(&header);
            let file = self.dir.create(journal::FILE, true).map_err(io(&jpath))?;
            self.journal_on_disk = true;
            self.journal = Some(file);
            self.append(&line)?;
            self.chain.advance(crc);
        }
        // Each line chained to the one before it; the chain moves on once the append holds.
        let mut chain = self.chain.clone();
        let mut lines = Vec::new();
        for (_, op) in &ops {
            let (line, crc) = chain.line(op);
            chain.advance(crc);
            lines.extend(line);
        }
        if failpoint::armed("torn-append", &first) {
            let _ = self.append(&lines[..lines.len() / 2]);
            failpoint::kill();
        }
        self.append(&lines)?;
        self.chain = chain;
        if created {
            // The journal's own name must survive a power cut, not only its bytes.
            self.dir.sync().map_err(io(self.dir.path()))?;
        }
        if self.journal_len > fold_at {
            self.save()?;
        }
        Ok(())
    }

    /// Appends bytes to the open journal and fsyncs them.
    fn append(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        let jpath = self.journal_path();
        let file = self.journal.as_mut().expect("the journal is open");
        if let Err(e) = file.write_all(bytes).and_then(|()| file.sync_data()) {
            // A write cut short (a full disk) is taken back to the last whole line, so the
            // journal holds only what is true and a later append does not follow a torn one.
            let _ = file
                .set_len(self.journal_len)
                .and_then(|()| file.sync_data());
            return Err(io(&jpath)(e));
        }
        self.journal_len += bytes.len() as u64;
        Ok(())
    }
}

/// Writes a new file and fsyncs it before returning it, still open. Whatever was at `path` (a
/// stale temporary file, or a symlink someone planted at the predictable name) is removed first,
/// and the new file is created exclusively without following links, so the bytes never land
/// anywhere but in a fresh file of the host's own.
pub fn create_synced(path: &Path, bytes: &[u8]) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(OFlag::O_NOFOLLOW.bits())
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(f)
}

/// Writes a new file (see [`create_synced`]) and closes it.
pub fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    create_synced(path, bytes).map(drop)
}

/// Fsyncs a directory so a rename inside it survives a power cut.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// A digest of bytes as stored and compared: `sha256:<hex>`.
pub fn digest(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let sum = Sha256::digest(bytes);
    let mut out = String::with_capacity(71);
    out.push_str("sha256:");
    for b in sum {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

#[cfg(test)]
mod tests;
