//! The guard: the mesh's own table that only refuses. It passes everything by default and holds
//! nothing but refusals of the foundation's own ports (the store's and the broker's management
//! port), except for packets arriving on loopback, the private network's interface or a
//! container runtime's own networks — known by the interface, never by the source address alone.
//!
//! A guarded service that runs in a container is refused at its container's own port too: a
//! packet from outside whose destination routes out through a runtime's network (`fib daddr
//! oifname`), sent straight to a container's address rather than to the published host port, is
//! dropped. Traffic the machine routes to other machines is never touched.
//!
//! It sits at prerouting ahead of the runtime's destination NAT, so it matches the port a packet
//! was sent to, for both address families (an `inet` table). It is created with the owner and
//! persist flags by the process that holds it, so `nft flush ruleset` by anyone else leaves it
//! in place while the host runs, and it stays (an orphan) when the host exits, to be reclaimed by
//! the next one.

use crate::detect::MESH_TABLE;
use crate::error::{Errno, Error, Result};
use crate::netlink::{
    BaseChain, Batch, Claim, CmpOp, Family, Hook, NfSocket, Position, RuleBody, TableFlags,
};
use crate::opening::{check_interface, Proto};

/// The guard's chain in the mesh's table.
pub const GUARD_CHAIN: &str = "guard";

/// Ahead of dstnat (-100), after conntrack (-200), so the packet's original port is matched.
pub const GUARD_PRIORITY: i32 = -150;

/// Interfaces of the container runtimes, whose traffic is the machine's own.
pub const RUNTIME_INTERFACES: &[&str] = &["docker0", "br-*", "podman*", "cni-*"];

/// One guarded service: the port it is refused at on the machine's own addresses, and the port it
/// listens on inside its container (the same port for a service that runs on the host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardedPort {
    /// What it is, for the rules' marks (`store`, `broker-management`).
    pub what: String,
    pub proto: Proto,
    /// The port on the machine's own addresses (a container's published host port).
    pub host_port: u16,
    /// The port inside its container, refused for packets routed to a runtime's network.
    pub container_port: u16,
}

/// What the guard refuses, and which interfaces it lets through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardSpec {
    /// The services refused from outside.
    pub ports: Vec<GuardedPort>,
    /// Interfaces whose packets are not refused: loopback, the private network's interface, the
    /// runtimes' networks.
    pub allowed: Vec<String>,
    /// The runtimes' networks (names or `prefix*` patterns), also in `allowed`: a packet from
    /// outside whose destination routes out through one of them is refused at the guarded
    /// services' container ports.
    pub runtimes: Vec<String>,
}

impl GuardSpec {
    /// The guard for a node: the store's and the broker's management ports, allowed from
    /// loopback, the private network's interface and the runtimes' networks. The services'
    /// container ports are their host ports until [`GuardSpec::container_ports`] says otherwise.
    pub fn for_node(
        store: u16,
        broker_management: u16,
        private_interface: Option<&str>,
    ) -> GuardSpec {
        let mut allowed = vec!["lo".to_string()];
        allowed.extend(private_interface.map(str::to_string));
        allowed.extend(RUNTIME_INTERFACES.iter().map(|s| s.to_string()));
        let port = |what: &str, port: u16| GuardedPort {
            what: what.into(),
            proto: Proto::Tcp,
            host_port: port,
            container_port: port,
        };
        GuardSpec {
            ports: vec![
                port("store", store),
                port("broker-management", broker_management),
            ],
            allowed,
            runtimes: RUNTIME_INTERFACES.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The ports the store and the broker's management listen on inside their containers.
    pub fn container_ports(mut self, store: u16, broker_management: u16) -> GuardSpec {
        for p in &mut self.ports {
            match p.what.as_str() {
                "store" => p.container_port = store,
                "broker-management" => p.container_port = broker_management,
                _ => {}
            }
        }
        self
    }

    /// Lets a runtime's custom-named bridge through, and refuses the container ports routed to
    /// it from outside; a name already covered (exactly or by a pattern) changes nothing.
    pub fn add_runtime_bridge(&mut self, name: &str) {
        let covered = self
            .allowed
            .iter()
            .any(|a| a == name || a.strip_suffix('*').is_some_and(|p| name.starts_with(p)));
        if !covered {
            self.allowed.push(name.to_string());
            self.runtimes.push(name.to_string());
        }
    }

    fn outside(&self) -> RuleBody {
        let mut b = RuleBody::new();
        for i in &self.allowed {
            b = b.iifname_ne(i);
        }
        b
    }

    fn bodies(&self) -> Result<Vec<RuleBody>> {
        let mut out = Vec::new();
        for i in self.allowed.iter().chain(&self.runtimes) {
            check_interface(i).map_err(|reason| Error::InvalidOpening {
                id: "guard".into(),
                reason,
            })?;
        }
        let dport = |b: RuleBody, proto: Proto, port: u16| match proto {
            Proto::Tcp => b.tcp_dport(port),
            Proto::Udp => b.udp_dport(port),
        };
        for p in &self.ports {
            let proto = p.proto.as_str();
            let (what, port) = (&p.what, p.host_port);
            out.push(
                dport(self.outside(), p.proto, port)
                    .drop()
                    .comment(&format!("mesh-host:guard/{what}/{proto}/{port}")),
            );
            // Sent from outside straight to a container's address (the machine as the gateway),
            // not to the published host port: refused at the port the service listens on inside.
            let port = p.container_port;
            for rt in &self.runtimes {
                out.push(
                    dport(
                        self.outside().fib_daddr_oifname(CmpOp::Eq, rt),
                        p.proto,
                        port,
                    )
                    .drop()
                    .comment(&format!(
                        "mesh-host:guard/{what}/container/{proto}/{port}/{rt}"
                    )),
                );
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_port_is_refused_on_the_host_then_at_its_container_port_per_runtime() {
        let mut spec = GuardSpec::for_node(15432, 15672, Some("wg0")).container_ports(5432, 15672);
        spec.add_runtime_bridge("lanbr");
        spec.add_runtime_bridge("br-x");
        let marks: Vec<String> = spec
            .bodies()
            .unwrap()
            .into_iter()
            .map(|b| b.comment.unwrap())
            .collect();
        let mut want = vec!["mesh-host:guard/store/tcp/15432".to_string()];
        for rt in ["docker0", "br-*", "podman*", "cni-*", "lanbr"] {
            want.push(format!("mesh-host:guard/store/container/tcp/5432/{rt}"));
        }
        want.push("mesh-host:guard/broker-management/tcp/15672".into());
        for rt in ["docker0", "br-*", "podman*", "cni-*", "lanbr"] {
            want.push(format!(
                "mesh-host:guard/broker-management/container/tcp/15672/{rt}"
            ));
        }
        assert_eq!(marks, want);
        assert_eq!(
            spec.allowed,
            ["lo", "wg0", "docker0", "br-*", "podman*", "cni-*", "lanbr"]
        );
        // The container refusal: every allowed interface, then the route's interface, then the port.
        let body = &spec.bodies().unwrap()[1];
        let want = RuleBody::new()
            .iifname_ne("lo")
            .iifname_ne("wg0")
            .iifname_ne("docker0")
            .iifname_ne("br-*")
            .iifname_ne("podman*")
            .iifname_ne("cni-*")
            .iifname_ne("lanbr")
            .fib_daddr_oifname(CmpOp::Eq, "docker0")
            .tcp_dport(5432)
            .drop();
        assert_eq!(body.exprs, want.exprs);
    }
}
