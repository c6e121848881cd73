//! Removal by the asymmetry, after the resources: held things no longer declared are released
//! as they are, owned ones removed (or forgotten, for what the host merely took over), a resource
//! whose path or name moved has its old one removed first, and marked firewall rules of openings
//! no longer declared are swept even when the store has forgotten them.

use super::{
    container, directory, file, opening, package, service, Cx, Done, Outcome, Report, ResourceError,
};
use crate::declaration::{Resource, Shape};
use crate::failpoint;
use crate::store::{Held, Op, Owned};
use std::collections::HashSet;

pub(super) fn remove_undeclared(cx: &mut Cx<'_>, report: &mut Report) {
    let declared: HashSet<&str> = cx.decl.resources.iter().map(Resource::id).collect();
    let released: Vec<Held> = cx
        .store
        .state
        .held
        .iter()
        .filter(|h| !declared.contains(&h.id.as_str()))
        .cloned()
        .collect();
    for h in released {
        let result = cx.record(&h.id, Op::Release(h.id.clone())).map(|_| {
            Done::new(
                Outcome::Forgotten,
                format!(
                    "held {} {} released: left exactly as it was found",
                    h.shape, h.key
                ),
            )
        });
        let stop = result.is_err();
        report.push(&h.id, h.shape, h.key.clone(), result);
        if stop {
            return;
        }
    }
    let gone: Vec<Owned> = cx
        .store
        .state
        .owned
        .iter()
        .rev()
        .filter(|o| !declared.contains(&o.id.as_str()))
        .cloned()
        .collect();
    for rec in gone {
        let result = remove_owned(cx, &rec);
        let stop = result.is_err();
        report.push(&rec.id, rec.shape, rec.key.clone(), result);
        if stop {
            return;
        }
    }
}

/// Removes (or forgets, by the asymmetry) what an owned record says the host made, then drops
/// the record.
fn remove_owned(cx: &mut Cx<'_>, rec: &Owned) -> Result<Done, ResourceError> {
    let done = match rec.shape {
        Shape::File => file::remove(cx, rec),
        Shape::Directory => directory::remove(cx, rec),
        Shape::Action => Ok(Done::new(
            Outcome::Forgotten,
            "an action leaves nothing the host owns",
        )),
        Shape::Opening => opening::remove(cx, &rec.id),
        Shape::Container => container::remove(cx, rec),
        Shape::Service => service::remove(cx, rec),
        Shape::Package => package::remove(cx, rec),
    }?;
    let done = directory::then_parents(cx, rec, done)?;
    cx.forget(rec)?;
    failpoint::hit("after-record", &rec.id);
    Ok(done)
}

/// A resource whose path or name (or shape) changed under the same id: what the host made at the
/// old key is removed by the asymmetry first, as if undeclared, or it would stay on the machine
/// with no record once the new record replaces the old.
pub(super) fn moved_away(cx: &mut Cx<'_>, res: &Resource, report: &mut Report) -> bool {
    let Some(old) = cx
        .store
        .state
        .owned(res.id())
        .filter(|o| o.key != res.key() || o.shape != res.shape())
        .cloned()
    else {
        return true;
    };
    let result = remove_owned(cx, &old).map(|d| {
        Done::new(
            d.outcome,
            format!("{} (moved to {} {})", d.detail, res.shape(), res.key()),
        )
    });
    let ok = result.is_ok();
    report.push(&old.id, old.shape, old.key.clone(), result);
    ok
}

/// Removes marked rules of openings that are not declared, whether or not the store remembers
/// them (a lost store leaves marks the host can still recognise as its own).
pub(super) fn sweep_stale_marks(cx: &mut Cx<'_>, report: &mut Report) {
    let result = cx.removal().clone();
    match result {
        Ok(removed) => {
            for (mark, layer) in removed {
                let id = crate::node_firewall::rules::id_of(&mark)
                    .unwrap_or(&mark)
                    .to_string();
                // Reported already on the line of the opening whose record was removed.
                // words read: none; a set of the opening ids already reported.
                if cx.removal_said.contains(&id) {
                    continue;
                }
                report.push(
                    &id,
                    Shape::Opening,
                    id.clone(),
                    Ok::<_, String>(Done::new(
                        Outcome::Removed,
                        format!("stale marked rule {mark} removed from {layer}"),
                    )),
                );
            }
        }
        Err(e) => report.push(
            "openings",
            Shape::Opening,
            "stale marks".into(),
            Err(e.to_string()),
        ),
    }
}
