//! The user's side of a pool: how members are started, initialized, checked and stopped.

use std::fmt;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use crate::cancel::Token;

use crate::driver::{Driver, Ended};
use crate::held::Key;
use crate::supervisor::Supervisor;

/// Starts, checks and stops the members of a pool.
///
/// Only [`start`](Manager::start) is required. Every future must be `Send`, because the
/// pool runs them in its own supervised tasks, never inside `take` or `return`.
///
/// ```
/// use pooler::{Manager, MemberContext};
///
/// struct Counter;
///
/// impl Manager for Counter {
///     type Member = u64;
///     type Error = std::io::Error;
///
///     async fn start(&self, ctx: &MemberContext) -> Result<u64, Self::Error> {
///         Ok(ctx.member_id())
///     }
/// }
/// ```
///
/// A panic in any hook counts as that hook failing (a failed start, a broken member, a
/// failed check), never as the end of the pool's schedules.
///
/// # Cancel safety
///
/// The pool drops a hook's future when its bound passes (`member_start_timeout` for
/// `start`, `initialize`, `check` and `recycle`; `member_shutdown` for `stop`) or when the
/// pool closes with starts in flight. The member (or the member being built) is then
/// dropped and never handed out: a start counts as failed, a check or recycle replaces the
/// member, a stop is done. So a hook need not leave its member usable when cancelled; it
/// must only not leave state *outside* the member behind (a registration, a lock).
pub trait Manager: Send + Sync + 'static {
    /// The pooled value: a connection, a client handle, an actor's address.
    ///
    /// The pool moves it by value at every take and return. A member of a few hundred bytes
    /// is cheaper boxed (pooler-postgres's connection is: 8 bytes moved instead of ~300).
    type Member: Send + 'static;
    /// The error of [`start`](Manager::start), [`initialize`](Manager::initialize) and
    /// [`check`](Manager::check); kept whole in [`StartError`](crate::StartError).
    type Error: std::error::Error + Send + Sync + 'static;

    /// Creates a member (pooler's `start_mfa`). A member that needs a background task (a
    /// connection driver) spawns it with [`MemberContext::spawn`]; when that task ends, the
    /// member is dead.
    ///
    /// Start and [`initialize`](Manager::initialize) together are bounded by
    /// `member_start_timeout`; past it this future is dropped.
    fn start(
        &self,
        ctx: &MemberContext,
    ) -> impl Future<Output = Result<Self::Member, Self::Error>> + Send;

    /// Prepares a started member before it is offered (pooler's `initialize_mfa`): a
    /// handshake, a login, session settings. An error stops the member. Default: nothing.
    fn initialize(
        &self,
        member: &mut Self::Member,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let _ = member;
        async { Ok(()) }
    }

    /// Takes a member down (pooler's `stop_mfa`), bounded by `member_shutdown`. The
    /// member's driver tasks are cancelled after it returns. Default: drop the member.
    fn stop(&self, member: Self::Member) -> impl Future<Output = ()> + Send {
        async move { drop(member) }
    }

    /// An active health check (a ping) of a free member; an error replaces the member.
    /// Default: always healthy.
    fn check(
        &self,
        member: &mut Self::Member,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let _ = member;
        async { Ok(()) }
    }

    /// The `idle_check_threshold` the pool uses when its configuration sets none: a member
    /// idle longer is [`check`](Manager::check)ed before a take hands it out. For a driver
    /// whose dead links nothing else finds in time — one whose sockets the manager cannot
    /// give a user timeout or keepalive probes (pooler-mysql's, on mysql_async) — so that
    /// the pool's defaults never hand out a member on a link that died while it was idle.
    /// The configuration's own threshold, when set, wins. Asked once, when the pool starts.
    /// Default: `None` (no check unless the configuration asks for one).
    fn idle_check_threshold(&self) -> Option<std::time::Duration> {
        None
    }

    /// A cheap, synchronous look at a member as it is taken and returned (a closed flag);
    /// `true` replaces it. Default: `false`.
    fn is_broken(&self, member: &Self::Member) -> bool {
        let _ = member;
        false
    }

    /// Whether a member given back in good order must go through
    /// [`recycle`](Manager::recycle) before anyone else gets it. Asked on every return, so
    /// keep it cheap. Default: `false` (returns cost nothing extra).
    fn needs_recycle(&self, member: &Self::Member) -> bool {
        let _ = member;
        false
    }

    /// Makes a returned member fit for its next consumer (a database connection rolls back a
    /// transaction its last user left open). Runs in a supervised task, bounded by
    /// `member_start_timeout`, while the member still counts as in use; an error or a timeout
    /// replaces it. Default: nothing.
    fn recycle(
        &self,
        member: &mut Self::Member,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let _ = member;
        async { Ok(()) }
    }

    /// The latency the server showed the member's last user, for the admission limit (the
    /// `admission` key; docs/design.md, "Admission"). Asked, with no lock held, every time a
    /// member comes back in good order while admission is on — so what it says covers the use
    /// that just ended, even where the pool drops the answer (it hears only the holds it
    /// times); never asked when admission is off. Default: [`Latency::Hold`], the time from
    /// take to return — which also counts what the user did between statements. A manager
    /// that sees its requests answered (pooler-postgres's stream layer) says how long the
    /// server took instead. A panic in it counts as [`Latency::Unmeasured`].
    fn latency(&self, member: &Self::Member) -> Latency {
        let _ = member;
        Latency::Hold
    }
}

