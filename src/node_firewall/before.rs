//! The phase before the resources, entered once per apply after the guard phase: a flip's saving
//! of the found firewall (`save`), the store's record of the declaration with it, the ruleset's
//! generation against the last apply's, the guard's outcome, the flip (`flip`) or the return
//! (`restore`), and on a flipped node the derived filter (`spec`) as the declaration says now.
//! It goes through its steps in that order and never comes back to one.

use super::flip::flip;
use super::outcome::{FilterSaid, FlipSaid, Step};
use super::restore::unflip;
use super::save::record_found;
use super::spec::filter_spec;
use super::{Before, Error, Generation, Guarded, Node, Transition};
use crate::declaration::{Declaration, Mode};

/// The node's firewall as the declaration says, before any resource is applied.
///
/// A flip first saves the found firewall into the store, in the same write as the declaration's
/// record (when `node.record`), before anything changes: a flip that cannot read what it would
/// retire is refused (`Err`) with nothing written. `recorded` is the generation the last apply of
/// this very declaration left the ruleset at, if it may still be so; `early` is the guard phase's
/// outcome, which an adopted node with settings always has. Then: on an adopted node no derived
/// filter left beside the guard; the flip or the return when the declaration changes the node's
/// mode; on a flipped node the derived filter as the declaration says now. A step that fails is
/// `failed` in the outcome and stops the resources.
pub fn before_resources(
    node: &mut Node<'_>,
    decl: &Declaration,
    transition: Transition,
    early: Option<Guarded>,
    recorded: Option<Generation>,
    ahead: super::LegacyAhead,
) -> Result<Before, Error> {
    let saves_flip = transition == Transition::Flip && node.store.state.flip.is_none();
    if saves_flip {
        let saved = record_found(node.fw, node.runner).map_err(|e| Error::NotConvergeable {
            node: decl.node.clone(),
            source: Box::new(e),
        })?;
        node.store.state.flip = Some(saved);
    }
    // nf_tables' generation and, where legacy tables are in force, their fingerprint.
    let unchanged =
        recorded.and_then(|was| node.fw.generation_with(ahead).filter(|now| *now == was));
    if node.record || saves_flip {
        node.store.save()?;
    }
    let mut out = Before {
        unchanged: unchanged.clone(),
        ..Before::default()
    };
    if decl.mode == Mode::Adopted {
        if let Some(guarded) = early {
            out.guard_spec = Some(guarded.spec.clone());
            // An adopted node that is not flipped has no derived filter: one left by a return
            // that a resident host raced goes, now that the guard is in force. (Not when the
            // ruleset is at the generation the last apply left: it removed any.)
            if transition == Transition::Stay
                && node.store.state.flip.is_none()
                && unchanged.is_none()
            {
                match node.fw.remove_filter() {
                    Ok(true) => out.flip = Some(FlipSaid::StrayFilterRemoved),
                    Ok(false) => {}
                    Err(e) => {
                        out.failed = Some((
                            "filter",
                            "derived filter",
                            format!("removing a derived filter from an adopted node: {e}"),
                        ))
                    }
                }
            }
            out.private = guarded.private;
            if let Err(e) = &guarded.line {
                out.failed = Some(("guard", "guard", e.to_string()));
            }
            out.guard = Some(guarded.line);
        }
    }
    // The derived filter's spec, made once, for the flip or the flipped node's filter, with the
    // ssh ports the flip kept (and the operator's addresses a converged genesis saw).
    let mut spec = (out.failed.is_none()
        && transition != Transition::Return
        && node.store.state.flip.is_some())
    .then(|| {
        let flip = node.store.state.flip.as_ref();
        let ssh = flip.map(|f| f.ssh.clone()).unwrap_or_default();
        let ssh_from = flip.map(|f| f.ssh_from.clone()).unwrap_or_default();
        filter_spec(
            node.fw,
            node.runner,
            decl,
            node.store.state.settings.as_ref(),
            &ssh,
            &ssh_from,
        )
    });
    if out.failed.is_none() {
        let step = match transition {
            Transition::Flip => Some((
                Step::Flip,
                match spec.take() {
                    Some(Ok(s)) => flip(node, s).map(|(done, s)| {
                        // Loaded by the flip itself: nothing to check again below.
                        out.filter = Some(FilterSaid::LoadedByFlip {
                            openings: s.openings.len(),
                        });
                        out.filter_spec = Some(s);
                        FlipSaid::Flipped(done)
                    }),
                    Some(Err(e)) => Err(e),
                    None => Err(Error::Declared(
                        "no saved found firewall to flip from".into(),
                    )),
                },
            )),
            Transition::Return => Some((Step::Return, unflip(node).map(FlipSaid::Returned))),
            Transition::Stay => None,
        };
        if let Some((step, result)) = step {
            match result {
                Ok(said) => out.flip = Some(said),
                Err(e) => {
                    out.flip = Some(FlipSaid::Failed {
                        step,
                        error: e.to_string(),
                    });
                    out.failed = Some((step.as_str(), "firewall", e.to_string()));
                }
            }
        }
    }
    if out.failed.is_none() && node.store.state.flip.is_some() && out.filter_spec.is_none() {
        match (unchanged, spec) {
            (Some(generation), spec) => {
                out.filter = Some(FilterSaid::AsLeft { generation });
                out.filter_spec = spec.and_then(Result::ok);
            }
            (None, Some(Ok(spec))) => match node.fw.ensure_filter(&spec) {
                Ok(written) => {
                    out.filter = Some(FilterSaid::Ensured {
                        openings: spec.openings.len(),
                        written,
                    });
                    out.filter_spec = Some(spec);
                }
                Err(e) => {
                    let e = e.doing("loading the derived filter");
                    out.filter = Some(FilterSaid::Failed(e.to_string()));
                    out.failed = Some(("filter", "derived filter", e.to_string()));
                }
            },
            (None, spec) => {
                let e = match spec {
                    Some(Err(e)) => e,
                    _ => Error::Declared("the derived filter's spec was not made".into()),
                };
                out.filter = Some(FilterSaid::Failed(e.to_string()));
                out.failed = Some(("filter", "derived filter", e.to_string()));
            }
        }
    }
    Ok(out)
}
