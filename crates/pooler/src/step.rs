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
use crate::metrics::{Gauges, Reason};
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

    /// The counts the gauges show.
    pub(crate) fn gauges(&self) -> Gauges {
        let view = self.hot.view();
        Gauges {
            in_use: view.in_use,
            free: view.free,
            starting: self.cold.engine.starting(),
            stopping: self.cold.engine.stopping(),
            queued: view.queued,
        }
    }

    /// Starts whatever the cold engine says the pool needs now.
    pub(crate) fn refill(&mut self) {
        let starts = self.cold.engine.refill(self.now, self.hot.view());
        self.effects.starts.push(starts);
    }

    /// A member in use (or claimed for a check) leaves use and is stopped: dropped in place if
    /// the close has finished, otherwise made `Stopping` and, if it is `Replaced` and the pool
    /// open, replaced (a lifetime's end owes nothing when its successor started ahead).
    pub(crate) fn stop_in_use(&mut self, held: Held<M::Member>, why: Why) {
        let stamp = self.stamp();
        let woken = self.hot.release(stamp);
        self.effects.wake.extend(woken);
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
        if let Why::Replaced { reason, .. } = why
            && !self.cold.engine.is_closed()
        {
            match reason {
                Reason::MaxLifetime => self.cold.engine.owe_after_lifetime(),
                _ => self.cold.engine.owe_replacement(),
            }
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

#[cfg(all(test, not(pooler_loom)))]
mod tests {
    use std::sync::Arc;

    use crate::cancel::Token;

    use super::*;
    use crate::cold::Limits;
    use crate::hot::wait;
    use crate::manager::MemberContext;

    struct Numbers;

    impl Manager for Numbers {
        type Member = u64;
        type Error = std::io::Error;
        async fn start(&self, ctx: &MemberContext) -> Result<u64, Self::Error> {
            Ok(ctx.member_id())
        }
    }

    type H = Hot<Held<u64>, TakeError>;

    /// A pool's two locks and clock, with `live` members started and free (no runtime).
    fn pool(init: usize, max: usize, live: usize) -> (ColdLock, H, Clock) {
        let config = PoolConfig::new("effects", init, max);
        let cold = ColdLock::new(ColdState {
            engine: Cold::new(Limits::of(&config)),
            config: config.clone(),
            shut: false,
        });
        let hot = Hot::new(config.member_order, config.queue_max, false);
        let clock = Clock::new();
        let ((), effects) = cold.step::<Numbers, _>(&hot, &clock, |s| {
            let starts = s.cold.engine.grow(live, s.now, s.hot.view());
            for (key, id) in starts.slots {
                let meta = Arc::new(Meta::new(key, id, Token::new(), s.stamp()));
                assert!(s.cold.engine.started(key, s.now, None, meta.clone()));
                assert!(s.hot.admit(Held { value: id, meta }).is_ok());
            }
        });
        assert!(effects.is_empty());
        (cold, hot, clock)
    }

    fn take(hot: &H) -> Held<u64> {
        match hot.take(wait::No, true, false) {
            crate::hot::Found::Member(held, _) => held,
            other => panic!("no member: {other:?}"),
        }
    }

    #[test]
    fn a_member_back_after_the_close_finished_is_dropped_in_place_and_its_slot_ends() {
        let (cold, hot, clock) = pool(1, 1, 1);
        let held = take(&hot);
        let token = held.meta.token.clone();
        let ((), effects) = cold.step::<Numbers, _>(&hot, &clock, |s| {
            s.cold.engine.close();
            s.cold.shut = true;
            s.stop_in_use(held, Why::Quiet);
            assert_eq!((s.cold.engine.starting(), s.cold.engine.stopping()), (0, 0));
            assert_eq!(s.hot.view().live(), 0);
        });
        assert_eq!(effects.dropped.len(), 1, "dropped where it is");
        assert!(effects.stops.is_empty() && effects.starts.iter().all(Starts::is_empty));
        assert!(effects.drained, "a close waiting on the count is woken");
        assert!(
            !token.is_cancelled(),
            "the driver tasks end when the effect is applied"
        );
    }

    #[test]
    fn a_replaced_member_holds_its_slot_until_its_stop_ends_then_its_replacement_starts() {
        let (cold, hot, clock) = pool(1, 1, 1);
        let held = take(&hot);
        let why = Why::Replaced {
            reason: Reason::Failed,
            after_use: true,
        };
        let ((), effects) = cold.step::<Numbers, _>(&hot, &clock, |s| s.stop_in_use(held, why));
        assert_eq!(effects.stops.len(), 1);
        assert_eq!(effects.stops[0].1, why);
        assert!(
            effects.starts.iter().all(Starts::is_empty),
            "no room while the stop runs"
        );
        let key = effects.stops[0].0.meta.key;
        let ((), effects) = cold.step::<Numbers, _>(&hot, &clock, |s| {
            s.cold.engine.stop_done(key);
            s.refill();
        });
        let started: usize = effects.starts.iter().map(|s| s.slots.len()).sum();
        assert_eq!(
            started, 1,
            "the owed replacement starts once the slot is free"
        );
    }

    #[test]
    fn retiring_free_members_takes_the_longest_idle_first() {
        let (cold, hot, clock) = pool(0, 4, 3);
        let (n, effects) =
            cold.step::<Numbers, _>(&hot, &clock, |s| s.retire_free(2, Reason::MaxAge, |_| true));
        assert_eq!(n, 2);
        let ids: Vec<u64> = effects.stops.iter().map(|(h, _)| h.value).collect();
        assert_eq!(ids, [1, 2], "idle longest first");
        assert!(
            effects
                .stops
                .iter()
                .all(|(_, why)| *why == Why::Retired(Reason::MaxAge))
        );
        assert_eq!(hot.lock().view().free, 1);
    }

    #[test]
    fn every_step_leaves_the_hot_core_saturated_as_the_cold_engine_says() {
        let (cold, hot, clock) = pool(2, 2, 2);
        let (_a, _b) = (take(&hot), take(&hot));
        // Nothing free, no room: a take is refused by the hot core alone.
        assert!(matches!(
            hot.take(wait::No, true, false),
            crate::hot::Found::Full
        ));
        let ((), _) = cold.step::<Numbers, _>(&hot, &clock, |s| {
            let limits = Limits {
                max_count: 3,
                ..s.cold.engine.limits()
            };
            let view = s.hot.view();
            s.cold.engine.set_limits(limits, view);
        });
        assert!(matches!(
            hot.take(wait::No, true, false),
            crate::hot::Found::Cold
        ));
    }
}
