//! How the resident host paces its reconciles and re-checks under storms: at most one
//! reconcile running and one pending, spaced by a settle, and failed re-checks tried again with
//! backoff before a reconcile is asked for.

use std::time::{Duration, Instant};

/// The least spacing between two reconciles (see [`Options::settle`]). A reconcile of a small
/// declaration takes tens of milliseconds, so without it 1,000 SIGHUPs a second ran reconciles
/// back to back, one after another, and kept a core busy; with it such a storm costs at most two
/// reconciles a second, and a single rouse after a quiet half second still reconciles at once.
pub const SETTLE: Duration = Duration::from_millis(500);

/// Why a reconcile was asked for, weakest first: the pending reconcile says the strongest of
/// the reasons it coalesced. A rouse outranks the ruleset's reasons, so an operator's or a
/// dispatcher's SIGHUP is named in the log even when a foreign change asked first; whether the
/// ruleset was churning is kept apart, in [`Pending::churn`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Trigger {
    Period,
    Reconnect,
    /// A reconcile failed while another program was changing the ruleset, which is quiet again.
    QuietAgain,
    RulesetChanged,
    RecheckFailed,
    /// The container runtime's bridges changed (a network created or removed).
    Bridges,
    Rouse,
    NewDeclaration,
    Start,
}

impl Trigger {
    /// Whether it says another program was changing the ruleset.
    fn churn(self) -> bool {
        matches!(
            self,
            Trigger::RulesetChanged | Trigger::RecheckFailed | Trigger::QuietAgain
        )
    }
}

impl Trigger {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Trigger::Period => "period",
            Trigger::Rouse => "rouse",
            Trigger::Reconnect => "reconnect",
            Trigger::QuietAgain => "ruleset quiet again after a failed reconcile",
            Trigger::RulesetChanged => "ruleset changed",
            Trigger::RecheckFailed => "re-check failed",
            Trigger::NewDeclaration => "new declaration",
            Trigger::Start => "start",
            Trigger::Bridges => "runtime bridges changed",
        }
    }
}

/// The one reconcile pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pending {
    pub(super) trigger: Trigger,
    /// Whether any reason it coalesced says the ruleset was churning.
    pub(super) churn: bool,
    /// How many wake-ups asked for it (each a signal read, a link event, a failed re-check…).
    pub(super) wakeups: u64,
    pub(super) since: Instant,
}

/// At most one reconcile running and one pending, whatever arrives: every ask while one is
/// pending is folded into it, and the pending one starts no sooner than `settle` after the last
/// one ended.
#[derive(Debug)]
pub(super) struct Reconciles {
    settle: Duration,
    pending: Option<Pending>,
    last_ended: Option<Instant>,
    started: u64,
}

impl Reconciles {
    pub(super) fn new(settle: Duration) -> Reconciles {
        Reconciles {
            settle,
            pending: None,
            last_ended: None,
            started: 0,
        }
    }

    pub(super) fn ask(&mut self, trigger: Trigger, now: Instant) {
        let p = self.pending.get_or_insert(Pending {
            trigger,
            churn: false,
            wakeups: 0,
            since: now,
        });
        p.trigger = p.trigger.max(trigger);
        p.churn |= trigger.churn();
        p.wakeups += 1;
    }

    /// When the pending reconcile may start.
    pub(super) fn due_at(&self) -> Option<Instant> {
        let p = self.pending.as_ref()?;
        Some(match self.last_ended {
            Some(ended) => (ended + self.settle).max(p.since),
            None => p.since,
        })
    }

    /// The pending reconcile, with its sequence number, when it may start now.
    pub(super) fn start(&mut self, now: Instant) -> Option<(u64, Pending)> {
        if self.due_at()? > now {
            return None;
        }
        self.started += 1;
        self.pending.take().map(|p| (self.started, p))
    }

    pub(super) fn ended(&mut self, now: Instant) {
        self.last_ended = Some(now);
    }

    /// A whole apply ended at `now` outside the loop (a declaration from the link): it covers
    /// the pending reconcile, which is dropped, and the settle counts from it. Returns the
    /// dropped one.
    pub(super) fn covered(&mut self, now: Instant) -> Option<Pending> {
        self.last_ended = Some(now);
        self.pending.take()
    }
}

/// Re-checks that keep failing (ERESTART while the ruleset is being changed under them): each
/// tried again after a backoff, 10 ms doubling to a second, until one succeeds or the deadline
/// since the first failure passes, when a whole reconcile is asked for.
#[derive(Debug, Default)]
pub(super) struct Failing {
    first: Option<Instant>,
    pub(super) failures: u32,
    pub(super) retry_at: Option<Instant>,
}

