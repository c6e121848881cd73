//! An opening as the evaluator asks about it: the new connections it admits (per family, per
//! interface they arrive on, to the container the runtime's DNAT sends a published port to),
//! their verdict end to end, and where its rule goes in one layer.

use super::addrs::{num, Addrs, Fam};
use super::{Conn, Decider, Fate, Model, Outcome, Path as EvalPath, Placement};
use crate::netlink::Family;
use crate::opening::{From, Opening, Path};
use crate::published::Target;
use std::net::IpAddr;

/// One interface of this machine: its name, index and addresses, and whether other machines'
/// connections arrive on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    pub name: String,
    pub index: u32,
    /// Addresses with their prefix lengths.
    pub addrs: Vec<(IpAddr, u8)>,
    /// Whether connections from other machines arrive here, as the kernel and the runtimes say
    /// (never judged by the name): not loopback (`IFF_LOOPBACK`), not one of the bridges a
    /// container runtime reports as its own ([`mark_runtime_bridges`]), and with an address
    /// beyond link-local (a bridge's port, a runtime's veth, an interface with no address of
    /// its own receives no connection to this machine: the bridge it belongs to does). A bridge
    /// no runtime reports (a router's `br-lan`) is a way in like any other.
    pub way_in: bool,
}

impl Iface {
    /// Whether connections from other machines arrive here ([`Iface::way_in`]). Tunnels and the
    /// private network's interface are such a way in.
    pub fn outside(&self) -> bool {
        self.way_in
    }
}

/// `ifaces` with the runtime's own bridges `bridges` (as the runtime reports them) no longer
/// ways in: what arrives there comes from this machine's own containers.
pub fn mark_runtime_bridges(ifaces: &mut [Iface], bridges: &[String]) {
    for i in ifaces.iter_mut() {
        if bridges.contains(&i.name) {
            i.way_in = false;
        }
    }
}

/// The interfaces of the calling thread's network namespace, with their addresses.
pub fn interfaces() -> Vec<Iface> {
    let mut out: Vec<Iface> = Vec::new();
    let Ok(list) = nix::ifaddrs::getifaddrs() else {
        return out;
    };
    for ifa in list {
        let name = ifa.interface_name;
        let loopback = ifa
            .flags
            .contains(nix::net::if_::InterfaceFlags::IFF_LOOPBACK);
        let i = match out.iter().position(|i| i.name == name) {
            Some(i) => i,
            None => {
                // 0 (no such interface) where the name is gone by now, as if_nametoindex says.
                let index = nix::net::if_::if_nametoindex(name.as_str()).unwrap_or(0);
                out.push(Iface {
                    name,
                    index,
                    addrs: Vec::new(),
                    // Narrowed below: loopback, and once its addresses are known.
                    way_in: true,
                });
                out.len() - 1
            }
        };
        if loopback {
            out[i].way_in = false;
        }
        if let Some(a) = sockaddr_ip(ifa.address.as_ref()) {
            let len = sockaddr_ip(ifa.netmask.as_ref()).map(num_ones).unwrap_or(0);
            out[i].addrs.push((a, len));
        }
    }
    for i in out.iter_mut() {
        i.way_in = i.way_in && i.addrs.iter().any(|(a, _)| !is_link_local(*a));
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn num_ones(m: IpAddr) -> u8 {
    match m {
        IpAddr::V4(v) => u32::from(v).count_ones() as u8,
        IpAddr::V6(v) => u128::from(v).count_ones() as u8,
    }
}

/// The IP address an interface's address or netmask holds, when it is of either IP family.
fn sockaddr_ip(sa: Option<&nix::sys::socket::SockaddrStorage>) -> Option<IpAddr> {
    let sa = sa?;
    if let Some(v4) = sa.as_sockaddr_in() {
        return Some(IpAddr::V4(v4.ip()));
    }
    sa.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
}

/// The sources an opening admits in one family (none when it names no network of it).
pub fn sources(o: &Opening, fam: Fam) -> Addrs {
    match &o.from {
        From::Anywhere | From::Interface(_) => Addrs::all(fam),
        From::Networks(nets) => nets
            .iter()
            .filter(|n| Fam::of(n.addr) == fam)
            .fold(Addrs::none(fam), |a, n| {
                a.union(&Addrs::cidr(fam, num(n.addr), u32::from(n.len)))
            }),
    }
}

/// The families an opening has sources in.
pub fn families(o: &Opening) -> Vec<Fam> {
    [Fam::V4, Fam::V6]
        .into_iter()
        .filter(|f| !sources(o, *f).is_empty())
        .collect()
}

/// The interfaces an opening's connections arrive on: its own, or every outside one.
fn arrivals<'i>(o: &Opening, ifaces: &'i [Iface]) -> Vec<&'i Iface> {
    match &o.from {
        From::Interface(name) => ifaces.iter().filter(|i| &i.name == name).collect(),
        _ => ifaces.iter().filter(|i| i.outside()).collect(),
    }
}

