//! The node's own firewall as the core drives it: one port ([`NodeFirewall`]) with the kernel's
//! implementation and a recording fake, and the phases an apply enters it by, each once, each a
//! straight line through its own files that never comes back to one it left:
//! 1. the guard ([`guard::early`]), on an adopted node before the store is opened;
//! 2. before the resources ([`before::before_resources`]): the flip's saving of the found
//!    firewall, the store's record of the declaration, the flip or the return, the derived filter;
//! 3. the openings ([`openings::converge`]), all at once;
//! 4. the removal of openings no longer declared and of stale marks ([`removal::remove`]), once;
//! 5. with `--confirm`, the kernel asked about every declared opening ([`confirm::confirm`]).
//!
//! The resident host puts things back through the same port ([`put_back`], [`recheck`]).
//! Every phase returns a typed outcome; the apply loop turns outcomes into its report. Nothing
//! here knows the apply loop: the dependency runs one way, `apply` → `node_firewall` →
//! `firewall`; the declaration's openings are put in the firewall crate's terms by
//! `declaration::openings`, before they reach a phase.

pub mod before;
pub mod confirm;
#[cfg(test)]
pub(crate) mod fake;
mod flip;
pub mod guard;
mod kernel;
pub mod openings;
pub mod outcome;
mod read;
pub mod removal;
mod restore;
pub mod save;
pub mod spec;
#[cfg(test)]
mod tests;

pub use before::before_resources;
pub use guard::{guard_spec, with_bridges, Guarded, LAYERS_BOTH, LAYERS_TABLE_ALONE};
pub use kernel::{legacy_fingerprint, legacy_in_force, Kernel};
pub use openings::{NotAdmitted, Openings};
pub use outcome::{FilterSaid, FlipSaid, GuardSaid, GuardWritten};
pub use read::{
    firewalld_reloads, kernel_reader, Change, Generation, Held, LegacyAhead, Monitor,
    NodeFirewallRead, OpenRead,
};

// The firewall crate's plain terms, handed on from `firewall_terms.rs` so the commands and the
// apply loop name them from here as before.
pub use crate::firewall_terms::*;

use crate::briefing::Mark;
use crate::declaration::Declaration;
use crate::store::{Store, StoreError};
use run::Runner;
use std::path::Path;

/// What the core asks of the node's firewall. The kernel's implementation ([`Kernel`]) opens the
/// found firewall on first use, for one node, whose name the mesh's table records; the fake
/// records each call and answers from a script.
pub trait NodeFirewall: NodeFirewallRead {
    /// The guard's table (`inet mesh_host`) as `spec` says.
    fn guard_table(&mut self, spec: &GuardSpec) -> Result<firewall::GuardReport, Error>;
    /// The guard's netfilter BPF layer as `spec` says, pinned under the node's root.
    fn guard_bpf(&mut self, spec: &GuardSpec) -> Result<firewall::bpf::BpfReport, Error>;
    /// Removes the guard's BPF layer; whether one was pinned.
    fn remove_guard_bpf(&mut self) -> Result<bool, Error>;
    /// Removes the mesh's table whole (the guard's chain, the claim); whether there was one.
    fn remove_guard_table(&mut self) -> Result<bool, Error>;
    /// The marked rules of `openings` in force through the found firewall.
    fn converge(&mut self, openings: &[Opening], scope: Scope) -> Result<Converged, Error>;
    /// Whether the derived filter `spec` is loaded exactly.
    fn filter_in_force(&mut self, spec: &FilterSpec) -> Result<bool, Error>;
    /// The derived filter `spec` loaded; whether it had to be written.
    fn ensure_filter(&mut self, spec: &FilterSpec) -> Result<bool, Error>;
    /// The derived filter unloaded; whether one was loaded.
    fn remove_filter(&mut self) -> Result<bool, Error>;
    /// The found firewall, saved as it is now (what a flip retires).
    fn survey(&mut self) -> Result<Vec<Retired>, Error>;
    /// The derived filter loaded and `saved` retired, in one transaction where nf_tables allows;
    /// what was retired, and whether the guard went in the same transaction.
    fn flip(&mut self, spec: &FilterSpec, saved: &[Retired])
        -> Result<(Vec<Retired>, bool), Error>;
    /// The found firewall put back exactly as `saved`; `start` runs first, after the ruleset is
    /// listed, and starts the daemons of the return (firewalld): the restore then waits, to a
    /// deadline, until the container runtime has written again every rule that listing held.
    fn unflip(
        &mut self,
        saved: &[Retired],
        start: &mut dyn FnMut() -> Result<(), Error>,
    ) -> Result<(), Error>;
    /// The bridges the container runtime reports (asked through `runner`) that are bridges among
    /// `interfaces`: the only interfaces besides loopback and the private network's that the guard
    /// lets through and the derived filter forwards from.
    fn runtime_bridges(
        &mut self,
        runner: &dyn Runner,
        interfaces: &[::genesis::inventory::Interface],
    ) -> Vec<String>;
}

