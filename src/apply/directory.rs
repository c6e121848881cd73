//! The directory applier: a declared directory's existence, mode and ownership.

use super::adopt::{self, Found, Kept, Records};
use super::file::Want;
use super::{Cx, Done, Outcome, ResourceError};
use crate::beneath::{Dir, Removed, Root};
use crate::declaration::{Declaration, DirectorySpec, Shape};
use crate::store::{Owned, State};
use std::path::Path;

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

/// What the directory applier reads before it decides: the mode and ownership asked for, the
/// directory's now (`None`: nothing there) and the store's records of its path.
pub(super) struct Reading {
    pub want: Want,
    pub now: Option<(u32, u32, u32)>,
    pub records: Records,
}

/// Reads what [`decide`] needs of `spec` beneath `root` and from the store's `state`; changes
/// nothing.
pub(super) fn read_for(
    root: &Root,
    root_path: &Path,
    state: &State,
    decl: &Declaration,
    spec: &DirectorySpec,
) -> Result<Reading, ResourceError> {
    let want = Want::of(
        root_path,
        spec.mode.as_deref(),
        0o755,
        spec.owner.as_deref(),
        spec.group.as_deref(),
    )?;
    let keep = adopt::keeps_found(decl, spec.module.as_deref());
    Ok(Reading {
        want,
        now: read(root, &spec.path)?,
        records: Records::of(state, Shape::Directory, &spec.id, &spec.path, keep),
    })
}

/// What the directory applier does, decided from its [`Reading`] alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Decision {
    /// Owned and as declared: recorded again only when its id or module changed.
    Unchanged { rec: Owned },
    /// Owned, its mode or owner differs: set again.
    Set { found: bool },
    /// Owned and missing: created again.
    Recreate { found: bool },
    /// No record and nothing there: created.
    Create,
    /// Found as declared with no record: taken over.
    TakeOver,
    /// Found otherwise (`print`) with no record: taken over and set.
    TakeOverAndSet { print: String },
    /// Found or held on an adopted node: kept as it is (`print`, what is there now).
    Keep { kept: Kept, print: Option<String> },
}

/// The directory applier's decision: pure, from what was read.
pub(super) fn decide(r: &Reading) -> Decision {
    let matches = |(m, u, g): (u32, u32, u32)| r.want.matches(m, u, g);
    match (&r.records.owned, r.now) {
        (Some(rec), Some(now)) if matches(now) => Decision::Unchanged { rec: rec.clone() },
        (Some(rec), Some(_)) => Decision::Set { found: rec.found },
        (Some(rec), None) => Decision::Recreate { found: rec.found },
        (None, now) => {
            let print = now.map(fingerprint);
            if let Some(kept) = r.records.kept(print.as_deref()) {
                return Decision::Keep { kept, print };
            }
            match (now, print) {
                (Some(now), _) if matches(now) => Decision::TakeOver,
                (Some(_), Some(print)) => Decision::TakeOverAndSet { print },
                _ => Decision::Create,
            }
        }
    }
}

impl Decision {
    /// The outcome the act reports for this decision.
    pub fn outcome(&self) -> Outcome {
        match self {
            Decision::Unchanged { .. } | Decision::TakeOver => Outcome::Unchanged,
            Decision::Set { .. } | Decision::TakeOverAndSet { .. } => Outcome::Changed,
            Decision::Recreate { .. } | Decision::Create => Outcome::Created,
            Decision::Keep { kept, .. } => kept.outcome(),
        }
    }

    /// The preview's line for this decision: what the act would do.
    pub fn preview(&self) -> String {
        match self {
            Decision::Unchanged { .. } => "matches the declaration".into(),
            Decision::Set { .. } => "mode or owner differs; would be set again".into(),
            Decision::Recreate { .. } => "missing; would be created again".into(),
            Decision::Create => "would be created".into(),
            Decision::TakeOver => "found directory already matches; would be taken over".into(),
            Decision::TakeOverAndSet { print } => {
                format!("found directory would be taken over; is {print}")
            }
            Decision::Keep { kept, print } => match (kept, print) {
                (Kept::Held, _) => "found; would be kept as it is".into(),
                (_, Some(print)) => {
                    format!("held directory changed by something else (now {print})")
                }
                (_, None) => "held directory was removed by something else; not recreated".into(),
            },
        }
    }
}

pub(super) fn apply(cx: &mut Cx<'_>, spec: &DirectorySpec) -> Result<Done, ResourceError> {
    cx.machine(&spec.path)?;
    let r = read_for(&cx.beneath, cx.root, &cx.store.state, cx.decl, spec)?;
    let decision = decide(&r);
    execute(cx, spec, &r.want, decision)
}

/// Carries out a [`Decision`]: creates or sets the directory and reads it back, records, or
/// keeps.
pub(super) fn execute(
    cx: &mut Cx<'_>,
    spec: &DirectorySpec,
    want: &Want,
    decision: Decision,
) -> Result<Done, ResourceError> {
    let id = spec.id.as_str();
    let key = spec.path.as_str();
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
    match decision {
        Decision::Unchanged { rec } => {
            // Recorded again only when its id or module changed, with the parents its record
            // already names.
            let same = Owned {
                id: id.to_string(),
                module: spec.module.clone(),
                ..rec.clone()
            };
            cx.refresh_owned(same, Some(&rec))?;
            Ok(Done::new(Outcome::Unchanged, "matches the declaration"))
        }
        Decision::Set { found } => {
            ensure(cx, record(found), false)?;
            Ok(Done::new(
                Outcome::Changed,
                "mode or owner differed; set again",
            ))
        }
        Decision::Recreate { found } => {
            ensure(cx, record(found), true)?;
            Ok(Done::new(Outcome::Created, "was missing; created again"))
        }
        Decision::Create => {
            ensure(cx, record(false), true)?;
            Ok(Done::new(Outcome::Created, "created"))
        }
        Decision::TakeOver => {
            cx.record_owned(record(true))?;
            Ok(Done::new(
                Outcome::Unchanged,
                "found directory already matches; taken over",
            ))
        }
        Decision::TakeOverAndSet { print } => {
            ensure(cx, record(true), false)?;
            Ok(Done::new(
                Outcome::Changed,
                format!("found directory taken over; was {print}"),
            ))
        }
        Decision::Keep { kept, print } => {
            let found = Found {
                id,
                module: spec.module.as_deref(),
                shape: Shape::Directory,
                key,
                now: print.clone(),
                stamp: None,
            };
            adopt::settle(cx, &found, &kept)?;
            Ok(kept.done(|k| match (k, print) {
                (Kept::Held, _) => "found; kept as it is".into(),
                (_, Some(print)) => {
                    format!("held directory changed by something else (now {print}); not reverted")
                }
                (_, None) => "held directory was removed by something else; not recreated".into(),
            }))
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
