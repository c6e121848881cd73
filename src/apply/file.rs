//! The file applier: a declared file's content, mode and ownership, and keeping a found one.

use super::adopt::{self, Found, Kept, Records};
use super::original::found_read_limit;
use super::{Cx, Done, Outcome, ResourceError};
use crate::beneath::{self, Removed, Root};
use crate::declaration::{validate::parse_mode, Declaration, FileSpec, Shape};
use crate::store::{self, Owned, Stamp};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

/// What is at a file's path now: the regular file, open, read only by streaming.
pub(super) struct Current {
    pub found: beneath::Found,
}

impl Current {
    fn mode(&self) -> u32 {
        self.found.mode
    }
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

    /// Sets mode and ownership on an open file or directory (`path` only names it in errors):
    /// never through a path that could be swapped.
    pub fn set_fd(&self, fd: BorrowedFd<'_>, path: &str) -> std::io::Result<()> {
        nix::sys::stat::fchmod(fd, nix::sys::stat::Mode::from_bits_truncate(self.mode)).map_err(
            |e| {
                std::io::Error::new(
                    std::io::Error::from(e).kind(),
                    format!("setting mode {:o} on {path}: {e}", self.mode),
                )
            },
        )?;
        if self.uid.is_some() || self.gid.is_some() {
            std::os::unix::fs::fchown(fd, self.uid, self.gid).map_err(|e| {
                std::io::Error::new(e.kind(), format!("setting owner of {path}: {e}"))
            })?;
        }
        Ok(())
    }
}

/// The regular file at a declared path, opened beneath the root; refused if a link is on the
/// way or what is there is not a regular file (a FIFO never blocks, a device is never read).
pub(super) fn read(root: &Root, key: &str) -> Result<Option<Current>, ResourceError> {
    Ok(root.read_file(key)?.map(|found| Current { found }))
}

/// [`read`], each whole read of it bounded by `settings.found_read_s` from now.
pub(super) fn read_within(
    root: &Root,
    key: &str,
    settings: Option<&crate::declaration::Settings>,
) -> Result<Option<Current>, ResourceError> {
    let secs = super::original::found_read_secs(settings);
    Ok(read(root, key)?.map(|mut cur| {
        cur.found.deadline = Some((
            std::time::Instant::now() + std::time::Duration::from_secs(secs),
            secs,
        ));
        cur
    }))
}

/// Whether what is there is exactly the declared bytes (the length first, then streamed, within
/// the read `limit`) with the declared mode and ownership.
pub(super) fn matches(
    cur: &Current,
    key: &str,
    bytes: &[u8],
    want: &Want,
    limit: u64,
) -> Result<bool, ResourceError> {
    Ok(want.matches(cur.mode(), cur.found.uid, cur.found.gid) && holds(cur, key, bytes, limit)?)
}

/// Whether the file holds exactly the declared bytes: the length first, then streamed (within
/// the read `limit`).
fn holds(cur: &Current, key: &str, bytes: &[u8], limit: u64) -> Result<bool, ResourceError> {
    if cur.found.size != bytes.len() as u64 {
        return Ok(false);
    }
    may_read(key, &cur.found, limit)?;
    Ok(cur.found.holds(bytes).unwrap_or(false))
}

/// The file's digest, streamed (within the read `limit`).
pub(super) fn digest(cur: &Current, key: &str, limit: u64) -> Result<String, ResourceError> {
    may_read(key, &cur.found, limit)?;
    cur.found
        .digest()
        .map_err(ResourceError::io(format!("reading {key}")))
}

/// Refuses a file larger than the read `limit` (`settings.found_read_limit_bytes`) before it is
/// read whole: no apply spends minutes on one file.
pub(super) fn may_read(
    key: &str,
    found: &crate::beneath::Found,
    limit: u64,
) -> Result<(), ResourceError> {
    if found.size > limit {
        return Err(ResourceError::TooLarge {
            key: key.to_string(),
            size: found.size,
            limit,
        });
    }
    Ok(())
}

/// What the file applier reads before it decides: the mode and ownership asked for, the file
/// there now (open, read only by streaming), the store's records of its path, and the bounds
/// its reads keep.
pub(super) struct Reading {
    pub want: Want,
    pub cur: Option<Current>,
    pub records: Records,
    /// The store was lost and rebuilt: a found file exactly as declared is the host's own write.
    pub rebuilt: bool,
    /// A found original of this path is saved already.
    pub has_original: bool,
    /// The read bound (`settings.found_read_limit_bytes`).
    pub limit: u64,
}

