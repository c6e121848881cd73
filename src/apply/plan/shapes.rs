//! Each shape's part of a preview: the applier's decision made again from what it reads, as
//! the outcome the act would report and a line saying why. Nothing here writes.

use super::Reading;
use super::{diff, LayerPlan, OpeningPlan, Shown};
use crate::apply::{container, directory, file, opening, package, service, Outcome};
use crate::declaration::{
    ActionSpec, ContainerSpec, DirectorySpec, FileSpec, Mode, OpeningSpec, PackageSpec,
    ServiceSpec, ServiceState, Shape,
};
use crate::node_firewall::{NodeFirewallRead, State};
use crate::store::Owned;
use crate::system;

/// A file's line, and for a file the act would write over, its diff and its mode and owner
/// lines.
pub(super) fn plan_file(r: &Reading<'_>, spec: &FileSpec) -> (Outcome, String, Shown) {
    let (outcome, detail) = decide_file(r, spec);
    let shown = if outcome == Outcome::Changed {
        file_shown(r, spec)
    } else {
        Shown::default()
    };
    (outcome, detail, shown)
}

/// What a file the act would write over shows: the content's diff (when it differs) and each
/// of mode, owner and group that would change. Read through the same bounded handle the
/// decision reads; a failure to read says so in the diff's one line.
fn file_shown(r: &Reading<'_>, spec: &FileSpec) -> Shown {
    let key = spec.path.as_str();
    let settings = r.decl.settings.as_ref().or(r.state.settings.as_ref());
    let mut shown = Shown::default();
    let Ok(want) = file::Want::of(
        r.root,
        spec.mode.as_deref(),
        0o644,
        spec.owner.as_deref(),
        spec.group.as_deref(),
    ) else {
        return shown;
    };
    let cur = match crate::beneath::Root::open(r.root)
        .map_err(Into::into)
        .and_then(|b| file::read_within(&b, key, settings))
    {
        Ok(Some(c)) => c,
        Ok(None) => return shown,
        Err(e) => {
            shown
                .diff
                .push(format!("content not read for the diff: {e}"));
            return shown;
        }
    };
    shown.attributes = attributes(&want, cur.found.mode, cur.found.uid, cur.found.gid);
    let declared = spec.bytes();
    let limit = crate::apply::found_read_limit(settings).min(diff::MAX_BYTES);
    if cur.found.size > limit || declared.len() as u64 > diff::MAX_BYTES {
        if cur.found.size != declared.len() as u64 || cur.found.holds(&declared).ok() != Some(true)
        {
            shown.diff.push(format!(
                "content differs ({} bytes now, {} declared): past the diff's bound of {} \
                 bytes; not shown",
                cur.found.size,
                declared.len(),
                limit
            ));
        }
        return shown;
    }
    let mut now = Vec::with_capacity(cur.found.size as usize);
    let read = cur.found.stream(|chunk| {
        now.extend_from_slice(chunk);
        if now.len() as u64 > limit {
            return Err(std::io::Error::other(
                "grew past the diff's bound while read",
            ));
        }
        Ok(())
    });
    match read {
        Ok(_) if now == declared => {}
        Ok(_) => shown.diff = diff::unified(key, &now, &declared),
        Err(e) => shown
            .diff
            .push(format!("content not read for the diff: {key}: {e}")),
    }
    shown
}

/// Each of mode, owner and group that differs from what is wanted, as `mode 0644 → 0600`.
fn attributes(want: &file::Want, mode: u32, uid: u32, gid: u32) -> Vec<String> {
    let mut out = Vec::new();
    if mode & 0o7777 != want.mode & 0o7777 {
        out.push(format!(
            "mode {:04o} → {:04o}",
            mode & 0o7777,
            want.mode & 0o7777
        ));
    }
    if let Some(u) = want.uid.filter(|u| *u != uid) {
        out.push(format!("owner uid {uid} → {u}"));
    }
    if let Some(g) = want.gid.filter(|g| *g != gid) {
        out.push(format!("group gid {gid} → {g}"));
    }
    out
}

