//! The container runtime's bridges followed live by the resident host: the engine's network
//! events (a thread holding `GET /events` open on the engine's socket) and the kernel's link
//! announcements (a bridge added or removed, over rtnetlink) wake the loop, which asks the engine
//! for its networks again and, when the runtime's bridges changed, puts the guard for them in
//! force at once (and on a flipped node the derived filter, which forwards from them). A network created after an apply has its containers' guarded ports refused
//! from outside within milliseconds, not at the next apply.
//!
//! Both sources, because neither suffices alone: Docker makes a network's bridge before it lists
//! the network (a link announcement answered at once can find it not listed yet, and the event
//! comes after), and Podman makes a network's bridge only when its first container starts.

use crate::node_firewall::FilterSpec;
use crate::node_firewall::{self, NodeFirewall};
use crate::system::{self, bridges, engine_api};
use crate::wakeup::Wakeup;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the events thread waits before asking an engine that is not there (not started
/// yet, restarting) again.
const AGAIN: Duration = Duration::from_secs(1);

/// What wakes the loop when the runtime's bridges may have changed.
pub(super) struct Follow {
    /// Rung by the events thread on every event, and when its stream opens or ends.
    events: Option<Arc<Wakeup>>,
    /// Whether the engine's event stream is open now: while it is, the list read once stays
    /// current.
    live: Arc<AtomicBool>,
    links: Option<genesis::inventory::LinkEvents>,
}

impl Follow {
    /// Starts the events thread (after the signals are blocked: it inherits the mask) and
    /// subscribes to the link announcements; either may be missing, said in the log.
    pub(super) fn start() -> Follow {
        let live = Arc::new(AtomicBool::new(false));
        let events = match Wakeup::new() {
            Ok(w) => {
                let w = Arc::new(w);
                let (ring, flag) = (Arc::clone(&w), Arc::clone(&live));
                let spawned = std::thread::Builder::new()
                    .name("engine-events".into())
                    .spawn(move || watch(&ring, &flag));
                match spawned {
                    Ok(_) => Some(w),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot start the thread that hears the container engine's network events");
                        None
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot make an eventfd; the container engine's network events are not heard");
                None
            }
        };
        let links = genesis::inventory::LinkEvents::open()
            .map_err(|e| tracing::warn!(error = %e, "cannot hear the kernel's link announcements; new runtime bridges are followed by the engine's events alone"))
            .ok();
        Follow {
            events,
            live,
            links,
        }
    }

    /// The descriptors the loop polls for it.
    pub(super) fn fds(&self) -> Vec<BorrowedFd<'_>> {
        let mut out = Vec::new();
        if let Some(w) = &self.events {
            out.push(w.as_fd());
        }
        if let Some(l) = &self.links {
            out.push(l.as_fd());
        }
        out
    }

    /// Whether the runtime's bridges may have changed since last asked (reads both sources
    /// empty).
    pub(super) fn heard(&self) -> bool {
        let event = self.events.as_ref().is_some_and(|w| w.heard());
        let link = self.links.as_ref().is_some_and(|l| l.drain());
        event || link
    }

    /// Whether the engine's events are heard now.
    pub(super) fn live(&self) -> bool {
        self.live.load(Ordering::Relaxed)
    }
}

/// The events thread: the engine detected now, its event stream held open, the loop rung on
/// every event and whenever the stream opens or ends (what happened meanwhile was not heard).
/// An engine reached over tcp or ssh has no socket here and is not followed this way.
fn watch(ring: &Wakeup, live: &AtomicBool) {
    loop {
        let socket = system::detect_runtime(|k| std::env::var(k).ok(), system::on_path)
            .and_then(|kind| engine_api::socket(kind, |k| std::env::var(k).ok()))
            .filter(|s| s.exists());
        if let Some(socket) = socket {
            match engine_api::NetworkEvents::open(&socket) {
                Ok(mut stream) => {
                    tracing::debug!(socket = %socket.display(), "hearing the container engine's network events");
                    live.store(true, Ordering::Relaxed);
                    ring.ring();
                    while stream.wait().is_ok() {
                        ring.ring();
                    }
                    live.store(false, Ordering::Relaxed);
                    ring.ring();
                    tracing::debug!(socket = %socket.display(), "the container engine's event stream ended");
                }
                Err(e) => {
                    tracing::debug!(error = %e, "the container engine's events cannot be heard yet")
                }
            }
        }
        std::thread::sleep(AGAIN);
    }
}

/// What the bridges read now asked of the loop.
pub(super) enum Covered {
    /// Nothing changed, or the guard and the derived filter were put in force for the new
    /// bridges.
    Done,
    /// A whole reconcile is due: the store changed since the memo was made (another apply is
    /// under way and the memo is stale), or writing failed.
    Reconcile,
}

/// Asks the engine for its bridges again and, when they are not the ones `guard` and `filter`
/// (a flipped node's derived filter, which forwards from them) were made with, writes each with
/// the new ones through `fw` (only when `current`: the store is as the memo found it) and keeps
/// it. `heard` is when the change was heard, for the log.
pub(super) fn cover(
    fw: &mut dyn NodeFirewall,
    runner: &dyn run::Runner,
    guard: &mut Option<node_firewall::GuardSpec>,
    filter: &mut Option<FilterSpec>,
    current: bool,
    heard: Instant,
) -> Covered {
    bridges::forget();
    let interfaces = genesis::inventory::interfaces().unwrap_or_default();
    let now = system::runtime_bridges(runner, &interfaces);
    let differs = |had: &[String]| sorted(had) != sorted(&now);
    let new_guard = guard
        .as_ref()
        .filter(|g| differs(&g.runtimes))
        .map(|g| node_firewall::with_bridges(g, &now));
    let new_filter = filter
        .as_ref()
        .filter(|f| differs(&f.bridges))
        .map(|f| FilterSpec {
            bridges: now.clone(),
            ..f.clone()
        });
    if new_guard.is_none() && new_filter.is_none() {
        return Covered::Done;
    }
    if !current {
        return Covered::Reconcile;
    }
    if let Some(new) = new_guard {
        if let Err(e) = node_firewall::guard::write(fw, &new) {
            tracing::error!(error = %e, "putting the guard in force for the runtime's new bridges");
            return Covered::Reconcile;
        }
        tracing::info!(
            was = %guard
                .as_ref()
                .map(|g| g.runtimes.join(", "))
                .unwrap_or_default(),
            now = %new.runtimes.join(", "),
            micros_since_heard = heard.elapsed().as_micros() as u64,
            "the container runtime's bridges changed; the guard covers them"
        );
        *guard = Some(new);
    }
    if let Some(new) = new_filter {
        if let Err(e) = fw.ensure_filter(&new) {
            tracing::error!(error = %e, "loading the derived filter for the runtime's new bridges");
            return Covered::Reconcile;
        }
        tracing::info!(
            now = %new.bridges.join(", "),
            micros_since_heard = heard.elapsed().as_micros() as u64,
            "the container runtime's bridges changed; the derived filter forwards from them"
        );
        *filter = Some(new);
    }
    Covered::Done
}

fn sorted(names: &[String]) -> Vec<&String> {
    let mut v: Vec<&String> = names.iter().collect();
    v.sort();
    v
}