/// Reads what [`decide`] needs of `spec` beneath `root` and from the store's `state`, its reads
/// bounded by `settings`; changes nothing (`rebuilt`: the store was rebuilt, which only the
/// act's open store knows).
pub(super) fn read_for(
    root: &Root,
    root_path: &Path,
    state: &store::State,
    decl: &Declaration,
    settings: Option<&crate::declaration::Settings>,
    spec: &FileSpec,
    rebuilt: bool,
) -> Result<Reading, ResourceError> {
    let key = spec.path.as_str();
    let want = Want::of(
        root_path,
        spec.mode.as_deref(),
        0o644,
        spec.owner.as_deref(),
        spec.group.as_deref(),
    )?;
    let keep = adopt::keeps_found(decl, spec.module.as_deref()) || spec.create_once;
    Ok(Reading {
        want,
        cur: read_within(root, key, settings)?,
        records: Records::of(state, Shape::File, &spec.id, key, keep),
        rebuilt,
        has_original: state.original(key).is_some(),
        limit: found_read_limit(settings),
    })
}

/// What the file applier does, decided from its [`Reading`] (and the declared bytes) alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Decision {
    /// Owned and on disk as declared: `same` (the record brought to what is on disk) written
    /// only where it differs from `was`.
    Unchanged { same: Box<Owned>, was: Box<Owned> },
    /// Owned, and differs from the declaration: written again.
    Rewrite { found: bool },
    /// Owned and missing: written again.
    Recreate { found: bool },
    /// No record and nothing there: written.
    Create,
    /// Held, and something else removed it: not recreated.
    Gone,
    /// The store was rebuilt and the file found is exactly as declared: taken as the host's
    /// own write, with its `stamp`.
    Rebuilt { stamp: Option<Stamp> },
    /// Found with no record: its original is saved first (its digest taken as it is copied,
    /// or `known` from a held record the file still matches), then [`decide_found`] says what
    /// becomes of it; `stamp` is kept with its record.
    Found {
        known: Option<String>,
        stamp: Option<Stamp>,
    },
}

/// What becomes of a found file once its digest (`now`) is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum FoundDecision {
    /// Kept as it is (adopted node, module not taken, or `create_once`).
    Keep(Kept),
    /// Already as declared: taken over.
    TakeOver,
    /// Replaced by the declared file.
    Replace,
}

/// The file applier's decision, from what was read and what is declared. It writes nothing; it
/// may stream the file's bytes (bounded by the reading's limit) to compare them.
pub(super) fn decide(r: &Reading, spec: &FileSpec) -> Result<Decision, ResourceError> {
    let key = spec.path.as_str();
    let bytes = spec.bytes();
    let declared = store::digest(&bytes);
    let want = &r.want;
    match (&r.records.owned, &r.cur) {
        (Some(rec), Some(cur)) => {
            // What is on disk, as the record's digest: taken from the record while the file
            // shows the stamp that digest was taken with, otherwise read. The record is brought
            // to it whatever it said before (someone wrote the declared bytes meanwhile, or the
            // record of the last write was lost), so the store never keeps a stale digest.
            let unchanged = cur.found.unchanged_since(rec.stamp.as_ref());
            let on_disk = if spec.create_once {
                // Created once and then left: whatever is there is what the record says.
                Some(match (&rec.digest, unchanged) {
                    (Some(d), true) => d.clone(),
                    _ => digest(cur, key, r.limit)?,
                })
            } else if !want.matches(cur.mode(), cur.found.uid, cur.found.gid) {
                None
            } else if unchanged && rec.digest.as_deref() == Some(declared.as_str())
                || holds(cur, key, &bytes, r.limit)?
            {
                Some(declared)
            } else {
                None
            };
            let stamp = if unchanged {
                rec.stamp
            } else {
                cur.found.settled_stamp()
            };
            Ok(match on_disk {
                Some(digest) => Decision::Unchanged {
                    same: Box::new(Owned {
                        id: spec.id.clone(),
                        module: spec.module.clone(),
                        digest: Some(digest),
                        stamp,
                        ..rec.clone()
                    }),
                    was: Box::new(rec.clone()),
                },
                None => Decision::Rewrite { found: rec.found },
            })
        }
        (Some(rec), None) => Ok(Decision::Recreate { found: rec.found }),
        (None, None) => Ok(match r.records.kept(None) {
            Some(_) => Decision::Gone,
            None => Decision::Create,
        }),
        (None, Some(cur)) => {
            let held = r.records.held.as_ref();
            if r.rebuilt && held.is_none() && matches(cur, key, &bytes, want, r.limit)? {
                return Ok(Decision::Rebuilt {
                    stamp: cur.found.settled_stamp(),
                });
            }
            // A held file that still shows the stamp its digest was taken with is not read.
            let known = held
                .filter(|h| cur.found.unchanged_since(h.stamp.as_ref()))
                .and_then(|h| h.digest.clone());
            let stamp = match &known {
                Some(_) => held.and_then(|h| h.stamp),
                None => cur.found.settled_stamp(),
            };
            if known.is_none() || !r.has_original {
                may_read(key, &cur.found, r.limit)?;
            }
            Ok(Decision::Found { known, stamp })
        }
    }
}

