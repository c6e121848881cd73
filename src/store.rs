//! The store: what this host owns, what it holds, and what it was told, on disk as one JSON file.
//!
//! `<root>/var/lib/mesh-host/state.json` is written atomically (a temporary file, fsync, rename,
//! fsync of the directory) and only under an exclusive lock, so two processes never apply at
//! once and a crash leaves either the old or the new store, never half of one. A resource is
//! recorded after it worked and was read back; the one thing written before a change is the
//! `pending` intent, which lets a host that died between changing the machine and recording it
//! recognise its own write instead of mistaking it for something found.

use crate::briefing::Briefing;
use crate::declaration::{Declaration, Mode, Settings, Shape, Source};
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// The store's own format version.
pub const STORE_VERSION: u32 = 1;

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
    #[error("store {path} has format version {found}; this host reads version {STORE_VERSION}")]
    Version { path: PathBuf, found: u32 },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A resource the host made or took over: it converges, and it is removed (or forgotten, by the
/// asymmetry) when no longer declared.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    pub shape: Shape,
    pub key: String,
    /// A digest of what was written (content for files, the argv for actions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// True when the host took over something it found rather than creating it: such a thing
    /// is never removed, only forgotten, because the host never removes what it did not create.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub found: bool,
}

/// A resource found on an adopted node and kept as it is until its module is taken.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
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
}

/// The saved original of a found file, kept for good.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Original {
    /// The machine path the file was found at.
    pub key: String,
    /// Where its original bytes are saved, under the store's `originals/`.
    pub saved: String,
    pub digest: String,
}

/// What the host was about to write, recorded before the write.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub record: Owned,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
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
    pub owned: Vec<Owned>,
    #[serde(default)]
    pub held: Vec<Held>,
    #[serde(default)]
    pub originals: Vec<Original>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Pending>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub briefing: Option<Briefing>,
}

impl State {
    pub fn owned(&self, id: &str) -> Option<&Owned> {
        self.owned.iter().find(|o| o.id == id)
    }

    pub fn owned_by_key(&self, shape: Shape, key: &str) -> Option<&Owned> {
        self.owned.iter().find(|o| o.shape == shape && o.key == key)
    }

    pub fn held(&self, id: &str) -> Option<&Held> {
        self.held.iter().find(|h| h.id == id)
    }

    /// What resource `id` holds at `key`: a held record of the same id at another path or name
    /// is not this one (the resource moved), and says nothing about what is here.
    pub fn held_at(&self, id: &str, key: &str) -> Option<&Held> {
        self.held.iter().find(|h| h.id == id && h.key == key)
    }

    pub fn original(&self, key: &str) -> Option<&Original> {
        self.originals.iter().find(|o| o.key == key)
    }

    /// Records an owned resource, replacing any record with its id or its key (a resource that
    /// changed id keeps the record of what it wrote).
    pub fn record_owned(&mut self, rec: Owned) {
        self.held.retain(|h| h.id != rec.id);
        let same = |o: &Owned| o.id == rec.id || (o.shape == rec.shape && o.key == rec.key);
        let pos = self.owned.iter().position(same);
        self.owned.retain(|o| !same(o));
        let pos = pos.unwrap_or(self.owned.len()).min(self.owned.len());
        self.owned.insert(pos, rec);
    }

    pub fn record_held(&mut self, rec: Held) {
        match self.held.iter_mut().find(|h| h.id == rec.id) {
            Some(h) => *h = rec,
            None => self.held.push(rec),
        }
    }
}

/// The store of one root, open and locked.
pub struct Store {
    dir: PathBuf,
    _lock: File,
    pub state: State,
}

/// The directory of the store under a root.
pub fn store_dir(root: &Path) -> PathBuf {
    root.join("var/lib/mesh-host")
}

impl Store {
    /// Opens the store under `root`, creating its directory, and waits for the exclusive lock.
    pub fn open(root: &Path) -> Result<Store, StoreError> {
        let dir = store_dir(root);
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        let lock_path = dir.join("lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        // SAFETY: flock on a descriptor we own; it blocks until the other holder lets go.
        let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
        if rc != 0 {
            return Err(StoreError::Io {
                path: lock_path,
                source: std::io::Error::last_os_error(),
            });
        }
        let state = read_state(&dir)?.unwrap_or(State {
            version: STORE_VERSION,
            ..State::default()
        });
        Ok(Store {
            dir,
            _lock: lock,
            state,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn originals_dir(&self) -> PathBuf {
        self.dir.join("originals")
    }

    /// Writes the state atomically: temp file, fsync, rename, fsync of the directory.
    pub fn save(&self) -> Result<(), StoreError> {
        let path = self.dir.join("state.json");
        let tmp = self.dir.join("state.json.tmp");
        let mut bytes = serde_json::to_vec_pretty(&self.state).expect("state serializes");
        bytes.push(b'\n');
        write_synced(&tmp, &bytes).map_err(io(&tmp))?;
        fs::rename(&tmp, &path).map_err(io(&path))?;
        sync_dir(&self.dir).map_err(io(&self.dir))
    }
}

/// Reads the state without taking the lock, for commands that only look.
pub fn peek(root: &Path) -> Result<Option<State>, StoreError> {
    read_state(&store_dir(root))
}

fn read_state(dir: &Path) -> Result<Option<State>, StoreError> {
    let path = dir.join("state.json");
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StoreError::Io { path, source: e }),
    };
    let state: State = serde_json::from_slice(&bytes).map_err(|source| StoreError::Corrupt {
        path: path.clone(),
        source,
    })?;
    if state.version != STORE_VERSION {
        return Err(StoreError::Version {
            path,
            found: state.version,
        });
    }
    Ok(Some(state))
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
        .custom_flags(libc::O_NOFOLLOW)
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
