//! The apply loop: for each resource in the declaration's order, read what is there, change it if
//! it differs, read it back, record it; then remove what is no longer declared, by the asymmetry.
//!
//! The first failure stops the apply; what was done before it stays done and recorded. On an
//! adopted node, what is found (present with no record) is kept and reported held until its
//! module is taken. The appliers for each shape live in their own files; a shape this build
//! cannot implement (no service or package manager, see `system`) is refused at validation.

mod action;
mod adopt;
mod brief;
mod container;
#[cfg(test)]
mod decide_tests;
mod directory;
mod error;
mod file;
mod opening;
mod original;
mod package;
pub mod plan;
mod preflight;
mod recover;
mod remove;
mod report;
mod safety;
mod service;
#[cfg(test)]
mod stale;
mod steps;

pub use error::{OriginalError, PathError, ResourceError};
pub use report::{
    count, Entry, Interrupted, NotAdmitted, Outcome, Report, DISAGREES, NOT_IN_FORCE,
};
pub use safety::{refusals, transition};

use original::{digest_only_size, saved_at};
pub use original::{
    found_read_limit, originals_limit, FOUND_READ_LIMIT_DEFAULT, ORIGINALS_LIMIT_DEFAULT,
};
use remove::{moved_away, remove_undeclared, sweep_stale_marks};
use steps::{each_resource, finish, firewall_in_force, record_declaration};

use crate::declaration::{openings, Declaration, Mode, Problems, Resource, Shape, Source};
use crate::failpoint;
use crate::node_firewall::{self, NodeFirewall, Openings};
use crate::store::{self, Held, Op, Owned, Store, StoreError};
use run::{Deadlined, Runner};
use std::borrow::Cow;
use std::path::{Path, PathBuf};

/// Why an apply did not run at all (as opposed to failing part-way, which is a [`Report`]).
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The declaration was refused; nothing changed.
    #[error("{0}")]
    Refused(Problems),
    /// A safety rule refused the act; nothing changed.
    #[error("{0}")]
    Safety(String),
    /// The flip is refused while modules still hold found containers the declaration declares
    /// ([`refusals`] says each); nothing changed (exit 3).
    #[error("node {node:?} cannot be converged yet, so nothing was changed: {}", refusals.join("; "))]
    NotYet { node: String, refusals: Vec<String> },
    /// The machine refuses declared paths (a symbolic link on the way, a FIFO, device or
    /// socket where a file is declared), found before the first resource; nothing changed.
    #[error("{0}")]
    Machine(Problems),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The machine's root could not be opened.
    #[error(transparent)]
    Root(#[from] crate::beneath::BeneathError),
    /// The store could not be written part-way (a full disk): the report of what the act did,
    /// which says the store's error too ([`Report::store_error`]).
    #[error("{source}")]
    Unsaved {
        report: Box<Report>,
        #[source]
        source: StoreError,
    },
    /// The node's firewall failed or refused. Its error keeps its type up to the exit code
    /// (`cli::answer`): a refusal the firewall makes before it writes anything
    /// ([`node_firewall::Error::is_refusal`]) with nothing written before it is exit 3, "nothing
    /// was changed"; any other failure, or one after the guard was written, is exit 1 and says
    /// what had been written.
    #[error("{source}{}", written.map(|w| format!(" ({w})")).unwrap_or_default())]
    Firewall {
        #[source]
        source: Box<node_firewall::Error>,
        /// What this act had written to the node's firewall before it failed, in words.
        written: Option<&'static str>,
    },
    /// The store could not be opened or written; the guard was ensured before it was touched.
    #[error("{source}; the guard had been ensured first: {guard}")]
    Unrecorded {
        #[source]
        source: StoreError,
        guard: Box<crate::node_firewall::GuardSaid>,
    },
}

/// What the resident host keeps from an apply, to put the firewall back at once.
pub use crate::node_firewall::Memo as FirewallMemo;

/// What a re-check of the firewall did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rechecked {
    /// The guard and every opening are in force; how many things had to be put back.
    Done {
        guard_written: bool,
        openings: usize,
    },
    /// The stored declaration is no longer the one remembered: a whole reconcile is due.
    Stale,
}

