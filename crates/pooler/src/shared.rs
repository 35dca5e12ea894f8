//! The state behind a [`Pool`](crate::Pool) handle and the glue that turns the hot core's and
//! the cold engine's decisions into hand-offs and tasks.
//!
//! Two locks: the hot core's (the free members and the queue) and the cold engine's
//! (everything else). A take that finds a member and a return that finds no member needing
//! care take the hot lock alone. Everything that changes what exists — starts, stops,
//! deaths, culls, expiries, closes, reconfigures — takes the cold lock, then the hot lock
//! inside it; never the other way round. User code (the manager's methods) never runs under
//! either, nothing that could return a member is dropped under either, and no task is
//! spawned under either (a task dropped inside its spawn takes them in its guard).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::cold::{Cold, Death, Empty, Key, Limits, Starts, Status};
use crate::config::PoolConfig;
use crate::error::{StartError, TakeError};
use crate::health::{Hook, vet};
use crate::held::{Held, Meta};
use crate::hot::{Found, Hot, Refused, Wait};
use crate::leak::{Caller, Leaks};
use crate::lifecycle::{Lives, Slots, StartSlot, StopSlot, run_start, run_stop};
use crate::lifetime;
use crate::manager::{self, Deaths, Manager, Returned};
use crate::member::{Fate, Home, Member, Origin};
use crate::metrics::{Gauges, PoolMetrics, Reason};
use crate::supervisor::{RuntimeGone, Supervisor};
use crate::sync::{Mutex, MutexGuard, lock};
use crate::waiters::WaitKey;

/// The pool's hot core, with the members it keeps.
pub(crate) type HotCore<M> = Hot<Held<<M as Manager>::Member>, TakeError>;

/// What the cold lock guards.
pub(crate) struct ColdState {
    pub(crate) engine: Cold<Arc<Meta>>,
    pub(crate) config: PoolConfig,
    /// The close has finished: members returned from now on are dropped in place.
    shut: bool,
    /// The runtime the pool was started on has shut down: the pool is closed, and says why.
    runtime_gone: bool,
}

/// Which features make a take or a return do more than move a member: read on every take
/// and return without a lock, updated by `reconfigure`.
#[derive(Debug)]
pub(crate) struct Features {
    /// Bits of [`Features::LIFETIMES`], [`Features::LEAKS`], [`Features::IDLE`],
    /// [`Features::GROW`].
    flags: AtomicU64,
    /// `idle_check_threshold` in nanoseconds; `u64::MAX`: none.
    idle_check: AtomicU64,
    /// The wait histogram reaches a recorder.
    waits_live: bool,
}

impl Features {
    /// `max_lifetime` is set: takes and returns check expiries against an exact clock.
    const LIFETIMES: u64 = 1;
    /// `leak_detection_threshold` is set: takes and returns keep leak records.
    const LEAKS: u64 = 2;
    /// `idle_check_threshold` is set.
    const IDLE: u64 = 8;
    /// `auto_grow_threshold` is set.
    const GROW: u64 = 16;
    /// Takes served at once are counted as waits of zero (the wait histogram reaches a
    /// recorder and no idle check makes a take wait). Not a feature the fast path minds.
    const ZERO_WAITS: u64 = 32;
    /// The bits the fast path minds.
    const SLOW: u64 = Self::LIFETIMES | Self::LEAKS | Self::IDLE | Self::GROW;

    fn new(config: &PoolConfig, waits_live: bool) -> Self {
        let f = Features {
            flags: AtomicU64::new(0),
            idle_check: AtomicU64::new(u64::MAX),
            waits_live,
        };
        f.set(config);
        f
    }

    fn set(&self, config: &PoolConfig) {
        let mut flags = 0;
        if self.waits_live && config.idle_check_threshold.is_none() {
            flags |= Self::ZERO_WAITS;
        }
        if config.max_lifetime.is_some() {
            flags |= Self::LIFETIMES;
        }
        if config.leak_detection_threshold.is_some() {
            flags |= Self::LEAKS;
        }
        if config.idle_check_threshold.is_some() {
            flags |= Self::IDLE;
        }
        if config.auto_grow_threshold.is_some() {
            flags |= Self::GROW;
        }
        let idle = config.idle_check_threshold.map_or(u64::MAX, |d| {
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1)
        });
        self.idle_check.store(idle, Relaxed);
        self.flags.store(flags, Relaxed);
    }

    #[inline]
    fn flags(&self) -> u64 {
        self.flags.load(Relaxed)
    }
}

/// When a take stops waiting, for the fail-fast rule (docs/design.md, "Failing starts").
#[derive(Debug, Clone, Copy)]
pub(crate) enum Deadline {
    /// This long after the attempt.
    In(Duration),
    /// At this instant (a later attempt of the same take).
    At(Instant),
    /// Never (a take with no timeout).
    Never,
}

impl Deadline {
    fn at(self, now: Instant) -> Instant {
        match self {
            Deadline::In(d) => now + d,
            Deadline::At(at) => at,
            Deadline::Never => now + crate::time::MAX_TIME,
        }
    }
}

/// One take attempt's outcome.
pub(crate) enum Attempt<M: Manager> {
    /// A member, ready for its taker.
    Member(Member<M>),
    /// A member idle past `idle_check_threshold`: check it first.
    Check(Member<M>),
    /// A place in the queue.
    Queued(WaitKey),
    Failed(TakeError),
}

