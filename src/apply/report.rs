//! The report of one apply: each resource with exactly one outcome, for people and as JSON.

use crate::declaration::{Declaration, Shape, Source};
use serde::Serialize;
use std::fmt::Write as _;

use super::Done;
pub use crate::node_firewall::NotAdmitted;

/// What happened to one resource.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Unchanged,
    Created,
    Changed,
    Removed,
    /// Found on an adopted node and kept as it is.
    Held,
    /// Held, and changed since it was first held by something that is not the host; or, for a
    /// record the mesh recovered for a lost store, changed since that record, so left in place.
    ChangedBySomethingElse,
    /// No longer declared, and left in place by the asymmetry (packages, actions, what the host
    /// took over rather than created, held resources released).
    Forgotten,
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Unchanged => "unchanged",
            Outcome::Created => "created",
            Outcome::Changed => "changed",
            Outcome::Removed => "removed",
            Outcome::Held => "held",
            Outcome::ChangedBySomethingElse => "changed-by-something-else",
            Outcome::Forgotten => "forgotten",
            Outcome::Failed => "failed",
        }
    }
}

#[derive(Serialize, Debug, Clone)]
pub struct Entry {
    pub id: String,
    pub shape: Shape,
    pub key: String,
    pub outcome: Outcome,
    pub detail: String,
}

impl Entry {
    /// The resource's line as a person reads it (no newline), written straight to where it goes
    /// rather than made first.
    pub fn shown(&self) -> impl std::fmt::Display + '_ {
        Line(self)
    }
}

/// An entry's line, as [`Entry::shown`] writes it.
struct Line<'a>(&'a Entry);

impl std::fmt::Display for Line<'_> {
    /// `{:<26} {:<24} {} {}: {}` of the outcome, id, shape, key and detail, written piece by
    /// piece: one line per resource, and the formatting machinery's padding cost more than the
    /// rest of an unchanged resource's turn.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let e = self.0;
        padded(f, e.outcome.as_str(), 26)?;
        f.write_str(" ")?;
        padded(f, &e.id, 24)?;
        for part in [" ", e.shape.as_str(), " ", &e.key, ": ", &e.detail] {
            f.write_str(part)?;
        }
        Ok(())
    }
}

/// `text` then spaces to `width` characters, as `{:<width}` writes it (never cut).
fn padded(f: &mut std::fmt::Formatter<'_>, text: &str, width: usize) -> std::fmt::Result {
    const SPACES: &str = "                                ";
    f.write_str(text)?;
    let mut left = width.saturating_sub(text.chars().count());
    while left > 0 {
        let n = left.min(SPACES.len());
        f.write_str(&SPACES[..n])?;
        left -= n;
    }
    Ok(())
}

/// A line the apply says about the machine beside its resources, with its briefing mark.
#[derive(Serialize, Debug, Clone)]
pub struct Said {
    pub mark: crate::briefing::Mark,
    pub detail: String,
}

/// What the recovered records of a lost store did: how many the mesh handed back, the ids whose
/// resource was removed, and the ids left in place because the machine no longer shows what the
/// record says.
#[derive(Serialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    pub records: usize,
    pub removed: Vec<String>,
    pub kept: Vec<String>,
}

/// An apply stopped by an interrupt (SIGINT or SIGTERM to a person's command): the signal, how
/// many of the declared resources had had their turn when it stopped, and how many are declared.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Interrupted {
    pub signal: String,
    /// 128 + the signal's number: the exit code, as a shell gives a command the signal ended.
    #[serde(skip)]
    pub code: u8,
    pub after: usize,
    pub of: usize,
}

impl Interrupted {
    /// "interrupted by SIGTERM after 2 of 3 resources".
    pub fn describe(&self) -> String {
        format!(
            "interrupted by {} after {} of {} {}",
            self.signal,
            self.after,
            self.of,
            if self.of == 1 {
                "resource"
            } else {
                "resources"
            }
        )
    }
}

/// The exit code of an apply that went to its end but whose briefing says `failed`: an opening
/// a layer of the found firewall still refuses, the guard or the private network not as declared.
pub const NOT_IN_FORCE: u8 = 5;