/// One apply's inputs besides the declaration.
pub struct Host<'a> {
    /// Every machine path in a declaration resolves under this root (`/` in production).
    pub root: &'a Path,
    pub runner: &'a dyn Runner,
    /// The node's firewall: the kernel's ([`node_firewall::kernel`]), or a fake in unit tests.
    pub firewall: node_firewall::Open<'a>,
    /// `--confirm`: after the act's firewall writes, the kernel is asked about every declared
    /// opening in scratch namespaces ([`node_firewall::confirm`]), and its verdict stands.
    pub confirm: bool,
}

impl<'a> Host<'a> {
    /// The same host, asking the kernel to confirm the openings after the act when `confirm`.
    pub fn confirming(self, confirm: bool) -> Host<'a> {
        Host { confirm, ..self }
    }
}

/// What an applier did to one resource.
pub(crate) struct Done {
    pub outcome: Outcome,
    pub detail: String,
}

impl Done {
    pub fn new(outcome: Outcome, detail: impl Into<String>) -> Self {
        Done {
            outcome,
            detail: detail.into(),
        }
    }
}

/// Everything an applier needs: the machine, the store, and whether found things are kept.
pub(crate) struct Cx<'a> {
    pub root: &'a Path,
    /// The root, opened once: every declared path is resolved beneath it.
    pub beneath: crate::beneath::Root,
    pub runner: &'a dyn Runner,
    pub store: &'a mut Store,
    pub decl: &'a Declaration,
    /// The node's firewall (the kernel's opens the found firewall on first use).
    pub fw: &'a mut dyn NodeFirewall,
    /// Every declared opening converged at once, before the first opening of the apply.
    pub openings: Option<Openings>,
    /// Openings a layer still refuses, for the report and the briefing.
    pub not_admitted: Vec<NotAdmitted>,
    /// The ruleset generation is the one recorded after the last apply of this declaration, so
    /// the guard and every opening are as that apply left them: nothing is listed.
    pub firewall_unchanged: Option<node_firewall::Generation>,
    /// With the ruleset unchanged, every declared opening's record was found to be the store's
    /// before the first opening (`each_resource`): none is made again to be compared.
    pub openings_recorded: bool,
    /// The one removal of the openings no longer declared, made the first time one is removed
    /// (or the stale marks are swept): (mark, layer) of each marked rule it removed.
    pub removal: Option<node_firewall::removal::Removed>,
    /// Ids whose removed marks an opening's removal reported, so the sweep does not again.
    pub removal_said: std::collections::HashSet<String>,
}

impl Cx<'_> {
    /// The machine path of a declared path under the root, for messages, refused when it is one
    /// of the host's own paths. Nothing is opened through it: every read and write goes through
    /// [`Cx::beneath`], which follows no link the declaration did not name, so the declared
    /// spelling is the machine path.
    pub fn machine(&self, path: &str) -> Result<PathBuf, PathError> {
        let p = self.beneath.shown(path);
        if let Some(folder) = crate::declaration::validate::own_path(path) {
            return Err(PathError::HostOwn {
                declared: path.to_string(),
                machine: PathBuf::from(path),
                folder: folder.to_string(),
            });
        }
        Ok(p)
    }

    /// Records one change to the store, durable when this returns.
    fn record(&mut self, id: &str, op: Op) -> Result<(), StoreError> {
        self.store.record(id, op)
    }

    /// Records, before a change, what the host is about to write.
    pub fn intend(&mut self, record: &Owned) -> Result<(), StoreError> {
        self.record(&record.id, Op::Intend(record.clone()))
    }

    /// Marks the machine changed for `id` (a failpoint boundary).
    pub fn changed(&self, id: &str) {
        failpoint::hit("after-change", id);
    }

    /// Records an owned resource after it worked and was read back.
    pub fn record_owned(&mut self, rec: Owned) -> Result<(), StoreError> {
        let id = rec.id.clone();
        // The record the intent already spelled out is journaled as one short line.
        let op = match &self.store.state.pending {
            Some(p) if p.record == rec => Op::Commit(id.clone()),
            _ => Op::Own(rec),
        };
        self.record(&id, op)?;
        failpoint::hit("after-record", &id);
        Ok(())
    }

    /// Records owned resources that changed together (the openings of one firewall transaction)
    /// in one durable append.
    pub fn record_owned_all(&mut self, recs: Vec<Owned>) -> Result<(), StoreError> {
        let ids: Vec<String> = recs.iter().map(|r| r.id.clone()).collect();
        let ops = recs
            .into_iter()
            .map(|r| (r.id.clone(), Op::Own(r)))
            .collect();
        self.store.record_all(ops)?;
        for id in &ids {
            failpoint::hit("after-record", id);
        }
        Ok(())
    }

    pub fn record_held(&mut self, rec: Held) -> Result<(), StoreError> {
        let id = rec.id.clone();
        self.record(&id, Op::Hold(rec))?;
        failpoint::hit("after-record", &id);
        Ok(())
    }

    /// Drops an owned record: what it names was removed, or is forgotten by the asymmetry.
    pub fn forget(&mut self, rec: &Owned) -> Result<(), StoreError> {
        self.record(
            &rec.id,
            Op::Unown {
                id: rec.id.clone(),
                shape: rec.shape,
                key: rec.key.clone(),
            },
        )
    }
}

