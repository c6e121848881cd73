//! Forwarded openings under firewalld's `StrictForwardPorts=yes` (firewalld 2.3 and later).
//!
//! Strict, firewalld no longer accepts every connection another program's DNAT forwards: its
//! forward chain sends them (`ct status dnat`) to `filter_FORWARD_dnat`, which refuses all but
//! what firewalld's own forward ports admit, one `ct original proto-dst PORT accept` for each
//! forward port with a to-address. So a published container port is admitted in firewalld's own
//! terms by a forward port `port=PUBLISHED:proto=P:toport=CONTAINER_PORT:toaddr=CONTAINER_ADDR`,
//! one for each place the runtime's DNAT sends it ([`crate::published::targets`]), in the mesh's
//! policy (from any zone to the host), whose every forward port is the mesh's. firewalld's own
//! DNAT for it comes after the runtime's, so for connections the runtime translates only its
//! accept matters.
//!
//! That accept matches the original destination port alone, from every source and for every
//! protocol: an opening restricted to networks or to the private network's interface would be
//! widened by it, so such an opening is not written and is reported not admitted, saying why.

use crate::opening::{From, Opening};
use crate::outcome::Scope;
use crate::published::Target;
use std::collections::{BTreeMap, BTreeSet};

/// One forward port of firewalld, as its D-Bus API speaks of it (`a(ssss)`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct ForwardPort {
    pub port: String,
    pub proto: String,
    pub toport: String,
    pub toaddr: String,
}

impl ForwardPort {
    /// The original port and protocol it admits.
    fn key(&self) -> (String, String) {
        (self.port.clone(), self.proto.clone())
    }

    pub fn quad(&self) -> (&str, &str, &str, &str) {
        (&self.port, &self.proto, &self.toport, &self.toaddr)
    }
}

impl std::fmt::Display for ForwardPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "port={}:proto={}:toport={}:toaddr={}",
            self.port, self.proto, self.toport, self.toaddr
        )
    }
}

/// Why a forwarded opening gets no forward port (then it is not admitted, and this is its
/// state's reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum NoForwardPort {
    /// It admits only some sources (`what`), which a forward port would widen to every one.
    #[error("firewalld's StrictForwardPorts admits a forwarded connection by its original port alone, from every source, and the opening admits only {0}: mesh-host does not widen it (open it from anywhere, or set StrictForwardPorts=no)")]
    Widened(String),
    #[error("no DNAT rule translates {proto} port {port}: no container runtime publishes it yet (the forward port is written once one does)")]
    Unpublished { proto: String, port: u16 },
}

/// The forward ports a forwarded opening needs, one per place its port is translated to; or
/// why none is written (then the opening is not admitted, and the reason is its state).
pub(super) fn wanted(
    o: &Opening,
    targets: &[Target],
) -> std::result::Result<Vec<ForwardPort>, NoForwardPort> {
    match &o.from {
        From::Anywhere => {}
        From::Networks(_) => return Err(NoForwardPort::Widened("some networks".into())),
        From::Interface(i) => return Err(NoForwardPort::Widened(format!("interface {i}"))),
    }
    if targets.is_empty() {
        return Err(NoForwardPort::Unpublished {
            proto: o.proto.to_string(),
            port: o.port,
        });
    }
    Ok(targets
        .iter()
        .map(|t| ForwardPort {
            port: o.port.to_string(),
            proto: o.proto.to_string(),
            toport: t.port.to_string(),
            toaddr: t.addr.to_string(),
        })
        .collect())
}

/// The forward ports the mesh's policy should hold, from those it holds: `want` (each with its
/// opening) added, and removed every other one (`Scope::All`) or, converging only some openings
/// (`Scope::Given`), every other one for a port and protocol of `given` — a stale one, its
/// container moved to another address.
pub(super) struct Plan {
    pub next: Vec<ForwardPort>,
    pub added: Vec<(ForwardPort, String)>,
    pub removed: Vec<ForwardPort>,
}