/// What becomes of the found file of `r` whose digest is `now`: kept, taken over as it is, or
/// replaced. Streams it (within the read bound) to compare it with the declared bytes.
pub(super) fn decide_found(
    r: &Reading,
    spec: &FileSpec,
    now: &str,
) -> Result<FoundDecision, ResourceError> {
    if let Some(kept) = r.records.kept(Some(now)) {
        return Ok(FoundDecision::Keep(kept));
    }
    let bytes = spec.bytes();
    let same = match &r.cur {
        Some(cur) if now == store::digest(&bytes) => {
            matches(cur, &spec.path, &bytes, &r.want, r.limit)?
        }
        _ => false,
    };
    Ok(if same {
        FoundDecision::TakeOver
    } else {
        FoundDecision::Replace
    })
}

/// What a preview says of a [`Decision`]: the outcome the act would report and a line saying
/// why. A found file's digest is streamed here (the act takes it as it saves the original), and
/// [`decide_found`] decides the rest, as in the act.
pub(super) fn preview(
    r: &Reading,
    spec: &FileSpec,
    decision: &Decision,
) -> Result<(Outcome, String), ResourceError> {
    let said = |o: Outcome, d: &str| Ok((o, d.to_string()));
    match decision {
        Decision::Unchanged { .. } => said(Outcome::Unchanged, "matches the declaration"),
        Decision::Rewrite { .. } => said(
            Outcome::Changed,
            "differs from the declaration; would be written again",
        ),
        Decision::Recreate { .. } => said(Outcome::Created, "missing; would be written again"),
        Decision::Create => said(
            Outcome::Created,
            &format!("would be written ({} bytes)", spec.bytes().len()),
        ),
        Decision::Gone => said(
            Outcome::ChangedBySomethingElse,
            "held file was removed by something else; not recreated",
        ),
        Decision::Rebuilt { .. } => said(
            Outcome::Unchanged,
            "matches the declaration; the store was rebuilt, so it would be taken as the \
             host's own write",
        ),
        Decision::Found { known, .. } => {
            let now = match (known, &r.cur) {
                (Some(known), _) => known.clone(),
                (None, Some(cur)) => digest(cur, &spec.path, r.limit)?,
                (None, None) => {
                    return Err(ResourceError::NotAsDeclared(format!(
                        "{} was found, then not there to read",
                        spec.path
                    )))
                }
            };
            let found = decide_found(r, spec, &now)?;
            let line = match &found {
                FoundDecision::Keep(Kept::Held) => {
                    "found; would be kept as it is, its original saved".into()
                }
                FoundDecision::Keep(_) => {
                    format!("held file was rewritten by something else (now {now}); not reverted")
                }
                FoundDecision::TakeOver => "found file already matches; would be taken over".into(),
                FoundDecision::Replace => {
                    "found file would be replaced, its original saved first".into()
                }
            };
            Ok((found.outcome(), line))
        }
    }
}

impl FoundDecision {
    /// The outcome the act reports for this decision.
    pub fn outcome(&self) -> Outcome {
        match self {
            FoundDecision::Keep(kept) => kept.outcome(),
            FoundDecision::TakeOver => Outcome::Unchanged,
            FoundDecision::Replace => Outcome::Changed,
        }
    }
}

