//! The hot core: the free members, the queue of waiting takers and the in-use count — all that
//! a take that finds a member, or a return that finds no waiter (or hands to one), touches.
//! No async and no I/O: one small lock, held for a few instructions, and wakers woken only
//! after it is released.
//!
//! The cold engine (starts, stops, backoff, the demand window, expiries) keeps its own lock;
//! when it must change what is here (a member started or stopped, a close, a reconfigure) it
//! takes this lock inside its own, never the other way round. A take that finds nothing free
//! asks the cold engine only when a start could follow; when the pool is *saturated* (no room
//! under `max_count` and starts are not failing) it queues or is refused right here.
//!
//! The admission limit (docs/design.md, "Admission") is one more bound here, beside the free
//! list: with `admission` on, at most `limit` members are in use, and a take over it waits in
//! this same queue — so a close, `queue_max`, a cancelled wait and a reconfigure treat it as
//! any waiter. The limiter that moves the limit lives here too, fed the holds that end.
//!
//! # Invariants
//!
//! 1. A taker waits only while no member can be handed to it — none is free, or `limit`
//!    members are in use: a member made available goes to a waiter first (no barging), so
//!    `free` and the queue are both non-empty only while `in_use >= limit`.
//! 2. At most `queue_max` takers wait (a reconfigure that lowers it sheds the oldest first).
//! 3. A closed core has no free member and no waiter, and refuses both.
//! 4. `in_use` counts the members taken out of `free` (or handed to a waiter, or claimed for a
//!    check) and not yet given back or released to be stopped; `peak` is the highest it has
//!    been since the demand window last looked.
//! 5. `limit` is the limiter's limit (`1..=max_count`) while there is one, else `usize::MAX`.
//! 6. The queue is served oldest first, except that with admission on, once it has stood
//!    (never emptied) longer than the queue target in force (`queue_target`, or derived from
//!    the limiter's baseline: `hot/limit.rs`) it is served newest first; `queued_since` is
//!    set exactly while that rule is on and the queue is not empty.

use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

use crate::admission::Limiter;
use crate::config::MemberOrder;
use crate::sync::{Mutex, MutexGuard, lock};
use crate::waiters::{Look, WaitKey, Waiters};

/// No clock stamp (stamps count nanoseconds from the pool's start: this one is centuries
/// away).
const NO_STAMP: u64 = u64::MAX;

/// What a take found; `K` is what a queued take holds ([`Wait::Key`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found<T, K = WaitKey> {
    /// A member, now in use, and whether its hold is to be timed: 0 if not, otherwise how
    /// many holds the timed one stands for (see [`State::sample`]).
    Member(T, u32),
    /// Nothing free, the pool saturated: the take waits at this key.
    Queued(K),
    /// Nothing free, the pool saturated, and the take cannot wait (or may not: `queue_max`
    /// is 0): the pool is at capacity.
    Full,
    /// Nothing free, the pool saturated, and `queue_max` (this many) takers already wait.
    QueueFull(usize),
    /// The admission limit's members (this many) are in use, and the take cannot wait (or
    /// may not: `queue_max` is 0).
    OverLimit(usize),
    Closed,
    /// Nothing free, and a start could follow: the cold engine decides.
    Cold,
}

/// What a waiting taker's look at its slot found, when not still waiting.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Polled<T, E> {
    /// Its outcome: a member or a refusal.
    Served(Result<T, E>),
    /// Still waiting, under rules that changed since it bounded its wait.
    Rearm,
}

/// Why a take could not join the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    Closed,
    QueueFull,
    /// `queue_max` is 0, or the take never waits.
    NoQueue,
}

/// The counts the cold engine needs to decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct View {
    pub(crate) in_use: usize,
    pub(crate) free: usize,
    pub(crate) queued: usize,
    /// The admission limit (`usize::MAX`: none).
    pub(crate) limit: usize,
}

impl Default for View {
    fn default() -> Self {
        View {
            in_use: 0,
            free: 0,
            queued: 0,
            limit: usize::MAX,
        }
    }
}

impl View {
    /// Members that exist and are not stopping.
    pub(crate) fn live(&self) -> usize {
        self.in_use + self.free
    }