/// What the host would refuse of `decl` under `root` part-way, refused before anything changes:
/// the paths validation could not judge without the root ([`ApplyError::Refused`], exit 2) and
/// what the machine shows at the declared paths ([`ApplyError::Machine`], exit 3); and, under a
/// root other than `/`, declared services, packages and containers (their managers and the
/// container runtime would act on this machine, not the root) and a store a link or a mount
/// would put outside the root ([`ApplyError::Safety`], exit 3).
pub fn refuse_beforehand(root: &Path, decl: &Declaration) -> Result<(), ApplyError> {
    crate::declaration::validate::under_root(decl, root).map_err(ApplyError::Refused)?;
    preflight::check(root, decl).map_err(ApplyError::Machine)?;
    if let Some(why) = preflight::system_tools(decl) {
        return Err(ApplyError::Safety(why));
    }
    store::confined_dir(root, false)
        .map(drop)
        .map_err(|e| ApplyError::Safety(e.to_string()))
}

/// Applies a validated declaration: the whole loop, the removals and the briefing. On an adopted
/// node the guard is ensured before the store is opened, so a store that cannot be read or
/// written (a full disk, a corrupt file) never leaves the foundation's ports unguarded.
pub fn apply(host: &Host<'_>, decl: &Declaration, source: Source) -> Result<Report, ApplyError> {
    // The records the mesh recovered for a lost store are this apply's alone: the declaration
    // stored, remembered and reconciled is the one without them.
    let stripped;
    let (decl, recovered) = if decl.recovered.is_empty() {
        (decl, &[][..])
    } else {
        stripped = Declaration {
            recovered: Vec::new(),
            ..decl.clone()
        };
        (&stripped, decl.recovered.as_slice())
    };
    refuse_beforehand(host.root, decl)?;
    // What the store says now, read without its lock, for the safety rules that must refuse
    // before anything changes; read again under the lock below.
    let peeked = store::peek_to_open(host.root);
    let looked = peeked
        .as_ref()
        .ok()
        .and_then(Option::as_ref)
        .map(store::Peeked::state);
    if let Some(state) = looked {
        safety::check_safety(state, decl)?;
    }
    // From here to the end this act changes the firewall: said to the resident host, which then
    // puts nothing of its memo back over it.
    let _acting = store::acting(host.root);
    let mut fw = (host.firewall)(host.root, decl);
    let settings = decl
        .settings
        .as_ref()
        .or_else(|| looked.and_then(|s| s.settings.as_ref()));
    let touches = decl.touches_firewall();
    let early = node_firewall::guard::early(&mut *fw, host.runner, decl, settings, touches, true)
        .map_err(ApplyError::firewall)?;
    // The look is taken over under the lock if the store's files are still the bytes it read.
    let opened = match peeked {
        Ok(Some(p)) => Store::open_after(host.root, p).map(|(s, _)| s),
        Ok(None) | Err(_) => Store::open(host.root),
    };
    let store = match opened {
        Ok(s) => s,
        Err(source) => return Err(unrecorded(source, early.as_ref())),
    };
    apply_locked(
        host,
        store,
        Cow::Borrowed(decl),
        source,
        &mut *fw,
        Beforehand {
            early,
            ahead: node_firewall::LegacyAhead::none(),
        },
        recovered,
    )
}

