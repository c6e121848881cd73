//! The named steps of an apply under the store's lock (`apply_locked`): the declaration
//! recorded in the state, each resource through its applier, what the act leaves of the node's
//! own firewall, and the briefing made and the store saved.

use super::{
    action, brief, container, declared_openings, directory, file, interrupted, moved_away, opening,
    package, service, ApplyError, Cx, FirewallMemo, Report,
};
use crate::declaration::{openings, Declaration, Mode, Resource, Source};
use crate::node_firewall::{self, Transition};
use crate::store::{self, Store};
use std::borrow::Cow;

/// Records in the store's state the declaration this apply makes true (node, mode, taken,
/// settings, source): says the firewall generation the last apply of this very declaration
/// recorded, when the ruleset may be as it left it (taken from the state, never kept unless this
/// apply has everything of the firewall in force), and whether the state was already this
/// declaration's (`same`: the snapshot is then not rewritten before the resources).
pub(super) fn record_declaration(
    state: &mut store::State,
    decl: &Declaration,
    source: Source,
    touched: bool,
    transition: Transition,
) -> (Option<node_firewall::Generation>, bool) {
    // Whether the ruleset may be as the last apply of this very declaration left it, so nothing
    // of it is listed: the generation recorded then, compared with the kernel's below. Never
    // recorded again until this apply has everything of the firewall in force.
    let declared_before = state.declaration.as_ref() == Some(decl);
    let may_be_unchanged = touched
        && transition == Transition::Stay
        && declared_before
        && (decl.mode != Mode::Adopted
            || state.settings.is_none()
            || state.firewall_guard.is_some());
    let legacy = state.firewall_legacy.take();
    let recorded = state
        .firewall_generation
        .take()
        .filter(|_| may_be_unchanged)
        .map(|nft| node_firewall::Generation { nft, legacy });
    // A reconcile of the same declaration changes nothing here, and then the snapshot is not
    // rewritten before the loop (the end of the apply folds it anyway).
    let same = state.node.as_deref() == Some(decl.node.as_str())
        && state.mode == Some(decl.mode)
        && state.taken == decl.taken
        && (decl.settings.is_none() || state.settings == decl.settings)
        && state.source == Some(source)
        && state.pending.is_none()
        && declared_before;
    state.node = Some(decl.node.clone());
    state.mode = Some(decl.mode);
    state.taken = decl.taken.clone();
    if let Some(s) = &decl.settings {
        state.settings = Some(s.clone());
    }
    // Only another declaration is copied in: a reconcile's is the state's own.
    if !declared_before {
        state.declaration = Some(decl.clone());
    }
    state.source = Some(source);
    (recorded, same)
}

/// Each declared resource in order, through its applier, into `report`; the openings converged
/// once, together, before the first of them. Stops at the first failure or an interrupt; says
/// how many resources had their turn and whether the guard had failed before any.
pub(super) fn each_resource(
    cx: &mut Cx<'_>,
    decl: &Declaration,
    report: &mut Report,
) -> (usize, bool) {
    // The openings converge once, all together, just before the first opening: after the
    // resources declared before it, so a forwarded opening meets the DNAT of the container
    // declared before it. Not on a flipped node (the filter admits them), nor when the
    // ruleset is as the last apply left every one of them.
    let recorded = cx.store.state.flip.is_none()
        && cx.firewall_unchanged.is_some()
        && opening::records(cx).is_empty();
    cx.openings_recorded = recorded;
    let converges = cx.store.state.flip.is_none() && !recorded;
    // Every opening left as the last apply left it says so in the same words.
    let unchanged = cx
        .firewall_unchanged
        .as_ref()
        .map(|g| format!("in force as the last apply left it ({g} unchanged)"));
    let guard_failed = report.failed().is_some();
    // How many resources had their turn: an interrupt is said as "after N of M".
    let mut turns = 0;
    for res in decl.resources.iter().filter(|_| !guard_failed) {
        // An interrupt is heard between resources: the one under way finished (or failed, its
        // child having been passed the signal) before this.
        if let Some(i) = interrupted(turns, decl) {
            report.interrupted = Some(i);
            break;
        }
        turns += 1;
        if !moved_away(cx, res, report) {
            break;
        }
        if matches!(res, Resource::Opening(_)) && converges && cx.openings.is_none() {
            let translatable = openings::translatable(decl, cx.store.state.settings.as_ref());
            let all = node_firewall::openings::converge(&mut *cx.fw, &translatable);
            let recorded = if all.result.is_ok() {
                let recs = opening::records(cx);
                cx.record_owned_all(recs)
            } else {
                Ok(())
            };
            cx.openings = Some(all);
            if let Err(e) = recorded {
                report.push(res.id(), res.shape(), res.key(), Err(e));
                break;
            }
        }
        let result = match res {
            Resource::File(f) => file::apply(cx, f),
            Resource::Directory(d) => directory::apply(cx, d),
            Resource::Action(a) => action::apply(cx, a),
            Resource::Opening(o) => opening::apply(cx, o, unchanged.as_deref()),
            Resource::Container(c) => container::apply(cx, c),
            Resource::Service(s) => service::apply(cx, s),
            Resource::Package(p) => package::apply(cx, p),
        };
        let stop = result.is_err();
        report.push(res.id(), res.shape(), res.key(), result);
        if stop {
            break;
        }
    }
    (turns, guard_failed)
}

