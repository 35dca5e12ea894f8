//! The start policy while starts fail: backoff steps, the one delayed start, and the error
//! that takes carry meanwhile (docs/design.md, "Failing starts").
//!
//! The wait after `n` steps is drawn uniformly from `[0, min(100 ms × 2^(n−1), 4 s)]` ("full
//! jitter"), so processes whose backend died together do not come back in lockstep, and a
//! pool notices its backend is back within 4 s of it, however long the outage
//! (docs/design.md, "Failing starts").
//!
//! # Invariants
//!
//! 1. `failures` counts backoff steps since the last successful start; `epoch` grows by one
//!    with each step, and a start remembers the epoch it was decided in: its failure adds a
//!    step only if no step was counted since (it was not in flight with a counted failure),
//!    or if a success has ended the backoff since (the failure is then the newest news).
//! 2. `retry_at` and `last_error` are set exactly while `failures > 0`.
//! 3. At most one start waits out a delay (`delayed`); it is one of the starts in flight.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::StartError;

/// The first backoff step after a failed start.
pub(crate) const BACKOFF_BASE: Duration = Duration::from_millis(100);
/// The longest backoff step.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(4);

/// The delay before the next start after `failures` backoff steps: 100 ms doubling to at most
/// 4 s.
pub(crate) fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    BACKOFF_BASE.saturating_mul(1 << exp).min(BACKOFF_MAX)
}

#[derive(Debug)]
pub(crate) struct StartPolicy {
    /// Draws each step's wait; `None`: exact steps (tests that need them).
    jitter: Option<fastrand::Rng>,
    failures: u32,
    epoch: u64,
    retry_at: Option<Instant>,
    last_error: Option<StartError>,
    /// The start waiting out a backoff delay (its slot key), and when it attempts.
    delayed: Option<(usize, Instant)>,
}

impl StartPolicy {
    /// A policy with full jitter from `rng`, or exact steps with `None`.
    pub(crate) fn new(jitter: Option<fastrand::Rng>) -> Self {
        StartPolicy {
            jitter,
            failures: 0,
            epoch: 0,
            retry_at: None,
            last_error: None,
            delayed: None,
        }
    }

    /// The wait after `failures` steps: the step itself, or with jitter a uniform draw from
    /// `[0, step]` (to the microsecond).
    fn wait(&mut self, failures: u32) -> Duration {
        let step = backoff(failures);
        match &mut self.jitter {
            None => step,
            Some(rng) => {
                let micros = u64::try_from(step.as_micros()).unwrap_or(u64::MAX);
                Duration::from_micros(rng.u64(0..=micros))
            }
        }
    }

    fn holds(&self) -> bool {
        (self.failures > 0) == self.retry_at.is_some()
            && (self.failures > 0) == self.last_error.is_some()
    }

    /// Starts are failing: new starts are decided one at a time, after the backoff step.
    pub(crate) fn failing(&self) -> bool {
        self.failures > 0
    }

    /// The epoch a start decided now belongs to.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The most recent start error, while starts are failing.
    pub(crate) fn last_error(&self) -> Option<&StartError> {
        self.last_error.as_ref()
    }

    /// A start succeeded: the backoff ends.
    pub(crate) fn succeeded(&mut self) {
        self.failures = 0;
        self.retry_at = None;
        self.last_error = None;
        debug_assert!(self.holds());
    }

    /// A start decided in `epoch` failed at `now` (invariant #1).
    pub(crate) fn failed(&mut self, epoch: u64, error: StartError, now: Instant) {
        if epoch == self.epoch || self.failures == 0 {
            self.failures = self.failures.saturating_add(1);
            self.epoch += 1;
            self.retry_at = Some(now + self.wait(self.failures));
        }
        self.last_error = Some(error);
        debug_assert!(self.holds());
    }

    /// When the next start may attempt: the end of the backoff step, or now.
    pub(crate) fn attempt_at(&self, now: Instant) -> Instant {
        self.retry_at.unwrap_or(now).max(now)
    }

    /// The start at `key` waits out a delay until `at`.
    pub(crate) fn delay(&mut self, key: usize, at: Instant) {
        debug_assert!(self.delayed.is_none(), "invariant #3: one delayed start");
        self.delayed = Some((key, at));
    }

    /// The start at `key` has ended, one way or another.
    pub(crate) fn ended(&mut self, key: usize) {
        if self.delayed.is_some_and(|(k, _)| k == key) {
            self.delayed = None;
        }
    }

