//! The guard: the mesh's own table that only refuses. It passes everything by default and holds
//! nothing but refusals of the foundation's own ports (the store's and the broker's management
//! port), except for packets arriving on loopback, the private network's interface or a
//! container runtime's own networks — known by the interface, never by the source address alone.
//!
//! It sits at prerouting ahead of the runtime's destination NAT, so it matches the port a packet
//! was sent to, for both address families (an `inet` table). It is created with the owner and
//! persist flags by the process that holds it, so `nft flush ruleset` by anyone else leaves it
//! in place while the host runs, and it stays (an orphan) when the host exits, to be reclaimed by
//! the next one.

use crate::detect::MESH_TABLE;
use crate::error::{Errno, Error, Result};
use crate::netlink::{
    BaseChain, Batch, Claim, Family, Hook, NfSocket, Position, RuleBody, TableFlags,
};
use crate::opening::{check_interface, Proto};

/// The guard's chain in the mesh's table.
pub const GUARD_CHAIN: &str = "guard";

/// Ahead of dstnat (-100), after conntrack (-200), so the packet's original port is matched.
pub const GUARD_PRIORITY: i32 = -150;

/// Interfaces of the container runtimes, whose traffic is the machine's own.
pub const RUNTIME_INTERFACES: &[&str] = &["docker0", "br-*", "podman*", "cni-*"];

/// What the guard refuses, and which interfaces it lets through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardSpec {
    /// The ports refused from outside: (port, protocol, what it is, for the rule's mark).
    pub ports: Vec<(u16, Proto, String)>,
    /// Interfaces whose packets are not refused: loopback, the private network's interface, the
    /// runtimes' networks.
    pub allowed: Vec<String>,
}

impl GuardSpec {
    /// The guard for a node: the store's and the broker's management ports, allowed from
    /// loopback, the private network's interface and the runtimes' networks.
    pub fn for_node(
        store: u16,
        broker_management: u16,
        private_interface: Option<&str>,
    ) -> GuardSpec {
        let mut allowed = vec!["lo".to_string()];
        allowed.extend(private_interface.map(str::to_string));
        allowed.extend(RUNTIME_INTERFACES.iter().map(|s| s.to_string()));
        GuardSpec {
            ports: vec![
                (store, Proto::Tcp, "store".into()),
                (broker_management, Proto::Tcp, "broker-management".into()),
            ],
            allowed,
        }
    }

    fn bodies(&self) -> Result<Vec<RuleBody>> {
        let mut out = Vec::new();
        for i in &self.allowed {
            check_interface(i).map_err(|reason| Error::InvalidOpening {
                id: "guard".into(),
                reason,
            })?;
        }
        for (port, proto, what) in &self.ports {
            let mut b = RuleBody::new();
            for i in &self.allowed {
                b = b.iifname_ne(i);
            }
            b = match proto {
                Proto::Tcp => b.tcp_dport(*port),
                Proto::Udp => b.udp_dport(*port),
            };
            out.push(
                b.drop()
                    .comment(&format!("mesh-host:guard/{what}/{}/{port}", proto.as_str())),
            );
        }
        Ok(out)
    }
}

/// How the guard stands after [`ensure`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardReport {
    /// Whether the table was created, reclaimed from an orphan, or already held by this socket;
    /// `None` when the kernel has no persist flag and the table is a plain one.
    pub claim: Option<Claim>,
    /// The netlink port of another live holder (a resident host), when the table is held by it
    /// and already says what `spec` says; the guard is then in force and left to its holder.
    pub held_by: Option<u32>,
    /// Whether its rules had to be written.
    pub changed: bool,
}

/// The guard as it is on the machine.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GuardStatus {
    pub present: bool,
    pub owned: bool,
    pub orphan: bool,
    pub owner: Option<u32>,
    /// The marks of its rules, in order.
    pub rules: Vec<String>,
}

