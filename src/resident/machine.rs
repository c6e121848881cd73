//! The resident host's decisions as a state machine: what it has heard and when it must next
//! act, with a handler per event (a signal, a timer, a change to the ruleset, the container
//! engine, a message from the link, a reconcile's end) and [`Machine::next_deadline`]. It reads no
//! clock (every handler is given `now`) and does no I/O, so it is tested against a clock the test
//! moves; `resident::run` does the I/O and calls it.

use super::pace::{Failing, Pending, Reconciles, Trigger};
use super::Options;
use std::time::{Duration, Instant};

/// The resident host's pacing state.
pub(super) struct Machine {
    opts: Options,
    reconciles: Reconciles,
    /// A reconcile failed while another program was changing the ruleset: when the ruleset was
    /// last heard changing. It is tried again at the first re-check that succeeds or once the
    /// ruleset is quiet, so the briefing is of a check that completed, not of one the churn made
    /// fail.
    retry_when_quiet: Option<Instant>,
    failing: Failing,
    next_tick: Instant,
    next_legacy: Instant,
    /// A change to the ruleset by another program: (first heard, last heard, who made it).
    changed: Option<(Instant, Instant, String)>,
}

/// A re-check of the firewall that is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Recheck {
    /// When the change it answers was first heard (none for a legacy period or a retry).
    pub first: Option<Instant>,
    /// Who made the change, for the log.
    pub who: String,
    /// It is a re-check that failed before, tried again.
    pub retry: bool,
}

/// What a re-check came to.
#[derive(Debug)]
pub(super) enum Checked {
    Done,
    /// A whole reconcile is due instead (nothing remembered to put back, or a new declaration).
    Reconcile(Trigger),
    /// It failed; the error's text.
    Failed(String),
}

impl Machine {
    /// A resident host just started: its first reconcile is asked for.
    pub(super) fn new(opts: &Options, now: Instant) -> Machine {
        let mut reconciles = Reconciles::new(opts.settle);
        reconciles.ask(Trigger::Start, now);
        Machine {
            opts: opts.clone(),
            reconciles,
            retry_when_quiet: None,
            failing: Failing::default(),
            next_tick: now + opts.period,
            next_legacy: now + opts.legacy_period,
            changed: None,
        }
    }

    /// A reconcile, if one may start now: its sequence number and what asked for it.
    pub(super) fn start(&mut self, now: Instant) -> Option<(u64, Pending)> {
        self.reconciles.start(now)
    }

    /// A reconcile ended; `failed` while the ruleset was changing (`churned`), it is tried again
    /// once the ruleset holds still (returns whether it will be).
    pub(super) fn reconcile_ended(&mut self, failed: bool, churned: bool, now: Instant) -> bool {
        self.reconciles.ended(now);
        // A change heard during the reconcile is covered by it.
        self.retry_when_quiet = (failed && churned).then_some(now);
        self.changed = None;
        self.failing = Failing::default();
        self.next_tick = now + self.opts.period;
        self.retry_when_quiet.is_some()
    }

    /// Asks for a reconcile (a rouse, a new declaration, the link reconnected, the engine's
    /// bridges changed past what the memo can cover).
    pub(super) fn ask(&mut self, trigger: Trigger, now: Instant) {
        self.reconciles.ask(trigger, now);
    }

    /// The signals heard: a new declaration stored locally (SIGUSR1) or a rouse (SIGHUP) asks
    /// for a reconcile; the two at once are one.
    pub(super) fn signals(&mut self, new_declaration: bool, rouse: bool, now: Instant) {
        if new_declaration {
            self.reconciles.ask(Trigger::NewDeclaration, now);
        } else if rouse {
            self.reconciles.ask(Trigger::Rouse, now);
        }
    }

    /// The link's declaration was applied whole: a reconcile pending now would do it again, so
    /// the apply stands for it.
    pub(super) fn applied_from_link(&mut self, now: Instant) {
        if let Some(p) = self.reconciles.covered(now) {
            tracing::debug!(
                trigger = p.trigger.as_str(),
                coalesced = p.wakeups,
                "the pending reconcile is covered by the declaration applied from the link"
            );
        }
        self.retry_when_quiet = None;
    }

    /// The node was released: nothing of the mesh's is left to put back or reconcile, and the
    /// release was the last apply, so nothing pending is the mesh's any more.
    pub(super) fn released(&mut self, now: Instant) {
        self.changed = None;
        self.retry_when_quiet = None;
        self.failing = Failing::default();
        self.reconciles.covered(now);
    }

