//! The flip and the return, as an apply carries them out: an adopted node given a converged
//! declaration has its found firewall saved in the store, then (in one nf_tables transaction) the
//! derived filter loaded and the guard removed, the found firewall retired by disabling it, never
//! by flushing, and its boot unit disabled; a converged node given an adopted declaration gets
//! the guard back first, the found firewall restored exactly as saved and its unit enabled, then
//! the derived filter unloaded. Whether either may happen at all is [`refusals`]'s to say, before
//! anything changes.

use super::{openings, Error, Node, NodeFirewall};
use crate::declaration::{Declaration, Mode, Settings, Shape};
use crate::store::{BootUnit, Flip, FlipStage, State};
use firewall::FilterSpec;

/// What an apply of `decl` does to the node's firewall, given what the store says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Nothing changes kind: the guard on an adopted node, the derived filter on a converged one
    /// that was flipped, the found firewall on a node raised converged.
    Stay,
    /// Adopted to converged (or a flip that was saved and did not finish).
    Flip,
    /// Converged back to adopted.
    Return,
}

pub fn transition(state: &State, decl: &Declaration) -> Transition {
    match (decl.mode, &state.flip) {
        (Mode::Converged, Some(f)) if f.stage == FlipStage::Saved => Transition::Flip,
        (Mode::Converged, None) if state.mode == Some(Mode::Adopted) => Transition::Flip,
        (Mode::Adopted, Some(_)) => Transition::Return,
        _ => Transition::Stay,
    }
}

/// What an apply knows of the node's firewall before it records the declaration.
#[derive(Debug, Clone, Copy)]
pub struct Prepared {
    pub transition: Transition,
    /// The found firewall was saved into `state` for a flip: the store must be written.
    pub saved: bool,
    /// The ruleset is at the generation the last apply of this very declaration left it at, so
    /// nothing of it is listed.
    pub unchanged: Option<u32>,
}

/// The flip's first step and the firewall's generation, before the store records `decl`: a flip
/// saves the found firewall into `state` before anything changes (the record goes into the
/// store with the mode's change), and a flip that cannot read what it would retire is refused.
/// Legacy tables send no generation, so where they are in force the firewall is always read.
pub fn prepare(
    fw: &mut dyn NodeFirewall,
    runner: &dyn run::Runner,
    state: &mut State,
    decl: &Declaration,
) -> Result<Prepared, Error> {
    let transition = transition(state, decl);
    let mut saved = false;
    if transition == Transition::Flip && state.flip.is_none() {
        let flip = save(fw, runner)
            .map_err(|e| e.doing(format!("node {:?} cannot be converged", decl.node)))?;
        state.flip = Some(flip);
        saved = true;
    }
    let unchanged = match &state.firewall_generation {
        Some(recorded)
            if super::touches(decl)
                && transition == Transition::Stay
                && state.declaration.as_ref() == Some(decl)
                && (decl.mode != Mode::Adopted
                    || state.settings.is_none()
                    || state.firewall_guard.is_some()) =>
        {
            fw.generation().filter(|now| now == recorded)
        }
        _ => None,
    };
    state.firewall_generation = None;
    Ok(Prepared {
        transition,
        saved,
        unchanged,
    })
}

/// Why the flip `decl` asks for must not happen: every found container still held by a module
/// the declaration keeps (each service is taken on its own, when its data has moved, never by the
/// flip). Empty when it may, or when `decl` asks for no flip.
pub fn refusals(state: &State, decl: &Declaration) -> Vec<String> {
    if transition(state, decl) != Transition::Flip {
        return Vec::new();
    }
    let declared = |id: &str| decl.resources.iter().any(|r| r.id() == id);
    state
        .held
        .iter()
        .filter(|h| h.shape == Shape::Container && declared(&h.id))
        .map(|h| {
            let module = h.module.as_deref().unwrap_or("(no module)");
            format!(
                "module {module} still holds the found container {}: take it on its own when its \
                 data has moved (`mesh-host take {module}`), never by the flip",
                h.key
            )
        })
        .collect()
}

