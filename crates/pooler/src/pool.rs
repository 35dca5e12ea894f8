//! The public pool handle.

use std::fmt;
use std::future::Future;
use std::panic::Location;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::config::PoolConfig;
use crate::error::{ConfigError, TakeError};
use crate::housekeeping;
use crate::leak::Caller;
use crate::manager::Manager;
use crate::member::Member;
use crate::reconfigure::ReconfigureAction;
use crate::shared::Shared;
pub use crate::status::{Health, MemberStats, MemberStatus, Utilization};

mod observe;
use crate::supervisor::Supervisor;
use crate::take::{self, Take};

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
        if shared.is_shut() {
            return;
        }
        // With the runtime gone there is nothing left to close: no task can run, and the
        // pool closes in place.
        let spawned = self
            .shared
            .supervisor
            .spawn(async move { shared.close(false).await });
        self.shared.spawned(spawned);
        self.shared.supervisor.close_tracker();
    }
}

/// A [`Pool`] handle that does not keep the pool open ([`Pool::downgrade`]).
pub struct WeakPool<M: Manager> {
    handle: std::sync::Weak<Handle_<M>>,
}

impl<M: Manager> WeakPool<M> {
    /// The pool, if a [`Pool`] handle still holds it open.
    #[must_use]
    pub fn upgrade(&self) -> Option<Pool<M>> {
        self.handle.upgrade().map(|handle| Pool { handle })
    }
}

impl<M: Manager> Clone for WeakPool<M> {
    fn clone(&self) -> Self {
        WeakPool {
            handle: self.handle.clone(),
        }
    }
}

impl<M: Manager> fmt::Debug for WeakPool<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WeakPool")
            .field("open", &(self.handle.strong_count() > 0))
            .finish()
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
#[non_exhaustive]
pub enum Shutdown {
    /// Wait for members in use to come back, and stop each as it does.
    Graceful,
    /// Do not wait for members in use: their driver tasks end with the close, and when they
    /// come back they are dropped without `Manager::stop`.
    Immediate,
}

impl<M: Manager> Pool<M> {
    /// Starts a pool: validates `config`, starts `init_count` members in parallel (at most
    /// `max_concurrent_starts` at a time) and returns when each of those starts has ended,
    /// well or badly. A failing backend gives a pool
    /// with fewer members (which keeps retrying with backoff), not an error.
    ///
    /// # Errors
    ///
    /// The [`ConfigError`] of [`PoolConfig::validate`]; [`ConfigError::NoRuntime`] when
    /// called outside a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future closes the half-started pool; nothing leaks.
    pub async fn start(config: PoolConfig, manager: M) -> Result<Self, ConfigError> {
        let (done, mut all_done) = mpsc::channel::<()>(1);
        let pool = Self::open(config, manager, Some(&done))?;
        drop(done);
        // Every initial start task holds a sender; recv ends when the last one is done.
        let _ = all_done.recv().await;
        // With `max_concurrent_starts`, the first batch was not all of them.
        pool.shared().filled().await;
        pool.arm();
        Ok(pool)
    }

    /// Starts a pool without waiting: validates `config` and returns at once, with the
    /// `init_count` starts under way in the background (sqlx's `connect_lazy`, bb8's
    /// `build_unchecked`). For an application that builds its state before it serves: the
    /// first takes queue for the members being started, and a backend that is down shows as
    /// takes failing fast with its error, not as a failed start of the application.
    ///
    /// ```
    /// # use pooler::{Manager, MemberContext, Pool, PoolConfig};
    /// # struct Numbers;
    /// # impl Manager for Numbers {
    /// #     type Member = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn start(&self, ctx: &MemberContext) -> Result<u64, Self::Error> { Ok(ctx.member_id()) }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let pool = Pool::start_lazy(PoolConfig::new("numbers", 2, 4), Numbers).unwrap();
    /// let member = pool.take_member(std::time::Duration::from_secs(1)).await.unwrap();
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// The [`ConfigError`] of [`PoolConfig::validate`]; [`ConfigError::NoRuntime`] when
    /// called outside a tokio runtime.
    pub fn start_lazy(config: PoolConfig, manager: M) -> Result<Self, ConfigError> {
        let pool = Self::open(config, manager, None)?;
        pool.arm();
        Ok(pool)
    }