impl ApplyError {
    /// The node's firewall's error, before this act wrote anything to it.
    pub(crate) fn firewall(source: node_firewall::Error) -> ApplyError {
        ApplyError::Firewall {
            source: Box::new(source),
            written: None,
        }
    }
}

/// What an act had written to the node's firewall, when the guard phase wrote the guard.
fn guard_wrote(changed: bool) -> Option<&'static str> {
    changed.then_some("the guard had been written first")
}

/// A store error after the guard was (or was not) ensured.
fn unrecorded(source: StoreError, early: Option<&node_firewall::Guarded>) -> ApplyError {
    match early {
        Some(g) => ApplyError::Unrecorded {
            source,
            guard: Box::new((&g.line).into()),
        },
        None => ApplyError::Store(source),
    }
}

/// Applies the stored declaration again, read under the store's lock, so a reconcile never
/// applies a declaration that an apply finishing meanwhile has replaced. `None` when nothing has
/// been applied on this node yet.
pub fn reconcile(host: &Host<'_>) -> Result<Option<Report>, ApplyError> {
    reconcile_with(host, None)
}

/// Like [`reconcile`], for the resident host: `memo`'s guard is put back first, before the store
/// is read, so it is in force even when the store cannot be read.
pub fn reconcile_with(
    host: &Host<'_>,
    memo: Option<&FirewallMemo>,
) -> Result<Option<Report>, ApplyError> {
    // The legacy tables' fingerprint is read while the store is (their sum is most of a
    // reconcile of many openings that finds nothing changed).
    let ahead = node_firewall::LegacyAhead::start();
    let mut fw = memo.map(|m| (host.firewall)(host.root, &m.declaration));
    let mut early = memo.and_then(|m| {
        let spec = m.guard.as_ref()?;
        let line = node_firewall::guard::write(&mut **fw.as_mut()?, spec);
        Some(node_firewall::Guarded {
            line,
            private: None,
            spec: spec.clone(),
        })
    });
    let memo_wrote = guard_wrote(early.as_ref().is_some_and(node_firewall::Guarded::changed));
    // A node where nothing was ever applied has no store, and looking must not make one.
    let peeked = match store::peek_to_open(host.root) {
        Ok(None) => return Ok(None),
        Ok(Some(p)) => p,
        Err(e) => return Err(unrecorded(e, early.as_ref())),
    };
    let looked = peeked.state();
    if let Some(decl) = &looked.declaration {
        refuse_beforehand(host.root, decl)?;
    }
    // The remembered guard was the remembered declaration's: kept as written meanwhile, and
    // ensured again below when the stored declaration is another.
    let memo_looked = memo.is_some_and(|m| looked.declaration.as_ref() == Some(&m.declaration));
    if !memo_looked {
        early = None;
    }
    // The firewall is opened for the declaration it acts for (its node and its deadlines): the
    // memo's, or the one looked at.
    let mut opened_for = memo.map(|_| OpenedFor::Memo);
    // The stored declaration's guard before the store is opened for writing: a store that
    // cannot be written never leaves the foundation's ports unguarded.
    // Whether the claim of the declaration looked at was checked, so it is asked once per
    // reconcile.
    let mut claimed = false;
    if let (None, Some(decl)) = (&early, &looked.declaration) {
        if !memo_looked {
            fw = Some((host.firewall)(host.root, decl));
            opened_for = Some(OpenedFor::Looked);
        }
        let f = fw.as_mut().expect("opened above");
        let touches = decl.touches_firewall();
        early = node_firewall::guard::early(
            &mut **f,
            host.runner,
            decl,
            looked.settings.as_ref(),
            touches,
            true,
        )
        .map_err(ApplyError::firewall)?;
        claimed = true;
    }
    let (store, look) = match Store::open_after(host.root, peeked) {
        Ok(opened) => opened,
        Err(e) => return Err(unrecorded(e, early.as_ref())),
    };
    let (Some(decl), Some(source)) = (store.state.declaration.clone(), store.state.source) else {
        return Ok(None);
    };
    // Whether the store's declaration is the one looked at before the lock: always when the
    // store's files were still the bytes the look read.
    let as_looked = match look {
        store::Look::TakenOver => true,
        store::Look::Changed(p) => p.state().declaration.as_ref() == Some(&decl),
    };
    // The store changed between the look and the lock: its own declaration's guard is ensured.
    let early = early.filter(|_| as_looked);
    let fits = match opened_for {
        // No declaration is compared when the memo's was the one looked at and that is still
        // the store's.
        Some(OpenedFor::Memo) => {
            (memo_looked && as_looked) || memo.is_some_and(|m| m.declaration == decl)
        }
        Some(OpenedFor::Looked) => as_looked,
        None => false,
    };
    let mut fw = match fw {
        Some(fw) if fits => fw,
        _ => (host.firewall)(host.root, &decl),
    };
    // The store changed between the look and the lock: its own declaration's claim and guard,
    // now, with the settings the store holds.
    let early = match early {
        Some(g) => Some(g),
        None => {
            let claim = !(claimed && as_looked) && decl.touches_firewall();
            let settings = decl.settings.as_ref().or(store.state.settings.as_ref());
            node_firewall::guard::early(&mut *fw, host.runner, &decl, settings, claim, true)
                .map_err(|source| ApplyError::Firewall {
                    source: Box::new(source),
                    written: memo_wrote,
                })?
        }
    };
    apply_locked(
        host,
        store,
        Cow::Owned(decl),
        source,
        &mut *fw,
        Beforehand { early, ahead },
        &[],
    )
    .map(Some)
}

