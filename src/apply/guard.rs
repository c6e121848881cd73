//! The guard on an adopted node: its spec from the settings and the declared containers, its
//! two layers written (the `inet mesh_host` table, then the netfilter BPF layer pinned beside it),
//! the runtime's bridges it exempts, and the words the report and the status name its layers by.

use super::opening::{check_private, firewall, real_bridges};
use crate::briefing::Mark;
use crate::declaration::{self, Declaration, Resource, Settings};
use firewall::{Firewall, GuardSpec, GuardTable};

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

/// What ensuring the guard said: its own line, how the declared private network's interface
/// stands on this machine (when the settings have a private network), and the guard written (for
/// the resident host, which puts exactly that back when the ruleset changes under it).
pub(crate) struct Guarded {
    pub line: Result<String, String>,
    pub private: Option<(Mark, String)>,
    pub spec: GuardSpec,
}

/// Ensures the guard for `decl` and `settings` and checks the private network's interface it
/// lets through. Needs no store: an apply ensures it before the store is read.
pub(crate) fn ensure_guard(
    root: &std::path::Path,
    runner: &dyn run::Runner,
    fw: &mut Option<Firewall<'static>>,
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
        runner,
        settings,
        &decl.resources,
        interfaces.as_deref().unwrap_or_default(),
    );
    Guarded {
        line: write_guard(root, fw, decl, &spec),
        private,
        spec,
    }
}

/// The guard `settings` call for, with the bridges the runtime reports that are bridges here.
fn guard_for(
    runner: &dyn run::Runner,
    settings: &Settings,
    resources: &[Resource],
    interfaces: &[::genesis::inventory::Interface],
) -> GuardSpec {
    let mut spec = guard_spec(settings, resources);
    for b in runtime_bridges(runner, interfaces) {
        spec.add_runtime_bridge(&b);
    }
    spec
}

/// The bridges the container runtime reports that are bridges on this machine, the only
/// interfaces the guard lets through and the derived filter forwards from besides loopback and
/// the private network's.
pub(crate) fn runtime_bridges(
    runner: &dyn run::Runner,
    interfaces: &[::genesis::inventory::Interface],
) -> Vec<String> {
    // The runtime's own bridges are the machine's too, asked of the runtime on every apply; no
    // name is trusted for what it looks like. A runtime that does not answer adds none.
    let reported = crate::system::container_runtime(runner)
        .ok()
        .and_then(|rt| rt.bridges().ok())
        .unwrap_or_default();
    // Only a name that is a bridge on this machine is let through: a runtime's answer naming
    // the uplink (a macvlan's parent) must never open the guard to the outside. If the links
    // cannot be read, no bridge is added.
    let here: Vec<String> = interfaces
        .iter()
        .filter(|i| i.kind == ::genesis::inventory::InterfaceKind::Bridge)
        .map(|i| i.name.clone())
        .collect();
    real_bridges(reported, &here)
        .into_iter()
        .filter(|b| firewall::opening::check_interface(b).is_ok() && !b.ends_with('*'))
        .collect()
}

/// The guard's layers when both hold, as the briefing and `firewall status` name them.
pub const LAYERS_BOTH: &str =
    "guard: table inet mesh_host + netfilter BPF (pinned): holds through any ruleset change";

/// The guard's layer where the kernel has no netfilter BPF for it, with its measured window.
pub const LAYERS_TABLE_ALONE: &str = "guard: table inet mesh_host alone: a foreign flush or \
     reload removes it until the resident host writes it back (measured on kernel 6.18: about \
     8.6 ms per reload, 432 of 3,043 probes through across 50 reloads)";

/// Puts `spec` in force in both layers, the table and beside it the netfilter BPF program
/// pinned under `root`; returns the guard's line for the report and the briefing. The BPF layer
/// is loaded even when the table cannot be (a table another process holds), and where the
/// kernel refuses it the line says the table holds alone, and why.
pub(crate) fn write_guard(
    root: &std::path::Path,
    fw: &mut Option<Firewall<'static>>,
    decl: &Declaration,
    spec: &GuardSpec,
) -> Result<String, String> {
    let table = write_guard_table(fw, decl, spec);
    let layers = write_bpf_layer(root, spec);
    match table {
        Ok(line) => Ok(format!("{line}; {layers}")),
        Err(e) => Err(format!("{e}; {layers}")),
    }
}

/// The guard's BPF layer for `spec`, pinned under `root`: its clause for the guard's line.
pub(crate) fn write_bpf_layer(root: &std::path::Path, spec: &GuardSpec) -> String {
    match firewall::bpf::ensure(&firewall::bpf::Pins::under(root), spec) {
        Ok(r) => format!(
            "{LAYERS_BOTH} (links {}, ports and interfaces {})",
            match r.loaded {
                firewall::bpf::Loaded::Created => "attached and pinned",
                firewall::bpf::Loaded::Reclaimed => "reclaimed",
                firewall::bpf::Loaded::Replaced => "replaced",
            },
            if r.changed { "written" } else { "unchanged" }
        ),
        Err(e) => {
            tracing::warn!(error = %e, "the guard's netfilter BPF layer is not loaded");
            format!("{LAYERS_TABLE_ALONE}; netfilter BPF not loaded: {e}")
        }
    }
}

/// Removes the guard's BPF layer (the flip, where the derived filter takes over): its clause.
pub(crate) fn remove_bpf_layer(root: &std::path::Path) -> Result<String, String> {
    match firewall::bpf::remove(&firewall::bpf::Pins::under(root)) {
        Ok(true) => Ok("the guard's netfilter BPF layer removed".into()),
        Ok(false) => Ok("no netfilter BPF layer was pinned".into()),
        Err(e) => Err(format!("removing the guard's netfilter BPF layer: {e}")),
    }
}

/// Puts `spec` in force in the table; returns its part of the guard's line.
fn write_guard_table(
    fw: &mut Option<Firewall<'static>>,
    decl: &Declaration,
    spec: &GuardSpec,
) -> Result<String, String> {
    let fw = firewall(fw, decl)?;
    let sock = fw
        .socket()
        .ok_or("the kernel has no nf_tables, so the guard cannot be loaded")?;
    let report =
        firewall::guard::ensure(sock, spec).map_err(|e| format!("loading the guard: {e}"))?;
    let table = match report.table {
        GuardTable::Created => "created".to_string(),
        GuardTable::Present => "plain table".to_string(),
        GuardTable::Replaced(old) => format!("replaced {} with a plain table", old.describe()),
        GuardTable::HeldBy(port) => {
            format!("held by another process, netlink port {port}, and in force")
        }
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
    let containers = if spec.runtimes.is_empty() {
        "no runtime bridge reported".to_string()
    } else {
        format!(
            "at the container ports routed to {}",
            spec.runtimes.join(", ")
        )
    };
    Ok(format!(
        "refusing {} on this node's own addresses except on {}, and {} ({}; {})",
        ports.join(" and "),
        spec.allowed.join(", "),
        containers,
        table,
        if report.changed {
            "written"
        } else {
            "unchanged"
        }
    ))
}
