//! The flip's first step, before anything changes: the found firewall saved as it is now, with
//! whether its boot units are enabled and the ports ssh listens on, so a host that dies anywhere
//! after leaves a store that knows what to put back.

use super::{Error, NodeFirewall};
use crate::store::{BootUnit, Flip, FlipStage};

/// Saves the found firewall as it is now, before anything touches it: the first step of a flip,
/// made while the store is written for the mode's change, so a host that dies anywhere after
/// leaves a store that knows what to put back. Errors refuse the whole apply.
pub fn record_found(fw: &mut dyn NodeFirewall, runner: &dyn run::Runner) -> Result<Flip, Error> {
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
