//! Progress of long work on standard error: a child past a few seconds (a package install, an
//! image pull, a slow firewall program) is said with what it is and how long it has run. On a
//! terminal that is one live line, rewritten each second and replaced by the step's time when it
//! ends; anywhere else (a pipe, the journal) it is a log line when the step passes
//! `run::REPORT_AFTER`, again every 30 s, and one when it ends, at info under the target
//! `mesh_host::progress`, which the default filter shows. Never on standard output, so `--json`
//! stays one document.

use run::Progress;
use std::io::{IsTerminal, Write as _};
use std::sync::OnceLock;
use std::time::Duration;

/// How often a step that goes on is said again where lines are kept.
const LOG_EVERY: Duration = Duration::from_secs(30);

/// Makes the process report its long children (the binary calls this once).
pub fn install() {
    run::set_progress_hook(report);
}

/// Whether the live line is drawn: stderr is a terminal and not the journal.
fn live() -> bool {
    static LIVE: OnceLock<bool> = OnceLock::new();
    *LIVE.get_or_init(|| {
        std::io::stderr().is_terminal() && crate::logging::style() != crate::logging::Style::Journal
    })
}

/// The step as a person reads it: its program and what it acts on, at most 100 characters.
pub fn what(argv: &[String]) -> String {
    let program = argv
        .first()
        .map(|p| p.rsplit('/').next().unwrap_or(p).to_string())
        .unwrap_or_default();
    let mut words = vec![program];
    // Options (and the value after `-o`) say how, not what.
    let mut skip = false;
    for a in argv.iter().skip(1) {
        if skip {
            skip = false;
            continue;
        }
        if a == "-o" {
            skip = true;
            continue;
        }
        if !a.starts_with('-') {
            words.push(a.clone());
        }
    }
    let mut text = words.join(" ");
    if text.chars().count() > 100 {
        text = text.chars().take(99).collect::<String>() + "…";
    }
    text
}

/// The long step under way, if one is: what it is, and how long it had run when last told.
static CURRENT: std::sync::Mutex<Option<(String, Duration)>> = std::sync::Mutex::new(None);

/// The child step under way past `run::REPORT_AFTER`, and how long it has run (the resident host
/// says it while a stop waits for it).
pub fn current() -> Option<(String, Duration)> {
    CURRENT.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

fn report(p: Progress<'_>) {
    {
        let mut current = CURRENT.lock().unwrap_or_else(|p| p.into_inner());
        *current = match &p {
            Progress::Running { argv, elapsed } => Some((what(argv), *elapsed)),
            Progress::Ended { .. } => None,
        };
    }
    match p {
        Progress::Running { argv, elapsed } if live() => {
            let mut err = std::io::stderr().lock();
            let _ = write!(
                err,
                "\r\x1b[K{}: running for {}",
                what(argv),
                link::human::duration(elapsed.as_secs())
            );
            let _ = err.flush();
        }
        Progress::Ended { argv, elapsed } if live() => {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "\r\x1b[K{}: took {}",
                what(argv),
                link::human::duration(elapsed.as_secs())
            );
        }
        Progress::Running { argv, elapsed } => {
            // The first report, then one every LOG_EVERY: the hook is told about once a second.
            let past = elapsed.saturating_sub(run::REPORT_AFTER);
            if past < run::REPORT_EVERY
                || (past.as_secs() % LOG_EVERY.as_secs() == 0 && past.as_secs() > 0)
            {
                tracing::info!(
                    target: "mesh_host::progress",
                    "{}: still running after {}",
                    what(argv),
                    link::human::duration(elapsed.as_secs())
                );
            }
        }
        Progress::Ended { argv, elapsed } => tracing::info!(
            target: "mesh_host::progress",
            "{}: finished after {}",
            what(argv),
            link::human::duration(elapsed.as_secs())
        ),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_step_is_named_by_its_program_and_what_it_acts_on() {
        let argv: Vec<String> = [
            "/usr/bin/apt-get",
            "install",
            "-y",
            "-o",
            "Dpkg::Options::=--force-confold",
            "sl=5.02-1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(super::what(&argv), "apt-get install sl=5.02-1");
    }
}