    /// Whether a reconcile is due now (it starts before anything else is looked at).
    pub(super) fn reconcile_due(&self, now: Instant) -> bool {
        self.reconciles.due_at().is_some_and(|at| at <= now)
    }

    /// Another program changed the ruleset (or events were lost): a reconcile waiting for quiet
    /// waits on from now.
    pub(super) fn foreign_change(&mut self, now: Instant) {
        if let Some(at) = self.retry_when_quiet.as_mut() {
            *at = now;
        }
    }

    /// A change to the ruleset by `who`: the re-check waits for quiet after it.
    pub(super) fn ruleset_changed(&mut self, who: String, now: Instant) {
        self.changed = Some(match self.changed.take() {
            Some((first, _, _)) => (first, now, who),
            None => (now, now, who),
        });
    }

    /// Whether the ruleset has been quiet long enough for a reconcile that failed under churn to
    /// be tried again; if so it is asked for.
    pub(super) fn quiet_again(&mut self, now: Instant) -> bool {
        if self
            .retry_when_quiet
            .is_some_and(|at| now >= at + self.opts.churn_quiet)
        {
            self.retry_when_quiet = None;
            self.reconciles.ask(Trigger::QuietAgain, now);
            return true;
        }
        false
    }

    /// When the re-check of a change heard is due: after quiet, or at the patience's end.
    fn recheck_at(&self) -> Option<Instant> {
        self.changed
            .as_ref()
            .map(|(first, last, _)| (*last + self.opts.quiet).min(*first + self.opts.patience))
    }

    fn legacy_on(&self) -> bool {
        self.opts.legacy_period > Duration::ZERO
    }

    /// The re-check due now, if one is (a change heard and quiet since, the legacy period, a
    /// failed re-check's retry); it is taken, and the legacy period starts again.
    pub(super) fn recheck_due(&mut self, now: Instant) -> Option<Recheck> {
        let legacy_due = self.legacy_on() && now >= self.next_legacy;
        let retry_due = self.failing.retry_at.is_some_and(|at| now >= at);
        if !(self.recheck_at().is_some_and(|at| now >= at) || legacy_due || retry_due) {
            return None;
        }
        let (first, who) = match self.changed.take() {
            Some((first, _, who)) => (Some(first), who),
            None if retry_due => (None, "a re-check tried again".to_string()),
            None => (None, "the legacy period".to_string()),
        };
        self.failing.retry_at = None;
        if legacy_due {
            self.next_legacy = now + self.opts.legacy_period;
        }
        Some(Recheck {
            first,
            who,
            retry: retry_due,
        })
    }

    /// What a re-check by `who` came to.
    pub(super) fn rechecked(&mut self, checked: Checked, who: &str, now: Instant) {
        match checked {
            Checked::Done => {
                // The ruleset held still for a whole listing: a reconcile that failed under the
                // churn is tried again now rather than after the quiet.
                if self.retry_when_quiet.take().is_some() {
                    self.reconciles.ask(Trigger::QuietAgain, now);
                }
                let before = self.failing.succeeded();
                if before > 0 {
                    tracing::info!(
                        failed_before = before,
                        "re-checking the firewall succeeded after failing"
                    );
                }
            }
            Checked::Reconcile(t) => self.reconciles.ask(t, now),
            Checked::Failed(e) => {
                let deadline = self.opts.recheck_deadline;
                if self.failing.failed(now, deadline) {
                    tracing::error!(by = who, error = %e, deadline_ms = deadline.as_millis() as u64, "re-checking the firewall kept failing past its deadline; a reconcile is due");
                    self.reconciles.ask(Trigger::RecheckFailed, now);
                } else {
                    tracing::warn!(by = who, error = %e, failures = self.failing.failures, "re-checking the firewall failed; tried again after a backoff");
                }
            }
        }
    }

    /// The period's timer: a drift reconcile asked for once it has passed (it may then wait for
    /// the settle, and the loop with it).
    pub(super) fn tick(&mut self, now: Instant) -> bool {
        if now < self.next_tick {
            return false;
        }
        self.reconciles.ask(Trigger::Period, now);
        self.next_tick = now + self.opts.period;
        true
    }

