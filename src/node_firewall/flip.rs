//! The flip proper, with the found firewall already saved (`save`) and the derived filter's spec
//! made (`spec`): in one nf_tables transaction the derived filter loaded and the guard removed,
//! the found firewall retired by disabling it, never by flushing, its boot units disabled, and
//! the store told the flip is done.

use super::outcome::{BpfRemoved, Flipped, UnitFate};
use super::{Error, Node, NodeFirewall};
use crate::store::{Flip, FlipStage};
use firewall::FilterSpec;

/// The flip proper, with the found firewall already saved: the derived filter loaded and the
/// guard removed in one transaction with the native tables' deletion, the other kinds retired,
/// the boot units disabled (never stopped: Debian's nftables unit flushes the whole ruleset when
/// stopped), the mesh's marks left in the runtime's chains removed; then the store says done.
pub(super) fn flip(cx: &mut Node<'_>, spec: FilterSpec) -> Result<(Flipped, FilterSpec), Error> {
    let Some(saved) = cx.store.state.flip.clone() else {
        return Err(Error::Declared(
            "no saved found firewall to flip from".into(),
        ));
    };
    crate::failpoint::hit("flip", "saved");
    let (done, guarded) = cx
        .fw
        .flip(&spec, &saved.retired)
        .map_err(|e| e.doing("loading the derived filter and retiring the found firewall"))?;
    crate::failpoint::hit("flip", "loaded");
    // The derived filter holds the store closed from here on: the guard's BPF layer, which
    // would refuse the foundation's ports whatever the filter admits, goes with the table.
    let bpf = remove_bpf_layer(cx.fw).unwrap_or_else(|e| BpfRemoved::Failed(e.to_string()));
    let mut units = Vec::new();
    if let Ok(sm) = crate::system::service_manager(cx.runner) {
        for u in saved.units.iter().filter(|u| u.enabled == Some(true)) {
            sm.disable(&u.unit).map_err(|e| Error::Unit {
                doing: "disabling",
                unit: u.unit.clone(),
                why: e.to_string(),
            })?;
            units.push(UnitFate::Disabled(u.unit.clone()));
        }
    }
    // Under a root other than `/` the service manager is never asked (it would answer for this
    // machine, not the root): said so, not as a manager that could not tell.
    let confined = crate::system::confined("service manager");
    for u in saved.units.iter().filter(|u| u.enabled.is_none()) {
        units.push(match &confined {
            Some(why) => UnitFate::Confined {
                unit: u.unit.clone(),
                why: why.to_string(),
            },
            None => UnitFate::Unknown(u.unit.clone()),
        });
    }
    for u in saved.units.iter().filter(|u| u.enabled == Some(false)) {
        units.push(UnitFate::NotEnabled(u.unit.clone()));
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
    let flipped = Flipped {
        openings: spec.openings.len(),
        ssh: spec.ssh.clone(),
        ssh_from: spec.private.clone().map(|i| {
            let from = spec.ssh_from.iter().map(ToString::to_string).collect();
            (i, from)
        }),
        guard_removed: guarded,
        bpf,
        retired: done,
        units,
    };
    Ok((flipped, spec))
}

/// Removes the guard's BPF layer (the flip, where the derived filter takes over).
fn remove_bpf_layer(fw: &mut dyn NodeFirewall) -> Result<BpfRemoved, Error> {
    match fw.remove_guard_bpf() {
        Ok(true) => Ok(BpfRemoved::Removed),
        Ok(false) => Ok(BpfRemoved::NonePinned),
        Err(e) => Err(e.doing("removing the guard's netfilter BPF layer")),
    }
}
