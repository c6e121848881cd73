//! The opening applier: a declared opening converged through the found firewall, in its own
//! terms, on every layer of its path that could drop it; and the guard on an adopted node.

use super::{Cx, Done, NotAdmitted, Outcome};
use crate::briefing::Mark;
use crate::declaration::{self, FromName, OpeningSpec, PathKind, Resource, Settings, Shape};
use crate::store::Owned;
use firewall::{Firewall, Network, Opening, Scope, State, SystemExec};
use std::net::IpAddr;

pub(crate) use super::guard::{
    ensure_guard, remove_bpf_layer, runtime_bridges, write_guard, Guarded,
};
pub use super::guard::{guard_spec, LAYERS_BOTH, LAYERS_TABLE_ALONE};

static EXEC: SystemExec = SystemExec;

/// Opens the firewall once per apply: detection reads every layer, so it is not repeated per
/// opening. Every write is made for `node`, whose name the mesh's table records, so a second
/// store on this machine (a mistaken `--root`) never converges over this node's marks.
pub(crate) fn firewall<'c>(
    fw: &'c mut Option<Firewall<'static>>,
    node: &str,
) -> Result<&'c mut Firewall<'static>, String> {
    if fw.is_none() {
        let mut opened =
            Firewall::open(&EXEC).map_err(|e| format!("reading the found firewall: {e}"))?;
        opened.for_node(node);
        *fw = Some(opened);
    }
    Ok(fw.as_mut().expect("just opened"))
}

/// The firewall crate's opening for a declared one; `private` becomes the private network's
/// interface from the node's settings.
pub fn to_opening(spec: &OpeningSpec, settings: Option<&Settings>) -> Result<Opening, String> {
    let from = match &spec.from {
        declaration::From::Named(FromName::Anywhere) => firewall::opening::From::Anywhere,
        declaration::From::Named(FromName::Private) => {
            let iface = settings
                .and_then(|s| s.private_network.as_ref())
                .map(|p| p.interface.clone())
                .ok_or_else(|| format!("opening {} is from the private network, but the node has no private network in its settings", spec.id))?;
            firewall::opening::From::Interface(iface)
        }
        declaration::From::Cidrs(list) => {
            let mut nets = Vec::new();
            for c in list {
                let (addr, len) = declaration::validate::parse_cidr(c, true)
                    .map_err(|e| format!("opening {}: {e}", spec.id))?;
                nets.push(Network { addr, len });
            }
            firewall::opening::From::Networks(nets)
        }
    };
    Ok(Opening {
        id: spec.id.clone(),
        port: spec.port,
        proto: spec.proto,
        from,
        path: match spec.path {
            PathKind::Incoming => firewall::Path::Incoming,
            PathKind::Forwarded => firewall::Path::Forwarded,
        },
    })
}

