//! Adaptive admission (docs/design.md, "Admission"): with `admission = "vegas"` (or
//! `"gradient"`), at most `limit` takes hold a member at a time, `limit` moving between 1 and
//! `max_count` with the latency the pool observes — how long each member is held, which is
//! the database's latency for a pool whose users take, query and give back. A take over the
//! limit waits in this gate's own queue (under the take's deadline, and refused at once while
//! the pool sheds) before it takes a member as usual. The queue is served oldest first; with
//! a `queue_target`, once it has stayed non-empty longer than the target it is served newest
//! first (adaptive LIFO: the oldest waiters' callers have likely given up), and a take that
//! has waited twice the target there is refused (`Stale`), so none waits out its budget
//! behind newer ones. Lowering the limit closes nothing: it admits fewer. The limiters are in
//! `limiters.rs`.
//!
//! Whether takes go through the gate is [`Features::ADMIT`](crate::features::Features::ADMIT);
//! the gate is on when its limiter is there.
//!
//! # Invariants
//!
//! 1. While on: `1 <= limit <= max`. On or off, a take counts in `admitted` from the moment
//!    it is let through (a waiter is counted when it is served, before it collects that)
//!    until it ends — its member, marked `Origin::Admitted`, comes back or is detached, or it
//!    ends without one — so the count is true whenever the gate is turned on, and members
//!    taken without the gate never take from it.
//! 2. Nobody waits while there is room: `waiters` is empty or `admitted >= limit`.
//! 3. `queued_since` is `Some` exactly while `waiters` is not empty.
//! 4. A take joins the queue only while the pool is open and the takes waiting here and in
//!    the pool's own queue are fewer than `queue_max`; it decides under the pool's hot lock
//!    (the lock order is cold, hot, gate: docs/design.md, "Admission"), so neither can change
//!    meanwhile. A close closes the hot core first, then serves every waiter here `Closed`:
//!    no waiter is left, and none joins after.

use std::future::poll_fn;
use std::task::{Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

use crate::sync::{Mutex, lock};
use crate::waiters::{Look, WaitKey, Waiters};

mod limiters;

use limiters::Limiter;

/// How the admission limit is set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum AdmissionMode {
    /// No admission limit: every take may hold a member, up to `max_count` (the default).
    #[default]
    Off,
    /// The limit keeps a few queries queued inside the database, judged from how much
    /// slower holds are than the database's latency unloaded (TCP Vegas).
    Vegas,
    /// The limit shrinks when holds get slower than their long-term average (Gradient2).
    Gradient,
}

/// What the admission gate says of itself ([`Pool::admission`](crate::Pool::admission)).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct AdmissionStatus {
    /// Takes that may hold a member at once now.
    pub limit: usize,
    /// Takes holding a member through the gate now.
    pub admitted: usize,
    /// The mean hold of the last batch of holds.
    pub latency: Duration,
    /// What that latency is compared with: the database's latency unloaded (`vegas`), or
    /// the long-term average hold (`gradient`).
    pub baseline: Duration,
    /// Why the limit last moved.
    pub last_move: LimitMove,
}

/// Why the admission limit last moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimitMove {
    /// Not yet: too few holds measured.
    Starting,
    /// It grew: latency held at its long-term level.
    Grew,
    /// It shrank: the last holds took longer than the long-term latency allows.
    Shrank,
    /// It stayed: the latency is where the limiter wants it.
    Held,
    /// It stayed: the pool used less than half of it.
    Idle,
    /// It is halved for two batches to measure the database's latency unloaded, then put
    /// back (`vegas`).
    Probed,
}

impl LimitMove {
    /// The reason as metrics and logs name it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            LimitMove::Starting => "starting",
            LimitMove::Grew => "grew",
            LimitMove::Shrank => "shrank",
            LimitMove::Held => "held",
            LimitMove::Idle => "idle",
            LimitMove::Probed => "probed",
        }
    }
}