pub(super) fn apply(cx: &mut Cx<'_>, spec: &FileSpec) -> Result<Done, ResourceError> {
    cx.machine(&spec.path)?;
    let (state, rebuilt) = (&cx.store.state, cx.store.rebuilt);
    let settings = state.settings.as_ref();
    let r = read_for(
        &cx.beneath,
        cx.root,
        state,
        cx.decl,
        settings,
        spec,
        rebuilt,
    )?;
    let decision = decide(&r, spec)?;
    execute(cx, spec, &r, decision)
}

/// Carries out a [`Decision`]: writes and reads back, records, saves a found original, or keeps.
pub(super) fn execute(
    cx: &mut Cx<'_>,
    spec: &FileSpec,
    r: &Reading,
    decision: Decision,
) -> Result<Done, ResourceError> {
    let id = spec.id.as_str();
    let key = spec.path.as_str();
    // The declared bytes, copied (or decoded) only where something is written or recorded: an
    // unchanged file, the common case of a reconcile, needs none.
    let bytes = match decision {
        Decision::Unchanged { .. } | Decision::Gone => Vec::new(),
        _ => spec.bytes(),
    };
    let want = &r.want;
    let record = |found: bool, stamp: Option<Stamp>| Owned {
        parents: Vec::new(),
        id: id.to_string(),
        module: spec.module.clone(),
        shape: Shape::File,
        key: key.to_string(),
        digest: Some(store::digest(&bytes)),
        found,
        stamp,
    };
    match decision {
        Decision::Unchanged { same, was } => {
            cx.refresh_owned(*same, Some(&was))?;
            Ok(Done::new(Outcome::Unchanged, "matches the declaration"))
        }
        Decision::Rewrite { found } => {
            write_and_record(cx, key, &bytes, want, record(found, None))?;
            Ok(Done::new(
                Outcome::Changed,
                "differed from the declaration; written again",
            ))
        }
        Decision::Recreate { found } => {
            write_and_record(cx, key, &bytes, want, record(found, None))?;
            Ok(Done::new(Outcome::Created, "was missing; written again"))
        }
        Decision::Create => {
            write_and_record(cx, key, &bytes, want, record(false, None))?;
            Ok(Done::new(Outcome::Created, "written"))
        }
        Decision::Gone => Ok(
            Kept::Gone.done(|_| "held file was removed by something else; not recreated".into())
        ),
        Decision::Rebuilt { stamp } => {
            // The store was lost: a file that is exactly what the declaration says is most likely
            // the host's own write from before. It is taken over (never removed, as anything
            // found) but not saved as a found original, which would be the host's own bytes.
            cx.record_owned(record(true, stamp))?;
            Ok(Done::new(
                Outcome::Unchanged,
                "matches the declaration; the store was rebuilt, so it is taken as the \
                 host's own write (not saved as a found original, never removed)",
            ))
        }
        Decision::Found { known, stamp } => {
            let Some(cur) = &r.cur else {
                return Err(ResourceError::NotAsDeclared(format!(
                    "{key} was found, then not there to save its original"
                )));
            };
            // Found: present with no record. Its original is saved before anything else.
            let kept = cx.keep_original(id, key, &cur.found, known)?;
            let saved = kept.said();
            let now = kept.digest;
            match decide_found(r, spec, &now)? {
                FoundDecision::Keep(kept) => {
                    let found = Found {
                        id,
                        module: spec.module.as_deref(),
                        shape: Shape::File,
                        key,
                        now: Some(now.clone()),
                        stamp,
                    };
                    adopt::settle(cx, &found, &kept)?;
                    Ok(kept.done(|k| match k {
                        Kept::Gone | Kept::Changed { .. } => format!(
                            "held file was rewritten by something else (now {now}); not reverted"
                        ),
                        Kept::Held => format!("found; kept as it is; {saved}"),
                    }))
                }
                FoundDecision::TakeOver => {
                    cx.record_owned(record(true, stamp))?;
                    Ok(Done::new(
                        Outcome::Unchanged,
                        format!("found file already matches; taken over; {saved}"),
                    ))
                }
                FoundDecision::Replace => {
                    write_and_record(cx, key, &bytes, want, record(true, None))?;
                    Ok(Done::new(
                        Outcome::Changed,
                        format!("found file replaced; {saved}"),
                    ))
                }
            }
        }
    }
}

