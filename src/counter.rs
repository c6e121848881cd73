//! An act's lines as its resources are done, and its counter on a terminal: a person's apply
//! (reconcile, take, converge, adopt, genesis, release) prints each resource's line on standard
//! output the moment it is done, so a reader at the end of a pipe has every line of what was
//! done even when the act is interrupted or killed part-way, and the report at the end adds only
//! its summary. On a terminal an act past [`COUNTER_AFTER`] also draws `412/2000 resources` on
//! standard error, rewritten as resources are done and wiped when the act ends; anywhere else
//! (a pipe, a file, the journal) no counter is drawn. `--json` and the resident host stream
//! nothing: their answer is one document, or the journal's lines.
//!
//! The lines and the counter are written by a thread of their own, fed through a queue: a reader
//! that reads slowly or not yet (`| less`) holds the writer, never the act (which holds the
//! store's lock), and the act's end waits for the queue to be written before its summary.

use std::io::{IsTerminal, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an act runs before its counter is drawn: a short act says nothing more than its
/// lines.
pub const COUNTER_AFTER: Duration = Duration::from_secs(2);

enum Said {
    /// An apply of this many resources begins.
    Begins(usize),
    /// The act has ended: answered with whether any line was printed, once all before it are.
    Ends(Sender<bool>),
}

struct Act {
    started: Instant,
    total: usize,
    done: usize,
    drawn: bool,
}

/// The writer's side: what it printed and whether the counter is drawn.
struct Writer {
    /// Whether the counter may be drawn: standard error is a terminal, not the journal.
    counter: bool,
    /// Whether any line was printed, so the report's lines are not printed again.
    streamed: bool,
    /// Whether standard output's reader went away (a write failed).
    closed: bool,
    act: Option<Act>,
    /// Lines taken from the queue and not yet written: every line waiting when the writer wakes
    /// goes out in one write, so 10,000 unchanged files cost a few writes, not 10,000.
    pending: Vec<u8>,
}

static QUEUE: Mutex<Option<Sender<Said>>> = Mutex::new(None);

/// The lines done and not yet taken by the writer, and how many they are. An act only adds to
/// it (no wake-up per line: waking the writer for each line cost a context switch per resource,
/// +25 % on a reconcile of 10,000 unchanged files); the writer takes what is there every
/// [`TICK`] and at the act's end, and writes it in one go.
static LINES: Mutex<(Vec<u8>, usize)> = Mutex::new((Vec::new(), 0));

/// How often the writer takes the lines done: a line reaches standard output at most this long
/// after its resource is done.
const TICK: Duration = Duration::from_millis(20);

/// Whether this process streams its acts: asked before a line is even made, so the resident host
/// and `--json` pay nothing per resource.
static STREAMING: AtomicBool = AtomicBool::new(false);

/// Whether this process streams its acts' lines ([`stream_acts`] was called).
pub fn streaming() -> bool {
    STREAMING.load(Ordering::Relaxed)
}

fn send(said: Said) -> bool {
    QUEUE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .is_some_and(|q| q.send(said).is_ok())
}

/// Makes this process a person's act: each resource's line goes to standard output when done
/// (the command line calls this once, for an act answered in words).
pub fn stream_acts() {
    let counter = std::io::stderr().is_terminal()
        && crate::logging::style() != crate::logging::Style::Journal;
    let (tx, rx) = channel();
    let writer = Writer {
        counter,
        streamed: false,
        closed: false,
        act: None,
        pending: Vec::new(),
    };
    if std::thread::Builder::new()
        .name("lines".into())
        .spawn(move || writer.run(rx))
        .is_ok()
    {
        *QUEUE.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
        STREAMING.store(true, Ordering::Relaxed);
    }
}

/// An apply of `total` resources begins (the apply loop calls this; nothing happens unless the
/// process streams its acts).
pub fn act_begins(total: usize) {
    send(Said::Begins(total));
}

/// One resource's line, said as it is done: kept for the writer, which prints it within
/// [`TICK`] (with every other line done meanwhile, in one write) and counts it. Written straight
/// into the lines kept, not made first.
pub fn done(line: impl std::fmt::Display) {
    let mut lines = LINES.lock().unwrap_or_else(|p| p.into_inner());
    // Writing to a vector fails only if the line's own formatting does.
    let _ = writeln!(lines.0, "{line}");
    lines.1 += 1;
}

/// The act has ended: once every line queued before is printed, its counter, if drawn, is wiped.
/// Returns whether its lines were printed as they were done (then only the report's summary is
/// left to print).
pub fn act_ends() -> bool {
    let (tx, rx) = channel();
    send(Said::Ends(tx)) && rx.recv().unwrap_or(false)
}

impl Writer {
    fn run(mut self, rx: Receiver<Said>) {
        use std::sync::mpsc::RecvTimeoutError;
        loop {
            match rx.recv_timeout(TICK) {
                Ok(Said::Begins(total)) => {
                    self.act = Some(Act {
                        started: Instant::now(),
                        total,
                        done: 0,
                        drawn: false,
                    })
                }
                Ok(Said::Ends(answer)) => {
                    // Every line done before the act's end.
                    self.take();
                    self.write_out();
                    if self.act.take().is_some_and(|a| a.drawn) {
                        let mut err = std::io::stderr().lock();
                        let _ = write!(err, "\r\x1b[K");
                        let _ = err.flush();
                    }
                    let _ = answer.send(self.streamed);
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.take();
                    self.write_out();
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Takes the lines done so far.
    fn take(&mut self) {
        let mut lines = LINES.lock().unwrap_or_else(|p| p.into_inner());
        let count = std::mem::take(&mut lines.1);
        if count == 0 {
            return;
        }
        self.streamed = true;
        // A reader gone does not stop the act: its lines are dropped from then on, and the
        // report's summary at the end meets the closed pipe and says so
        // (`cli::closed_stdout_ends_quietly`).
        if self.closed {
            lines.0.clear();
        } else if self.pending.is_empty() {
            // The two buffers trade places, each keeping its size: the act's next lines go into
            // the one just written out, not into a new one grown again from nothing.
            std::mem::swap(&mut self.pending, &mut lines.0);
        } else {
            self.pending.extend_from_slice(&lines.0);
            lines.0.clear();
        }
        drop(lines);
        if let Some(a) = self.act.as_mut() {
            a.done += count;
        }
    }

    /// Writes the lines taken so far in one go, the counter wiped before them and drawn again
    /// after (once drawn it is drawn after every write; first once the act has run 2 s).
    fn write_out(&mut self) {
        // The counter is drawn once the act has run 2 s, lines or not: a long step (an action,
        // a package) shows where the act stands while it runs.
        let due = self.counter
            && self
                .act
                .as_ref()
                .is_some_and(|a| !a.drawn && a.started.elapsed() >= COUNTER_AFTER);
        if self.pending.is_empty() && !due {
            return;
        }
        let mut err = std::io::stderr().lock();
        let drawn = self.act.as_ref().is_some_and(|a| a.drawn);
        if drawn {
            // The counter's line is wiped first, so a line on the same terminal starts clean.
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
        if !self.closed {
            let mut out = std::io::stdout().lock();
            self.closed = out
                .write_all(&self.pending)
                .and_then(|()| out.flush())
                .is_err();
        }
        self.pending.clear();
        let Some(a) = self.act.as_mut() else { return };
        if self.counter && (drawn || a.started.elapsed() >= COUNTER_AFTER) {
            let _ = write!(err, "{}/{} resources", a.done, a.total.max(a.done));
            let _ = err.flush();
            a.drawn = true;
        }
    }
}
