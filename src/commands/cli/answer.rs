//! What a command prints when it ends: refusals (and, with `--json`, the same as a document on
//! stdout), an apply's report, a preview's plan, the owned records and the derived openings.

use super::host;
use crate::apply::{self, ApplyError, Report};
use crate::briefing::Briefing;
use crate::commands::Exit;
use crate::declaration::{self, Source};
use crate::json_contract;
use crate::store;
use anyhow::Result;
use run::SystemRunner;
use std::sync::atomic::{AtomicBool, Ordering};

/// `--verbose`: previews list their unchanged resources too. Set once from the command line
/// before a command runs.
static VERBOSE: AtomicBool = AtomicBool::new(false);

/// Sets whether previews list their unchanged resources (`--verbose`).
pub(super) fn set_verbose(verbose: bool) {
    VERBOSE.store(verbose, Ordering::Relaxed);
}

/// Whether previews list their unchanged resources.
pub(super) fn verbose() -> bool {
    VERBOSE.load(Ordering::Relaxed)
}

/// Genesis said no: every reason on stderr (and as JSON when asked), nothing changed.
pub(super) fn genesis_refused(reasons: &[String], json: bool, code: u8) -> Result<Exit> {
    refusal(
        json,
        code,
        reasons,
        "genesis was refused; nothing was changed",
    )
}

/// A refusal: each problem on stderr (`error: …`) and the summary after them, and with `--json`
/// the same as one document on stdout, kind `refused` with
/// `{"refused": {"exit_code": N, "problems": [...], "summary": ...}}`; the process exits `code`.
pub fn refusal(json: bool, code: u8, problems: &[String], summary: &str) -> Result<Exit> {
    if json {
        println!("{}", refusal_json(code, problems, summary));
    }
    for p in problems {
        eprintln!("error: {p}");
    }
    eprintln!("{summary}");
    Ok(Exit::of(code))
}

/// The document of a refusal (kind `refused`), as [`refusal`] prints it and as `main` prints
/// a command line clap refused under `--json`.
pub fn refusal_json(code: u8, problems: &[String], summary: &str) -> String {
    let body = serde_json::json!({"refused": {
        "exit_code": code,
        "problems": problems,
        "summary": summary,
    }});
    serde_json::to_string_pretty(&json_contract::document("refused", code, &body))
        .unwrap_or_default()
}

/// The document `main` prints on stdout for an error that ended a command run with `--json`
/// (kind `error`, exit 1).
pub fn error_json(text: &str) -> String {
    let body = serde_json::json!({"error": {"exit_code": 1, "message": text}});
    json_contract::document("error", 1, &body).to_string()
}

pub(super) fn refused(problems: &declaration::Problems, json: bool) -> Result<Exit> {
    let lines: Vec<String> = problems.0.iter().map(|p| p.to_string()).collect();
    refusal(
        json,
        2,
        &lines,
        &format!(
            "the declaration was refused ({}); nothing was changed",
            apply::count(problems.0.len(), "problem", "problems")
        ),
    )
}

pub(super) fn nothing_applied(root: &std::path::Path, json: bool) -> Result<Exit> {
    // A lost store has no declaration either, but it is no node never applied.
    let why = store::lost(root).unwrap_or_else(|| {
        format!(
            "{}: no declaration has been applied on this node yet",
            store::store_dir(root).display()
        )
    });
    refusal(json, 2, &[why], "nothing was changed")
}

/// Says on standard error that the store under `root` was lost, when it was (a listing of
/// nothing would otherwise pass for a node never applied); returns the words.
pub(super) fn say_lost(root: &std::path::Path) -> Option<String> {
    let why = store::lost(root)?;
    tracing::warn!("{why}");
    Some(why)
}

/// The preview of an act: its plan printed (as JSON with `--json`), exit 0 when nothing would
/// change and 4 when changes are pending, or the act's own refusal.
pub(super) fn previewed(
    root: &std::path::Path,
    act: &str,
    decl: &declaration::Declaration,
    source: Source,
    json: bool,
) -> Result<Exit> {
    static RUNNER: SystemRunner = SystemRunner;
    match apply::plan::plan(root, &RUNNER, act, decl, source) {
        Ok(p) => show_plan(&p, json),
        // The store could not be read: an error of the host, not a refusal.
        Err(r) if r.code == 1 => Err(anyhow::anyhow!(r.why)),
        Err(r) => refusal(
            json,
            r.code,
            &[format!("refused: {}", r.why)],
            "nothing was changed",
        ),
    }
}

