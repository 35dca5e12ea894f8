//! The one way through the two locks (docs/design.md, "The engine").
//!
//! Every decision that changes what exists — a take that may start members, a start's end, a
//! death, a stop, a cull, an expiry, a close, a reconfigure — runs as one [`Step`]: the cold
//! lock, then the hot lock inside it, a closure that changes the state and writes down what
//! must follow as [`Effects`] (plain values: wakers, starts, stops, signals), the hot core's
//! copy of the saturation brought up to date, both locks released, and then the effects
//! carried out by the pool's `apply` — the only place that wakes waiters or spawns tasks
//! after a change. Nothing else takes the cold lock and the hot lock together.
//!
//! # Invariants
//!
//! 1. The cold lock is taken before the hot lock, and both only here.
//! 2. Nothing runs user code, drops something that could return a member, wakes a waker or
//!    spawns a task while a step holds the locks: those are effects, applied after.
//! 3. After every step the hot core's `saturated` equals the cold engine's verdict.

use std::task::Waker;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::cold::{Cold, Starts};
use crate::config::PoolConfig;
use crate::error::TakeError;
use crate::held::{Held, Meta};
use crate::hot::{Hot, Locked};
use crate::manager::Manager;
use crate::metrics::Reason;
use crate::sync::{Mutex, MutexGuard, lock};

/// What the cold lock guards.
pub(crate) struct ColdState {
    pub(crate) engine: Cold<std::sync::Arc<Meta>>,
    pub(crate) config: PoolConfig,
    /// The close has finished: members returned from now on are dropped in place.
    pub(crate) shut: bool,
}

/// The cold lock.
pub(crate) struct ColdLock(Mutex<ColdState>);

impl ColdLock {
    pub(crate) fn new(state: ColdState) -> Self {
        ColdLock(Mutex::new(state))
    }

    /// The cold lock alone, to read the config or the engine's counts.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&ColdState) -> R) -> R {
        f(&lock(&self.0))
    }

    /// Runs one decision with both locks held: the cold lock, then `hot`'s; brings the hot
    /// core's copy of the saturation up to date and releases both. The effects are the
    /// caller's to apply.
    #[inline]
    pub(crate) fn step<M: Manager, R>(
        &self,
        hot: &Hot<Held<M::Member>, TakeError>,
        clock: &Clock,
        f: impl FnOnce(&mut Step<'_, M>) -> R,
    ) -> (R, Effects<M::Member>) {
        let now = clock.now();
        let mut step = Step {
            cold: lock(&self.0),
            hot: hot.lock(),
            now,
            effects: Effects::default(),
            clock,
        };
        let out = f(&mut step);
        let Step {
            cold,
            mut hot,
            effects,
            ..
        } = step;
        let saturated = cold.engine.saturated(hot.view());
        hot.set_saturated(saturated);
        drop(hot);
        drop(cold);
        (out, effects)
    }
}

/// Why a member is stopped, for its log line and its removal counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// A free member retired (culled, expired, died while free, or beyond a lowered cap).
    Retired(Reason),
    /// A member in use (or claimed for a check) replaced.
    Replaced { reason: Reason, after_use: bool },
    /// No removal to count: the pool is closing, or a start produced a member it could not
    /// keep.
    Quiet,
}

/// What a step leaves to do once both locks are released.
#[must_use = "effects are carried out by the pool's apply"]
pub(crate) struct Effects<T> {
    /// Waiters served (a member or an error) to wake.
    pub(crate) wake: Vec<Waker>,
    /// Starts decided, to spawn.
    pub(crate) starts: Vec<Starts>,
    /// Held by each start spawned (the pool's first starts, so `Pool::start` can wait).
    pub(crate) done: Option<mpsc::Sender<()>>,
    /// Members made `Stopping`, to stop in their own tasks.
    pub(crate) stops: Vec<(Held<T>, Why)>,
    /// Members to drop where they are, their driver tasks ended (the close has finished or
    /// the runtime is gone: no stop can run).
    pub(crate) dropped: Vec<Held<T>>,
    /// A count a close waits on may have changed.
    pub(crate) drained: bool,
    /// The soonest expiry may have moved earlier.
    pub(crate) expiry: bool,
}