    /// Waiters a new member could serve now: those the admission limit lets hold one (a
    /// waiter over the limit waits for a member in use to come back, not for a start).
    pub(crate) fn wanting(&self) -> usize {
        self.queued.min(self.limit.saturating_sub(self.in_use))
    }
}

#[derive(Debug)]
pub(crate) struct Hot<T, E> {
    state: Mutex<State<T, E>>,
}

#[derive(Debug)]
pub(crate) struct State<T, E> {
    /// Back: returned most recently; front: idle longest.
    free: VecDeque<T>,
    waiters: Waiters<T, E>,
    in_use: usize,
    peak: usize,
    /// When `in_use` last fell from `peak` (a clock stamp; [`NO_STAMP`]: not since the last
    /// look). A stamp rather than an `Option`, so that a return writes one word.
    peak_until: u64,
    /// The highest `peak` taken by a look ([`Locked::take_peak`]) since the last
    /// housekeeping tick: with `peak`, the highest `in_use` since that tick (for the
    /// limiter), kept without a second comparison per take.
    tick_peak: usize,
    /// With admission on, more than half the limit was in use in this tick or the last:
    /// every hold is timed (see [`Locked::sample`]).
    pressed: bool,
    /// Take attempts and takes served at once, since last flushed to the metrics.
    takes: u64,
    zero_waits: u64,
    /// Whether holds are timed for the use histogram (a recorder is installed): one hold per
    /// housekeeping tick is, standing for those since the last one. With admission on,
    /// holds are timed whatever this says (see [`Locked::sample`]).
    sample: bool,
    /// `sample`, or admission on: some holds are timed.
    timing: bool,
    /// The housekeeping tick's count, written by the tick itself.
    tick: u64,
    sampled_at: u64,
    unsampled: u32,
    order: MemberOrder,
    queue_max: usize,
    /// No room under `max_count` and starts are not failing: nothing a take could start.
    saturated: bool,
    closed: bool,
    /// Moves `limit` from the holds that end, while `admission` is on.
    limiter: Option<Limiter>,
    /// At most this many members in use (invariant 5).
    limit: usize,
    /// With admission on, the queue target in force: past it a standing queue is served
    /// newest first, and a take waits twice it at most. `queue_target` when set, else
    /// derived from the limiter's baseline (`derive_target`).
    lifo_after: Option<Duration>,
    /// Admission is on with no `queue_target`: `lifo_after` follows the limiter.
    derive_target: bool,
    /// When the queue last stopped being empty, while `lifo_after` is set (invariant 6).
    queued_since: Option<Instant>,
}

/// The hot lock, held.
pub(crate) struct Locked<'a, T, E>(MutexGuard<'a, State<T, E>>);

impl<T, E> Hot<T, E> {
    pub(crate) fn new(order: MemberOrder, queue_max: usize, sample: bool) -> Self {
        Hot {
            state: Mutex::new(State {
                free: VecDeque::new(),
                waiters: Waiters::default(),
                in_use: 0,
                peak: 0,
                peak_until: NO_STAMP,
                tick_peak: 0,
                pressed: false,
                takes: 0,
                zero_waits: 0,
                sample,
                timing: sample,
                tick: 0,
                sampled_at: u64::MAX,
                unsampled: 0,
                order,
                queue_max,
                saturated: false,
                closed: false,
                limiter: None,
                limit: usize::MAX,
                lifo_after: None,
                derive_target: false,
                queued_since: None,
            }),
        }
    }

