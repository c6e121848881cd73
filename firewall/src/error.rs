//! The firewall crate's one error type, naming the resource and the kernel's errno.

use std::fmt;

use crate::netlink::Family;

/// An errno value, shown by its symbolic name so a report says `EPERM`, not `1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// The errno of the last failed system call on this thread.
    pub fn last() -> Errno {
        Errno(nix::errno::Errno::last_raw())
    }

    /// The symbolic name, e.g. `EPERM`, as `nix` names Linux's errno values; `None` for a value
    /// Linux does not define.
    pub fn name(self) -> Option<String> {
        match nix::errno::Errno::from_raw(self.0) {
            nix::errno::Errno::UnknownErrno => None,
            known => Some(format!("{known:?}")),
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = std::io::Error::from_raw_os_error(self.0).to_string();
        // The io::Error text ends in "(os error N)"; the symbolic name says the same more usefully.
        let text = text.split(" (os error").next().unwrap_or("").to_lowercase();
        match self.name() {
            Some(name) => write!(f, "{name} ({text})"),
            None => write!(f, "errno {} ({text})", self.0),
        }
    }
}

/// Everything that can go wrong in the firewall crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The machine's firewall carries another node's marks: a second store (a mistaken
    /// `--root`) must not converge over them.
    #[error("the firewall here carries the marked rules of node {node:?}, recorded in table inet mesh_host chain claim; this store is node {ours:?}, so it will not touch them (if node {node:?} is gone from this machine, delete that chain with `nft delete chain inet mesh_host claim`)")]
    Claimed { node: String, ours: String },

    /// A socket system call failed.
    #[error("netlink socket {op} failed: {errno}")]
    Socket { op: &'static str, errno: Errno },

    /// The kernel refused one message of a batch; the whole batch was rolled back.
    #[error("kernel refused {what} (batch message seq {seq}): {errno}{}", detail_suffix(.detail))]
    Refused {
        what: String,
        seq: u32,
        errno: Errno,
        detail: Option<String>,
    },

    /// A dump or query was answered with an error.
    #[error("kernel refused to list {what}: {errno}{}", detail_suffix(.detail))]
    ListRefused {
        what: String,
        errno: Errno,
        detail: Option<String>,
    },

    /// The kernel did not acknowledge a batch's last message, so its outcome is unknown.
    #[error("kernel did not acknowledge the last of a batch's {messages} messages ({last}), so its outcome is unknown")]
    AcksMissing { messages: usize, last: String },

    /// A message from the kernel could not be framed; listing tolerates odd contents, not broken
    /// framing.
    #[error("malformed netlink message while reading {what}: {reason}")]
    Malformed { what: String, reason: String },

    /// A listing kept being interrupted by concurrent changes to the ruleset.
    #[error("listing {what} was interrupted by concurrent ruleset changes on each of {tries} tries over {millis} ms")]
    Interrupted {
        what: String,
        tries: u32,
        millis: u128,
    },

    /// Every batch of a convergence was refused because the ruleset changed between the listing
    /// it was computed from and its commit (ERESTART), so nothing was applied.
    #[error("the ruleset changed under every one of {tries} attempts over {millis} ms to converge the openings (the kernel refused each batch as computed from a stale listing: ERESTART); nothing was changed")]
    Raced { tries: u32, millis: u128 },

    /// A table is owned by another live netlink socket, so this one cannot claim it.
    #[error("table {family} {table} is owned by netlink port {owner}")]
    TableOwned {
        family: Family,
        table: String,
        owner: u32,
    },

    /// A name the kernel would refuse, caught before sending.
    #[error("{what} name {name:?} is invalid: {reason}")]
    InvalidName {
        what: &'static str,
        name: String,
        reason: &'static str,
    },

    /// A child program (iptables and its kin) failed; names the program, its arguments, its exit
    /// status and what it printed on stderr.
    #[error("{program} {args:?} {status}: {stderr}")]
    Command {
        program: String,
        args: Vec<String>,
        status: String,
        stderr: String,
    },

    /// A child program could not be started at all.
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },

    /// The found firewall is of a kind openings cannot be converged through (yet, or at all).
    #[error("the found firewall cannot carry openings: {reason}")]
    Unsupported { reason: String },

    /// A value of an opening that would reach a ruleset or a command line is invalid.
    #[error("opening {id}: {reason}")]
    InvalidOpening { id: String, reason: String },

    /// Nothing arrived within the time given.
    #[error("no netlink message arrived within {millis} ms while {what}")]
    Timeout { what: &'static str, millis: u128 },

    /// A D-Bus call (to firewalld) failed or was refused.
    #[error("d-bus: {what}: {reason}")]
    Dbus { what: String, reason: String },
    /// A D-Bus call was answered with an error: its name (`org.freedesktop.DBus.Error.InvalidArgs`)
    /// and its message (firewalld's begins with its code, `INVALID_PROPERTY: …`).
    #[error("d-bus: {what}: {name}: {message}")]
    DbusReply {
        what: String,
        name: String,
        message: String,
    },
    /// A `bpf(2)` call failed; names the object and, for a refused program, the verifier's
    /// last words.
    #[error("bpf {op} of {what} failed: {errno}{}", detail_suffix(.log))]
    Bpf {
        op: &'static str,
        what: String,
        errno: Errno,
        log: Option<String>,
    },

    /// Confirming a verdict with the kernel in scratch namespaces failed at one step.
    #[error("confirming with the kernel: {what}: {reason}")]
    Confirm { what: String, reason: String },

    /// The kernel's BTF could not be read, or lacks a type or field the BPF guard needs.
    #[error("kernel btf {path}: {reason}")]
    Btf { path: String, reason: String },
}

fn detail_suffix(detail: &Option<String>) -> String {
    match detail {
        Some(d) if !d.is_empty() => format!(" ({d})"),
        _ => String::new(),
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_shows_its_symbolic_name() {
        assert_eq!(
            Errno(nix::errno::Errno::EPERM as i32).to_string(),
            "EPERM (operation not permitted)"
        );
        // The names the crate's own table gave, and ones it did not (EHOSTUNREACH, ENOSYS).
        for (n, name) in [
            (nix::errno::Errno::ERESTART, "ERESTART"),
            (nix::errno::Errno::ENOBUFS, "ENOBUFS"),
            (nix::errno::Errno::EOPNOTSUPP, "EOPNOTSUPP"),
            (nix::errno::Errno::EHOSTUNREACH, "EHOSTUNREACH"),
            (nix::errno::Errno::ENOSYS, "ENOSYS"),
        ] {
            assert_eq!(Errno(n as i32).name().as_deref(), Some(name));
        }
        assert_eq!(Errno(0).name(), None);
        assert!(Errno(4000).to_string().starts_with("errno 4000"));
    }

    #[test]
    fn a_refusal_names_the_message_and_errno() {
        let e = Error::Refused {
            what: "add table inet meshguard".into(),
            seq: 7,
            errno: Errno(nix::errno::Errno::EPERM as i32),
            detail: None,
        };
        assert_eq!(
            e.to_string(),
            "kernel refused add table inet meshguard (batch message seq 7): EPERM (operation not permitted)"
        );
    }
}
