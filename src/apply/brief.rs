//! The briefing of one apply: the node's mode, what it holds and owns, the guard, the private
//! network, openings a layer still refuses, a rebuilt store and the apply's failure, each a line
//! whose mark the outcome is derived from.

use super::report::{self, Report};
use super::Outcome;
use crate::briefing::{self, Briefing, Line, Mark};
use crate::declaration::{Declaration, Mode};
use crate::store::{State, Store};
use std::collections::HashMap;

/// The store line of an apply that read the records the mesh recovered for a lost store: that it
/// was rebuilt, and what the records removed and left in place.
fn recovered_lines(
    store: &Store,
    r: &report::Recovered,
    lines: &mut Vec<Line>,
    look_at: &mut Vec<String>,
) {
    let list = |ids: &[String]| {
        if ids.is_empty() {
            "none".to_string()
        } else {
            ids.join(", ")
        }
    };
    lines.push(Line {
        mark: if r.kept.is_empty() {
            Mark::Ok
        } else {
            Mark::Kept
        },
        subject: "store".into(),
        detail: format!(
            "rebuilt: state.json was missing{}; the mesh handed back {} of what the node owned, \
             used only for removal: removed what is no longer declared and is as recorded ({}), \
             left in place what changed since ({})",
            if store.rebuilt {
                " beside an earlier store's files"
            } else {
                ""
            },
            report::count(r.records, "record", "records"),
            list(&r.removed),
            list(&r.kept),
        ),
    });
    if !r.kept.is_empty() {
        look_at.push(format!(
            "The store was lost and rebuilt; the mesh's copy of its records named resources that \
             are no longer declared but changed since they were recorded ({}), so the host left \
             them in place. They are no longer the host's: remove them by hand if unwanted.",
            list(&r.kept)
        ));
    }
}

/// `--confirm`: one line per declared opening saying whether the kernel agreed (ok), settled
/// what the evaluator could not tell (ok: its verdict stands, and a refusal is the opening's own
/// line), was not asked or not on every part (unknown), or disagreed (failed: the evaluator's
/// reading of this ruleset is wrong somewhere).
fn confirm_lines(
    c: &crate::node_firewall::confirm::Confirmed,
    lines: &mut Vec<Line>,
    look_at: &mut Vec<String>,
) {
    use crate::node_firewall::confirm::Judged;
    for o in &c.openings {
        lines.push(Line {
            mark: match o.agreement {
                Judged::Agrees | Judged::Settled => Mark::Ok,
                Judged::Unconfirmed => Mark::Unknown,
                Judged::Disagrees => Mark::Failed,
            },
            subject: o.id.clone(),
            detail: o.describe(),
        });
        match o.agreement {
            Judged::Disagrees => look_at.push(format!(
                "The kernel disagrees with the evaluator on opening {} (the evaluator says {}, \
                 the kernel {}): the kernel's verdict is the one reported, and the host's \
                 placement of it was made on a reading of the ruleset that is wrong there. \
                 `mesh-host firewall explain PORT --confirm` shows the walk and the probe of \
                 each part; report the ruleset.",
                o.id,
                o.evaluator,
                o.state()
            )),
            Judged::Unconfirmed => look_at.push(format!(
                "Opening {} was not confirmed by the kernel ({}): its state is the evaluator's \
                 alone.",
                o.id,
                o.why.as_deref().unwrap_or("no part was probed")
            )),
            Judged::Agrees | Judged::Settled => {}
        }
    }
}

/// The briefing for the node as the store now stands, with this apply's conflicts and failure.
pub(super) fn brief(store: &Store, decl: &Declaration, report: &Report) -> Briefing {
    let state = &store.state;
    let mut lines = vec![mode_line(decl, state)];
    let mut look_at = Vec::new();
    store_lines(store, report, &mut lines, &mut look_at);
    resources_lines(state, &mut lines, &mut look_at);
    held_lines(state, report, &mut lines, &mut look_at);
    firewall_lines(report, &mut lines, &mut look_at);
    ending_lines(report, &mut lines, &mut look_at);
    if look_at.is_empty() && !state.held.is_empty() {
        look_at.push(
            "Held resources are the machine's, kept as found; nothing is broken. Each is replaced \
             when its module is taken."
                .into(),
        );
    }
    Briefing {
        node: decl.node.clone(),
        mode: decl.mode.as_str().into(),
        at: briefing::now_rfc3339(),
        lines,
        look_at,
    }
}

