//! The guard phase, the first an apply enters the node's firewall by, before the store is
//! opened: another node's claim refuses the apply, and on an adopted node the guard's spec is
//! made from the settings and the declared containers and its two layers written (the `inet
//! mesh_host` table, then the netfilter BPF layer pinned beside it), exempting the runtime's
//! bridges; and the words the report and the status name its layers by.

use super::outcome::{BpfLayer, GuardWritten};
use super::{Error, NodeFirewall};
use crate::briefing::Mark;
use crate::declaration::{self, Mode, Resource, Settings};
use firewall::GuardSpec;
use std::net::IpAddr;

/// The firewall's part of an apply before the store is opened: another node's marks refuse it
/// (when `claim`: the declaration touches the firewall), and with `guard` on an adopted node with
/// `settings` the guard is ensured, so a store that cannot be read or written never leaves the
/// foundation's ports unguarded.
pub fn early(
    fw: &mut dyn NodeFirewall,
    runner: &dyn run::Runner,
    decl: &declaration::Declaration,
    settings: Option<&Settings>,
    claim: bool,
    guard: bool,
) -> Result<Option<Guarded>, Error> {
    if claim {
        check_claim(fw, &decl.node)?;
    }
    Ok(match (guard, decl.mode, settings) {
        (true, Mode::Adopted, Some(settings)) => Some(ensure(fw, runner, decl, settings)),
        _ => None,
    })
}

/// Refuses an apply on a machine whose firewall carries another node's marks: one store per
/// firewall, so a second store (a mistaken `--root`) never converges over this node's rules.
/// A firewall that cannot be read is no claim: the resources that need it fail with the reason.
fn check_claim(fw: &mut dyn NodeFirewall, node: &str) -> Result<(), Error> {
    match fw.claimed_by() {
        Ok(Some(other)) if other != node => Err(Error::Claimed {
            other,
            node: node.to_string(),
        }),
        _ => Ok(()),
    }
}