    pub(crate) fn lock(&self) -> Locked<'_, T, E> {
        Locked(lock(&self.state))
    }

    /// A take's first look. `counted`: a new attempt (not a retry within one); `zero_wait`:
    /// a member found now is a wait of zero for the wait histogram.
    #[inline(always)]
    pub(crate) fn take<W: Wait>(
        &self,
        wait: W,
        counted: bool,
        zero_wait: bool,
    ) -> Found<T, W::Key> {
        self.lock().take(wait, counted, zero_wait)
    }

    /// A member given back in good order: to the oldest waiter, or to the free list. Hands
    /// the member back if the core is closed.
    #[inline(always)]
    pub(crate) fn give(&self, member: T, now: u64) -> Result<(), T> {
        let waker = self.lock().give(member, now)?;
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    /// A waiting taker looks at its slot: still waiting, served, or told that the rules its
    /// wait is bounded by changed (admission turned on or off) or that the end it left to be
    /// watched (`until`, a clock stamp; `NO_END`: none) is near, so it bounds it anew.
    pub(crate) fn poll(
        &self,
        key: WaitKey,
        cx: &mut Context<'_>,
        until: u64,
    ) -> Poll<Polled<T, E>> {
        match lock(&self.state).waiters.look(key, cx.waker(), until) {
            Look::Waiting => Poll::Pending,
            Look::Rearm => Poll::Ready(Polled::Rearm),
            Look::Served(outcome) => Poll::Ready(Polled::Served(outcome)),
        }
    }

    /// A waiting taker gives up: `None` if it was still waiting, or what it had been served.
    pub(crate) fn leave(&self, key: WaitKey) -> Option<Result<T, E>> {
        let mut s = lock(&self.state);
        let left = s.waiters.leave(key);
        if s.waiters.is_empty() {
            s.queued_since = None;
        }
        left
    }

    /// A waiting taker gives up, its future dropped: a member already handed to it goes on
    /// to the next waiter or the free list, as a return in good order would. One a closed core
    /// refuses comes back, still in use, to be stopped.
    pub(crate) fn give_up(&self, key: WaitKey, now: u64) -> Option<T> {
        match self.leave(key) {
            Some(Ok(member)) => self.give(member, now).err(),
            Some(Err(_)) | None => None,
        }
    }
}

