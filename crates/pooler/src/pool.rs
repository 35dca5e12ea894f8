//! The public pool handle.

use std::fmt;
use std::future::Future;
use std::panic::Location;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::config::PoolConfig;
use crate::engine::{Caller, Empty, Status};
use crate::error::{ConfigError, TakeError};
use crate::health::{self, Hook};
use crate::lifetime;
use crate::manager::Manager;
use crate::member::Member;
use crate::reconfigure::ReconfigureAction;
use crate::shared::{Shared, Waiting};
use crate::supervisor::Supervisor;
use crate::timer::{self, Periodic};

/// A pool of members of one [`Manager`].
///
/// A cheap `Clone` handle: every clone is the same pool. When the last handle is dropped the
/// pool closes itself as [`Shutdown::Immediate`] in the background; call
/// [`close`](Pool::close) to wait for that.
pub struct Pool<M: Manager> {
    handle: Arc<Handle_<M>>,
}

/// Closes the pool when the last [`Pool`] handle goes.
struct Handle_<M: Manager> {
    shared: Arc<Shared<M>>,
}

impl<M: Manager> Drop for Handle_<M> {
    fn drop(&mut self) {
        let shared = self.shared.clone();
        if shared.lock().shut {
            return;
        }
        self.shared
            .supervisor
            .spawn(async move { shared.close(false).await });
        self.shared.supervisor.close_tracker();
    }
}

impl<M: Manager> Clone for Pool<M> {
    fn clone(&self) -> Self {
        Pool {
            handle: self.handle.clone(),
        }
    }
}

impl<M: Manager> fmt::Debug for Pool<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("name", &self.name())
            .field("utilization", &self.utilization())
            .finish()
    }
}

/// How [`Pool::close`] treats members that are in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shutdown {
    /// Wait for members in use to come back, and stop each as it does.
    Graceful,
    /// Do not wait for members in use: their driver tasks end with the close, and when they
    /// come back they are dropped without `Manager::stop`.
    Immediate,
}

/// A snapshot of a pool's counts (pooler's `pool_utilization`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Utilization {
    /// The cap on members in use, free, starting and stopping together.
    pub max_count: usize,
    /// Members held by consumers (or on their way to a waiter).
    pub in_use_count: usize,
    /// Members ready to be taken.
    pub free_count: usize,
    /// Starts in progress (including one waiting out a backoff).
    pub starting_count: usize,
    /// Stops in progress; they count against `max_count` until they end.
    pub stopping_count: usize,
    /// Takers waiting in the queue.
    pub queued_count: usize,
    /// The queue's limit.
    pub queue_max: usize,
}

/// Where a member is, in [`MemberStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemberStatus {
    /// Ready to be taken.
    Free,
    /// Held by a consumer.
    InUse,
    /// Being stopped.
    Stopping,
}

/// One member, as [`Pool::stats`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemberStats {
    /// The member's id, unique within the pool.
    pub id: u64,
    /// Where it is.
    pub status: MemberStatus,
    /// When it entered that status.
    pub since: Instant,
    /// When its `max_lifetime` ends, if the pool has one.
    pub expires_at: Option<Instant>,
}

impl<M: Manager> Pool<M> {
    /// Starts a pool: validates `config`, starts `init_count` members in parallel and returns
    /// when each of those starts has ended, well or badly. A failing backend gives a pool
    /// with fewer members (which keeps retrying with backoff), not an error.
    ///
    /// # Errors
    ///
    /// The [`ConfigError`] of [`PoolConfig::validate`].
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future closes the half-started pool; nothing leaks.
    pub async fn start(config: PoolConfig, manager: M) -> Result<Self, ConfigError> {
        config.validate()?;
        let init = config.init_count;
        let supervisor = Supervisor::new(Handle::current());
        let shared = Shared::new(config, manager, supervisor);
        let pool = Pool {
            handle: Arc::new(Handle_ { shared }),
        };
        let shared = pool.shared();
        let (done, mut all_done) = mpsc::channel::<()>(1);
        let starts = shared.lock().engine.grow(init, Instant::now());
        shared.spawn_starts(starts, Some(&done));
        drop(done);
        // Every initial start task holds a sender; recv ends when the last one is done.
        let _ = all_done.recv().await;
        let shared = &pool.handle.shared;
        let origin = Instant::now();
        let supervisor = &shared.supervisor;
        supervisor.spawn_until_closing(lifetime::run(shared.clone()));
        for job in [Periodic::Cull, Periodic::Health, Periodic::Leak] {
            supervisor.spawn_until_closing(timer::run(shared.clone(), job, origin));
        }
        Ok(pool)
    }