/// Converges one declared opening. The first opening of an apply converges every declared
/// opening at once (one listing, one nf_tables batch, one restore per iptables table); each
/// opening is then recorded and reported on its own line from that one convergence.
pub(super) fn apply(cx: &mut Cx<'_>, spec: &OpeningSpec) -> Result<Done, String> {
    let opening = to_opening(spec, cx.store.state.settings.as_ref())?;
    // On a flipped node the derived filter admits it: loaded from the whole declaration before
    // the resources, nothing goes into the retired firewall.
    if cx.store.state.flip.is_some() {
        let rec = record_of(spec, &opening);
        if cx.store.state.owned(&spec.id) == Some(&rec) {
            return Ok(Done::new(
                Outcome::Unchanged,
                "admitted by the derived filter (inet mesh_host)",
            ));
        }
        cx.record_owned(rec).map_err(|e| e.to_string())?;
        return Ok(Done::new(
            Outcome::Created,
            "admitted by the derived filter (inet mesh_host)",
        ));
    }
    // The ruleset is at the generation the last apply of this declaration verified: nothing of
    // it changed, so nothing is listed.
    if let Some(generation) = cx.firewall_unchanged {
        if cx.store.state.owned(&spec.id) == Some(&record_of(spec, &opening)) {
            return Ok(Done::new(
                Outcome::Unchanged,
                format!(
                    "in force as the last apply left it (ruleset generation {generation} unchanged)"
                ),
            ));
        }
    }
    if cx.openings.is_none() {
        // An opening that cannot be translated fails on its own line, not the others'.
        let declared: Vec<Opening> = cx
            .decl
            .resources
            .iter()
            .filter_map(|r| match r {
                Resource::Opening(o) => to_opening(o, cx.store.state.settings.as_ref()).ok(),
                _ => None,
            })
            .collect();
        let fw = firewall(&mut cx.fw, &cx.decl.node)?;
        let result = fw.converge(&declared, Scope::Given).map(|c| {
            // What is reported is the verdict of the ruleset read back after the write.
            let verdicts = fw.verdicts(&declared);
            (c, verdicts)
        });
        let kind = fw
            .found()
            .map(|f| f.kind())
            .unwrap_or_else(|e| format!("unreadable: {e}"));
        cx.openings = Some(
            result
                .map(|(c, verdicts)| {
                    let mut done = OpeningsDone::from(c);
                    match verdicts {
                        Ok(v) => done.verdicts = v.into_iter().collect(),
                        Err(e) => done.unverdicted = Some(e.to_string()),
                    }
                    done
                })
                .map_err(|e| format!("openings through the found firewall ({kind}): {e}")),
        );
        // One transaction put them all in force: their records go in one durable append.
        if matches!(cx.openings, Some(Ok(_))) {
            let recs: Vec<Owned> = cx
                .decl
                .resources
                .iter()
                .filter_map(|r| match r {
                    Resource::Opening(o) => {
                        let op = to_opening(o, cx.store.state.settings.as_ref()).ok()?;
                        let rec = record_of(o, &op);
                        (cx.store.state.owned(&o.id) != Some(&rec)).then_some(rec)
                    }
                    _ => None,
                })
                .collect();
            cx.record_owned_all(recs).map_err(|e| e.to_string())?;
        }
    }
    let (added, removed, states, verdict) = match cx.openings.as_ref().expect("converged above") {
        Ok(done) => (
            done.added.contains(&spec.id),
            done.removed.contains(&spec.id),
            done.states.get(&spec.id).cloned().unwrap_or_default(),
            done.verdicts.get(&spec.id).cloned(),
        ),
        Err(e) => return Err(format!("opening {}: {e}", spec.id)),
    };
    let kind = cx
        .fw
        .as_mut()
        .and_then(|f| f.found().ok().map(|f| f.kind()))
        .unwrap_or_default();
    if added || removed {
        cx.changed(&spec.id);
    }
    let rec = record_of(spec, &opening);
    if cx.store.state.owned(&spec.id) != Some(&rec) {
        cx.record_owned(rec).map_err(|e| e.to_string())?;
    }
    let mut in_force = Vec::new();
    let mut not_needed = 0;
    for p in &states {
        match &p.state {
            State::Present => in_force.push(match &p.chain {
                Some(c) if !p.layer.contains(&format!(" {c} ")) => {
                    format!("{} (in chain {c})", p.layer)
                }
                _ => p.layer.clone(),
            }),
            State::NotNeeded(_) => not_needed += 1,
            // A layer's own account of why it does not admit it (the driver's words), beside
            // the verdict below.
            State::Missing | State::Refused(_) | State::Unwritable(_) | State::Doubtful(_) => {
                cx.not_admitted.push(NotAdmitted {
                    id: spec.id.clone(),
                    layer: p.layer.clone(),
                    why: p.state.describe(),
                })
            }
        }
    }
    let by_layer = cx.not_admitted.iter().any(|n| n.id == spec.id);
    if let Some(v) = &verdict {
        // What a new connection meets in the kernel is reported even where every layer
        // thinks itself in order.
        if v.state() != "present" && !by_layer {
            cx.not_admitted.push(NotAdmitted {
                id: spec.id.clone(),
                layer: v
                    .decider()
                    .and_then(|p| p.fate.by())
                    .map(|b| b.place())
                    .unwrap_or_else(|| "the found firewall".into()),
                why: v.describe(),
            });
        }
    }
    let refused: Vec<String> = states
        .iter()
        .filter(|p| !p.present())
        .map(|p| format!("{}: {}", p.layer, p.state.describe()))
        .collect();
    let mut where_ = match (in_force.is_empty(), &verdict) {
        (true, Some(_)) => format!("the found firewall as it is ({kind}), no rule written"),
        (true, None) => format!(
            "nothing on the {} path refuses it by default (found firewall: {kind}); no rule needed",
            opening.path.as_str()
        ),
        (false, _) => in_force.join(", "),
    };
    if !in_force.is_empty() && not_needed > 0 {
        where_.push_str(&format!(
            "; {not_needed} other layer(s) let it on as they are"
        ));
    }
    match &verdict {
        // The line ends in what a new connection meets, as the status and the briefing say.
        Some(v) => where_.push_str(&format!("; {}", v.describe())),
        None if !refused.is_empty() => {
            where_.push_str(&format!("; NOT admitted by {}", refused.join("; ")))
        }
        None => {}
    }
    Ok(match (added, removed) {
        (false, false) => Done::new(Outcome::Unchanged, format!("in force in {where_}")),
        (true, false) => Done::new(Outcome::Created, format!("opened in {where_}")),
        _ => Done::new(Outcome::Changed, format!("rewritten in {where_}")),
    })
}

