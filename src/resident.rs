//! `mesh-host run`: the resident host. It reconciles on start, when a local `mesh-host apply`
//! says a new declaration is stored, on SIGHUP (rouse), and every period (drift); and it hears
//! the kernel: when another program changes the nf_tables ruleset (`nft -f` with `flush
//! ruleset`, `iptables-restore`, a firewall service reloading) it puts the guard and every
//! opening back within milliseconds, debounced so a reload of a thousand rules costs one
//! re-check. iptables-legacy sends no events, so legacy layers are re-checked on a short period.
//! Storms coalesce (`pace.rs`): at most one reconcile running and one pending, the next no sooner
//! than a settle after the last, whatever asks; a re-check failing under churn is tried again
//! with backoff, and a reconcile that failed under churn once the ruleset holds still.
//!
//! It has no inbound control surface: it listens on no socket. A person's command and the
//! resident host meet only through the store, its lock, a pid file beside the store and signals.
//! SIGTERM and SIGINT end it after the apply under way (never half way), with exit 0. One resident
//! host per store: it holds the store's run lock for its life (`pid_file::Claim`).

use crate::apply::{self, FirewallMemo, Host, Rechecked};
use crate::node_firewall::NodeFirewallRead as _;
use crate::pid_file::{Claim, ClaimError};
use crate::store;
use crate::wakeup::Wakeup;
use machine::{Checked, Machine, Recheck};
use pace::{Pending, Trigger};

mod bridges;
mod machine;
mod pace;
mod stopping;

use anyhow::{Context, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
pub use pace::SETTLE;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the resident host paces itself.
#[derive(Debug, Clone)]
pub struct Options {
    /// Between reconciles when nothing else asks for one (drift).
    pub period: Duration,
    /// Between re-checks of legacy iptables layers, which send no events.
    pub legacy_period: Duration,
    /// How long the ruleset must be quiet after a change by someone else before the re-check.
    pub quiet: Duration,
    /// The longest a re-check waits for quiet after the first change.
    pub patience: Duration,
    /// Between heartbeats sent up the link, on an enrolled node.
    pub heartbeat: Duration,
    /// The least time from the end of one reconcile to the start of the next, whatever asks:
    /// a storm of rouses costs at most one reconcile per settle.
    pub settle: Duration,
    /// How long the ruleset must be quiet before a reconcile that failed while another program
    /// was changing it is tried again.
    pub churn_quiet: Duration,
    /// How long re-checks may keep failing (each tried again with backoff) before a whole
    /// reconcile is asked for.
    pub recheck_deadline: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            period: Duration::from_secs(600),
            legacy_period: Duration::from_secs(1),
            quiet: Duration::from_millis(3),
            patience: Duration::from_millis(25),
            heartbeat: Duration::from_secs(60),
            settle: SETTLE,
            churn_quiet: Duration::from_secs(1),
            recheck_deadline: Duration::from_secs(5),
        }
    }
}

/// Signals, read from a signalfd: the resident host blocks them and reads them in its loop, so a
/// signal never interrupts an apply half way.
struct Signals {
    fd: SignalFd,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Heard {
    stop: bool,
    rouse: bool,
    new_declaration: bool,
}

impl Signals {
    fn open() -> Result<Signals> {
        let mut set = SigSet::empty();
        for s in [
            Signal::SIGTERM,
            Signal::SIGINT,
            Signal::SIGHUP,
            Signal::SIGUSR1,
        ] {
            set.add(s);
        }
        // Blocked for this thread, before any other thread is started, so every thread inherits
        // the mask (the standard library resets it in children it spawns).
        set.thread_block().context("blocking signals")?;
        let fd = SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
            .context("opening a signalfd")?;
        Ok(Signals { fd })
    }

