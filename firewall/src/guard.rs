//! The guard: the mesh's own table that only refuses. It passes everything by default and holds
//! nothing but refusals of the foundation's own ports (the store's and the broker's management
//! port) on the node's own addresses (`fib daddr type local`), except for packets arriving on
//! loopback, the private network's interface or a bridge the container runtime reports — known
//! by the interface, never by the source address alone, and never by a name pattern: an
//! operator's bridge named `br-lan` is outside like any other interface.
//!
//! A guarded service that runs in a container is refused at its container's own port too: a
//! packet from outside whose destination routes out through a runtime's bridge (`fib daddr
//! oifname`), sent straight to a container's address rather than to the published host port, is
//! dropped. Traffic the machine routes to other machines is never touched.
//!
//! It sits at prerouting ahead of the runtime's destination NAT, so it matches the port a packet
//! was sent to, for both address families (an `inet` table). It is a plain table, with neither the
//! owner nor the persist flag: a ruleset saved with `nft list ruleset` carries it and loads again
//! with `nft -f` (an owned table makes that load fail with EPERM, and nft 1.0.6 cannot parse the
//! empty `flags` line it prints for an orphaned persist table), and a `flush ruleset` by another
//! program removes it until the host's next apply or reconcile puts it back. An owned or orphaned
//! table an earlier version left is replaced by the plain one in one transaction.

use crate::error::{Error, Result};
use crate::found::MESH_TABLE;
use crate::netlink::{
    BaseChain, Batch, CmpOp, Family, Hook, NfSocket, Position, RuleBody, Table, TableFlags,
};
use crate::opening::{check_exact_interface, Network, Proto};

/// The guard's chain in the mesh's table, at prerouting: the port a packet was sent to.
pub const GUARD_CHAIN: &str = "guard";
/// Its chains at input and forward: the port a packet reaches after any translation.
pub const GUARD_INPUT_CHAIN: &str = "guard_input";
pub const GUARD_FORWARD_CHAIN: &str = "guard_forward";
/// The guard's three chains, each with its hook, in the order they are written.
pub const GUARD_CHAINS: [(&str, Hook); 3] = [
    (GUARD_CHAIN, Hook::Prerouting),
    (GUARD_INPUT_CHAIN, Hook::Input),
    (GUARD_FORWARD_CHAIN, Hook::Forward),
];

/// Ahead of dstnat (-100), after conntrack (-200), so the packet's original port is matched at
/// prerouting; at input and forward the same number, ahead of any filter at 0.
pub const GUARD_PRIORITY: i32 = -150;

/// One guarded service: the port it is refused at on the machine's own addresses, and the port it
/// listens on inside its container (the same port for a service that runs on the host).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GuardedPort {
    /// What it is, for the rules' marks (`store`, `broker-management`).
    pub what: String,
    pub proto: Proto,
    /// The port on the machine's own addresses (a container's published host port).
    pub host_port: u16,
    /// The port inside its container, refused for packets routed to a runtime's bridge.
    pub container_port: u16,
}

/// What the guard refuses, and which packets it lets through.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GuardSpec {
    /// The services refused from outside.
    pub ports: Vec<GuardedPort>,
    /// Interfaces whose packets are not refused whatever their source, by exact name: loopback
    /// and the runtime's bridges.
    pub allowed: Vec<String>,
    /// The private network: a packet is its own only when it arrives on its interface **and**
    /// its source is in one of its ranges.
    #[cfg_attr(feature = "serde", serde(default))]
    pub private: Option<PrivateSources>,
    /// The bridges the container runtime reported, also in `allowed`: a packet from outside whose
    /// destination routes out through one of them is refused at the guarded services' container
    /// ports.
    pub runtimes: Vec<String>,
}

/// The private network as the guard knows it: the interface its packets arrive on, and the
/// source ranges they come from (at most one per family from the settings; none of a family
/// means no packet of that family on the interface is the private network's).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PrivateSources {
    pub interface: String,
    pub ranges: Vec<Network>,
}

impl PrivateSources {
    /// The ranges of one family.
    pub fn of(&self, v6: bool) -> impl Iterator<Item = &Network> {
        self.ranges.iter().filter(move |n| n.addr.is_ipv6() == v6)
    }
}

