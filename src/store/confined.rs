//! The store's directory under a root other than the machine's `/`, resolved through `beneath`
//! like a declared path: no link and no mount on the way to it or at its files.

use super::*;

/// The store's directory as a declared path, for `beneath`.
const STORE_PATH: &str = "/var/lib/mesh-host";

/// The names in the store's directory that are checked before it is used under a root other
/// than `/`: none may be a link or on another mount.
const ENTRIES: [&str; 17] = [
    "lock",
    ACTING,
    "state.json",
    "state.json.tmp",
    journal::FILE,
    RELEASED,
    KNOWN_GOOD,
    ATTEMPTS,
    ROLLED_BACK,
    "run.lock",
    "run.pid",
    "run.pid.tmp",
    "link.json",
    ".link.json.tmp",
    "node.key",
    ".node.key.tmp",
    "originals",
];

/// Where the store's directory is, as `beneath` found it.
pub enum Confined {
    /// The root is the machine's `/`: its mounts and links are the machine's layout, and the
    /// store is opened by path.
    Machine,
    /// Under another root, the store has no directory yet (and none was to be made).
    Missing,
    /// Under another root, the store's directory, opened beneath it: no link and no mount on the
    /// way to it, to its `originals/` or at any of its files.
    Dir(crate::beneath::Dir),
}

/// The store's directory under a root other than the machine's `/`, resolved (and made, when
/// `make`) through `beneath` like a declared path: a symbolic link or a mount on the way to
/// `var/lib/mesh-host`, to its `originals/`, or at one of its files is refused naming it, so
/// nothing of the store is read or written outside the root.
pub fn confined_dir(root: &Path, make: bool) -> Result<Confined, StoreError> {
    use crate::beneath::Root;
    let outside = |source| StoreError::Outside {
        path: store_dir(root),
        source,
    };
    let b = Root::open(root).map_err(outside)?;
    if !b.confined() {
        return Ok(Confined::Machine);
    }
    let dir = if make {
        b.mkdir_all(STORE_PATH).map(Some)
    } else {
        b.dir(STORE_PATH)
    }
    .map_err(outside)?;
    let Some(dir) = dir else {
        return Ok(Confined::Missing);
    };
    for name in ENTRIES {
        b.entry(&dir, &format!("{STORE_PATH}/{name}"))
            .map_err(outside)?;
    }
    b.dir(&format!("{STORE_PATH}/originals")).map_err(outside)?;
    Ok(Confined::Dir(dir))
}

/// Opens (creating) a lock file by name in the store's directory handle, following no link.
pub(super) fn open_lock_in(
    dir: &crate::beneath::Dir,
    name: &str,
) -> Result<File, nix::errno::Errno> {
    nix::fcntl::openat(
        dir.fd(),
        name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .map(File::from)
}

/// The store's directory under `root`, open, for the files beside the store (the resident host's
/// run lock and pid file, the link's enrolment): under a root other than `/` made (with `make`)
/// and checked beneath the root, as the store's own; `None` when it does not exist and `make` is
/// false. Every file is then opened by name in this handle, following no link.
pub fn named_dir(root: &Path, make: bool) -> Result<Option<Named>, StoreError> {
    let path = store_dir(root);
    let io = |source| StoreError::Io {
        path: path.clone(),
        source,
    };
    match confined_dir(root, make)? {
        Confined::Dir(d) => Named::confined(&d, &path).map(Some).map_err(io),
        Confined::Missing => Ok(None),
        Confined::Machine => {
            if make {
                std::fs::create_dir_all(&path).map_err(io)?;
            }
            match Named::open(&path) {
                Ok(n) => Ok(Some(n)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io(e)),
            }
        }
    }
}
