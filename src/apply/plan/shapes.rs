//! Each shape's part of a preview: the applier's own reading and decision (`decide`, the same
//! function the act calls before it executes), rendered as the outcome the act would report and
//! a line saying why, with a file's diff and mode and owner lines. Nothing here writes.

use super::Reading;
use super::{diff, LayerPlan, OpeningPlan, Shown};
use crate::apply::{action, container, directory, file, opening, package, service, Outcome};
use crate::declaration::{
    ActionSpec, ContainerSpec, DirectorySpec, FileSpec, Mode, OpeningSpec, PackageSpec,
    ServiceSpec, Shape,
};
use crate::node_firewall::{NodeFirewallRead, State};
use crate::store::Owned;
use crate::system;

/// A file's line, and for a file the act would write over, its diff and its mode and owner
/// lines.
pub(super) fn plan_file(r: &Reading<'_>, spec: &FileSpec) -> (Outcome, String, Shown) {
    let failed =
        |e: crate::apply::ResourceError| (Outcome::Failed, e.to_string(), Shown::default());
    let settings = r.decl.settings.as_ref().or(r.state.settings.as_ref());
    let reading = match crate::beneath::Root::open(r.root)
        .map_err(Into::into)
        .and_then(|b| file::read_for(&b, r.root, r.state, r.decl, settings, spec, false))
    {
        Ok(reading) => reading,
        Err(e) => return failed(e),
    };
    let (outcome, detail) =
        match file::decide(&reading, spec).and_then(|d| file::preview(&reading, spec, &d)) {
            Ok(said) => said,
            Err(e) => return failed(e),
        };
    let shown = if outcome == Outcome::Changed {
        file_shown(&reading, spec)
    } else {
        Shown::default()
    };
    (outcome, detail, shown)
}

/// What a file the act would write over shows: the content's diff (when it differs) and each
/// of mode, owner and group that would change. Read through the bounded handle the decision
/// read; a failure to read says so in the diff's one line.
fn file_shown(r: &file::Reading, spec: &FileSpec) -> Shown {
    let key = spec.path.as_str();
    let mut shown = Shown::default();
    let Some(cur) = &r.cur else {
        return shown;
    };
    shown.attributes = attributes(&r.want, cur.found.mode, cur.found.uid, cur.found.gid);
    let declared = spec.bytes();
    let limit = r.limit.min(diff::MAX_BYTES);
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

/// A directory's line, and for one whose mode or owner would be set, a line for each.
pub(super) fn plan_directory(r: &Reading<'_>, spec: &DirectorySpec) -> (Outcome, String, Shown) {
    let reading = match crate::beneath::Root::open(r.root)
        .map_err(Into::into)
        .and_then(|b| directory::read_for(&b, r.root, r.state, r.decl, spec))
    {
        Ok(reading) => reading,
        Err(e) => return (Outcome::Failed, e.to_string(), Shown::default()),
    };
    let decision = directory::decide(&reading);
    let mut shown = Shown::default();
    if let (Outcome::Changed, Some((m, u, g))) = (decision.outcome(), reading.now) {
        shown.attributes = attributes(&reading.want, m, u, g);
    }
    (decision.outcome(), decision.preview(), shown)
}

pub(super) fn plan_action(r: &Reading<'_>, spec: &ActionSpec) -> (Outcome, String) {
    match action::read(r.runner, r.root, spec) {
        Ok(reading) => {
            let decision = action::decide(&reading);
            (decision.outcome(), decision.preview(spec))
        }
        Err(e) => (
            Outcome::Failed,
            format!("verify {:?} could not run: {e}", spec.verify[0]),
        ),
    }
}

pub(super) fn plan_container(r: &Reading<'_>, spec: &ContainerSpec) -> (Outcome, String) {
    let read = system::container_runtime(r.runner)
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            container::read(rt.as_ref(), r.state, r.decl, spec).map_err(|e| e.to_string())
        });
    match read {
        Ok(reading) => {
            let act = container::decide(&reading, spec).act;
            (act.outcome(), act.preview(spec))
        }
        Err(e) => (Outcome::Failed, e),
    }
}

pub(super) fn plan_service(r: &Reading<'_>, spec: &ServiceSpec) -> (Outcome, String) {
    let read = system::service_manager(r.runner)
        .map_err(|e| e.to_string())
        .and_then(|sm| {
            service::read(sm.as_ref(), r.state, r.decl, spec).map_err(|e| e.to_string())
        });
    match read {
        Ok(reading) => {
            let decision = service::decide(&reading, spec);
            (decision.outcome(), decision.preview(spec))
        }
        Err(e) => (Outcome::Failed, e),
    }
}

pub(super) fn plan_package(r: &Reading<'_>, spec: &PackageSpec) -> (Outcome, String) {
    let read = system::package_manager(r.runner)
        .map_err(|e| e.to_string())
        .and_then(|pm| {
            package::read(pm.as_ref(), r.state, r.decl, spec).map_err(|e| e.to_string())
        });
    match read {
        Ok(reading) => {
            let decision = package::decide(&reading, spec);
            (decision.outcome(), decision.preview(spec))
        }
        Err(e) => (Outcome::Failed, e),
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
    match rec.shape {
        Shape::File => {
            let settings = r.decl.settings.as_ref().or(r.state.settings.as_ref());
            let read = crate::beneath::Root::open(r.root)
                .map_err(Into::into)
                .and_then(|b| file::read_removal(&b, r.state, settings, rec));
            match read {
                Ok(read) => file::decide_removal(&read, rec, r.decl.release).preview(),
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
                Ok(cur) => {
                    container::decide_removal(cur.as_ref(), rec, container::Asked::Owned).preview()
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
