//! Queue-delay shedding (docs/design.md, "Shedding"), after DBConnection's `queue_target`
//! and `queue_interval` and CoDel: the pool watches how long takes wait in its queue; when
//! even the shortest wait of a whole interval stayed above the target, the pool is
//! *overloaded* for the next interval, and a take that would queue is refused at once with
//! [`TakeError::Shed`](crate::TakeError::Shed) — better than handing members to waiters that
//! have spent their budget. An interval that sees a wait at or below the target, or none at
//! all, ends the overload: takes queue again, and the next interval measures anew. While
//! overloaded, a take that has waited more than twice the target when its turn comes is
//! refused too ([`Shedder::stale`]).
//!
//! # Invariants
//!
//! 1. `overloaded` is the verdict of the last interval that ended.
//! 2. `min` is the shortest wait seen since `began`.
//! 3. `on` is `target.is_some()`.
//!
//! Only takes that would queue, and waits that end, look here — never a take that finds a
//! member — and with no `queue_target` they stop at a relaxed load (`on`): the lock of its
//! own is taken only when shedding is configured.

use std::time::Duration;

use tokio::time::Instant;

use crate::sync::atomic::{AtomicBool, Ordering::Relaxed};
use crate::sync::{Mutex, lock};

#[derive(Debug)]
pub(crate) struct Shedder {
    /// A `queue_target` is set (a copy of `state.target.is_some()`, read without the lock).
    on: AtomicBool,
    state: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    /// `queue_target`: none, no shedding.
    target: Option<Duration>,
    /// `queue_interval`.
    interval: Duration,
    began: Instant,
    min: Option<Duration>,
    /// The verdict's figure: the shortest wait of the interval that set it.
    last_min: Duration,
    overloaded: bool,
}

impl Window {
    /// A first interval, beginning `now`, with no verdict.
    fn new(target: Option<Duration>, interval: Duration, now: Instant) -> Self {
        Window {
            target,
            interval,
            began: now,
            min: None,
            last_min: Duration::ZERO,
            overloaded: false,
        }
    }
}

impl Shedder {
    pub(crate) fn new(target: Option<Duration>, interval: Duration, now: Instant) -> Self {
        Shedder {
            on: AtomicBool::new(target.is_some()),
            state: Mutex::new(Window::new(target, interval, now)),
        }
    }

    /// New settings from a reconfigure: a new interval begins, with no verdict.
    pub(crate) fn set(&self, target: Option<Duration>, interval: Duration, now: Instant) {
        let mut w = lock(&self.state);
        *w = Window::new(target, interval, now);
        self.on.store(target.is_some(), Relaxed);
    }

    /// A new target derived from the latency (admission on with no `queue_target`): the
    /// interval under way goes on, judged against it.
    pub(crate) fn retarget(&self, target: Duration) {
        let mut w = lock(&self.state);
        if w.target.is_some() {
            w.target = Some(target);
        }
    }

    /// Ends the interval if it is over, with its verdict.
    fn roll(w: &mut Window, now: Instant) {
        if now.saturating_duration_since(w.began) >= w.interval {
            w.overloaded = w.target.is_some_and(|t| w.min.is_some_and(|m| m > t));
            w.last_min = w.min.unwrap_or_default();
            w.began = now;
            w.min = None;
        }
    }

    /// Whether a `queue_target` is set (a relaxed load: no lock).
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Relaxed)
    }

    /// A take that began waiting in the queue at `since` stopped waiting now (served, or
    /// given up at its deadline).
    pub(crate) fn waited(&self, since: Instant) {
        if !self.on.load(Relaxed) {
            return;
        }
        let now = Instant::now();
        self.observe(now.saturating_duration_since(since), now);
    }

    /// A wait of `delay`, ended at `now`.
    fn observe(&self, delay: Duration, now: Instant) {
        let mut w = lock(&self.state);
        debug_assert_eq!(self.on.load(Relaxed), w.target.is_some(), "invariant #3");
        if w.target.is_none() {
            return;
        }
        Self::roll(&mut w, now);
        w.min = Some(w.min.map_or(delay, |m| m.min(delay)));
    }

    /// Whether a take that waited `waited` and is about to be served should be refused
    /// instead: the pool is overloaded and the take waited more than twice the target
    /// (DBConnection's rule: its caller has likely spent its budget, and serving it would
    /// spend a member on an answer nobody waits for). The target and the wait, if so.
    pub(crate) fn stale(&self, waited: Duration, now: Instant) -> Option<(Duration, Duration)> {
        let (target, _) = self.shed(now)?;
        (waited > target.saturating_mul(2)).then_some((target, waited))
    }

    /// Whether the pool is overloaded now (a take that would queue is refused; `Pool::health`
    /// says `Shedding`): the target and the shortest wait that set the verdict.
    pub(crate) fn shed(&self, now: Instant) -> Option<(Duration, Duration)> {
        if !self.on.load(Relaxed) {
            return None;
        }
        let mut w = lock(&self.state);
        debug_assert_eq!(self.on.load(Relaxed), w.target.is_some(), "invariant #3");
        let target = w.target?;
        Self::roll(&mut w, now);
        w.overloaded.then_some((target, w.last_min))
    }
}

#[cfg(all(test, not(pooler_loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_interval_whose_shortest_wait_beats_the_target_sheds_the_next() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let s = Shedder::new(Some(ms(50)), ms(1000), t0);
        s.observe(ms(80), t0 + ms(100));
        s.observe(ms(120), t0 + ms(500));
        assert_eq!(s.shed(t0 + ms(900)), None, "the interval has not ended");
        // The next interval begins: its predecessor's shortest wait was 80 ms > 50 ms.
        s.observe(ms(90), t0 + ms(1000));
        assert_eq!(s.shed(t0 + ms(1100)), Some((ms(50), ms(80))));
        // One wait at the target in this interval ends the overload at its end.
        s.observe(ms(40), t0 + ms(1500));
        assert_eq!(s.shed(t0 + ms(2000)), None);
    }

    #[test]
    fn an_interval_with_no_wait_ends_the_overload() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let s = Shedder::new(Some(ms(10)), ms(100), t0);
        s.observe(ms(30), t0 + ms(10));
        assert!(s.shed(t0 + ms(100)).is_some());
        // Everything was shed: nobody waited, so the next interval lets takes queue again.
        assert_eq!(s.shed(t0 + ms(200)), None);
    }
}
