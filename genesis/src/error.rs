//! Genesis's one error type: every message names the path, request or resource concerned.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while genesis reads the machine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A kernel table under /proc could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// A kernel table had a line genesis does not understand; reported rather than skipped, since
    /// a listener missed is a port genesis would wrongly call free.
    #[error("line {line} of {path} is malformed: {reason}")]
    Malformed {
        path: PathBuf,
        line: usize,
        reason: String,
    },

    /// A netlink request to the kernel failed.
    #[error("netlink request {request} failed: {source}")]
    Netlink {
        request: &'static str,
        #[source]
        source: io::Error,
    },

    /// The interface addresses could not be listed.
    #[error("cannot list interface addresses (getifaddrs): {source}")]
    Addresses {
        #[source]
        source: io::Error,
    },
}

/// Genesis's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
