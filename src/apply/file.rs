//! The file applier: a declared file's content, mode and ownership, and keeping a found one.

use super::adopt::{self, Found, Kept};
use super::{Cx, Done, Outcome, ResourceError};
use crate::declaration::{validate::parse_mode, FileSpec, Shape};
use crate::store::{self, Owned};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// What is at a file's path now.
pub(super) struct Current {
    pub bytes: Vec<u8>,
    mode: u32,
    uid: u32,
    gid: u32,
}

/// What the declaration asks for.
pub(super) struct Want {
    pub mode: u32,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

impl Want {
    pub fn of(
        root: &Path,
        mode: Option<&str>,
        default: u32,
        owner: Option<&str>,
        group: Option<&str>,
    ) -> Result<Want, ResourceError> {
        Ok(Want {
            mode: mode.map(parse_mode).transpose()?.unwrap_or(default),
            uid: owner.map(|o| crate::accounts::uid(root, o)).transpose()?,
            gid: group.map(|g| crate::accounts::gid(root, g)).transpose()?,
        })
    }

    pub fn matches(&self, mode: u32, uid: u32, gid: u32) -> bool {
        mode == self.mode && self.uid.is_none_or(|u| u == uid) && self.gid.is_none_or(|g| g == gid)
    }

    /// Sets mode and ownership on an open file (`path` only names it in errors).
    pub fn set_file(&self, file: &fs::File, path: &Path) -> Result<(), ResourceError> {
        file.set_permissions(fs::Permissions::from_mode(self.mode))
            .map_err(ResourceError::io(format!(
                "setting mode {:o} on {}",
                self.mode,
                path.display()
            )))?;
        if self.uid.is_some() || self.gid.is_some() {
            std::os::unix::fs::fchown(file, self.uid, self.gid).map_err(ResourceError::io(
                format!("setting owner of {}", path.display()),
            ))?;
        }
        Ok(())
    }

    /// Sets mode and ownership on a path.
    pub fn set(&self, path: &Path) -> Result<(), ResourceError> {
        fs::set_permissions(path, fs::Permissions::from_mode(self.mode)).map_err(
            ResourceError::io(format!(
                "setting mode {:o} on {}",
                self.mode,
                path.display()
            )),
        )?;
        if self.uid.is_some() || self.gid.is_some() {
            std::os::unix::fs::chown(path, self.uid, self.gid).map_err(ResourceError::io(
                format!("setting owner of {}", path.display()),
            ))?;
        }
        Ok(())
    }
}

pub(super) fn read(path: &Path) -> Result<Option<Current>, ResourceError> {
    let reading = || ResourceError::io(format!("reading {}", path.display()));
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(reading()(e)),
    };
    if !meta.is_file() {
        return Err(ResourceError::Refused(format!(
            "{} exists and is not a regular file; the host will not replace it",
            path.display()
        )));
    }
    let bytes = fs::read(path).map_err(reading())?;
    Ok(Some(Current {
        bytes,
        mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
    }))
}

/// Writes the file atomically next to its final path, then renames it into place.
fn write(path: &Path, bytes: &[u8], want: &Want) -> Result<(), ResourceError> {
    let dir = path.parent().ok_or_else(|| {
        ResourceError::Refused(format!("{} has no parent directory", path.display()))
    })?;
    fs::create_dir_all(dir).map_err(ResourceError::io(format!("creating {}", dir.display())))?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.mesh-host.tmp"));
    let file = store::create_synced(&tmp, bytes)
        .map_err(ResourceError::io(format!("writing {}", tmp.display())))?;
    // Mode and owner are set on the open file, never through a path that could be swapped.
    want.set_file(&file, &tmp)?;
    drop(file);
    fs::rename(&tmp, path).map_err(ResourceError::io(format!(
        "renaming into {}",
        path.display()
    )))?;
    store::sync_dir(dir).map_err(ResourceError::io(format!("syncing {}", dir.display())))
}

pub(super) fn matches(cur: &Current, bytes: &[u8], want: &Want) -> bool {
    cur.bytes == bytes && want.matches(cur.mode, cur.uid, cur.gid)
}

