//! The hot core as the lifecycle sees it: members started and members leaving use, members
//! claimed to be stopped or checked, the close, the waiters shed by a lowered `queue_max`,
//! the limits a reconfigure sets, and the peak and counts the gauges read.

use std::task::Waker;

use super::{Locked, NO_STAMP};
use crate::config::MemberOrder;

impl<T, E> Locked<'_, T, E> {
    /// A member that has just started: to a waiter while the limit allows, or to the free
    /// list.
    pub(crate) fn admit(&mut self, member: T) -> Result<Option<Waker>, T> {
        if self.0.closed {
            return Err(member);
        }
        let waker = if self.0.in_use < self.0.limit {
            match self.serve(member) {
                Ok(waker) => {
                    self.note_in_use();
                    waker
                }
                Err(member) => {
                    self.0.free.push_back(member);
                    None
                }
            }
        } else {
            self.0.free.push_back(member);
            None
        };
        debug_assert!(self.holds());
        Ok(waker)
    }

    /// A member in use leaves the pool's use to be stopped. Its place under the limit goes
    /// to a waiter if a member is free for it: that waiter's waker.
    pub(crate) fn release(&mut self, now: u64) -> Option<Waker> {
        self.note_release(now);
        let mut wakers = Vec::new();
        self.hand_free(&mut wakers);
        debug_assert!(self.holds());
        wakers.pop()
    }

    /// Takes the first free member that `pick` chooses (oldest idle first) off the free list,
    /// to be stopped: it is no longer free, and not in use.
    pub(crate) fn claim(&mut self, pick: impl Fn(&T) -> bool) -> Option<T> {
        let at = self.0.free.iter().position(pick)?;
        self.0.free.remove(at)
    }

    /// Takes the member idle longest for a health check, if `pick` accepts it: it counts as
    /// in use (so no take gets it) but adds no demand.
    pub(crate) fn claim_for_check(&mut self, pick: impl Fn(&T) -> bool) -> Option<T> {
        if !self.0.free.front().is_some_and(pick) {
            return None;
        }
        let member = self.0.free.pop_front();
        self.0.in_use += 1;
        self.0.peak = self.0.peak.max(self.0.in_use);
        debug_assert!(self.holds());
        member
    }

    /// Closes the core: no more takes. The free members come back (to be stopped) and every
    /// waiter is served `error()`; their wakers come back to be woken after the lock.
    pub(crate) fn close(&mut self, mut error: impl FnMut() -> E) -> (Vec<T>, Vec<Waker>) {
        self.0.closed = true;
        let free: Vec<T> = self.0.free.drain(..).collect();
        let mut wakers = Vec::new();
        while !self.0.waiters.is_empty() {
            if let Ok(Some(waker)) = self.0.waiters.serve_oldest(Err(error())) {
                wakers.push(waker);
            }
        }
        self.0.queued_since = None;
        debug_assert!(self.holds());
        (free, wakers)
    }

    /// Serves the oldest waiters beyond `keep` with `error()` (`queue_max` lowered to `keep`).
    pub(crate) fn shed(
        &mut self,
        keep: usize,
        mut error: impl FnMut() -> E,
    ) -> (usize, Vec<Waker>) {
        let shed = self.0.waiters.len().saturating_sub(keep);
        let mut wakers = Vec::new();
        for _ in 0..shed {
            if let Ok(Some(waker)) = self.0.waiters.serve_oldest(Err(error())) {
                wakers.push(waker);
            }
        }
        if self.0.waiters.is_empty() {
            self.0.queued_since = None;
        }
        (shed, wakers)
    }

    /// New limits from a reconfigure (the caller has shed the waiters beyond `queue_max`).
    pub(crate) fn set_limits(&mut self, order: MemberOrder, queue_max: usize) {
        self.0.order = order;
        self.0.queue_max = queue_max;
        debug_assert!(self.holds(), "invariant #2: shed the excess waiters first");
    }

    /// Whether a take that finds nothing free may be decided here (set by the cold engine
    /// whenever room or the start policy changes).
    pub(crate) fn set_saturated(&mut self, saturated: bool) {
        self.0.saturated = saturated;
    }

    /// The highest in-use count since the last look, and when the count last fell from it
    /// (`None`: it is still there); the next look starts from the count now.
    pub(crate) fn take_peak(&mut self) -> (usize, Option<u64>) {
        let s = &mut *self.0;
        let peak = std::mem::replace(&mut s.peak, s.in_use);
        s.tick_peak = s.tick_peak.max(peak);
        let until = std::mem::replace(&mut s.peak_until, NO_STAMP);
        (peak, (until != NO_STAMP).then_some(until))
    }

    /// Take attempts and takes served at once since the last call.
    pub(crate) fn take_counts(&mut self) -> (u64, u64) {
        (
            std::mem::take(&mut self.0.takes),
            std::mem::take(&mut self.0.zero_waits),
        )
    }

    /// The free members, idle longest first.
    pub(crate) fn free(&self) -> impl Iterator<Item = &T> {
        self.0.free.iter()
    }
}