/// The exit code of an act run with `--confirm` (and of `firewall explain --confirm`) when the
/// kernel disagrees with the evaluator on some opening: it wins over [`NOT_IN_FORCE`], since the
/// kernel's verdict standing is itself what often makes the briefing say `failed`, and a
/// disagreement puts every line drawn from the evaluator's reading in doubt; a resource that
/// failed (1) and an interrupt (128 + N) win over it, as the act did not reach its end and the
/// kernel was not asked.
pub const DISAGREES: u8 = 7;

/// Every key is present in its JSON whatever the mode (`null` or `[]` when it does not apply),
/// as the JSON contract (`docs/json.md`) promises.
#[derive(Serialize, Debug, Clone)]
pub struct Report {
    pub node: String,
    pub mode: &'static str,
    pub source: Source,
    /// The outcome of the briefing this apply wrote (its worst line): the exit code is made from
    /// it ([`Report::exit_code`]), so the two never disagree.
    pub outcome: crate::briefing::Mark,
    /// Set when an interrupt stopped the apply before its end.
    pub interrupted: Option<Interrupted>,
    /// How the guard stands, on an adopted node.
    pub guard: Option<crate::node_firewall::GuardSaid>,
    /// What the flip or the return did, when this apply made one.
    pub flip: Option<crate::node_firewall::FlipSaid>,
    /// How the derived filter stands, on a flipped node.
    pub filter: Option<crate::node_firewall::FilterSaid>,
    /// Openings a layer of the found firewall still refuses, each with the layer and why: the
    /// operator's own refusal of the port, or a table the host cannot write.
    pub not_admitted: Vec<NotAdmitted>,
    /// How the declared private network's interface stands (the one the guard lets through), on
    /// an adopted node with a private network.
    pub private_network: Option<Said>,
    pub entries: Vec<Entry>,
    /// `--confirm`: what the kernel said of every declared opening after the act's writes.
    pub confirm: Option<crate::node_firewall::confirm::Confirmed>,
    /// What the records the mesh recovered for a lost store did, when this apply read them.
    pub recovered: Option<Recovered>,
    /// The guard and openings this apply put in force, for the resident host.
    #[serde(skip)]
    pub memo: Option<super::FirewallMemo>,
    /// The store could not be written (a full disk): the error, naming the file. What the act
    /// did is in the entries; the store on disk holds what it held before the failed write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_error: Option<String>,
}

impl Report {
    pub fn new(decl: &Declaration, source: Source) -> Self {
        Report {
            outcome: crate::briefing::Mark::Ok,
            interrupted: None,
            guard: None,
            flip: None,
            filter: None,
            not_admitted: Vec::new(),
            private_network: None,
            node: decl.node.clone(),
            mode: decl.mode.as_str(),
            source,
            // One entry per declared resource, at least: the vector is not grown as they come.
            entries: Vec::with_capacity(decl.resources.len()),
            recovered: None,
            confirm: None,
            memo: None,
            store_error: None,
        }
    }

    /// The store could not be written at the end of the act, or before its first resource:
    /// said with the report, and the act failed part-way.
    pub(crate) fn unsaved(&mut self, e: &crate::store::StoreError) {
        self.store_error = Some(format!(
            "{e}; what is above was done, and the store keeps what it held before this write \
             (its snapshot as it was, its journal's whole lines)"
        ));
        self.outcome = crate::briefing::Mark::Failed;
    }

    /// Adds one resource's line: what its applier did, or why it failed (the error's text is
    /// the line's detail).
    pub(crate) fn push(
        &mut self,
        id: &str,
        shape: Shape,
        key: String,
        result: Result<Done, impl std::fmt::Display>,
    ) {
        let (outcome, detail) = match result {
            Ok(d) => (d.outcome, d.detail),
            Err(reason) => (Outcome::Failed, reason.to_string()),
        };
        match outcome {
            Outcome::Failed => tracing::error!(resource = id, %shape, key = %key, "{detail}"),
            Outcome::ChangedBySomethingElse => {
                tracing::warn!(resource = id, %shape, key = %key, outcome = outcome.as_str(), "{detail}")
            }
            _ => {
                tracing::debug!(resource = id, %shape, key = %key, outcome = outcome.as_str(), "{detail}")
            }
        }
        let entry = Entry {
            id: id.to_string(),
            shape,
            key,
            outcome,
            detail,
        };
        // Said at once to a person at the prompt (or a pipe), not only in the report at the end.
        if crate::counter::streaming() {
            crate::counter::done(entry.shown());
        }
        self.entries.push(entry);
    }

