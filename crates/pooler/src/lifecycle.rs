//! Member starts and stops, each in its own supervised task.
//!
//! A start or stop owns its slot through a guard ([`StartSlot`], [`StopSlot`]) that gives the
//! slot back in `Drop`, so a start cancelled by a close, a start or stop that panics, or a
//! stop dropped at `member_shutdown` can never leak capacity.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::engine::Key;
use crate::error::StartError;
use crate::manager::{Deaths, Manager, MemberContext};
use crate::shared::{Held, Shared};

/// A reserved start. Dropped while armed (the start was cancelled: a close, or the runtime
/// shutting down), it gives the slot back as abandoned; a panic in the manager is caught
/// where it happens and reported as a failed start.
struct StartSlot<'a, M: Manager> {
    shared: &'a Shared<M>,
    key: Key,
    id: u64,
    token: CancellationToken,
    armed: bool,
}

impl<M: Manager> StartSlot<'_, M> {
    fn fail(mut self, error: StartError, produced: Option<M::Member>) {
        self.armed = false;
        let shared = self.shared;
        let stopping = produced.is_some();
        shared
            .lock()
            .engine
            .start_failed(self.key, error, stopping, Instant::now());
        match produced {
            Some(value) => shared.spawn_stop(
                self.key,
                Held {
                    value,
                    id: self.id,
                    token: self.token.clone(),
                },
            ),
            None => self.token.cancel(),
        }
        shared.notify_if_closing();
        shared.refill();
    }
}

impl<M: Manager> Drop for StartSlot<'_, M> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.token.cancel();
        self.shared.lock().engine.start_abandoned(self.key);
        self.shared.notify_if_closing();
    }
}

/// A member being stopped. Dropped (normally, by panic or at close), it ends the member's
/// driver tasks and frees the slot.
struct StopSlot<'a, M: Manager> {
    shared: &'a Shared<M>,
    key: Key,
    token: CancellationToken,
}

impl<M: Manager> Drop for StopSlot<'_, M> {
    fn drop(&mut self) {
        self.token.cancel();
        self.shared.lock().engine.stop_done(self.key);
        self.shared.notify_if_closing();
        self.shared.refill();
    }
}

impl<M: Manager> Shared<M> {
    /// Starts one member: wait out the backoff `delay`, then `start` and `initialize` within
    /// `member_start_timeout`; a member produced but not initialized in time is stopped.
    pub(crate) async fn run_start(self: Arc<Self>, key: Key, id: u64, delay: Duration) {
        let token = self.supervisor.kill.child_token();
        let slot = StartSlot {
            shared: &self,
            key,
            id,
            token: token.clone(),
            armed: true,
        };
        let deaths: Arc<dyn Deaths> = self.clone();
        let ctx = MemberContext {
            pool: self.name.clone(),
            id,
            key,
            supervisor: self.supervisor.clone(),
            token: token.clone(),
            deaths: Arc::downgrade(&deaths),
        };
        let (limit, _) = self.timeouts();
        let attempt = async {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let deadline = Instant::now() + limit;
            let mut member = match tokio::time::timeout_at(deadline, self.manager.start(&ctx)).await
            {
                Ok(Ok(member)) => member,
                Ok(Err(e)) => return Err((StartError::Manager(Arc::new(e)), None)),
                Err(_) => return Err((StartError::TimedOut(limit), None)),
            };
            match tokio::time::timeout_at(deadline, self.manager.initialize(&mut member)).await {
                Ok(Ok(())) => Ok(member),
                Ok(Err(e)) => Err((StartError::Manager(Arc::new(e)), Some(member))),
                Err(_) => Err((StartError::TimedOut(limit), Some(member))),
            }
        };
        // A panic in the manager is a failed start; a close drops the attempt here (and the
        // slot's Drop gives the slot back).
        let attempt = std::panic::AssertUnwindSafe(attempt).catch_unwind();
        let Some(outcome) = self.supervisor.closing.run_until_cancelled(attempt).await else {
            return;
        };
        let outcome = outcome.unwrap_or_else(|_| {
            tracing::error!(pool = %self.name, member = id, "member start panicked");
            Err((StartError::Panicked, None))
        });
        match outcome {
            Ok(value) => {
                let mut slot = slot;
                slot.armed = false;
                self.on_started(key, Held { value, id, token });
            }
            Err((error, produced)) => {
                match &error {
                    StartError::TimedOut(_) => {
                        self.metrics.start_timed_out();
                        tracing::warn!(
                        pool = %self.name, member = id, error = %error, "member start timed out"
                        );
                    }
                    _ => tracing::warn!(
                        pool = %self.name, member = id, error = %error, "member start failed"
                    ),
                }
                slot.fail(error, produced);
            }
        }
    }

    /// Stops one member with `Manager::stop`, giving up after `member_shutdown`, then ends
    /// its driver tasks.
    pub(crate) async fn run_stop(self: Arc<Self>, key: Key, held: Held<M::Member>) {
        let Held { value, token, .. } = held;
        let _slot = StopSlot {
            shared: &self,
            key,
            token,
        };
        let (_, limit) = self.timeouts();
        if tokio::time::timeout(limit, self.manager.stop(value))
            .await
            .is_err()
        {
            tracing::warn!(
                pool = %self.name,
                limit = %humantime::format_duration(limit),
                "member stop hung past member_shutdown; dropped it and freed its slot"
            );
        }
    }
}
