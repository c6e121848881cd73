//! The adoption decision, made in one place for every applier: what the host does with a
//! resource it has no record of owning (kept as found and held, reported changed by something
//! else, or left to the applier to create or take over), and recording an owned one again only
//! when its record changed.
//!
//! Each applier reads its resource and says what is there as a *fingerprint* (the text a held
//! record keeps: `directory 0755 0:0`, `service running enabled`, a file's digest); it words the
//! decision for its shape, and the decision's outcome is the same for all of them.

use super::{Cx, Done, Outcome};
use crate::declaration::{Declaration, Mode, Shape};
use crate::store::{Held, Owned, Stamp, State, StoreError};

/// A declared resource the host has no owned record of, as its applier found it.
pub(super) struct Found<'a> {
    pub id: &'a str,
    pub module: Option<&'a str>,
    pub shape: Shape,
    /// Its path or name, the key its records are kept under.
    pub key: &'a str,
    /// What is there now, as its fingerprint; `None` when nothing is.
    pub now: Option<String>,
    /// A file's settled stamp, taken with its fingerprint (its digest): kept in the held record,
    /// so a file that still shows it is not read again.
    pub stamp: Option<Stamp>,
}

/// What the decision kept: the resource is left as it is, and the applier words why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kept {
    /// It was held, and something else removed it: not recreated.
    Gone,
    /// It was held as `was`, and something else changed it since: not reverted.
    Changed { was: String },
    /// Found (and now held), or held and as it was: kept as it is.
    Held,
}

impl Kept {
    /// The outcome the act reports for this decision (and the preview says it would).
    pub fn outcome(&self) -> Outcome {
        match self {
            Kept::Held => Outcome::Held,
            Kept::Gone | Kept::Changed { .. } => Outcome::ChangedBySomethingElse,
        }
    }

    /// The report's line for this decision, in the applier's words.
    pub fn done(&self, words: impl FnOnce(&Kept) -> String) -> Done {
        Done::new(self.outcome(), words(self))
    }
}

/// What the store says of a declared resource before its applier decides: the host's record of
/// owning what is at its key, the held record of what was found there, and whether something
/// found there is kept as it is. Part of every applier's reading.
#[derive(Debug, Clone, Default)]
pub(super) struct Records {
    pub owned: Option<Owned>,
    pub held: Option<Held>,
    pub keep: bool,
}

impl Records {
    /// The records of resource `id` of `shape` at `key`, as `state` holds them; `keep` as the
    /// applier reckons it (see [`keeps_found`]).
    pub fn of(state: &State, shape: Shape, id: &str, key: &str, keep: bool) -> Records {
        Records {
            owned: state.owned_by_key(shape, key).cloned(),
            held: state.held_at(id, key).cloned(),
            keep,
        }
    }

    /// The adoption decision for what is there now (its fingerprint, `None` when nothing is),
    /// made without recording anything: `None` when the applier creates or takes over.
    pub fn kept(&self, now: Option<&str>) -> Option<Kept> {
        judge(self.keep, self.held.as_ref(), now)
    }
}

/// Whether a found resource of `module` is kept as it is under `decl`: an adopted node whose
/// module is not taken.
pub(super) fn keeps_found(decl: &Declaration, module: Option<&str>) -> bool {
    decl.mode == Mode::Adopted && !decl.is_taken(module)
}

/// The adoption decision, pure: `None` when nothing is kept (not `keep`, or nothing there and
/// nothing held), else what is kept given the held record and what is there `now`.
pub(super) fn judge(keep: bool, held: Option<&Held>, now: Option<&str>) -> Option<Kept> {
    if !keep {
        return None;
    }
    Some(match (held, now) {
        (None, None) => return None,
        (Some(_), None) => Kept::Gone,
        (Some(h), Some(now)) if h.digest.as_deref() != Some(now) => Kept::Changed {
            was: h.digest.clone().unwrap_or_default(),
        },
        (Some(_), Some(_)) | (None, Some(_)) => Kept::Held,
    })
}

/// Acts on a [`judge`]ment that kept `found`: a found resource seen for the first time is
/// recorded held with what was found; a held one seen as it was has only its stamp brought up to
/// date (no journal line, see `Cx::refresh_owned`). A held record's fingerprint is never
/// rewritten, so a later change by something else stays reported.
pub(super) fn settle(cx: &mut Cx<'_>, found: &Found<'_>, kept: &Kept) -> Result<(), StoreError> {
    if *kept != Kept::Held {
        return Ok(());
    }
    match cx.store.state.held_at(found.id, found.key).cloned() {
        Some(h) => {
            if found.stamp.is_some() && found.stamp != h.stamp {
                cx.store.state.record_held(Held {
                    stamp: found.stamp,
                    ..h
                });
            }
            Ok(())
        }
        None => cx.record_held(Held {
            id: found.id.to_string(),
            module: found.module.map(str::to_string),
            shape: found.shape,
            key: found.key.to_string(),
            digest: found.now.clone(),
            stamp: found.stamp,
        }),
    }
}

