//! An opening: a port made reachable through the found firewall, from somewhere, on the incoming
//! or the forwarded path. The firewall crate's own type; the core translates its declaration into
//! it, so this crate knows nothing of declarations.

use crate::error::{Error, Result};
use std::fmt;
use std::net::IpAddr;

/// Every rule the host writes carries this mark, followed by the opening's id, as its comment.
/// The host removes only rules that carry it.
pub const MARK_PREFIX: &str = "mesh-host:";

/// The longest opening id: its mark, `mesh-host:<id>#<8 hex>`, then fits the 128 bytes nft
/// allows a rule's comment (so a saved ruleset loads again) and iptables' 256.
pub const MAX_ID_LEN: usize = 128 - MARK_PREFIX.len() - 1 - 8;

/// A transport protocol: of an opening, a published port, a listener, a foundation port. The
/// one definition every crate of the host uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }

    /// Its IP protocol number, as a rule's layer-4 match reads it.
    pub fn number(self) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
        }
    }
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The path a packet takes to the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum Path {
    /// Received by the machine itself (the input hook).
    Incoming,
    /// Forwarded to a container after the runtime's DNAT (the forward hook); matched on the
    /// port the packet was originally sent to.
    Forwarded,
}

impl Path {
    pub fn as_str(self) -> &'static str {
        match self {
            Path::Incoming => "incoming",
            Path::Forwarded => "forwarded",
        }
    }
}

/// A source network in either family, with no host bits set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Network {
    pub addr: IpAddr,
    pub len: u8,
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// Where an opening admits traffic from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum From {
    Anywhere,
    /// Packets arriving on this interface (the private network's).
    Interface(String),
    /// Packets from these source networks.
    Networks(Vec<Network>),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Opening {
    /// The stable id; it travels in the mark.
    pub id: String,
    pub port: u16,
    pub proto: Proto,
    pub from: From,
    pub path: Path,
}

impl Opening {
    /// The comment that marks this opening's rules as the mesh's.
    pub fn mark(&self) -> String {
        format!("{MARK_PREFIX}{}", self.id)
    }

    /// Checks every value that will reach a ruleset or a command line.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| {
            Err(Error::InvalidOpening {
                id: self.id.clone(),
                reason,
            })
        };
        if self.id.is_empty()
            || self.id.len() > MAX_ID_LEN
            || !self
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-/@:".contains(c))
        {
            return bad(format!("id must be 1 to {MAX_ID_LEN} of [A-Za-z0-9._-/@:]"));
        }
        if self.port == 0 {
            return bad("port 0 is not a port".into());
        }
        match &self.from {
            From::Interface(name) => {
                if let Err(reason) = check_interface(name) {
                    return bad(reason.to_string());
                }
            }
            From::Networks(nets) => {
                if nets.is_empty() {
                    return bad("an empty list of source networks admits nothing".into());
                }
                for n in nets {
                    if !network_is_exact(n) {
                        return bad(format!(
                            "{n} is not a network (host bits set or prefix too long)"
                        ));
                    }
                }
            }
            From::Anywhere => {}
        }
        Ok(())
    }
}

/// Why a name is not an interface name the firewall writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadInterface {
    #[error("interface {0:?} must be 1 to 15 bytes")]
    Length(String),
    #[error("interface {0:?} may hold only [A-Za-z0-9._-] (and a trailing *)")]
    Characters(String),
    /// A prefix pattern where a name is trusted as it is; `who` trusts it.
    #[error("interface {name:?} is a pattern; the {who} trusts no name pattern")]
    Pattern { name: String, who: String },
}

/// A Linux interface name, or a prefix pattern ending in `*`: 1 to 15 bytes of [A-Za-z0-9._-].
pub fn check_interface(name: &str) -> std::result::Result<(), BadInterface> {
    let stem = name.strip_suffix('*').unwrap_or(name);
    if stem.is_empty() && !name.ends_with('*') || name.len() > 15 {
        return Err(BadInterface::Length(name.to_string()));
    }
    if !stem
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        || stem == "."
        || stem == ".."
    {
        return Err(BadInterface::Characters(name.to_string()));
    }
    Ok(())
}

/// [`check_interface`] for a name trusted as it is (the guard's and the filter's): a trailing
/// `*` would be a prefix match, trusting every interface that merely looks like the runtime's.
pub fn check_exact_interface(name: &str, who: &str) -> std::result::Result<(), BadInterface> {
    check_interface(name)?;
    if name.ends_with('*') {
        return Err(BadInterface::Pattern {
            name: name.to_string(),
            who: who.to_string(),
        });
    }
    Ok(())
}

/// An opening's sources as a person reads them.
impl From {
    pub fn describe(&self) -> String {
        match self {
            From::Anywhere => "anywhere".to_string(),
            From::Interface(i) => format!("the private network ({i})"),
            From::Networks(n) => n
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

fn network_is_exact(n: &Network) -> bool {
    match n.addr {
        IpAddr::V4(a) => n.len <= 32 && (n.len == 32 || u32::from(a) & (u32::MAX >> n.len) == 0),
        IpAddr::V6(a) => {
            n.len <= 128 && (n.len == 128 || u128::from(a) & (u128::MAX >> n.len) == 0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opening(from: From) -> Opening {
        Opening {
            id: "web/https".into(),
            port: 443,
            proto: Proto::Tcp,
            from,
            path: Path::Incoming,
        }
    }

    #[test]
    fn marks_carry_the_id() {
        let o = opening(From::Anywhere);
        assert_eq!(o.mark(), "mesh-host:web/https");
    }

    #[test]
    fn hostile_values_never_reach_a_ruleset() {
        let mut o = opening(From::Interface("eth0\" accept".into()));
        assert!(o.validate().is_err());
        o.from = From::Interface("br-*".into());
        assert!(o.validate().is_ok());
        o.id = "x\ny".into();
        assert!(o.validate().is_err());
        let o = opening(From::Networks(vec![Network {
            addr: "10.0.0.1".parse().unwrap(),
            len: 8,
        }]));
        assert!(o.validate().is_err());
        let o = opening(From::Networks(vec![]));
        assert!(o.validate().is_err());
        let o = opening(From::Networks(vec![Network {
            addr: "fd77::".parse().unwrap(),
            len: 64,
        }]));
        assert!(o.validate().is_ok());
    }
}