/// What the one convergence of an apply did, by opening id, for each opening's own line.
#[derive(Debug, Default)]
pub(crate) struct OpeningsDone {
    /// Ids whose rules were added.
    pub added: std::collections::HashSet<String>,
    /// Ids some of whose marked rules were removed (old versions, misplaced).
    pub removed: std::collections::HashSet<String>,
    pub states: std::collections::HashMap<String, Vec<firewall::Presence>>,
    /// Marked rules of openings not declared, left for the sweep.
    pub stale: usize,
    /// Each opening's verdict, read back after the write.
    pub verdicts: std::collections::HashMap<String, firewall::eval::Verdict>,
    /// Why no verdict could be read, if it could not.
    pub unverdicted: Option<String>,
}

impl From<firewall::Converged> for OpeningsDone {
    fn from(c: firewall::Converged) -> Self {
        OpeningsDone {
            added: c.added.into_iter().map(|(id, _)| id).collect(),
            removed: c
                .removed
                .iter()
                .filter_map(|(mark, _)| firewall::rules::id_of(mark).map(str::to_string))
                .collect(),
            states: c.states.into_iter().collect(),
            stale: c.stale,
            verdicts: Default::default(),
            unverdicted: None,
        }
    }
}

/// The store's record of a declared opening: its mark says which version is in force.
fn record_of(spec: &OpeningSpec, opening: &Opening) -> Owned {
    Owned {
        id: spec.id.clone(),
        module: spec.module.clone(),
        shape: Shape::Opening,
        key: spec.id.clone(),
        digest: Some(firewall::rules::mark(opening)),
        found: false,
    }
}