/// How a wait at the gate ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Let through: the take counts as admitted.
    Admitted,
    /// The take's deadline passed first.
    TimedOut,
    /// It waited twice `queue_target` (the target, and the wait): refused as shed.
    Stale(Duration, Duration),
    /// The pool closed while it waited.
    Closed,
}

/// What a take over the limit found when it came to the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Join {
    /// Let through at once.
    Admitted,
    /// It waits at this place, with the gate's `queue_target` then.
    Waiting(WaitKey, Option<Duration>),
    /// `queue_max` takes (this many) already wait, here and in the pool's queue; 0: the
    /// pool has no queue.
    Full(usize),
    /// The pool is closed.
    Closed,
}

/// The gate (see the module's docs).
#[derive(Debug)]
pub(crate) struct Admission {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    limiter: Option<Limiter>,
    limit: usize,
    admitted: usize,
    /// Takes waiting to be let through; served with `Ok(())`, or `Err(())` by a close.
    waiters: Waiters<(), ()>,
    /// When `waiters` last stopped being empty.
    queued_since: Option<Instant>,
    /// `queue_target`: past it, newest first; at twice it, a waiter is stale.
    target: Option<Duration>,
}

impl State {
    /// Whether the queue has stayed non-empty longer than the target (serve newest first).
    fn lifo(&self, now: Instant) -> bool {
        match (self.target, self.queued_since) {
            (Some(target), Some(since)) => now.saturating_duration_since(since) > target,
            _ => false,
        }
    }

    /// Lets waiters through while there is room (all of them when the gate is off), newest
    /// first when the queue has stayed long; their wakers, to wake after the lock.
    fn let_through(&mut self, wakers: &mut Vec<Waker>) {
        if self.waiters.is_empty() {
            // Nobody to let through, and `queued_since` is already `None` (invariant 3):
            // an admitted take's return reads no clock.
            return;
        }
        let now = Instant::now();
        let on = self.limiter.is_some();
        while !self.waiters.is_empty() && (!on || self.admitted < self.limit) {
            let served = if self.lifo(now) {
                self.waiters.serve_newest(Ok(()))
            } else {
                self.waiters.serve_oldest(Ok(()))
            };
            if let Ok(waker) = served {
                self.admitted += 1;
                wakers.extend(waker);
            }
        }
        if self.waiters.is_empty() {
            self.queued_since = None;
        }
    }
}

impl Admission {
    pub(crate) fn new(mode: AdmissionMode, max: usize, target: Option<Duration>) -> Self {
        let gate = Admission {
            state: Mutex::new(State {
                limiter: None,
                limit: 0,
                admitted: 0,
                waiters: Waiters::default(),
                queued_since: None,
                target: None,
            }),
        };
        gate.set(mode, max, target);
        gate
    }

    /// New settings (a pool's start or a reconfigure). Turned on, the limit starts at
    /// `max`; turned off, takes waiting at the gate go through. Either way the count of
    /// admitted takes goes on (invariant 1).
    pub(crate) fn set(&self, mode: AdmissionMode, max: usize, target: Option<Duration>) {
        let mut wakers = Vec::new();
        {
            let mut s = lock(&self.state);
            let max = max.max(1);
            s.target = target;
            let fresh = match mode {
                AdmissionMode::Off => None,
                AdmissionMode::Vegas => Some(Limiter::vegas(max)),
                AdmissionMode::Gradient => Some(Limiter::gradient(max)),
            };
            let same_kind = matches!(
                (&fresh, &s.limiter),
                (Some(Limiter::Vegas(_)), Some(Limiter::Vegas(_)))
                    | (Some(Limiter::Gradient(_)), Some(Limiter::Gradient(_)))
            );
            match (fresh, s.limiter.as_mut()) {
                (None, _) => s.limiter = None,
                (Some(_), Some(limiter)) if same_kind => limiter.set_max(max),
                (Some(mut fresh), Some(_)) => {
                    // Another limiter: it starts from the limit in force.
                    fresh.set_max(max);
                    s.limiter = Some(fresh);
                }
                (Some(fresh), None) => s.limiter = Some(fresh),
            }
            s.limit = s.limiter.as_ref().map_or(0, Limiter::limit);
            s.let_through(&mut wakers);
            Self::check(&s);
        }
        wakers.into_iter().for_each(Waker::wake);
    }

