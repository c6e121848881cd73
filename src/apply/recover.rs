//! A lost store recovered for removal: the records of what the node owned, as the mesh kept them
//! from its last apply report and handed them back with the declaration, read by the first apply
//! on a store that has no state. They serve one purpose, removing what is no longer declared, and
//! only where the machine still shows what a record says (a file with the recorded digest, a
//! container with the host's labels for that id and spec); anything else is left in place and
//! reported. The node wins every disagreement: a resource declared now, or one the store already
//! records at the same key, is never touched from a recovered record, and nothing is recorded
//! from one.

use super::report::Recovered;
use super::{container, directory, Cx, Done, Outcome, Report, ResourceError};
use crate::declaration::{Resource, Shape};
use crate::store::Owned;
use std::collections::HashSet;

/// Removes, newest first (the reverse of the order they were recorded, as removal always goes),
/// what the recovered records name and the declaration no longer does. Stops at the first
/// failure, like every removal.
pub(super) fn remove_recovered(cx: &mut Cx<'_>, recovered: &[Owned], report: &mut Report) {
    let declared: HashSet<&str> = cx.decl.resources.iter().map(Resource::id).collect();
    let declared_keys: HashSet<(Shape, String)> = cx
        .decl
        .resources
        .iter()
        .map(|r| (r.shape(), r.key()))
        .collect();
    let mut summary = Recovered {
        records: recovered.len(),
        ..Recovered::default()
    };
    for rec in recovered.iter().rev() {
        let state = &cx.store.state;
        if declared.contains(rec.id.as_str())
            || declared_keys.contains(&(rec.shape, rec.key.clone()))
            || state.owned(&rec.id).is_some()
            || state.owned_by_key(rec.shape, &rec.key).is_some()
            || state.held(&rec.id).is_some()
        {
            // Declared now, or known to the store: the node decides, not the copy.
            continue;
        }
        // The directories the record says the host made on the way go after it, while empty.
        let result = remove_one(cx, rec).and_then(|d| directory::then_parents(cx, rec, d));
        match &result {
            Ok(d) if d.outcome == Outcome::Removed => summary.removed.push(rec.id.clone()),
            Ok(d) if d.outcome == Outcome::ChangedBySomethingElse => {
                summary.kept.push(rec.id.clone())
            }
            _ => {}
        }
        let stop = result.is_err();
        report.push(&rec.id, rec.shape, rec.key.clone(), result);
        if stop {
            break;
        }
    }
    report.recovered = Some(summary);
}

fn remove_one(cx: &mut Cx<'_>, rec: &Owned) -> Result<Done, ResourceError> {
    if rec.found {
        return Ok(Done::new(
            Outcome::Forgotten,
            "the recovered record says the host took this over rather than creating it, so it \
             is left in place",
        ));
    }
    match rec.shape {
        Shape::File => remove_file(cx, rec),
        Shape::Directory => {
            cx.machine(&rec.key)?;
            if let Err(crate::beneath::BeneathError::NotADirectory { .. }) =
                cx.beneath.dir(&rec.key)
            {
                return Ok(Done::new(
                    Outcome::ChangedBySomethingElse,
                    "the recovered record names a directory, and something else is there now; \
                     left in place",
                ));
            }
            directory::remove(cx, rec)
        }
        Shape::Container => container::remove_recovered(cx, rec),
        Shape::Opening => Ok(Done::new(
            Outcome::Forgotten,
            "an opening's marked rules are swept by their marks, whatever the store remembers",
        )),
        Shape::Action => Ok(Done::new(
            Outcome::Forgotten,
            "an action leaves nothing the host owns",
        )),
        Shape::Service => Ok(Done::new(
            Outcome::Forgotten,
            "a running service shows nothing of who started it, so a recovered record is not \
             enough to stop it: left as it is",
        )),
        Shape::Package => Ok(Done::new(
            Outcome::Forgotten,
            "packages are never uninstalled; left installed",
        )),
    }
}

/// Removes the file only while it holds exactly the bytes the record's digest says.
fn remove_file(cx: &mut Cx<'_>, rec: &Owned) -> Result<Done, ResourceError> {
    cx.machine(&rec.key)?;
    let found =
        match cx.beneath.read_file(&rec.key) {
            Ok(Some(f)) => f,
            Ok(None) => {
                return Ok(Done::new(
                    Outcome::Removed,
                    "no longer declared; already gone",
                ))
            }
            Err(crate::beneath::BeneathError::Special { .. }) => return Ok(Done::new(
                Outcome::ChangedBySomethingElse,
                "the recovered record names a file, and something else is there now; left in place",
            )),
            Err(e) => return Err(e.into()),
        };
    // A file past the read limit is not the one the record describes (the host writes only a
    // declaration's bytes): it is left, unread.
    let limit = super::found_read_limit(cx.store.state.settings.as_ref());
    if found.size > limit {
        return Ok(Done::new(
            Outcome::ChangedBySomethingElse,
            format!(
                "changed since the recovered record ({} bytes, over the found files' read limit \
                 of {limit} bytes, so not read); left in place",
                found.size
            ),
        ));
    }
    let now = found
        .digest()
        .map_err(ResourceError::io(format!("reading {}", rec.key)))?;
    if rec.digest.as_deref() != Some(now.as_str()) {
        return Ok(Done::new(
            Outcome::ChangedBySomethingElse,
            format!(
                "changed since the recovered record (now {now}, recorded {}); left in place",
                rec.digest.as_deref().unwrap_or("no digest")
            ),
        ));
    }
    cx.beneath.remove_file(&rec.key)?;
    cx.changed(&rec.id);
    Ok(Done::new(
        Outcome::Removed,
        "no longer declared; removed, as the recovered record describes it",
    ))
}