pub(super) fn plan(
    current: &[ForwardPort],
    want: &BTreeMap<ForwardPort, String>,
    given: &BTreeSet<(String, String)>,
    scope: Scope,
) -> Plan {
    let mut out = Plan {
        next: Vec::new(),
        added: Vec::new(),
        removed: Vec::new(),
    };
    for fp in current {
        let kept = want.contains_key(fp) || (scope == Scope::Given && !given.contains(&fp.key()));
        if kept {
            out.next.push(fp.clone());
        } else {
            out.removed.push(fp.clone());
        }
    }
    for (fp, id) in want {
        if !current.contains(fp) {
            out.next.push(fp.clone());
            out.added.push((fp.clone(), id.clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opening::{Network, Path, Proto};

    fn opening(from: From) -> Opening {
        Opening {
            id: "web/pub".into(),
            port: 8085,
            proto: Proto::Tcp,
            from,
            path: Path::Forwarded,
        }
    }

    fn fp(toaddr: &str) -> ForwardPort {
        ForwardPort {
            port: "8085".into(),
            proto: "tcp".into(),
            toport: "80".into(),
            toaddr: toaddr.into(),
        }
    }

    /// From anywhere: one forward port per place the runtime translates the port to, both
    /// families, with the container's port.
    #[test]
    fn one_forward_port_per_target() {
        let targets = [
            Target {
                addr: "172.17.0.2".parse().unwrap(),
                port: 80,
            },
            Target {
                addr: "fd00:d0c::2".parse().unwrap(),
                port: 80,
            },
        ];
        assert_eq!(
            wanted(&opening(From::Anywhere), &targets).unwrap(),
            [fp("172.17.0.2"), fp("fd00:d0c::2")]
        );
        assert_eq!(
            fp("172.17.0.2").to_string(),
            "port=8085:proto=tcp:toport=80:toaddr=172.17.0.2"
        );
    }

    /// Nothing is written when no runtime publishes the port, nor for an opening firewalld's
    /// accept would widen; each says why.
    #[test]
    fn nothing_without_a_target_or_when_it_would_widen() {
        let why = wanted(&opening(From::Anywhere), &[]).unwrap_err();
        assert_eq!(
            why,
            NoForwardPort::Unpublished {
                proto: "tcp".into(),
                port: 8085
            }
        );
        assert!(
            why.to_string()
                .contains("no DNAT rule translates tcp port 8085"),
            "{why}"
        );
        let target = [Target {
            addr: "172.17.0.2".parse().unwrap(),
            port: 80,
        }];
        let nets = From::Networks(vec![Network {
            addr: "10.0.0.0".parse().unwrap(),
            len: 8,
        }]);
        let why = wanted(&opening(nets), &target).unwrap_err();
        assert_eq!(why, NoForwardPort::Widened("some networks".into()));
        assert!(why.to_string().contains("does not widen it"), "{why}");
        let why = wanted(&opening(From::Interface("wg0".into())), &target).unwrap_err();
        assert_eq!(why, NoForwardPort::Widened("interface wg0".into()));
    }

    /// A stale forward port (the container moved) is replaced, under either scope; converging
    /// some openings keeps the forward ports of the others; converging all removes them.
    #[test]
    fn stale_forward_ports_are_replaced() {
        let other = ForwardPort {
            port: "9000".into(),
            ..fp("172.17.0.3")
        };
        let current = [fp("172.17.0.2"), other.clone()];
        let want = BTreeMap::from([(fp("172.17.0.4"), "web/pub".to_string())]);
        let given = BTreeSet::from([("8085".to_string(), "tcp".to_string())]);

        let p = plan(&current, &want, &given, Scope::Given);
        assert_eq!(p.next, [other.clone(), fp("172.17.0.4")]);
        assert_eq!(p.removed, [fp("172.17.0.2")]);
        assert_eq!(p.added, [(fp("172.17.0.4"), "web/pub".to_string())]);

        let p = plan(&current, &want, &given, Scope::All);
        assert_eq!(p.next, [fp("172.17.0.4")]);
        assert_eq!(p.removed, [fp("172.17.0.2"), other]);

        let p = plan(&[fp("172.17.0.4")], &want, &given, Scope::All);
        assert!(p.added.is_empty() && p.removed.is_empty(), "converged");
    }
}
