//! The lab's one error type: every message names the namespace, program, path or port concerned.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong while building, probing or tearing down a lab.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Network namespaces need CAP_SYS_ADMIN; a lab test that cannot make them must fail, not skip.
    #[error("the lab needs root to create network namespaces, but runs with effective uid {uid}")]
    NotRoot { uid: u32 },

    /// A program the lab relies on is not installed.
    #[error("program {program} is missing (install the Debian package {package})")]
    MissingProgram { program: String, package: String },

    /// Something a lab script fetches into the lab's own place is not there.
    #[error("{what} is missing: no {path} (run {fetch} first)")]
    NotFetched {
        what: String,
        path: PathBuf,
        fetch: &'static str,
    },

    /// A name given to the lab is not usable as a namespace, machine or interface name.
    #[error("invalid {what} name {name:?}: {reason}")]
    InvalidName {
        what: &'static str,
        name: String,
        reason: &'static str,
    },

    /// A child process could not be started at all.
    #[error("cannot start program {program} with arguments {args:?}{}: {source}", in_namespace(.namespace))]
    Spawn {
        namespace: Option<String>,
        program: String,
        args: Vec<String>,
        #[source]
        source: io::Error,
    },

    /// A child process ran and exited unsuccessfully.
    #[error("program {program} with arguments {args:?}{} exited with {status}: {stderr}", in_namespace(.namespace))]
    Failed {
        namespace: Option<String>,
        program: String,
        args: Vec<String>,
        status: String,
        stderr: String,
    },

    /// A child process did not finish within its bound and was killed.
    #[error("program {program} with arguments {args:?}{} did not finish within {waited:?} and was killed", in_namespace(.namespace))]
    ProgramTimedOut {
        namespace: Option<String>,
        program: String,
        args: Vec<String>,
        waited: Duration,
    },

    /// Entering a namespace from a helper thread failed.
    #[error("cannot enter namespace {namespace} at {path}: {source}")]
    EnterNamespace {
        namespace: String,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// A socket operation of a probe or listener failed in a way that is not a probe outcome.
    #[error("socket for {what} on port {port} in namespace {namespace}: {source}")]
    Socket {
        namespace: String,
        what: &'static str,
        port: u16,
        #[source]
        source: io::Error,
    },

    /// A file or directory the lab manages could not be read, written or removed.
    #[error("path {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// A background process did not become ready in time.
    #[error("{what} on port {port} in namespace {namespace} was not ready within {waited:?}; its log:\n{log}")]
    NotReady {
        namespace: String,
        what: String,
        port: u16,
        waited: Duration,
        log: String,
    },

    /// The Docker engine did not answer in time; its log is attached so the cause is visible.
    #[error("docker engine in namespace {namespace} did not answer on {host} within {waited:?}; last lines of its log {log_path}:\n{log}")]
    DockerNotReady {
        namespace: String,
        host: String,
        waited: Duration,
        log_path: PathBuf,
        log: String,
    },

    /// A unix socket path would exceed the kernel's limit of 107 bytes.
    #[error("path {path} is too long for a unix socket ({len} bytes, at most 107)")]
    SocketPathTooLong { path: PathBuf, len: usize },

    /// A port the bed serves did not answer in time.
    #[error("{from} never reached [{addr}]:{port} within {waited:?} (last probe: {got})")]
    NotReached {
        from: String,
        addr: std::net::IpAddr,
        port: u16,
        got: String,
        waited: Duration,
    },

    /// The found firewall the bed loaded does not deny what it must.
    #[error(
        "the found {kind} firewall let a probe of port {port} through ({got}); it must drop it"
    )]
    NotDenied {
        kind: &'static str,
        port: u16,
        got: String,
    },

    /// The container runtime did not write its rules where the found firewall's kind has them.
    #[error("the Docker engine of the {kind} bed wrote no DOCKER chain into the legacy nat table: {listing}")]
    RuntimeElsewhere { kind: &'static str, listing: String },

    /// A found firewall that runs as a daemon or in a namespace of its own was asked for where the
    /// bed has none running (it is loaded through that, never from its files alone).
    #[error("the {kind} bed's found firewall has no {what} running")]
    NotRunning {
        kind: &'static str,
        what: &'static str,
    },

    /// The bundle given to the bed cannot be read as one.
    #[error("bundle: {0}")]
    Bundle(String),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

fn in_namespace(namespace: &Option<String>) -> String {
    match namespace {
        Some(ns) => format!(" in namespace {ns}"),
        None => String::new(),
    }
}

/// The lab's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