/// Which declaration a reconcile opened the node's firewall for, before the store's lock.
#[derive(Clone, Copy)]
enum OpenedFor {
    /// The resident host's memo's.
    Memo,
    /// The one the look at the store read.
    Looked,
}

/// Puts the guard and the openings of `memo` back, under the store's lock (so never in the
/// middle of a person's apply), and nothing else: what the resident host does within
/// milliseconds of another program changing the ruleset. [`Rechecked::Stale`] when the stored
/// declaration is no longer `memo`'s.
pub fn recheck_firewall(host: &Host<'_>, memo: &FirewallMemo) -> Result<Rechecked, ApplyError> {
    let store = Store::open(host.root)?;
    if store.state.declaration.as_ref() != Some(&memo.declaration) {
        return Ok(Rechecked::Stale);
    }
    let mut fw = (host.firewall)(host.root, &memo.declaration);
    let done = node_firewall::recheck(&mut *fw, memo).map_err(|source| ApplyError::Firewall {
        source: Box::new(source),
        written: Some(
            "the guard, the derived filter or some openings may have been put back first",
        ),
    })?;
    drop(store);
    Ok(Rechecked::Done {
        guard_written: done.guard_written,
        openings: done.openings,
    })
}

/// Applies `given` under the store's lock. An owned declaration (a reconcile's, read from the
/// store) ends in the report's memo without being copied again.
/// What an act did and read of the node's firewall before its store's lock was taken: the guard
/// written early, and the legacy tables' fingerprint read meanwhile.
struct Beforehand {
    early: Option<node_firewall::Guarded>,
    ahead: node_firewall::LegacyAhead,
}