    /// Everything queued: two rouses at once are one.
    fn drain(&self) -> Heard {
        let mut heard = Heard::default();
        while let Ok(Some(info)) = self.fd.read_signal() {
            match Signal::try_from(info.ssi_signo as i32) {
                Ok(Signal::SIGTERM | Signal::SIGINT) => heard.stop = true,
                Ok(Signal::SIGHUP) => heard.rouse = true,
                Ok(Signal::SIGUSR1) => heard.new_declaration = true,
                _ => {}
            }
        }
        heard
    }
}

/// Waits until one of `fds` is readable or `timeout` passes; EINTR is simply another wake-up.
fn wait(fds: &[BorrowedFd<'_>], timeout: Duration) {
    let mut pfds: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::new(*fd, PollFlags::POLLIN))
        .collect();
    let timeout = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
    let _ = poll(&mut pfds, timeout);
}

/// How the resident host ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Asked to (SIGTERM or SIGINT), after the apply under way.
    Stopped,
    /// A new mesh-host binary is installed: the launcher starts it.
    NewBinary,
    /// Another resident host holds the store ([`crate::pid_file::ALREADY_RUNNING`]); nothing was started.
    AlreadyRunning,
}

/// Runs the resident host until SIGTERM or SIGINT; refused at once, with
/// [`Ended::AlreadyRunning`], while another resident host holds the store.
pub fn run(host: &Host<'_>, opts: &Options) -> Result<Ended> {
    // The store's run lock first, before anything else is started: a second host changes nothing.
    // Held until this function returns; dropped, it removes the pid file, then lets go.
    let _claim = match Claim::take(host.root) {
        Ok(c) => c,
        Err(e @ ClaimError::AlreadyRunning { .. }) => {
            eprintln!("error: {e}");
            return Ok(Ended::AlreadyRunning);
        }
        Err(e) => return Err(e).context("claiming the store for the resident host"),
    };
    let mut shell = Shell::start(host, opts)?;
    tracing::info!(
        pid = shell.me,
        period = %link::human::duration(opts.period.as_secs()),
        settle_ms = opts.settle.as_millis() as u64,
        "resident host started"
    );
    loop {
        if let Some(ended) = shell.step() {
            return Ok(ended);
        }
    }
}

/// The resident host's I/O around its [`Machine`]: what it hears (signals, the link, nf_tables
/// events, firewalld's reloads, the container engine's bridges) and what it writes through.
struct Shell<'a, 'h> {
    host: &'a Host<'h>,
    opts: &'a Options,
    signals: Signals,
    linked: Option<crate::link::Resident>,
    monitor: Option<Box<dyn crate::node_firewall::Monitor>>,
    me: u32,
    /// firewalld's Reloaded signal, heard on a thread of its own and passed to this loop through
    /// an eventfd: a reload drops firewalld's runtime configuration, the openings with it.
    reloads: Option<Arc<Wakeup>>,
    /// The container runtime's bridges followed live: a network created after an apply is
    /// covered by the guard within milliseconds (`resident/bridges.rs`).
    follow: bridges::Follow,
    /// The node's firewall the guard is put back through the moment another program's change is
    /// heard: its nf_tables socket kept for the host's whole life, so that costs no socket setup.
    /// Only the guard's table and the derived filter go through it, which name no node. The
    /// ruleset's changes are heard through it too.
    put_back_fw: crate::node_firewall::Kernel,
    memo: Option<FirewallMemo>,
    /// The store as it was when `memo` was made: another process's apply (a `converge`, an
    /// `adopt`, a `take`) changes it before it touches the firewall, so a change heard then is
    /// that apply's, and the memo, about to be stale, must not put back what it removed.
    memo_stamp: Option<Stamp>,
    /// The legacy tables' fingerprint a re-check of `memo` found them in order at, unchanged
    /// through it: while they still have it, the legacy period reads nothing more. Forgotten
    /// whenever the memo is replaced.
    legacy_seen: Option<String>,
    machine: Machine,
}

/// What the link's events came to for the loop.
enum FromLink {
    /// Go on with this turn.
    Next,
    /// The node was released: this turn ends here.
    Again,
    End(Ended),
}