pub(super) fn apply(cx: &mut Cx<'_>, spec: &FileSpec) -> Result<Done, ResourceError> {
    let id = spec.id.as_str();
    let key = spec.path.as_str();
    let path = cx.machine(key)?;
    let bytes = spec.bytes();
    let want = Want::of(
        cx.root,
        spec.mode.as_deref(),
        0o644,
        spec.owner.as_deref(),
        spec.group.as_deref(),
    )?;
    let cur = read(&path)?;
    let owned = cx.store.state.owned_by_key(Shape::File, key).cloned();
    let held = cx.store.state.held_at(id, key).cloned();
    let keep = cx.keeps_found(spec.module.as_deref()) || spec.create_once;
    let found = |now: Option<String>| Found {
        id,
        module: spec.module.as_deref(),
        shape: Shape::File,
        key,
        keep,
        now,
    };
    let record = |found: bool| Owned {
        id: id.to_string(),
        module: spec.module.clone(),
        shape: Shape::File,
        key: key.to_string(),
        digest: Some(store::digest(&bytes)),
        found,
    };

    match (owned, cur) {
        (Some(rec), Some(cur)) => {
            if spec.create_once || matches(&cur, &bytes, &want) {
                let mut same = rec.clone();
                same.id = id.to_string();
                same.module = spec.module.clone();
                cx.refresh_owned(same, Some(&rec))?;
                return Ok(Done::new(Outcome::Unchanged, "matches the declaration"));
            }
            let rec = Owned {
                found: rec.found,
                ..record(rec.found)
            };
            write_and_record(cx, &path, &bytes, &want, rec)?;
            Ok(Done::new(
                Outcome::Changed,
                "differed from the declaration; written again",
            ))
        }
        (Some(rec), None) => {
            let rec = Owned {
                found: rec.found,
                ..record(rec.found)
            };
            write_and_record(cx, &path, &bytes, &want, rec)?;
            Ok(Done::new(Outcome::Created, "was missing; written again"))
        }
        (None, None) => {
            if let Some(kept) = adopt::decide(cx, &found(None))? {
                return Ok(
                    kept.done(|_| "held file was removed by something else; not recreated".into())
                );
            }
            write_and_record(cx, &path, &bytes, &want, record(false))?;
            Ok(Done::new(Outcome::Created, "written"))
        }
        (None, Some(cur)) => {
            // The store was lost: a file that is exactly what the declaration says is most likely
            // the host's own write from before. It is taken over (never removed, as anything
            // found) but not saved as a found original, which would be the host's own bytes.
            if cx.store.rebuilt && held.is_none() && matches(&cur, &bytes, &want) {
                cx.record_owned(record(true))?;
                return Ok(Done::new(
                    Outcome::Unchanged,
                    "matches the declaration; the store was rebuilt, so it is taken as the \
                     host's own write (not saved as a found original, never removed)",
                ));
            }
            // Found: present with no record. Its original is saved before anything else.
            let saved = cx.keep_original(id, key, &cur.bytes)?;
            let now = store::digest(&cur.bytes);
            if let Some(kept) = adopt::decide(cx, &found(Some(now.clone())))? {
                return Ok(kept.done(|k| match k {
                    Kept::Gone | Kept::Changed { .. } => format!(
                        "held file was rewritten by something else (now {now}); not reverted"
                    ),
                    Kept::Held => format!("found; kept as it is; original saved at {saved}"),
                }));
            }
            if matches(&cur, &bytes, &want) {
                cx.record_owned(record(true))?;
                return Ok(Done::new(
                    Outcome::Unchanged,
                    format!("found file already matches; taken over; original saved at {saved}"),
                ));
            }
            write_and_record(cx, &path, &bytes, &want, record(true))?;
            Ok(Done::new(
                Outcome::Changed,
                format!("found file replaced; original saved at {saved}"),
            ))
        }
    }
}

fn write_and_record(
    cx: &mut Cx<'_>,
    path: &Path,
    bytes: &[u8],
    want: &Want,
    rec: Owned,
) -> Result<(), ResourceError> {
    cx.intend(&rec)?;
    write(path, bytes, want)?;
    cx.changed(&rec.id);
    let back = read(path)?.ok_or_else(|| {
        ResourceError::NotAsDeclared(format!(
            "{} is missing right after it was written",
            path.display()
        ))
    })?;
    if !matches(&back, bytes, want) {
        return Err(ResourceError::NotAsDeclared(format!(
            "{} does not read back as written",
            path.display()
        )));
    }
    Ok(cx.record_owned(rec)?)
}

/// Removes an undeclared file the host created; one it took over is forgotten, never removed.
pub(super) fn remove(cx: &mut Cx<'_>, rec: &Owned) -> Result<Done, ResourceError> {
    if rec.found {
        let original = cx
            .store
            .state
            .original(&rec.key)
            .map(|o| format!("; its original stays saved at {}", o.saved))
            .unwrap_or_default();
        return Ok(Done::new(
            Outcome::Forgotten,
            format!("the host took this file over rather than creating it, so it is left in place{original}"),
        ));
    }
    let path = cx.machine(&rec.key)?;
    match fs::remove_file(&path) {
        Ok(()) => {
            cx.changed(&rec.id);
            Ok(Done::new(Outcome::Removed, "no longer declared"))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Done::new(
            Outcome::Removed,
            "no longer declared; already gone",
        )),
        Err(e) => Err(ResourceError::io(format!("removing {}", path.display()))(e)),
    }
}
