//! The opening applier: a declared opening converged through the found firewall, in its own
//! terms, on every layer of its path that could drop it; and the guard on an adopted node.

use super::{Cx, Done, NotAdmitted, Outcome};
use crate::declaration::{self, FromName, OpeningSpec, PathKind, Resource, Settings, Shape};
use crate::store::Owned;
use firewall::{Firewall, GuardSpec, Network, Opening, Scope, State, SystemExec};

static EXEC: SystemExec = SystemExec;

/// Opens the firewall once per apply: detection reads every layer, so it is not repeated per
/// opening. Every write is made for `node`, whose name the mesh's table records, so a second
/// store on this machine (a mistaken `--root`) never converges over this node's marks.
pub(super) fn firewall<'c>(
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
        proto: match spec.proto {
            declaration::Proto::Tcp => firewall::Proto::Tcp,
            declaration::Proto::Udp => firewall::Proto::Udp,
        },
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
        let kind = fw.found().kind();
        cx.openings = Some(
            fw.converge(&declared, Scope::Given)
                .map_err(|e| format!("openings through the found firewall ({kind}): {e}")),
        );
    }
    let done = match cx.openings.as_ref().expect("converged above") {
        Ok(done) => done.clone(),
        Err(e) => return Err(format!("opening {}: {e}", spec.id)),
    };
    let kind = cx.fw.as_ref().map(|f| f.found().kind()).unwrap_or_default();
    let added = done.added.iter().any(|(id, _)| *id == spec.id);
    let removed = done
        .removed
        .iter()
        .any(|(mark, _)| firewall::rules::id_of(mark) == Some(spec.id.as_str()));
    if added || removed {
        cx.changed(&spec.id);
    }
    let rec = Owned {
        id: spec.id.clone(),
        module: spec.module.clone(),
        shape: Shape::Opening,
        key: spec.id.clone(),
        digest: Some(firewall::rules::mark(&opening)),
        found: false,
    };
    if cx.store.state.owned(&spec.id) != Some(&rec) {
        cx.record_owned(rec)?;
    }
    let states = done.states.get(&spec.id).cloned().unwrap_or_default();
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
            State::Missing | State::Refused(_) | State::Unwritable(_) | State::Doubtful(_) => {
                cx.not_admitted.push(NotAdmitted {
                    id: spec.id.clone(),
                    layer: p.layer.clone(),
                    why: p.state.describe(),
                })
            }
        }
    }
    let refused: Vec<String> = states
        .iter()
        .filter(|p| !p.present())
        .map(|p| format!("{}: {}", p.layer, p.state.describe()))
        .collect();
    let mut where_ = if in_force.is_empty() {
        format!(
            "nothing on the {} path refuses it by default (found firewall: {kind}); no rule needed",
            opening.path.as_str()
        )
    } else {
        in_force.join(", ")
    };
    if !in_force.is_empty() && not_needed > 0 {
        where_.push_str(&format!("; {not_needed} other layer(s) need no rule"));
    }
    if !refused.is_empty() {
        where_.push_str(&format!("; NOT admitted by {}", refused.join("; ")));
    }
    Ok(match (added, removed) {
        (false, false) => Done::new(Outcome::Unchanged, format!("in force in {where_}")),
        (true, false) => Done::new(Outcome::Created, format!("opened in {where_}")),
        _ => Done::new(Outcome::Changed, format!("rewritten in {where_}")),
    })
}