fn decide_file(r: &Reading<'_>, spec: &FileSpec) -> (Outcome, String) {
    let (id, key) = (spec.id.as_str(), spec.path.as_str());
    let bytes = spec.bytes();
    let want = match file::Want::of(
        r.root,
        spec.mode.as_deref(),
        0o644,
        spec.owner.as_deref(),
        spec.group.as_deref(),
    ) {
        Ok(w) => w,
        Err(e) => return (Outcome::Failed, e.to_string()),
    };
    let cur = match crate::beneath::Root::open(r.root)
        .map_err(Into::into)
        .and_then(|b| {
            let settings = r.decl.settings.as_ref().or(r.state.settings.as_ref());
            file::read_within(&b, key, settings)
        }) {
        Ok(c) => c,
        Err(e) => return (Outcome::Failed, e.to_string()),
    };
    let owned = r.state.owned_by_key(Shape::File, key);
    let keep = r.keeps_found(spec.module.as_deref()) || spec.create_once;
    let settings = r.decl.settings.as_ref().or(r.state.settings.as_ref());
    let limit = crate::apply::found_read_limit(settings);
    let declared = crate::store::digest(&bytes);
    match (owned, cur) {
        // Unchanged since the record's digest was taken, and that digest is the declared one:
        // nothing is read, as the act would not.
        (Some(rec), Some(cur))
            if !spec.create_once
                && cur.found.unchanged_since(rec.stamp.as_ref())
                && rec.digest.as_deref() == Some(declared.as_str())
                && want.matches(cur.found.mode, cur.found.uid, cur.found.gid) =>
        {
            (Outcome::Unchanged, "matches the declaration".into())
        }
        (Some(_), Some(_)) if spec.create_once => {
            (Outcome::Unchanged, "matches the declaration".into())
        }
        (Some(_), Some(cur)) => match file::matches(&cur, key, &bytes, &want, limit) {
            Ok(true) => (Outcome::Unchanged, "matches the declaration".into()),
            Ok(false) => (
                Outcome::Changed,
                "differs from the declaration; would be written again".into(),
            ),
            Err(e) => (Outcome::Failed, e.to_string()),
        },
        (Some(_), None) => (Outcome::Created, "missing; would be written again".into()),
        (None, None) => match r.kept(id, key, keep, None) {
            Some(o) => (
                o,
                "held file was removed by something else; not recreated".into(),
            ),
            None => (
                Outcome::Created,
                format!("would be written ({} bytes)", bytes.len()),
            ),
        },
        (None, Some(cur)) => {
            // A held file that still shows the stamp its digest was taken with is not read.
            let known = r
                .state
                .held_at(id, key)
                .filter(|h| cur.found.unchanged_since(h.stamp.as_ref()))
                .and_then(|h| h.digest.clone());
            let now = match known.map_or_else(|| file::digest(&cur, key, limit), Ok) {
                Ok(d) => d,
                Err(e) => return (Outcome::Failed, e.to_string()),
            };
            match r.kept(id, key, keep, Some(&now)) {
                Some(Outcome::Held) => (
                    Outcome::Held,
                    "found; would be kept as it is, its original saved".into(),
                ),
                Some(o) => (
                    o,
                    format!("held file was rewritten by something else (now {now}); not reverted"),
                ),
                None if now == declared
                    && file::matches(&cur, key, &bytes, &want, limit).unwrap_or(false) =>
                {
                    (
                        Outcome::Unchanged,
                        "found file already matches; would be taken over".into(),
                    )
                }
                None => (
                    Outcome::Changed,
                    "found file would be replaced, its original saved first".into(),
                ),
            }
        }
    }
}

/// A directory's line, and for one whose mode or owner would be set, a line for each.
pub(super) fn plan_directory(r: &Reading<'_>, spec: &DirectorySpec) -> (Outcome, String, Shown) {
    let (outcome, detail) = decide_directory(r, spec);
    let mut shown = Shown::default();
    if outcome == Outcome::Changed {
        let want = file::Want::of(
            r.root,
            spec.mode.as_deref(),
            0o755,
            spec.owner.as_deref(),
            spec.group.as_deref(),
        );
        let now = crate::beneath::Root::open(r.root)
            .map_err(Into::into)
            .and_then(|b| directory::read(&b, &spec.path));
        if let (Ok(want), Ok(Some((m, u, g)))) = (want, now) {
            shown.attributes = attributes(&want, m, u, g);
        }
    }
    (outcome, detail, shown)
}