/// Why the node's firewall did not do what was asked, naming what it was doing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The found firewall could not be read at all.
    #[error("reading the found firewall: {0}")]
    Unreadable(#[source] firewall::Error),
    #[error("the kernel has no nf_tables")]
    NoNfTables,
    #[error(transparent)]
    Kernel(#[from] firewall::Error),
    /// One step of a phase failed; `doing` says which.
    #[error("{doing}: {source}")]
    Step {
        doing: String,
        #[source]
        source: Box<Error>,
    },
    /// The service manager refused a boot unit of the found firewall.
    #[error("{doing} {unit} (the found firewall's boot unit): {why}")]
    Unit {
        doing: &'static str,
        unit: String,
        why: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Untranslatable(#[from] crate::declaration::openings::Untranslatable),
    /// The flip cannot save what it would retire, so the node is not converged.
    #[error("node {node:?} cannot be converged: {source}")]
    NotConvergeable {
        node: String,
        #[source]
        source: Box<Error>,
    },
    /// What the declaration asks cannot be put in the firewall's terms.
    #[error("{0}")]
    Declared(String),
    /// Another node's marked rules are in force here.
    #[error(
        "the firewall on this machine carries the marked rules of node {other:?} (table inet \
             mesh_host, chain claim), and this store is node {node:?}: a second store must not \
             converge over another node's rules, so nothing was changed. If this is the wrong \
             --root, use the right one; if node {other:?} is gone from this machine, run `nft \
             delete chain inet mesh_host claim` and apply again"
    )]
    Claimed { other: String, node: String },
    /// The guard's table could not be written; `layers` says how its BPF layer stands.
    #[error("{table}; {layers}")]
    Guard {
        #[source]
        table: Box<Error>,
        layers: outcome::BpfLayer,
    },
    /// The one convergence (or the one removal) of the apply's openings failed, so each opening
    /// fails with it.
    #[error("opening {id}: {source}")]
    Opening {
        id: String,
        #[source]
        source: std::sync::Arc<Error>,
    },
}

impl Error {
    /// Whether this is the firewall refusing the act before it writes anything: another node's
    /// claim, a flip that cannot save what it would retire, a declaration it cannot put in its
    /// terms. Any other error is a failure, which may come after something was written.
    pub fn is_refusal(&self) -> bool {
        match self {
            Error::Claimed { .. }
            | Error::NotConvergeable { .. }
            | Error::Declared(_)
            | Error::Untranslatable(_) => true,
            Error::Step { source, .. } => source.is_refusal(),
            _ => false,
        }
    }

    /// This error as the failure of `doing`.
    pub fn doing(self, doing: impl Into<String>) -> Error {
        Error::Step {
            doing: doing.into(),
            source: Box::new(self),
        }
    }
}

/// Opens the node's firewall for an apply of a declaration: the kernel's, or a fake in unit tests.
pub type Open<'a> = &'a dyn Fn(&Path, &Declaration) -> Box<dyn NodeFirewall>;

/// The kernel's firewall for `decl`'s node under `root`, its programs within the declaration's
/// deadlines: what the binary's apply uses.
pub fn kernel(root: &Path, decl: &Declaration) -> Box<dyn NodeFirewall> {
    let deadlines = decl
        .settings
        .as_ref()
        .and_then(|s| s.deadlines)
        .unwrap_or_default();
    Box::new(Kernel::new(root, &decl.node, deadlines))
}

/// What an apply of a declaration does to the node's firewall, given what the store says (the
/// apply decides it: `apply::safety::transition`).
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

/// What the node's firewall phase before the resources did, for the report and the resident
/// host's memo.
#[derive(Debug, Default)]
pub struct Before {
    /// What the guard's layers did, on an adopted node with settings.
    pub guard: Option<Result<GuardWritten, Error>>,
    /// How the declared private network's interface stands.
    pub private: Option<(Mark, String)>,
    /// What the flip or the return did (or a derived filter removed from an adopted node).
    pub flip: Option<FlipSaid>,
    /// How the derived filter stands, on a flipped node.
    pub filter: Option<FilterSaid>,
    /// The step that failed, which stops the resources: (step, what, why).
    pub failed: Option<(&'static str, &'static str, String)>,
    /// The guard in force, for the memo.
    pub guard_spec: Option<GuardSpec>,
    /// The derived filter in force, for the memo.
    pub filter_spec: Option<FilterSpec>,
    /// The ruleset is at the generation the last apply of this very declaration left it at, so
    /// nothing of it is listed.
    pub unchanged: Option<Generation>,
}

/// Everything the phase before the resources needs from the apply.
pub struct Node<'a> {
    pub fw: &'a mut dyn NodeFirewall,
    pub runner: &'a dyn Runner,
    pub store: &'a mut Store,
    /// The store must be written before the firewall changes: the declaration's record differs
    /// from the store's.
    pub record: bool,
}

