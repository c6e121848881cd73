//! The container runtime's bridges on this machine: the only interfaces besides loopback and the
//! private network's that the guard lets through and the derived filter forwards from. A name
//! is trusted only when it is a bridge here, whatever the runtime says.

/// The bridges the container runtime reports that are bridges on this machine, the only
/// interfaces the guard lets through and the derived filter forwards from besides loopback and
/// the private network's.
pub fn runtime_bridges(
    runner: &dyn run::Runner,
    interfaces: &[::genesis::inventory::Interface],
) -> Vec<String> {
    // The runtime's own bridges are the machine's too, asked of the runtime on every apply; no
    // name is trusted for what it looks like. A runtime that does not answer adds none.
    let reported = super::container_runtime(runner)
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

/// The names a runtime reported that are bridges on this machine (`bridges`), in order.
fn real_bridges(reported: Vec<String>, bridges: &[String]) -> Vec<String> {
    reported
        .into_iter()
        .filter(|r| bridges.contains(r))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_bridges_of_this_machine_open_the_guard() {
        let here = vec!["docker0".to_string(), "lanbr".to_string()];
        let reported = vec!["lanbr".to_string(), "eth0".to_string(), "gone0".to_string()];
        assert_eq!(super::real_bridges(reported, &here), ["lanbr"]);
        assert!(super::real_bridges(vec!["eth0".into()], &[]).is_empty());
    }
}
