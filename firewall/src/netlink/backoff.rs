//! Jittered exponential backoff under a deadline, for listings and commits the ruleset changed
//! under: waits start at 1 ms and double to 50 ms, each drawn between half and all of its step so
//! two hosts (or a host and the churn) do not fall into step.

use std::time::{Duration, Instant};

/// The first wait.
pub const FIRST_WAIT: Duration = Duration::from_millis(1);
/// The longest wait.
pub const MAX_WAIT: Duration = Duration::from_millis(50);
/// How long a listing or a convergence keeps retrying when its caller gave no deadline.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(5);

/// One retried operation's tries and deadline. The deadline counts from the first failed try,
/// so a first try the kernel is slow to answer (a listing of 50,000 rules takes seconds) still
/// leaves the whole deadline for retries.
#[derive(Debug)]
pub struct Backoff {
    start: Instant,
    within: Duration,
    /// Set at the first failed try.
    deadline: Option<Instant>,
    step: Duration,
    tries: u32,
    rng: u64,
}

impl Backoff {
    /// Starts counting now; retries stop once `within` has passed since the first failed try.
    pub fn new(within: Duration) -> Backoff {
        let start = Instant::now();
        // A seed that differs between processes and calls; the jitter needs no better.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() as u64)
            .unwrap_or(1);
        let seed = nanos ^ ((std::process::id() as u64) << 32) ^ 0x9e37_79b9_7f4a_7c15;
        Backoff {
            start,
            within,
            deadline: None,
            step: FIRST_WAIT,
            tries: 0,
            rng: seed | 1,
        }
    }

    /// How many tries have failed so far.
    pub fn tries(&self) -> u32 {
        self.tries
    }

    /// Whole milliseconds since the first try began.
    pub fn millis(&self) -> u128 {
        self.start.elapsed().as_millis()
    }

    /// The next wait: between half and all of the current step (then doubled, up to the cap).
    fn next_wait(&mut self) -> Duration {
        // xorshift64
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let step = self.step.as_micros() as u64;
        let wait = Duration::from_micros(step / 2 + self.rng % (step / 2 + 1));
        self.step = (self.step * 2).min(MAX_WAIT);
        wait
    }

    /// Counts one failed try and sleeps before the next; `false` (without sleeping past it) when
    /// the deadline has come, so the caller gives up naming [`tries`](Self::tries) and
    /// [`millis`](Self::millis).
    pub fn wait(&mut self) -> bool {
        self.tries += 1;
        let now = Instant::now();
        let deadline = *self.deadline.get_or_insert(now + self.within);
        if now >= deadline {
            return false;
        }
        let wait = self.next_wait().min(deadline - now);
        std::thread::sleep(wait);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_from_one_millisecond_to_fifty_with_jitter_below_each_step() {
        let mut b = Backoff::new(Duration::from_secs(60));
        let mut steps = Vec::new();
        for _ in 0..10 {
            let before = b.step;
            let w = b.next_wait();
            assert!(
                w >= before / 2 && w <= before,
                "{w:?} outside half..all of {before:?}"
            );
            steps.push(before.as_millis());
        }
        assert_eq!(steps, [1, 2, 4, 8, 16, 32, 50, 50, 50, 50]);
    }

    #[test]
    fn the_deadline_ends_the_retries_and_counts_every_try() {
        let mut b = Backoff::new(Duration::from_millis(30));
        let mut n = 0;
        while b.wait() {
            n += 1;
            assert!(n < 1000, "the deadline never ended the retries");
        }
        assert_eq!(b.tries(), n + 1);
        assert!(b.millis() >= 30, "gave up after {} ms", b.millis());
        // A slow first try does not eat the deadline: it counts from the first failure.
        let mut b = Backoff::new(Duration::from_millis(30));
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.wait(), "the first failure after a slow try is retried");
        assert!(
            b.millis() < 200,
            "slept past the deadline: {} ms",
            b.millis()
        );
    }
}
