//! An act's lines as its resources are done, and its counter on a terminal: a person's apply
//! (reconcile, take, converge, adopt, genesis, release) prints each resource's line on standard
//! output the moment it is done, so a reader at the end of a pipe has every line of what was
//! done even when the act is interrupted or killed part-way, and the report at the end adds only
//! its summary. On a terminal an act past [`COUNTER_AFTER`] also draws `412/2000 resources` on
//! standard error, rewritten as resources are done and wiped when the act ends; anywhere else
//! (a pipe, a file, the journal) no counter is drawn. `--json` and the resident host stream
//! nothing: their answer is one document, or the journal's lines.

use std::io::{IsTerminal, Write as _};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an act runs before its counter is drawn: a short act says nothing more than its
/// lines.
pub const COUNTER_AFTER: Duration = Duration::from_secs(2);

struct Act {
    started: Instant,
    total: usize,
    done: usize,
    drawn: Option<Instant>,
}

struct Stream {
    /// Whether the counter may be drawn: standard error is a terminal, not the journal.
    counter: bool,
    /// Whether any line was printed as it was done, so the report's lines are not printed again.
    streamed: bool,
    /// Whether standard output's reader went away (a write failed).
    closed: bool,
    act: Option<Act>,
}

static STREAM: Mutex<Option<Stream>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Option<Stream>) -> T) -> T {
    f(&mut STREAM.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Makes this process a person's act: each resource's line goes to standard output when done
/// (the command line calls this once, for an act answered in words).
pub fn stream_acts() {
    let counter = std::io::stderr().is_terminal()
        && crate::logging::style() != crate::logging::Style::Journal;
    with(|s| {
        *s = Some(Stream {
            counter,
            streamed: false,
            closed: false,
            act: None,
        })
    });
}

/// An apply of `total` resources begins (the apply loop calls this; nothing happens unless the
/// process streams its acts).
pub fn act_begins(total: usize) {
    with(|s| {
        if let Some(s) = s {
            s.act = Some(Act {
                started: Instant::now(),
                total,
                done: 0,
                drawn: None,
            });
        }
    });
}

/// One resource's line, said as it is done: printed at once (standard output is line-buffered,
/// so the line leaves the process now) and counted.
pub fn done(line: &str) {
    with(|s| {
        let Some(s) = s else { return };
        s.streamed = true;
        let mut err = std::io::stderr().lock();
        let drawn = s.act.as_ref().is_some_and(|a| a.drawn.is_some());
        if drawn {
            // The counter's line is wiped first, so a line on the same terminal starts clean.
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
        // A reader gone does not stop the act: its lines are dropped from then on, and the
        // report's summary at the end meets the closed pipe and says so
        // (`cli::closed_stdout_ends_quietly`).
        if !s.closed {
            let mut out = std::io::stdout().lock();
            s.closed = writeln!(out, "{line}").and_then(|()| out.flush()).is_err();
        }
        let Some(a) = s.act.as_mut() else { return };
        a.done += 1;
        if !s.counter {
            return;
        }
        let now = Instant::now();
        // Once drawn it is drawn again after every line (the line wiped it).
        if drawn || now.duration_since(a.started) >= COUNTER_AFTER {
            let _ = write!(err, "{}/{} resources", a.done, a.total.max(a.done));
            let _ = err.flush();
            a.drawn = Some(now);
        }
    });
}

/// The act has ended: its counter, if drawn, is wiped. Returns whether its lines were already
/// printed as they were done (then only the report's summary is left to print).
pub fn act_ends() -> bool {
    with(|s| {
        let Some(s) = s else { return false };
        if s.act.take().is_some_and(|a| a.drawn.is_some()) {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
        s.streamed
    })
}
