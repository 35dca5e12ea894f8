//! Member starts and stops, each in its own supervised task.
//!
//! A start or stop owns its slot through a guard ([`StartSlot`], [`StopSlot`]) made before the
//! task is spawned and moved into it, so a start cancelled by a close, a start or stop that
//! panics, a stop dropped at `member_shutdown`, and a task dropped unpolled because the
//! runtime is gone can never leak capacity. The tasks reach their pool through [`Lives`].

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::cancel::Token;
use crate::combinators::caught;
use tokio::time::Instant;

use crate::error::StartError;
use crate::held::{Held, Key};
use crate::manager::{self, Deaths, Manager, MemberContext};
use crate::supervisor::Supervisor;

/// What a start or stop guard's `Drop` needs of its pool (it cannot name the manager type).
pub(crate) trait Slots: Send + Sync + 'static {
    /// A start was dropped (a close, the runtime going): its slot is free, nothing failed.
    fn start_abandoned(&self, key: Key);
    /// A stop ended: its slot is free.
    fn stop_done(&self, key: Key);
}

/// What a pool offers its start and stop tasks.
pub(crate) trait Lives<M: Manager>: Slots + Deaths {
    fn name(&self) -> &Arc<str>;
    fn manager(&self) -> &M;
    fn supervisor(&self) -> &Supervisor;
    /// `member_start_timeout` and `member_shutdown`.
    fn timeouts(&self) -> (Duration, Duration);
    /// A start produced a member, ready to be offered.
    fn started(&self, key: Key, value: M::Member, id: u64, token: Token);
    /// A start failed; the member it produced, if any, must still be stopped.
    fn start_failed(
        &self,
        key: Key,
        id: u64,
        error: StartError,
        produced: Option<M::Member>,
        token: &Token,
    );
    /// Where a new member's driver tasks report their end.
    fn deaths(self: Arc<Self>) -> Weak<dyn Deaths>;
    /// A start's attempt (after any backoff wait) ended after `took`, well or badly.
    fn start_took(&self, took: Duration);
}

/// A reserved start. Dropped while armed (the start was cancelled: a close, or the runtime
/// shutting down or gone), it gives the slot back as abandoned.
pub(crate) struct StartSlot<L: Slots> {
    pool: Arc<L>,
    key: Key,
    id: u64,
    /// Cancels the member's driver tasks.
    token: Token,
    armed: bool,
}

impl<L: Slots> StartSlot<L> {
    pub(crate) fn new(pool: Arc<L>, key: Key, id: u64, token: Token) -> Self {
        StartSlot {
            pool,
            key,
            id,
            token,
            armed: true,
        }
    }
}

impl<L: Slots> Drop for StartSlot<L> {
    fn drop(&mut self) {
        if self.armed {
            self.token.cancel();
            self.pool.start_abandoned(self.key);
        }
    }
}

/// A member being stopped. Dropped (normally, by panic, at close, or unpolled because the
/// runtime is gone), it ends the member's driver tasks and frees the slot.
pub(crate) struct StopSlot<L: Slots> {
    pool: Arc<L>,
    key: Key,
    token: Token,
}

impl<L: Slots> StopSlot<L> {
    pub(crate) fn new(pool: Arc<L>, key: Key, token: Token) -> Self {
        StopSlot { pool, key, token }
    }
}

impl<L: Slots> Drop for StopSlot<L> {
    fn drop(&mut self) {
        self.token.cancel();
        self.pool.stop_done(self.key);
    }
}

/// Starts one member: wait out the backoff `delay`, then `start` and `initialize` within
/// `member_start_timeout`; a member produced but not initialized in time, or broken as soon
/// as it exists, is stopped and counts as a failed start.
pub(crate) async fn run_start<M: Manager, L: Lives<M>>(slot: StartSlot<L>, delay: Duration) {
    let pool = slot.pool.clone();
    let (key, id, token) = (slot.key, slot.id, slot.token.clone());
    let ctx = MemberContext {
        pool: pool.name().clone(),
        id,
        key,
        supervisor: pool.supervisor().clone(),
        token: token.clone(),
        deaths: pool.clone().deaths(),
    };
    let (limit, _) = pool.timeouts();
    let manager = pool.manager();
    let attempt = async {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let began = Instant::now();
        let deadline = began + limit;
        let start = async {
            let mut member = match tokio::time::timeout_at(deadline, manager.start(&ctx)).await {
                Ok(Ok(member)) => member,
                Ok(Err(e)) => return Err((StartError::Manager(Arc::new(e)), None)),
                Err(_) => return Err((StartError::TimedOut(limit), None)),
            };
            match tokio::time::timeout_at(deadline, manager.initialize(&mut member)).await {
                Ok(Ok(())) => Ok(member),
                Ok(Err(e)) => Err((StartError::Manager(Arc::new(e)), Some(member))),
                Err(_) => Err((StartError::TimedOut(limit), Some(member))),
            }
        };
        // A panic in the manager is a failed start.
        let outcome = caught(start).await;
        pool.start_took(began.elapsed());
        outcome
    };
    // A close drops the attempt here (and the slot's Drop gives the slot back).
    let Some(outcome) = pool.supervisor().closing.run_until_cancelled(attempt).await else {
        return;
    };
    let outcome = outcome
        .unwrap_or_else(|_| Err((StartError::Panicked, None)))
        .and_then(|value| {
            // A member broken from birth never reaches a taker (a waiter included).
            if manager::is_broken(manager, &value, pool.name()) {
                Err((StartError::Broken, Some(value)))
            } else {
                Ok(value)
            }
        });
    let mut slot = slot;
    slot.armed = false;
    match outcome {
        Ok(value) => pool.started(key, value, id, token),
        Err((error, produced)) => {
            match &error {
                StartError::TimedOut(_) => tracing::warn!(
                    pool = %pool.name(), member = id, error = %error, "member start timed out"
                ),
                StartError::Panicked => {
                    tracing::error!(pool = %pool.name(), member = id, "member start panicked");
                }
                _ => tracing::warn!(
                    pool = %pool.name(), member = id, error = %error, "member start failed"
                ),
            }
            pool.start_failed(key, id, error, produced, &token);
        }
    }
}

/// Stops one member with `Manager::stop`, giving up after `member_shutdown`, then ends its
/// driver tasks (the slot's Drop). A panicking stop is logged and ends the same way.
pub(crate) async fn run_stop<M: Manager, L: Lives<M>>(slot: StopSlot<L>, held: Held<M::Member>) {
    let pool = slot.pool.clone();
    let (_, limit) = pool.timeouts();
    let stop = caught(pool.manager().stop(held.value));
    match tokio::time::timeout(limit, stop).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) => {
            tracing::error!(pool = %pool.name(), member = held.meta.id, "member stop panicked; its slot is freed");
        }
        Err(_) => tracing::warn!(
            pool = %pool.name(),
            member = held.meta.id,
            limit = %crate::time::Human(limit),
            "member stop hung past member_shutdown; dropped it and freed its slot"
        ),
    }
    drop(slot);
}
