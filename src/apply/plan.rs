//! The preview of an act (`apply FILE`, `reconcile`, `take`, `adopt`, `genesis` with
//! `--preview`): what an apply of one declaration would do to each resource, to each opening in
//! each layer of the found firewall, to the guard and to the node's mode, read from the store,
//! the machine and the found firewall and changing none of them.
//!
//! It makes each applier's decision with the applier's own `read` and `decide` (a file's bytes
//! and mode, a container's inspection, a service's status, a package's version, an action's
//! `verify`), reads an opening's presence per layer and its verdict through the evaluator, and
//! says it in the outcome the act would report (`created`, `changed`, `held`, `removed`, …), so
//! a preview and the act that follows it name the same resources with the same verbs. The store is read with
//! [`store::peek`] (no lock, nothing created); nothing here calls a recording method of `Cx`.
//! An action's `verify` is run, since it is the action's own read of whether its work is done.

mod diff;
mod shapes;
mod summary;

use super::safety::check_safety;
use super::Outcome;
use crate::declaration::{Declaration, Mode, Resource, Shape, Source};
use crate::node_firewall::{self, Transition};
use crate::store::{self, Owned, State};
use run::{Deadlined, Runner};
use serde::Serialize;
use shapes::{
    plan_action, plan_container, plan_directory, plan_file, plan_opening, plan_package,
    plan_service, removal,
};
use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::Path;
pub use summary::{thousands, Summary};

/// The exit code of a preview that found something the act would change.
pub const CHANGES_PENDING: u8 = 4;

/// What one act would do, resource by resource.
#[derive(Serialize, Debug, Clone)]
pub struct Plan {
    /// The act previewed: `apply`, `reconcile`, `take`, `adopt`, `genesis`.
    pub act: String,
    pub node: String,
    pub mode: &'static str,
    pub source: Source,
    /// Whether the act would change anything (the preview's exit code is then
    /// [`CHANGES_PENDING`]).
    pub pending: bool,
    /// How many resources each verb would meet, the unchanged ones among them.
    pub summary: Summary,
    /// The guard, on an adopted node with settings; `null` elsewhere.
    pub guard: Option<GuardPlan>,
    /// The flip or the return this act would make (see `converge --preview` for the flip's
    /// whole account); `null` when it makes neither.
    pub flip: Option<String>,
    /// Each resource the act would touch, in the order it would, with the outcome it would
    /// report.
    pub entries: Vec<Step>,
    /// Each declared opening, per layer of the found firewall: what would be written where, and
    /// what a new connection meets now.
    pub openings: Vec<OpeningPlan>,
    /// What the preview could not read (the found firewall, a runtime), so its account is
    /// partial there.
    pub unread: Vec<String>,
}

/// One resource's line.
#[derive(Serialize, Debug, Clone)]
pub struct Step {
    pub id: String,
    pub shape: Shape,
    pub key: String,
    /// The outcome the act would report for it.
    pub outcome: Outcome,
    /// The same as a verb: create, change, hold, release, remove, nothing, fail.
    pub verb: &'static str,
    pub detail: String,
    /// A changed file's content, from what is there to what is declared, as `diff -u` prints
    /// it (bounded: [`diff::MAX_SHOWN`] lines, the rest counted), or one line saying why it is
    /// not shown (binary, past the read bound); empty for anything else.
    pub diff: Vec<String>,
    /// A changed file's or directory's mode and ownership, one line each that would change
    /// (`mode 0644 → 0600`); empty when they stay.
    pub attributes: Vec<String>,
}

/// How the guard stands and what the act would do to it.
#[derive(Serialize, Debug, Clone)]
pub struct GuardPlan {
    /// The guard's table holds every rule the settings call for, and its netfilter BPF layer is
    /// pinned and attached.
    pub in_force: bool,
    /// The guard's table holds every rule the settings call for.
    pub table: bool,
    /// Its netfilter BPF layer is pinned under the root with all its links attached (`false`
    /// too where it cannot be loaded here, no bpffs or a kernel that refuses the program: the
    /// table then holds alone, as the act says, and `in_force` does not wait for it).
    pub bpf: bool,
    /// The ports it guards.
    pub ports: Vec<u16>,
    pub detail: String,
}