pub(crate) struct Shared<M: Manager> {
    pub(crate) name: Arc<str>,
    pub(crate) manager: M,
    pub(crate) hot: HotCore<M>,
    cold: Mutex<ColdState>,
    features: Features,
    pub(crate) clock: Clock,
    leaks: Leaks,
    pub(crate) supervisor: Supervisor,
    pub(crate) metrics: PoolMetrics,
    /// Woken whenever a closing pool's counts change.
    drained: Notify,
    /// Set to the instant of each `reconfigure`, so timers re-read the config and re-arm
    /// from that instant.
    pub(crate) reconfigured: watch::Sender<Instant>,
    /// Wakes the lifetime timer when an expiry may have moved earlier.
    pub(crate) lifetime_poke: Notify,
    this: Weak<Shared<M>>,
}

pub(crate) fn limits(config: &PoolConfig) -> Limits {
    Limits {
        init_count: config.init_count,
        max_count: config.max_count,
        queue_max: config.queue_max,
        order: config.member_order,
        auto_grow_threshold: config.auto_grow_threshold,
        backoff_jitter: config.backoff_jitter,
    }
}

impl<M: Manager> Shared<M> {
    pub(crate) fn new(config: PoolConfig, manager: M, supervisor: Supervisor) -> Arc<Self> {
        let metrics = PoolMetrics::new(&config.name);
        metrics.limits(config.init_count, config.max_count);
        let features = Features::new(&config, metrics.wait_live());
        Arc::new_cyclic(|this| Shared {
            name: config.name.as_str().into(),
            hot: Hot::new(config.member_order, config.queue_max, metrics.use_live()),
            cold: Mutex::new(ColdState {
                engine: Cold::new(limits(&config)),
                config,
                shut: false,
                runtime_gone: false,
            }),
            features,
            clock: Clock::new(),
            leaks: Leaks::default(),
            metrics,
            manager,
            supervisor,
            drained: Notify::new(),
            reconfigured: watch::Sender::new(Instant::now()),
            lifetime_poke: Notify::new(),
            this: this.clone(),
        })
    }