/// The guard an adopted node's settings call for: from the private network's interface only
/// sources in its ranges pass. A guarded service's container port is the
/// `container_port` of the declared container that publishes its host port (tcp); with no such
/// container it runs on the host, and its container port is its host port.
pub fn guard_spec(settings: &Settings, resources: &[Resource]) -> GuardSpec {
    let (store, broker) = (settings.ports.store, settings.ports.broker_management);
    let private = settings.private_network.as_ref();
    GuardSpec::for_node(store, broker, private.map(|p| p.interface.as_str()))
        .private_ranges(&private.map(|p| p.networks()).unwrap_or_default())
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

/// What ensuring the guard said: its own line, how the declared private network's interface
/// stands on this machine (when the settings have a private network), and the guard written (for
/// the resident host, which puts exactly that back when the ruleset changes under it).
pub struct Guarded {
    pub line: Result<GuardWritten, Error>,
    pub private: Option<(Mark, String)>,
    pub spec: GuardSpec,
}

impl Guarded {
    /// Whether ensuring the guard wrote to the node's firewall (its table or its BPF maps).
    pub fn changed(&self) -> bool {
        self.line.as_ref().is_ok_and(GuardWritten::changed)
    }
}

/// Ensures the guard for `decl` and `settings` and checks the private network's interface it
/// lets through. Needs no store: an apply ensures it before the store is read.
pub fn ensure(
    fw: &mut dyn NodeFirewall,
    runner: &dyn run::Runner,
    decl: &declaration::Declaration,
    settings: &Settings,
) -> Guarded {
    // The links of this thread's namespace, with their addresses, over rtnetlink (sysfs would
    // show the namespace it was mounted in).
    let interfaces = ::genesis::inventory::interfaces().map_err(|e| e.to_string());
    let private = settings
        .private_network
        .as_ref()
        .map(|p| match &interfaces {
            Ok(ifs) => check_private(&p.interface, &p.range, ifs),
            Err(e) => (
                Mark::Unknown,
                format!(
                    "could not read this node's interfaces to check the private network's \
                     interface {} and range {}: {e}",
                    p.interface, p.range
                ),
            ),
        });
    let spec = guard_for(
        fw,
        runner,
        settings,
        &decl.resources,
        interfaces.as_deref().unwrap_or_default(),
    );
    Guarded {
        line: write(fw, &spec),
        private,
        spec,
    }
}

/// The guard `settings` call for, with the bridges the runtime reports that are bridges here.
fn guard_for(
    fw: &mut dyn NodeFirewall,
    runner: &dyn run::Runner,
    settings: &Settings,
    resources: &[Resource],
    interfaces: &[::genesis::inventory::Interface],
) -> GuardSpec {
    let mut spec = guard_spec(settings, resources);
    for b in fw.runtime_bridges(runner, interfaces) {
        spec.add_runtime_bridge(&b);
    }
    spec
}

/// `spec` letting through and refusing behind the runtime's bridges `bridges` in place of those
/// it had: what the resident host puts in force when the engine's networks change.
pub fn with_bridges(spec: &GuardSpec, bridges: &[String]) -> GuardSpec {
    let mut out = spec.clone();
    out.allowed.retain(|a| !spec.runtimes.contains(a));
    out.runtimes.clear();
    for b in bridges {
        out.add_runtime_bridge(b);
    }
    out
}

pub use super::outcome::{LAYERS_BOTH, LAYERS_TABLE_ALONE};

/// Puts `spec` in force in both layers, the table and beside it the netfilter BPF program
/// pinned under `root`; returns what each layer did (its words are the report's and the
/// briefing's guard line). The BPF layer is loaded even when the table cannot be (a table
/// another process holds), and where the kernel refuses it the outcome says the table holds
/// alone, and why.
pub fn write(fw: &mut dyn NodeFirewall, spec: &GuardSpec) -> Result<GuardWritten, Error> {
    let table = fw.guard_table(spec).map_err(|e| match e {
        Error::NoNfTables => e.doing("the guard cannot be loaded"),
        e => e.doing("loading the guard"),
    });
    let bpf = match fw.guard_bpf(spec) {
        Ok(r) => BpfLayer::Loaded(r),
        Err(e) => {
            tracing::warn!(error = %e, "the guard's netfilter BPF layer is not loaded");
            BpfLayer::NotLoaded(e.to_string())
        }
    };
    match table {
        Ok(table) => Ok(GuardWritten {
            spec: spec.clone(),
            table,
            bpf,
        }),
        Err(e) => Err(Error::Guard {
            table: Box::new(e),
            layers: bpf,
        }),
    }
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

#[cfg(test)]
mod tests {
    use crate::declaration::{ContainerSpec, Proto, PublishedPort, Resource, Settings};

    #[test]
    fn new_bridges_take_the_old_ones_place_and_nothing_else_changes() {
        let mut spec = super::guard_spec(&settings(), &[]);
        spec.add_runtime_bridge("docker0");
        spec.add_runtime_bridge("br-old");
        let new = super::with_bridges(&spec, &["docker0".into(), "br-0123456789ab".into()]);
        // The private network is let through by its interface and range, not as an allowed
        // interface: the bridges change neither.
        assert_eq!(new.allowed, ["lo", "docker0", "br-0123456789ab"]);
        assert_eq!(new.runtimes, ["docker0", "br-0123456789ab"]);
        assert_eq!(new.ports, spec.ports);
        assert_eq!(new.private, spec.private);
        assert_eq!(
            new.private.as_ref().map(|p| p.interface.as_str()),
            Some("wg0")
        );
        let none = super::with_bridges(&spec, &[]);
        assert_eq!(
            (none.allowed, none.runtimes.len()),
            (vec!["lo".to_string()], 0)
        );
        assert_eq!(none.private, spec.private);
    }

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
}