fn apply_locked(
    host: &Host<'_>,
    mut store: Store,
    given: Cow<'_, Declaration>,
    source: Source,
    fw: &mut dyn NodeFirewall,
    beforehand: Beforehand,
    recovered: &[Owned],
) -> Result<Report, ApplyError> {
    let Beforehand { early, ahead } = beforehand;
    let decl: &Declaration = &given;
    tracing::info!(node = %decl.node, mode = decl.mode.as_str(), source = source.as_str(), resources = decl.resources.len(), "applying");
    crate::counter::act_begins(decl.resources.len());
    safety::check_safety(&store.state, decl)?;
    let transition = safety::transition(&store.state, decl);
    let mut touched = decl.touches_firewall();
    // The guard phase ensured the guard of an adopted node with settings before the store was
    // opened; settings another apply recorded meanwhile were not that guard's.
    let settled_settings = decl.settings.is_some() || store.state.settings.is_some();
    if decl.mode == Mode::Adopted && settled_settings && early.is_none() {
        return Err(ApplyError::Safety(format!(
            "node {:?}: the store's settings changed while this apply waited for its lock, so \
             the guard was not ensured for them and nothing was changed; apply again",
            decl.node
        )));
    }

    // The state as opened, when this act applies the declaration the store holds (a
    // reconcile's): if it ends the same, the store is not written again (`finish`).
    let opened = (store.state.declaration.as_ref() == Some(decl)).then(|| store.state.opened());
    let (recorded, same) = record_declaration(&mut store.state, decl, source, touched, transition);
    // Every child this apply starts runs within the node's deadlines, so a runtime or service
    // manager that never answers fails its resource and the lock is released.
    let deadlines = store.state.settings.as_ref().and_then(|s| s.deadlines);
    let runner = Deadlined {
        runner: host.runner,
        deadlines: deadlines.unwrap_or_default(),
    };
    settle_pending(host.root, &runner, &mut store.state);

    let beneath = crate::beneath::Root::open(host.root)?;
    let mut report = Report::new(decl, source);
    // The node's firewall before any resource: the flip's saving of the found firewall with the
    // store's record of the declaration, the guard's outcome, the flip or the return, the filter.
    let early_wrote = early.as_ref().is_some_and(node_firewall::Guarded::changed);
    let firewall_before = node_firewall::before::before_resources(
        &mut node_firewall::Node {
            fw: &mut *fw,
            runner: &runner,
            store: &mut store,
            record: !same,
        },
        decl,
        transition,
        early,
        recorded,
        ahead,
    );
    let firewall_before = match firewall_before {
        Ok(b) => b,
        // The store could not be written before the first resource (a full disk): the report
        // says what the firewall's steps did, with the store's error, and the act stops.
        Err(node_firewall::Error::Store(e)) => {
            report.unsaved(&e);
            return Err(ApplyError::Unsaved {
                report: Box::new(report),
                source: e,
            });
        }
        Err(source) => {
            return Err(ApplyError::Firewall {
                source: Box::new(source),
                written: guard_wrote(early_wrote),
            })
        }
    };
    report.said_firewall(&firewall_before);
    let node_firewall::Before {
        guard_spec,
        filter_spec,
        unchanged: firewall_unchanged,
        ..
    } = firewall_before;
    let in_force = {
        let mut cx = Cx {
            root: host.root,
            beneath,
            runner: &runner,
            store: &mut store,
            decl,
            fw,
            openings: None,
            not_admitted: Vec::new(),
            firewall_unchanged,
            openings_recorded: false,
            removal: None,
            removal_said: Default::default(),
        };
        let (turns, guard_failed) = each_resource(&mut cx, decl, &mut report);
        report.not_admitted = std::mem::take(&mut cx.not_admitted);
        // And before the removals: an interrupt during the last resource stops them.
        if report.interrupted.is_none() && !guard_failed {
            report.interrupted = interrupted(turns, decl);
        }
        if !report.stopped() {
            remove_undeclared(&mut cx, &mut report);
        }
        // A store that exists wins: the mesh's copy is read only when there was none.
        if !report.stopped() && cx.store.fresh && !recovered.is_empty() {
            recover::remove_recovered(&mut cx, recovered, &mut report);
        }
        // Every apply sweeps: a marked rule of an opening no longer declared is removed even when
        // the store has forgotten it and nothing in this declaration opened the firewall.
        // Only when something may be stale: no opening converged this apply (none is declared),
        // or the one convergence saw marked rules of openings it was not given.
        let may_be_stale = cx.openings.as_ref().is_none_or(Openings::may_be_stale);
        if !report.stopped()
            && cx.firewall_unchanged.is_none()
            && may_be_stale
            && cx.store.state.flip.is_none()
        {
            touched = true;
            sweep_stale_marks(&mut cx, &mut report);
        }
        if host.confirm {
            let confirmed = confirm_openings(&mut cx, &report);
            report.kernel_stands(confirmed);
        }
        firewall_in_force(
            &mut cx,
            &report,
            (guard_spec, filter_spec),
            touched,
            transition,
        )
    };
    finish(store, opened, given, report, in_force)
}

