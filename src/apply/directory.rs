//! The directory applier: a declared directory's existence, mode and ownership.

use super::adopt::{self, Found, Kept};
use super::file::Want;
use super::{Cx, Done, Outcome, ResourceError};
use crate::beneath::{Dir, Removed, Root};
use crate::declaration::{DirectorySpec, Shape};
use crate::store::Owned;

/// The directory at a declared path, opened beneath the root, and its mode and ownership.
pub(super) fn read(root: &Root, key: &str) -> Result<Option<(u32, u32, u32)>, ResourceError> {
    match root.dir(key)? {
        Some(d) => Ok(Some(stat(&d, key)?)),
        None => Ok(None),
    }
}

fn stat(d: &Dir, key: &str) -> Result<(u32, u32, u32), ResourceError> {
    let st = d
        .stat()
        .map_err(|e| ResourceError::io(format!("reading {key}"))(e.into()))?;
    Ok((st.st_mode & 0o7777, st.st_uid, st.st_gid))
}

/// What a held directory is compared by: its mode and ownership.
pub(super) fn fingerprint((mode, uid, gid): (u32, u32, u32)) -> String {
    format!("directory {mode:04o} {uid}:{gid}")
}

pub(super) fn apply(cx: &mut Cx<'_>, spec: &DirectorySpec) -> Result<Done, ResourceError> {
    let id = spec.id.as_str();
    let key = spec.path.as_str();
    cx.machine(key)?;
    let want = Want::of(
        cx.root,
        spec.mode.as_deref(),
        0o755,
        spec.owner.as_deref(),
        spec.group.as_deref(),
    )?;
    let cur = read(&cx.beneath, key)?;
    let owned = cx.store.state.owned_by_key(Shape::Directory, key).cloned();
    let keep = cx.keeps_found(spec.module.as_deref());
    let found = |now: Option<String>| Found {
        id,
        module: spec.module.as_deref(),
        shape: Shape::Directory,
        key,
        keep,
        now,
        stamp: None,
    };
    let record = |found: bool| Owned {
        parents: Vec::new(),
        id: id.to_string(),
        module: spec.module.clone(),
        shape: Shape::Directory,
        key: key.to_string(),
        digest: None,
        found,
        stamp: None,
    };
    let ensure = |cx: &mut Cx<'_>, rec: Owned, create: bool| -> Result<(), ResourceError> {
        let rec = with_parents(cx, rec)?;
        cx.intend(&rec)?;
        // Made (or opened) beneath the root; mode and owner set on the open directory.
        let dir = match cx.beneath.dir(key)? {
            Some(d) if !create => d,
            _ => cx.beneath.mkdir_all(key)?,
        };
        want.set_fd(dir.fd(), key)
            .map_err(ResourceError::io(format!("setting {key}")))?;
        cx.changed(id);
        match stat(&dir, key)? {
            (m, u, g) if want.matches(m, u, g) => Ok(cx.record_owned(rec)?),
            _ => Err(ResourceError::NotAsDeclared(format!(
                "{key} does not read back as declared"
            ))),
        }
    };
    match (owned, cur) {
        (Some(rec), Some((m, u, g))) => {
            if want.matches(m, u, g) {
                // Recorded again only when its id or module changed, with the parents its
                // record already names.
                let same = Owned {
                    id: id.to_string(),
                    module: spec.module.clone(),
                    ..rec.clone()
                };
                cx.refresh_owned(same, Some(&rec))?;
                return Ok(Done::new(Outcome::Unchanged, "matches the declaration"));
            }
            ensure(cx, record(rec.found), false)?;
            Ok(Done::new(
                Outcome::Changed,
                "mode or owner differed; set again",
            ))
        }
        (Some(rec), None) => {
            ensure(cx, record(rec.found), true)?;
            Ok(Done::new(Outcome::Created, "was missing; created again"))
        }
        (None, None) => {
            if let Some(kept) = adopt::decide(cx, &found(None))? {
                return Ok(kept.done(|_| {
                    "held directory was removed by something else; not recreated".into()
                }));
            }
            ensure(cx, record(false), true)?;
            Ok(Done::new(Outcome::Created, "created"))
        }
        (None, Some(now)) => {
            let print = fingerprint(now);
            if let Some(kept) = adopt::decide(cx, &found(Some(print.clone())))? {
                return Ok(kept.done(|k| match k {
                    Kept::Gone | Kept::Changed { .. } => format!(
                        "held directory changed by something else (now {print}); not reverted"
                    ),
                    Kept::Held => "found; kept as it is".into(),
                }));
            }
            let (m, u, g) = now;
            if want.matches(m, u, g) {
                cx.record_owned(record(true))?;
                return Ok(Done::new(
                    Outcome::Unchanged,
                    "found directory already matches; taken over",
                ));
            }
            ensure(cx, record(true), false)?;
            Ok(Done::new(
                Outcome::Changed,
                format!("found directory taken over; was {print}"),
            ))
        }
    }
}

