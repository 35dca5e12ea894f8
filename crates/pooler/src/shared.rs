//! The state behind a [`Pool`](crate::Pool) handle, split by role (docs/design.md, "The
//! engine"):
//!
//! - the checkout path (`checkout.rs`, `take.rs`): takes, returns and hand-offs, on the hot
//!   lock alone;
//! - the lifecycle (`lives.rs`, `closing.rs`, `reconfigure.rs`): starts, stops, deaths,
//!   backoff, close and reconfigure, each a [`step`](crate::step) through the two locks;
//! - housekeeping (`housekeeping.rs`): one task for the clock tick, culls, expiries, health
//!   checks and leak reports.
//!
//! This file holds what they share and the spawning of members' tasks. Two locks: the hot
//! core's (the free members and the queue) and the cold engine's (everything else), taken
//! together only by [`Shared::step`]; user code (the manager's methods) never runs under
//! either.

use std::sync::{Arc, Weak};
use std::task::Waker;

use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use crate::clock::Clock;
use crate::cold::{Cold, Limits, Starts};
use crate::config::PoolConfig;
use crate::error::TakeError;
use crate::features::Features;
use crate::held::Held;
use crate::hot::Hot;
use crate::leak::Leaks;
use crate::lifecycle::{StartSlot, StopSlot, run_start, run_stop};
use crate::manager::Manager;
use crate::metrics::PoolMetrics;
use crate::shed::Shedder;
use crate::step::{ColdLock, ColdState, Effects, Step, Why};
use crate::supervisor::{RuntimeGone, Supervisor};

/// The pool's hot core, with the members it keeps.
pub(crate) type HotCore<M> = Hot<Held<<M as Manager>::Member>, TakeError>;

pub(crate) struct Shared<M: Manager> {
    pub(crate) name: Arc<str>,
    pub(crate) manager: M,
    pub(crate) hot: HotCore<M>,
    pub(crate) cold: ColdLock,
    pub(crate) features: Features,
    pub(crate) clock: Clock,
    pub(crate) leaks: Leaks,
    /// Queue-delay shedding (`queue_target`).
    pub(crate) shedder: Shedder,
    pub(crate) supervisor: Supervisor,
    pub(crate) metrics: PoolMetrics,
    /// Woken whenever a closing pool's counts change.
    pub(crate) drained: Notify,
    /// Set to the instant of each `reconfigure`, so the housekeeping task re-reads the config
    /// and re-arms its timers from that instant.
    pub(crate) reconfigured: watch::Sender<Instant>,
    /// Wakes the housekeeping task when an expiry may have moved earlier.
    pub(crate) lifetime_poke: Notify,
    this: Weak<Shared<M>>,
}

impl<M: Manager> Shared<M> {
    pub(crate) fn new(config: PoolConfig, manager: M, supervisor: Supervisor) -> Arc<Self> {
        let metrics = PoolMetrics::new(&config.name);
        metrics.limits(config.init_count, config.max_count);
        let features = Features::new(&config, metrics.wait_live(), manager.idle_check_threshold());
        let shedder = Shedder::new(
            config.queue_target_in_force(),
            config.queue_interval,
            Instant::now(),
        );
        Arc::new_cyclic(|this| Shared {
            name: config.name.as_str().into(),
            hot: Hot::new(config.member_order, config.queue_max, metrics.use_live())
                .with_admission(config.admission, config.max_count, config.queue_target),
            cold: ColdLock::new(ColdState {
                engine: Cold::new(Limits::of(&config)),
                config,
                shut: false,
            }),
            features,
            clock: Clock::new(),
            leaks: Leaks::default(),
            shedder,
            metrics,
            manager,
            supervisor,
            drained: Notify::new(),
            reconfigured: watch::Sender::new(Instant::now()),
            lifetime_poke: Notify::new(),
            this: this.clone(),
        })
    }

    pub(crate) fn arc(&self) -> Arc<Self> {
        self.this
            .upgrade()
            .expect("a method of a live pool runs behind an Arc")
    }

    /// The configuration in force.
    pub(crate) fn config(&self) -> PoolConfig {
        self.cold.read(|c| c.config.clone())
    }

    /// Runs one decision through the two locks ([`ColdLock::step`]) and carries out its
    /// effects after.
    #[inline]
    pub(crate) fn step<R>(&self, f: impl FnOnce(&mut Step<'_, M>) -> R) -> R {
        let (out, effects) = self.cold.step(&self.hot, &self.clock, f);
        if !effects.is_empty() {
            self.apply(effects);
        }
        out
    }

    /// Carries out a step's effects, with no lock held.
    #[cold]
    pub(crate) fn apply(&self, effects: Effects<M::Member>) {
        let Effects {
            wake,
            starts,
            done,
            stops,
            dropped,
            drained,
            expiry,
        } = effects;
        wake.into_iter().for_each(Waker::wake);
        for held in dropped {
            held.meta.token.cancel();
        }
        if drained {
            self.notify_if_closing();
        }
        if expiry {
            self.lifetime_poke.notify_one();
        }
        for (held, why) in stops {
            match why {
                Why::Retired(reason) => {
                    tracing::debug!(pool = %self.name, member = held.meta.id, reason = reason.as_str(), "free member retired");
                    self.metrics.killed(reason, false);
                }
                Why::Replaced { reason, after_use } => {
                    tracing::debug!(pool = %self.name, member = held.meta.id, reason = reason.as_str(), "member replaced");
                    self.metrics.killed(reason, after_use);
                }
                Why::Quiet => {}
            }
            self.spawn_stop(held);
        }
        for starts in starts {
            if !starts.is_empty() {
                self.spawn_starts(starts, done.as_ref());
            }
        }
    }

    /// Wakes a close that waits for the pool to drain.
    pub(crate) fn notify_if_closing(&self) {
        self.drained.notify_waiters();
    }

    /// Takes note of a spawn's outcome: a runtime found gone closes the pool.
    pub(crate) fn spawned(&self, outcome: Result<(), RuntimeGone>) {
        if outcome.is_err() {
            self.runtime_gone();
        }
    }

    /// Spawns one start task per slot in `starts`, each holding `done` while it runs.
    pub(crate) fn spawn_starts(&self, starts: Starts, done: Option<&mpsc::Sender<()>>) {
        if starts.delay.is_zero() {
            tracing::debug!(pool = %self.name, members = starts.slots.len(), "starting members");
        } else {
            tracing::debug!(
                pool = %self.name,
                after_ms = u64::try_from(starts.delay.as_millis()).unwrap_or(u64::MAX),
                "starts are failing; the next start waits out a backoff step"
            );
        }
        for (i, (key, id)) in starts.slots.into_iter().enumerate() {
            // The slot's guard exists before the task does, so a task dropped unpolled still
            // gives the slot back.
            let token = self.supervisor.kill.child();
            let slot = StartSlot::new(self.arc(), key, id, token);
            let done = done.cloned();
            let delay = starts.delay + starts.spacing.saturating_mul(i as u32);
            let spawned = self.supervisor.spawn(async move {
                run_start::<M, _>(slot, delay).await;
                drop(done);
            });
            self.spawned(spawned);
        }
    }

    /// Stops a member made `Stopping` in its own task.
    pub(crate) fn spawn_stop(&self, held: Held<M::Member>) {
        let slot = StopSlot::new(self.arc(), held.meta.key, held.meta.token.clone());
        let spawned = self.supervisor.spawn(run_stop::<M, _>(slot, held));
        self.spawned(spawned);
    }
}
