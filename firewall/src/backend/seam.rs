//! The seams a kind of found firewall answers, one trait per protocol: [`Detect`] (whether it
//! wrote a table), [`TableDriver`] (nftables, iptables: read a table, write its changes, which
//! the engine places) or [`WholeDriver`] (firewalld, ufw: converge every opening in its own
//! terms), and [`Retire`] (survey, retire and restore on the flip and return). Also what a driver
//! is handed ([`Cx`]) and the tables the engine and a table driver speak of.

use crate::error::Result;
use crate::found::{Backend, Layer};
use crate::netlink::{Batch, Family, Ruleset};
use crate::opening::Opening;
use crate::outcome::{Converged, Scope};
use crate::retire::Retired;
use crate::rules::Site;
use run::Runner;
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

/// One table read for the engine's plan: per chain, each rule's mesh mark (if it carries one)
/// and how to remove it, in order. What the rules do is the evaluator's to read
/// ([`crate::eval::Model`]), never the driver's.
#[derive(Debug, Clone, Default)]
pub struct TableView {
    pub marks: BTreeMap<String, Vec<Option<String>>>,
    pub how: BTreeMap<String, Vec<Removal>>,
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
    pub exec: &'a dyn Runner,
}

/// How a kind tells its own layers apart: detection asks each kind in its order and the first
/// that says it wrote a table is that table's writer.
pub trait Detect {
    /// Whether this kind wrote the nf_tables table `family table` that holds the base chain
    /// `chain`, and if so why the host thinks so (the layer's evidence).
    fn wrote(&self, ruleset: &Ruleset, family: Family, table: &str, chain: &str) -> Option<String>;

    /// Whether this kind wrote a legacy x_tables table whose chains are `chains`, as its
    /// `iptables-legacy-save` lists them.
    fn wrote_legacy(&self, chains: &[&str]) -> bool;

    /// Why openings cannot be written in this kind's terms through `layer` on this machine (a
    /// program it needs is not installed), when they cannot.
    fn refusal(&self, layer: &Layer, exec: &dyn Runner) -> Option<String> {
        let _ = (layer, exec);
        None
    }
}

/// A kind whose openings are rules in its tables, which the engine reads, places and writes per
/// table. Both verbs are idempotent in effect: reading changes nothing, and writing the changes
/// computed from a fresh read leaves the table as the plan says, whatever it held.
pub trait TableDriver {
    /// Reads one table: every chain, each rule's mesh mark, with how to remove it.
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
}

/// A kind that keeps its openings in objects of its own (a policy's rules, ufw's rule list) that
/// it orders itself: the engine hands it every opening and its layers at once instead of reading
/// and placing per table.
pub trait WholeDriver {
    /// How each opening crossing `layers` (all of this kind's) stands in each, and, with
    /// `write`, the changes that make it stand (marked things of openings not given removed only
    /// with [`Scope::All`]), read back after writing. Idempotent: a second call with the same
    /// openings changes nothing.
    fn converge(
        &self,
        layers: &[Layer],
        openings: &[Opening],
        scope: Scope,
        write: bool,
        cx: &mut Cx<'_>,
    ) -> Result<Converged>;
}

/// Retiring a kind's found firewall on the flip and putting it back on return (see
/// [`crate::retire`]).
pub trait Retire {
    /// This kind's found firewall on this machine, as its own boot configuration under `root`
    /// says and the running ruleset holds it, saved exactly enough for [`Retire::restore`] to
    /// put it back; `None` when this kind has nothing configured here. Reads only.
    fn survey(&self, root: &FsPath, cx: &mut Cx<'_>) -> Result<Option<Retired>>;

    /// Takes what `saved` describes out of the running ruleset (native deletions join the
    /// caller's batch, so they land in one transaction with the derived filter), never writing
    /// its configuration. The caller has already kept `saved` somewhere durable, and keeps what
    /// this returns (the same parts, completed with exactly what was taken out) after it worked.
    fn retire(&self, saved: &Retired, cx: &mut Cx<'_>) -> Result<Retired>;

    /// Puts back exactly what `saved` holds, as it was before [`Retire::retire`].
    fn restore(&self, saved: &Retired, cx: &mut Cx<'_>) -> Result<()>;
}

/// How a kind converges openings.
#[derive(Clone, Copy)]
pub enum Converger {
    /// As rules the engine places in its tables.
    Table(&'static dyn TableDriver),
    /// As a whole, in its own terms.
    Whole(&'static dyn WholeDriver),
}

/// Everything the crate asks of one kind of found firewall, each seam answered by its driver.
#[derive(Clone, Copy)]
pub struct Kind {
    pub detect: &'static dyn Detect,
    pub converge: Converger,
    pub retire: &'static dyn Retire,
}