fn decide_directory(r: &Reading<'_>, spec: &DirectorySpec) -> (Outcome, String) {
    let (id, key) = (spec.id.as_str(), spec.path.as_str());
    let want = match file::Want::of(
        r.root,
        spec.mode.as_deref(),
        0o755,
        spec.owner.as_deref(),
        spec.group.as_deref(),
    ) {
        Ok(w) => w,
        Err(e) => return (Outcome::Failed, e.to_string()),
    };
    let cur = match crate::beneath::Root::open(r.root)
        .map_err(Into::into)
        .and_then(|b| directory::read(&b, key))
    {
        Ok(c) => c,
        Err(e) => return (Outcome::Failed, e.to_string()),
    };
    let keep = r.keeps_found(spec.module.as_deref());
    match (r.state.owned_by_key(Shape::Directory, key), cur) {
        (Some(_), Some((m, u, g))) if want.matches(m, u, g) => {
            (Outcome::Unchanged, "matches the declaration".into())
        }
        (Some(_), Some(_)) => (
            Outcome::Changed,
            "mode or owner differs; would be set again".into(),
        ),
        (Some(_), None) => (Outcome::Created, "missing; would be created again".into()),
        (None, None) => match r.kept(id, key, keep, None) {
            Some(o) => (
                o,
                "held directory was removed by something else; not recreated".into(),
            ),
            None => (Outcome::Created, "would be created".into()),
        },
        (None, Some(now)) => {
            let print = directory::fingerprint(now);
            match r.kept(id, key, keep, Some(&print)) {
                Some(Outcome::Held) => (Outcome::Held, "found; would be kept as it is".into()),
                Some(o) => (
                    o,
                    format!("held directory changed by something else (now {print})"),
                ),
                None if want.matches(now.0, now.1, now.2) => (
                    Outcome::Unchanged,
                    "found directory already matches; would be taken over".into(),
                ),
                None => (
                    Outcome::Changed,
                    format!("found directory would be taken over; is {print}"),
                ),
            }
        }
    }
}

pub(super) fn plan_action(r: &Reading<'_>, spec: &ActionSpec) -> (Outcome, String) {
    let root = r.root.display().to_string();
    let env = [("MESH_HOST_ROOT", root.as_str())];
    let call = run::Call::new(&spec.verify).cwd(r.root).env(&env).excerpt();
    match r.runner.call(&call) {
        Ok(out) if out.success() => (Outcome::Unchanged, "verify passes; nothing to run".into()),
        Ok(_) => (
            Outcome::Changed,
            format!("verify fails; {:?} would run", spec.run),
        ),
        Err(e) => (
            Outcome::Failed,
            format!("verify {:?} could not run: {e}", spec.verify[0]),
        ),
    }
}

pub(super) fn plan_container(r: &Reading<'_>, spec: &ContainerSpec) -> (Outcome, String) {
    let rt = match system::container_runtime(r.runner) {
        Ok(rt) => rt,
        Err(e) => return (Outcome::Failed, e.to_string()),
    };
    let (id, name) = (spec.id.as_str(), spec.name.as_str());
    let digest = container::spec_digest(spec);
    let cur = match container::inspect(rt.as_ref(), name) {
        Ok(c) => c,
        Err(e) => return (Outcome::Failed, e.to_string()),
    };
    let mut owned = r.state.owned_by_key(Shape::Container, name);
    if let (Some(_), Some(c)) = (owned, &cur) {
        if c.labels.get(container::LABEL_ID).map(String::as_str) != Some(id) {
            owned = None;
        }
    }
    let ours = |c: &system::Container| {
        c.labels.get(container::LABEL_ID).map(String::as_str) == Some(id)
            && c.labels.get(container::LABEL_SPEC) == Some(&digest)
    };
    let converge = |c: &system::Container| {
        let diffs = container::differences(c, spec, &digest);
        if !diffs.is_empty() {
            (
                Outcome::Changed,
                format!("differs ({}); would be replaced", diffs.join("; ")),
            )
        } else if !c.running {
            (
                Outcome::Changed,
                format!("is {}; would be started again", c.status),
            )
        } else {
            (
                Outcome::Unchanged,
                "matches the declaration and is running".into(),
            )
        }
    };
    let keep = r.keeps_found(spec.module.as_deref());
    match (owned, cur) {
        (Some(_), None) => (Outcome::Created, "missing; would be created again".into()),
        (Some(_), Some(c)) => converge(&c),
        (None, Some(c)) if ours(&c) => converge(&c),
        (None, None) => match r.kept(id, name, keep, None) {
            Some(o) => (
                o,
                "held container was removed by something else; not recreated".into(),
            ),
            None => (
                Outcome::Created,
                format!("would be created from {} and started", spec.image),
            ),
        },
        (None, Some(c)) => {
            let print = container::fingerprint(&c);
            match r.kept(id, name, keep, Some(&print)) {
                Some(Outcome::Held) => (
                    Outcome::Held,
                    format!(
                        "found {}; would be kept as it is",
                        container::describe_found(&c)
                    ),
                ),
                Some(o) => (
                    o,
                    "held container changed by something else; not reverted".into(),
                ),
                None => (
                    Outcome::Changed,
                    format!(
                        "found container {} would be replaced by the declared one",
                        container::describe_found(&c)
                    ),
                ),
            }
        }
    }
}