    /// The resource that stopped the apply, if one did.
    /// What the node's firewall phase before the resources said: the guard's, the flip's and
    /// the filter's lines, the private network's, and the step that failed, as an entry.
    pub(crate) fn said_firewall(&mut self, before: &crate::node_firewall::Before) {
        if let Some(line) = &before.guard {
            self.guard = Some(line.into());
        }
        if let Some((mark, detail)) = &before.private {
            self.private_network = Some(Said {
                mark: *mark,
                detail: detail.clone(),
            });
        }
        if before.flip.is_some() {
            self.flip = before.flip.clone();
        }
        if before.filter.is_some() {
            self.filter = before.filter.clone();
        }
        if let Some((step, what, why)) = &before.failed {
            self.push(step, Shape::Opening, what.to_string(), Err(why.clone()));
        }
    }

    pub fn failed(&self) -> Option<&Entry> {
        self.entries.iter().find(|e| e.outcome == Outcome::Failed)
    }

    /// Whether the apply stopped before its end: a resource failed, or an interrupt came.
    pub fn stopped(&self) -> bool {
        self.failed().is_some() || self.interrupted.is_some()
    }

    /// The process's exit code for this apply, from the briefing's outcome and the kernel's
    /// confirmation: 128 + the signal when interrupted, 1 when a resource (or a step of the
    /// firewall before them) failed and the apply stopped there; else [`DISAGREES`] when the
    /// kernel disagrees with the evaluator on some opening; else [`NOT_IN_FORCE`] when the
    /// briefing says `failed`, 0 when it does not.
    pub fn exit_code(&self) -> u8 {
        let failed = self.outcome == crate::briefing::Mark::Failed;
        // A store that could not be written: the apply failed part-way, whatever else it did.
        if self.store_error.is_some() {
            return self.interrupted.as_ref().map_or(1, |i| i.code);
        }
        match (&self.interrupted, self.failed()) {
            (Some(i), _) if failed => return i.code,
            (None, Some(_)) if failed => return 1,
            _ => {}
        }
        if self
            .confirm
            .as_ref()
            .is_some_and(crate::node_firewall::confirm::Confirmed::disagrees)
        {
            DISAGREES
        } else if failed {
            NOT_IN_FORCE
        } else {
            0
        }
    }

    /// The kernel's confirmation taken in, its verdict standing: an opening the kernel settled
    /// or disagreed on is reported in the kernel's state (its refusals by the evaluator's
    /// reading dropped where the kernel admits it on every part it was asked about, the
    /// kernel's refusal added where it does not), and its line says so.
    pub(crate) fn kernel_stands(&mut self, confirmed: crate::node_firewall::confirm::Confirmed) {
        use crate::node_firewall::confirm::Judged;
        for o in &confirmed.openings {
            if !matches!(o.agreement, Judged::Disagrees | Judged::Settled) {
                continue;
            }
            self.not_admitted.retain(|n| n.id != o.id);
            if o.state() != "present" {
                self.not_admitted.push(NotAdmitted {
                    id: o.id.clone(),
                    layer: "the kernel (asked in scratch namespaces)".into(),
                    why: format!(
                        "{} (the kernel's verdict, which stands; the evaluator says {})",
                        o.state(),
                        o.evaluator
                    ),
                });
            }
            for e in self
                .entries
                .iter_mut()
                .filter(|e| e.id == o.id && e.shape == Shape::Opening)
            {
                e.detail.push_str(&format!("; {}", o.describe()));
            }
        }
        self.confirm = Some(confirmed);
    }