/// What the resident host keeps from an apply, to put the firewall back at once when the
/// ruleset changes under it: the guard written and the openings converged, for this declaration.
#[derive(Debug, Clone)]
pub struct Memo {
    pub declaration: Declaration,
    pub guard: Option<GuardSpec>,
    pub openings: Vec<Opening>,
    /// The derived filter, on a flipped node.
    pub filter: Option<FilterSpec>,
}

/// What a re-check put back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PutBack {
    pub guard_written: bool,
    /// How many openings (or the derived filter) had to be written again.
    pub openings: usize,
}

/// The guard, the derived filter and the openings of `memo` put back through `fw`, nothing
/// else: what the resident host does when another program changed the ruleset.
pub fn recheck(fw: &mut dyn NodeFirewall, memo: &Memo) -> Result<PutBack, Error> {
    let mut done = PutBack::default();
    if let Some(spec) = &memo.guard {
        fw.know_runtime_bridges(&spec.runtimes);
    }
    if let Some(spec) = &memo.filter {
        fw.know_runtime_bridges(&spec.bridges);
    }
    if let Some(spec) = &memo.guard {
        done.guard_written = guard::write(fw, spec)?.table_written();
    }
    if let Some(spec) = &memo.filter {
        let written = fw
            .ensure_filter(spec)
            .map_err(|e| e.doing("re-checking the derived filter"))?;
        done.openings += usize::from(written);
    }
    if !memo.openings.is_empty() {
        let c = fw
            .converge(&memo.openings, Scope::Given)
            .map_err(|e| e.doing("re-checking the openings"))?;
        done.openings = c.added.len() + c.removed.len();
    }
    Ok(done)
}

/// The resident host's immediate restore, within milliseconds of a foreign change: the guard's
/// table (never its BPF layer, which no ruleset change touches) and, when it is gone, the
/// derived filter. Only when gone: a guard beside a filter in force is `mesh-host adopt`
/// putting the guard back before it opens the store, and ensuring the filter then would delete
/// that guard, so that the return's unloading of the filter left neither. Each part's result:
/// whether it had to be written.
pub fn put_back(
    fw: &mut dyn NodeFirewall,
    guard: Option<&GuardSpec>,
    filter: Option<&FilterSpec>,
) -> Vec<(&'static str, Result<bool, Error>)> {
    let mut out = Vec::new();
    if let Some(spec) = guard {
        out.push(("guard", fw.guard_table(spec).map(|r| r.changed)));
    }
    if let Some(spec) = filter {
        let r = match fw.filter_in_force(spec) {
            Ok(true) => Ok(false),
            _ => fw.ensure_filter(spec),
        };
        out.push(("derived filter", r));
    }
    out
}
