//! The safety rules an apply checks before anything changes (one store per node, the
//! foundation's ports fixed at genesis, no flip while a found container is still held), and the
//! transition an apply makes of the node's firewall, decided from what the store says.

use super::ApplyError;
use crate::declaration::{Declaration, Mode, Shape};
use crate::node_firewall::Transition;
use crate::store::{self, FlipStage, State};

/// What an apply of `decl` does to the node's firewall, given what the store says.
pub fn transition(state: &State, decl: &Declaration) -> Transition {
    match (decl.mode, &state.flip) {
        (Mode::Converged, Some(f)) if f.stage == FlipStage::Saved => Transition::Flip,
        (Mode::Converged, None) if state.mode == Some(Mode::Adopted) => Transition::Flip,
        (Mode::Adopted, Some(_)) => Transition::Return,
        _ => Transition::Stay,
    }
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

pub(crate) fn check_safety(state: &store::State, decl: &Declaration) -> Result<(), ApplyError> {
    if let Some(node) = &state.node {
        if *node != decl.node {
            return Err(ApplyError::Safety(format!(
                "this store belongs to node {node:?}; a declaration for node {:?} is refused",
                decl.node
            )));
        }
    }
    if let (Some(have), Some(want)) = (&state.settings, &decl.settings) {
        if have.ports != want.ports {
            return Err(ApplyError::Safety(format!(
                "the foundation's ports are this node's settings, fixed at genesis ({}); a \
                 declaration with other ports ({}) would move them back, and is refused",
                ports_text(&have.ports),
                ports_text(&want.ports)
            )));
        }
    }
    let refused = refusals(state, decl);
    if !refused.is_empty() {
        return Err(ApplyError::NotYet {
            node: decl.node.clone(),
            refusals: refused,
        });
    }
    Ok(())
}

/// The ports as the operator writes them in `settings.ports`, in that order.
fn ports_text(p: &crate::declaration::Ports) -> String {
    format!(
        "store {}, bus {}, broker_management {}, registry {}, hub {}",
        p.store, p.bus, p.broker_management, p.registry, p.hub
    )
}
