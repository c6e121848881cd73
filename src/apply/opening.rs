//! The opening applier: a declared opening's own outcome read from the one convergence of the
//! apply's openings (`node_firewall::openings`), recorded in the store and reported on its line.

use super::{Cx, Done, Outcome, ResourceError};
use crate::declaration::openings::to_opening;
use crate::declaration::{OpeningSpec, Shape};
use crate::node_firewall::openings::Change;
use crate::node_firewall::Opening;
use crate::store::Owned;

/// One declared opening, from the convergence the apply loop made before the first opening.
/// `unchanged` is the line of an opening as the last apply left it, when the ruleset is at the
/// generation that apply recorded.
pub(super) fn apply(
    cx: &mut Cx<'_>,
    spec: &OpeningSpec,
    unchanged: Option<&str>,
) -> Result<Done, ResourceError> {
    let opening = to_opening(spec, cx.store.state.settings.as_ref())?;
    // On a flipped node the derived filter admits it: loaded from the whole declaration before
    // the resources, nothing goes into the retired firewall.
    if cx.store.state.flip.is_some() {
        let rec = record_of(spec, &opening);
        if cx.store.state.owned(&spec.id) == Some(&rec) {
            return Ok(Done::new(
                Outcome::Unchanged,
                "admitted by the derived filter (inet mesh_host)",
            ));
        }
        cx.record_owned(rec)?;
        return Ok(Done::new(
            Outcome::Created,
            "admitted by the derived filter (inet mesh_host)",
        ));
    }
    // The ruleset is at the generation the last apply of this declaration verified: nothing of
    // it changed, so nothing is listed.
    if let Some(line) = unchanged {
        if cx.openings_recorded
            || cx.store.state.owned(&spec.id) == Some(&record_of(spec, &opening))
        {
            return Ok(Done::new(Outcome::Unchanged, line));
        }
    }
    let rec = record_of(spec, &opening);
    let said = match &cx.openings {
        Some(all) => all.of(&opening)?,
        None => {
            return Err(crate::node_firewall::Error::Declared(format!(
                "opening {}: the openings were not converged",
                spec.id
            ))
            .into())
        }
    };
    if said.change != Change::Unchanged {
        cx.changed(&spec.id);
    }
    if cx.store.state.owned(&spec.id) != Some(&rec) {
        cx.record_owned(rec)?;
    }
    cx.not_admitted.extend(said.not_admitted);
    Ok(Done::new(
        match said.change {
            Change::Unchanged => Outcome::Unchanged,
            Change::Created => Outcome::Created,
            Change::Changed => Outcome::Changed,
        },
        said.line,
    ))
}

/// The records of every declared opening the convergence put in force whose record is not the
/// store's yet: one transaction put them all in force, so they go in one durable append.
pub(super) fn records(cx: &Cx<'_>) -> Vec<Owned> {
    cx.decl
        .resources
        .iter()
        .filter_map(|r| match r {
            crate::declaration::Resource::Opening(o) => {
                let op = to_opening(o, cx.store.state.settings.as_ref()).ok()?;
                let rec = record_of(o, &op);
                (cx.store.state.owned(&o.id) != Some(&rec)).then_some(rec)
            }
            _ => None,
        })
        .collect()
}

/// The store's record of a declared opening: its mark says which version is in force.
pub(super) fn record_of(spec: &OpeningSpec, opening: &Opening) -> Owned {
    Owned {
        parents: Vec::new(),
        id: spec.id.clone(),
        module: spec.module.clone(),
        shape: Shape::Opening,
        key: spec.id.clone(),
        digest: Some(crate::node_firewall::rules::mark(opening)),
        found: false,
        stamp: None,
    }
}

/// Removes every marked rule of an opening that is no longer declared: its part of the apply's
/// one removal.
pub(super) fn remove(cx: &mut Cx<'_>, id: &str) -> Result<Done, ResourceError> {
    if cx.store.state.flip.is_some() {
        cx.changed(id);
        return Ok(Done::new(
            Outcome::Removed,
            "no longer declared; the derived filter no longer admits it",
        ));
    }
    let removed = match cx.removal() {
        Ok(removed) => removed.clone(),
        Err(e) => {
            return Err(crate::node_firewall::Error::Opening {
                id: id.to_string(),
                source: e.clone(),
            }
            .into())
        }
    };
    let mine: Vec<&str> = removed
        .iter()
        .filter(|(mark, _)| crate::node_firewall::rules::id_of(mark) == Some(id))
        .map(|(_, layer)| layer.as_str())
        .collect();
    cx.removal_said.insert(id.to_string());
    cx.changed(id);
    Ok(Done::new(
        Outcome::Removed,
        if mine.is_empty() {
            "no longer declared; no marked rule of it was in force".to_string()
        } else {
            format!(
                "no longer declared; its marked rules removed from {}",
                mine.join(", ")
            )
        },
    ))
}