    /// A pool with its `init_count` starts under way (`done` held by each).
    fn open(
        config: PoolConfig,
        manager: M,
        done: Option<&mpsc::Sender<()>>,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let runtime = Handle::try_current().map_err(|_| ConfigError::NoRuntime {
            pool: config.name.clone(),
        })?;
        let init = config.init_count;
        let supervisor = Supervisor::new(runtime);
        let shared = Shared::new(config, manager, supervisor);
        let pool = Pool {
            handle: Arc::new(Handle_ { shared }),
        };
        pool.shared().grow(init, done);
        Ok(pool)
    }

    /// Starts the pool's housekeeping, its timers counting from now.
    fn arm(&self) {
        let shared = self.shared();
        let task = housekeeping::run(shared.clone(), Instant::now());
        shared.spawned(shared.supervisor.spawn_until_closing(task));
    }

    /// A handle that does not keep the pool open (for a task that must not outlive the
    /// application's use of the pool); [`WeakPool::upgrade`] gives a [`Pool`] while one is
    /// held somewhere.
    #[must_use]
    pub fn downgrade(&self) -> WeakPool<M> {
        WeakPool {
            handle: Arc::downgrade(&self.handle),
        }
    }

    /// Whether the pool is closed or closing: a take now fails with
    /// [`TakeError::Closed`](crate::TakeError::Closed).
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.shared().is_closing()
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
        self.shared().cold.read(|c| c.config.group.clone())
    }

    /// The configuration in force.
    #[must_use]
    pub fn config(&self) -> PoolConfig {
        self.shared().config()
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
    #[inline]
    #[doc(alias = "try_get")]
    pub fn try_take_member(&self) -> Result<Member<M>, TakeError> {
        self.take_at_once(Location::caller())
    }

    /// A take that never waits, on behalf of `caller`.
    #[inline]
    fn take_at_once(&self, caller: Caller) -> Result<Member<M>, TakeError> {
        take::at_once(self.shared(), caller)
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
    /// failing; [`TakeError::Unavailable`] at once when starts are failing and nothing can
    /// reach the taker before its deadline; [`TakeError::Closed`] or
    /// [`TakeError::RuntimeGone`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves the queue and loses no member.
    #[track_caller]
    #[doc(alias = "get")]
    #[doc(alias = "get_timeout")]
    pub fn take_member(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<Member<M>, TakeError>> + Send + '_ {
        Take::new(self.shared(), Location::caller(), Some(timeout))
    }

    /// Takes a member, waiting in the pool's FIFO queue for as long as the config's
    /// `take_timeout` says — by default until one is served, the pool closes, or the take is
    /// refused (a full queue, a pool that cannot serve it). No timer is armed for a take
    /// without a deadline.
    ///
    /// # Errors
    ///
    /// As [`take_member`](Pool::take_member); with no `take_timeout`, never
    /// [`TakeError::Timeout`] and, since a start always comes within an unbounded wait,
    /// never [`TakeError::Unavailable`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves the queue and loses no member.
    #[track_caller]
    #[doc(alias = "get")]
    pub fn take(&self) -> impl Future<Output = Result<Member<M>, TakeError>> + Send + '_ {
        let timeout = self.shared().features.take_timeout();
        Take::new(self.shared(), Location::caller(), timeout)
    }

    /// Takes a member (as [`take_member`](Pool::take_member)), runs `f` on it and returns it.
    ///
    /// If `f` panics, or this future is dropped while `f` runs, the member is treated as
    /// crashed: replaced, never handed to another consumer half-used.
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
    /// Cancelling while queued is as `take_member`; cancelling while `f` runs replaces the
    /// member.
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