impl<'a, 'h> Shell<'a, 'h> {
    fn start(host: &'a Host<'h>, opts: &'a Options) -> Result<Shell<'a, 'h>> {
        let signals = Signals::open()?;
        // The link's thread starts after the signals are blocked, so it inherits the mask and
        // every signal is read here.
        let linked = start_link(host.root, opts.heartbeat, "the link");
        let mut put_back_fw =
            crate::node_firewall::Kernel::new(host.root, "", Default::default()).with_socket();
        let monitor = match put_back_fw.monitor() {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!(error = %e, "cannot hear nf_tables events; the firewall is re-checked on the legacy period only");
                None
            }
        };
        Ok(Shell {
            host,
            opts,
            signals,
            linked,
            monitor,
            me: std::process::id(),
            reloads: firewalld_reloads(),
            follow: bridges::Follow::start(),
            put_back_fw,
            memo: None,
            memo_stamp: None,
            legacy_seen: None,
            machine: Machine::new(opts, Instant::now()),
        })
    }

    /// One turn of the loop: a reconcile if one may start, then every event heard, then a wait
    /// until the next is heard or the machine's next deadline. Some when the host ends.
    fn step(&mut self) -> Option<Ended> {
        if let Some((seq, asked)) = self.machine.start(Instant::now()) {
            if let Some(ended) = self.reconcile(seq, asked) {
                return Some(ended);
            }
        }
        let heard = self.signals.drain();
        if heard.stop {
            tracing::info!("stopping: asked to, and no apply is under way");
            if let Some(l) = &self.linked {
                l.handle.stop();
            }
            return Some(Ended::Stopped);
        }
        if heard.rouse {
            // The connection or attempt under way may be one that will never return.
            if let Some(l) = &self.linked {
                l.handle.rouse();
            }
        }
        match self.link_events() {
            FromLink::Next => {}
            FromLink::Again => return None,
            FromLink::End(ended) => return Some(ended),
        }
        if heard.new_declaration && crate::link::changed(self.host.root, self.linked.as_ref()) {
            // `mesh-host enrol` stored a new identity: the old link goes, the new one starts.
            if let Some(l) = self.linked.take() {
                l.handle.stop();
            }
            self.linked = start_link(self.host.root, self.opts.heartbeat, "the new link");
            tracing::info!("a new enrolment is stored; the link was started again with it");
        }
        self.machine
            .signals(heard.new_declaration, heard.rouse, Instant::now());
        if self.follow.heard() {
            let heard = Instant::now();
            if matches!(self.cover_memo(heard), bridges::Covered::Reconcile) {
                self.machine.ask(Trigger::Bridges, heard);
            }
        }
        if self.machine.reconcile_due(Instant::now()) {
            return None;
        }
        if self.reloads.as_ref().is_some_and(|w| w.heard()) {
            self.machine
                .ruleset_changed("firewalld (Reloaded)".into(), Instant::now());
            tracing::info!("firewalld reloaded; its openings are re-checked");
        }
        self.ruleset_events();
        let now = Instant::now();
        if self.machine.quiet_again(now) {
            return None;
        }
        if let Some(due) = self.machine.recheck_due(now) {
            self.recheck(due);
            return None;
        }
        if self.machine.tick(now) {
            return None;
        }
        self.wait(self.machine.next_deadline());
        None
    }

    /// A reconcile, watched for signals; Some when its report says a new binary is installed.
    fn reconcile(&mut self, seq: u64, asked: Pending) -> Option<Ended> {
        let host = self.host;
        let why = asked.trigger.as_str();
        let started = Instant::now();
        // Without the engine's events the bridges are asked again for every reconcile (one
        // request on its socket), and the remembered guard is made to cover them first.
        if !self.follow.live() {
            // A stale memo is this reconcile's to replace: nothing more to ask.
            let _ = self.cover_memo(started);
        }
        tracing::info!(
            seq,
            reason = why,
            coalesced = asked.wakeups,
            waited_ms = started.saturating_duration_since(asked.since).as_millis() as u64,
            "reconcile started"
        );
        let memo = self.memo.as_ref();
        let reconciled = stopping::watching(self.signals.fd.as_fd(), "the reconcile", || {
            apply::reconcile_with(host, memo)
        });
        let failed = match reconciled {
            Ok(Some(report)) => {
                let failed = report.failed().map(|e| e.id.clone());
                tracing::info!(
                    trigger = why,
                    seq,
                    millis = started.elapsed().as_millis() as u64,
                    failed = failed.as_deref(),
                    "reconciled"
                );
                if failed.is_none() {
                    // The launcher's known-good: this binary works on this machine.
                    if let Err(e) = crate::launch::reconciled(&store::store_dir(host.root)) {
                        tracing::warn!(error = %e, "writing known-good for the launcher");
                    }
                }
                if report.restarts_host() {
                    tracing::info!(
                        "a new mesh-host binary is installed; exiting for the launcher to start it"
                    );
                    return Some(Ended::NewBinary);
                }
                if report.memo.is_some() {
                    self.memo = report.memo;
                    self.legacy_seen = None;
                }
                self.memo_stamp = stamp(host.root);
                failed.is_some()
            }
            Ok(None) => {
                tracing::info!(trigger = why, seq, "nothing is stored to reconcile yet");
                false
            }
            Err(e) => {
                tracing::error!(trigger = why, seq, error = %e, "reconcile failed");
                true
            }
        };
        let ended = Instant::now();
        if let Some(l) = &self.linked {
            l.refresh_state(host.root);
        }
        // A change heard during the reconcile is covered by it, unless the reconcile failed
        // while the ruleset was changing: then it is tried again once the ruleset is quiet.
        let me = self.me;
        let foreign_during = self
            .monitor
            .as_mut()
            .and_then(|m| m.changes().ok())
            .is_some_and(|changes| changes.iter().any(|c| c.foreign(me)));
        let churned = foreign_during || asked.churn;
        if self.machine.reconcile_ended(failed, churned, ended) {
            tracing::info!(
                seq,
                quiet_ms = self.opts.churn_quiet.as_millis() as u64,
                "this reconcile, which failed while the ruleset was changing, is tried again once the ruleset holds still"
            );
        }
        None
    }

    /// The link's events: a declaration applied from it, a release, a reconnection, a new binary.
    fn link_events(&mut self) -> FromLink {
        let host = self.host;
        let Some(l) = self.linked.as_mut() else {
            return FromLink::Next;
        };
        let from_link = stopping::watching(
            self.signals.fd.as_fd(),
            "the declaration from the link",
            || l.handle_events(host),
        );
        if from_link.memo.is_some() {
            self.memo = from_link.memo;
            self.legacy_seen = None;
            self.machine.applied_from_link(Instant::now());
        }
        if from_link.restarts_host {
            tracing::info!(
                "a new mesh-host binary is installed; exiting for the launcher to start it"
            );
            l.handle.stop();
            return FromLink::End(Ended::NewBinary);
        }
        if from_link.released {
            // Hosted again: no link, and nothing of the mesh's to put back or reconcile.
            self.linked = None;
            self.memo = None;
            self.memo_stamp = None;
            self.legacy_seen = None;
            self.machine.released(Instant::now());
            return FromLink::Again;
        }
        if from_link.reconnected {
            // Declarations may have been missed while unlinked.
            self.machine.ask(Trigger::Reconnect, Instant::now());
        }
        FromLink::Next
    }

    /// nf_tables events: another program's change puts the guard (and a flipped node's derived
    /// filter) back at once, and is re-checked after quiet.
    fn ruleset_events(&mut self) {
        let Some(m) = self.monitor.as_mut() else {
            return;
        };
        let events = match m.changes() {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(error = %e, "reading nf_tables events");
                return;
            }
        };
        let (me, root) = (self.me, self.host.root);
        let foreign = events.iter().any(|c| c.foreign(me));
        if foreign {
            self.machine.foreign_change(Instant::now());
        }
        // The guard first and at once, before any quiet is waited for: the store's port must be
        // unguarded for as short a time as the kernel allows. Only while the store is as the
        // memo found it: otherwise an apply of another process is under way or done, and it
        // tells this host itself. Nor while another process holds the store: its act changes the
        // firewall before it records what it did (the store records after a thing worked), so
        // its changes are not foreign ones to undo.
        let current = foreign
            && self.memo_stamp.is_some()
            && stamp(root) == self.memo_stamp
            && !store::held_elsewhere(root);
        if foreign && !current {
            tracing::debug!("the store changed since the last reconcile; nothing put back at once");
        }
        // Likewise the derived filter on a flipped node, when it is gone: without it the node
        // is open (`node_firewall::put_back` says why only when gone).
        if let (true, Some(m)) = (current, self.memo.as_ref()) {
            let started = Instant::now();
            for (what, result) in crate::node_firewall::put_back(
                &mut self.put_back_fw,
                m.guard.as_ref(),
                m.filter.as_ref(),
            ) {
                put_back(what, started, result);
            }
        }
        for e in events.iter().filter(|c| c.foreign(me)) {
            self.machine.ruleset_changed(e.who(), Instant::now());
        }
    }

    /// A re-check that is due, unless another act is under way or done since the last
    /// reconcile: the memo is that reconcile's, and putting it back would undo that act. Nothing
    /// is done then: the act records its declaration when it is done, and that is heard and
    /// reconciled.
    fn recheck(&mut self, due: Recheck) {
        let root = self.host.root;
        let stale = stamp(root) != self.memo_stamp || store::held_elsewhere(root);
        if stale && self.memo.is_some() {
            tracing::debug!(by = %due.who, "another act is under way or done since the last reconcile; no re-check over it");
        } else if due.first.is_some() || due.retry || crate::node_firewall::legacy_in_force() {
            // The legacy period alone: legacy tables send no events, but their fingerprint (read
            // by getsockopt, no child process) says whether they changed since a re-check found
            // them in order; unchanged, nothing more is read.
            let periodic = due.first.is_none() && !due.retry && self.memo.is_some();
            let before = periodic
                .then(crate::node_firewall::legacy_fingerprint)
                .flatten();
            if before.is_some() && before == self.legacy_seen {
                tracing::debug!(by = %due.who, "the legacy tables are as the last re-check found them");
                return;
            }
            let checked = recheck(self.host, self.memo.as_ref(), due.first, &due.who);
            // Kept only when nothing changed them through the re-check, its own writes included
            // (the next period then re-checks once more, and finds them as it leaves them).
            self.legacy_seen = match (&checked, before) {
                (Checked::Done, Some(fp)) => {
                    (crate::node_firewall::legacy_fingerprint().as_ref() == Some(&fp)).then_some(fp)
                }
                _ => None,
            };
            self.machine.rechecked(checked, &due.who, Instant::now());
            // What the re-check recorded is this host's own.
            self.memo_stamp = stamp(root);
        }
    }

    /// The runtime's bridges asked for again, and the memo's guard and derived filter made to
    /// cover them (written through the kept socket, only while the store is as the memo found
    /// it). With no memo yet, the next reconcile asks the engine itself.
    fn cover_memo(&mut self, heard: Instant) -> bridges::Covered {
        let Some(m) = self.memo.as_mut() else {
            crate::system::bridges::forget();
            return bridges::Covered::Done;
        };
        let current = self.memo_stamp.is_some() && stamp(self.host.root) == self.memo_stamp;
        bridges::cover(
            &mut self.put_back_fw,
            self.host.runner,
            &mut m.guard,
            &mut m.filter,
            current,
            heard,
        )
    }

    /// Waits until something is heard or `until`.
    fn wait(&self, until: Instant) {
        let mut fds = vec![self.signals.fd.as_fd()];
        if let Some(m) = &self.monitor {
            fds.push(m.fd());
        }
        if let Some(l) = &self.linked {
            fds.push(l.fd());
        }
        if let Some(w) = &self.reloads {
            fds.push(w.as_fd());
        }
        fds.extend(self.follow.fds());
        wait(&fds, until.saturating_duration_since(Instant::now()));
    }
}