impl GuardSpec {
    /// The guard for a node: the store's and the broker's management ports, allowed from
    /// loopback and, from the sources [`GuardSpec::private_ranges`] gives, the private network's
    /// interface. The runtime's bridges are added with [`GuardSpec::add_runtime_bridge`]; the
    /// services' container ports are their host ports until [`GuardSpec::container_ports`] says
    /// otherwise.
    pub fn for_node(
        store: u16,
        broker_management: u16,
        private_interface: Option<&str>,
    ) -> GuardSpec {
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
            allowed: vec!["lo".to_string()],
            private: private_interface.map(|i| PrivateSources {
                interface: i.to_string(),
                ranges: Vec::new(),
            }),
            runtimes: Vec::new(),
        }
    }

    /// The private network's source ranges (`settings.private_network.range` and `range_v6`):
    /// only a packet on the private interface from one of them is let through.
    pub fn private_ranges(mut self, ranges: &[Network]) -> GuardSpec {
        if let Some(p) = &mut self.private {
            p.ranges = ranges.to_vec();
        }
        self
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

    /// Lets a bridge the runtime reported through, and refuses the container ports routed to it
    /// from outside; a name already allowed changes nothing.
    pub fn add_runtime_bridge(&mut self, name: &str) {
        if !self.allowed.iter().any(|a| a == name) {
            self.allowed.push(name.to_string());
            self.runtimes.push(name.to_string());
        }
    }

    /// The interfaces whose names a rule or a map key carries, each checked to be exact.
    fn check_names(&self) -> Result<()> {
        let private = self.private.as_ref().map(|p| &p.interface);
        for i in self.allowed.iter().chain(&self.runtimes).chain(private) {
            check_exact_interface(i, "guard").map_err(|reason| Error::InvalidOpening {
                id: "guard".into(),
                reason: reason.to_string(),
            })?;
        }
        Ok(())
    }

    /// The ways a packet is from outside, each with its mark's suffix: arriving on none of the
    /// exempt interfaces; or on the private interface, of one family, from beyond that family's
    /// ranges (from anywhere when the family has none).
    fn outsides(&self) -> Vec<(RuleBody, String)> {
        let mut elsewhere = RuleBody::new();
        for i in &self.allowed {
            elsewhere = elsewhere.iifname_ne(i);
        }
        let Some(p) = &self.private else {
            return vec![(elsewhere, String::new())];
        };
        let mut out = vec![(elsewhere.iifname_ne(&p.interface), String::new())];
        for (v6, fam, family) in [(false, "ipv4", Family::Ipv4), (true, "ipv6", Family::Ipv6)] {
            let mut b = RuleBody::new().iifname_eq(&p.interface);
            let ranges: Vec<&Network> = p.of(v6).collect();
            if ranges.iter().any(|r| r.len == 0) {
                // Every source of the family is in the range: nothing there is outside.
                continue;
            }
            if ranges.is_empty() {
                out.push((b.nfproto(family), format!("/{}/{fam}-any", p.interface)));
                continue;
            }
            for r in &ranges {
                b = b.saddr_outside(r.addr, r.len);
            }
            let shown: Vec<String> = ranges.iter().map(|r| r.to_string()).collect();
            out.push((
                b,
                format!("/{}/{fam}-beyond-{}", p.interface, shown.join(",")),
            ));
        }
        out
    }

    /// The rules of each of the guard's chains, in [`GUARD_CHAINS`]' order.
    ///
    /// At prerouting, the port a packet was sent to: the node's own addresses (`fib daddr type
    /// local`) at the host port, and a container's address routed to a runtime's bridge at the
    /// container port. At input and forward, the port it reaches after any translation, so a
    /// foreign `dnat to :5432` or `redirect to :5432` from another port is refused by the table
    /// alone: at input the host port, at forward the container port towards a runtime's bridge —
    /// what the BPF layer refuses at the same two hooks.
    fn chain_bodies(&self) -> Result<[Vec<RuleBody>; 3]> {
        self.check_names()?;
        let (mut pre, mut input, mut forward) = (Vec::new(), Vec::new(), Vec::new());
        let dport = |b: RuleBody, proto: Proto, port: u16| match proto {
            Proto::Tcp => b.tcp_dport(port),
            Proto::Udp => b.udp_dport(port),
        };
        let outsides = self.outsides();
        for p in &self.ports {
            let proto = p.proto.as_str();
            let (what, port) = (&p.what, p.host_port);
            // Only the node's own addresses: a packet the node routes to a machine behind it
            // (a LAN's database on the same port) is not the node's traffic.
            for (outside, from) in &outsides {
                let mark = format!("mesh-host:guard/{what}/{proto}/{port}{from}");
                pre.push(
                    dport(outside.clone().fib_daddr_type_local(), p.proto, port)
                        .drop()
                        .comment(&mark),
                );
                input.push(
                    dport(outside.clone(), p.proto, port)
                        .drop()
                        .comment(&format!("{mark}/input")),
                );
            }
            // Sent from outside straight to a container's address (the machine as the gateway),
            // not to the published host port: refused at the port the service listens on inside.
            let port = p.container_port;
            for rt in &self.runtimes {
                for (outside, from) in &outsides {
                    let mark =
                        format!("mesh-host:guard/{what}/container/{proto}/{port}/{rt}{from}");
                    pre.push(
                        dport(
                            outside.clone().fib_daddr_oifname(CmpOp::Eq, rt),
                            p.proto,
                            port,
                        )
                        .drop()
                        .comment(&mark),
                    );
                    forward.push(
                        dport(outside.clone().oifname(CmpOp::Eq, rt), p.proto, port)
                            .drop()
                            .comment(&format!("{mark}/forward")),
                    );
                }
            }
        }
        Ok([pre, input, forward])
    }

    /// The prerouting chain's rules (see [`GuardSpec::chain_bodies`]).
    #[cfg(test)]
    fn bodies(&self) -> Result<Vec<RuleBody>> {
        Ok(self.chain_bodies()?[0].clone())
    }
}