impl<T, E> Locked<'_, T, E> {
    /// Invariants #1–#3, #5 and #6 in O(1); `debug_assert!`ed after every change.
    fn holds(&self) -> bool {
        let s = &*self.0;
        (s.free.is_empty() || s.waiters.is_empty() || s.in_use >= s.limit)
            && s.waiters.len() <= s.queue_max
            && (!s.closed || (s.free.is_empty() && s.waiters.is_empty()))
            && s.peak >= s.in_use
            && s.limiter.as_ref().map_or(usize::MAX, Limiter::limit) == s.limit
            && s.queued_since.is_some() == (s.lifo_after.is_some() && !s.waiters.is_empty())
    }

    pub(crate) fn view(&self) -> View {
        View {
            in_use: self.0.in_use,
            free: self.0.free.len(),
            queued: self.0.waiters.len(),
            limit: self.0.limit,
        }
    }

    #[cfg(pooler_loom)]
    pub(crate) fn is_closed(&self) -> bool {
        self.0.closed
    }

    /// The queue's limit.
    pub(crate) fn queue_max(&self) -> usize {
        self.0.queue_max
    }

    #[inline]
    fn note_in_use(&mut self) {
        let s = &mut *self.0;
        s.in_use += 1;
        s.peak = s.peak.max(s.in_use);
    }

    #[inline]
    fn note_release(&mut self, now: u64) {
        debug_assert!(
            self.0.in_use > 0,
            "invariant #4: releasing a member not in use"
        );
        if self.0.in_use == self.0.peak {
            self.0.peak_until = now;
        }
        self.0.in_use -= 1;
    }

    /// A free member, by `member_order`, now in use.
    #[inline]
    fn pop(&mut self, zero_wait: bool) -> Option<T> {
        let s = &mut *self.0;
        let member = match s.order {
            MemberOrder::Lifo => s.free.pop_back(),
            MemberOrder::Fifo => s.free.pop_front(),
        }?;
        s.zero_waits += u64::from(zero_wait);
        self.note_in_use();
        Some(member)
    }

    /// See [`Hot::take`]; also called under the cold lock.
    #[inline(always)]
    pub(crate) fn take<W: Wait>(
        &mut self,
        wait: W,
        counted: bool,
        zero_wait: bool,
    ) -> Found<T, W::Key> {
        self.0.takes += u64::from(counted);
        if self.0.closed {
            return Found::Closed;
        }
        if self.0.in_use < self.0.limit
            && let Some(member) = self.pop(zero_wait)
        {
            let timed = self.sample();
            return Found::Member(member, timed);
        }
        self.found_none(wait)
    }

    /// [`take`](Self::take) when no member may be had now: queued, refused, or for the cold
    /// engine to decide.
    #[inline]
    fn found_none<W: Wait>(&mut self, _: W) -> Found<T, W::Key> {
        let s = &mut *self.0;
        // Over the admission limit a start would not help: the take waits for a member in
        // use to come back (or is refused).
        let over = s.in_use >= s.limit;
        if !s.saturated && !over {
            return Found::Cold;
        }
        let refused = if over {
            Found::OverLimit(s.limit)
        } else {
            Found::Full
        };
        match W::join(self) {
            Ok(key) => Found::Queued(key),
            Err(Refused::QueueFull) => Found::QueueFull(self.0.queue_max),
            Err(Refused::NoQueue) => refused,
            Err(Refused::Closed) => Found::Closed,
        }
    }

    /// Joins the queue (the caller found no member it may have).
    pub(crate) fn enqueue(&mut self) -> Result<WaitKey, Refused> {
        debug_assert!(
            self.0.free.is_empty() || self.0.in_use >= self.0.limit,
            "invariant #1: queueing beside a free member under the limit"
        );
        let s = &mut *self.0;
        if s.closed {
            Err(Refused::Closed)
        } else if s.queue_max == 0 {
            Err(Refused::NoQueue)
        } else if s.waiters.len() >= s.queue_max {
            Err(Refused::QueueFull)
        } else {
            if s.lifo_after.is_some() && s.waiters.is_empty() {
                s.queued_since = Some(Instant::now());
            }
            let key = s.waiters.push();
            debug_assert!(self.holds());
            Ok(key)
        }
    }

    /// Hands `member` to a waiter — the oldest, or the newest once a standing queue has
    /// passed `lifo_after` (invariant 6) — and its waker; the member back if none waits.
    fn serve(&mut self, member: T) -> Result<Option<Waker>, T> {
        let s = &mut *self.0;
        let newest = match (s.lifo_after, s.queued_since) {
            (Some(after), Some(since)) => Instant::now().saturating_duration_since(since) > after,
            _ => false,
        };
        let served = if newest {
            s.waiters.serve_newest(Ok(member))
        } else {
            s.waiters.serve_oldest(Ok(member))
        };
        if s.waiters.is_empty() {
            s.queued_since = None;
        }
        match served {
            Ok(waker) => Ok(waker),
            Err(Ok(member)) => Err(member),
            Err(Err(_)) => unreachable!("a member was offered"),
        }
    }

    /// A member in use given back in good order: to a waiter while the limit allows, or to
    /// the free list. Returns the waker to wake once the lock is released, or the member if
    /// closed.
    #[inline]
    pub(crate) fn give(&mut self, member: T, now: u64) -> Result<Option<Waker>, T> {
        if self.0.closed {
            return Err(member);
        }
        // The common case first: no waiter, so no outcome to build. Over the limit (it was
        // lowered), the member goes free and its place is not handed on.
        if self.0.waiters.is_empty() || self.0.in_use > self.0.limit {
            self.note_release(now);
            self.0.free.push_back(member);
            debug_assert!(self.holds());
            return Ok(None);
        }
        let waker = match self.serve(member) {
            Ok(waker) => waker,
            Err(member) => {
                self.note_release(now);
                self.0.free.push_back(member);
                None
            }
        };
        debug_assert!(self.holds());
        Ok(waker)
    }

    /// The wakers of the waiting takers whose deadline (as they left it) is `by` (a clock
    /// stamp) or sooner, each told once to arm a timer of its own.
    pub(crate) fn due(&mut self, by: u64) -> Vec<Waker> {
        self.0.waiters.due(by)
    }
}

mod lifecycle;
mod limit;
pub(crate) mod wait;

pub(crate) use limit::Judged;
pub(crate) use wait::Wait;

#[cfg(all(test, not(pooler_loom)))]
mod tests;

#[cfg(all(test, pooler_loom))]
mod loom_models;