    fn check(s: &State) {
        if s.limiter.is_some() {
            debug_assert!(s.limit >= 1, "invariant 1: a limit of at least one");
            debug_assert!(
                s.waiters.is_empty() || s.admitted >= s.limit,
                "invariant 2: nobody waits while there is room"
            );
        }
        debug_assert_eq!(
            s.queued_since.is_some(),
            !s.waiters.is_empty(),
            "invariant 3"
        );
    }

    /// A take over the limit comes to the gate, while `pool_queued` takes wait in the pool's
    /// own queue and its `queue_max` is `queue_max`: the caller holds the pool's hot lock, so
    /// neither count can grow meanwhile, nor the pool close (invariant 4). `closed`: the pool
    /// is closed.
    pub(crate) fn join(&self, pool_queued: usize, queue_max: usize, closed: bool) -> Join {
        if closed {
            return Join::Closed;
        }
        let mut s = lock(&self.state);
        if s.limiter.is_none() || (s.admitted < s.limit && s.waiters.is_empty()) {
            s.admitted += 1;
            return Join::Admitted;
        }
        if s.waiters.len().saturating_add(pool_queued) >= queue_max {
            return Join::Full(queue_max);
        }
        if s.waiters.is_empty() {
            s.queued_since = Some(Instant::now());
        }
        let key = s.waiters.push();
        Self::check(&s);
        Join::Waiting(key, s.target)
    }

