//! The state behind a [`Pool`](crate::Pool) handle: the engine under its lock, the manager,
//! the supervisor, and the glue that turns the engine's decisions into hand-offs and tasks.
//!
//! Rules of the lock: user code (the manager's methods) never runs under it, and nothing that
//! can return a member (a [`Member`] guard, a waiter's receiver) is dropped under it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::PoolConfig;
use crate::engine::{Death, Empty, Engine, Key, Limits, Starts, Take};
use crate::error::TakeError;
use crate::manager::{Deaths, Manager};
use crate::member::Member;
use crate::supervisor::Supervisor;

/// A member value as the pool keeps it, with what must travel along.
pub(crate) struct Held<T> {
    pub(crate) value: T,
    /// The member's id (never reused, unlike its key).
    pub(crate) id: u64,
    /// Cancels the member's driver tasks.
    pub(crate) token: CancellationToken,
}

/// A queued taker's end of the hand-off.
pub(crate) type Handoff<M> = oneshot::Sender<Result<Member<M>, TakeError>>;

pub(crate) struct State<M: Manager> {
    pub(crate) engine: Engine<Held<M::Member>, Handoff<M>>,
    pub(crate) config: PoolConfig,
    /// The close has finished: members returned from now on are dropped in place.
    pub(crate) shut: bool,
}

/// How a member comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Returned normally: back to the free list or the oldest waiter.
    Ok,
    /// `Member::fail`: destroyed and replaced.
    Failed,
    /// Its holder panicked or was cancelled mid-use: destroyed and replaced.
    Crashed,
}

pub(crate) struct Shared<M: Manager> {
    pub(crate) name: Arc<str>,
    pub(crate) manager: M,
    state: Mutex<State<M>>,
    pub(crate) supervisor: Supervisor,
    /// Woken whenever a closing pool's counts change.
    drained: Notify,
    this: Weak<Shared<M>>,
}

pub(crate) fn limits(config: &PoolConfig) -> Limits {
    Limits {
        init_count: config.init_count,
        max_count: config.max_count,
        queue_max: config.queue_max,
        order: config.member_order,
    }
}

impl<M: Manager> Shared<M> {
    pub(crate) fn new(config: PoolConfig, manager: M, supervisor: Supervisor) -> Arc<Self> {
        Arc::new_cyclic(|this| Shared {
            name: config.name.as_str().into(),
            manager,
            state: Mutex::new(State {
                engine: Engine::new(limits(&config)),
                config,
                shut: false,
            }),
            supervisor,
            drained: Notify::new(),
            this: this.clone(),
        })
    }

    /// The lock. No code under it panics, so a poisoned lock still holds a consistent state.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State<M>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn arc(&self) -> Arc<Self> {
        self.this
            .upgrade()
            .expect("a method of a live pool runs behind an Arc")
    }

    // ---- take -------------------------------------------------------------------------

    /// One attempt at a free member that is not broken. `Err` carries why none was free,
    /// after the starts the take decided have been spawned.
    pub(crate) fn take_now(&self) -> Result<Member<M>, (Empty, MutexGuard<'_, State<M>>)> {
        loop {
            let now = Instant::now();
            let mut state = self.lock();
            match state.engine.take(now) {
                Take::Member(key, held) => {
                    drop(state);
                    if self.manager.is_broken(&held.value) {
                        tracing::debug!(pool = %self.name, "free member found broken at take");
                        self.destroy(key, held, now);
                        continue;
                    }
                    return Ok(Member::new(self.arc(), key, held, now));
                }
                Take::Empty(why, starts) => {
                    self.spawn_starts(starts, None);
                    return Err((why, state));
                }
            }
        }
    }

    /// Turns an empty take into the error a caller sees.
    pub(crate) fn empty_error(&self, why: &Empty, state: &State<M>) -> TakeError {
        let pool = self.name.clone();
        match why {
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
        }
    }

    /// Removes a queued taker that gave up. `false` if it was already served or failed.
    pub(crate) fn cancel_waiter(&self, id: u64) -> bool {
        let sender = self.lock().engine.cancel_waiter(id);
        sender.is_some()
    }

    // ---- return -----------------------------------------------------------------------

    /// A member comes back from its holder.
    pub(crate) fn give_back(&self, key: Key, held: Held<M::Member>, fate: Fate) {
        let broken = fate == Fate::Ok && self.manager.is_broken(&held.value);
        let now = Instant::now();
        let state = self.lock();
        if state.shut {
            drop(state);
            held.token.cancel();
            return;
        }
        if fate != Fate::Ok || broken || state.engine.is_dead(key) || state.engine.is_closed() {
            drop(state);
            self.destroy(key, held, now);
            return;
        }
        self.hand_off(state, key, held, now);
    }

    /// Gives an in-use member to the oldest waiter that still waits, or puts it on the free
    /// list (invariant #3).
    fn hand_off(
        &self,
        mut state: MutexGuard<'_, State<M>>,
        key: Key,
        held: Held<M::Member>,
        now: Instant,
    ) {
        let mut held = held;
        while let Some(waiter) = state.engine.pop_waiter() {
            match waiter.send(Ok(Member::new(self.arc(), key, held, now))) {
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

    /// Stops an in-use member and owes its replacement.
    pub(crate) fn destroy(&self, key: Key, held: Held<M::Member>, now: Instant) {
        let mut state = self.lock();
        state.engine.begin_stop(key, now);
        if !state.engine.is_closed() {
            state.engine.owe_replacement();
        }
        drop(state);
        self.spawn_stop(key, held);
    }

    // ---- events from tasks ------------------------------------------------------------

    /// A start produced a member that is ready: it goes to the oldest waiter or the free list.
    pub(crate) fn on_started(&self, key: Key, held: Held<M::Member>) {
        let now = Instant::now();
        let mut state = self.lock();
        if !state.engine.started(key, now) {
            drop(state);
            self.notify_if_closing();
            self.spawn_stop(key, held);
            return;
        }
        self.hand_off(state, key, held, now);
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
            let _ = waiter.send(Err(TakeError::Closed {
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

    pub(crate) fn spawn_starts(
        &self,
        starts: Starts,
        done: Option<&tokio::sync::mpsc::Sender<()>>,
    ) {
        if starts.is_empty() {
            return;
        }
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
        let mut state = self.lock();
        let death = state.engine.mark_dead(key, id, Instant::now());
        if matches!(death, Death::Removed(_)) {
            state.engine.owe_replacement();
        }
        drop(state);
        match death {
            Death::Removed(held) => {
                tracing::warn!(pool = %self.name, member = id, "free member died; replacing it");
                self.spawn_stop(key, held);
                self.refill();
            }
            Death::Marked => {
                tracing::warn!(pool = %self.name, member = id, "member died; it is replaced when returned");
            }
            Death::Ignored => {}
        }
    }
}