/// What a member's last use says of the server's latency: the signal the admission limit
/// follows ([`Manager::latency`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Latency {
    /// The hold, from take to return, stands for it (the default).
    Hold,
    /// The server took this long per request, on average, during the last use.
    Measured(std::time::Duration),
    /// Nothing to go by (no request was answered during the use): the use is not a sample.
    Unmeasured,
    /// A request of the use was cut at its deadline (cancelled there, or abandoned
    /// unanswered): not a sample of the latency — the hold says only that it was at least
    /// so long — but a sign of overload. More than a quarter of a batch late halves the
    /// limit (docs/design.md, "Admission"), so a database too slow for the callers' budgets
    /// is not left at a limit nobody's holds measure any more.
    Late,
}

/// Receives members' death signals; implemented by the pool.
pub(crate) trait Deaths: Send + Sync {
    fn died(&self, key: Key, id: u64);
}

/// What a member being started may know about itself and its pool, and where its driver
/// tasks run.
pub struct MemberContext {
    pub(crate) pool: Arc<str>,
    pub(crate) id: u64,
    pub(crate) key: Key,
    pub(crate) supervisor: Supervisor,
    pub(crate) token: Token,
    pub(crate) deaths: Weak<dyn Deaths>,
}

impl fmt::Debug for MemberContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemberContext")
            .field("pool", &self.pool)
            .field("member_id", &self.id)
            .finish_non_exhaustive()
    }
}

impl MemberContext {
    /// The name of the pool the member belongs to (pooler's `'$pooler_pool'`).
    #[must_use]
    pub fn pool_name(&self) -> &str {
        &self.pool
    }

    /// The member's id, unique within its pool and never reused.
    #[must_use]
    pub fn member_id(&self) -> u64 {
        self.id
    }

    /// Runs a driver task for this member under the pool's supervision (a connection's I/O
    /// loop, a client's actor).
    ///
    /// When the task ends without the pool ending it — it returns, panics or is aborted —
    /// the member is dead: if free it is removed and replaced, if in use it is replaced when
    /// returned, if still starting it is never handed out. When the member is stopped or the
    /// pool closes, the task is cancelled (dropped at its next await), after
    /// [`Manager::stop`] has run.
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let watch = DeathWatch {
            token: self.token.clone(),
            deaths: self.deaths.clone(),
            key: self.key,
            id: self.id,
        };
        let pool = self.pool.clone();
        // Should the runtime be gone, the task is dropped unpolled and its watch reports the
        // death at once; the pool learns that its runtime is gone from its own next spawn.
        let driver = Driver::new(task, self.token.clone());
        let _ = self.supervisor.spawn_unpin(DriverTask {
            driver,
            watch,
            pool,
        });
    }
}

/// A member's driver task as spawned: the driver, then (when it ends) a panic logged, and
/// the death watch dropped with the future. A plain future rather than an `async` block:
/// it is polled on every message the driver passes.
struct DriverTask<F> {
    driver: Driver<F>,
    watch: DeathWatch,
    pool: Arc<str>,
}

impl<F: Future<Output = ()>> Future for DriverTask<F> {
    type Output = ();

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let ended = std::task::ready!(Pin::new(&mut this.driver).poll(cx));
        if ended == Ended::Panicked {
            tracing::error!(pool = %this.pool, member = this.watch.id, "member driver task panicked; the member is dead");
        }
        Poll::Ready(())
    }
}

/// Travels with a member's driver task: however the task ends (returning, panicking, dropped
/// by an abort or a runtime shutting down), unless the pool ended it by cancelling its token,
/// the member is reported dead.
struct DeathWatch {
    token: Token,
    deaths: Weak<dyn Deaths>,
    key: Key,
    id: u64,
}

impl Drop for DeathWatch {
    fn drop(&mut self) {
        if !self.token.is_cancelled()
            && let Some(pool) = self.deaths.upgrade()
        {
            pool.died(self.key, self.id);
        }
    }
}

/// Asks the manager's `is_broken`; a panic in it means broken (docs/design.md, "Faults in user code and in tasks").
pub(crate) fn is_broken<M: Manager>(manager: &M, member: &M::Member, pool: &str) -> bool {
    catch_unwind(AssertUnwindSafe(|| manager.is_broken(member))).unwrap_or_else(|_| {
        tracing::error!(pool = %pool, "Manager::is_broken panicked; the member counts as broken");
        true
    })
}

/// Asks the manager's `latency`; a panic in it means nothing measured (docs/design.md,
/// "Faults in user code and in tasks").
pub(crate) fn latency<M: Manager>(manager: &M, member: &M::Member, pool: &str) -> Latency {
    catch_unwind(AssertUnwindSafe(|| manager.latency(member))).unwrap_or_else(|_| {
        tracing::error!(pool = %pool, "Manager::latency panicked; the use is not a sample");
        Latency::Unmeasured
    })
}

/// What a member given back in good order needs, by the manager's `is_broken` and
/// `needs_recycle`; a panic in either means broken (docs/design.md, "Faults in user code and in
/// tasks").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Returned {
    Fit,
    Recycle,
    Broken,
}

pub(crate) fn returned<M: Manager>(
    manager: &M,
    member: &M::Member,
    pool: &str,
    ask_recycle: bool,
) -> Returned {
    // One catch for both hooks: whichever panicked, the member counts as broken.
    let asked = catch_unwind(AssertUnwindSafe(|| {
        if manager.is_broken(member) {
            Returned::Broken
        } else if ask_recycle && manager.needs_recycle(member) {
            Returned::Recycle
        } else {
            Returned::Fit
        }
    }));
    asked.unwrap_or_else(|_| {
        tracing::error!(pool = %pool, "Manager::is_broken or needs_recycle panicked; the member counts as broken");
        Returned::Broken
    })
}