    /// The pool has closed (its hot core first): every waiter is served `Closed`.
    pub(crate) fn close(&self) {
        let mut wakers = Vec::new();
        {
            let mut s = lock(&self.state);
            while !s.waiters.is_empty() {
                if let Ok(Some(waker)) = s.waiters.serve_oldest(Err(())) {
                    wakers.push(waker);
                }
            }
            s.queued_since = None;
            Self::check(&s);
        }
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Waits for admission until `deadline` (none: no deadline); `begun` is when the take
    /// began. With a `queue_target`, a wait of twice the target ends as [`Admit::Stale`].
    /// For the gate's own tests: a pool with no queue of its own and no `queue_max`.
    #[cfg(all(test, not(pooler_loom)))]
    async fn admit(&self, begun: Instant, deadline: Option<Instant>) -> Admit {
        match self.join(0, usize::MAX, false) {
            Join::Admitted => Admit::Admitted,
            Join::Waiting(key, target) => self.wait(key, target, begun, deadline).await,
            Join::Closed => Admit::Closed,
            Join::Full(_) => unreachable!("no queue_max"),
        }
    }

    /// Waits at `key` (from [`Admission::join`], with the `target` it gave) until let
    /// through, `deadline` (none: no deadline), or the stale mark; `begun` is when the take
    /// began.
    ///
    /// Cancel safe: dropped while waiting, the take leaves the queue; dropped after it was
    /// let through but before it saw so, its admission is handed on.
    pub(crate) async fn wait(
        &self,
        key: WaitKey,
        target: Option<Duration>,
        begun: Instant,
        deadline: Option<Instant>,
    ) -> Admit {
        let mut place = Place {
            gate: self,
            key: Some(key),
            closed: false,
        };
        let stale_at = target.map(|t| begun + t.saturating_mul(2));
        let until = match (deadline, stale_at) {
            (Some(d), Some(s)) => Some(d.min(s)),
            (d, s) => d.or(s),
        };
        let served = poll_fn(|cx| place.look(cx.waker()));
        let done = match until {
            None => {
                served.await;
                true
            }
            Some(at) => tokio::time::timeout_at(at, served).await.is_ok(),
        };
        if place.closed {
            return Admit::Closed;
        }
        if done {
            // `look` let go of the place when it saw it served.
            return Admit::Admitted;
        }
        // The deadline or the stale mark: leave, unless let through meanwhile.
        if place.leave() {
            return Admit::Admitted;
        }
        if place.closed {
            return Admit::Closed;
        }
        let now = Instant::now();
        match (target, stale_at) {
            (Some(target), Some(at)) if deadline.is_none_or(|d| at < d) && now >= at => {
                Admit::Stale(target, now.saturating_duration_since(begun))
            }
            _ => Admit::TimedOut,
        }
    }

    /// Admission without waiting: only when there is room and nobody waits (always while
    /// off).
    pub(crate) fn try_admit(&self) -> bool {
        let mut s = lock(&self.state);
        if s.limiter.is_none() || (s.admitted < s.limit && s.waiters.is_empty()) {
            s.admitted += 1;
            return true;
        }
        false
    }

    /// An admitted take ends: with the hold it measured, if it held a member. What the
    /// limiter did with the limit, when that hold ended a batch.
    pub(crate) fn release(&self, held: Option<Duration>) -> Option<LimitMove> {
        let mut wakers = Vec::new();
        let mut judged = None;
        {
            let mut s = lock(&self.state);
            debug_assert!(s.admitted > 0, "invariant 1: only an admitted take ends");
            let in_use = s.admitted;
            s.admitted = s.admitted.saturating_sub(1);
            if let (Some(held), Some(limiter)) = (held, s.limiter.as_mut()) {
                judged = limiter.sample(held, in_use);
                s.limit = limiter.limit();
            }
            s.let_through(&mut wakers);
            Self::check(&s);
        }
        wakers.into_iter().for_each(Waker::wake);
        judged
    }

    pub(crate) fn status(&self) -> Option<AdmissionStatus> {
        let s = lock(&self.state);
        let (latency, baseline, last_move) = s.limiter.as_ref()?.signal();
        Some(AdmissionStatus {
            limit: s.limit,
            admitted: s.admitted,
            latency,
            baseline,
            last_move,
        })
    }

    /// Sets the limit by hand (tests).
    #[cfg(all(test, not(pooler_loom)))]
    fn force_limit(&self, limit: usize) {
        let mut wakers = Vec::new();
        {
            let mut s = lock(&self.state);
            s.limit = limit;
            s.let_through(&mut wakers);
        }
        wakers.into_iter().for_each(Waker::wake);
    }
}

/// A take's place in the gate's queue while it waits.
struct Place<'a> {
    gate: &'a Admission,
    /// `None` once the take has collected its admission (or the close) or left.
    key: Option<WaitKey>,
    /// What it collected was the pool's close.
    closed: bool,
}

impl Place<'_> {
    fn look(&mut self, waker: &Waker) -> Poll<()> {
        let Some(key) = self.key else {
            return Poll::Ready(());
        };
        let mut s = lock(&self.gate.state);
        match s.waiters.look(key, waker) {
            Look::Waiting => Poll::Pending,
            Look::Served(outcome) => {
                self.key = None;
                self.closed = outcome.is_err();
                Poll::Ready(())
            }
        }
    }

    /// Leaves the queue: `true` if the take had been let through (it keeps its admission);
    /// one served the close sets `closed`.
    fn leave(&mut self) -> bool {
        let Some(key) = self.key.take() else {
            return false;
        };
        let mut s = lock(&self.gate.state);
        let left = s.waiters.leave(key);
        self.closed = matches!(left, Some(Err(())));
        let served = matches!(left, Some(Ok(())));
        if s.waiters.is_empty() {
            s.queued_since = None;
        }
        Admission::check(&s);
        served
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if self.leave() {
            // Let through, never seen: the admission goes to the next waiter.
            self.gate.release(None);
        }
    }
}

