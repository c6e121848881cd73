//! The removal phase, once per apply and only after every resource succeeded: the marked rules
//! of every opening no longer declared removed through the found firewall in one convergence,
//! whether or not the store remembers them (a lost store leaves marks the host can still
//! recognise as its own). Each removed opening's line and the sweep of stale marks are read from
//! this one result.

use super::{Error, NodeFirewall};
use firewall::{Opening, Scope};

/// What the one removal did: (mark, layer) of each marked rule removed, or why it failed (shared,
/// so every opening removed and the sweep fail with the one reason).
pub type Removed = Result<Vec<(String, String)>, std::sync::Arc<Error>>;

/// Removes every marked rule that is not of `declared` (the openings that stay): (mark, layer)
/// of each removed.
pub fn remove(
    fw: &mut dyn NodeFirewall,
    declared: &[Opening],
) -> Result<Vec<(String, String)>, Error> {
    fw.converge(declared, Scope::All)
        .map(|c| c.removed)
        .map_err(|e| e.doing("removing the openings no longer declared"))
}