/// Puts the guard in place as `spec` says, holding its table on `sock`; idempotent.
pub fn ensure(sock: &mut NfSocket, spec: &GuardSpec) -> Result<GuardReport> {
    let bodies = spec.bodies()?;
    let claim = match sock.claim_table(Family::Inet, MESH_TABLE) {
        Ok(c) => Some(c),
        // A kernel before 6.9 has no persist flag: an owner-only table would vanish when this
        // process exits, so the guard falls back to a plain table (reported as unowned).
        Err(Error::Refused {
            errno: Errno(e), ..
        }) if e == libc::EOPNOTSUPP || e == libc::EINVAL => {
            let mut b = Batch::new();
            b.add_table(Family::Inet, MESH_TABLE, TableFlags::NONE)?;
            sock.send(&b)?;
            None
        }
        // Another live process holds the guard (a resident host): it cannot be changed from
        // here, but it can be read. If it already refuses what it should, it is in force.
        Err(Error::TableOwned { owner, .. }) => {
            return if in_force(sock, &bodies)? {
                Ok(GuardReport {
                    claim: None,
                    held_by: Some(owner),
                    changed: false,
                })
            } else {
                Err(Error::Unsupported {
                    reason: format!(
                        "the guard table inet {MESH_TABLE} is held by netlink port {owner} and does not \
                         refuse what this node's settings say; its holder must change it"
                    ),
                })
            };
        }
        Err(e) => return Err(e),
    };
    if in_force(sock, &bodies)? {
        return Ok(GuardReport {
            claim,
            held_by: None,
            changed: false,
        });
    }
    let base = BaseChain::filter(Hook::Prerouting, GUARD_PRIORITY);
    let chain = sock
        .chains(Some(Family::Inet))?
        .into_iter()
        .find(|c| c.table == MESH_TABLE && c.name == GUARD_CHAIN);
    let chain_ok = chain.as_ref().is_some_and(|c| {
        c.hook
            .as_ref()
            .is_some_and(|h| h.hook == Hook::Prerouting && h.priority == GUARD_PRIORITY)
            && c.policy == Some(base.policy)
    });
    // One transaction: the chain, emptied, then its refusals; there is no moment without them.
    let mut batch = Batch::new();
    if chain.is_some() && !chain_ok {
        batch.flush(Family::Inet, MESH_TABLE, Some(GUARD_CHAIN))?;
        batch.del_chain(Family::Inet, MESH_TABLE, GUARD_CHAIN)?;
    }
    batch.add_chain(Family::Inet, MESH_TABLE, GUARD_CHAIN, Some(&base))?;
    batch.flush(Family::Inet, MESH_TABLE, Some(GUARD_CHAIN))?;
    for b in &bodies {
        batch.add_rule(Family::Inet, MESH_TABLE, GUARD_CHAIN, b, Position::Append)?;
    }
    sock.send(&batch)?;
    Ok(GuardReport {
        claim,
        held_by: None,
        changed: true,
    })
}

/// Whether the guard chain is there, at its hook and priority, with exactly these rules.
fn in_force(sock: &mut NfSocket, bodies: &[RuleBody]) -> Result<bool> {
    let chain = sock
        .chains(Some(Family::Inet))?
        .into_iter()
        .find(|c| c.table == MESH_TABLE && c.name == GUARD_CHAIN);
    let Some(chain) = chain else { return Ok(false) };
    let hooked = chain
        .hook
        .as_ref()
        .is_some_and(|h| h.hook == Hook::Prerouting && h.priority == GUARD_PRIORITY)
        && chain.policy == Some(crate::netlink::Policy::Accept);
    let rules = sock.rules_of(Family::Inet, MESH_TABLE, Some(GUARD_CHAIN))?;
    Ok(hooked
        && rules.len() == bodies.len()
        && rules
            .iter()
            .zip(bodies)
            .all(|(r, b)| r.comment == b.comment && r.exprs == b.exprs))
}

/// Reads the guard's state without changing anything.
pub fn status(sock: &mut NfSocket) -> Result<GuardStatus> {
    let Some(table) = sock
        .tables(Some(Family::Inet))?
        .into_iter()
        .find(|t| t.name == MESH_TABLE)
    else {
        return Ok(GuardStatus::default());
    };
    let rules = sock
        .rules_of(Family::Inet, MESH_TABLE, Some(GUARD_CHAIN))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|r| r.comment)
        .collect();
    Ok(GuardStatus {
        present: true,
        owned: table.is_owned(),
        orphan: table.is_orphan(),
        owner: table.owner,
        rules,
    })
}