/// One declared opening through the found firewall.
#[derive(Serialize, Debug, Clone)]
pub struct OpeningPlan {
    pub id: String,
    /// The found firewall's kind.
    pub kind: String,
    pub layers: Vec<LayerPlan>,
    /// What a new connection meets now, computed through every layer by the evaluator; `null`
    /// when the evaluator could not say.
    pub verdict_now: Option<String>,
}

/// One layer's part of an opening.
#[derive(Serialize, Debug, Clone)]
pub struct LayerPlan {
    pub layer: String,
    pub chain: Option<String>,
    /// How it stands now (`present`, `missing`, `no rule needed: …`, `refused by …`).
    pub now: String,
    /// Whether the act would write the opening's rule there.
    pub writes: bool,
}

/// The verb a person reads for an outcome the act would report.
pub fn verb(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Created => "create",
        Outcome::Changed => "change",
        Outcome::Unchanged => "nothing",
        Outcome::Removed => "remove",
        Outcome::Held | Outcome::ChangedBySomethingElse => "hold",
        Outcome::Forgotten => "release",
        Outcome::Failed => "fail",
    }
}

/// Why a preview could not be made: the act itself would be refused (exit 2 or 3).
#[derive(Debug, thiserror::Error)]
#[error("{why}")]
pub struct Refused {
    pub code: u8,
    pub why: String,
    /// Refused only for the found containers modules still hold ([`super::refusals`]), which
    /// `converge --preview` lists itself.
    pub held: bool,
}

/// Everything a preview reads with: the machine under `root`, its programs through `runner`.
struct Reading<'a> {
    root: &'a Path,
    runner: &'a dyn Runner,
    state: &'a State,
    decl: &'a Declaration,
}

impl Reading<'_> {
    fn machine(&self, path: &str) -> std::path::PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }
}

/// Previews an apply of `decl` from `source` for `act`: refused as the act would be, or what it
/// would do.
pub fn plan(
    root: &Path,
    runner: &dyn Runner,
    act: &str,
    decl: &Declaration,
    source: Source,
) -> Result<Plan, Refused> {
    plan_through(
        &node_firewall::kernel_reader,
        root,
        runner,
        act,
        decl,
        source,
    )
}