/// One way an opening's connections come: the connection and the sources it is asked for.
#[derive(Debug, Clone)]
pub struct Way {
    pub conn: Conn,
    pub sources: Addrs,
}

/// Every way an opening's new connections come, for a family: one per interface they arrive
/// on and, forwarded, per place the runtime's DNAT sends the port. Forwarded with no DNAT for
/// the port, there is no way yet (the caller says so).
pub fn ways(o: &Opening, fam: Fam, ifaces: &[Iface], targets: &[Target]) -> Vec<Way> {
    ways_as(o, fam, ifaces, targets, false)
}

/// The ways placement and the check of every write ask about: [`ways`], and for a forwarded
/// opening that nothing publishes in this family yet, its connections translated by a DNAT
/// whose destination is not known (the port, address and interface they are sent to): the
/// opening's rule admits any translated connection to its port, so it goes ahead of what would
/// refuse every one of them, and a test of what is not known is undecided, said beside the
/// placement. The verdict never asks about these: there is no connection yet ([`Verdict::none`]).
pub fn placed_ways(o: &Opening, fam: Fam, ifaces: &[Iface], targets: &[Target]) -> Vec<Way> {
    ways_as(o, fam, ifaces, targets, true)
}

fn ways_as(
    o: &Opening,
    fam: Fam,
    ifaces: &[Iface],
    targets: &[Target],
    unpublished: bool,
) -> Vec<Way> {
    let src = sources(o, fam);
    if src.is_empty() {
        return Vec::new();
    }
    let unpublished =
        unpublished && o.path == Path::Forwarded && !targets.iter().any(|t| Fam::of(t.addr) == fam);
    let mut out = Vec::new();
    let arrive = arrivals(o, ifaces);
    let fallback = Iface {
        name: match &o.from {
            From::Interface(i) => i.clone(),
            _ => "eth0".into(),
        },
        index: 0,
        addrs: Vec::new(),
        way_in: true,
    };
    let arrive: Vec<&Iface> = if arrive.is_empty() {
        vec![&fallback]
    } else {
        arrive
    };
    for iif in arrive {
        let daddr = iif
            .addrs
            .iter()
            .map(|(a, _)| *a)
            .find(|a| Fam::of(*a) == fam && !is_link_local(*a));
        let base = Conn {
            fam,
            proto: o.proto.number(),
            port: o.port,
            path: EvalPath::Incoming,
            to_port: None,
            iif: iif.name.clone(),
            iif_index: (iif.index != 0).then_some(iif.index),
            oif: None,
            oif_index: None,
            daddr,
            routed: false,
        };
        match o.path {
            Path::Incoming => out.push(Way {
                conn: base,
                sources: src.clone(),
            }),
            Path::Forwarded if unpublished => {
                let mut c = base;
                c.path = EvalPath::Forwarded;
                c.daddr = None;
                out.push(Way {
                    conn: c,
                    sources: src.clone(),
                });
            }
            Path::Forwarded => {
                for t in targets.iter().filter(|t| Fam::of(t.addr) == fam) {
                    let bridge = ifaces.iter().find(|i| {
                        i.addrs.iter().any(|(a, len)| {
                            Fam::of(*a) == fam
                                && Addrs::cidr(fam, num(*a), u32::from(*len)).contains(t.addr)
                        })
                    });
                    let mut c = base.clone();
                    c.path = EvalPath::Forwarded;
                    c.to_port = Some(t.port);
                    c.daddr = Some(t.addr);
                    c.oif = bridge.map(|b| b.name.clone());
                    c.oif_index = bridge.map(|b| b.index);
                    out.push(Way {
                        conn: c,
                        sources: src.clone(),
                    });
                }
            }
        }
    }
    out
}

fn is_link_local(a: IpAddr) -> bool {
    match a {
        IpAddr::V6(v) => v.segments()[0] & 0xffc0 == 0xfe80,
        IpAddr::V4(v) => v.is_link_local(),
    }
}

/// One part of an opening's verdict: a family, the interface its connections arrive on, the
/// sources, and how they end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub fam: Fam,
    pub iif: String,
    pub sources: Addrs,
    pub fate: Fate,
}

/// An opening's verdict end to end, as read from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub parts: Vec<Part>,
    /// Why there is no connection to ask about (forwarded, with nothing publishing the port).
    pub none: Option<String>,
}

impl Model {
    /// An opening's verdict end to end: every way its new connections come.
    pub fn verdict(&self, o: &Opening, ifaces: &[Iface], targets: &[Target]) -> Verdict {
        let mut parts = Vec::new();
        let mut any = false;
        for fam in families(o) {
            for w in ways(o, fam, ifaces, targets) {
                any = true;
                for out in self.evaluate(&w.conn, &w.sources).parts {
                    parts.push(Part {
                        fam,
                        iif: w.conn.iif.clone(),
                        sources: out.sources,
                        fate: out.fate,
                    });
                }
            }
        }
        let none = (!any && o.path == Path::Forwarded).then(|| {
            format!(
                "no DNAT rule translates {} port {}: no container runtime publishes it yet",
                o.proto, o.port
            )
        });
        Verdict { parts, none }
    }