pub(super) fn plan_service(r: &Reading<'_>, spec: &ServiceSpec) -> (Outcome, String) {
    let sm = match system::service_manager(r.runner) {
        Ok(sm) => sm,
        Err(e) => return (Outcome::Failed, e.to_string()),
    };
    let (id, name) = (spec.id.as_str(), spec.name.as_str());
    let want = service::fingerprint(spec.state == ServiceState::Running, spec.enabled);
    let st = match service::status(sm.as_ref(), name) {
        Ok(s) => s,
        Err(e) => return (Outcome::Failed, e.to_string()),
    };
    if !st.installed {
        return (
            Outcome::Failed,
            format!(
                "service {name} is not installed ({}); the act would fail here",
                st.detail
            ),
        );
    }
    let cur = service::now(&st);
    let owned = r.state.owned_by_key(Shape::Service, name);
    let held = r.state.held_at(id, name);
    if owned.is_none() {
        let now = (held.is_some() || st.running).then_some(cur.as_str());
        if let Some(o) = r.kept(id, name, r.keeps_found(spec.module.as_deref()), now) {
            return (
                o,
                format!("found {}; would be kept as it is", service::words(&cur)),
            );
        }
    }
    if cur == want {
        (
            Outcome::Unchanged,
            format!("{}, as declared", service::words(&want)),
        )
    } else {
        (
            Outcome::Changed,
            format!(
                "is {}; would be made {}",
                service::words(&cur),
                service::words(&want)
            ),
        )
    }
}

pub(super) fn plan_package(r: &Reading<'_>, spec: &PackageSpec) -> (Outcome, String) {
    let pm = match system::package_manager(r.runner) {
        Ok(pm) => pm,
        Err(e) => return (Outcome::Failed, e.to_string()),
    };
    let (id, name) = (spec.id.as_str(), spec.name.as_str());
    let want = spec.version.as_deref();
    let cur = match package::installed(pm.as_ref(), name) {
        Ok(c) => c,
        Err(e) => return (Outcome::Failed, e.to_string()),
    };
    let fits = |v: &str| want.is_none_or(|w| w == v);
    let wanted = want.unwrap_or("its candidate version");
    let keep =
        name != crate::declaration::validate::OWN_PACKAGE && r.keeps_found(spec.module.as_deref());
    match (r.state.owned_by_key(Shape::Package, name), cur) {
        (Some(_), Some(v)) if fits(&v) => {
            (Outcome::Unchanged, format!("{v} is installed, as declared"))
        }
        (Some(_), Some(v)) => (
            Outcome::Changed,
            format!("is {v}; {wanted} would be installed"),
        ),
        (Some(_), None) => (
            Outcome::Created,
            format!("missing; {wanted} would be installed again"),
        ),
        (None, None) => match r.kept(id, name, keep, None) {
            Some(o) => (
                o,
                "held package was removed by something else; not reinstalled".into(),
            ),
            None => (Outcome::Created, format!("{wanted} would be installed")),
        },
        (None, Some(v)) => match r.kept(id, name, keep, Some(&package::fingerprint(&v))) {
            Some(Outcome::Held) => (
                Outcome::Held,
                format!("found {v} installed; would be kept as it is"),
            ),
            Some(o) => (
                o,
                format!("held package changed by something else (now {v}); not reverted"),
            ),
            None if fits(&v) => (
                Outcome::Unchanged,
                format!("found {v} installed, as declared; would be taken over"),
            ),
            None => (
                Outcome::Changed,
                format!("found {v} installed; {wanted} would be installed"),
            ),
        },
    }
}