/// The link, if this node is enrolled. A node that cannot start its link runs disconnected: it
/// still reconciles against its store. `which` names the link in the log.
fn start_link(root: &Path, heartbeat: Duration, which: &str) -> Option<crate::link::Resident> {
    crate::link::Resident::start(root, heartbeat).unwrap_or_else(|e| {
        tracing::error!(error = %crate::error::error_text(&e), "{which} cannot start; running disconnected");
        None
    })
}

/// A wake-up written by a thread that listens for firewalld's `Reloaded` signal; `None` when
/// neither can be made (the host then hears firewalld's reload through nf_tables alone).
fn firewalld_reloads() -> Option<Arc<Wakeup>> {
    let wakeup = match Wakeup::new() {
        Ok(w) => Arc::new(w),
        Err(e) => {
            tracing::warn!(error = %e, "cannot make an eventfd; firewalld's reloads are heard through nf_tables only");
            return None;
        }
    };
    let writer = Arc::clone(&wakeup);
    let listening = crate::node_firewall::firewalld_reloads(move || writer.ring());
    match listening {
        Ok(_) => Some(wakeup),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for firewalld's reloads");
            None
        }
    }
}

/// One immediate restore of the mesh's own table (`result` says whether it had to write),
/// logged with how long it took since `started`.
fn put_back(what: &str, started: Instant, result: Result<bool, crate::node_firewall::Error>) {
    match result {
        Ok(true) => tracing::info!(
            micros = started.elapsed().as_micros() as u64,
            "the {what} was gone; put back"
        ),
        Ok(false) => {}
        Err(e) => tracing::error!(error = %e, "putting the {what} back"),
    }
}