/// [`plan`] with the node's firewall read through what `open` gives for the node and its
/// deadlines: the kernel's, or the recording fake in unit tests.
pub fn plan_through(
    open: node_firewall::OpenRead<'_>,
    root: &Path,
    runner: &dyn Runner,
    act: &str,
    decl: &Declaration,
    source: Source,
) -> Result<Plan, Refused> {
    let state = store::peek(root)
        .map_err(|e| Refused {
            code: 1,
            why: e.to_string(),
            held: false,
        })?
        .unwrap_or_default();
    super::refuse_beforehand(root, decl)
        .and_then(|()| check_safety(&state, decl))
        .map_err(|e| Refused {
            code: match e {
                super::ApplyError::Refused(_) => 2,
                _ => 3,
            },
            why: e.to_string(),
            held: matches!(e, super::ApplyError::NotYet { .. }),
        })?;
    let deadlines = decl
        .settings
        .as_ref()
        .or(state.settings.as_ref())
        .and_then(|s| s.deadlines)
        .unwrap_or_default();
    let runner = Deadlined { runner, deadlines };
    let settings = decl.settings.clone().or_else(|| state.settings.clone());
    let mut plan = Plan::empty(act, &decl.node, decl.mode.as_str(), source);
    let mut fw = open(root, &decl.node, deadlines);
    if decl.touches_firewall() {
        if let Ok(Some(other)) = fw.claimed_by() {
            if other != decl.node {
                return Err(Refused {
                    held: false,
                    code: 3,
                    why: node_firewall::Error::Claimed {
                        other,
                        node: decl.node.clone(),
                    }
                    .to_string(),
                });
            }
        }
    }
    if decl.mode == Mode::Adopted {
        if let Some(s) = &settings {
            plan.guard = Some(guard(fw.as_mut(), s, decl));
        }
    }
    plan.flip = match super::transition(&state, decl) {
        Transition::Flip => Some(
            "flip: the derived filter would be loaded in place of the guard and the found \
             firewall retired (`mesh-host converge --preview` says what closes)"
                .into(),
        ),
        Transition::Return => Some(
            "return: the guard would be put back, the found firewall restored as saved and \
             the derived filter unloaded"
                .into(),
        ),
        Transition::Stay => None,
    };
    let r = Reading {
        root,
        runner: &runner,
        state: &state,
        decl,
    };
    let declared: HashSet<&str> = decl.resources.iter().map(Resource::id).collect();
    for res in &decl.resources {
        // A resource moved to another path or name: what the host made at the old one goes.
        if let Some(old) = state
            .owned(res.id())
            .filter(|o| o.key != res.key() || o.shape != res.shape())
        {
            let (o, d) = removal(&r, old);
            plan.push(
                old,
                o,
                format!("{d} (moved to {} {})", res.shape(), res.key()),
            );
        }
        let mut shown = Shown::default();
        let (outcome, detail) = match res {
            Resource::File(f) => {
                let (o, d, s) = plan_file(&r, f);
                shown = s;
                (o, d)
            }
            Resource::Directory(d) => {
                let (o, d, s) = plan_directory(&r, d);
                shown = s;
                (o, d)
            }
            Resource::Action(a) => plan_action(&r, a),
            Resource::Container(c) => plan_container(&r, c),
            Resource::Service(s) => plan_service(&r, s),
            Resource::Package(p) => plan_package(&r, p),
            Resource::Opening(o) => {
                let (outcome, detail, op) = plan_opening(&r, fw.as_mut(), o, settings.as_ref());
                if let Some(op) = op {
                    plan.openings.push(op);
                }
                (outcome, detail)
            }
        };
        plan.entries.push(Step {
            id: res.id().to_string(),
            shape: res.shape(),
            key: res.key(),
            outcome,
            verb: verb(outcome),
            detail,
            diff: shown.diff,
            attributes: shown.attributes,
        });
        if outcome == Outcome::Failed {
            break;
        }
    }
    if plan.entries.iter().all(|e| e.outcome != Outcome::Failed) {
        undeclared(&mut plan, &r, &declared);
    }
    plan.pending = pending(&plan, &state, decl);
    plan.summary = Summary::of(&plan.entries);
    Ok(plan)
}

/// What the act would do with what the store holds and `declared` no longer names: each held
/// resource released as found, each owned record removed (or forgotten), newest first.
fn undeclared(plan: &mut Plan, r: &Reading<'_>, declared: &HashSet<&str>) {
    let state = r.state;
    for h in state
        .held
        .iter()
        .filter(|h| !declared.contains(h.id.as_str()))
    {
        plan.entries.push(Step {
            id: h.id.clone(),
            shape: h.shape,
            key: h.key.clone(),
            outcome: Outcome::Forgotten,
            verb: "release",
            detail: format!(
                "held {} {} would be released: left exactly as it was found",
                h.shape, h.key
            ),
            diff: Vec::new(),
            attributes: Vec::new(),
        });
    }
    for rec in state
        .owned
        .iter()
        .rev()
        .filter(|o| !declared.contains(o.id.as_str()))
    {
        let (o, d) = removal(r, rec);
        plan.push(rec, o, d);
    }
}

/// Whether the act would change anything: the flip or the return, a guard not in force, a
/// resource not left as it is, a found resource newly held or taken over as it is (a record in
/// the store), or a declaration the store does not hold yet.
fn pending(plan: &Plan, state: &State, decl: &Declaration) -> bool {
    plan.flip.is_some()
    || plan.guard.as_ref().is_some_and(|g| !g.in_force)
    || plan
        .entries
        .iter()
        .any(|e| !matches!(e.outcome, Outcome::Unchanged | Outcome::Held))
    || plan
        .entries
        .iter()
        .any(|e| e.outcome == Outcome::Held && state.held_at(&e.id, &e.key).is_none())
    // Found and taken over as it is: nothing on the machine, but a record in the store.
    || plan
        .entries
        .iter()
        .any(|e| e.outcome == Outcome::Unchanged && state.owned(&e.id).is_none())
    || state.declaration.as_ref() != Some(decl)
}