/// The ports ssh listens on here (as `sshd`'s sockets say), and 22: kept reachable by the
/// derived filter from the private network, so the flip never closes ssh silently.
pub fn ssh_ports() -> Vec<u16> {
    let mut ports = vec![22];
    if let Ok(listeners) = ::genesis::inventory::listeners() {
        for l in listeners {
            if l.protocol == ::genesis::inventory::Proto::Tcp
                && l.owners.iter().any(|o| o.name == "sshd")
            {
                ports.push(l.port);
            }
        }
    }
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// The derived filter for `decl`: its openings, the private network's interface, the runtime's
/// bridges (asked of the runtime, as the guard's are) and ssh's ports.
pub fn filter_spec(
    runner: &dyn run::Runner,
    decl: &Declaration,
    settings: Option<&Settings>,
    ssh: &[u16],
) -> Result<FilterSpec, Error> {
    let openings = openings::declared(decl, settings)?;
    let interfaces = ::genesis::inventory::interfaces().unwrap_or_default();
    Ok(FilterSpec {
        openings,
        private: settings
            .and_then(|s| s.private_network.as_ref())
            .map(|p| p.interface.clone()),
        bridges: super::bridges::runtime_bridges(runner, &interfaces),
        ssh: ssh.to_vec(),
        ssh_from: Vec::new(),
    })
}

/// Saves the found firewall as it is now, before anything touches it: the first step of a flip,
/// made while the store is written for the mode's change, so a host that dies anywhere after
/// leaves a store that knows what to put back. Errors refuse the whole apply.
pub fn save(fw: &mut dyn NodeFirewall, runner: &dyn run::Runner) -> Result<Flip, Error> {
    let retired = fw
        .survey()
        .map_err(|e| e.doing("reading the found firewall to retire it"))?;
    let units = retired
        .iter()
        .filter_map(|r| r.unit.clone())
        .map(|unit| BootUnit {
            enabled: crate::system::service_manager(runner)
                .ok()
                .and_then(|sm| sm.status(&unit).ok())
                .filter(|s| s.installed)
                .map(|s| s.enabled),
            unit,
        })
        .collect();
    Ok(Flip {
        stage: FlipStage::Saved,
        retired,
        units,
        ssh: ssh_ports(),
        ssh_from: Vec::new(),
    })
}

/// The flip proper, with the found firewall already saved: the derived filter loaded and the
/// guard removed in one transaction with the native tables' deletion, the other kinds retired,
/// the boot units disabled (never stopped: Debian's nftables unit flushes the whole ruleset when
/// stopped), the mesh's marks left in the runtime's chains removed; then the store says done.
pub(super) fn flip(cx: &mut Node<'_>) -> Result<(String, FilterSpec), Error> {
    let Some(saved) = cx.store.state.flip.clone() else {
        return Err(Error::Declared(
            "no saved found firewall to flip from".into(),
        ));
    };
    let spec = current_spec(cx)?;
    crate::failpoint::hit("flip", "saved");
    let (done, guarded) = cx
        .fw
        .flip(&spec, &saved.retired)
        .map_err(|e| e.doing("loading the derived filter and retiring the found firewall"))?;
    crate::failpoint::hit("flip", "loaded");
    // The derived filter holds the store closed from here on: the guard's BPF layer, which
    // would refuse the foundation's ports whatever the filter admits, goes with the table.
    let bpf = remove_bpf_layer(cx.fw).unwrap_or_else(|e| e.to_string());
    let mut units = Vec::new();
    if let Ok(sm) = crate::system::service_manager(cx.runner) {
        for u in saved.units.iter().filter(|u| u.enabled == Some(true)) {
            sm.disable(&u.unit).map_err(|e| Error::Unit {
                doing: "disabling",
                unit: u.unit.clone(),
                why: e.to_string(),
            })?;
            units.push(format!("{} disabled (not stopped)", u.unit));
        }
    }
    for u in saved.units.iter().filter(|u| u.enabled.is_none()) {
        units.push(format!(
            "{}: the service manager could not say whether it is enabled, so it is left as it is",
            u.unit
        ));
    }
    for u in saved.units.iter().filter(|u| u.enabled == Some(false)) {
        units.push(format!("{} was not enabled at boot; left so", u.unit));
    }
    // Marks the found firewall's own tables took with them are gone; any left in the runtime's
    // chains (DOCKER-USER) would be stale accepts.
    cx.fw
        .converge(&[], firewall::Scope::All)
        .map_err(|e| e.doing("removing the mesh's marks from the retired firewall"))?;
    cx.store.state.flip = Some(Flip {
        stage: FlipStage::Done,
        retired: done.clone(),
        ..saved
    });
    cx.store.save()?;
    let retired: Vec<String> = done.iter().map(|r| r.describe()).collect();
    let line = format!(
        "derived filter loaded (drop by default; {} opening(s), ssh {} from {}){}; {}; found \
         firewall retired, never flushed: {}{}",
        spec.openings.len(),
        spec.ssh
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(","),
        match (spec.private.as_deref(), spec.ssh_from.is_empty()) {
            (None, _) => "anywhere".to_string(),
            (Some(i), true) => i.to_string(),
            (Some(i), false) => format!(
                "{i} and {}",
                spec.ssh_from
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
        if guarded {
            ", the guard removed in the same transaction"
        } else {
            ""
        },
        bpf,
        if retired.is_empty() {
            "none was found".to_string()
        } else {
            retired.join("; ")
        },
        if units.is_empty() {
            String::new()
        } else {
            format!("; {}", units.join(", "))
        }
    );
    Ok((line, spec))
}

/// The return: the guard is in force already (the apply ensured it before opening the store);
/// the found firewall is put back exactly as saved, its boot unit enabled again if it was, and
/// the derived filter unloaded; then the store forgets the flip and the openings converge
/// through the found firewall as before.
pub(super) fn unflip(cx: &mut Node<'_>) -> Result<String, Error> {
    let Some(saved) = cx.store.state.flip.clone() else {
        return Ok("nothing was flipped".into());
    };
    // A firewall that is a daemon (firewalld) must run before its state can be put back.
    for r in saved.retired.iter().filter(|r| r.daemon) {
        if let Some(unit) = &r.unit {
            let unit_error = |why: String| Error::Unit {
                doing: "starting",
                unit: unit.clone(),
                why,
            };
            let sm =
                crate::system::service_manager(cx.runner).map_err(|e| unit_error(e.to_string()))?;
            sm.start(unit).map_err(|e| unit_error(e.to_string()))?;
        }
    }
    cx.fw
        .unflip(&saved.retired)
        .map_err(|e| e.doing("restoring the found firewall"))?;
    crate::failpoint::hit("return", "restored");
    let mut units = Vec::new();
    if let Ok(sm) = crate::system::service_manager(cx.runner) {
        for u in saved.units.iter().filter(|u| u.enabled == Some(true)) {
            sm.enable(&u.unit).map_err(|e| Error::Unit {
                doing: "enabling",
                unit: u.unit.clone(),
                why: e.to_string(),
            })?;
            units.push(format!("{} enabled", u.unit));
        }
    }
    cx.store.state.flip = None;
    cx.store.save()?;
    let restored: Vec<String> = saved.retired.iter().map(|r| r.describe()).collect();
    Ok(format!(
        "found firewall restored as saved: {}{}; derived filter unloaded",
        if restored.is_empty() {
            "none had been retired".to_string()
        } else {
            restored.join("; ")
        },
        if units.is_empty() {
            String::new()
        } else {
            format!("; {}", units.join(", "))
        }
    ))
}

/// The derived filter a flipped node's declaration calls for now, with the ssh ports its flip
/// kept (and, on a node raised converged, the operator's addresses genesis saw).
pub(super) fn current_spec(cx: &Node<'_>) -> Result<FilterSpec, Error> {
    let flip = cx.store.state.flip.as_ref();
    let ssh = flip.map(|f| f.ssh.clone()).unwrap_or_default();
    let mut spec = filter_spec(cx.runner, cx.decl, cx.store.state.settings.as_ref(), &ssh)?;
    spec.ssh_from = flip.map(|f| f.ssh_from.clone()).unwrap_or_default();
    Ok(spec)
}

/// On a flipped node: the derived filter put in force as the declaration says now.
pub(super) fn ensure_filter(cx: &mut Node<'_>) -> Result<(String, FilterSpec), Error> {
    let spec = current_spec(cx)?;
    let written = cx
        .fw
        .ensure_filter(&spec)
        .map_err(|e| e.doing("loading the derived filter"))?;
    Ok((
        format!(
            "drop by default, admitting {} opening(s) ({})",
            spec.openings.len(),
            if written { "written" } else { "unchanged" }
        ),
        spec,
    ))
}

/// Removes the guard's BPF layer (the flip, where the derived filter takes over): its clause.
fn remove_bpf_layer(fw: &mut dyn NodeFirewall) -> Result<String, Error> {
    match fw.remove_guard_bpf() {
        Ok(true) => Ok("the guard's netfilter BPF layer removed".into()),
        Ok(false) => Ok("no netfilter BPF layer was pinned".into()),
        Err(e) => Err(e.doing("removing the guard's netfilter BPF layer")),
    }
}