    /// The cold lock.
    pub(crate) fn cold(&self) -> MutexGuard<'_, ColdState> {
        lock(&self.cold)
    }

    pub(crate) fn arc(&self) -> Arc<Self> {
        self.this
            .upgrade()
            .expect("a method of a live pool runs behind an Arc")
    }

    fn home(self: &Arc<Self>) -> Arc<dyn Home<M::Member>> {
        self.clone()
    }

    /// The hot core's copy of whether the pool is saturated, brought up to date after a
    /// change of the cold engine (both locks held).
    fn sync(cold: &ColdState, hot: &mut crate::hot::Locked<'_, Held<M::Member>, TakeError>) {
        let saturated = cold.engine.saturated(hot.view());
        hot.set_saturated(saturated);
    }

    // ---- take -------------------------------------------------------------------------

    /// One take attempt. `counted`: a new attempt, not a retry within one take.
    #[inline]
    pub(crate) fn attempt(
        self: &Arc<Self>,
        caller: Caller,
        wait: Wait,
        deadline: Deadline,
        counted: bool,
    ) -> Attempt<M> {
        let zero_wait = wait == Wait::Queue && self.features.flags() & Features::ZERO_WAITS != 0;
        match self.hot.take(wait, counted, zero_wait) {
            Found::Member(held, timed) => self.taken(held, caller, wait, deadline, false, timed),
            found => self.found(found, caller, wait, deadline),
        }
    }

    /// A new take attempt that may wait: the member if the fast path found one, else the
    /// attempt to go on with.
    #[inline]
    pub(crate) fn first_attempt(
        self: &Arc<Self>,
        caller: Caller,
        timeout: Option<Duration>,
    ) -> Result<Member<M>, Attempt<M>> {
        let deadline = || timeout.map_or(Deadline::Never, Deadline::In);
        let zero_wait = self.features.flags() & Features::ZERO_WAITS != 0;
        match self.hot.take(Wait::Queue, true, zero_wait) {
            Found::Member(held, timed) => match self.fast_member(held, false, timed) {
                Ok(member) => Ok(member),
                Err(held) => Err(self.taken_with_features(
                    held,
                    caller,
                    Wait::Queue,
                    deadline(),
                    false,
                    timed,
                )),
            },
            found => Err(self.found(found, caller, Wait::Queue, deadline())),
        }
    }

    /// What a take that found no member does next.
    fn found(
        self: &Arc<Self>,
        found: Found<Held<M::Member>>,
        caller: Caller,
        wait: Wait,
        deadline: Deadline,
    ) -> Attempt<M> {
        match found {
            Found::Member(held, timed) => self.taken(held, caller, wait, deadline, false, timed),
            Found::Queued(key) => Attempt::Queued(key),
            Found::Full => Attempt::Failed(self.refused(Empty::AtCapacity, None)),
            Found::QueueFull => Attempt::Failed(self.queue_full()),
            Found::Closed => Attempt::Failed(self.closed_error()),
            Found::Cold => self.attempt_cold(caller, wait, deadline),
        }
    }

    /// A member out of the hot core, for its taker. `vetted`: it was handed over by a return
    /// or a start that already asked `is_broken`. `timed`: the hold is timed for the use
    /// histogram, standing for this many (0: not timed).
    #[inline]
    pub(crate) fn taken(
        self: &Arc<Self>,
        held: Held<M::Member>,
        caller: Caller,
        wait: Wait,
        deadline: Deadline,
        vetted: bool,
        timed: u32,
    ) -> Attempt<M> {
        match self.fast_member(held, vetted, timed) {
            Ok(member) => Attempt::Member(member),
            Err(held) => self.taken_with_features(held, caller, wait, deadline, vetted, timed),
        }
    }

    /// A member handed over through the queue: its hold is timed for the use histogram
    /// (queued takes are slow anyway, and each stands for itself).
    pub(crate) fn collected(
        self: &Arc<Self>,
        held: Held<M::Member>,
        caller: Caller,
        deadline: Deadline,
    ) -> Attempt<M> {
        let timed = u32::from(self.metrics.use_live());
        self.taken(held, caller, Wait::Queue, deadline, true, timed)
    }

    /// The member for its taker when no feature needs a look at it, its hold is not timed,
    /// and it is fit; otherwise it comes back for
    /// [`taken_with_features`](Self::taken_with_features).
    #[inline]
    pub(crate) fn fast_member(
        self: &Arc<Self>,
        held: Held<M::Member>,
        vetted: bool,
        timed: u32,
    ) -> Result<Member<M>, Held<M::Member>> {
        // A member's death takes it off the free list, but a death that races its return can
        // still land it there (the return checked before the death marked it): look again.
        // One handed over through the queue was asked `is_broken` when it was handed over.
        if self.features.flags() & Features::SLOW | u64::from(timed) == 0
            && !held.meta.is_dead()
            && (vetted || !manager::is_broken(&self.manager, &held.value, &self.name))
        {
            held.meta.set_since(self.clock.coarse());
            Ok(Member::new(self.home(), held, Origin::Taken, 0))
        } else {
            Err(held)
        }
    }

    /// A take that never waits: the fast path inline, the rest out of line.
    #[inline]
    pub(crate) fn take_at_once(self: &Arc<Self>, caller: Caller) -> Result<Member<M>, TakeError> {
        match self.hot.take(Wait::No, true, false) {
            Found::Member(held, timed) => match self.fast_member(held, false, timed) {
                Ok(member) => Ok(member),
                Err(held) => self.finish_at_once(self.taken_with_features(
                    held,
                    caller,
                    Wait::No,
                    Deadline::In(Duration::ZERO),
                    false,
                    timed,
                )),
            },
            Found::Full => Err(self.at_capacity()),
            found => self.finish_at_once(self.found(
                found,
                caller,
                Wait::No,
                Deadline::In(Duration::ZERO),
            )),
        }
    }

    #[cold]
    fn finish_at_once(&self, attempt: Attempt<M>) -> Result<Member<M>, TakeError> {
        match attempt {
            Attempt::Member(member) | Attempt::Check(member) => Ok(member),
            Attempt::Failed(e) => Err(e),
            Attempt::Queued(_) => unreachable!("a take that never waits never queues"),
        }
    }

    /// [`taken`](Self::taken) when a feature needs more than the fast path does.
    #[cold]
    fn taken_with_features(
        self: &Arc<Self>,
        held: Held<M::Member>,
        caller: Caller,
        wait: Wait,
        deadline: Deadline,
        vetted: bool,
        timed: u32,
    ) -> Attempt<M> {
        let flags = self.features.flags();
        let exact =
            timed > 0 || flags & (Features::LIFETIMES | Features::LEAKS | Features::IDLE) != 0;
        let now = exact.then(|| self.clock.now());
        let stamp = now.map_or_else(|| self.clock.coarse(), |n| self.clock.stamp(n));
        if held.meta.is_dead()
            || (!vetted && manager::is_broken(&self.manager, &held.value, &self.name))
        {
            tracing::debug!(pool = %self.name, member = held.meta.id, "member found broken or dead at take");
            // Found unusable before anyone used it: a free member's removal.
            self.replace(held, Reason::Crashed, false);
            return self.attempt(caller, wait, deadline, false);
        }
        if flags & Features::LIFETIMES != 0 && held.meta.expired(stamp) {
            // The lifetime timer was late: retire it here and take again.
            self.replace(held, Reason::MaxLifetime, false);
            return self.attempt(caller, wait, deadline, false);
        }
        if flags & Features::GROW != 0 {
            self.auto_grow();
        }
        let idle_for = Duration::from_nanos(stamp.saturating_sub(held.meta.since()));
        let check = wait == Wait::Queue
            && idle_for.as_nanos() >= u128::from(self.features.idle_check.load(Relaxed));
        if let (Some(now), true) = (now, flags & Features::LEAKS != 0) {
            self.leaks.taken(held.meta.id, now, caller);
        }
        held.meta.set_since(stamp);
        let member = Member::new(self.home(), held, Origin::Taken, timed);
        if check {
            Attempt::Check(member)
        } else {
            Attempt::Member(member)
        }
    }

    /// A take that found nothing free while a start could follow: the cold engine decides.
    #[cold]
    fn attempt_cold(
        self: &Arc<Self>,
        caller: Caller,
        wait: Wait,
        deadline: Deadline,
    ) -> Attempt<M> {
        let now = self.clock.now();
        let deadline = match wait {
            Wait::No => now,
            Wait::Queue => deadline.at(now),
        };
        let mut cold = self.cold();
        let mut hot = self.hot.lock();
        // A member may have come back meanwhile.
        if let Found::Member(held, timed) = hot.take(Wait::No, false, false) {
            drop(hot);
            drop(cold);
            return self.taken(held, caller, wait, Deadline::At(deadline), false, timed);
        }
        if hot.is_closed() {
            drop(hot);
            drop(cold);
            return Attempt::Failed(self.closed_error());
        }
        let (why, starts) = cold.engine.take(now, deadline, hot.view());
        let last_error = cold.engine.last_error().cloned();
        let outcome = match (why, wait) {
            (Empty::Closed | Empty::Unavailable, _) | (_, Wait::No) => None,
            (_, Wait::Queue) => Some(hot.enqueue()),
        };
        Self::sync(&cold, &mut hot);
        drop(hot);
        drop(cold);
        self.spawn_starts(starts, None);
        match outcome {
            None => Attempt::Failed(self.refused(why, last_error)),
            Some(Ok(key)) => Attempt::Queued(key),
            Some(Err(Refused::QueueFull)) => Attempt::Failed(self.queue_full()),
            Some(Err(Refused::NoQueue)) => Attempt::Failed(self.refused(why, last_error)),
            Some(Err(Refused::Closed)) => Attempt::Failed(self.closed_error()),
        }
    }

    /// The error of a take that found the pool full, counted (the common refusal, kept small).
    fn at_capacity(&self) -> TakeError {
        self.metrics.at_capacity();
        TakeError::AtCapacity {
            pool: self.name.clone(),
        }
    }

    /// The error of a take that found no member, counted.
    fn refused(&self, why: Empty, last_error: Option<StartError>) -> TakeError {
        let pool = self.name.clone();
        let error = match why {
            Empty::AtCapacity => TakeError::AtCapacity { pool },
            Empty::AllInUse => TakeError::AllInUse { pool },
            Empty::Closed => return self.closed_error(),
            Empty::Unavailable => match last_error {
                Some(source) => TakeError::Unavailable { pool, source },
                None => TakeError::AllInUse { pool },
            },
        };
        self.metrics.no_member(&error);
        error
    }

    fn queue_full(&self) -> TakeError {
        let queue_max = self.cold().engine.limits().queue_max;
        tracing::debug!(pool = %self.name, queue_max, "queue full; take refused");
        let error = TakeError::QueueFull {
            pool: self.name.clone(),
            queue_max,
        };
        self.metrics.no_member(&error);
        error
    }

    /// The error a take gets from a closed pool.
    pub(crate) fn closed_error(&self) -> TakeError {
        let pool = self.name.clone();
        if self.cold().runtime_gone {
            TakeError::RuntimeGone { pool }
        } else {
            TakeError::Closed { pool }
        }
    }

    /// The error of a take that waited `waited` in vain, counted.
    pub(crate) fn timed_out(&self, waited: Duration) -> TakeError {
        let last_start_error = self.cold().engine.last_error().cloned();
        let error = TakeError::Timeout {
            pool: self.name.clone(),
            waited,
            last_start_error,
        };
        self.metrics.no_member(&error);
        error
    }

    /// Starts more members if `auto_grow_threshold` says so.
    fn auto_grow(&self) {
        let now = self.clock.now();
        let mut cold = self.cold();
        let mut hot = self.hot.lock();
        let starts = cold.engine.auto_grow(now, hot.view());
        Self::sync(&cold, &mut hot);
        drop(hot);
        drop(cold);
        self.spawn_starts(starts, None);
    }

    /// A member handed to a queued taker that gave up before collecting it: it goes on to
    /// the next waiter or the free list, as a return in good order would.
    pub(crate) fn regive(&self, held: Held<M::Member>) {
        if let Err(held) = self.hot.give(held, self.clock.coarse()) {
            self.stop_after_close(held);
        }
    }

    /// Runs `hook` on a member the pool holds, bounded by `member_start_timeout` (and by
    /// `deadline`).
    pub(crate) async fn vet(
        &self,
        member: Member<M>,
        hook: Hook,
        deadline: Option<Instant>,
    ) -> Option<Member<M>> {
        let (limit, _) = self.timeouts();
        vet(&self.manager, limit, member, hook, deadline).await
    }

    // ---- return -----------------------------------------------------------------------

    /// [`Home::give_back`], when a feature or the member's state needs more than the fast
    /// path does.
    #[cold]
    fn give_back_slow(
        &self,
        held: Held<M::Member>,
        fate: Fate,
        origin: Origin,
        returned: Returned,
        timed: u32,
    ) {
        let now = self.clock.now();
        let stamp = self.clock.stamp(now);
        if timed > 0 && origin == Origin::Taken {
            // A timed hold was stamped exactly when it was taken.
            self.metrics
                .used(self.clock.instant(held.meta.since()), now, timed);
        }
        let leaked = if self.features.flags() & Features::LEAKS != 0 && origin == Origin::Taken {
            self.leaks.returned(held.meta.id)
        } else {
            None
        };
        let reason = match fate {
            Fate::Failed => Some(Reason::Failed),
            Fate::Crashed => Some(Reason::Crashed),
            Fate::Ok if returned == Returned::Broken || held.meta.is_dead() => {
                Some(Reason::Crashed)
            }
            Fate::Ok if held.meta.expired(stamp) => Some(Reason::MaxLifetime),
            Fate::Ok => None,
        };
        if let Some(taken_at) = leaked {
            tracing::warn!(
                pool = %self.name,
                member = held.meta.id,
                held_for = %humantime::format_duration(now.saturating_duration_since(taken_at)),
                "member reported as a possible leak came back"
            );
        }
        match reason {
            Some(reason) => self.replace(held, reason, origin != Origin::Checked),
            None if returned == Returned::Recycle => self.spawn_recycle(held),
            None => {
                held.meta.set_since(stamp);
                if let Err(held) = self.hot.give(held, stamp) {
                    self.stop_after_close(held);
                }
            }
        }
    }

    /// A member in use comes back to a closed pool: it is stopped (or dropped in place once
    /// the close has finished).
    fn stop_after_close(&self, held: Held<M::Member>) {
        let mut cold = self.cold();
        if cold.shut {
            return self.drop_after_shut(cold, held);
        }
        self.hot.lock().release(self.clock.coarse());
        held.meta.set_since(self.clock.coarse());
        cold.engine.begin_stop(held.meta.key);
        drop(cold);
        self.notify_if_closing();
        self.spawn_stop(held);
    }

    /// A member in use comes back after the close has finished (an immediate close does not
    /// wait for it): it leaves the in-use count, so a graceful close still waiting for it
    /// returns, and is dropped in place, its driver tasks ended (no task may outlive the close).
    fn drop_after_shut(&self, cold: MutexGuard<'_, ColdState>, held: Held<M::Member>) {
        self.hot.lock().release(self.clock.coarse());
        drop(cold);
        held.meta.token.cancel();
        self.notify_if_closing();
    }

    /// Recycles a returned member in a supervised task; it stays in use meanwhile, held by a
    /// guard marked mid-use, so a panic, a close (which cancels the recycle) or a task that
    /// never runs destroys it rather than handing it out unrecycled.
    fn spawn_recycle(&self, held: Held<M::Member>) {
        let shared = self.arc();
        let mut member: Member<M> = Member::new(shared.home(), held, Origin::Recycled, 0);
        member.set_mid_use(true);
        let closing = self.supervisor.closing.clone();
        let spawned = self.supervisor.spawn(async move {
            // Passed: dropping the guard gives it back (not recycled again).
            let recycle = shared.vet(member, Hook::Recycle, None);
            drop(closing.run_until_cancelled(recycle).await);
        });
        self.spawned(spawned);
    }

    /// Replaces a member in use (or claimed for a check): stops it, owes its replacement and
    /// starts it if there is room. `after_use` says which removal counter it goes to.
    fn replace(&self, held: Held<M::Member>, reason: Reason, after_use: bool) {
        let now = self.clock.now();
        let stamp = self.clock.stamp(now);
        let mut cold = self.cold();
        if cold.shut {
            return self.drop_after_shut(cold, held);
        }
        let mut hot = self.hot.lock();
        hot.release(stamp);
        held.meta.set_since(stamp);
        cold.engine.begin_stop(held.meta.key);
        let starts = if cold.engine.is_closed() {
            Starts::default()
        } else {
            cold.engine.owe_replacement();
            cold.engine.refill(now, hot.view())
        };
        Self::sync(&cold, &mut hot);
        drop(hot);
        drop(cold);
        tracing::debug!(pool = %self.name, member = held.meta.id, reason = reason.as_str(), "member replaced");
        self.metrics.killed(reason, after_use);
        self.notify_if_closing();
        self.spawn_stop(held);
        self.spawn_starts(starts, None);
    }

    /// Stops free members the caller has claimed from the hot core and made `Stopping`.
    fn retire(&self, members: Vec<Held<M::Member>>, reason: Reason) {
        for held in members {
            tracing::debug!(pool = %self.name, member = held.meta.id, reason = reason.as_str(), "free member retired");
            self.metrics.killed(reason, false);
            self.spawn_stop(held);
        }
    }

    // ---- starts -----------------------------------------------------------------------

    /// Starts whatever the cold engine says the pool needs now.
    pub(crate) fn refill(&self) {
        let now = self.clock.now();
        let mut cold = self.cold();
        let mut hot = self.hot.lock();
        let starts = cold.engine.refill(now, hot.view());
        Self::sync(&cold, &mut hot);
        drop(hot);
        drop(cold);
        self.spawn_starts(starts, None);
    }

    /// Reserves `n` starts at pool start or when `init_count` grows.
    pub(crate) fn grow(&self, n: usize, done: Option<&tokio::sync::mpsc::Sender<()>>) -> usize {
        let now = self.clock.now();
        let mut cold = self.cold();
        let mut hot = self.hot.lock();
        let starts = cold.engine.grow(n, now, hot.view());
        Self::sync(&cold, &mut hot);
        drop(hot);
        drop(cold);
        let grown = starts.slots.len();
        self.spawn_starts(starts, done);
        grown
    }

    /// Wakes a close that waits for the pool to drain.
    pub(crate) fn notify_if_closing(&self) {
        self.drained.notify_waiters();
    }

    // ---- lifecycle: cull, expiries, health, leaks, housekeeping -----------------------

    /// One cull (docs/design.md, "Culling"): free members beyond the window's demand are retired, oldest idle
    /// first.
    pub(crate) fn cull(&self) {
        let now = self.clock.now();
        let mut cold = self.cold();
        let max_age = cold.config.max_age;
        let mut hot = self.hot.lock();
        let (peak, until) = hot.take_peak();
        let view = hot.view();
        let seen = match until {
            Some(stamp) if view.in_use < peak => self.clock.instant(stamp),
            _ => now,
        };
        let n = cold.engine.cull(now, max_age, peak, seen, view);
        let culled = self.claim_free(&mut cold, &mut hot, n, |_| true);
        Self::sync(&cold, &mut hot);
        drop(hot);
        drop(cold);
        if !culled.is_empty() {
            tracing::info!(pool = %self.name, members = culled.len(), "culled to the demand window's peak");
        }
        self.retire(culled, Reason::MaxAge);
    }

    /// Takes up to `n` free members `pick` chooses, oldest idle first, and makes them
    /// `Stopping` (both locks held).
    fn claim_free(
        &self,
        cold: &mut ColdState,
        hot: &mut crate::hot::Locked<'_, Held<M::Member>, TakeError>,
        n: usize,
        pick: impl Fn(&Held<M::Member>) -> bool,
    ) -> Vec<Held<M::Member>> {
        let stamp = self.clock.coarse();
        let mut out = Vec::new();
        while out.len() < n {
            let Some(held) = hot.claim(&pick) else { break };
            held.meta.set_since(stamp);
            cold.engine.begin_stop(held.meta.key);
            out.push(held);
        }
        out
    }

    /// Retires the free members whose lifetime has ended (each replaced at once). Members in
    /// use are left to their holders and retired when they come back.
    pub(crate) fn expire_due(&self) {
        let now = self.clock.now();
        let mut cold = self.cold();
        let mut hot = self.hot.lock();
        let due: HashSet<(Key, u64)> = cold.engine.due(now).into_iter().collect();
        let expired = self.claim_free(&mut cold, &mut hot, due.len(), |h| {
            due.contains(&(h.meta.key, h.meta.id))
        });
        for _ in &expired {
            cold.engine.owe_replacement();
        }
        let starts = cold.engine.refill(now, hot.view());
        Self::sync(&cold, &mut hot);
        drop(hot);
        drop(cold);
        if !expired.is_empty() {
            tracing::debug!(pool = %self.name, members = expired.len(), "retiring members at max_lifetime");
        }
        self.retire(expired, Reason::MaxLifetime);
        self.spawn_starts(starts, None);
    }

    /// When the next lifetime ends.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        self.cold().engine.next_expiry()
    }

    /// One health-check round: every member idle since before the round began is checked
    /// once, oldest idle first, one at a time (the rest stay available to takes). A member
    /// given back during the round carries a stamp no older than the round's, so none is
    /// checked twice.
    pub(crate) async fn check_free_members(&self) {
        let round = self.clock.coarse();
        loop {
            let claimed = self.hot.lock().claim_for_check(|h| h.meta.since() < round);
            let Some(held) = claimed else { break };
            let member = Member::new(self.arc().home(), held, Origin::Checked, 0);
            drop(self.vet(member, Hook::Check, None).await);
        }
    }

    /// Reports every holder past `leak_detection_threshold` not reported yet.
    pub(crate) fn report_leaks(&self) {
        let Some(threshold) = self.cold().config.leak_detection_threshold else {
            return;
        };
        let now = self.clock.now();
        let Some(held_before) = now.checked_sub(threshold) else {
            return;
        };
        for leak in self.leaks.overdue(held_before) {
            tracing::warn!(
                pool = %self.name,
                member = leak.id,
                held_for = %humantime::format_duration(now - leak.taken_at),
                taken_at = %leak.caller,
                "member held past leak_detection_threshold; possible leak"
            );
        }
    }

    /// The housekeeping tick: brings the coarse clock forward, publishes the gauges and
    /// flushes the counts the hot core kept.
    pub(crate) fn tick(&self) {
        self.clock.now();
        self.hot.lock().ticked();
        self.publish();
    }

    /// Publishes the gauges and flushes the hot core's counts, and says the counts.
    pub(crate) fn publish(&self) -> Gauges {
        let cold = self.cold();
        let mut hot = self.hot.lock();
        let view = hot.view();
        let (takes, zero_waits) = hot.take_counts();
        let gauges = Gauges {
            in_use: view.in_use,
            free: view.free,
            starting: cold.engine.starting(),
            stopping: cold.engine.stopping(),
            queued: view.queued,
        };
        drop(hot);
        drop(cold);
        self.metrics.publish(gauges);
        self.metrics.flush(takes, zero_waits);
        gauges
    }

    // ---- close ------------------------------------------------------------------------

    /// Closes the pool: waiters get `Closed`, starts and timers end, free members stop; then
    /// waits for starts and stops (and, if `wait_in_use`, members in use) to finish, and
    /// finally ends the members' driver tasks.
    pub(crate) async fn close(&self, wait_in_use: bool) {
        let (free, wakers) = {
            let mut cold = self.cold();
            cold.engine.close();
            let error = if cold.runtime_gone {
                TakeError::RuntimeGone {
                    pool: self.name.clone(),
                }
            } else {
                TakeError::Closed {
                    pool: self.name.clone(),
                }
            };
            let mut hot = self.hot.lock();
            let (free, wakers) = hot.close(|| error.clone());
            for held in &free {
                cold.engine.begin_stop(held.meta.key);
            }
            Self::sync(&cold, &mut hot);
            (free, wakers)
        };
        wakers.into_iter().for_each(std::task::Waker::wake);
        self.supervisor.closing.cancel();
        for held in free {
            self.spawn_stop(held);
        }
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let cold = self.cold();
                if cold.engine.is_drained(self.hot.lock().view(), wait_in_use) {
                    break;
                }
            }
            notified.await;
        }
        self.publish();
        self.cold().shut = true;
        self.supervisor.kill.cancel();
    }

    /// Whether a close has begun.
    pub(crate) fn is_closing(&self) -> bool {
        self.cold().engine.is_closed()
    }

    /// Whether the close has finished.
    pub(crate) fn is_shut(&self) -> bool {
        self.cold().shut
    }

    /// The pool's runtime has shut down (a spawn found it so): no task can run any more, so
    /// the pool closes at once. Waiters get [`TakeError::RuntimeGone`]; free members are
    /// dropped where they are, since no stop can run.
    fn runtime_gone(&self) {
        let (free, wakers) = {
            let mut cold = self.cold();
            if cold.runtime_gone {
                return;
            }
            cold.runtime_gone = true;
            cold.engine.close();
            let error = TakeError::RuntimeGone {
                pool: self.name.clone(),
            };
            let mut hot = self.hot.lock();
            let (free, wakers) = hot.close(|| error.clone());
            for held in &free {
                cold.engine.begin_stop(held.meta.key);
                cold.engine.stop_done(held.meta.key);
            }
            Self::sync(&cold, &mut hot);
            (free, wakers)
        };
        tracing::error!(pool = %self.name, "the runtime the pool was started on has shut down; the pool is closed");
        wakers.into_iter().for_each(std::task::Waker::wake);
        for held in free {
            held.meta.token.cancel();
        }
        self.supervisor.closing.cancel();
        self.supervisor.kill.cancel();
        self.notify_if_closing();
    }

    /// Takes note of a spawn's outcome: a runtime found gone closes the pool.
    pub(crate) fn spawned(&self, outcome: Result<(), RuntimeGone>) {
        if outcome.is_err() {
            self.runtime_gone();
        }
    }

    // ---- spawning ---------------------------------------------------------------------

    #[inline]
    pub(crate) fn spawn_starts(
        &self,
        starts: Starts,
        done: Option<&tokio::sync::mpsc::Sender<()>>,
    ) {
        // Most takes start nothing: keep that check inline on the fast path.
        if !starts.is_empty() {
            self.spawn_start_tasks(starts, done);
        }
    }

    fn spawn_start_tasks(&self, starts: Starts, done: Option<&tokio::sync::mpsc::Sender<()>>) {
        if starts.delay.is_zero() {
            tracing::debug!(pool = %self.name, members = starts.slots.len(), "starting members");
        } else {
            tracing::debug!(
                pool = %self.name,
                after_ms = u64::try_from(starts.delay.as_millis()).unwrap_or(u64::MAX),
                "starts are failing; the next start waits out a backoff step"
            );
        }
        for (key, id) in starts.slots {
            // The slot's guard exists before the task does, so a task dropped unpolled still
            // gives the slot back.
            let token = self.supervisor.kill.child_token();
            let slot = StartSlot::new(self.arc(), key, id, token);
            let done = done.cloned();
            let delay = starts.delay;
            let spawned = self.supervisor.spawn(async move {
                run_start::<M, _>(slot, delay).await;
                drop(done);
            });
            self.spawned(spawned);
        }
    }

    pub(crate) fn spawn_stop(&self, held: Held<M::Member>) {
        let slot = StopSlot::new(self.arc(), held.meta.key, held.meta.token.clone());
        let spawned = self.supervisor.spawn(run_stop::<M, _>(slot, held));
        self.spawned(spawned);
    }

    /// The `member_start_timeout` and `member_shutdown` in force.
    pub(crate) fn timeouts(&self) -> (Duration, Duration) {
        let cold = self.cold();
        (
            cold.config.member_start_timeout,
            cold.config.member_shutdown,
        )
    }

    // ---- reconfigure, stats -----------------------------------------------------------

    /// Applies `f` with both locks held (for `reconfigure`), then brings the features and
    /// the hot core's copy of the saturation up to date.
    pub(crate) fn with_both<R>(
        &self,
        f: impl FnOnce(&mut ColdState, &mut crate::hot::Locked<'_, Held<M::Member>, TakeError>) -> R,
    ) -> R {
        let mut cold = self.cold();
        let mut hot = self.hot.lock();
        let out = f(&mut cold, &mut hot);
        self.features.set(&cold.config);
        if cold.config.leak_detection_threshold.is_none() {
            self.leaks.clear();
        }
        Self::sync(&cold, &mut hot);
        out
    }

    /// Stops free members `reconfigure` took off the free list.
    pub(crate) fn retire_reconfigured(&self, members: Vec<Held<M::Member>>, reason: Reason) {
        self.retire(members, reason);
    }

    /// Claims `n` free members, oldest idle first, to stop (for `reconfigure`).
    pub(crate) fn claim_oldest(
        &self,
        cold: &mut ColdState,
        hot: &mut crate::hot::Locked<'_, Held<M::Member>, TakeError>,
        n: usize,
    ) -> Vec<Held<M::Member>> {
        self.claim_free(cold, hot, n, |_| true)
    }

    /// A cull's count and claim with both locks held (for `reconfigure`).
    pub(crate) fn cull_locked(
        &self,
        cold: &mut ColdState,
        hot: &mut crate::hot::Locked<'_, Held<M::Member>, TakeError>,
        now: Instant,
    ) -> Vec<Held<M::Member>> {
        let (peak, until) = hot.take_peak();
        let view = hot.view();
        let seen = match until {
            Some(stamp) if view.in_use < peak => self.clock.instant(stamp),
            _ => now,
        };
        let max_age = cold.config.max_age;
        let n = cold.engine.cull(now, max_age, peak, seen, view);
        self.claim_free(cold, hot, n, |_| true)
    }

    /// One row per member that exists (starting slots have no member yet).
    pub(crate) fn rows(&self) -> Vec<(u64, Status, bool, Instant, Option<Instant>)> {
        let cold = self.cold();
        let hot = self.hot.lock();
        let free: HashSet<Key> = hot.free().map(|h| h.meta.key).collect();
        let mut rows: Vec<_> = cold
            .engine
            .rows()
            .filter(|r| r.status != Status::Starting)
            .map(|r| {
                let since = r.payload.map_or_else(
                    || self.clock.instant(self.clock.coarse()),
                    |m| self.clock.instant(m.since()),
                );
                (r.id, r.status, free.contains(&r.key), since, r.expires_at)
            })
            .collect();
        rows.sort_by_key(|r| r.0);
        rows
    }
}

