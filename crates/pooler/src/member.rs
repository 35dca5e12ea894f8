//! The guard that gives one consumer exclusive use of a member.
//!
//! The guard holds its pool's state ([`Shared`]) and goes back through its return methods
//! (`checkout/give_back.rs`): a concrete type, so the return's fast path is inlined into the
//! guard's drop. It reads nothing of the state but through those methods.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use tokio::time::Instant;

use crate::held::Held;
use crate::manager::Manager;
use crate::shared::Shared;

/// How a member comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Returned normally: back to the oldest waiter or the free list.
    Ok,
    /// `Member::fail` or a failed check or recycle: replaced.
    Failed,
    /// Its holder panicked or was cancelled mid-use: destroyed and replaced.
    Crashed,
}

/// Who holds a member's guard, which decides what its return means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A consumer took it: its return is asked `needs_recycle`, and a removal then is a
    /// `killed_in_use`.
    Taken,
    /// The pool claimed it free for a health or idle check: a removal is a `killed_free`.
    Checked,
    /// The pool's recycle task holds it after a consumer gave it back: a removal is a
    /// `killed_in_use`, and it is not recycled again.
    Recycled,
}

/// Exclusive use of one member, for as long as the guard lives.
///
/// Dereferences to the member. Dropping it returns the member to its pool (to the oldest
/// waiter, or the free list). [`Member::fail`] instead destroys it and starts a replacement,
/// as does dropping the guard while panicking (pooler's consumer crash). Ownership makes a
/// double return or a use after return impossible.
///
/// The helpers are associated functions (`Member::fail(m)`), so they never shadow the
/// member's own methods.
#[must_use = "dropping the guard returns the member at once"]
pub struct Member<M: Manager> {
    home: Arc<Shared<M>>,
    held: Option<Held<M::Member>>,
    /// Set while a `with_member` closure or a pool hook runs: dropped in that state means
    /// cancelled mid-use.
    mid_use: bool,
    origin: Origin,
    /// The hold is timed for the use histogram and stands for this many (0: not timed).
    timed: u32,
}

impl<M: Manager> Member<M> {
    #[inline]
    pub(crate) fn new(
        home: Arc<Shared<M>>,
        held: Held<M::Member>,
        origin: Origin,
        timed: u32,
    ) -> Self {
        Member {
            home,
            held: Some(held),
            mid_use: false,
            origin,
            timed,
        }
    }

    fn held(&self) -> &Held<M::Member> {
        self.held
            .as_ref()
            .expect("a guard holds its member until it is dropped")
    }

    fn give_back(&mut self, fate: Fate) {
        if let Some(held) = self.held.take() {
            self.home.give_back(held, fate, self.origin, self.timed);
        }
    }

    /// Destroys the member and starts a replacement (pooler's `return_member(P, M, fail)`):
    /// use it when the member is in a state you cannot trust.
    pub fn fail(mut this: Self) {
        this.give_back(Fate::Failed);
    }

    /// Takes the member out of the pool for good: the pool forgets it (its slot is free and a
    /// replacement starts if the pool needs one), and it is yours to keep or drop; it is
    /// never stopped by the pool, and `Manager::stop` is not called.
    ///
    /// A member whose manager spawns tasks through
    /// [`MemberContext`](crate::MemberContext) (a connection's driver) keeps them, and they
    /// still end when the pool closes: detach such a member only for a use that ends before
    /// the pool does.
    ///
    /// ```
    /// # use pooler::{Manager, Member, MemberContext, Pool, PoolConfig};
    /// # struct Numbers;
    /// # impl Manager for Numbers {
    /// #     type Member = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn start(&self, ctx: &MemberContext) -> Result<u64, Self::Error> { Ok(ctx.member_id()) }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let pool = Pool::start(PoolConfig::new("numbers", 1, 1), Numbers).await.unwrap();
    /// let kept: u64 = Member::detach(pool.try_take_member().unwrap());
    /// assert_eq!(pool.utilization().in_use_count, 0);
    /// # }
    /// ```
    #[must_use = "the detached member is dropped at once if not kept"]
    pub fn detach(mut this: Self) -> M::Member {
        let held = this
            .held
            .take()
            .expect("a guard holds its member until it is dropped");
        this.home.detach(&held.meta, this.origin);
        held.value
    }