/// Removes an undeclared directory the host created, if it is empty; anything else is left.
pub(super) fn remove(cx: &mut Cx<'_>, rec: &Owned) -> Result<Done, ResourceError> {
    if rec.found {
        return Ok(Done::new(
            Outcome::Forgotten,
            "the host took this directory over rather than creating it, so it is left in place",
        ));
    }
    cx.machine(&rec.key)?;
    match cx.beneath.remove_dir(&rec.key)? {
        Removed::Removed => {
            cx.changed(&rec.id);
            Ok(Done::new(Outcome::Removed, "no longer declared"))
        }
        Removed::Absent => Ok(Done::new(
            Outcome::Removed,
            "no longer declared; already gone",
        )),
        Removed::NotEmpty => Ok(Done::new(
            Outcome::Forgotten,
            "no longer declared, but not empty: left in place so nothing in it is lost",
        )),
    }
}

/// `rec` with the directories the host made on the way to it: those its record already names
/// (made by an earlier write of the same path) and those missing now, which the write about to
/// happen makes; recorded before the write (in the intent), so a crash between the two still
/// knows them.
pub(super) fn with_parents(cx: &Cx<'_>, mut rec: Owned) -> Result<Owned, ResourceError> {
    let mut parents: Vec<String> = cx
        .store
        .state
        .owned(&rec.id)
        .filter(|o| o.key == rec.key)
        .map(|o| o.parents.clone())
        .unwrap_or_default();
    for p in cx.beneath.missing_parents(&rec.key)? {
        if !parents.contains(&p) {
            parents.push(p);
        }
    }
    parents.sort_by_key(|p| p.matches('/').count());
    rec.parents = parents;
    Ok(rec)
}

/// Removes, deepest first, the directories the host made on the way to a resource it removed,
/// while they are empty; says how many went.
pub(super) fn remove_parents(cx: &mut Cx<'_>, rec: &Owned) -> Result<usize, ResourceError> {
    let mut removed = 0;
    for p in rec.parents.iter().rev() {
        cx.machine(p)?;
        match cx.beneath.remove_dir(p)? {
            crate::beneath::Removed::Removed => removed += 1,
            crate::beneath::Removed::Absent => {}
            // Something else lives there now: it and every parent above it stay.
            crate::beneath::Removed::NotEmpty => break,
        }
    }
    Ok(removed)
}

/// `done` for `rec`, and when it removed the resource, the directories the host made on the way
/// to it removed after it ([`remove_parents`]), said in its detail.
pub(super) fn then_parents(
    cx: &mut Cx<'_>,
    rec: &Owned,
    done: Done,
) -> Result<Done, ResourceError> {
    if done.outcome != Outcome::Removed || rec.parents.is_empty() {
        return Ok(done);
    }
    Ok(match remove_parents(cx, rec)? {
        0 => done,
        n => Done::new(
            done.outcome,
            format!(
                "{}; {} it made on the way removed",
                done.detail,
                super::count(n, "directory", "directories")
            ),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::declaration::Resource;
    use crate::system::fake::{declaration, Bed};
    use serde_json::json;

    /// A directory already as declared whose module moved is recorded again with its new module
    /// and the parents its record names (the host made them), so its removal still takes them.
    #[test]
    fn a_directory_whose_module_moved_keeps_the_parents_the_host_made() {
        let mut bed = Bed::new();
        let run = |bed: &mut Bed, module: &str| {
            let d = declaration(
                "converged",
                &[],
                json!([{"id": "d", "module": module, "type": "directory", "path": "/srv/a/b"}]),
            );
            let Resource::Directory(spec) = &d.resources[0] else {
                panic!("not a directory")
            };
            apply(&mut bed.cx(&d), spec).unwrap().outcome
        };
        assert_eq!(run(&mut bed, "web"), Outcome::Created);
        let made = bed.store.state.owned("d").unwrap().clone();
        assert_eq!(made.parents, ["/srv", "/srv/a"]);
        assert_eq!(run(&mut bed, "app"), Outcome::Unchanged);
        let moved = bed.store.state.owned("d").unwrap();
        assert_eq!(moved.module.as_deref(), Some("app"));
        assert_eq!(moved.parents, made.parents);
    }
}