/// Removes every marked rule of an opening that is no longer declared.
pub(super) fn remove(cx: &mut Cx<'_>, id: &str, declared: &[Opening]) -> Result<Done, String> {
    if cx.store.state.flip.is_some() {
        cx.changed(id);
        return Ok(Done::new(
            Outcome::Removed,
            "no longer declared; the derived filter no longer admits it",
        ));
    }
    let fw = firewall(&mut cx.fw, &cx.decl.node)?;
    let done = fw
        .converge(declared, Scope::All)
        .map_err(|e| format!("removing opening {id}: {e}"))?;
    let mine: Vec<&(String, String)> = done
        .removed
        .iter()
        .filter(|(mark, _)| firewall::rules::id_of(mark) == Some(id))
        .collect();
    cx.changed(id);
    Ok(Done::new(
        Outcome::Removed,
        if mine.is_empty() {
            "no longer declared; no marked rule of it was in force".to_string()
        } else {
            format!(
                "no longer declared; its marked rules removed from {}",
                mine.iter()
                    .map(|(_, l)| l.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
    ))
}

/// How the declared private interface stands among this node's `interfaces`: it must exist and
/// carry an address in the private range, or the guard lets the wrong interface through (and the
/// peers, arriving elsewhere, are refused). Where the range does live is named.
pub fn check_private(
    iface: &str,
    range: &str,
    interfaces: &[::genesis::inventory::Interface],
) -> (Mark, String) {
    let Ok((net, len)) = declaration::validate::parse_cidr(range, false) else {
        return (
            Mark::Unknown,
            format!("the private range {range:?} is not a network"),
        );
    };
    let within = |a: &IpAddr| match (a, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            len == 0 || u32::from(*a) >> (32 - len as u32) == u32::from(n) >> (32 - len as u32)
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            len == 0 || u128::from(*a) >> (128 - len as u32) == u128::from(n) >> (128 - len as u32)
        }
        _ => false,
    };
    let carrying = |i: &::genesis::inventory::Interface| {
        i.addresses
            .iter()
            .find(|a| within(&a.address))
            .map(|a| a.to_string())
    };
    let elsewhere: Vec<String> = interfaces
        .iter()
        .filter(|i| i.name != iface)
        .filter_map(|i| carrying(i).map(|a| format!("{} ({a})", i.name)))
        .collect();
    let lives = if elsewhere.is_empty() {
        format!("no interface of this node carries {range}")
    } else {
        format!(
            "{range} is on {}, which the guard does not let through: the store and the broker's \
             management are refused there too",
            elsewhere.join(", ")
        )
    };
    match interfaces.iter().find(|i| i.name == iface) {
        None => (
            Mark::Failed,
            format!("the private network's interface {iface} does not exist on this node; {lives}"),
        ),
        Some(i) => match carrying(i) {
            Some(a) => (
                Mark::Ok,
                format!(
                    "{iface} carries {a} in the private range {range}; the guard lets it through"
                ),
            ),
            None => (
                Mark::Failed,
                format!(
                    "the private network's interface {iface} carries no address in the private \
                     range {range}; {lives}"
                ),
            ),
        },
    }
}

/// The names a runtime reported that are bridges on this machine (`bridges`), in order.
pub(super) fn real_bridges(reported: Vec<String>, bridges: &[String]) -> Vec<String> {
    reported
        .into_iter()
        .filter(|r| bridges.contains(r))
        .collect()
}

/// An opening of the firewall crate as a declaration's resource, its module the part of its id
/// before the first `/`.
pub fn to_resource(o: &Opening) -> serde_json::Value {
    let from = match &o.from {
        firewall::opening::From::Anywhere => serde_json::json!("anywhere"),
        // The only interface an opening can name is the private network's.
        firewall::opening::From::Interface(_) => serde_json::json!("private"),
        firewall::opening::From::Networks(n) => {
            serde_json::json!(n.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        }
    };
    let mut v = serde_json::json!({
        "id": o.id,
        "type": "opening",
        "port": o.port,
        "proto": o.proto.as_str(),
        "from": from,
        "path": o.path.as_str(),
    });
    if let Some((module, _)) = o.id.split_once('/') {
        v["module"] = serde_json::json!(module);
    }
    v
}

/// The openings a node needs: the foundation's from its settings, then the listens its modules
/// declare (the declaration's own openings), through the one function that derives them.
pub fn derive_for(settings: &Settings, declared: &[OpeningSpec]) -> Result<Vec<Opening>, String> {
    let private = settings
        .private_network
        .as_ref()
        .map(|p| p.interface.clone())
        .ok_or("the node has no private network in its settings, so the store's opening has nowhere to come from")?;
    let mut listens = Vec::new();
    for spec in declared {
        let o = to_opening(spec, Some(settings))?;
        listens.push(firewall::Listen {
            id: o.id,
            port: o.port,
            proto: o.proto,
            from: o.from,
            path: o.path,
        });
    }
    let p = settings.ports;
    Ok(firewall::derive(&firewall::Inputs {
        ports: p,
        private_interface: &private,
        listens: &listens,
    }))
}

/// Whether legacy x_tables are in force in this namespace: they send no generation, so what they
/// hold is never known unchanged without reading it.
pub(crate) fn legacy_in_force() -> bool {
    ["/proc/net/ip_tables_names", "/proc/net/ip6_tables_names"]
        .iter()
        .any(|p| std::fs::read_to_string(p).is_ok_and(|t| !t.trim().is_empty()))
}

#[cfg(test)]
mod tests {
    use crate::declaration::{ContainerSpec, Proto, PublishedPort, Resource, Settings};

    fn settings() -> Settings {
        serde_json::from_value(serde_json::json!({
            "ports": {"store": 15432, "bus": 5672, "broker_management": 15672,
                      "registry": 5000, "hub": 51820},
            "private_network": {"interface": "wg0", "range": "10.0.0.0/24"}
        }))
        .unwrap()
    }

    fn container(host_port: u16, container_port: u16, proto: Proto) -> Resource {
        Resource::Container(ContainerSpec {
            id: "store/db".into(),
            module: Some("store".into()),
            name: "db".into(),
            image: "postgres".into(),
            command: vec![],
            env: Default::default(),
            ports: vec![PublishedPort {
                host_address: None,
                host_port,
                container_port,
                proto,
            }],
            restart: None,
            networks: vec![],
        })
    }

    #[test]
    fn the_guarded_container_port_is_the_one_the_declared_container_publishes() {
        let ports = |resources: &[Resource]| -> Vec<(u16, u16)> {
            super::guard_spec(&settings(), resources)
                .ports
                .iter()
                .map(|p| (p.host_port, p.container_port))
                .collect()
        };
        assert_eq!(
            ports(&[container(15432, 5432, Proto::Tcp)]),
            [(15432, 5432), (15672, 15672)]
        );
        // No container publishes it (a store on the host), or only over udp: the host port.
        assert_eq!(ports(&[]), [(15432, 15432), (15672, 15672)]);
        assert_eq!(
            ports(&[container(15432, 5432, Proto::Udp)]),
            [(15432, 15432), (15672, 15672)]
        );
        assert_eq!(
            ports(&[
                container(15672, 15672, Proto::Tcp),
                container(15432, 5433, Proto::Tcp)
            ]),
            [(15432, 5433), (15672, 15672)]
        );
    }

    fn iface(name: &str, addrs: &[&str]) -> genesis::inventory::Interface {
        genesis::inventory::Interface {
            index: 1,
            name: name.into(),
            kind: genesis::inventory::InterfaceKind::Veth,
            up: true,
            mtu: 1500,
            mac: None,
            master: None,
            addresses: addrs
                .iter()
                .map(|a| {
                    let (ip, len) = a.split_once('/').unwrap();
                    genesis::inventory::InterfaceAddress {
                        address: ip.parse().unwrap(),
                        prefix_len: len.parse().unwrap(),
                    }
                })
                .collect(),
        }
    }

    #[test]
    fn the_private_interface_must_exist_and_carry_the_range() {
        use crate::briefing::Mark;
        let ifs = [
            iface("lo", &["127.0.0.1/8", "::1/128"]),
            iface("eth0", &["192.0.2.10/24"]),
            iface("mesh0", &["10.77.0.1/24", "fd77::1/64"]),
        ];
        let (mark, said) = super::check_private("mesh0", "10.77.0.0/24", &ifs);
        assert_eq!(mark, Mark::Ok, "{said}");
        assert!(said.contains("10.77.0.1/24"), "{said}");
        let (mark, said) = super::check_private("mesh0", "fd77::/64", &ifs);
        assert_eq!(mark, Mark::Ok, "{said}");

        // Declared wg0, the range on mesh0: not ok, naming both and where the range is.
        let (mark, said) = super::check_private("wg0", "10.77.0.0/24", &ifs);
        assert_eq!(mark, Mark::Failed);
        assert_eq!(
            said,
            "the private network's interface wg0 does not exist on this node; 10.77.0.0/24 is on \
             mesh0 (10.77.0.1/24), which the guard does not let through: the store and the \
             broker's management are refused there too"
        );
        // Declared eth0, which exists but carries another network.
        let (mark, said) = super::check_private("eth0", "10.77.0.0/24", &ifs);
        assert_eq!(mark, Mark::Failed);
        assert!(
            said.contains("eth0 carries no address in the private range 10.77.0.0/24")
                && said.contains("is on mesh0"),
            "{said}"
        );
        // A range no interface carries; a neighbouring network is not inside it.
        let (mark, said) = super::check_private("mesh0", "10.77.1.0/24", &ifs);
        assert_eq!(mark, Mark::Failed);
        assert!(
            said.ends_with("no interface of this node carries 10.77.1.0/24"),
            "{said}"
        );
    }

    #[test]
    fn only_bridges_of_this_machine_open_the_guard() {
        let here = vec!["docker0".to_string(), "lanbr".to_string()];
        let reported = vec!["lanbr".to_string(), "eth0".to_string(), "gone0".to_string()];
        assert_eq!(super::real_bridges(reported, &here), ["lanbr"]);
        assert!(super::real_bridges(vec!["eth0".into()], &[]).is_empty());
    }
}
