//! The state behind a [`Pool`](crate::Pool) handle: the engine under its lock, the manager,
//! the supervisor, and the glue that turns the engine's decisions into hand-offs and tasks.
//!
//! Rules of the lock: user code (the manager's methods) never runs under it, and nothing that
//! can return a member (a [`Member`] guard, a waiter's receiver) is dropped under it.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::PoolConfig;
use crate::engine::{Caller, Counts, Death, Empty, Engine, Key, Limits, Starts, Take};
use crate::error::TakeError;
use crate::health::{Hook, vet};
use crate::lifetime;
use crate::manager::{Deaths, Manager};
use crate::member::Member;
use crate::metrics::{PoolMetrics, Reason};
use crate::supervisor::Supervisor;

/// A member value as the pool keeps it, with what must travel along.
pub(crate) struct Held<T> {
    pub(crate) value: T,
    /// The member's id (never reused, unlike its key).
    pub(crate) id: u64,
    /// Cancels the member's driver tasks.
    pub(crate) token: CancellationToken,
}

/// A queued taker: its end of the hand-off, and where it called from.
pub(crate) struct Waiting<M: Manager> {
    pub(crate) tx: oneshot::Sender<Result<Member<M>, TakeError>>,
    pub(crate) caller: Caller,
}

pub(crate) struct State<M: Manager> {
    pub(crate) engine: Engine<Held<M::Member>, Waiting<M>>,
    pub(crate) config: PoolConfig,
    /// The close has finished: members returned from now on are dropped in place.
    pub(crate) shut: bool,
    /// The counts last published to the gauges.
    published: Counts,
}

/// The lock, held. Releasing it publishes the pool's counts to the gauges, so they are
/// current after every change.
pub(crate) struct Locked<'a, M: Manager> {
    guard: MutexGuard<'a, State<M>>,
    metrics: &'a PoolMetrics,
}

impl<M: Manager> Deref for Locked<'_, M> {
    type Target = State<M>;
    fn deref(&self) -> &State<M> {
        &self.guard
    }
}

impl<M: Manager> DerefMut for Locked<'_, M> {
    fn deref_mut(&mut self) -> &mut State<M> {
        &mut self.guard
    }
}

impl<M: Manager> Drop for Locked<'_, M> {
    fn drop(&mut self) {
        let state = &mut *self.guard;
        self.metrics
            .counts(|| state.engine.counts(), &mut state.published);
    }
}

/// How a member comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Returned normally: back to the free list or the oldest waiter.
    Ok,
    /// `Member::fail` or a failed health check: destroyed and replaced.
    Failed,
    /// Its holder panicked or was cancelled mid-use: destroyed and replaced.
    Crashed,
}

pub(crate) struct Shared<M: Manager> {
    pub(crate) name: Arc<str>,
    pub(crate) manager: M,
    state: Mutex<State<M>>,
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
    }
}

impl<M: Manager> Shared<M> {
    pub(crate) fn new(config: PoolConfig, manager: M, supervisor: Supervisor) -> Arc<Self> {
        Arc::new_cyclic(|this| Shared {
            name: config.name.as_str().into(),
            metrics: PoolMetrics::new(&config.name),
            manager,
            state: Mutex::new(State {
                engine: Engine::new(limits(&config)),
                config,
                shut: false,
                published: Counts::default(),
            }),
            supervisor,
            drained: Notify::new(),
            reconfigured: watch::Sender::new(Instant::now()),
            lifetime_poke: Notify::new(),
            this: this.clone(),
        })
    }