/// The node's mode: what is taken when adopted, what was retired when converged.
fn mode_line(decl: &Declaration, state: &State) -> Line {
    Line {
        mark: Mark::Ok,
        subject: "mode".into(),
        detail: match decl.mode {
            Mode::Adopted => format!(
                "adopted: what is found is kept until its module is taken (taken: {})",
                if decl.taken.is_empty() {
                    "none".to_string()
                } else {
                    decl.taken.join(", ")
                }
            ),
            Mode::Converged => match &state.flip {
                Some(f) => format!(
                    "converged: every declared resource converges; the derived filter is the \
                     node's firewall, and the found firewall is retired and saved for `mesh-host \
                     adopt` ({})",
                    if f.retired.is_empty() {
                        "none was found".to_string()
                    } else {
                        f.retired
                            .iter()
                            .map(|r| r.describe())
                            .collect::<Vec<_>>()
                            .join("; ")
                    }
                ),
                None => "converged: every declared resource converges".into(),
            },
        },
    }
}

/// The store's line when it was rebuilt: from the mesh's records, or from the declaration alone.
fn store_lines(store: &Store, report: &Report, lines: &mut Vec<Line>, look_at: &mut Vec<String>) {
    if let Some(r) = &report.recovered {
        recovered_lines(store, r, lines, look_at);
    } else if store.rebuilt {
        lines.push(Line {
            mark: Mark::Unknown,
            subject: "store".into(),
            detail: "rebuilt: state.json was missing beside an earlier store's files; what \
                     matches the declaration was taken as the host's own (never removed), what \
                     differs is held as found"
                .into(),
        });
        look_at.push(
            "The store was lost and rebuilt from the declaration. Resources applied under an \
             older declaration whose records were lost are no longer the host's: it will not \
             remove them. Check the machine for leftovers."
                .into(),
        );
    }
}

/// What the node holds, owns and saved, and each found file saved by its digest only.
fn resources_lines(state: &State, lines: &mut Vec<Line>, look_at: &mut Vec<String>) {
    lines.push(Line {
        mark: Mark::Ok,
        subject: "resources".into(),
        detail: format!(
            "{} owned, {} held, {} saved",
            state.owned.len(),
            state.held.len(),
            report::count(state.originals.len(), "original", "originals")
        ),
    });
    // A found file over the originals limit: nothing of it is saved but its digest.
    for o in state.originals.iter() {
        if let Some(size) = super::digest_only_size(o) {
            lines.push(Line {
                mark: Mark::Ok,
                subject: o.key.clone(),
                detail: format!(
                    "original of {} not saved ({size}, over settings.originals_limit_bytes): \
                     recorded by its digest {} only",
                    o.key, o.digest
                ),
            });
            look_at.push(format!(
                "The found file {} was larger than the originals limit, so only its digest ({}) \
                 was recorded: the host cannot put it back. Copy it aside yourself if it matters.",
                o.key, o.digest
            ));
        }
    }
}