/// What [`ensure`] found of the guard's table and did with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardTable {
    /// There was none (never loaded, or removed by a flush of the ruleset); a plain one was
    /// created.
    Created,
    /// A plain table was there already (left by an earlier apply, or restored from a saved
    /// ruleset).
    Present,
    /// A table of an earlier version was there, orphaned (persist, no owner), owned by this
    /// socket, or dormant; it was deleted and a plain one created in the same transaction.
    Replaced(OldTable),
    /// Another live process holds it with the owner flag (an earlier version's resident host):
    /// it cannot be changed from here, it says what the settings say, and it is left to its
    /// holder, whose netlink port this is.
    HeldBy(u32),
}

/// The kind of old table [`GuardTable::Replaced`] replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OldTable {
    Orphaned,
    OwnedHere,
    Dormant,
}

impl OldTable {
    pub fn describe(self) -> &'static str {
        match self {
            OldTable::Orphaned => "an orphaned persist table of an earlier version",
            OldTable::OwnedHere => "a table this process owned",
            OldTable::Dormant => "a dormant table",
        }
    }
}

/// How the guard stands after [`ensure`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardReport {
    pub table: GuardTable,
    /// Whether its table, chain or rules had to be written.
    pub changed: bool,
}

/// The guard as the kernel holds it: the table, and in it the guard's chains and rules.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GuardStatus {
    /// The guard's refusals stand: its three chains at their hooks, and guard rules at
    /// prerouting and input. Never from the table's name alone: after `converge` the table
    /// holds the derived filter and no guard.
    pub present: bool,
    /// The table `inet mesh_host` is there (whatever it holds).
    pub table: bool,
    /// A table with no flags: what this version loads.
    pub plain: bool,
    pub owned: bool,
    pub orphan: bool,
    pub dormant: bool,
    pub owner: Option<u32>,
    /// The guard's chains there at their hooks and priority, by name.
    pub chains: Vec<String>,
    /// The marks of its rules, in order (prerouting, input, forward).
    pub rules: Vec<String>,
    /// The table's other chains (the derived filter's `input` and `forward`, the claim), by
    /// name, each with its number of rules.
    pub others: Vec<(String, usize)>,
}

/// Whether `chain` is a base chain at `hook` at the guard's priority with policy accept.
fn hooked(chain: &crate::netlink::Chain, hook: Hook) -> bool {
    chain
        .hook
        .as_ref()
        .is_some_and(|h| h.hook == hook && h.priority == GUARD_PRIORITY)
        && chain.policy == Some(crate::netlink::Policy::Accept)
}