/// The adoption decision for a resource with no owned record, made ([`judge`]) and acted on
/// ([`settle`]): `None` when it is not kept, and the applier creates it (nothing there) or takes
/// it over (found, not kept); otherwise what is kept, with a found resource recorded held the
/// first time it is seen.
#[cfg(test)]
pub(super) fn decide(
    cx: &mut Cx<'_>,
    keep: bool,
    found: &Found<'_>,
) -> Result<Option<Kept>, StoreError> {
    let held = cx.store.state.held_at(found.id, found.key).cloned();
    let Some(kept) = judge(keep, held.as_ref(), found.now.as_deref()) else {
        return Ok(None);
    };
    settle(cx, found, &kept)?;
    Ok(Some(kept))
}

impl Cx<'_> {
    /// Records an owned resource the machine already matches, only when the store's record of it
    /// (`was`) is not already exactly `rec` (a new id or module, a record taken over, a stale
    /// digest brought to what is on disk): an apply that changes nothing journals nothing. A
    /// record that differs in its stamp alone is changed in the state without a journal line:
    /// the fold that ends every apply writes it, and a crash that loses it costs one more read.
    pub fn refresh_owned(&mut self, rec: Owned, was: Option<&Owned>) -> Result<(), StoreError> {
        if was == Some(&rec) {
            return Ok(());
        }
        if was.is_some_and(|w| unstamped_owned(w) == unstamped_owned(&rec)) {
            self.store.state.record_owned(rec);
            return Ok(());
        }
        self.record_owned(rec)
    }
}