/// `--confirm`: every declared opening confirmed by the kernel against the ruleset as the act
/// left it. An apply that stopped before its end (a failure, an interrupt) asks nothing: its
/// openings are said unconfirmed, with why.
fn confirm_openings(cx: &mut Cx<'_>, report: &Report) -> node_firewall::confirm::Confirmed {
    let declared = declared_openings(cx);
    let unknown = |ids: Vec<String>, why: &str| {
        let ids: Vec<(String, &'static str)> = ids.into_iter().map(|id| (id, "unknown")).collect();
        node_firewall::confirm::Confirmed::not_asked(&ids, why)
    };
    let ids = || -> Vec<String> {
        cx.decl
            .resources
            .iter()
            .filter(|r| matches!(r, Resource::Opening(_)))
            .map(|r| r.id().to_string())
            .collect()
    };
    if report.stopped() {
        return unknown(
            ids(),
            "the act stopped before its end, so the kernel was not asked",
        );
    }
    match declared {
        Ok(openings) => node_firewall::confirm::confirm(&mut *cx.fw, &openings),
        Err(e) => unknown(ids(), &format!("the openings could not be read: {e}")),
    }
}

/// The interrupt a person's command caught (`run::interrupt`), as the apply reports it after
/// `turns` of the declaration's resources.
fn interrupted(turns: usize, decl: &Declaration) -> Option<report::Interrupted> {
    let signal = run::interrupt::signal()?;
    Some(report::Interrupted {
        signal: run::interrupt::signal_name(signal),
        code: 128u8.saturating_add(signal as u8),
        after: turns,
        of: decl.resources.len(),
    })
}

/// Resolves an intent left by a host that died mid-write: if the machine holds exactly what it
/// was about to write, that write was the host's and becomes a record; otherwise it never
/// happened. Either way the intent is settled.
fn settle_pending(root: &Path, runner: &dyn Runner, state: &mut store::State) {
    let Some(p) = state.pending.take() else {
        return;
    };
    let rec = p.record;
    // Read beneath the root, as the write was made: no link followed, no special file opened.
    let beneath = crate::beneath::Root::open(root).ok();
    let written = match (rec.shape, &beneath) {
        (Shape::File, Some(b)) => {
            // Past the read limit it is not the declared bytes the host was writing: not read.
            let limit = found_read_limit(state.settings.as_ref());
            let found = b.read_file(&rec.key).ok().flatten();
            found
                .filter(|f| f.size <= limit)
                .and_then(|f| f.digest().ok())
                == rec.digest
        }
        (Shape::Directory, Some(b)) => b.dir(&rec.key).is_ok_and(|d| d.is_some()),
        (Shape::File | Shape::Directory, None) => false,
        (Shape::Container, _) => container::settled(runner, &rec),
        (Shape::Service, _) => service::settled(runner, &rec),
        (Shape::Package, _) => package::settled(runner, &rec),
        _ => false,
    };
    if written {
        state.record_owned(rec);
    }
}

/// The openings of the declaration, in the firewall crate's terms.
pub(crate) fn declared_openings(cx: &Cx<'_>) -> Result<Vec<node_firewall::Opening>, ResourceError> {
    Ok(openings::declared(
        cx.decl,
        cx.store.state.settings.as_ref(),
    )?)
}

impl Cx<'_> {
    /// The one removal of the marked rules of openings no longer declared, made through the
    /// node's firewall the first time an opening is removed or stale marks are swept, and read
    /// from then on: (mark, layer) of each marked rule removed.
    pub(crate) fn removal(&mut self) -> &node_firewall::removal::Removed {
        if self.removal.is_none() {
            let done = openings::declared(self.decl, self.store.state.settings.as_ref())
                .map_err(node_firewall::Error::from)
                .and_then(|declared| node_firewall::removal::remove(&mut *self.fw, &declared))
                .map_err(std::sync::Arc::new);
            self.removal = Some(done);
        }
        self.removal.as_ref().expect("made above")
    }
}
