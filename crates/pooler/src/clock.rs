//! The pool's clock: an exact read where something needs the instant, and a coarse one for
//! everything else, so that a take and a return in the default configuration read no clock.
//!
//! Instants are kept as *stamps*: nanoseconds since the pool's origin, in a `u64`. The coarse
//! time is the latest exact read, brought forward by every exact read and by the pool's
//! housekeeping tick (every [`TICK`]), so it lags the real time by at most one tick while the
//! pool runs. Everything follows tokio's clock, paused or not.

use crate::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::time::Instant;

/// An exact read brings the coarse time forward only when it is at least this far ahead:
/// the coarse time then lags the latest exact read by less than this (besides the tick),
/// and a burst of exact reads costs one atomic read-modify-write a millisecond, not one
/// each.
const FORWARD_STEP: u64 = 1_000_000;

/// How often the housekeeping tick brings the coarse time forward (and publishes gauges and
/// counters): the coarse time's precision.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// A queued take whose deadline is further than this (and a tick) past the coarse time arms
/// no timer: the housekeeping tick wakes it once its deadline is this near, and only then
/// does it arm one, for the exact instant (docs/design.md, "Taking"). Most queued takes are
/// served long before their deadline, and never touch the runtime's timer wheel.
pub(crate) const TIMER_HORIZON: Duration = Duration::from_millis(300);

#[derive(Debug)]
pub(crate) struct Clock {
    origin: Instant,
    coarse: AtomicU64,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Clock {
            origin: Instant::now(),
            coarse: AtomicU64::new(0),
        }
    }

    /// Reads the clock (and brings the coarse time forward).
    pub(crate) fn now(&self) -> Instant {
        self.now_stamped().0
    }

    /// Reads the clock: the instant and its stamp (and brings the coarse time forward), for
    /// a caller that needs both, and so converts once.
    #[inline]
    pub(crate) fn now_stamped(&self) -> (Instant, u64) {
        let now = Instant::now();
        let stamp = self.stamp(now);
        self.forward(stamp);
        (now, stamp)
    }

    /// Reads the clock as a stamp (and brings the coarse time forward): [`now`](Self::now)
    /// without the `Instant`, for the paths that only compare stamps.
    #[inline]
    pub(crate) fn read(&self) -> u64 {
        let stamp = self.stamp(Instant::now());
        self.forward(stamp);
        stamp
    }

    /// Brings the coarse time forward to an exact read's `stamp`, if it is a step ahead.
    #[inline]
    fn forward(&self, stamp: u64) {
        if stamp >= self.coarse.load(Relaxed).saturating_add(FORWARD_STEP) {
            self.coarse.fetch_max(stamp, Relaxed);
        }
    }

    /// The coarse time, as a stamp: no clock read, at most one tick behind.
    #[inline]
    pub(crate) fn coarse(&self) -> u64 {
        self.coarse.load(Relaxed)
    }

    /// `at` as a stamp.
    pub(crate) fn stamp(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.origin);
        since
            .as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(since.subsec_nanos()))
    }

    /// A stamp as an instant.
    pub(crate) fn instant(&self, stamp: u64) -> Instant {
        self.origin + Duration::from_nanos(stamp)
    }
}

#[cfg(all(test, not(pooler_loom)))]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_coarse_time_follows_exact_reads_and_never_goes_back() {
        let clock = Clock::new();
        assert_eq!(clock.coarse(), 0);
        tokio::time::advance(Duration::from_millis(250)).await;
        assert_eq!(clock.coarse(), 0, "no read, no change");
        let now = clock.now();
        assert_eq!(clock.instant(clock.coarse()), now);
        assert_eq!(clock.coarse(), 250_000_000);
        clock
            .coarse
            .fetch_max(clock.stamp(now - Duration::from_millis(1)), Relaxed);
        assert_eq!(clock.coarse(), 250_000_000);
    }
}

#[cfg(all(test, pooler_loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// Exact reads on two threads race a third that reads the coarse time: the coarse time
    /// it sees never goes back, and ends less than a step behind the latest exact read.
    /// The reads' stamps are given, not read off the real clock: whether a read is a step
    /// ahead must not depend on how long the machine took, or loom's exploration is not
    /// deterministic.
    #[test]
    fn loom_the_coarse_time_never_goes_back_under_racing_reads() {
        loom::model(|| {
            let clock = Arc::new(Clock::new());
            let readers: Vec<_> = [FORWARD_STEP * 2, FORWARD_STEP * 3]
                .into_iter()
                .map(|stamp| {
                    let c = clock.clone();
                    thread::spawn(move || {
                        c.forward(stamp);
                        stamp
                    })
                })
                .collect();
            let first = clock.coarse();
            let second = clock.coarse();
            assert!(second >= first, "the coarse time went back");
            let latest = readers
                .into_iter()
                .map(|r| r.join().unwrap())
                .max()
                .unwrap();
            assert!(clock.coarse().saturating_add(FORWARD_STEP) > latest);
            assert!(clock.coarse() >= second);
        });
    }
}
