//! One driver per kind of found firewall, behind one trait: each reads its layers' tables for
//! placement and writes openings in its own terms. The engine picks the driver from a layer's
//! [`Backend`] and knows nothing of how a backend writes: `nftables.rs` for hand-written
//! rulesets, `iptables.rs` for both iptables variants, `firewalld.rs` (a policy and a zone of
//! the mesh's, over D-Bus) and `ufw.rs` (ufw's own commands). The last two converge an opening
//! as a whole in their own terms ([`Driver::converge_whole`]) rather than as rules the engine
//! places.

mod firewalld;
mod iptables;
mod nftables;
mod ufw;

pub use firewalld::{listen_for_reloads as firewalld_reloads, POLICY as FIREWALLD_POLICY};

use crate::detect::{Backend, Layer};
use crate::engine::{Converged, Scope};
use crate::error::{Error, Result};
use crate::exec::Exec;
use crate::netlink::{Batch, Family, Ruleset};
use crate::opening::Opening;
use crate::place::{Chains, Seen};
use crate::retire::Retired;
use crate::rules::Site;
use std::collections::BTreeMap;
use std::path::Path as FsPath;

/// One table of one backend: where a layer's chains live.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TableKey {
    pub backend: Backend,
    pub family: Family,
    pub table: String,
}

impl std::fmt::Display for TableKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} ({})", self.family, self.table, self.backend)
    }
}

/// How a marked rule is removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// By its nf_tables handle, which names this rule and no other.
    Handle(u64),
    /// By its own specification, as `iptables-save` printed it: `-D CHAIN SPEC` deletes a rule
    /// that matches it in full, mark included, so a rule inserted or removed by someone else
    /// since the listing is never deleted in its place (a rule number could be).
    Spec(Vec<String>),
}

/// One table read for placement: every chain's rules in order, each reduced to what placement
/// needs, with how to remove it.
#[derive(Debug, Clone, Default)]
pub struct TableView {
    pub seen: BTreeMap<String, Vec<Seen>>,
    pub how: BTreeMap<String, Vec<Removal>>,
    /// Per chain, the indices of the rules that are not the mesh's (see [`TableView::index`]).
    pub unmarked: BTreeMap<String, Vec<usize>>,
}

impl TableView {
    /// Indexes the rules that are not the mesh's, once, after reading.
    pub fn index(mut self) -> TableView {
        self.unmarked = self
            .seen
            .iter()
            .map(|(c, rules)| (c.clone(), crate::place::unmarked_of(rules)))
            .collect();
        self
    }
}

impl Chains for TableView {
    fn rules(&self, chain: &str) -> Option<&[Seen]> {
        self.seen.get(chain).map(Vec::as_slice)
    }

    fn unmarked(&self, chain: &str) -> Option<std::borrow::Cow<'_, [usize]>> {
        self.unmarked
            .get(chain)
            .map(|v| std::borrow::Cow::Borrowed(v.as_slice()))
    }
}

/// One change to a table.
#[derive(Debug, Clone)]
pub enum Change {
    /// Remove the marked rule at `index` of `chain`, which carries `mark`.
    Remove {
        chain: String,
        index: usize,
        mark: String,
        how: Removal,
    },
    /// Add an opening's rules to `chain`, before the rule at index `before` of the chain as
    /// read (the catch-all), or at its end.
    Add {
        chain: String,
        before: Option<usize>,
        opening: Opening,
        site: Site,
    },
}

/// What a driver may use: the ruleset listed for this convergence, the legacy tables as
/// detection read them moments before, the nf_tables batch every native change joins (sent once,
/// atomically, by the engine), and the child-process seam.
pub struct Cx<'a> {
    pub ruleset: &'a Ruleset,
    pub legacy_saves: &'a BTreeMap<(Family, String), String>,
    pub batch: &'a mut Batch,
    pub exec: &'a dyn Exec,
}