/// What the store's files are now (the snapshot's and the journal's size, inode and change
/// time): one `stat` each, cheap enough to ask before every immediate restore.
type Stamp = Vec<(u64, u64, i64, i64)>;

fn stamp(root: &std::path::Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let dir = store::store_dir(root);
    let out: Stamp = ["state.json", "state.journal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
        .map(|m| (m.len(), m.ino(), m.ctime(), m.ctime_nsec()))
        .collect();
    (!out.is_empty()).then_some(out)
}

/// Puts the guard and the openings back after someone else changed the ruleset.
fn recheck(
    host: &Host<'_>,
    memo: Option<&FirewallMemo>,
    first: Option<Instant>,
    who: &str,
) -> Checked {
    let Some(m) = memo else {
        return Checked::Reconcile(Trigger::RulesetChanged);
    };
    let started = Instant::now();
    match apply::recheck_firewall(host, m) {
        Ok(Rechecked::Done {
            guard_written,
            openings,
        }) => {
            let since = first.map(|f| f.elapsed().as_micros() as u64);
            if guard_written || openings > 0 {
                tracing::info!(
                    by = who,
                    guard_restored = guard_written,
                    openings_restored = openings,
                    micros_since_change = since,
                    micros = started.elapsed().as_micros() as u64,
                    "ruleset changed by another program; put back"
                );
            } else {
                tracing::debug!(
                    by = who,
                    micros = started.elapsed().as_micros() as u64,
                    "ruleset changed by another program; nothing of the mesh's was touched"
                );
            }
            Checked::Done
        }
        Ok(Rechecked::Stale) => Checked::Reconcile(Trigger::NewDeclaration),
        Err(e) => Checked::Failed(e.to_string()),
    }
}