impl<M: Manager> Home<M::Member> for Shared<M> {
    #[inline]
    fn give_back(&self, held: Held<M::Member>, fate: Fate, origin: Origin, timed: u32) {
        // The fast path: a member in good order, its hold not timed, no feature that needs a
        // look at it.
        if fate == Fate::Ok
            && self.features.flags() & (Features::LIFETIMES | Features::LEAKS) | u64::from(timed)
                == 0
            && !held.meta.is_dead()
        {
            // The manager's hooks run before any lock; a panic in one means broken.
            let returned = manager::returned(
                &self.manager,
                &held.value,
                &self.name,
                origin == Origin::Taken,
            );
            if returned == Returned::Fit {
                let stamp = self.clock.coarse();
                held.meta.set_since(stamp);
                if let Err(held) = self.hot.give(held, stamp) {
                    self.stop_after_close(held);
                }
                return;
            }
            return self.give_back_slow(held, fate, origin, returned, timed);
        }
        let returned = match fate {
            Fate::Ok => manager::returned(
                &self.manager,
                &held.value,
                &self.name,
                origin == Origin::Taken,
            ),
            Fate::Failed | Fate::Crashed => Returned::Fit,
        };
        self.give_back_slow(held, fate, origin, returned, timed);
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn instant(&self, stamp: u64) -> Instant {
        self.clock.instant(stamp)
    }
}

impl<M: Manager> Slots for Shared<M> {
    fn start_abandoned(&self, key: Key) {
        self.cold().engine.start_abandoned(key);
        self.notify_if_closing();
    }

