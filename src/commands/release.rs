//! `mesh-host release` on the node itself, for a node that was never enrolled: the stored node's
//! declaration of nothing, marked a release, carried out by `release::carry_out` as a release
//! from the link is; an enrolled node is refused.

use crate::declaration::{Declaration, Mode};
use crate::store::{self, StoreError};
use std::path::Path;

/// The release of this node asked on the node itself (`mesh-host release`), for a node that was
/// never enrolled (raised by genesis, or applied by hand): the stored node's declaration of
/// nothing, marked a release. An enrolled node is refused (exit 3): its controller releases
/// it over the link, or it would go on counting a node that is gone.
pub fn local(root: &Path) -> Result<Result<Declaration, (u8, String)>, StoreError> {
    let Some(state) = store::peek(root)? else {
        return Ok(Err((
            3,
            format!(
                "there is no store at {}: nothing was applied here, so there is nothing to give back",
                store::store_dir(root).display()
            ),
        )));
    };
    let Some(node) = state.node.clone() else {
        return Ok(Err((
            3,
            "the store names no node: nothing was applied here".to_string(),
        )));
    };
    // A link's state that cannot be read is still an enrolment: refused the same way.
    if !matches!(crate::link::load(root), Ok(None)) {
        return Ok(Err((
            3,
            format!(
                "node {node:?} is enrolled ({}): its release comes from the controller over the \
                 link, which then stops counting it",
                crate::link::link_file(root).display()
            ),
        )));
    }
    Ok(Ok(Declaration {
        version: 1,
        node,
        mode: state.mode.unwrap_or(Mode::Adopted),
        taken: Vec::new(),
        settings: state.settings.clone(),
        resources: Vec::new(),
        release: true,
        recovered: Vec::new(),
    }))
}

/// What a local release leaves as the store's [`store::RELEASED`]: the node's name and when,
/// with no controller (no enrolment to replay declarations from).
pub fn local_marker(node: &str) -> Vec<u8> {
    let marker = crate::link::ReleasedIdentity {
        node: node.to_string(),
        controller: String::new(),
        last_version: 0,
        released_at: ::link::now_secs(),
    };
    serde_json::to_vec_pretty(&marker).expect("json")
}
