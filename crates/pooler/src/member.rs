//! The guard that gives one consumer exclusive use of a member.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use tokio::time::Instant;

use crate::engine::Key;
use crate::manager::Manager;
use crate::shared::{Fate, Held, Shared};

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
    shared: Arc<Shared<M>>,
    key: Key,
    id: u64,
    held: Option<Held<M::Member>>,
    taken_at: Instant,
    /// Set while a `with_member` closure runs: dropped in that state means cancelled mid-use.
    mid_use: bool,
    /// Held by the pool's recycle task: on return, skip recycling.
    recycling: bool,
}

impl<M: Manager> Member<M> {
    pub(crate) fn new(
        shared: Arc<Shared<M>>,
        key: Key,
        held: Held<M::Member>,
        taken_at: Instant,
    ) -> Self {
        Member {
            shared,
            key,
            id: held.id,
            held: Some(held),
            taken_at,
            mid_use: false,
            recycling: false,
        }
    }

    /// Destroys the member and starts a replacement (pooler's `return_member(P, M, fail)`):
    /// use it when the member is in a state you cannot trust.
    pub fn fail(mut this: Self) {
        if let Some(held) = this.held.take() {
            this.shared
                .give_back(this.key, held, Fate::Failed, this.taken_at, this.recycling);
        }
    }

    /// The member's id, unique within its pool (as in [`MemberStats`](crate::MemberStats)).
    #[must_use]
    pub fn id(this: &Self) -> u64 {
        this.id
    }

    /// The name of the pool the member belongs to (and goes back to).
    #[must_use]
    pub fn pool_name(this: &Self) -> &str {
        &this.shared.name
    }

    /// When the member was handed to this holder.
    #[must_use]
    pub fn taken_at(this: &Self) -> Instant {
        this.taken_at
    }

    pub(crate) fn set_mid_use(&mut self, mid_use: bool) {
        self.mid_use = mid_use;
    }

    /// Marks the guard as the pool's own, held while the member is recycled.
    pub(crate) fn set_recycling(&mut self) {
        self.recycling = true;
    }

    /// Empties the guard without returning the member (a hand-off the waiter refused).
    pub(crate) fn detach(&mut self) -> Held<M::Member> {
        self.held
            .take()
            .expect("a guard holds its member until it is dropped")
    }
}

impl<M: Manager> Deref for Member<M> {
    type Target = M::Member;

    fn deref(&self) -> &M::Member {
        &self
            .held
            .as_ref()
            .expect("a guard holds its member until it is dropped")
            .value
    }
}

impl<M: Manager> DerefMut for Member<M> {
    fn deref_mut(&mut self) -> &mut M::Member {
        &mut self
            .held
            .as_mut()
            .expect("a guard holds its member until it is dropped")
            .value
    }
}

impl<M: Manager> Drop for Member<M> {
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            let fate = if self.mid_use || std::thread::panicking() {
                Fate::Crashed
            } else {
                Fate::Ok
            };
            self.shared
                .give_back(self.key, held, fate, self.taken_at, self.recycling);
        }
    }
}

impl<M: Manager> fmt::Debug for Member<M>
where
    M::Member: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Member")
            .field("pool", &self.shared.name)
            .field("id", &self.id)
            .field("member", &self.held.as_ref().map(|h| &h.value))
            .finish()
    }
}