/// What the act leaves of the node's own firewall: the boot record (the guard, or on a flipped
/// node the derived filter), and when everything of the firewall is in force, the ruleset
/// generation it is at (so the next reconcile of this declaration lists nothing if nobody changed
/// the ruleset since); and what is in force, for the memo [`finish`] makes.
pub(super) fn firewall_in_force(
    cx: &mut Cx<'_>,
    report: &Report,
    (guard_spec, filter_spec): (
        Option<node_firewall::GuardSpec>,
        Option<node_firewall::FilterSpec>,
    ),
    touched: bool,
    transition: Transition,
) -> InForce {
    let flipped = cx.store.state.flip.is_some();
    let in_force = InForce {
        guard: guard_spec,
        // On a flipped node the openings are the filter's, never the retired firewall's.
        openings: if flipped {
            Vec::new()
        } else {
            declared_openings(cx).unwrap_or_default()
        },
        filter: filter_spec,
    };
    // What is in force of the node's own firewall is what the boot step loads before the
    // network: the guard, or on a flipped node the derived filter. An apply that put neither
    // in force (its guard failed) leaves the last record as it was.
    let boot = store::Boot {
        guard: in_force.guard.clone().filter(|_| !flipped),
        filter: in_force.filter.clone().filter(|_| flipped),
    };
    if boot.guard.is_some() || boot.filter.is_some() {
        cx.store.state.boot = Some(boot);
    }
    // Everything of the firewall in force: the generation it is now at is recorded, so the
    // next reconcile of this declaration lists nothing if nobody changed the ruleset since.
    let disagrees = report
        .confirm
        .as_ref()
        .is_some_and(node_firewall::confirm::Confirmed::disagrees);
    if !report.stopped() && report.not_admitted.is_empty() && !disagrees {
        let generation = match cx.firewall_unchanged.take() {
            Some(g) => Some(g),
            None if touched || flipped || transition != Transition::Stay => cx.fw.generation(),
            None => None,
        };
        let (nft, legacy) = generation.map_or((None, None), |g| (Some(g.nft), g.legacy));
        cx.store.state.firewall_generation = nft;
        cx.store.state.firewall_legacy = legacy;
        cx.store.state.firewall_guard = in_force.guard.clone();
    }
    in_force
}

/// What an act left in force of the node's own firewall: with the declaration, the memo the
/// resident host keeps to put it back.
pub(super) struct InForce {
    guard: Option<node_firewall::GuardSpec>,
    openings: Vec<node_firewall::Opening>,
    filter: Option<node_firewall::FilterSpec>,
}

/// The briefing made from the report and kept in the store, which is saved, and the memo of what
/// is in force made with the declaration: the report, or the store's error carrying it.
pub(super) fn finish(
    mut store: Store,
    opened: Option<store::Opened>,
    decl: Cow<'_, Declaration>,
    mut report: Report,
    in_force: InForce,
) -> Result<Report, ApplyError> {
    let mut briefing = brief::brief(&store, &decl, &report);
    // One value for both: the exit code is made from the briefing's outcome.
    report.outcome = briefing.outcome();
    // A briefing that reads as the stored one keeps its time: it says when it was written, and
    // an act that changed nothing (nor what it says) writes nothing.
    if let Some(was) = opened.as_ref().and_then(store::Opened::briefing) {
        if briefing.reads_as(was) {
            briefing.at.clone_from(&was.at);
        }
    }
    store.state.briefing = Some(briefing);
    // The memo takes the declaration itself when the act owned it (a reconcile's).
    report.memo = Some(FirewallMemo {
        declaration: decl.into_owned(),
        guard: in_force.guard,
        openings: in_force.openings,
        filter: in_force.filter,
    });
    // A store that cannot be written (a full disk) does not take the report with it: the error
    // carries it, what was done is said with the store's error, and the act failed part-way
    // (exit 1). Callers that go on after an apply (a release, the resident host) see an error.
    if let Err(e) = store.save_unless(opened.as_ref()) {
        report.unsaved(&e);
        return Err(ApplyError::Unsaved {
            report: Box::new(report),
            source: e,
        });
    }
    Ok(report)
}