/// What a preview shows of a change beside its line: the content's diff, the mode and owner.
#[derive(Default)]
pub(super) struct Shown {
    pub diff: Vec<String>,
    pub attributes: Vec<String>,
}

impl Plan {
    fn push(&mut self, rec: &Owned, outcome: Outcome, detail: String) {
        self.entries.push(Step {
            id: rec.id.clone(),
            shape: rec.shape,
            key: rec.key.clone(),
            outcome,
            verb: verb(outcome),
            detail,
            diff: Vec::new(),
            attributes: Vec::new(),
        });
    }

    /// An empty preview of `act` for `node`: where every preview starts, and what a preview
    /// whose act would be refused before any resource (genesis refused) says: the same keys as
    /// every plan.
    pub fn empty(act: &str, node: &str, mode: &'static str, source: Source) -> Plan {
        Plan {
            act: act.to_string(),
            node: node.to_string(),
            mode,
            source,
            pending: false,
            summary: Summary::default(),
            guard: None,
            flip: None,
            entries: Vec::new(),
            openings: Vec::new(),
            unread: Vec::new(),
        }
    }

    /// The summary line of this preview.
    pub fn summary_line(&self) -> String {
        let firewall = self.flip.as_deref().map(|f| {
            if f.starts_with("return") {
                "the return to the found firewall"
            } else {
                "the flip to the derived filter"
            }
        });
        self.summary
            .line(self.guard.as_ref().is_some_and(|g| !g.in_force), firewall)
    }

    /// The exit code of this preview: 0 when the act would change nothing, else
    /// [`CHANGES_PENDING`].
    pub fn exit_code(&self) -> u8 {
        if self.pending {
            CHANGES_PENDING
        } else {
            0
        }
    }

    /// The preview as a person reads it: every resource the act would touch, the unchanged
    /// ones folded into the summary's count unless `verbose`, and the summary line last.
    pub fn render(&self, verbose: bool) -> String {
        let mut out = self.render_body(verbose);
        out.push_str(&self.summary_line());
        out.push('\n');
        out
    }

    /// [`Plan::render`] without its summary line, for a preview that says its own (genesis).
    pub fn render_body(&self, verbose: bool) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "preview of {} for node {} ({}, from {}); nothing was changed",
            self.act,
            self.node,
            self.mode,
            self.source.as_str()
        );
        if let Some(g) = &self.guard {
            let _ = writeln!(out, "guard: {}", g.detail);
        }
        if let Some(f) = &self.flip {
            let _ = writeln!(out, "{f}");
        }
        let listed = |outcome: Outcome| verbose || outcome != Outcome::Unchanged;
        for e in self.entries.iter().filter(|e| listed(e.outcome)) {
            let verb = match e.outcome {
                Outcome::Unchanged => "unchanged".to_string(),
                _ => format!("would {}", e.verb),
            };
            let _ = writeln!(
                out,
                "{verb:<14} {:<24} {} {}: {}",
                e.id, e.shape, e.key, e.detail
            );
            for a in &e.attributes {
                let _ = writeln!(out, "    {a}");
            }
            for d in &e.diff {
                let _ = writeln!(out, "    {d}");
            }
        }
        for o in &self.openings {
            let unchanged = self
                .entries
                .iter()
                .any(|e| e.id == o.id && e.outcome == Outcome::Unchanged);
            if unchanged && !verbose {
                continue;
            }
            for l in &o.layers {
                let chain = l
                    .chain
                    .as_deref()
                    .map(|c| format!(" (chain {c})"))
                    .unwrap_or_default();
                let what = if l.writes { "would write" } else { "leaves" };
                let _ = writeln!(
                    out,
                    "  opening {}: {what} {}{chain}: now {}",
                    o.id, l.layer, l.now
                );
            }
            if let Some(v) = &o.verdict_now {
                let _ = writeln!(out, "  opening {}: a new connection now {v}", o.id);
            }
        }
        for u in &self.unread {
            let _ = writeln!(out, "not read: {u}");
        }
        if !verbose && self.summary.unchanged > 0 {
            let _ = writeln!(
                out,
                "({} unchanged not listed; --verbose lists them)",
                thousands(self.summary.unchanged)
            );
        }
        let s = &self.summary;
        let counted = s.create + s.change + s.hold + s.remove + s.release + s.fail > 0;
        let firewall = self.guard.as_ref().is_some_and(|g| !g.in_force) || self.flip.is_some();
        if self.pending && !counted && !firewall {
            // Nothing on the machine changes, but the store's records would: a new declaration
            // stored, a found resource recorded as taken over.
            let _ = writeln!(
                out,
                "the store would record the declaration; nothing on the machine changes"
            );
        }
        out
    }
}