    fn stop_done(&self, key: Key) {
        self.cold().engine.stop_done(key);
        self.notify_if_closing();
        self.refill();
    }
}

impl<M: Manager> Lives<M> for Shared<M> {
    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn manager(&self) -> &M {
        &self.manager
    }

    fn supervisor(&self) -> &Supervisor {
        &self.supervisor
    }

    fn timeouts(&self) -> (Duration, Duration) {
        Shared::timeouts(self)
    }

    fn started(&self, key: Key, value: M::Member, id: u64, token: CancellationToken) {
        let now = self.clock.now();
        let stamp = self.clock.stamp(now);
        let meta = Arc::new(Meta::new(key, id, token, stamp));
        let mut cold = self.cold();
        let expires_at = lifetime::expiry(
            now,
            cold.config.max_lifetime,
            cold.config.max_lifetime_jitter,
        );
        meta.set_expires_at(expires_at.map(|at| self.clock.stamp(at)));
        let held = Held { value, meta };
        if !cold.engine.started(key, now, expires_at, held.meta.clone()) {
            // Died while starting (a failed start: the engine backs off) or closed meanwhile.
            drop(cold);
            self.notify_if_closing();
            self.spawn_stop(held);
            self.refill();
            return;
        }
        let mut hot = self.hot.lock();
        let waker = match hot.admit(held) {
            Ok(waker) => waker,
            Err(_) => unreachable!("the hot core closes with the cold engine"),
        };
        let starts = cold.engine.refill(now, hot.view());
        Self::sync(&cold, &mut hot);
        drop(hot);
        drop(cold);
        if let Some(waker) = waker {
            waker.wake();
        }
        if expires_at.is_some() {
            self.lifetime_poke.notify_one();
        }
        self.spawn_starts(starts, None);
    }