    fn shared(&self) -> &Arc<Shared<M>> {
        &self.handle.shared
    }

    /// The pool's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.shared().name
    }

    /// The group the pool belongs to, if any.
    #[must_use]
    pub fn group(&self) -> Option<String> {
        self.shared().lock().config.group.clone()
    }

    /// The configuration in force.
    #[must_use]
    pub fn config(&self) -> PoolConfig {
        self.shared().lock().config.clone()
    }

    /// The manager the pool was started with.
    #[must_use]
    pub fn manager(&self) -> &M {
        &self.shared().manager
    }

    /// Takes a free member without waiting (pooler's `take_member/1`).
    ///
    /// With no member free and room to grow, starts a batch of members and returns
    /// [`TakeError::AllInUse`] at once; those members serve later takes.
    ///
    /// # Errors
    ///
    /// [`TakeError::AllInUse`], [`TakeError::AtCapacity`], [`TakeError::Unavailable`] (starts
    /// are failing and none is in use) or [`TakeError::Closed`].
    #[track_caller]
    pub fn try_take_member(&self) -> Result<Member<M>, TakeError> {
        self.take_at_once(Location::caller())
    }

    /// A take that never waits, on behalf of `caller`.
    fn take_at_once(&self, caller: Caller) -> Result<Member<M>, TakeError> {
        let shared = self.shared();
        match shared.take_now(caller) {
            Ok((member, _)) => {
                shared.metrics.taken_at_once();
                Ok(member)
            }
            Err((why, state, _)) => Err(shared.empty_error(&why, &state)),
        }
    }

    /// Takes a member, waiting up to `timeout` in the pool's FIFO queue when none is free
    /// (pooler's `take_member/2`). A zero timeout never queues.
    ///
    /// A waiter is served by the next member returned or started. One that times out or is
    /// dropped never receives a member, and a member sent to it in that very moment goes back
    /// to the pool.
    ///
    /// # Errors
    ///
    /// [`TakeError::QueueFull`] at once when `queue_max` takers already wait (or
    /// [`TakeError::AllInUse`] / [`TakeError::AtCapacity`] when `queue_max` is 0);
    /// [`TakeError::Timeout`] after `timeout`, with the last start error if starts are
    /// failing; [`TakeError::Unavailable`] at once when starts are failing and no member is in
    /// use that could come back; [`TakeError::Closed`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves the queue and loses no member.
    #[track_caller]
    pub fn take_member(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<Member<M>, TakeError>> + Send + '_ {
        let caller = Location::caller();
        async move {
            if timeout.is_zero() {
                return self.take_at_once(caller);
            }
            // The instant of the first attempt that queued or had to check its member: the
            // wait and the deadline count from there, so a take served at once reads no
            // clock of its own.
            let mut started = None;
            loop {
                let member = self.take_until(&mut started, timeout, caller).await?;
                let Some(member) = member else { continue };
                self.shared().metrics.taken(started);
                return Ok(member);
            }
        }
    }

    /// One take, queueing until `timeout` after `started` (set to the instant of this
    /// attempt if it queues first). `Ok(None)`: the member failed its idle check and was
    /// replaced; take again.
    async fn take_until(
        &self,
        started: &mut Option<Instant>,
        timeout: Duration,
        caller: Caller,
    ) -> Result<Option<Member<M>>, TakeError> {
        let shared = self.shared();
        let (id, rx, now) = match self.take_or_queue(caller)? {
            Taken::Member(member, false) => return Ok(Some(member)),
            Taken::Member(member, true) => {
                // Should the check fail, the next attempt still counts from this one.
                started.get_or_insert(Member::taken_at(&member));
                return Ok(health::vet(shared, member, Hook::Check).await);
            }
            Taken::Queued(id, rx, now) => (id, rx, now),
        };
        let deadline = *started.get_or_insert(now) + timeout.min(crate::time::MAX_TIME);
        let mut waiter = Waiter {
            shared,
            id,
            rx,
            queued: true,
        };
        let outcome = tokio::time::timeout_at(deadline, &mut waiter.rx).await;
        let served = match outcome {
            Ok(served) => served,
            Err(_) if shared.cancel_waiter(id) => {
                waiter.queued = false;
                let last_start_error = shared.lock().engine.last_error().cloned();
                shared.metrics.no_member("timeout");
                return Err(TakeError::Timeout {
                    pool: shared.name.clone(),
                    waited: timeout,
                    last_start_error,
                });
            }
            // Popped from the queue in the same instant the timer fired: the hand-off (or
            // the close's error) is on its way; take it.
            Err(_) => (&mut waiter.rx).await,
        };
        waiter.queued = false;
        served
            .unwrap_or_else(|_| {
                Err(TakeError::Closed {
                    pool: shared.name.clone(),
                })
            })
            .map(Some)
    }

    /// A free member (and whether it needs its idle check), or a place in the queue (the
    /// hand-off channel is made only then, so the fast path allocates nothing).
    fn take_or_queue(&self, caller: Caller) -> Result<Taken<M>, TakeError> {
        let shared = self.shared();
        let (why, mut state, now) = match shared.take_now(caller) {
            Ok((member, check)) => return Ok(Taken::Member(member, check)),
            Err(empty) => empty,
        };
        if matches!(why, Empty::Closed | Empty::Unavailable) {
            return Err(shared.empty_error(&why, &state));
        }
        let (tx, rx) = oneshot::channel();
        match state.engine.enqueue(Waiting { tx, caller }) {
            Ok(id) => Ok(Taken::Queued(id, rx, now)),
            Err(_) => {
                let queue_max = state.engine.limits().queue_max;
                if queue_max == 0 {
                    return Err(shared.empty_error(&why, &state));
                }
                drop(state);
                shared.metrics.no_member("queue_full");
                tracing::debug!(pool = %shared.name, queue_max, "queue full; take refused");
                Err(TakeError::QueueFull {
                    pool: shared.name.clone(),
                    queue_max,
                })
            }
        }
    }

    /// Takes a member (as [`take_member`](Pool::take_member)), runs `f` on it and returns it.
    ///
    /// If `f` panics, or this future is dropped while `f` runs, the member is treated as
    /// crashed: destroyed and replaced, never handed to another consumer half-used.
    ///
    /// ```
    /// # use pooler::{Manager, MemberContext, Pool, PoolConfig};
    /// # struct Numbers;
    /// # impl Manager for Numbers {
    /// #     type Member = Vec<u32>;
    /// #     type Error = std::io::Error;
    /// #     async fn start(&self, _: &MemberContext) -> Result<Vec<u32>, Self::Error> { Ok(vec![]) }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let pool = Pool::start(PoolConfig::new("numbers", 1, 1), Numbers).await.unwrap();
    /// let len = pool
    ///     .with_member(std::time::Duration::from_secs(1), async |v: &mut Vec<u32>| {
    ///         v.push(7);
    ///         v.len()
    ///     })
    ///     .await
    ///     .unwrap();
    /// assert_eq!(len, 1);
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`take_member`](Pool::take_member).
    ///
    /// # Cancel safety
    ///
    /// Cancelling while queued is as `take_member`; cancelling while `f` runs destroys and
    /// replaces the member.
    #[track_caller]
    pub fn with_member<T, F>(
        &self,
        timeout: Duration,
        f: F,
    ) -> impl Future<Output = Result<T, TakeError>>
    where
        F: AsyncFnOnce(&mut M::Member) -> T,
    {
        let take = self.take_member(timeout);
        async move {
            let mut member = take.await?;
            member.set_mid_use(true);
            let out = f(&mut member).await;
            member.set_mid_use(false);
            Ok(out)
        }
    }

    /// Applies a full new configuration at runtime (pooler's `pool_reconfigure/2`) and says
    /// what it did, in pooler's order: set parameters, start members (`init_count` up), stop
    /// free members (`max_count` down), refuse the oldest waiters beyond a lower `queue_max`,
    /// re-arm the cull timer (turning culling on from 0 included), cull, recompute expiries,
    /// leave and join groups, switch the member order.
    ///
    /// The change is atomic: a rejected config changes nothing.
    ///
    /// # Errors
    ///
    /// What [`PoolConfig::validate`] rejects; [`ConfigError::NameChanged`];
    /// [`ConfigError::NotEnoughFree`] when a lower `max_count` would need more free members
    /// stopped than there are; [`ConfigError::Closed`].
    pub fn reconfigure(&self, config: PoolConfig) -> Result<Vec<ReconfigureAction>, ConfigError> {
        self.shared().reconfigure(config)
    }

    /// Runs one cull now, as the cull timer would.
    pub fn cull(&self) {
        self.shared().cull();
    }

    /// The pool's counts now.
    #[must_use]
    pub fn utilization(&self) -> Utilization {
        let state = self.shared().lock();
        let c = state.engine.counts();
        let limits = state.engine.limits();
        Utilization {
            max_count: limits.max_count,
            in_use_count: c.in_use,
            free_count: c.free,
            starting_count: c.starting,
            stopping_count: c.stopping,
            queued_count: c.queued,
            queue_max: limits.queue_max,
        }
    }

    /// One row per member, by id.
    #[must_use]
    pub fn stats(&self) -> Vec<MemberStats> {
        let rows = self.shared().lock().engine.stats();
        rows.into_iter()
            .map(|r| MemberStats {
                id: r.id,
                status: match r.status {
                    Status::Free => MemberStatus::Free,
                    Status::InUse => MemberStatus::InUse,
                    Status::Stopping | Status::Starting => MemberStatus::Stopping,
                },
                since: r.since,
                expires_at: r.expires_at,
            })
            .collect()
    }

    /// How many of the pool's tasks (starts, stops, timers, driver tasks) are alive.
    #[must_use]
    pub fn live_tasks(&self) -> usize {
        self.shared().supervisor.live_tasks()
    }

    /// Closes the pool and waits until it is closed.
    ///
    /// New takes fail with [`TakeError::Closed`], and so do queued takers; starts in progress
    /// are cancelled; free members are stopped now. [`Shutdown::Graceful`] then waits for
    /// members in use to come back and stops them; [`Shutdown::Immediate`] does not. Either
    /// way, when this returns no task of the pool is left. Closing twice is harmless.
    ///
    /// # Cancel safety
    ///
    /// The close goes on if the future is dropped; only the waiting stops.
    pub async fn close(&self, how: Shutdown) {
        let shared = self.shared();
        shared.close(how == Shutdown::Graceful).await;
        shared.supervisor.join().await;
    }
}

/// A queued taker's end of the hand-off.
type Receiver<M> = oneshot::Receiver<Result<Member<M>, TakeError>>;

/// What one take attempt got.
enum Taken<M: Manager> {
    /// A member, and whether it must pass its idle check first.
    Member(Member<M>, bool),
    /// A place in the queue, where the member will arrive, and when it queued.
    Queued(u64, Receiver<M>, Instant),
}

/// A queued take. Dropped while still queued, it leaves the queue; a member already sent to
/// it returns to the pool when its receiver drops.
struct Waiter<'a, M: Manager> {
    shared: &'a Shared<M>,
    id: u64,
    rx: Receiver<M>,
    queued: bool,
}

impl<M: Manager> Drop for Waiter<'_, M> {
    fn drop(&mut self) {
        if self.queued {
            self.shared.cancel_waiter(self.id);
        }
    }
}