    /// The lock. No code under it panics, so a poisoned lock still holds a consistent state.
    pub(crate) fn lock(&self) -> Locked<'_, M> {
        Locked {
            guard: self.state.lock().unwrap_or_else(PoisonError::into_inner),
            metrics: &self.metrics,
        }
    }

    pub(crate) fn arc(&self) -> Arc<Self> {
        self.this
            .upgrade()
            .expect("a method of a live pool runs behind an Arc")
    }

    // ---- take -------------------------------------------------------------------------

    /// One attempt at a free member that is neither broken nor expired, and whether it has
    /// been idle long enough to be checked before use. `Err` carries why none was free, with
    /// the lock still held (to queue under it), the instant of the attempt, and the starts
    /// the take decided spawned.
    #[allow(clippy::type_complexity)]
    pub(crate) fn take_now(
        self: &Arc<Self>,
        caller: Caller,
    ) -> Result<(Member<M>, bool), (Empty, Locked<'_, M>, Instant)> {
        loop {
            let now = Instant::now();
            let mut state = self.lock();
            match state.engine.take(now, caller) {
                Take::Member(key, held, idle_since) => {
                    let check = state
                        .config
                        .idle_check_threshold
                        .is_some_and(|t| now - idle_since >= t);
                    let starts = state.engine.auto_grow(now);
                    drop(state);
                    self.spawn_starts(starts, None);
                    if self.manager.is_broken(&held.value) {
                        tracing::debug!(pool = %self.name, member = held.id, "free member found broken at take");
                        // Found broken before anyone used it: a free member's removal.
                        self.destroy(key, held, now, Reason::Crashed, false);
                        continue;
                    }
                    return Ok((Member::new(self.clone(), key, held, now), check));
                }
                Take::Expired(key, held) => {
                    let starts = state.engine.refill(now);
                    drop(state);
                    self.retire(key, held, Reason::MaxLifetime);
                    self.spawn_starts(starts, None);
                }
                Take::Empty(why, starts) => {
                    self.spawn_starts(starts, None);
                    return Err((why, state, now));
                }
            }
        }
    }

    /// Turns an empty take into the error a caller sees, and counts it.
    pub(crate) fn empty_error(&self, why: &Empty, state: &State<M>) -> TakeError {
        let pool = self.name.clone();
        let error = match why {
            Empty::AtCapacity => TakeError::AtCapacity { pool },
            Empty::AllInUse => TakeError::AllInUse { pool },
            Empty::Closed => TakeError::Closed { pool },
            Empty::Unavailable => match state.engine.last_error() {
                Some(e) => TakeError::Unavailable {
                    pool,
                    source: e.clone(),
                },
                None => TakeError::AllInUse { pool },
            },
        };
        self.metrics.no_member(error.reason());
        error
    }

    /// Removes a queued taker that gave up. `false` if it was already served or failed.
    pub(crate) fn cancel_waiter(&self, id: u64) -> bool {
        let waiter = self.lock().engine.cancel_waiter(id);
        waiter.is_some()
    }

    // ---- return -----------------------------------------------------------------------

    /// A member comes back from its holder (or from the pool's own recycle task, when
    /// `recycled`).
    pub(crate) fn give_back(
        &self,
        key: Key,
        held: Held<M::Member>,
        fate: Fate,
        taken_at: Instant,
        recycled: bool,
    ) {
        let broken = fate == Fate::Ok && self.manager.is_broken(&held.value);
        let recycle =
            fate == Fate::Ok && !broken && !recycled && self.manager.needs_recycle(&held.value);
        let now = Instant::now();
        if !recycled {
            self.metrics.used(taken_at, now);
        }
        let mut state = self.lock();
        if state.shut {
            drop(state);
            held.token.cancel();
            return;
        }
        let back = state.engine.returning(key, now);
        let leak = back.leaked.then(|| state.engine.reported_leak(key));
        let reason = match fate {
            Fate::Failed => Some(Reason::Failed),
            Fate::Crashed => Some(Reason::Crashed),
            Fate::Ok if broken || back.dead => Some(Reason::Crashed),
            Fate::Ok if back.expired => Some(Reason::MaxLifetime),
            Fate::Ok => None,
        };
        if state.engine.is_closed() {
            state.engine.begin_stop(key, now);
            drop(state);
            self.spawn_stop(key, held);
        } else if let Some(reason) = reason {
            drop(state);
            self.destroy(key, held, now, reason, true);
        } else if recycle {
            drop(state);
            self.spawn_recycle(key, held, now);
        } else {
            self.hand_off(state, key, held, now);
        }
        // Logged once the lock is released (every branch above releases it).
        if let Some(leak) = leak {
            tracing::warn!(
                pool = %self.name,
                member = leak.id,
                held_for = %humantime::format_duration(now - leak.since),
                "member reported as a possible leak came back"
            );
        }
    }

    /// Recycles a returned member in a supervised task; it stays in use meanwhile, held by a
    /// guard, so a panic or a close cannot lose it.
    fn spawn_recycle(&self, key: Key, held: Held<M::Member>, now: Instant) {
        let mut member = Member::new(self.arc(), key, held, now);
        member.set_recycling();
        let shared = self.arc();
        self.supervisor.spawn(async move {
            // Passed: dropping the guard gives it back (not recycled again).
            drop(vet(&shared, member, Hook::Recycle).await);
        });
    }

    /// Gives an in-use member to the oldest waiter that still waits, or puts it on the free
    /// list (invariant #3).
    fn hand_off(&self, mut state: Locked<'_, M>, key: Key, held: Held<M::Member>, now: Instant) {
        let mut held = held;
        while let Some(waiter) = state.engine.pop_waiter() {
            state.engine.handed_over(key, now, waiter.caller);
            match waiter.tx.send(Ok(Member::new(self.arc(), key, held, now))) {
                Ok(()) => return,
                // The waiter gave up after being popped; take the member back out of the
                // guard (which then drops as an empty shell) and try the next one.
                Err(back) => match back {
                    Ok(mut member) => held = member.detach(),
                    Err(_) => unreachable!("only members are handed off"),
                },
            }
        }
        state.engine.put_free(key, held, now);
    }

    /// Stops an in-use member, owes its replacement and starts it if there is room.
    /// `after_use` says which removal counter it goes to (a member found broken at take
    /// was never used).
    pub(crate) fn destroy(
        &self,
        key: Key,
        held: Held<M::Member>,
        now: Instant,
        reason: Reason,
        after_use: bool,
    ) {
        let mut state = self.lock();
        state.engine.begin_stop(key, now);
        state.engine.owe_replacement();
        let starts = state.engine.refill(now);
        drop(state);
        tracing::debug!(pool = %self.name, member = held.id, reason = reason.as_str(), "member removed after use");
        self.metrics.killed(reason, after_use);
        self.spawn_stop(key, held);
        self.spawn_starts(starts, None);
    }

    /// Stops a free member the engine has already made `Stopping`.
    pub(crate) fn retire(&self, key: Key, held: Held<M::Member>, reason: Reason) {
        tracing::debug!(pool = %self.name, member = held.id, reason = reason.as_str(), "free member removed");
        self.metrics.killed(reason, false);
        self.spawn_stop(key, held);
    }

    // ---- events from tasks ------------------------------------------------------------

    /// A start produced a member that is ready: it goes to the oldest waiter or the free list.
    pub(crate) fn on_started(&self, key: Key, held: Held<M::Member>) {
        let now = Instant::now();
        let mut state = self.lock();
        let expires_at = lifetime::expiry(
            now,
            state.config.max_lifetime,
            state.config.max_lifetime_jitter,
        );
        if !state.engine.started(key, now, expires_at) {
            // Died while starting (a failed start: the engine backs off) or closed meanwhile.
            drop(state);
            self.notify_if_closing();
            self.spawn_stop(key, held);
            self.refill();
            return;
        }
        self.hand_off(state, key, held, now);
        if expires_at.is_some() {
            self.lifetime_poke.notify_one();
        }
        self.refill();
    }

    /// Starts whatever the engine says the pool needs now.
    pub(crate) fn refill(&self) {
        let starts = self.lock().engine.refill(Instant::now());
        self.spawn_starts(starts, None);
    }

    /// Wakes a close that waits for the pool to drain.
    pub(crate) fn notify_if_closing(&self) {
        self.drained.notify_waiters();
    }

    // ---- close ------------------------------------------------------------------------

    /// Closes the pool: waiters get `Closed`, starts and timers end, free members stop; then
    /// waits for starts and stops (and, if `wait_in_use`, members in use) to finish, and
    /// finally ends the members' driver tasks.
    pub(crate) async fn close(&self, wait_in_use: bool) {
        let (waiters, free) = self.lock().engine.close(Instant::now());
        for waiter in waiters {
            let _ = waiter.tx.send(Err(TakeError::Closed {
                pool: self.name.clone(),
            }));
        }
        self.supervisor.closing.cancel();
        for (key, held) in free {
            self.spawn_stop(key, held);
        }
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lock().engine.is_drained(wait_in_use) {
                break;
            }
            notified.await;
        }
        self.lock().shut = true;
        self.supervisor.kill.cancel();
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
        for (key, id) in starts.slots {
            let shared = self.arc();
            let done = done.cloned();
            let delay = starts.delay;
            self.supervisor.spawn(async move {
                shared.run_start(key, id, delay).await;
                drop(done);
            });
        }
    }

    pub(crate) fn spawn_stop(&self, key: Key, held: Held<M::Member>) {
        let shared = self.arc();
        self.supervisor
            .spawn(async move { shared.run_stop(key, held).await });
    }

    /// The `member_start_timeout` and `member_shutdown` in force.
    pub(crate) fn timeouts(&self) -> (Duration, Duration) {
        let state = self.lock();
        (
            state.config.member_start_timeout,
            state.config.member_shutdown,
        )
    }
}

impl<M: Manager> Deaths for Shared<M> {
    fn died(&self, key: Key, id: u64) {
        let now = Instant::now();
        let mut state = self.lock();
        let death = state.engine.mark_dead(key, id, now);
        if matches!(death, Death::Removed(_)) {
            state.engine.owe_replacement();
        }
        let starts = state.engine.refill(now);
        drop(state);
        match death {
            Death::Removed(held) => {
                tracing::warn!(pool = %self.name, member = id, "free member died; replacing it");
                self.retire(key, held, Reason::Crashed);
            }
            Death::Marked => {
                tracing::warn!(pool = %self.name, member = id, "member died; it is replaced when returned");
            }
            Death::Ignored => {}
        }
        self.spawn_starts(starts, None);
    }
}
