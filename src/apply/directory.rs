//! The directory applier: a declared directory's existence, mode and ownership.

use super::adopt::{self, Found, Kept};
use super::file::Want;
use super::{Cx, Done, Outcome, ResourceError};
use crate::declaration::{DirectorySpec, Shape};
use crate::store::Owned;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

pub(super) fn read(path: &Path) -> Result<Option<(u32, u32, u32)>, ResourceError> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Ok(Some((m.mode() & 0o7777, m.uid(), m.gid()))),
        Ok(_) => Err(ResourceError::Refused(format!(
            "{} exists and is not a directory; the host will not replace it",
            path.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ResourceError::io(format!("reading {}", path.display()))(e)),
    }
}

/// What a held directory is compared by: its mode and ownership.
pub(super) fn fingerprint((mode, uid, gid): (u32, u32, u32)) -> String {
    format!("directory {mode:04o} {uid}:{gid}")
}

pub(super) fn apply(cx: &mut Cx<'_>, spec: &DirectorySpec) -> Result<Done, ResourceError> {
    let id = spec.id.as_str();
    let key = spec.path.as_str();
    let path = cx.machine(key)?;
    let want = Want::of(
        cx.root,
        spec.mode.as_deref(),
        0o755,
        spec.owner.as_deref(),
        spec.group.as_deref(),
    )?;
    let cur = read(&path)?;
    let owned = cx.store.state.owned_by_key(Shape::Directory, key).cloned();
    let keep = cx.keeps_found(spec.module.as_deref());
    let found = |now: Option<String>| Found {
        id,
        module: spec.module.as_deref(),
        shape: Shape::Directory,
        key,
        keep,
        now,
    };
    let record = |found: bool| Owned {
        id: id.to_string(),
        module: spec.module.clone(),
        shape: Shape::Directory,
        key: key.to_string(),
        digest: None,
        found,
    };
    let ensure = |cx: &mut Cx<'_>, rec: Owned, create: bool| -> Result<(), ResourceError> {
        cx.intend(&rec)?;
        if create {
            fs::create_dir_all(&path)
                .map_err(ResourceError::io(format!("creating {}", path.display())))?;
        }
        want.set(&path)?;
        cx.changed(id);
        match read(&path)? {
            Some((m, u, g)) if want.matches(m, u, g) => Ok(cx.record_owned(rec)?),
            _ => Err(ResourceError::NotAsDeclared(format!(
                "{} does not read back as declared",
                path.display()
            ))),
        }
    };
    match (owned, cur) {
        (Some(rec), Some((m, u, g))) => {
            if want.matches(m, u, g) {
                if rec.id != id {
                    cx.record_owned(record(rec.found))?;
                }
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
    let path = cx.machine(&rec.key)?;
    match fs::remove_dir(&path) {
        Ok(()) => {
            cx.changed(&rec.id);
            Ok(Done::new(Outcome::Removed, "no longer declared"))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Done::new(
            Outcome::Removed,
            "no longer declared; already gone",
        )),
        Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty => Ok(Done::new(
            Outcome::Forgotten,
            "no longer declared, but not empty: left in place so nothing in it is lost",
        )),
        Err(e) => Err(ResourceError::io(format!("removing {}", path.display()))(e)),
    }
}