    /// Whether this apply installed a new mesh-host and found that its binary runs: the upgrade
    /// path, on which the resident host exits 0 once it has reported, and the launcher starts the
    /// new binary (seed 000, "The restart").
    pub fn restarts_host(&self) -> bool {
        self.failed().is_none()
            && self.entries.iter().any(|e| {
                e.shape == Shape::Package
                    && e.key == crate::declaration::validate::OWN_PACKAGE
                    && matches!(e.outcome, Outcome::Created | Outcome::Changed)
            })
    }

    pub fn count(&self, outcome: Outcome) -> usize {
        self.entries.iter().filter(|e| e.outcome == outcome).count()
    }

    /// The report as a person reads it: one line per resource, then a summary.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for e in &self.entries {
            let _ = writeln!(out, "{}", e.shown());
        }
        out + &self.render_summary()
    }

    /// The report's summary alone: what follows the resources' lines when those were printed as
    /// each was done (`crate::counter`).
    pub fn render_summary(&self) -> String {
        let mut out = String::new();
        let counts: Vec<String> = [
            Outcome::Created,
            Outcome::Changed,
            Outcome::Unchanged,
            Outcome::Removed,
            Outcome::Held,
            Outcome::ChangedBySomethingElse,
            Outcome::Forgotten,
            Outcome::Failed,
        ]
        .iter()
        .filter(|o| self.count(**o) > 0)
        .map(|o| format!("{} {}", self.count(*o), o.as_str()))
        .collect();
        let summary = if counts.is_empty() {
            "nothing declared".to_string()
        } else {
            counts.join(", ")
        };
        let _ = writeln!(
            out,
            "node {} ({}, from {}): {}",
            self.node,
            self.mode,
            self.source.as_str(),
            summary
        );
        if let Some(g) = &self.guard {
            let _ = writeln!(out, "guard: {g}");
        }
        if let Some(f) = &self.flip {
            let _ = writeln!(out, "{f}");
        }
        if let Some(f) = &self.filter {
            let _ = writeln!(out, "derived filter: {f}");
        }
        if let Some(p) = &self.private_network {
            let _ = writeln!(out, "private network ({}): {}", p.mark.as_str(), p.detail);
        }
        if let Some(r) = &self.recovered {
            let _ = writeln!(
                out,
                "recovered records: {} handed back, {} removed, {} left in place (changed since)",
                r.records,
                r.removed.len(),
                r.kept.len()
            );
        }
        for n in &self.not_admitted {
            let _ = writeln!(out, "not admitted: {} by {}: {}", n.id, n.layer, n.why);
        }
        if let Some(c) = &self.confirm {
            let _ = writeln!(out, "{}", c.summary());
            for o in &c.openings {
                let _ = writeln!(out, "kernel: {}: {}", o.id, o.describe());
            }
        }
        if let Some(f) = self.failed() {
            let _ = writeln!(out, "the apply stopped at {}: {}", f.id, f.detail);
        }
        if let Some(i) = &self.interrupted {
            let _ = writeln!(out, "{}", i.describe());
        }
        if let Some(e) = &self.store_error {
            let _ = writeln!(out, "the store was not written: {e}");
        }
        let _ = writeln!(out, "outcome {}", self.outcome.as_str());
        out
    }
}

/// A count with its noun in the right number: "1 problem", "2 problems", "0 problems".
pub fn count(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_s_line_is_its_fields_padded_as_format_pads_them() {
        let long = "x".repeat(40);
        for (id, outcome) in [
            ("web/o1", Outcome::Unchanged),
            ("", Outcome::ChangedBySomethingElse),
            ("straße/ünïcode", Outcome::Created),
            (long.as_str(), Outcome::Failed),
        ] {
            let e = Entry {
                id: id.into(),
                shape: Shape::Opening,
                key: "tcp/443".into(),
                outcome,
                detail: "in force".into(),
            };
            let want = format!(
                "{:<26} {:<24} {} {}: {}",
                e.outcome.as_str(),
                e.id,
                e.shape,
                e.key,
                e.detail
            );
            assert_eq!(e.shown().to_string(), want);
        }
    }
}