    /// Whether one of `starting` starts in flight attempts by `by`: any start not waiting out
    /// a delay is attempting now; the delayed one attempts at its time.
    pub(crate) fn reaches(&self, starting: usize, by: Instant) -> bool {
        match self.delayed {
            Some((_, at)) => starting > 1 || at <= by,
            None => starting > 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Full jitter with a seeded generator: every wait falls in `[0, step]`, the draws spread
    /// over the whole window, and the same seed gives the same waits.
    #[test]
    fn jittered_waits_fall_within_the_step_and_repeat_with_the_seed() {
        let t0 = Instant::now();
        let waits = |seed| {
            let mut p = StartPolicy::new(Some(fastrand::Rng::with_seed(seed)));
            (1..=8)
                .map(|_| {
                    let epoch = p.epoch();
                    p.failed(epoch, StartError::Died, t0);
                    (p.failures, p.retry_at.unwrap() - t0)
                })
                .collect::<Vec<_>>()
        };
        let first = waits(7);
        assert_eq!(first, waits(7), "a seed gives the same waits");
        assert_ne!(first, waits(8), "another seed, other waits");
        for (failures, wait) in &first {
            assert!(
                *wait <= backoff(*failures),
                "{wait:?} after {failures} steps"
            );
        }
        let mut low = false;
        let mut high = false;
        let mut p = StartPolicy::new(Some(fastrand::Rng::with_seed(1)));
        for _ in 0..1000 {
            let w = p.wait(1);
            assert!(w <= BACKOFF_BASE);
            low |= w < BACKOFF_BASE / 4;
            high |= w > BACKOFF_BASE * 3 / 4;
        }
        assert!(low && high, "spread over the whole window");
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        assert_eq!(backoff(1), Duration::from_millis(100));
        assert_eq!(backoff(2), Duration::from_millis(200));
        assert_eq!(backoff(5), Duration::from_millis(1600));
        assert_eq!(backoff(40), BACKOFF_MAX);
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }

    #[test]
    fn failures_in_flight_together_are_one_step() {
        let mut p = StartPolicy::new(None);
        let t0 = Instant::now();
        let together = p.epoch();
        for _ in 0..10 {
            p.failed(together, StartError::Died, t0);
        }
        assert_eq!((p.failures, p.retry_at), (1, Some(t0 + backoff(1))));
        let later = p.epoch();
        p.failed(later, StartError::Died, t0);
        assert_eq!(
            p.failures, 2,
            "decided after the counted failure: its own step"
        );
        p.succeeded();
        assert!(!p.failing() && p.last_error().is_none());
    }

    /// A start in flight while a failure was counted and a success then ended the backoff:
    /// its failure starts a new backoff (it does not leave an error with no backoff).
    #[test]
    fn a_failure_after_a_success_is_a_new_step() {
        let mut p = StartPolicy::new(None);
        let t0 = Instant::now();
        let old = p.epoch();
        p.failed(old, StartError::Died, t0);
        p.succeeded();
        let t1 = t0 + Duration::from_millis(100);
        p.failed(old, StartError::Died, t1);
        assert!(p.holds());
        assert_eq!((p.failures, p.retry_at), (1, Some(t1 + backoff(1))));
        p.failed(old, StartError::Died, t1);
        assert_eq!(
            p.failures, 1,
            "in flight with the counted failure: no new step"
        );
    }

    /// Every order in which up to four starts are decided and end, failed or succeeded: the
    /// last outcome decides, a failure leaves the policy backing off with its error, a
    /// success leaves it not backing off, and no failure adds a step when a step was already
    /// counted since its start was decided.
    #[test]
    fn the_last_outcome_decides_in_every_order() {
        fn copy(p: &StartPolicy) -> StartPolicy {
            StartPolicy {
                jitter: None,
                failures: p.failures,
                epoch: p.epoch,
                retry_at: p.retry_at,
                last_error: p.last_error.clone(),
                delayed: None,
            }
        }
        fn explore(p: &StartPolicy, in_flight: &[u64], decided: usize, paths: &mut usize) {
            *paths += 1;
            let now = Instant::now();
            if decided < 4 {
                let mut more = in_flight.to_vec();
                more.push(p.epoch());
                explore(p, &more, decided + 1, paths);
            }
            for (i, &epoch) in in_flight.iter().enumerate() {
                let mut rest = in_flight.to_vec();
                rest.remove(i);
                let mut failed = copy(p);
                let counted_since = p.failing() && epoch != p.epoch;
                failed.failed(epoch, StartError::Died, now);
                assert!(failed.holds());
                assert!(failed.failing() && failed.last_error().is_some());
                assert_eq!(
                    failed.failures,
                    if counted_since {
                        p.failures
                    } else {
                        p.failures + 1
                    }
                );
                explore(&failed, &rest, decided, paths);
                let mut ok = copy(p);
                ok.succeeded();
                assert!(!ok.failing() && ok.last_error().is_none());
                explore(&ok, &rest, decided, paths);
            }
        }
        let mut paths = 0;
        explore(&StartPolicy::new(None), &[], 0, &mut paths);
        assert!(paths > 2_000, "{paths} orders");
    }

    #[test]
    fn the_delayed_start_reaches_a_deadline_at_its_time() {
        let mut p = StartPolicy::new(None);
        let t0 = Instant::now();
        let at = t0 + Duration::from_millis(100);
        p.delay(3, at);
        assert!(!p.reaches(1, t0));
        assert!(p.reaches(1, at));
        assert!(p.reaches(2, t0), "another start is attempting now");
        p.ended(3);
        assert!(!p.reaches(0, at));
    }
}