impl<T> Default for Effects<T> {
    fn default() -> Self {
        Effects {
            wake: Vec::new(),
            starts: Vec::new(),
            done: None,
            stops: Vec::new(),
            dropped: Vec::new(),
            drained: false,
            expiry: false,
        }
    }
}

impl<T> Effects<T> {
    /// Whether there is nothing to do.
    pub(crate) fn is_empty(&self) -> bool {
        self.wake.is_empty()
            && self.starts.iter().all(Starts::is_empty)
            && self.stops.is_empty()
            && self.dropped.is_empty()
            && !self.drained
            && !self.expiry
    }
}

/// Both locks, held for one decision, and the effects it leaves.
pub(crate) struct Step<'a, M: Manager> {
    pub(crate) cold: MutexGuard<'a, ColdState>,
    pub(crate) hot: Locked<'a, Held<M::Member>, TakeError>,
    /// The exact time, read once before the locks.
    pub(crate) now: Instant,
    pub(crate) effects: Effects<M::Member>,
    clock: &'a Clock,
}

impl<M: Manager> Step<'_, M> {
    /// `now` as a clock stamp.
    pub(crate) fn stamp(&self) -> u64 {
        self.clock.stamp(self.now)
    }

    /// An instant as a clock stamp.
    pub(crate) fn stamp_of(&self, at: Instant) -> u64 {
        self.clock.stamp(at)
    }

    /// Starts whatever the cold engine says the pool needs now.
    pub(crate) fn refill(&mut self) {
        let starts = self.cold.engine.refill(self.now, self.hot.view());
        self.effects.starts.push(starts);
    }

    /// A member in use (or claimed for a check) leaves use and is stopped: dropped in place if
    /// the close has finished, otherwise made `Stopping` and, with `owe` and the pool open,
    /// replaced.
    pub(crate) fn stop_in_use(&mut self, held: Held<M::Member>, why: Why, owe: bool) {
        let stamp = self.stamp();
        self.hot.release(stamp);
        if self.cold.shut {
            // No stop task may run after the close: the slot ends here.
            self.cold.engine.begin_stop(held.meta.key);
            self.cold.engine.stop_done(held.meta.key);
            self.effects.dropped.push(held);
            self.effects.drained = true;
            return;
        }
        held.meta.set_since(stamp);
        self.cold.engine.begin_stop(held.meta.key);
        if owe && !self.cold.engine.is_closed() {
            self.cold.engine.owe_replacement();
            self.refill();
        }
        self.effects.drained = true;
        self.effects.stops.push((held, why));
    }

    /// Claims up to `n` free members `pick` chooses, oldest idle first, makes them `Stopping`
    /// and stops them; says how many.
    pub(crate) fn retire_free(
        &mut self,
        n: usize,
        reason: Reason,
        pick: impl Fn(&Held<M::Member>) -> bool,
    ) -> usize {
        let stamp = self.clock.coarse();
        let mut claimed = 0;
        while claimed < n {
            let Some(held) = self.hot.claim(&pick) else {
                break;
            };
            held.meta.set_since(stamp);
            self.cold.engine.begin_stop(held.meta.key);
            self.effects.stops.push((held, Why::Retired(reason)));
            claimed += 1;
        }
        claimed
    }

    /// One cull's count (docs/design.md, "Culling"): free members beyond the demand window's
    /// peak and `init_count`, retired; says how many.
    pub(crate) fn cull(&mut self) -> usize {
        let (peak, until) = self.hot.take_peak();
        let view = self.hot.view();
        let seen = match until {
            Some(stamp) if view.in_use < peak => self.clock.instant(stamp),
            _ => self.now,
        };
        let max_age = self.cold.config.max_age;
        let n = self.cold.engine.cull(self.now, max_age, peak, seen, view);
        self.retire_free(n, Reason::MaxAge, |_| true)
    }
}