/// Each held resource: kept as found until it is taken, or changed by something else while
/// held.
fn held_lines(state: &State, report: &Report, lines: &mut Vec<Line>, look_at: &mut Vec<String>) {
    // Looked up once per held resource, so indexed rather than searched.
    let changed_by_else: HashMap<&str, &report::Entry> = report
        .entries
        .iter()
        .filter(|e| e.outcome == Outcome::ChangedBySomethingElse)
        .map(|e| (e.id.as_str(), e))
        .collect();
    for h in &state.held {
        let changed = changed_by_else.get(h.id.as_str());
        let original = state.original(&h.key).map(|o| match super::saved_at(o) {
            Some(at) => format!("; original saved at {at}"),
            None => "; original recorded by its digest only".into(),
        });
        // What takes it: its module, or (a resource in no module) only the node's convergence.
        let (until, before) = match h.module.as_deref() {
            Some(m) => (
                format!("until module {m} is taken"),
                format!("taking module {m}"),
            ),
            None => (
                "until the node converges (it is in no module, so no take reaches it)".to_owned(),
                "converging the node".to_owned(),
            ),
        };
        match changed {
            Some(e) => {
                lines.push(Line {
                    mark: Mark::Kept,
                    subject: h.id.clone(),
                    detail: format!(
                        "{}: changed by something else while held, not reverted",
                        h.key
                    ),
                });
                look_at.push(format!(
                    "{} ({}) changed while held: {}. Something still writes it — the predecessor's \
                     control, if it was not stopped. Stop it before {before}.",
                    h.key, h.id, e.detail
                ));
            }
            None => lines.push(Line {
                mark: Mark::Kept,
                subject: h.id.clone(),
                detail: format!(
                    "found {} {} held as it is {until}{}",
                    h.shape,
                    h.key,
                    original.unwrap_or_default()
                ),
            }),
        }
    }
}

/// The firewall's phases: the guard, the flip and the filter, the openings a layer still
/// refuses, and `--confirm`'s answers.
fn firewall_lines(report: &Report, lines: &mut Vec<Line>, look_at: &mut Vec<String>) {
    if let Some(g) = &report.guard {
        lines.push(Line {
            mark: if g.failed() { Mark::Failed } else { Mark::Ok },
            subject: "guard".into(),
            detail: g.to_string(),
        });
    }
    let flip = report.flip.as_ref().map(|f| (f.failed(), f.to_string()));
    let filter = report.filter.as_ref().map(|f| (f.failed(), f.to_string()));
    for (subject, said) in [("firewall", flip), ("filter", filter)] {
        if let Some((failed, text)) = said {
            lines.push(Line {
                mark: if failed { Mark::Failed } else { Mark::Ok },
                subject: subject.into(),
                detail: text,
            });
        }
    }
    for n in &report.not_admitted {
        lines.push(Line {
            mark: Mark::Failed,
            subject: n.id.clone(),
            detail: format!("not admitted by {}: {}", n.layer, n.why),
        });
        look_at.push(format!(
            "Opening {} is declared but {} still refuses it ({}). The host keeps the operator's \
             refusals first and writes only where it may; lift that refusal, or change the \
             declaration, and run `mesh-host reconcile`.",
            n.id, n.layer, n.why
        ));
    }
    if let Some(c) = &report.confirm {
        confirm_lines(c, lines, look_at);
    }
}

/// The private network where the settings say or not, the apply's failure and its interruption.
fn ending_lines(report: &Report, lines: &mut Vec<Line>, look_at: &mut Vec<String>) {
    if let Some(p) = &report.private_network {
        lines.push(Line {
            mark: p.mark,
            subject: "private network".into(),
            detail: p.detail.clone(),
        });
        if p.mark != Mark::Ok {
            look_at.push(format!(
                "The private network is not where the settings say: {}. Correct \
                 settings.private_network (or bring the interface up with its address) and run \
                 `mesh-host reconcile`; until then the guard refuses the store and the broker's \
                 management on every interface but loopback and the declared one.",
                p.detail
            ));
        }
    }
    if let Some(e) = report.failed() {
        lines.push(Line {
            mark: Mark::Failed,
            subject: e.id.clone(),
            detail: e.detail.clone(),
        });
        look_at.push(format!(
            "{} failed and the apply stopped there: {}. What came before it is done and \
             recorded. Fix the cause and run `mesh-host reconcile`.",
            e.id, e.detail
        ));
    }
    if let Some(i) = &report.interrupted {
        lines.push(Line {
            mark: Mark::Failed,
            subject: "apply".into(),
            detail: format!(
                "{}: the resources after them were not applied and nothing undeclared was \
                 removed",
                i.describe()
            ),
        });
        look_at.push(format!(
            "The apply was {}. What came before is done and recorded; run `mesh-host reconcile` \
             to finish it.",
            i.describe()
        ));
    }
}