    /// Destroys the member as crashed (a hook cut short mid-use).
    pub(crate) fn crash(mut this: Self) {
        this.give_back(Fate::Crashed);
    }

    /// The member's id, unique within its pool (as in [`MemberStats`](crate::MemberStats)).
    #[must_use]
    pub fn id(this: &Self) -> u64 {
        this.held().meta.id
    }

    /// The name of the pool the member belongs to (and goes back to).
    #[must_use]
    pub fn pool_name(this: &Self) -> &str {
        this.home.pool_name()
    }

    /// When the member was handed to this holder: exact when the pool reads the clock at
    /// take (a `max_lifetime`, `idle_check_threshold` or leak threshold is set, or the hold is
    /// timed for the use histogram), otherwise to within the pool's 100 ms clock tick.
    #[must_use]
    pub fn taken_at(this: &Self) -> Instant {
        this.home.instant(this.held().meta.since())
    }

    pub(crate) fn set_mid_use(&mut self, mid_use: bool) {
        self.mid_use = mid_use;
    }

    /// Says who holds the member now.
    pub(crate) fn set_origin(&mut self, origin: Origin) {
        self.origin = origin;
    }
}

impl Origin {
    /// A consumer holds it.
    pub(crate) fn taken(self) -> bool {
        self == Origin::Taken
    }
}

impl<M: Manager> Deref for Member<M> {
    type Target = M::Member;

    #[inline]
    fn deref(&self) -> &M::Member {
        &self.held().value
    }
}

impl<M: Manager> DerefMut for Member<M> {
    #[inline]
    fn deref_mut(&mut self) -> &mut M::Member {
        &mut self
            .held
            .as_mut()
            .expect("a guard holds its member until it is dropped")
            .value
    }
}

impl<M: Manager> Drop for Member<M> {
    #[inline]
    fn drop(&mut self) {
        let fate = if self.mid_use || std::thread::panicking() {
            Fate::Crashed
        } else {
            Fate::Ok
        };
        self.give_back(fate);
    }
}

impl<M: Manager> fmt::Debug for Member<M>
where
    M::Member: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Member")
            .field("pool", &self.home.pool_name())
            .field("id", &self.held.as_ref().map(|h| h.meta.id))
            .field("member", &self.held.as_ref().map(|h| &h.value))
            .finish()
    }
}

/// The guard sends commands through its member, so `query_async(&mut member)` and
/// [`AsyncCommands`](redis::AsyncCommands) work on it as on the connection.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
impl<M: Manager> redis::aio::ConnectionLike for Member<M>
where
    M::Member: redis::aio::ConnectionLike,
{
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        (**self).req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        (**self).req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        (**self).get_db()
    }
}

/// A member taken from a group: exclusive use of it, and a return to the pool it came from.
#[must_use = "dropping the guard returns the member at once"]
pub struct GroupMember<M: Manager>(Member<M>);

impl<M: Manager> GroupMember<M> {
    pub(crate) fn new(member: Member<M>) -> Self {
        GroupMember(member)
    }

    /// The pool the member came from (and goes back to).
    #[must_use]
    pub fn pool_name(this: &Self) -> &str {
        Member::pool_name(&this.0)
    }

    /// Replaces the member: it is stopped and a new one started in its pool.
    pub fn fail(this: Self) {
        Member::fail(this.0);
    }

    /// The plain member guard.
    pub fn into_member(this: Self) -> Member<M> {
        this.0
    }
}

impl<M: Manager> Deref for GroupMember<M> {
    type Target = M::Member;
    fn deref(&self) -> &M::Member {
        &self.0
    }
}

impl<M: Manager> DerefMut for GroupMember<M> {
    fn deref_mut(&mut self) -> &mut M::Member {
        &mut self.0
    }
}

impl<M: Manager> fmt::Debug for GroupMember<M>
where
    M::Member: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("GroupMember").field(&self.0).finish()
    }
}
