//! The members' lives as the pool sees them: starts decided and ended, stops ended, deaths —
//! each one [`step`](crate::step) through the two locks. The start and stop tasks
//! themselves are `lifecycle.rs`'s; they reach the pool through the traits implemented here.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::cancel::Token;
use tokio::sync::mpsc;

use crate::cold::Death;
use crate::error::StartError;
use crate::held::{Held, Key, Meta};
use crate::lifecycle::{Lives, Slots};
use crate::lifetime;
use crate::manager::{Deaths, Manager};
use crate::metrics::Reason;
use crate::shared::Shared;
use crate::step::Why;
use crate::supervisor::Supervisor;

/// What a start's end came to under the locks.
enum Admitted<T> {
    /// Handed to a waiter or put on the free list; its expiry, if any.
    Kept { expires: bool },
    /// Died while starting, or the pool closed meanwhile: stop it.
    Refused(Held<T>),
}

impl<M: Manager> Shared<M> {
    /// Waits until the pool holds `init_count` members, no start is under way, or starts are
    /// failing (after the first batch, when `max_concurrent_starts` held the rest back).
    pub(crate) async fn filled(&self) {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let filled = self.step(|s| {
                let init = s.cold.engine.limits().init_count;
                s.hot.view().live() >= init
                    || s.cold.engine.starting() == 0
                    || s.cold.engine.last_error().is_some()
            });
            if filled {
                return;
            }
            notified.await;
        }
    }

    /// Reserves `n` starts at pool start or when `init_count` grows; each start task holds
    /// `done` while it runs. Says how many were reserved.
    pub(crate) fn grow(&self, n: usize, done: Option<&mpsc::Sender<()>>) -> usize {
        self.step(|s| {
            let starts = s.cold.engine.grow(n, s.now, s.hot.view());
            let grown = starts.slots.len();
            s.effects.starts.push(starts);
            s.effects.done = done.cloned();
            grown
        })
    }
}

impl<M: Manager> Slots for Shared<M> {
    fn start_abandoned(&self, key: Key) {
        self.step(|s| {
            s.cold.engine.start_abandoned(key);
            s.effects.drained = true;
        });
    }

    fn stop_done(&self, key: Key) {
        self.step(|s| {
            s.cold.engine.stop_done(key);
            s.effects.drained = true;
            s.refill();
        });
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
        self.features.timeouts()
    }

    fn started(&self, key: Key, value: M::Member, id: u64, token: Token) {
        self.step(move |s| {
            let meta = Arc::new(Meta::new(key, id, token, s.stamp()));
            let expires_at = lifetime::expiry(
                s.now,
                s.cold.config.max_lifetime,
                s.cold.config.max_lifetime_jitter,
            );
            meta.set_expires_at(expires_at.map(|at| s.stamp_of(at)));
            let held = Held { value, meta };
            let admitted = if s
                .cold
                .engine
                .started(key, s.now, expires_at, held.meta.clone())
            {
                match s.hot.admit(held) {
                    Ok(waker) => {
                        s.effects.wake.extend(waker);
                        Admitted::Kept {
                            expires: expires_at.is_some(),
                        }
                    }
                    Err(_) => unreachable!("the hot core closes with the cold engine"),
                }
            } else {
                Admitted::Refused(held)
            };
            // A close, or a `Pool::start` waiting for its first members, looks again.
            s.effects.drained = true;
            match admitted {
                Admitted::Kept { expires } => s.effects.expiry = expires,
                Admitted::Refused(held) => {
                    // Died while starting (a failed start: the engine backs off) or closed
                    // meanwhile.
                    s.effects.drained = true;
                    s.effects.stops.push((held, Why::Quiet));
                }
            }
            s.refill();
        });
    }

    fn start_failed(
        &self,
        key: Key,
        id: u64,
        error: StartError,
        produced: Option<M::Member>,
        token: &Token,
    ) {
        if matches!(error, StartError::TimedOut(_)) {
            self.metrics.start_timed_out();
        }
        self.metrics
            .start_failed(crate::metrics::start_failure_reason(&error));
        self.step(|s| {
            s.cold
                .engine
                .start_failed(key, error, produced.is_some(), s.now);
            match produced {
                Some(value) => {
                    let meta = Arc::new(Meta::new(key, id, token.clone(), s.stamp()));
                    s.effects.stops.push((Held { value, meta }, Why::Quiet));
                }
                None => token.cancel(),
            }
            s.effects.drained = true;
            s.refill();
        });
    }

    fn start_took(&self, took: Duration) {
        self.metrics.start_took(took);
    }

    fn deaths(self: Arc<Self>) -> Weak<dyn Deaths> {
        let deaths: Arc<dyn Deaths> = self;
        Arc::downgrade(&deaths)
    }
}

/// What a death signal came to.
enum Died {
    Ignored,
    Starting,
    /// Free: claimed and retired, a replacement owed.
    Retired,
    /// In use: marked, replaced when it comes back.
    Marked,
}

impl<M: Manager> Deaths for Shared<M> {
    fn died(&self, key: Key, id: u64) {
        let died = self.step(|s| match s.cold.engine.mark_dead(key, id) {
            Death::Ignored => Died::Ignored,
            Death::Starting => Died::Starting,
            Death::Live => {
                if s.retire_free(1, Reason::Crashed, |h| h.meta.key == key) == 1 {
                    s.cold.engine.owe_replacement();
                    s.refill();
                    Died::Retired
                } else {
                    if let Some(meta) = s.cold.engine.payload(key) {
                        meta.mark_dead();
                    }
                    Died::Marked
                }
            }
        });
        match died {
            Died::Ignored => {}
            Died::Starting => {
                tracing::warn!(pool = %self.name, member = id, "member died while starting");
            }
            Died::Retired => {
                tracing::warn!(pool = %self.name, member = id, "free member died; replacing it");
            }
            Died::Marked => {
                tracing::warn!(pool = %self.name, member = id, "member died; it is replaced when returned");
            }
        }
    }
}