/// Removes every marked rule of an opening that is no longer declared.
pub(super) fn remove(cx: &mut Cx<'_>, id: &str, declared: &[Opening]) -> Result<Done, String> {
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

/// The guard an adopted node's settings call for. A guarded service's container port is the
/// `container_port` of the declared container that publishes its host port (tcp); with no such
/// container it runs on the host, and its container port is its host port.
pub fn guard_spec(settings: &Settings, resources: &[Resource]) -> GuardSpec {
    let (store, broker) = (settings.ports.store, settings.ports.broker_management);
    GuardSpec::for_node(
        store,
        broker,
        settings
            .private_network
            .as_ref()
            .map(|p| p.interface.as_str()),
    )
    .container_ports(
        container_port(resources, store),
        container_port(resources, broker),
    )
}

/// The port inside the declared container that publishes `host_port` over tcp, or `host_port`.
fn container_port(resources: &[Resource], host_port: u16) -> u16 {
    resources
        .iter()
        .filter_map(|r| match r {
            Resource::Container(c) => Some(c),
            _ => None,
        })
        .flat_map(|c| &c.ports)
        .find(|p| p.host_port == host_port && p.proto == declaration::Proto::Tcp)
        .map_or(host_port, |p| p.container_port)
}

/// Ensures the guard; returns a line for the briefing.
pub(super) fn ensure_guard(cx: &mut Cx<'_>, settings: &Settings) -> Result<String, String> {
    let mut spec = guard_spec(settings, &cx.decl.resources);
    // The runtime's own bridges are the machine's too; the default names are already patterns
    // in the guard, a custom-named bridge is asked of the runtime. A runtime that does not answer
    // leaves the defaults.
    let reported = crate::system::container_runtime(cx.runner)
        .ok()
        .and_then(|rt| rt.bridges().ok())
        .unwrap_or_default();
    // Only a name that is a bridge on this machine is let through: a runtime's answer naming
    // the uplink (a macvlan's parent) must never open the guard to the outside. The inventory
    // reads the links of this thread's namespace over rtnetlink (sysfs would show the namespace
    // it was mounted in); if it cannot be read, no custom name is added.
    let here: Vec<String> = ::genesis::inventory::interfaces()
        .map(|ifs| {
            ifs.into_iter()
                .filter(|i| i.kind == ::genesis::inventory::InterfaceKind::Bridge)
                .map(|i| i.name)
                .collect()
        })
        .unwrap_or_default();
    for b in real_bridges(reported, &here) {
        if firewall::opening::check_interface(&b).is_ok() {
            spec.add_runtime_bridge(&b);
        }
    }
    let fw = firewall(&mut cx.fw, &cx.decl.node)?;
    let sock = fw
        .socket()
        .ok_or("the kernel has no nf_tables, so the guard cannot be loaded")?;
    let report =
        firewall::guard::ensure(sock, &spec).map_err(|e| format!("loading the guard: {e}"))?;
    let held = match (report.claim, report.held_by) {
        (_, Some(port)) => format!("held by another process, netlink port {port}, and in force"),
        (Some(c), None) => format!("{c:?}").to_lowercase(),
        (None, None) => "plain table: this kernel has no persist flag".into(),
    };
    let ports: Vec<String> = spec
        .ports
        .iter()
        .map(|p| {
            if p.container_port == p.host_port {
                format!("{} {}", p.what, p.host_port)
            } else {
                format!(
                    "{} {} (container port {})",
                    p.what, p.host_port, p.container_port
                )
            }
        })
        .collect();
    Ok(format!(
        "refusing {} except on {}, and at the container ports routed to {} ({}; {})",
        ports.join(" and "),
        spec.allowed.join(", "),
        spec.runtimes.join(", "),
        held,
        if report.changed {
            "written"
        } else {
            "unchanged"
        }
    ))
}

/// The names a runtime reported that are bridges on this machine (`bridges`), in order.
fn real_bridges(reported: Vec<String>, bridges: &[String]) -> Vec<String> {
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
        ports: firewall::FoundationPorts {
            store: p.store,
            bus: p.bus,
            broker_management: p.broker_management,
            registry: p.registry,
            hub: p.hub,
        },
        private_interface: &private,
        listens: &listens,
    }))
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

    #[test]
    fn only_bridges_of_this_machine_open_the_guard() {
        let here = vec!["docker0".to_string(), "lanbr".to_string()];
        let reported = vec!["lanbr".to_string(), "eth0".to_string(), "gone0".to_string()];
        assert_eq!(super::real_bridges(reported, &here), ["lanbr"]);
        assert!(super::real_bridges(vec!["eth0".into()], &[]).is_empty());
    }
}
