//! The watch a socket keeps once the ruleset would not hold still: a subscription to the
//! nf_tables events that records, per committed generation, which tables it changed and whether
//! it changed tables or chains themselves, so a listing of one table can be trusted when no
//! commit during it touched that table, whatever changed elsewhere.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::monitor::{Event, NfMonitor};
use super::types::Family;
use crate::error::Result;

/// How long to wait for the end of a transaction the generation already names.
const CATCH_UP: Duration = Duration::from_secs(1);
/// How many committed generations are remembered.
const KEPT: usize = 100_000;

/// What one committed transaction changed.
#[derive(Debug, Default)]
struct Commit {
    generation: u32,
    tables: Vec<(Family, String)>,
    /// It added or deleted a table or a chain, or changed one.
    frame: bool,
    /// The thread that committed it, as its NEWGEN says (`NFTA_GEN_PROC_PID`, the kernel's
    /// task id of the committer).
    pid: Option<u32>,
}

/// The events of every transaction since the watch began, by generation.
#[derive(Debug)]
pub(super) struct Watch {
    monitor: NfMonitor,
    /// The transaction whose NEWGEN has not come yet.
    open: Commit,
    done: VecDeque<Commit>,
    /// The last generation whose NEWGEN was taken in (at first, the one read on subscribing).
    seen: u32,
    /// The generation read on subscribing: nothing before it is known.
    start: u32,
    /// Events were lost (a full receive buffer) since the watch began: nothing is trusted.
    lost: bool,
}

/// Whether generation `a` came before `b` (generations wrap at 2^32).
fn before(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) > 0
}

/// Whether generation `g` is in `from..=to` (generations wrap at 2^32).
fn within(g: u32, from: u32, to: u32) -> bool {
    g.wrapping_sub(from) <= to.wrapping_sub(from)
}

impl Watch {
    /// Subscribes; [`Watch::start_at`] must then be given the generation read once subscribed
    /// (a transaction committing at that very instant is the one thing the watch cannot vouch
    /// for).
    pub(super) fn open() -> Result<Watch> {
        Ok(Watch {
            monitor: NfMonitor::open()?,
            open: Commit::default(),
            done: VecDeque::new(),
            seen: 0,
            start: 0,
            lost: false,
        })
    }

    pub(super) fn start_at(&mut self, generation: u32) {
        self.seen = generation;
        self.start = generation;
    }

    /// Whether the watch saw every transaction after `generation`.
    pub(super) fn covers(&self, generation: u32) -> bool {
        !before(generation, self.start)
    }

    /// Takes in what has come, without waiting.
    fn drain(&mut self) -> Result<()> {
        while let Some(e) = self.monitor.next_event(Some(Duration::ZERO))? {
            self.take(e);
        }
        Ok(())
    }

    /// The first generation a listing that starts now, at generation `generation` (read just
    /// before), must be vouched for from: the next one when that transaction has ended, else
    /// itself (it may still be committing).
    pub(super) fn from(&mut self, generation: u32) -> Result<u32> {
        self.drain()?;
        Ok(if before(self.seen, generation) {
            generation
        } else {
            generation.wrapping_add(1)
        })
    }

    fn take(&mut self, e: Event) {
        match e {
            Event::NewRule(r) | Event::DelRule(r) => self.touch(r.family, &r.table),
            Event::NewSet(s) | Event::DelSet(s) => self.touch(s.family, &s.table),
            Event::NewChain(c) | Event::DelChain(c) => {
                self.open.frame = true;
                self.touch(c.family, &c.table);
            }
            Event::NewTable(t) | Event::DelTable(t) => {
                self.open.frame = true;
                self.touch(t.family, &t.name);
            }
            Event::NewGen(g) => {
                let mut c = std::mem::take(&mut self.open);
                c.generation = g.id;
                c.pid = g.pid;
                self.seen = g.id;
                self.done.push_back(c);
                if self.done.len() > KEPT {
                    self.done.pop_front();
                }
            }
            // Set elements (which a verdict reads after the listing), objects and flowtables
            // count against their table; one naming none counts against everything.
            Event::Other {
                family,
                table: Some(t),
                ..
            } => self.touch(family, &t),
            Event::Other { table: None, .. } => self.open.frame = true,
            Event::Lost => self.lost = true,
        }
    }

    fn touch(&mut self, family: Family, table: &str) {
        if !self
            .open
            .tables
            .iter()
            .any(|(f, t)| *f == family && t == table)
        {
            self.open.tables.push((family, table.to_string()));
        }
    }

    /// Takes in every event until the end of transaction `generation` (the kernel sends a
    /// transaction's events, then its NEWGEN, before the commit returns): `false` when it does
    /// not come within a second or events were lost, so nothing up to it can be vouched for.
    pub(super) fn caught_up(&mut self, generation: u32) -> Result<bool> {
        let deadline = Instant::now() + CATCH_UP;
        self.drain()?;
        loop {
            if self.lost {
                return Ok(false);
            }
            if !before(self.seen, generation) {
                return Ok(true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            match self.monitor.next_event(Some(left))? {
                Some(e) => self.take(e),
                None => return Ok(false),
            }
        }
    }

    /// Whether a transaction of a generation in `from..=to` (none when `from` is past `to`)
    /// touched table `(family, name)`
    /// (`None`: any table or chain itself). Call [`Watch::caught_up`] with `to` first.
    pub(super) fn touched(&self, from: u32, to: u32, table: Option<(Family, &str)>) -> bool {
        self.touched_by_other(from, to, table, None)
    }

    /// [`Watch::touched`], counting no transaction committed by thread `mine` (when given).
    pub(super) fn touched_by_other(
        &self,
        from: u32,
        to: u32,
        table: Option<(Family, &str)>,
        mine: Option<u32>,
    ) -> bool {
        if before(to, from) {
            return false;
        }
        self.done
            .iter()
            .filter(|c| within(c.generation, from, to))
            .filter(|c| mine.is_none() || c.pid != mine)
            .any(|c| match table {
                None => c.frame,
                Some((f, n)) => c.tables.iter().any(|(cf, cn)| *cf == f && cn == n),
            })
    }

    /// Drops the record of transactions before `generation`, which no listing will ask about.
    pub(super) fn forget_before(&mut self, generation: u32) {
        while self
            .done
            .front()
            .is_some_and(|c| before(c.generation, generation))
        {
            self.done.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{before, within};

    #[test]
    fn generations_compare_across_the_wrap() {
        assert!(before(1, 2) && !before(2, 2) && !before(3, 2));
        assert!(before(u32::MAX, 0));
        assert!(within(5, 5, 5));
        assert!(within(6, 5, 9));
        assert!(!within(4, 5, 9));
        assert!(!within(10, 5, 9));
        assert!(within(1, u32::MAX - 1, 3));
        assert!(!within(u32::MAX - 2, u32::MAX - 1, 3));
    }
}