    /// Where an opening's rule goes in one layer (a base chain of `family`'s table `table`,
    /// as the model names it), over every way its connections come: a refusal of the port
    /// anywhere is the operator's word; otherwise the first place a way needs a rule.
    pub fn place_opening(
        &self,
        table: &str,
        chain: &str,
        family: Family,
        o: &Opening,
        ifaces: &[Iface],
        targets: &[Target],
    ) -> Option<Placement> {
        let fams: Vec<Fam> = families_in(o, family).collect();
        if fams.is_empty() {
            return Some(Placement::NotNeeded(format!(
                "its sources have no address of family {family}"
            )));
        }
        let mut at = None;
        let mut doubt: Option<(Decider, String)> = None;
        let mut not_needed = None;
        for fam in fams {
            for w in placed_ways(o, fam, ifaces, targets) {
                match self.place(table, chain, &w.conn, &w.sources)? {
                    p @ Placement::Refused(_) => return Some(p),
                    p @ Placement::At { .. } => {
                        at.get_or_insert(p);
                    }
                    Placement::Doubtful { by, what, then } => {
                        doubt.get_or_insert((by, what));
                        match *then {
                            p @ Placement::At { .. } => {
                                at.get_or_insert(p);
                            }
                            p => {
                                not_needed.get_or_insert(p);
                            }
                        }
                    }
                    p @ Placement::NotNeeded(_) => {
                        not_needed.get_or_insert(p);
                    }
                }
            }
        }
        let then = at.or(not_needed)?;
        Some(match doubt {
            Some((by, what)) => Placement::Doubtful {
                by,
                what,
                then: Box::new(then),
            },
            None => then,
        })
    }

    /// Whether an opening's rules, as they stand in the base chain `chain` of `table`, are
    /// where its placement wants them: every part of its connections that the chain refuses by
    /// default without the mesh's rules is admitted with them, and every other part (a ban, a
    /// refusal of the port, the limits met on the way) is as it was; a doubtful part stays
    /// doubtful or is admitted. A rule ahead of a ban or a limit, or behind the catch-all, fails
    /// this. `None` when the model does not hold the chain.
    pub fn stands(
        &self,
        table: &str,
        chain: &str,
        family: Family,
        o: &Opening,
        ifaces: &[Iface],
        targets: &[Target],
    ) -> Option<bool> {
        let without = self.unmarked_walks(table, chain, family, o, ifaces, targets)?;
        self.stands_against(table, chain, family, o, ifaces, targets, &without)
    }

    /// What [`Model::stands`] compares with: each way of `o`'s connections through the base
    /// chain `chain` of `table` walked without the mesh's rules, in the order of its families
    /// and ways. `None` when the model does not hold the chain.
    pub fn unmarked_walks(
        &self,
        table: &str,
        chain: &str,
        family: Family,
        o: &Opening,
        ifaces: &[Iface],
        targets: &[Target],
    ) -> Option<Vec<Vec<Outcome>>> {
        let mut out = Vec::new();
        for fam in families_in(o, family) {
            for w in placed_ways(o, fam, ifaces, targets) {
                out.push(self.evaluate_base(table, chain, &w.conn, &w.sources, true)?);
            }
        }
        Some(out)
    }

    /// [`Model::stands`], against `without`: what [`Model::unmarked_walks`] gives for `o` (or
    /// for an opening whose walks without the mesh's rules are `o`'s).
    #[allow(clippy::too_many_arguments)]
    pub fn stands_against(
        &self,
        table: &str,
        chain: &str,
        family: Family,
        o: &Opening,
        ifaces: &[Iface],
        targets: &[Target],
        without: &[Vec<Outcome>],
    ) -> Option<bool> {
        let mut k = 0;
        for fam in families_in(o, family) {
            for w in placed_ways(o, fam, ifaces, targets) {
                let without = without.get(k)?;
                k += 1;
                let with = self.evaluate_base(table, chain, &w.conn, &w.sources, false)?;
                for b in without {
                    for a in with
                        .iter()
                        .filter(|a| !a.sources.intersect(&b.sources).is_empty())
                    {
                        // A doubt may be resolved by the rule admitting its refused way (the
                        // rule goes where that way is refused); everything else stays.
                        let wanted = match &b.fate {
                            Fate::NotAdmitted { .. } => a.fate == Fate::Admitted,
                            f @ Fate::Doubtful { .. } => {
                                a.fate == Fate::Admitted || super::check::same(f, &a.fate)
                            }
                            f => super::check::same(f, &a.fate),
                        };
                        if !wanted || a.limits != b.limits {
                            return Some(false);
                        }
                    }
                }
            }
        }
        Some(true)
    }
}

/// `o`'s families that layers of `family` carry.
fn families_in(o: &Opening, family: Family) -> impl Iterator<Item = Fam> {
    families(o).into_iter().filter(move |f| match family {
        Family::Ipv4 => *f == Fam::V4,
        Family::Ipv6 => *f == Fam::V6,
        _ => true,
    })
}