    /// The soonest moment something is due: the period, the legacy period, a re-check after
    /// quiet, a failed re-check's retry, the pending reconcile, a failed reconcile's retry once
    /// quiet.
    pub(super) fn next_deadline(&self) -> Instant {
        let legacy = if self.legacy_on() {
            self.next_legacy
        } else {
            self.next_tick
        };
        [
            self.recheck_at(),
            self.failing.retry_at,
            self.reconciles.due_at(),
            self.retry_when_quiet.map(|at| at + self.opts.churn_quiet),
        ]
        .into_iter()
        .flatten()
        .fold(self.next_tick.min(legacy), Instant::min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock the test moves: `at(ms)` is that many milliseconds after the start.
    struct Clock(Instant);

    impl Clock {
        fn at(&self, ms: u64) -> Instant {
            self.0 + Duration::from_millis(ms)
        }
    }

    fn opts() -> Options {
        Options {
            period: Duration::from_secs(600),
            legacy_period: Duration::from_secs(5),
            quiet: Duration::from_millis(3),
            patience: Duration::from_millis(25),
            settle: Duration::from_millis(500),
            churn_quiet: Duration::from_secs(1),
            recheck_deadline: Duration::from_secs(5),
            ..Default::default()
        }
    }

    /// A machine past its first reconcile, which ended at 10 ms.
    fn started(c: &Clock) -> Machine {
        let mut m = Machine::new(&opts(), c.at(0));
        assert_eq!(
            m.next_deadline(),
            c.at(0),
            "the first reconcile is due at once"
        );
        let (_, asked) = m.start(c.at(0)).expect("the start's reconcile");
        assert_eq!(asked.trigger, Trigger::Start);
        assert!(!m.reconcile_ended(false, false, c.at(10)));
        m
    }

    #[test]
    fn after_the_first_reconcile_the_legacy_period_is_the_next_deadline() {
        let c = Clock(Instant::now());
        let mut m = started(&c);
        assert_eq!(m.next_deadline(), c.at(5_000));
        assert!(m.recheck_due(c.at(4_999)).is_none());
        let due = m
            .recheck_due(c.at(5_000))
            .expect("the legacy period's re-check");
        assert_eq!(due.who, "the legacy period");
        assert_eq!((due.first, due.retry), (None, false));
        assert_eq!(m.next_deadline(), c.at(10_000));
    }

    #[test]
    fn a_change_is_rechecked_after_quiet_and_no_later_than_the_patience() {
        let c = Clock(Instant::now());
        let mut m = started(&c);
        m.ruleset_changed("nft (pid 7)".into(), c.at(100));
        assert_eq!(m.next_deadline(), c.at(103));
        // Changes keep coming: the quiet moves, the patience does not.
        for t in [102, 104, 106, 108, 110, 112, 114, 116, 118, 120, 122] {
            m.ruleset_changed("nft (pid 7)".into(), c.at(t));
            assert!(m.recheck_due(c.at(t)).is_none(), "at {t} ms");
        }
        assert_eq!(m.next_deadline(), c.at(125));
        let due = m.recheck_due(c.at(125)).expect("at the patience's end");
        assert_eq!(due.first, Some(c.at(100)));
        assert_eq!(due.who, "nft (pid 7)");
        m.rechecked(Checked::Done, &due.who, c.at(126));
        assert!(!m.reconcile_due(c.at(126)));
        assert_eq!(m.next_deadline(), c.at(5_000));
    }

    #[test]
    fn rouses_coalesce_into_one_reconcile_after_the_settle() {
        let c = Clock(Instant::now());
        let mut m = started(&c);
        for t in [20, 30, 40] {
            m.signals(false, true, c.at(t));
        }
        // The settle runs from the end of the last reconcile (10 ms).
        assert_eq!(m.next_deadline(), c.at(510));
        assert!(!m.reconcile_due(c.at(509)) && m.start(c.at(509)).is_none());
        let (_, asked) = m.start(c.at(510)).expect("one reconcile");
        assert_eq!((asked.trigger, asked.wakeups), (Trigger::Rouse, 3));
        assert!(!m.reconcile_ended(false, false, c.at(600)));
        assert!(m.start(c.at(5_000)).is_none(), "nothing left pending");
    }

    #[test]
    fn a_new_declaration_outranks_a_rouse_heard_with_it() {
        let c = Clock(Instant::now());
        let mut m = started(&c);
        m.signals(true, true, c.at(600));
        let (_, asked) = m.start(c.at(600)).expect("the reconcile");
        assert_eq!(asked.trigger, Trigger::NewDeclaration);
    }

    #[test]
    fn a_reconcile_failed_under_churn_is_tried_again_once_the_ruleset_is_quiet() {
        let c = Clock(Instant::now());
        let mut m = started(&c);
        m.signals(false, true, c.at(600));
        m.start(c.at(600)).expect("the rouse's reconcile");
        assert!(m.reconcile_ended(true, true, c.at(700)));
        // Another change pushes the quiet on.
        m.foreign_change(c.at(1_200));
        assert!(!m.quiet_again(c.at(2_199)));
        assert_eq!(m.next_deadline(), c.at(2_200));
        assert!(m.quiet_again(c.at(2_200)));
        assert!(m.reconcile_due(c.at(2_200)));
        let (_, asked) = m.start(c.at(2_200)).expect("tried again");
        assert_eq!(asked.trigger, Trigger::QuietAgain);
    }

    #[test]
    fn a_recheck_that_succeeds_brings_the_failed_reconcile_forward() {
        let c = Clock(Instant::now());
        let mut m = started(&c);
        m.signals(false, true, c.at(600));
        m.start(c.at(600)).expect("the rouse's reconcile");
        assert!(m.reconcile_ended(true, true, c.at(700)));
        m.ruleset_changed("iptables-nft-restore (pid 9)".into(), c.at(800));
        let due = m.recheck_due(c.at(803)).expect("after quiet");
        m.rechecked(Checked::Done, &due.who, c.at(804));
        assert!(!m.quiet_again(c.at(5_000)), "the retry is asked already");
        let (_, asked) = m.start(c.at(1_200)).expect("asked by the re-check");
        assert_eq!(asked.trigger, Trigger::QuietAgain);
    }

    #[test]
    fn failing_rechecks_are_retried_then_ask_for_a_reconcile_past_their_deadline() {
        let c = Clock(Instant::now());
        let mut m = started(&c);
        m.ruleset_changed("nft (pid 7)".into(), c.at(100));
        let due = m.recheck_due(c.at(103)).expect("after quiet");
        m.rechecked(Checked::Failed("busy".into()), &due.who, c.at(104));
        assert!(!m.reconcile_due(c.at(104)));
        let retry_at = m.next_deadline();
        assert!(retry_at > c.at(104) && retry_at < c.at(5_000), "a backoff");
        let due = m.recheck_due(retry_at).expect("the retry");
        assert!(due.retry);
        assert_eq!(due.who, "a re-check tried again");
        let mut now = retry_at;
        let mut asked = false;
        for _ in 0..100 {
            m.rechecked(
                Checked::Failed("busy".into()),
                "a re-check tried again",
                now,
            );
            if m.reconcile_due(now + Duration::from_secs(1)) {
                asked = true;
                break;
            }
            now = m.next_deadline();
            m.recheck_due(now).expect("retried");
        }
        assert!(asked, "a reconcile is asked for past the deadline");
        assert!(
            now >= c.at(104) + Duration::from_secs(5),
            "not before the deadline"
        );
    }

    #[test]
    fn an_apply_from_the_link_covers_the_pending_reconcile_and_a_release_clears_all() {
        let c = Clock(Instant::now());
        let mut m = started(&c);
        m.signals(false, true, c.at(20));
        m.applied_from_link(c.at(30));
        assert!(m.start(c.at(5_000)).is_none(), "covered");
        m.ruleset_changed("nft (pid 7)".into(), c.at(40));
        m.ask(Trigger::Reconnect, c.at(50));
        m.released(c.at(60));
        assert!(
            m.start(c.at(5_000)).is_none(),
            "nothing pending after a release"
        );
        assert_eq!(m.next_deadline(), c.at(5_000), "no re-check of the change");
    }

    #[test]
    fn the_period_asks_for_a_drift_reconcile_once() {
        let c = Clock(Instant::now());
        let mut o = opts();
        o.legacy_period = Duration::ZERO;
        let mut m = Machine::new(&o, c.at(0));
        m.start(c.at(0)).expect("the start's reconcile");
        m.reconcile_ended(false, false, c.at(10));
        assert_eq!(m.next_deadline(), c.at(600_010));
        assert!(m.recheck_due(c.at(600_009)).is_none(), "no legacy period");
        assert!(!m.tick(c.at(600_009)));
        assert!(m.tick(c.at(600_010)));
        assert!(!m.tick(c.at(600_011)), "asked once");
        let (_, asked) = m.start(c.at(600_010)).expect("the drift reconcile");
        assert_eq!(asked.trigger, Trigger::Period);
    }
}