    fn start_failed(
        &self,
        key: Key,
        id: u64,
        error: StartError,
        produced: Option<M::Member>,
        token: &CancellationToken,
    ) {
        if matches!(error, StartError::TimedOut(_)) {
            self.metrics.start_timed_out();
        }
        self.metrics
            .start_failed(crate::metrics::start_failure_reason(&error));
        let now = self.clock.now();
        self.cold()
            .engine
            .start_failed(key, error, produced.is_some(), now);
        match produced {
            Some(value) => {
                let meta = Arc::new(Meta::new(key, id, token.clone(), self.clock.stamp(now)));
                self.spawn_stop(Held { value, meta });
            }
            None => token.cancel(),
        }
        self.notify_if_closing();
        self.refill();
    }

    fn start_took(&self, took: Duration) {
        self.metrics.start_took(took);
    }

    fn deaths(self: Arc<Self>) -> Weak<dyn Deaths> {
        let deaths: Arc<dyn Deaths> = self;
        Arc::downgrade(&deaths)
    }
}

impl<M: Manager> Deaths for Shared<M> {
    fn died(&self, key: Key, id: u64) {
        let now = self.clock.now();
        let mut cold = self.cold();
        match cold.engine.mark_dead(key, id) {
            Death::Ignored => {}
            Death::Starting => {
                tracing::warn!(pool = %self.name, member = id, "member died while starting");
            }
            Death::Live => {
                let mut hot = self.hot.lock();
                if let Some(held) = hot.claim(|h| h.meta.key == key) {
                    held.meta.set_since(self.clock.stamp(now));
                    cold.engine.begin_stop(key);
                    cold.engine.owe_replacement();
                    let starts = cold.engine.refill(now, hot.view());
                    Self::sync(&cold, &mut hot);
                    drop(hot);
                    drop(cold);
                    tracing::warn!(pool = %self.name, member = id, "free member died; replacing it");
                    self.retire(vec![held], Reason::Crashed);
                    self.spawn_starts(starts, None);
                } else {
                    if let Some(meta) = cold.engine.payload(key) {
                        meta.mark_dead();
                    }
                    tracing::warn!(pool = %self.name, member = id, "member died; it is replaced when returned");
                }
            }
        }
    }
}
