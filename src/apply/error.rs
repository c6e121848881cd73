//! The errors of the appliers: why one resource failed, each message naming the resource (its
//! path, its service, container or package name) the way the report prints it.

use crate::accounts::AccountError;
use crate::declaration::validate::Invalid;
use crate::store::StoreError;
use std::path::PathBuf;

/// Why one resource's applier (or its removal) failed; the report's `failed` line is its text.
#[derive(Debug, thiserror::Error)]
pub enum ResourceError {
    /// A declared path does not resolve to a place the host may write.
    #[error(transparent)]
    Path(#[from] PathError),
    /// A declared path could not be resolved or used beneath the root (a link on the way, a
    /// special file where a regular one is expected).
    #[error(transparent)]
    Beneath(#[from] crate::beneath::BeneathError),
    /// The store could not record what was done.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A declared owner or group is not an account of this machine.
    #[error(transparent)]
    Account(#[from] AccountError),
    /// A declared value the applier reads again (a mode) is not one.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// A file system call failed: what the host was doing (naming the path), and why.
    #[error("{doing}: {source}")]
    Io {
        doing: String,
        #[source]
        source: std::io::Error,
    },
    /// A system command (runtime, service or package manager) failed: what the host was doing
    /// (naming the container, service or package and the program), and why.
    #[error("{doing}: {source}")]
    System {
        doing: String,
        #[source]
        source: crate::system::Error,
    },
    /// This build or this machine has no system to apply the shape through.
    #[error(transparent)]
    Unavailable(crate::system::Error),
    /// A child the applier ran could not be started, or did not finish within its deadline (the
    /// message names the command and the deadline).
    #[error("{0}")]
    Child(String),
    /// What is there is not something the host converges (not a regular file, not installed),
    /// so it refuses to touch it.
    #[error("{0}")]
    Refused(String),
    /// The change ran without an error, but the machine does not read back as declared (or the
    /// command's own check says it did not work).
    #[error("{0}")]
    NotAsDeclared(String),
    /// The host's own package installed a binary that does not run here.
    #[error(
        "package {package}: the new binary {binary} does not run here: {why}; the running host \
         stays as it is and does not restart"
    )]
    NewHost {
        package: &'static str,
        binary: String,
        why: String,
    },
    /// A file the host would have to read whole (to take its digest or compare it) is larger
    /// than the settings allow it to read, so it is not read and nothing touches it.
    #[error(
        "{key} is {size} bytes, over the found files' read limit of {limit} bytes \
         (settings.found_read_limit_bytes): not read, so it is neither kept, compared nor \
         replaced; raise the limit or make the file smaller"
    )]
    TooLarge { key: String, size: u64, limit: u64 },
    /// The original of a found file could not be saved, so nothing else touches it.
    #[error(transparent)]
    Original(#[from] OriginalError),
    /// An opening or the node's firewall failed.
    #[error(transparent)]
    Firewall(#[from] crate::node_firewall::Error),
    #[error(transparent)]
    Untranslatable(#[from] crate::declaration::openings::Untranslatable),
}

impl ResourceError {
    /// A file system error while `doing` (a phrase naming the path).
    pub fn io(doing: impl Into<String>) -> impl FnOnce(std::io::Error) -> ResourceError {
        let doing = doing.into();
        move |source| ResourceError::Io { doing, source }
    }

    /// A system command's error while `doing` (a phrase naming the resource and the program).
    pub fn system(doing: impl Into<String>) -> impl FnOnce(crate::system::Error) -> ResourceError {
        let doing = doing.into();
        move |source| ResourceError::System { doing, source }
    }
}

/// Why a declared path is not a place the host may write (links and special files on the way
/// are `beneath::BeneathError`s).
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error(
        "{declared} resolves to {}, the host's own (named after it under {folder}); no declaration \
         may name it",
        machine.display()
    )]
    HostOwn {
        declared: String,
        machine: PathBuf,
        folder: String,
    },
}

/// Why a saved original could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum OriginalError {
    #[error("originals directory {}: {source}", dir.display())]
    Directory {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("saving original of {key}: {source}")]
    Save {
        key: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}
