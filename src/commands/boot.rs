//! The boot step, `mesh-host boot`: run by its own unit before any interface is configured and
//! before the container engines start, it loads from the store alone what the last apply left
//! in force — on an adopted node the guard (its table and its netfilter BPF layer, bpffs mounted
//! if need be), on a converged node the derived filter with its openings — so the store's ports
//! are refused from the first packet the node can receive to the resident host's first
//! reconcile, and a converged node is never without a firewall. It asks no runtime, reads no
//! found firewall, runs no child and needs no network: a handful of netlink messages. A store
//! that cannot be read fails closed: the foundation's default ports are refused on every
//! interface but loopback, and the journal says so.

use crate::declaration::{Mode, Ports};
use crate::node_firewall::{self, guard, NodeFirewall};
use crate::node_firewall::{FilterSpec, GuardSpec};
use crate::store::{self, FlipStage, State};
use std::path::Path;

/// What the boot step loaded, one line per layer, and whether it failed closed.
#[derive(Debug, Default)]
pub struct Booted {
    pub lines: Vec<String>,
    /// The store could not be read, or what it recorded could not be loaded: the foundation's
    /// default ports were refused in its place (or that too failed).
    pub failed: Option<String>,
}

/// What the boot step loads for the store `state`: the guard, the derived filter, or nothing.
#[derive(Debug, PartialEq)]
pub enum Load {
    /// Nothing was ever applied with settings here: there is no store port to guard.
    Nothing(&'static str),
    Guard(GuardSpec),
    Filter(FilterSpec),
}

/// Why the boot step cannot tell what to load: it fails closed, naming this.
#[derive(Debug, thiserror::Error)]
pub enum Unloadable {
    #[error("reading the store: {0}")]
    Store(#[from] store::StoreError),
    #[error("the stored declaration's openings: {0}")]
    Openings(#[from] crate::declaration::openings::Untranslatable),
}

/// What the last apply recorded for boot, read from `state` without asking anything else.
pub fn load_for(state: &State) -> Result<Load, Unloadable> {
    let Some(decl) = state.declaration.as_ref() else {
        return Ok(Load::Nothing("no declaration was ever applied"));
    };
    let settings = state.settings.as_ref().or(decl.settings.as_ref());
    // A flip that finished retired the found firewall: the derived filter is the node's
    // firewall. A flip saved and not finished left the found firewall in force, guarded.
    let flipped = state
        .flip
        .as_ref()
        .is_some_and(|f| f.stage == FlipStage::Done);
    if flipped || (decl.mode == Mode::Converged && state.flip.is_some()) {
        if let Some(spec) = state.boot.as_ref().and_then(|b| b.filter.as_ref()) {
            return Ok(Load::Filter(spec.clone()));
        }
        // A store from before the filter was recorded: the filter made again from the
        // declaration, without the runtime's bridges (the resident host adds them).
        let flip = state.flip.as_ref();
        return Ok(Load::Filter(
            node_firewall::spec::filter_spec_with(
                decl,
                settings,
                Vec::new(),
                flip.map(|f| f.ssh.as_slice()).unwrap_or_default(),
                flip.map(|f| f.ssh_from.as_slice()).unwrap_or_default(),
            )
            .map_err(Unloadable::Openings)?,
        ));
    }
    match (decl.mode, settings) {
        (Mode::Adopted, Some(settings)) => Ok(Load::Guard(
            match state.boot.as_ref().and_then(|b| b.guard.as_ref()) {
                Some(spec) => spec.clone(),
                None => guard::guard_spec(settings, &decl.resources),
            },
        )),
        (Mode::Adopted, None) => Ok(Load::Nothing("the node has no settings, so no store port")),
        (Mode::Converged, _) => Ok(Load::Nothing(
            "a converged node raised without a flip: its own firewall's boot unit loads it",
        )),
    }
}

/// The guard of a store that cannot be read: the foundation's default ports refused on every
/// interface but loopback (no private network is let through, since none is known).
pub fn closed_guard() -> GuardSpec {
    let ports = Ports::default();
    GuardSpec::for_node(ports.store, ports.broker_management, None)
}

/// The boot step on the node under `root`, through `fw`.
pub fn boot(root: &Path, fw: &mut dyn NodeFirewall) -> Booted {
    let mut out = Booted::default();
    let load = match store::peek(root) {
        Ok(Some(state)) => load_for(&state),
        Ok(None) if store::store_dir(root).join(store::RELEASED).exists() => {
            Ok(Load::Nothing("no store: the node was released"))
        }
        Ok(None) => Ok(Load::Nothing("no store: nothing was ever applied here")),
        Err(e) => Err(Unloadable::Store(e)),
    };
    let load = match load {
        Ok(l) => l,
        Err(why) => {
            return fail_closed(fw, why.to_string(), out);
        }
    };
    match load {
        Load::Nothing(why) => out.lines.push(format!("nothing to load: {why}")),
        Load::Guard(spec) => match guard::write(fw, &spec) {
            Ok(written) => out.lines.push(written.to_string()),
            Err(e) => return fail_closed(fw, format!("the recorded guard: {e}"), out),
        },
        Load::Filter(spec) => match fw.ensure_filter(&spec) {
            Ok(written) => out.lines.push(format!(
                "derived filter with {} opening(s) {}",
                spec.openings.len(),
                if written {
                    "loaded"
                } else {
                    "in force already"
                }
            )),
            Err(e) => return fail_closed(fw, format!("the recorded derived filter: {e}"), out),
        },
    }
    out
}

/// The store's default ports refused in place of what could not be loaded.
fn fail_closed(fw: &mut dyn NodeFirewall, why: String, mut out: Booted) -> Booted {
    let spec = closed_guard();
    match guard::write(fw, &spec) {
        Ok(line) => {
            out.lines.push(format!("failed closed: {line}"));
            out.failed = Some(format!(
                "{why}; the foundation's default ports are refused on every interface but \
                 loopback until the resident host reconciles"
            ));
        }
        Err(e) => {
            out.failed = Some(format!(
                "{why}; and the default ports could not be refused either: {e}"
            ));
        }
    }
    out
}

/// `mesh-host boot` on the kernel's firewall: each line on standard output (the journal's, at
/// its default priority), and the failure logged at error priority.
pub fn run(root: &Path) -> Booted {
    let mut fw = node_firewall::Kernel::new(root, "", Default::default());
    let booted = boot(root, &mut fw);
    for line in &booted.lines {
        println!("boot: {line}");
    }
    if let Some(why) = &booted.failed {
        tracing::error!("boot: {why}");
    }
    booted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_firewall::fake::Recording;

    fn state(json: serde_json::Value) -> State {
        serde_json::from_value(json).expect("a state")
    }

    fn adopted() -> serde_json::Value {
        serde_json::json!({
            "version": 1,
            "node": "n1",
            "mode": "adopted",
            "settings": {"ports": {"store": 15432, "bus": 5672, "broker_management": 15672,
                                   "registry": 5000, "hub": 51820}},
            "declaration": {"version": 1, "node": "n1", "mode": "adopted",
                "settings": {"ports": {"store": 15432, "bus": 5672, "broker_management": 15672,
                                       "registry": 5000, "hub": 51820}},
                "resources": []}
        })
    }

    #[test]
    fn an_adopted_node_loads_its_guard_from_the_settings_when_none_was_recorded() {
        let Load::Guard(spec) = load_for(&state(adopted())).unwrap() else {
            panic!("a guard");
        };
        let ports: Vec<u16> = spec.ports.iter().map(|p| p.host_port).collect();
        assert_eq!(ports, [15432, 15672]);
        assert!(spec.runtimes.is_empty());
    }

    #[test]
    fn a_store_without_a_declaration_loads_nothing() {
        let s = state(serde_json::json!({"version": 1}));
        assert!(matches!(load_for(&s), Ok(Load::Nothing(_))));
    }

    #[test]
    fn a_finished_flip_loads_the_recorded_filter_and_not_the_guard() {
        let mut j = adopted();
        j["flip"] = serde_json::json!({"stage": "done", "retired": [], "units": [], "ssh": [22]});
        let without = load_for(&state(j.clone())).unwrap();
        let Load::Filter(made) = without else {
            panic!("a filter");
        };
        assert_eq!(made.ssh, [22]);
        let mut recorded = made.clone();
        recorded.bridges = vec!["docker0".into()];
        let mut s = state(j);
        s.boot = Some(store::Boot {
            guard: None,
            filter: Some(recorded.clone()),
        });
        assert_eq!(load_for(&s).unwrap(), Load::Filter(recorded));
    }

    #[test]
    fn an_unreadable_store_fails_closed_on_the_default_ports() {
        let dir = tempfile::tempdir().unwrap();
        let store = store::store_dir(dir.path());
        std::fs::create_dir_all(&store).unwrap();
        std::fs::write(store.join("state.json"), b"{ not json").unwrap();
        let fw = Recording::default();
        let booted = boot(dir.path(), &mut fw.clone());
        let why = booted.failed.expect("failed closed");
        assert!(why.contains("reading the store"), "{why}");
        let written = fw.guards.borrow();
        assert_eq!(written.len(), 1, "{written:?}");
        let ports: Vec<u16> = written[0].ports.iter().map(|p| p.host_port).collect();
        assert_eq!(ports, [5432, 15672]);
        assert_eq!(written[0].allowed, ["lo"]);
    }

    #[test]
    fn a_released_node_loads_nothing_and_says_it_was_released() {
        let dir = tempfile::tempdir().unwrap();
        let store = store::store_dir(dir.path());
        std::fs::create_dir_all(&store).unwrap();
        std::fs::write(store.join(store::RELEASED), b"{}").unwrap();
        let fw = Recording::default();
        let booted = boot(dir.path(), &mut fw.clone());
        assert!(booted.failed.is_none(), "{:?}", booted.failed);
        assert!(
            booted
                .lines
                .iter()
                .any(|l| l == "nothing to load: no store: the node was released"),
            "{:?}",
            booted.lines
        );
        assert!(fw.guards.borrow().is_empty(), "a guard was written");
    }
}
