//! Capped exponential backoff with jitter: the wait before the next attempt to reach the broker.
//! Each failure doubles the ceiling up to the cap; the wait is drawn uniformly from the upper half
//! of the ceiling, so a fleet that lost its broker at the same moment does not come back at the
//! same moment. A rouse does not reset it: being woken says the machine changed, not that whatever
//! refused the connection has stopped.

use std::time::Duration;

/// The backoff's state.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    failures: u32,
}

impl Backoff {
    pub fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff {
            base,
            cap: cap.max(base),
            failures: 0,
        }
    }

    /// The ceiling of the next wait: base × 2^failures, at most the cap.
    pub fn ceiling(&self) -> Duration {
        let factor = 1u32.checked_shl(self.failures.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The wait after one more failure, with `unit` a number in [0, 1) (the jitter).
    pub fn wait_with(&mut self, unit: f64) -> Duration {
        let ceiling = self.ceiling();
        self.failures = self.failures.saturating_add(1);
        ceiling / 2 + ceiling.mul_f64(unit.clamp(0.0, 1.0) / 2.0)
    }

    /// The wait after one more failure, jittered from the system's random source.
    pub fn wait(&mut self) -> Duration {
        let r = getrandom::u64().unwrap_or(0);
        self.wait_with((r >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// After a link that held: the next failure waits the base again.
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_to_the_cap_and_stay_in_the_upper_half() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
        let seen: Vec<_> = (0..6).map(|_| b.wait_with(0.0)).collect();
        let secs: Vec<f64> = seen.iter().map(|d| d.as_secs_f64()).collect();
        assert_eq!(secs, vec![0.5, 1.0, 2.0, 4.0, 5.0, 5.0]);
        assert_eq!(b.wait_with(0.999_999).as_secs_f64().round(), 10.0);
        for _ in 0..100 {
            let d = b.wait();
            assert!(
                d >= Duration::from_secs(5) && d <= Duration::from_secs(10),
                "{d:?}"
            );
        }
    }

    #[test]
    fn reset_starts_again_from_the_base() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        for _ in 0..10 {
            b.wait();
        }
        b.reset();
        assert_eq!(b.wait_with(1.0), Duration::from_secs(1));
        assert_eq!(b.failures(), 1);
    }
}
