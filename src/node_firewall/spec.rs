//! The derived filter a flipped (or flipping) node's declaration calls for: its openings, the
//! private network's interface and ranges, the runtime's bridges (asked of the runtime, as the
//! guard's are) and the ssh ports the flip kept reachable.

use super::{Error, NodeFirewall};
use crate::declaration::openings::Untranslatable;
use crate::declaration::{Declaration, Settings};
use firewall::FilterSpec;

/// The derived filter for `decl`: its openings, the private network's interface, the runtime's
/// bridges that are bridges here, `ssh`'s ports, and reachable on them from `ssh_from` (on a node
/// raised converged, the addresses the operator's ssh sessions came from at genesis).
pub fn filter_spec(
    fw: &mut dyn NodeFirewall,
    runner: &dyn run::Runner,
    decl: &Declaration,
    settings: Option<&Settings>,
    ssh: &[u16],
    ssh_from: &[std::net::IpAddr],
) -> Result<FilterSpec, Error> {
    let interfaces = ::genesis::inventory::interfaces().unwrap_or_default();
    let bridges = fw.runtime_bridges(runner, &interfaces);
    Ok(filter_spec_with(decl, settings, bridges, ssh, ssh_from)?)
}

/// The derived filter for `decl` with the runtime's `bridges` as given (none, where no runtime
/// may be asked): its openings, the private network's interface and ranges, `ssh`'s ports,
/// reachable on them from `ssh_from`.
pub fn filter_spec_with(
    decl: &Declaration,
    settings: Option<&Settings>,
    bridges: Vec<String>,
    ssh: &[u16],
    ssh_from: &[std::net::IpAddr],
) -> Result<FilterSpec, Untranslatable> {
    let openings = crate::declaration::openings::declared(decl, settings)?;
    Ok(FilterSpec {
        openings,
        private: settings
            .and_then(|s| s.private_network.as_ref())
            .map(|p| p.interface.clone()),
        private_ranges: settings
            .and_then(|s| s.private_network.as_ref())
            .map(|p| p.networks())
            .unwrap_or_default(),
        bridges,
        ssh: ssh.to_vec(),
        ssh_from: ssh_from.to_vec(),
    })
}