pub(super) fn plan_opening(
    r: &Reading<'_>,
    fw: &mut dyn NodeFirewallRead,
    spec: &OpeningSpec,
    settings: Option<&crate::declaration::Settings>,
) -> (Outcome, String, Option<OpeningPlan>) {
    let opening = match crate::declaration::openings::to_opening(spec, settings) {
        Ok(o) => o,
        Err(e) => return (Outcome::Failed, e.to_string(), None),
    };
    let rec = opening::record_of(spec, &opening);
    let recorded = r.state.owned(&spec.id) == Some(&rec);
    // The return: the found firewall comes back as it was saved before the flip, without the
    // mesh's marked rules, and the opening is written through it again.
    if r.state.flip.is_some() && r.decl.mode == Mode::Adopted {
        return (
            Outcome::Created,
            "would be written through the found firewall once the return restores it".into(),
            None,
        );
    }
    if r.state.flip.is_some() || r.decl.mode == Mode::Converged {
        let o = if recorded {
            Outcome::Unchanged
        } else {
            Outcome::Created
        };
        return (
            o,
            "admitted by the derived filter (inet mesh_host)".into(),
            None,
        );
    }
    let kind = fw.kind();
    let presence = match fw.presence(std::slice::from_ref(&opening)) {
        Ok(mut p) => p.remove(&opening.id).unwrap_or_default(),
        Err(e) => {
            return (
                Outcome::Failed,
                format!("reading the found firewall ({kind}): {e}"),
                None,
            )
        }
    };
    let verdict_now = fw
        .verdicts(std::slice::from_ref(&opening))
        .ok()
        .and_then(|mut v| v.remove(&opening.id))
        .map(|v| v.describe());
    let layers: Vec<LayerPlan> = presence
        .iter()
        .map(|p| LayerPlan {
            layer: p.layer.to_string(),
            chain: p.chain.clone(),
            now: p.state.describe(),
            writes: p.state == State::Missing,
        })
        .collect();
    let writes: Vec<&str> = layers
        .iter()
        .filter(|l| l.writes)
        .map(|l| l.layer.as_str())
        .collect();
    let (outcome, detail) = if writes.is_empty() {
        (
            Outcome::Unchanged,
            format!("in force through the found firewall ({kind})"),
        )
    } else {
        (
            Outcome::Created,
            format!("would be written in {}", writes.join(", ")),
        )
    };
    (
        outcome,
        detail,
        Some(OpeningPlan {
            id: spec.id.clone(),
            kind,
            layers,
            verdict_now,
        }),
    )
}

/// What removing an owned record no longer declared would report.
pub(super) fn removal(r: &Reading<'_>, rec: &Owned) -> (Outcome, String) {
    let path = || r.machine(&rec.key);
    let saved = || {
        r.state
            .original(&rec.key)
            .and_then(|o| super::super::saved_at(o).map(str::to_string))
    };
    match rec.shape {
        Shape::File if rec.found && r.decl.release && saved().is_some() => (
            Outcome::Removed,
            format!(
                "taken over: its original would be put back byte for byte from {}",
                saved().unwrap_or_default()
            ),
        ),
        Shape::File if rec.found => (
            Outcome::Forgotten,
            "taken over, not created: left in place".into(),
        ),
        Shape::File => {
            let settings = r.decl.settings.as_ref().or(r.state.settings.as_ref());
            let edited = crate::beneath::Root::open(r.root)
                .map_err(Into::into)
                .and_then(|b| file::edited_since(&b, rec, settings));
            match edited {
                Ok(Some(why)) => (Outcome::Forgotten, why),
                Ok(None) => (
                    Outcome::Removed,
                    "no longer declared; would be removed".into(),
                ),
                Err(e) => (Outcome::Failed, e.to_string()),
            }
        }
        Shape::Directory if rec.found => (
            Outcome::Forgotten,
            "taken over, not created: left in place".into(),
        ),
        Shape::Directory => match std::fs::read_dir(path()).map(|d| d.count()) {
            Ok(n) if n > 0 => (
                Outcome::Forgotten,
                "no longer declared, but not empty: would be left in place".into(),
            ),
            _ => (
                Outcome::Removed,
                "no longer declared; would be removed".into(),
            ),
        },
        Shape::Action => (
            Outcome::Forgotten,
            "an action leaves nothing the host owns".into(),
        ),
        Shape::Opening => (
            Outcome::Removed,
            "no longer declared; its marked rules would be removed".into(),
        ),
        Shape::Container => {
            let Ok(rt) = system::container_runtime(r.runner) else {
                return (Outcome::Failed, "no container runtime".into());
            };
            match container::inspect(rt.as_ref(), &rec.key) {
                Ok(None) => (Outcome::Removed, "no longer declared; already gone".into()),
                Ok(Some(c)) => {
                    let by_host = c.labels.get(container::LABEL_ID) == Some(&rec.id)
                        || (rec.digest.is_some()
                            && c.labels.get(container::LABEL_SPEC) == rec.digest.as_ref());
                    if rec.found || !by_host {
                        (
                            Outcome::Forgotten,
                            "not one the host created; would be left in place".into(),
                        )
                    } else {
                        (
                            Outcome::Removed,
                            "no longer declared; would be removed".into(),
                        )
                    }
                }
                Err(e) => (Outcome::Failed, e.to_string()),
            }
        }
        Shape::Service => (
            Outcome::Forgotten,
            "no longer declared; would be stopped if the host started it, left installed".into(),
        ),
        Shape::Package => (
            Outcome::Forgotten,
            "no longer declared; never uninstalled".into(),
        ),
    }
}