fn write_and_record(
    cx: &mut Cx<'_>,
    key: &str,
    bytes: &[u8],
    want: &Want,
    rec: Owned,
) -> Result<(), ResourceError> {
    let rec = super::directory::with_parents(cx, rec)?;
    cx.intend(&rec)?;
    // Written through the parent's handle beneath the root; mode and owner set on the open file.
    cx.beneath
        .write_file(key, bytes, |f| want.set_fd(f.as_fd(), key))?;
    cx.changed(&rec.id);
    let back = read(&cx.beneath, key)?.ok_or_else(|| {
        ResourceError::NotAsDeclared(format!("{key} is missing right after it was written"))
    })?;
    // Read back whatever its size: the bytes are the declaration's own.
    if !matches(&back, key, bytes, want, u64::MAX)? {
        return Err(ResourceError::NotAsDeclared(format!(
            "{key} does not read back as written"
        )));
    }
    // Recorded as intended, without a stamp: a file just written has the change time of this
    // very moment, never settled; the next apply that reads it keeps its stamp.
    Ok(cx.record_owned(rec)?)
}

/// What the file applier reads of a record no longer declared before it decides: where the
/// original of a file it took over is saved, and for a file it created, why it is not the host's
/// to remove any more ([`edited_since`]).
pub(super) struct RemovalReading {
    pub saved: Option<String>,
    pub edited: Option<String>,
}

/// Reads what [`decide_removal`] needs of `rec` beneath `root` and from the store's `state`, its
/// reads bounded by `settings`; changes nothing.
pub(super) fn read_removal(
    root: &Root,
    state: &store::State,
    settings: Option<&crate::declaration::Settings>,
    rec: &Owned,
) -> Result<RemovalReading, ResourceError> {
    Ok(RemovalReading {
        saved: state
            .original(&rec.key)
            .and_then(|o| super::saved_at(o).map(str::to_string)),
        edited: if rec.found {
            None
        } else {
            edited_since(root, rec, settings)?
        },
    })
}

/// What the file applier does with a record no longer declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Removal {
    /// Taken over, and a release gives it back: its original put back from where it is `saved`.
    PutBack { saved: String },
    /// Taken over rather than created: left in place, its record forgotten.
    LeaveFound,
    /// Created by the host but changed since (`why`): left in place, its record forgotten.
    LeaveEdited { why: String },
    /// Created by the host and as it wrote it (or gone): removed.
    Remove,
}

/// The file applier's decision for a record no longer declared (`release`: the act is a
/// release): pure, from what was read.
pub(super) fn decide_removal(r: &RemovalReading, rec: &Owned, release: bool) -> Removal {
    match (&r.saved, &r.edited) {
        (Some(saved), _) if rec.found && release => Removal::PutBack {
            saved: saved.clone(),
        },
        _ if rec.found => Removal::LeaveFound,
        (_, Some(why)) => Removal::LeaveEdited { why: why.clone() },
        (_, None) => Removal::Remove,
    }
}

impl Removal {
    /// The outcome the act reports for this decision, and the preview's line for it.
    pub fn preview(&self) -> (Outcome, String) {
        match self {
            Removal::PutBack { saved } => (
                Outcome::Removed,
                format!("taken over: its original would be put back byte for byte from {saved}"),
            ),
            Removal::LeaveFound => (
                Outcome::Forgotten,
                "taken over, not created: left in place".into(),
            ),
            Removal::LeaveEdited { why } => (Outcome::Forgotten, why.clone()),
            Removal::Remove => (
                Outcome::Removed,
                "no longer declared; would be removed".into(),
            ),
        }
    }
}