#[cfg(all(test, not(pooler_loom)))]
#[allow(clippy::disallowed_methods)] // plain tasks wait at the gate
mod tests {
    use std::sync::Arc;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A take waiting at the gate, as a task: what its wait came to.
    fn wait(gate: &Arc<Admission>) -> tokio::task::JoinHandle<Admit> {
        let gate = gate.clone();
        tokio::spawn(async move { gate.admit(Instant::now(), None).await })
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn lowering_the_limit_closes_nothing_and_admits_fewer() {
        let gate = Arc::new(Admission::new(AdmissionMode::Vegas, 4, None));
        for _ in 0..4 {
            assert!(gate.try_admit());
        }
        assert!(!gate.try_admit(), "four admitted: the limit");
        gate.force_limit(2);
        // Two of the four must come back before another is admitted.
        gate.release(None);
        assert!(!gate.try_admit());
        gate.release(None);
        assert!(!gate.try_admit());
        gate.release(None);
        assert!(gate.try_admit());
        assert!(!gate.try_admit());
        let status = gate.status().unwrap();
        assert_eq!((status.limit, status.admitted), (2, 2));
        // Turned off, a take waiting at the gate goes through.
        let waiting = wait(&gate);
        settle().await;
        assert!(!waiting.is_finished(), "over the limit, a take waits");
        gate.set(AdmissionMode::Off, 4, None);
        assert_eq!(waiting.await.unwrap(), Admit::Admitted);
        assert!(gate.status().is_none());
    }

    /// Three takes wait, 10 ms apart; one place frees at `after`: which one got it.
    async fn served_after(after: Duration) -> [bool; 3] {
        let gate = Arc::new(Admission::new(AdmissionMode::Vegas, 1, Some(50 * MS)));
        assert!(gate.try_admit());
        let mut waiting = Vec::new();
        for _ in 0..3 {
            waiting.push(wait(&gate));
            settle().await;
            tokio::time::advance(10 * MS).await;
        }
        tokio::time::advance(after.saturating_sub(30 * MS)).await;
        gate.release(None);
        settle().await;
        let served = waiting.iter().map(|w| w.is_finished());
        let served: Vec<bool> = served.collect();
        for w in waiting {
            w.abort();
        }
        [served[0], served[1], served[2]]
    }

    #[tokio::test(start_paused = true)]
    async fn a_queue_that_stays_is_served_newest_first() {
        // The queue began 30 ms ago, under the 50 ms target: the oldest goes first.
        assert_eq!(served_after(30 * MS).await, [true, false, false]);
        // It has stayed 60 ms: the newest goes first.
        assert_eq!(served_after(60 * MS).await, [false, false, true]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_take_waiting_twice_the_target_is_refused_as_shed() {
        let gate = Arc::new(Admission::new(AdmissionMode::Vegas, 1, Some(50 * MS)));
        assert!(gate.try_admit());
        let waiting = wait(&gate);
        tokio::time::sleep(99 * MS).await;
        assert!(!waiting.is_finished());
        tokio::time::sleep(2 * MS).await;
        assert_eq!(waiting.await.unwrap(), Admit::Stale(50 * MS, 100 * MS));
        // Its place is gone: the next take is let through when the admitted one ends.
        gate.release(None);
        assert!(gate.try_admit());
        // With no target, a take waits out its own deadline.
        let gate = Admission::new(AdmissionMode::Vegas, 1, None);
        assert!(gate.try_admit());
        let now = Instant::now();
        let at = gate.admit(now, Some(now + 300 * MS)).await;
        assert_eq!((at, now.elapsed()), (Admit::TimedOut, 300 * MS));
    }

    #[tokio::test(start_paused = true)]
    async fn a_take_dropped_after_it_was_let_through_hands_its_place_on() {
        let gate = Arc::new(Admission::new(AdmissionMode::Vegas, 1, None));
        assert!(gate.try_admit());
        let first = wait(&gate);
        settle().await;
        let second = wait(&gate);
        settle().await;
        // Let through and dropped in the same breath, before it ran again.
        gate.release(None);
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        let second = tokio::time::timeout(Duration::from_secs(1), second).await;
        assert_eq!(
            second.expect("the place was handed on").unwrap(),
            Admit::Admitted
        );
        assert_eq!(gate.status().unwrap().admitted, 1);
    }
}