/// The guard the settings call for beside the guard's two layers as they stand: its table in
/// nf_tables and its netfilter BPF layer pinned under `root` (read from the pins, so a table
/// flushed by a reload is said apart from the BPF layer that held through it).
fn guard(
    fw: &mut dyn node_firewall::NodeFirewallRead,
    settings: &crate::declaration::Settings,
    decl: &Declaration,
) -> GuardPlan {
    let spec = node_firewall::guard_spec(settings, &decl.resources);
    let ports = vec![settings.ports.store, settings.ports.broker_management];
    // The marks of the rules refusing each port on the node's own addresses, as the guard's
    // table writes them (its rules for the runtime's bridges are read by `firewall status`).
    let want: Vec<String> = spec
        .ports
        .iter()
        .map(|p| {
            format!(
                "mesh-host:guard/{}/{}/{}",
                p.what,
                p.proto.as_str(),
                p.host_port
            )
        })
        .collect();
    let (table, table_words) = match fw.guard_status() {
        Ok(st) if st.present && st.plain && want.iter().all(|m| st.rules.contains(m)) => (
            true,
            format!(
                "table inet mesh_host in force ({} rules); would be checked again",
                st.rules.len()
            ),
        ),
        Ok(st) if st.present => (
            false,
            "table inet mesh_host differs from what the settings call for; would be written again"
                .to_string(),
        ),
        Ok(_) => (
            false,
            format!(
                "table inet mesh_host not in force; would be written (refusing ports {} and {} \
                 from outside)",
                ports[0], ports[1]
            ),
        ),
        Err(node_firewall::Error::NoNfTables) => (
            false,
            "no nf_tables socket; table inet mesh_host would be written".into(),
        ),
        Err(e) => (
            false,
            format!("table inet mesh_host unreadable ({e}); would be written"),
        ),
    };
    let (bpf, needed, bpf_words) = bpf_layer(fw);
    GuardPlan {
        in_force: table && (bpf || !needed),
        table,
        bpf,
        ports,
        detail: format!("{table_words}; {bpf_words}"),
    }
}

/// The guard's netfilter BPF layer as pinned under the node's root: whether it stands, whether
/// the act would load it (not where it cannot be loaded at all, which the act says in its own
/// line and cannot change), and its clause.
fn bpf_layer(fw: &mut dyn node_firewall::NodeFirewallRead) -> (bool, bool, String) {
    let pins = fw.bpf_pins();
    if !fw.bpffs() {
        return (
            false,
            false,
            format!(
                "no bpffs at {}, so no netfilter BPF layer here (the table holds alone)",
                pins.fs.display()
            ),
        );
    }
    match fw.bpf_pinned() {
        Ok(st) if st.holds() => (
            true,
            true,
            format!(
                "its netfilter BPF layer pinned at {} with {} links attached; would be checked \
                 again",
                pins.dir.display(),
                st.links.len()
            ),
        ),
        Ok(st) => match fw.bpf_supported() {
            Ok(()) => (
                false,
                true,
                format!(
                    "its netfilter BPF layer {}; would be written",
                    if st.program.is_some() {
                        format!(
                            "pinned with {} of {} links attached",
                            st.links.len(),
                            node_firewall::bpf::HOOKS.len()
                        )
                    } else {
                        "not pinned".to_string()
                    }
                ),
            ),
            Err(e) => (
                false,
                false,
                format!("no netfilter BPF layer: this kernel refuses the program ({e})"),
            ),
        },
        Err(e) => (
            false,
            true,
            format!("its netfilter BPF layer unreadable ({e}); would be written"),
        ),
    }
}

#[cfg(test)]
mod tests;
