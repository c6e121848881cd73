//! The node's own firewall, before any resource is applied: on an adopted node the guard (and no
//! derived filter left beside it); the flip or the return when the declaration changes the node's
//! mode; on a flipped node the derived filter as the declaration says now.

use super::{flip, opening, report, Cx, Report};
use crate::declaration::{Mode, Shape};

/// Puts the node's firewall as the declaration says, writing each step's line into `report`
/// (a failure is an entry there, which stops the resources). `early` is the guard the apply
/// ensured before it opened the store. Returns the guard and the derived filter in force, for
/// the resident host's memo.
pub(super) fn before_resources(
    cx: &mut Cx<'_>,
    transition: flip::Transition,
    early: Option<opening::Guarded>,
    report: &mut Report,
) -> (Option<firewall::GuardSpec>, Option<firewall::FilterSpec>) {
    let decl = cx.decl;
    // On an adopted node the guard comes first: the store must never be reachable from
    // outside, whatever else this apply does (an apply ensured it before opening the store).
    let mut guard_spec = None;
    if decl.mode == Mode::Adopted {
        if let Some(settings) = cx.store.state.settings.clone() {
            let guarded = match (early, cx.firewall_unchanged) {
                (Some(g), _) => g,
                (None, Some(generation)) => opening::Guarded {
                    line: Ok(format!(
                        "in force as the last apply left it (ruleset generation {generation} unchanged)"
                    )),
                    private: None,
                    spec: cx
                        .store
                        .state
                        .firewall_guard
                        .clone()
                        .unwrap_or_else(|| opening::guard_spec(&settings, &decl.resources)),
                },
                (None, None) => {
                    opening::ensure_guard(cx.root, cx.runner, &mut cx.fw, decl, &settings)
                }
            };
            guard_spec = Some(guarded.spec.clone());
            // An adopted node that is not flipped has no derived filter: one left by a return
            // that a resident host raced goes, now that the guard is in force.
            // (Not when the ruleset is at the generation the last apply left: it removed any.)
            if transition == flip::Transition::Stay
                && cx.store.state.flip.is_none()
                && cx.firewall_unchanged.is_none()
            {
                let removed = opening::firewall(&mut cx.fw, decl)
                    .and_then(|f| f.remove_filter().map_err(|e| e.to_string()));
                match removed {
                    Ok(true) => {
                        report.flip =
                            Some("a derived filter was loaded on this adopted node; removed".into())
                    }
                    Ok(false) => {}
                    Err(e) => report.push(
                        "filter",
                        Shape::Opening,
                        "derived filter".into(),
                        Err(format!(
                            "removing a derived filter from an adopted node: {e}"
                        )),
                    ),
                }
            }
            report.private_network = guarded
                .private
                .map(|(mark, detail)| report::Said { mark, detail });
            let result = guarded.line;
            report.guard = Some(match &result {
                Ok(line) => line.clone(),
                Err(e) => format!("failed: {e}"),
            });
            if let Err(e) = result {
                report.push("guard", Shape::Opening, "guard".into(), Err(e));
            }
        }
    }
    // The flip or the return, once the guard (on return) is in force; then, on a flipped
    // node, the derived filter as the declaration says now.
    let mut filter_spec = None;
    if report.failed().is_none() {
        let step = match transition {
            flip::Transition::Flip => Some((
                "flip",
                flip::flip(cx).map(|(line, spec)| {
                    // Loaded by the flip itself: nothing to check again below.
                    report.filter = Some(format!(
                        "drop by default, admitting {} opening(s) (loaded by the flip)",
                        spec.openings.len()
                    ));
                    filter_spec = Some(spec);
                    line
                }),
            )),
            flip::Transition::Return => Some(("return", flip::unflip(cx))),
            flip::Transition::Stay => None,
        };
        if let Some((what, result)) = step {
            match result {
                Ok(line) => report.flip = Some(format!("{what}: {line}")),
                Err(e) => {
                    report.flip = Some(format!("{what} failed: {e}"));
                    report.push(what, Shape::Opening, "firewall".into(), Err(e));
                }
            }
        }
    }
    if report.failed().is_none() && cx.store.state.flip.is_some() && filter_spec.is_none() {
        match cx.firewall_unchanged {
            Some(generation) => {
                report.filter = Some(format!(
                    "in force as the last apply left it (ruleset generation {generation} unchanged)"
                ));
                filter_spec = flip::current_spec(cx).ok();
            }
            _ => match flip::ensure_filter(cx) {
                Ok((line, spec)) => {
                    report.filter = Some(line);
                    filter_spec = Some(spec);
                }
                Err(e) => {
                    report.filter = Some(format!("failed: {e}"));
                    report.push("filter", Shape::Opening, "derived filter".into(), Err(e));
                }
            },
        }
    }
    (guard_spec, filter_spec)
}