pub(super) fn show_plan(p: &apply::plan::Plan, json: bool) -> Result<Exit> {
    if json {
        json_contract::print("plan", p.exit_code(), p)?;
    } else {
        print!("{}", p.render(verbose()));
    }
    Ok(Exit::of(p.exit_code()))
}

/// An operator's act on the stored declaration refused by a safety rule: its reason, nothing
/// changed, with `code`.
fn refused_act(code: u8, why: &str, json: bool) -> Result<Exit> {
    refusal(
        json,
        code,
        &[format!("refused: {why}")],
        "nothing was changed",
    )
}

pub(super) fn preview_asked(
    root: &std::path::Path,
    act: &str,
    asked: crate::commands::converge::Asked,
    json: bool,
) -> Result<Exit> {
    match asked {
        crate::commands::converge::Asked::Refused { code, why } => refused_act(code, &why, json),
        crate::commands::converge::Asked::Apply(decl) => {
            previewed(root, act, &decl, Source::Local, json)
        }
    }
}

/// An operator's act on the stored declaration: refused with its reason, or applied (source
/// `local`) and the resident host told.
pub(super) fn act(
    root: &std::path::Path,
    asked: crate::commands::converge::Asked,
    json: bool,
) -> Result<Exit> {
    match asked {
        crate::commands::converge::Asked::Refused { code, why } => refused_act(code, &why, json),
        crate::commands::converge::Asked::Apply(decl) => {
            interruptible();
            let result = apply::apply(&host(root), &decl, Source::Local);
            if tells_resident(&result) && crate::pid_file::tell_resident(root) {
                tracing::info!("told the resident host that a new declaration is stored");
            }
            finish(result, json)
        }
    }
}

pub(super) fn finish(result: Result<Report, ApplyError>, json: bool) -> Result<Exit> {
    // The counter, if drawn, is wiped whatever the end; lines already printed are not again.
    let streamed = crate::counter::act_ends();
    let report = match result {
        Ok(r) => r,
        // The store could not be written part-way: the report is printed all the same, with the
        // store's error, and exits 1.
        Err(ApplyError::Unsaved { report, .. }) => *report,
        Err(ApplyError::Refused(p)) => return refused(&p, json),
        Err(ApplyError::Safety(why)) => {
            return refusal(json, 3, &[format!("refused: {why}")], "nothing was changed");
        }
        Err(e @ ApplyError::NotYet { .. }) => {
            return refusal(json, 3, &[format!("refused: {e}")], "nothing was changed");
        }
        // The firewall refused before it wrote anything, and nothing was written before it: a
        // refusal. A firewall that failed, or refused after the guard was written, is an error
        // (exit 1) that says what had been written.
        Err(ApplyError::Firewall {
            source,
            written: None,
        }) if source.is_refusal() => {
            return refusal(
                json,
                3,
                &[format!("refused: {source}")],
                "nothing was changed",
            );
        }
        Err(ApplyError::Machine(p)) => {
            let lines: Vec<String> = p.0.iter().map(|p| format!("refused: {p}")).collect();
            return refusal(
                json,
                3,
                &lines,
                &format!(
                    "the machine refuses what the declaration asks ({}); nothing was changed",
                    apply::count(p.0.len(), "path", "paths")
                ),
            );
        }
        Err(
            e @ (ApplyError::Store(_)
            | ApplyError::Root(_)
            | ApplyError::Unrecorded { .. }
            | ApplyError::Firewall { .. }),
        ) => return Err(e.into()),
    };
    if json {
        json_contract::print("report", report.exit_code(), &report)?;
    } else if streamed {
        print!("{}", report.render_summary());
    } else {
        print!("{}", report.render());
    }
    if report.restarts_host() {
        eprintln!(
            "mesh-host's own package changed and its new binary runs; this host has finished, \
             and the launcher starts the new binary when the host exits"
        );
    }
    match &report.interrupted {
        Some(i) => eprintln!(
            "mesh-host: {}; a child under way was passed the signal and has ended, and only \
             then was the store's lock let go (`mesh-host reconcile` finishes the apply)",
            i.describe()
        ),
        None => {
            if let Some(sig) = run::interrupt::signal() {
                eprintln!(
                    "mesh-host: {} came after the last resource; the apply had nothing left to \
                     stop and finished",
                    run::interrupt::signal_name(sig)
                );
            }
        }
    }
    Ok(Exit::of(report.exit_code()))
}