/// A kind of found firewall the host writes openings through. Both verbs are idempotent in
/// effect: reading changes nothing, and writing the changes computed from a fresh read leaves
/// the table as the plan says, whatever it held.
pub trait Driver {
    /// Reads one table: every chain, each rule reduced for placement, with how to remove it.
    fn read(&self, key: &TableKey, cx: &mut Cx<'_>) -> Result<TableView>;

    /// Writes one table's changes in this backend's own terms, as one transaction: a failure
    /// leaves the table as it was.
    fn write(
        &self,
        key: &TableKey,
        view: &TableView,
        changes: &[Change],
        cx: &mut Cx<'_>,
    ) -> Result<()>;

    /// How many rules an opening needs in a chain at `site` (one per source of its family).
    fn rules_for(&self, o: &Opening, site: Site) -> usize;

    /// Whether this kind keeps its openings in objects of its own (a policy's rules, ufw's rule
    /// list) that it orders itself: the engine then hands it every opening and its layers at
    /// once ([`Driver::converge_whole`]) instead of reading and placing per table.
    fn whole(&self) -> bool {
        false
    }

    /// For a kind that converges as a whole: how each opening crossing `layers` (all of this
    /// kind's) stands in each, and, with `write`, the changes that make it stand (marked
    /// things of openings not given removed only with [`Scope::All`]), read back after writing.
    /// Idempotent: a second call with the same openings changes nothing.
    fn converge_whole(
        &self,
        layers: &[Layer],
        openings: &[Opening],
        scope: Scope,
        write: bool,
        cx: &mut Cx<'_>,
    ) -> Result<Converged> {
        let _ = (layers, openings, scope, write, cx);
        Err(Error::Unsupported {
            reason: "this kind is converged per table".into(),
        })
    }

    /// This kind's found firewall on this machine, as its own boot configuration under `root`
    /// says and the running ruleset holds it, saved exactly enough for [`Driver::restore`] to
    /// put it back; `None` when this kind has nothing configured here. Reads only.
    fn survey(&self, root: &FsPath, cx: &mut Cx<'_>) -> Result<Option<Retired>> {
        let _ = (root, cx);
        Ok(None)
    }

    /// Takes what `saved` describes out of the running ruleset (native deletions join the
    /// caller's batch, so they land in one transaction with the derived filter), never writing
    /// its configuration. The caller has already kept `saved` somewhere durable, and keeps what
    /// this returns (the same parts, completed with exactly what was taken out) after it worked.
    fn retire(&self, saved: &Retired, cx: &mut Cx<'_>) -> Result<Retired> {
        let _ = cx;
        Err(Error::Unsupported {
            reason: format!("{} cannot be retired by this build", saved.backend),
        })
    }

    /// Puts back exactly what `saved` holds, as it was before [`Driver::retire`].
    fn restore(&self, saved: &Retired, cx: &mut Cx<'_>) -> Result<()> {
        let _ = cx;
        Err(Error::Unsupported {
            reason: format!("{} cannot be restored by this build", saved.backend),
        })
    }
}

/// The driver for a backend; `None` for a kind no driver speaks yet (its adoption is refused).
pub fn driver(backend: Backend) -> Option<&'static dyn Driver> {
    match backend {
        Backend::Nftables => Some(&nftables::Nftables),
        Backend::IptablesNft => Some(&iptables::Iptables { variant: "nft" }),
        Backend::IptablesLegacy => Some(&iptables::Iptables { variant: "legacy" }),
        Backend::Firewalld => Some(&firewalld::Firewalld),
        Backend::Ufw => Some(&ufw::Ufw),
    }
}

/// The regular files under `dir`, as paths under the machine's root: a backend's configuration,
/// named in what its survey saves.
fn collect_files(dir: &FsPath, root: &FsPath, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => collect_files(&p, root, out),
            Ok(t) if t.is_file() => {
                let rel = p.strip_prefix(root).unwrap_or(&p);
                out.push(format!("/{}", rel.display()).replace("//", "/"));
            }
            _ => {}
        }
    }
}
