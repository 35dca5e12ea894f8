//! A take's place in the queue, as a future: it polls its slot, and gives the place up (or
//! hands on what it was served) when dropped before it collected its outcome.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::TakeError;
use crate::held::Held;
use crate::hot::Polled;
use crate::manager::Manager;
use crate::shared::Shared;
use crate::waiters::WaitKey;

/// A queued take. Dropped while still queued, it leaves the queue; a member already handed
/// to it goes on to the next waiter or the free list.
pub(super) struct Waiting<'a, M: Manager> {
    pub(super) shared: &'a Shared<M>,
    pub(super) key: WaitKey,
    /// The deadline the housekeeping tick watches for this take (a clock stamp), or
    /// `NO_END` when a timer of its own does, or there is none.
    pub(super) until: u64,
    pub(super) done: bool,
}

impl<M: Manager> Future for Waiting<'_, M> {
    type Output = Polled<Held<M::Member>, TakeError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let polled = self.shared.hot.poll(self.key, cx, self.until);
        if let Poll::Ready(Polled::Served(_)) = polled {
            self.done = true;
        }
        polled
    }
}

impl<M: Manager> Drop for Waiting<'_, M> {
    fn drop(&mut self) {
        if !self.done {
            self.shared.give_up(self.key);
        }
    }
}
