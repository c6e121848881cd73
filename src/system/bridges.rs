//! The container runtime's bridges on this machine: the only interfaces besides loopback and the
//! private network's that the guard lets through and the derived filter forwards from. A name
//! is trusted only when it is a bridge here, whatever the runtime says.
//!
//! The runtime is asked over its engine's socket (`engine_api::bridges`), never through a child
//! process, and once per process: a CLI act reads the list once, and the resident host reads it
//! again only when [`forget`] says the engine's networks or the machine's links changed. An engine
//! reached over tcp or ssh is asked through its CLI; where no engine's socket exists, no engine
//! runs and there are no runtime bridges.

use super::{engine_api, RuntimeKind};
use std::sync::Mutex;

/// The names the engine last reported, until [`forget`]: `None` when not asked yet.
static REPORTED: Mutex<Option<Vec<String>>> = Mutex::new(None);

/// The bridges the container runtime reports that are bridges on this machine, the only
/// interfaces the guard lets through and the derived filter forwards from besides loopback and
/// the private network's.
pub fn runtime_bridges(
    runner: &dyn run::Runner,
    interfaces: &[::genesis::inventory::Interface],
) -> Vec<String> {
    // Only a name that is a bridge on this machine is let through: a runtime's answer naming
    // the uplink (a macvlan's parent) must never open the guard to the outside. If the links
    // cannot be read, no bridge is added.
    let here: Vec<String> = interfaces
        .iter()
        .filter(|i| i.kind == ::genesis::inventory::InterfaceKind::Bridge)
        .map(|i| i.name.clone())
        .collect();
    real_bridges(reported(runner), &here)
        .into_iter()
        .filter(|b| crate::firewall_terms::opening::check_interface(b).is_ok() && !b.ends_with('*'))
        .collect()
}

/// Whatever was read before is read again at the next [`runtime_bridges`]: the resident host
/// calls it when the engine's networks or the machine's links changed.
pub fn forget() {
    *REPORTED.lock().unwrap_or_else(|p| p.into_inner()) = None;
}

/// The engine's answer, asked the first time since [`forget`].
fn reported(runner: &dyn run::Runner) -> Vec<String> {
    let mut kept = REPORTED.lock().unwrap_or_else(|p| p.into_inner());
    kept.get_or_insert_with(|| ask(runner)).clone()
}

/// The runtime detected now, asked over its socket; a runtime that does not answer adds none.
fn ask(runner: &dyn run::Runner) -> Vec<String> {
    // A build that runs no containers lets no runtime's bridge through.
    if crate::build::BUILD
        .refusal(crate::declaration::Shape::Container)
        .is_some()
    {
        return Vec::new();
    }
    // Under a root other than `/` the engine is this machine's, not the root's: not asked.
    if super::confined("container runtime").is_some() {
        return Vec::new();
    }
    let Some(kind) = super::detect_runtime(|k| std::env::var(k).ok(), super::on_path) else {
        return Vec::new();
    };
    match engine_api::socket(kind, |k| std::env::var(k).ok()) {
        Some(socket) if !socket.exists() => {
            tracing::debug!(socket = %socket.display(), "no engine socket, so no engine runs and no runtime bridge is let through");
            Vec::new()
        }
        Some(socket) => engine_api::bridges(kind, &socket).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "the container engine did not list its networks; no runtime bridge is let through");
            Vec::new()
        }),
        None => by_cli(runner, kind),
    }
}

/// An engine reached over tcp or ssh (`DOCKER_HOST`, `CONTAINER_HOST`): only its CLI knows the
/// way, so it is asked through it.
fn by_cli(runner: &dyn run::Runner, kind: RuntimeKind) -> Vec<String> {
    super::container_runtime(runner)
        .ok()
        .filter(|rt| rt.kind() == kind)
        .and_then(|rt| rt.bridges().ok())
        .unwrap_or_default()
}

/// The names a runtime reported that are bridges on this machine (`bridges`), in order.
/// In name order, each once: the engine lists its networks in no set order, and the guard's
/// rules and its line must not change when only that order did.
fn real_bridges(reported: Vec<String>, bridges: &[String]) -> Vec<String> {
    let mut out: Vec<String> = reported
        .into_iter()
        .filter(|r| bridges.contains(r))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_bridges_of_this_machine_open_the_guard() {
        let here = vec!["docker0".to_string(), "lanbr".to_string()];
        let reported = vec!["lanbr".to_string(), "eth0".to_string(), "gone0".to_string()];
        assert_eq!(super::real_bridges(reported, &here), ["lanbr"]);
        assert!(super::real_bridges(vec!["eth0".into()], &[]).is_empty());
        // Whatever order the engine answers in, the same list.
        let here = vec!["docker0".to_string(), "br-0a".to_string()];
        for reported in [
            vec!["docker0".to_string(), "br-0a".to_string()],
            vec![
                "br-0a".to_string(),
                "docker0".to_string(),
                "docker0".to_string(),
            ],
        ] {
            assert_eq!(super::real_bridges(reported, &here), ["br-0a", "docker0"]);
        }
    }
}