fn unstamped_owned(rec: &Owned) -> Owned {
    Owned {
        stamp: None,
        ..rec.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::declaration::{Declaration, Resource};
    use crate::system::fake::{declaration, Bed};
    use serde_json::json;

    fn found(now: Option<&str>) -> Found<'static> {
        Found {
            id: "web/conf",
            module: Some("web"),
            shape: Shape::File,
            key: "/etc/web.conf",
            now: now.map(str::to_string),
            stamp: None,
        }
    }

    fn adopted() -> Declaration {
        declaration("adopted", &[], json!([]))
    }

    /// The size of the store's journal: what a decision that records nothing leaves unchanged.
    fn journal_len(bed: &Bed) -> u64 {
        std::fs::metadata(bed.dir.path().join("var/lib/mesh-host/state.journal"))
            .map(|m| m.len())
            .unwrap_or(0)
    }

    #[test]
    fn nothing_there_and_nothing_held_is_left_to_the_applier_to_create() {
        let (mut bed, d) = (Bed::new(), adopted());
        assert_eq!(decide(&mut bed.cx(&d), true, &found(None)).unwrap(), None);
        assert!(bed.store.state.held.is_empty());
    }

    #[test]
    fn found_and_kept_is_held_once_with_what_was_found() {
        let (mut bed, d) = (Bed::new(), adopted());
        let first = decide(&mut bed.cx(&d), true, &found(Some("sha256:aa"))).unwrap();
        assert_eq!(first, Some(Kept::Held));
        let h = bed
            .store
            .state
            .held_at("web/conf", "/etc/web.conf")
            .unwrap();
        assert_eq!(
            (h.digest.as_deref(), h.module.as_deref(), h.shape),
            (Some("sha256:aa"), Some("web"), Shape::File)
        );
        // Seen again as it was: held, and nothing more is written to the store.
        let len = journal_len(&bed);
        let again = decide(&mut bed.cx(&d), true, &found(Some("sha256:aa"))).unwrap();
        assert_eq!(again, Some(Kept::Held));
        assert_eq!(journal_len(&bed), len);
    }

    #[test]
    fn a_held_resource_changed_or_removed_is_reported_and_its_record_kept() {
        let (mut bed, d) = (Bed::new(), adopted());
        decide(&mut bed.cx(&d), true, &found(Some("sha256:aa"))).unwrap();
        let changed = decide(&mut bed.cx(&d), true, &found(Some("sha256:bb"))).unwrap();
        assert_eq!(
            changed,
            Some(Kept::Changed {
                was: "sha256:aa".into()
            })
        );
        let gone = decide(&mut bed.cx(&d), true, &found(None)).unwrap();
        assert_eq!(gone, Some(Kept::Gone));
        // The held record still says what was found, so the change stays reported.
        let h = bed
            .store
            .state
            .held_at("web/conf", "/etc/web.conf")
            .unwrap();
        assert_eq!(h.digest.as_deref(), Some("sha256:aa"));
        assert_eq!(
            gone.unwrap().done(|_| "gone".into()).outcome,
            Outcome::ChangedBySomethingElse
        );
        assert_eq!(Kept::Held.done(|_| "kept".into()).outcome, Outcome::Held);
    }

    #[test]
    fn what_is_not_kept_is_left_to_the_applier_even_when_held() {
        let (mut bed, d) = (Bed::new(), adopted());
        decide(&mut bed.cx(&d), true, &found(Some("sha256:aa"))).unwrap();
        // Its module taken (or a converged node): the applier takes it over or creates it.
        assert_eq!(
            decide(&mut bed.cx(&d), false, &found(Some("sha256:bb"))).unwrap(),
            None
        );
        assert_eq!(decide(&mut bed.cx(&d), false, &found(None)).unwrap(), None);
    }

    #[test]
    fn an_owned_record_is_written_again_only_when_it_changed() {
        let (mut bed, d) = (Bed::new(), adopted());
        let rec = Owned {
            parents: Vec::new(),
            id: "web/conf".into(),
            module: Some("web".into()),
            shape: Shape::File,
            key: "/etc/web.conf".into(),
            digest: Some("sha256:aa".into()),
            found: false,
            stamp: None,
        };
        bed.cx(&d).refresh_owned(rec.clone(), None).unwrap();
        assert_eq!(bed.store.state.owned("web/conf"), Some(&rec));
        let len = journal_len(&bed);
        bed.cx(&d).refresh_owned(rec.clone(), Some(&rec)).unwrap();
        assert_eq!(journal_len(&bed), len, "unchanged: nothing written");
        let moved = Owned {
            module: Some("app".into()),
            ..rec.clone()
        };
        bed.cx(&d).refresh_owned(moved.clone(), Some(&rec)).unwrap();
        assert_eq!(bed.store.state.owned("web/conf"), Some(&moved));
        // Its stamp alone: the state has it, the journal does not grow (the fold writes it).
        let len = journal_len(&bed);
        let stamped = Owned {
            stamp: Some(crate::store::Stamp {
                dev: 1,
                ino: 2,
                size: 3,
                mtime: [4, 5],
                ctime: [6, 7],
            }),
            ..moved.clone()
        };
        bed.cx(&d)
            .refresh_owned(stamped.clone(), Some(&moved))
            .unwrap();
        assert_eq!(bed.store.state.owned("web/conf"), Some(&stamped));
        assert_eq!(journal_len(&bed), len, "a stamp alone is not journaled");
        // A digest brought to disk is.
        let healed = Owned {
            digest: Some("sha256:bb".into()),
            ..stamped.clone()
        };
        bed.cx(&d).refresh_owned(healed, Some(&stamped)).unwrap();
        assert!(journal_len(&bed) > len, "a new digest is journaled");
    }

    /// Through the file applier: not found is created and recorded; found on an adopted node is
    /// held with its original saved and its bytes untouched; the host's own file unchanged is
    /// nothing; a held file rewritten by something else is reported and not overwritten.
    #[test]
    fn the_file_applier_makes_the_decision_end_to_end() {
        let mut bed = Bed::new();
        let etc = bed.dir.path().join("etc");
        std::fs::create_dir(&etc).unwrap();
        let file = |id: &str, path: &str| json!({"id": id, "module": "web", "type": "file", "path": path, "content": "declared\n"});
        let d = declaration(
            "adopted",
            &[],
            json!([
                file("web/new", "/etc/new.conf"),
                file("web/old", "/etc/old.conf")
            ]),
        );
        std::fs::write(etc.join("old.conf"), "found\n").unwrap();
        let run = |bed: &mut Bed, i: usize| {
            let Resource::File(f) = &d.resources[i] else {
                panic!("not a file")
            };
            super::super::file::apply(&mut bed.cx(&d), f).unwrap()
        };

        let created = run(&mut bed, 0);
        assert_eq!(
            (created.outcome, created.detail.as_str()),
            (Outcome::Created, "written")
        );
        assert!(bed.store.state.owned("web/new").is_some());
        let again = run(&mut bed, 0);
        assert_eq!(again.outcome, Outcome::Unchanged);

        let held = run(&mut bed, 1);
        assert_eq!(held.outcome, Outcome::Held, "{}", held.detail);
        assert!(held
            .detail
            .starts_with("found; kept as it is; original saved at "));
        assert_eq!(
            std::fs::read_to_string(etc.join("old.conf")).unwrap(),
            "found\n"
        );
        let original = bed.store.state.original("/etc/old.conf").unwrap().clone();
        let saved = bed.dir.path().join(original.saved.trim_start_matches('/'));
        assert_eq!(std::fs::read_to_string(saved).unwrap(), "found\n");

        std::fs::write(etc.join("old.conf"), "rewritten\n").unwrap();
        let changed = run(&mut bed, 1);
        assert_eq!(changed.outcome, Outcome::ChangedBySomethingElse);
        assert!(changed
            .detail
            .starts_with("held file was rewritten by something else"));
        assert_eq!(
            std::fs::read_to_string(etc.join("old.conf")).unwrap(),
            "rewritten\n"
        );
        assert!(bed.store.state.owned("web/old").is_none());
    }
}