impl Failing {
    /// One more failure at `now`: whether the deadline has passed (and the count starts again).
    pub(super) fn failed(&mut self, now: Instant, deadline: Duration) -> bool {
        let first = *self.first.get_or_insert(now);
        self.failures += 1;
        let backoff = Duration::from_millis(10 << self.failures.min(7).saturating_sub(1))
            .min(Duration::from_secs(1));
        self.retry_at = Some(now + backoff);
        if now.saturating_duration_since(first) >= deadline {
            *self = Failing::default();
            return true;
        }
        false
    }

    /// A re-check succeeded: how many failed before it.
    pub(super) fn succeeded(&mut self) -> u32 {
        std::mem::take(self).failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thousand asks while one reconcile runs leave exactly one pending, saying the strongest
    /// reason and how many it coalesced, and it starts no sooner than the settle after the end.
    #[test]
    fn any_number_of_asks_while_one_runs_leave_one_pending_after_the_settle() {
        let settle = Duration::from_millis(500);
        let mut r = Reconciles::new(settle);
        let t0 = Instant::now();
        r.ask(Trigger::Start, t0);
        let (seq, first) = r.start(t0).expect("the first starts at once");
        assert_eq!((seq, first.trigger, first.wakeups), (1, Trigger::Start, 1));
        assert!(r.start(t0).is_none(), "nothing pending while it runs");
        for i in 0..1000 {
            let t = if i == 500 {
                Trigger::NewDeclaration
            } else {
                Trigger::Rouse
            };
            r.ask(t, t0 + Duration::from_millis(1));
        }
        let ended = t0 + Duration::from_millis(30);
        r.ended(ended);
        assert_eq!(r.due_at(), Some(ended + settle));
        assert!(r.start(ended + settle - Duration::from_millis(1)).is_none());
        let (seq, next) = r.start(ended + settle).expect("due after the settle");
        assert_eq!(
            (seq, next.trigger, next.wakeups),
            (2, Trigger::NewDeclaration, 1000)
        );
        assert!(
            r.start(ended + settle * 10).is_none(),
            "one pending, not two"
        );
    }

    /// A rouse long after the last reconcile ended starts at once.
    #[test]
    fn a_rouse_after_a_quiet_settle_starts_at_once() {
        let mut r = Reconciles::new(Duration::from_millis(500));
        let t0 = Instant::now();
        r.ended(t0);
        let later = t0 + Duration::from_secs(3);
        r.ask(Trigger::Rouse, later);
        assert_eq!(r.due_at(), Some(later));
        assert!(r.start(later).is_some());
    }

    /// A declaration applied from the link stands for the pending reconcile, and the settle
    /// counts from its end.
    #[test]
    fn an_apply_from_the_link_covers_the_pending_reconcile() {
        let settle = Duration::from_millis(500);
        let mut r = Reconciles::new(settle);
        let t0 = Instant::now();
        r.ask(Trigger::Reconnect, t0);
        let applied = t0 + Duration::from_millis(100);
        assert_eq!(
            r.covered(applied).map(|p| p.trigger),
            Some(Trigger::Reconnect)
        );
        assert!(r.start(applied + settle).is_none(), "nothing left pending");
        r.ask(Trigger::Rouse, applied + Duration::from_millis(1));
        assert_eq!(r.due_at(), Some(applied + settle));
    }

    /// Failed re-checks back off from 10 ms to a second, ask for a reconcile only past their
    /// deadline, and a success ends the count.
    #[test]
    fn failed_rechecks_back_off_then_ask_for_a_reconcile_past_the_deadline() {
        let deadline = Duration::from_secs(5);
        let mut f = Failing::default();
        let t0 = Instant::now();
        let mut gaps = Vec::new();
        let mut now = t0;
        for _ in 0..9 {
            assert!(!f.failed(now, deadline));
            let at = f.retry_at.unwrap();
            gaps.push((at - now).as_millis());
            now = at;
        }
        assert_eq!(gaps, [10, 20, 40, 80, 160, 320, 640, 640, 640]);
        assert_eq!(f.succeeded(), 9);
        assert_eq!(f.retry_at, None);
        assert!(!f.failed(t0, deadline));
        assert!(f.failed(t0 + deadline, deadline), "past the deadline");
        assert_eq!(f.failures, 0, "and counting starts again");
    }
}