/// Whether a resident host should be told of this apply: it stored a declaration, and no
/// interrupt stopped it (a person who stopped an apply did not ask for it to go on at once).
pub(super) fn tells_resident(result: &Result<Report, ApplyError>) -> bool {
    result.as_ref().is_ok_and(|r| r.interrupted.is_none())
}

/// From here on SIGINT and SIGTERM are caught and passed on to the running child's group; the
/// apply stops at its next boundary and says so (`run::interrupt`).
pub(super) fn interruptible() {
    if let Err(e) = run::interrupt::forward() {
        tracing::warn!(error = %e, "cannot catch SIGINT and SIGTERM; an interrupt ends the host at once");
    }
}

pub(super) fn print_briefing(b: &Briefing, json: bool) -> Result<()> {
    if json {
        json_contract::print("briefing", 0, &b.shown())?;
    } else {
        print!("{}", b.render());
    }
    Ok(())
}

pub(super) fn render_owned(state: &store::State, lost: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "node {} ({})",
        state.node.as_deref().unwrap_or("-"),
        state.mode.map(|m| m.as_str()).unwrap_or(if lost {
            "store lost: what the host owned here is not known until the next apply rebuilds it"
        } else {
            "nothing applied yet"
        })
    );
    for o in &state.owned {
        let how = if o.found {
            "owned (taken over)"
        } else {
            "owned"
        };
        let _ = writeln!(out, "{how:<20} {:<24} {} {}", o.id, o.shape, o.key);
    }
    for h in &state.held {
        let original = state
            .original(&h.key)
            .map(|o| format!(" (original at {})", o.saved))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{:<20} {:<24} {} {}{original}",
            "held", h.id, h.shape, h.key
        );
    }
    out
}

pub(super) fn derive_openings(
    root: &std::path::Path,
    ports: Option<&str>,
    iface: Option<String>,
    json: bool,
) -> Result<Exit> {
    use crate::declaration::{validate::check_interface, PrivateNetwork, Resource, Settings};
    let state = store::peek(root)?.unwrap_or_default();
    let mut settings = state.settings.clone().unwrap_or(Settings {
        ports: Default::default(),
        private_network: None,
        deadlines: None,
        originals_limit_bytes: None,
        found_read_limit_bytes: None,
        found_read_s: None,
    });
    let mut problems = Vec::new();
    if let Some(spec) = ports {
        match genesis::ports::with_overrides(settings.ports, spec) {
            Ok(g) => settings.ports = g,
            Err(e) => problems.extend(e),
        }
    }
    if let Some(i) = iface {
        if let Err(e) = check_interface(&i) {
            problems.push(format!("--private-interface: {e}"));
        }
        let range = settings
            .private_network
            .as_ref()
            .map(|p| p.range.clone())
            .unwrap_or_else(|| genesis::ports::DEFAULT_PRIVATE_RANGE.into());
        let range_v6 = settings
            .private_network
            .as_ref()
            .and_then(|p| p.range_v6.clone());
        settings.private_network = Some(PrivateNetwork {
            interface: i,
            range,
            range_v6,
        });
    }
    if !problems.is_empty() {
        return refusal(json, 2, &problems, "nothing was derived");
    }
    if settings.private_network.is_none() {
        settings.private_network = Some(PrivateNetwork {
            interface: genesis::ports::DEFAULT_PRIVATE_INTERFACE.into(),
            range: genesis::ports::DEFAULT_PRIVATE_RANGE.into(),
            range_v6: None,
        });
    }
    let declared: Vec<_> = state
        .declaration
        .iter()
        .flat_map(|d| d.resources.iter())
        .filter_map(|r| match r {
            Resource::Opening(o) => Some(o.clone()),
            _ => None,
        })
        .collect();
    let openings = crate::declaration::openings::derive_for(&settings, &declared)?;
    if json {
        let v: Vec<_> = openings
            .iter()
            .map(crate::declaration::openings::to_resource)
            .collect();
        json_contract::print("openings", 0, &v)?;
    } else {
        for o in &openings {
            let from = o.from.describe();
            println!(
                "{:<22} {}/{:<6} {:<9} from {from}",
                o.id,
                o.proto.as_str(),
                o.port,
                o.path.as_str()
            );
        }
    }
    Ok(Exit::Done)
}