/// Removes an undeclared file the host created; one it took over is forgotten, never removed,
/// except by a release, which puts its saved original back.
pub(super) fn remove(cx: &mut Cx<'_>, rec: &Owned) -> Result<Done, ResourceError> {
    if !rec.found {
        cx.machine(&rec.key)?;
    }
    let settings = cx.store.state.settings.as_ref();
    let r = read_removal(&cx.beneath, &cx.store.state, settings, rec)?;
    match decide_removal(&r, rec, cx.decl.release) {
        Removal::PutBack { saved } => {
            let Some(o) = cx.store.state.original(&rec.key).cloned() else {
                return Err(ResourceError::NotAsDeclared(format!(
                    "the saved original of {} is no longer recorded; the file is left as it is",
                    rec.key
                )));
            };
            put_back(cx, rec, &o, &saved)
        }
        Removal::LeaveFound => {
            let original = cx
                .store
                .state
                .original(&rec.key)
                .map(|o| match super::saved_at(o) {
                    Some(at) => format!("; its original stays saved at {at}"),
                    None => "; its original was recorded by its digest only".into(),
                })
                .unwrap_or_default();
            Ok(Done::new(
                Outcome::Forgotten,
                format!("the host took this file over rather than creating it, so it is left in place{original}"),
            ))
        }
        Removal::LeaveEdited { why } => Ok(Done::new(Outcome::Forgotten, why)),
        Removal::Remove => match cx.beneath.remove_file(&rec.key)? {
            Removed::Removed => {
                cx.changed(&rec.id);
                Ok(Done::new(Outcome::Removed, "no longer declared"))
            }
            Removed::Absent | Removed::NotEmpty => Ok(Done::new(
                Outcome::Removed,
                "no longer declared; already gone",
            )),
        },
    }
}

/// Why an owned file no longer declared is not the host's to remove, if it is not: changed since
/// the host last recorded it (an admin's edit after the host wrote it), it holds bytes the host
/// did not write, so it is left in place and its record forgotten, said with both digests —
/// never removed unseen. The stamp spares the read of an unchanged file. The act and the
/// preview both ask this.
pub(super) fn edited_since(
    root: &Root,
    rec: &Owned,
    settings: Option<&crate::declaration::Settings>,
) -> Result<Option<String>, ResourceError> {
    let Some(recorded) = rec.digest.as_deref() else {
        return Ok(None);
    };
    let Some(cur) = read_within(root, &rec.key, settings)? else {
        return Ok(None);
    };
    if cur.found.unchanged_since(rec.stamp.as_ref()) {
        return Ok(None);
    }
    let now = digest(&cur, &rec.key, found_read_limit(settings))?;
    Ok((now != recorded).then(|| {
        format!(
            "no longer declared, but changed since the host wrote it ({recorded} recorded, \
             {now} on disk): left in place, not removed"
        )
    }))
}

/// A release's giving back of a file the host took over: its original `o`, as saved in the store
/// (at `saved`) when it was first found, written back byte for byte (its digest checked first)
/// with the mode and owner it was found with.
fn put_back(
    cx: &mut Cx<'_>,
    rec: &Owned,
    o: &crate::store::Original,
    saved: &str,
) -> Result<Done, ResourceError> {
    let name = Path::new(saved)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    let path = cx.store.dir().join("originals").join(&name);
    // Read by name in the store's directory, following no link.
    let bytes = cx
        .store
        .originals(false)
        .and_then(|d| d.ok_or_else(|| std::io::ErrorKind::NotFound.into()))
        .and_then(|d| d.read(&name))
        .and_then(|b| b.ok_or_else(|| std::io::ErrorKind::NotFound.into()))
        .map_err(|e| {
            ResourceError::NotAsDeclared(format!(
                "the saved original of {} ({}) cannot be read: {e}; the file is left as it is",
                rec.key,
                path.display()
            ))
        })?;
    if crate::store::digest(&bytes) != o.digest {
        return Err(ResourceError::NotAsDeclared(format!(
            "the saved original of {} ({}) no longer has the digest it was saved with ({}); \
             the file is left as it is",
            rec.key,
            path.display(),
            o.digest
        )));
    }
    cx.machine(&rec.key)?;
    // As found; a store from before mode and owner were recorded keeps the file's present ones.
    let found_as = match (o.mode, read(&cx.beneath, &rec.key)?) {
        (Some(mode), _) => Want {
            mode,
            uid: o.uid,
            gid: o.gid,
        },
        (None, Some(now)) => Want {
            mode: now.mode() & 0o7777,
            uid: Some(now.found.uid),
            gid: Some(now.found.gid),
        },
        (None, None) => Want {
            mode: 0o644,
            uid: None,
            gid: None,
        },
    };
    cx.beneath
        .write_file(&rec.key, &bytes, |f| found_as.set_fd(f.as_fd(), &rec.key))?;
    cx.changed(&rec.id);
    Ok(Done::new(
        Outcome::Removed,
        format!(
            "given back: its original put back byte for byte ({} bytes, {}) from {saved}",
            bytes.len(),
            o.digest
        ),
    ))
}