/// Puts the guard in place as `spec` says, in a plain table; idempotent.
pub fn ensure(sock: &mut NfSocket, spec: &GuardSpec) -> Result<GuardReport> {
    let bodies = spec.chain_bodies()?;
    let existing: Option<Table> = sock
        .tables(Some(Family::Inet))?
        .into_iter()
        .find(|t| t.name == MESH_TABLE);
    let table = match &existing {
        None => GuardTable::Created,
        // Another live process holds the guard: it cannot be changed from here, but it can be
        // read. If it already refuses what it should, it is in force.
        Some(t) if t.is_owned() && t.owner != Some(sock.portid()) => {
            let owner = t.owner.unwrap_or(0);
            return if in_force(sock, &bodies)? {
                Ok(GuardReport {
                    table: GuardTable::HeldBy(owner),
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
        Some(t) if t.is_owned() => GuardTable::Replaced(OldTable::OwnedHere),
        Some(t) if t.is_orphan() => GuardTable::Replaced(OldTable::Orphaned),
        Some(t) if t.flags != TableFlags::NONE => GuardTable::Replaced(OldTable::Dormant),
        Some(_) => GuardTable::Present,
    };
    if table == GuardTable::Present && in_force(sock, &bodies)? {
        return Ok(GuardReport {
            table,
            changed: false,
        });
    }
    // One transaction: the old table (if any) deleted, the plain one with its chains emptied,
    // then the refusals; there is no moment without them.
    let mut batch = Batch::new();
    match table {
        GuardTable::Replaced(_) => batch.del_table(Family::Inet, MESH_TABLE)?,
        GuardTable::Present => {
            // A chain at the wrong hook or priority cannot be changed in place: it is deleted
            // and made again in the same transaction.
            let chains = sock.chains(Some(Family::Inet))?;
            for (name, hook) in GUARD_CHAINS {
                let chain = chains
                    .iter()
                    .find(|c| c.table == MESH_TABLE && c.name == name);
                if chain.is_some_and(|c| !hooked(c, hook)) {
                    batch.flush(Family::Inet, MESH_TABLE, Some(name))?;
                    batch.del_chain(Family::Inet, MESH_TABLE, name)?;
                }
            }
        }
        GuardTable::Created | GuardTable::HeldBy(_) => {}
    }
    batch.add_table(Family::Inet, MESH_TABLE, TableFlags::NONE)?;
    for ((name, hook), rules) in GUARD_CHAINS.into_iter().zip(&bodies) {
        let base = BaseChain::filter(hook, GUARD_PRIORITY);
        batch.add_chain(Family::Inet, MESH_TABLE, name, Some(&base))?;
        batch.flush(Family::Inet, MESH_TABLE, Some(name))?;
        for b in rules {
            batch.add_rule(Family::Inet, MESH_TABLE, name, b, Position::Append)?;
        }
    }
    sock.send(&batch)?;
    Ok(GuardReport {
        table,
        changed: true,
    })
}

/// Removes the mesh's table (`inet mesh_host`) whole, in one transaction: the guard's chain,
/// the node's claim and anything else of the mesh's that is in it. Whether there was one. A table
/// another live process holds cannot be removed from here, and that is said.
pub fn remove(sock: &mut NfSocket) -> Result<bool> {
    let Some(table) = sock
        .tables(Some(Family::Inet))?
        .into_iter()
        .find(|t| t.name == MESH_TABLE)
    else {
        return Ok(false);
    };
    if table.is_owned() && table.owner != Some(sock.portid()) {
        return Err(Error::Unsupported {
            reason: format!(
                "the guard table inet {MESH_TABLE} is held by netlink port {}; its holder must \
                 remove it",
                table.owner.unwrap_or(0)
            ),
        });
    }
    let mut batch = Batch::new();
    batch.del_table(Family::Inet, MESH_TABLE)?;
    sock.send(&batch)?;
    Ok(true)
}

/// Whether the guard's chains are there, each at its hook and priority, with exactly these
/// rules.
fn in_force(sock: &mut NfSocket, bodies: &[Vec<RuleBody>; 3]) -> Result<bool> {
    let chains = sock.chains(Some(Family::Inet))?;
    for ((name, hook), want) in GUARD_CHAINS.into_iter().zip(bodies) {
        let chain = chains
            .iter()
            .find(|c| c.table == MESH_TABLE && c.name == name);
        if !chain.is_some_and(|c| hooked(c, hook)) {
            return Ok(false);
        }
        let rules = sock.rules_of(Family::Inet, MESH_TABLE, Some(name))?;
        let same = rules.len() == want.len()
            && rules
                .iter()
                .zip(want)
                .all(|(r, b)| r.comment == b.comment && r.exprs == b.exprs);
        if !same {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Reads the guard's state from the kernel without changing anything.
pub fn status(sock: &mut NfSocket) -> Result<GuardStatus> {
    let Some(table) = sock
        .tables(Some(Family::Inet))?
        .into_iter()
        .find(|t| t.name == MESH_TABLE)
    else {
        return Ok(GuardStatus::default());
    };
    let all = sock.chains(Some(Family::Inet))?;
    let mine: Vec<&crate::netlink::Chain> = all.iter().filter(|c| c.table == MESH_TABLE).collect();
    let mut st = GuardStatus {
        table: true,
        plain: table.flags == TableFlags::NONE,
        owned: table.is_owned(),
        orphan: table.is_orphan(),
        dormant: table.flags.contains(TableFlags::DORMANT),
        owner: table.owner,
        ..GuardStatus::default()
    };
    let mut counts = [0usize; 3];
    for (i, (name, hook)) in GUARD_CHAINS.into_iter().enumerate() {
        if !mine.iter().any(|c| c.name == name && hooked(c, hook)) {
            continue;
        }
        st.chains.push(name.to_string());
        let marks: Vec<String> = sock
            .rules_of(Family::Inet, MESH_TABLE, Some(name))?
            .into_iter()
            .filter_map(|r| r.comment)
            .filter(|c| c.starts_with("mesh-host:guard/"))
            .collect();
        counts[i] = marks.len();
        st.rules.extend(marks);
    }
    for c in mine {
        if !GUARD_CHAINS.iter().any(|(name, _)| *name == c.name) {
            let n = sock
                .rules_of(Family::Inet, MESH_TABLE, Some(&c.name))?
                .len();
            st.others.push((c.name.clone(), n));
        }
    }
    st.present =
        st.chains.len() == GUARD_CHAINS.len() && counts[0] > 0 && counts[1] > 0 && !st.dormant;
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Vec<Network> {
        list.iter()
            .map(|c| {
                let (a, l) = c.split_once('/').unwrap();
                Network {
                    addr: a.parse().unwrap(),
                    len: l.parse().unwrap(),
                }
            })
            .collect()
    }

    #[test]
    fn each_port_is_refused_on_the_nodes_own_addresses_then_at_its_container_port_per_bridge() {
        let mut spec = GuardSpec::for_node(15432, 15672, Some("wg0"))
            .private_ranges(&nets(&["10.0.0.0/24", "fd00::/64"]))
            .container_ports(5432, 15672);
        spec.add_runtime_bridge("docker0");
        spec.add_runtime_bridge("lanbr");
        spec.add_runtime_bridge("docker0");
        let marks: Vec<String> = spec
            .bodies()
            .unwrap()
            .into_iter()
            .map(|b| b.comment.unwrap())
            .collect();
        let mut want = Vec::new();
        for (base, port) in [("store", 15432), ("broker-management", 15672)] {
            let cport = if port == 15432 { 5432 } else { 15672 };
            for at in [
                format!("{base}/tcp/{port}"),
                format!("{base}/container/tcp/{cport}/docker0"),
                format!("{base}/container/tcp/{cport}/lanbr"),
            ] {
                want.push(format!("mesh-host:guard/{at}"));
                want.push(format!("mesh-host:guard/{at}/wg0/ipv4-beyond-10.0.0.0/24"));
                want.push(format!("mesh-host:guard/{at}/wg0/ipv6-beyond-fd00::/64"));
            }
        }
        assert_eq!(marks, want);
        assert_eq!(spec.allowed, ["lo", "docker0", "lanbr"]);
        let outside = || {
            RuleBody::new()
                .iifname_ne("lo")
                .iifname_ne("docker0")
                .iifname_ne("lanbr")
                .iifname_ne("wg0")
        };
        let bodies = spec.bodies().unwrap();
        // The host port: every exempt interface, then "the destination is this node", then the
        // port.
        let want = outside().fib_daddr_type_local().tcp_dport(15432).drop();
        assert_eq!(bodies[0].exprs, want.exprs);
        // On the private interface from beyond its range, per family.
        let want = RuleBody::new()
            .iifname_eq("wg0")
            .saddr_outside("10.0.0.0".parse().unwrap(), 24)
            .fib_daddr_type_local()
            .tcp_dport(15432)
            .drop();
        assert_eq!(bodies[1].exprs, want.exprs);
        let want = RuleBody::new()
            .iifname_eq("wg0")
            .saddr_outside("fd00::".parse().unwrap(), 64)
            .fib_daddr_type_local()
            .tcp_dport(15432)
            .drop();
        assert_eq!(bodies[2].exprs, want.exprs);
        // The container refusal: every exempt interface, then the route's interface, then the
        // port.
        let want = outside()
            .fib_daddr_oifname(CmpOp::Eq, "docker0")
            .tcp_dport(5432)
            .drop();
        assert_eq!(bodies[3].exprs, want.exprs);
    }

    #[test]
    fn a_family_with_no_range_is_refused_on_the_private_interface_whatever_its_source() {
        let spec = GuardSpec::for_node(5432, 15672, Some("mesh0"))
            .private_ranges(&nets(&["10.77.0.0/24"]));
        assert_eq!(spec.allowed, ["lo"]);
        assert!(spec.runtimes.is_empty());
        let bodies = spec.bodies().unwrap();
        let marks: Vec<String> = bodies.iter().map(|b| b.comment.clone().unwrap()).collect();
        assert_eq!(
            marks,
            [
                "mesh-host:guard/store/tcp/5432",
                "mesh-host:guard/store/tcp/5432/mesh0/ipv4-beyond-10.77.0.0/24",
                "mesh-host:guard/store/tcp/5432/mesh0/ipv6-any",
                "mesh-host:guard/broker-management/tcp/15672",
                "mesh-host:guard/broker-management/tcp/15672/mesh0/ipv4-beyond-10.77.0.0/24",
                "mesh-host:guard/broker-management/tcp/15672/mesh0/ipv6-any",
            ]
        );
        let want = RuleBody::new()
            .iifname_eq("mesh0")
            .nfproto(Family::Ipv6)
            .fib_daddr_type_local()
            .tcp_dport(5432)
            .drop();
        assert_eq!(bodies[2].exprs, want.exprs);
        // No private network: only loopback passes.
        let none = GuardSpec::for_node(5432, 15672, None);
        assert_eq!(none.allowed, ["lo"]);
        assert_eq!(none.bodies().unwrap().len(), 2);
    }

    #[test]
    fn input_and_forward_refuse_the_port_a_packet_reaches_after_translation() {
        let mut spec = GuardSpec::for_node(15432, 15672, Some("wg0"))
            .private_ranges(&nets(&["10.0.0.0/24"]))
            .container_ports(5432, 15672);
        spec.add_runtime_bridge("docker0");
        let [pre, input, forward] = spec.chain_bodies().unwrap();
        assert_eq!(pre.len(), 12);
        let marks = |b: &[RuleBody]| -> Vec<String> {
            b.iter().map(|r| r.comment.clone().unwrap()).collect()
        };
        assert_eq!(
            marks(&input),
            [
                "mesh-host:guard/store/tcp/15432/input",
                "mesh-host:guard/store/tcp/15432/wg0/ipv4-beyond-10.0.0.0/24/input",
                "mesh-host:guard/store/tcp/15432/wg0/ipv6-any/input",
                "mesh-host:guard/broker-management/tcp/15672/input",
                "mesh-host:guard/broker-management/tcp/15672/wg0/ipv4-beyond-10.0.0.0/24/input",
                "mesh-host:guard/broker-management/tcp/15672/wg0/ipv6-any/input",
            ]
        );
        // At input the destination is the node's by the hook: no fib, only the port.
        let want = RuleBody::new()
            .iifname_ne("lo")
            .iifname_ne("docker0")
            .iifname_ne("wg0")
            .tcp_dport(15432)
            .drop();
        assert_eq!(input[0].exprs, want.exprs);
        assert_eq!(forward.len(), 6);
        assert_eq!(
            forward[0].comment.as_deref(),
            Some("mesh-host:guard/store/container/tcp/5432/docker0/forward")
        );
        // At forward, the interface it leaves by and the port it reaches.
        let want = RuleBody::new()
            .iifname_eq("wg0")
            .saddr_outside("10.0.0.0".parse().unwrap(), 24)
            .oifname(CmpOp::Eq, "docker0")
            .tcp_dport(5432)
            .drop();
        assert_eq!(forward[1].exprs, want.exprs);
        // No runtime: nothing at forward.
        let plain = GuardSpec::for_node(5432, 15672, None);
        assert!(plain.chain_bodies().unwrap()[2].is_empty());
    }

    #[test]
    fn a_name_pattern_is_never_let_through() {
        let mut spec = GuardSpec::for_node(5432, 15672, Some("mesh0"));
        spec.add_runtime_bridge("br-*");
        let err = spec.bodies().unwrap_err().to_string();
        assert!(err.contains("br-*") && err.contains("pattern"), "{err}");
        let spec = GuardSpec::for_node(5432, 15672, Some("mesh*"));
        let err = spec.bodies().unwrap_err().to_string();
        assert!(err.contains("mesh*") && err.contains("pattern"), "{err}");
    }
}
