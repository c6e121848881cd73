//! The preview of an act (`apply FILE`, `reconcile`, `take`, `adopt`, `genesis` with
//! `--preview`): what an apply of one declaration would do to each resource, to each opening in
//! each layer of the found firewall, to the guard and to the node's mode, read from the store,
//! the machine and the found firewall and changing none of them.
//!
//! It makes each applier's decision again from what the appliers read (a file's bytes and mode,
//! a container's inspection, a service's status, a package's version, an action's `verify`, an
//! opening's presence per layer and its verdict through the evaluator), and says it in the
//! outcome the act would report (`created`, `changed`, `held`, `removed`, …), so a preview and
//! the act that follows it name the same resources with the same verbs. The store is read with
//! [`store::peek`] (no lock, nothing created); nothing here calls a recording method of `Cx`.
//! An action's `verify` is run, since it is the action's own read of whether its work is done.

mod shapes;

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
    /// The guard, on an adopted node with settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guard: Option<GuardPlan>,
    /// The flip or the return this act would make (see `converge --preview` for the flip's
    /// whole account).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flip: Option<String>,
    /// Each resource the act would touch, in the order it would, with the outcome it would
    /// report.
    pub entries: Vec<Step>,
    /// Each declared opening, per layer of the found firewall: what would be written where, and
    /// what a new connection meets now.
    pub openings: Vec<OpeningPlan>,
    /// What the preview could not read (the found firewall, a runtime), so its account is
    /// partial there.
    #[serde(skip_serializing_if = "Vec::is_empty")]
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
    /// The same as a verb: create, change, hold, release, remove, forget, nothing, fail.
    pub verb: &'static str,
    pub detail: String,
}

/// How the guard stands and what the act would do to it.
#[derive(Serialize, Debug, Clone)]
pub struct GuardPlan {
    /// The guard's table holds every rule the settings call for.
    pub in_force: bool,
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
    /// What a new connection meets now, computed through every layer by the evaluator.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict_now: Option<String>,
}

/// One layer's part of an opening.
#[derive(Serialize, Debug, Clone)]
pub struct LayerPlan {
    pub layer: String,
    #[serde(skip_serializing_if = "Option::is_none")]
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

    fn keeps_found(&self, module: Option<&str>) -> bool {
        self.decl.mode == Mode::Adopted && !self.decl.is_taken(module)
    }

    /// The adoption decision as `adopt::decide` makes it, without recording the held record:
    /// `None` when the applier would create or take over.
    fn kept(&self, id: &str, key: &str, keep: bool, now: Option<&str>) -> Option<Outcome> {
        if !keep {
            return None;
        }
        match (self.state.held_at(id, key), now) {
            (None, None) => None,
            (Some(_), None) => Some(Outcome::ChangedBySomethingElse),
            (Some(h), Some(n)) if h.digest.as_deref() != Some(n) => {
                Some(Outcome::ChangedBySomethingElse)
            }
            _ => Some(Outcome::Held),
        }
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
    let state = store::peek(root)
        .map_err(|e| Refused {
            code: 1,
            why: e.to_string(),
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
        })?;
    let deadlines = decl
        .settings
        .as_ref()
        .or(state.settings.as_ref())
        .and_then(|s| s.deadlines)
        .unwrap_or_default();
    let runner = Deadlined { runner, deadlines };
    let settings = decl.settings.clone().or_else(|| state.settings.clone());
    let mut plan = Plan {
        act: act.to_string(),
        node: decl.node.clone(),
        mode: decl.mode.as_str(),
        source,
        pending: false,
        guard: None,
        flip: None,
        entries: Vec::new(),
        openings: Vec::new(),
        unread: Vec::new(),
    };
    let mut fw = match node_firewall::open_found(deadlines) {
        Ok(fw) => Some(fw),
        Err(e) => {
            plan.unread.push(format!("the found firewall: {e}"));
            None
        }
    };
    if let Some(fw) = fw.as_mut() {
        fw.for_node(&decl.node);
        if decl.touches_firewall() {
            if let Ok(Some(other)) = fw.claimed_by() {
                if other != decl.node {
                    return Err(Refused {
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
        let (outcome, detail) = match res {
            Resource::File(f) => plan_file(&r, f),
            Resource::Directory(d) => plan_directory(&r, d),
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
        });
        if outcome == Outcome::Failed {
            break;
        }
    }
    if plan.entries.iter().all(|e| e.outcome != Outcome::Failed) {
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
            });
        }
        for rec in state
            .owned
            .iter()
            .rev()
            .filter(|o| !declared.contains(o.id.as_str()))
        {
            let (o, d) = removal(&r, rec);
            plan.push(rec, o, d);
        }
    }
    plan.pending = plan.flip.is_some()
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
        || state.declaration.as_ref() != Some(decl);
    Ok(plan)
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
        });
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

    /// The preview as a person reads it.
    pub fn render(&self) -> String {
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
        for e in &self.entries {
            let verb = match e.outcome {
                Outcome::Unchanged => "unchanged".to_string(),
                _ => format!("would {}", e.verb),
            };
            let _ = writeln!(
                out,
                "{verb:<14} {:<24} {} {}: {}",
                e.id, e.shape, e.key, e.detail
            );
        }
        for o in &self.openings {
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
        let _ = writeln!(
            out,
            "{}",
            if self.pending {
                "changes pending"
            } else {
                "nothing would change"
            }
        );
        out
    }
}

/// The guard the settings call for beside the guard's table as it stands.
fn guard(
    fw: Option<&mut firewall::Firewall<'_>>,
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
    let status = fw.and_then(|fw| fw.socket()).map(firewall::guard::status);
    let (in_force, detail) = match status {
        Some(Ok(st)) if st.present && st.plain && want.iter().all(|m| st.rules.contains(m)) => (
            true,
            format!(
                "in force (table inet mesh_host, {} rules); would be checked again",
                st.rules.len()
            ),
        ),
        Some(Ok(st)) if st.present => (
            false,
            "table inet mesh_host differs from what the settings call for; would be written again"
                .to_string(),
        ),
        Some(Ok(_)) => (
            false,
            format!(
                "not in force; would be written (table inet mesh_host refusing ports {} and {} \
                 from outside, and its netfilter BPF layer)",
                ports[0], ports[1]
            ),
        ),
        Some(Err(e)) => (false, format!("unreadable ({e}); would be written")),
        None => (false, "no nf_tables socket; would be written".into()),
    };
    GuardPlan {
        in_force,
        ports,
        detail,
    }
}
