//! The queue of waiting takers: a list of slots linked by index in a slab, served oldest
//! first (or newest first, on request), so a taker joins, leaves (timed out or dropped) and
//! is served in O(1), with no allocation once the slab has grown to the queue's high-water
//! mark.
//!
//! # Invariants
//!
//! 1. Every slot is either *waiting* — linked into the list, `len` of them, oldest at `head` —
//!    or *served* — out of the list, holding its outcome until its taker collects it or gives
//!    it up. Only its taker removes a slot from the slab.
//! 2. The links are consistent: following `next` from `head` visits exactly the waiting slots
//!    and ends at `tail`; `prev` mirrors `next`.
//! 3. A waiting slot is marked *rearm* from a change of the rules its taker bounded its wait
//!    by ([`rearm`](Waiters::rearm): admission turned on or off), or from the moment its wait's
//!    end comes near ([`due`](Waiters::due)), until its taker next looks: that look says so,
//!    once. A slot's `until` is the end its taker left with its last look ([`NO_END`]: none
//!    to watch for), and is `NO_END` once `due` has marked it; no waiting slot's `until` is
//!    earlier than `earliest`, so a `due` by an earlier instant need not look.

use std::task::Waker;

use slab::Slab;

/// A taker's place: its slot, and a ticket that tells it from a later taker in the same slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WaitKey {
    index: usize,
    ticket: u64,
}

#[derive(Debug)]
enum Slot<T, E> {
    Waiting {
        ticket: u64,
        prev: Option<usize>,
        next: Option<usize>,
        waker: Option<Waker>,
        rearm: bool,
        /// The end its taker watches for through [`due`](Waiters::due), as a clock stamp.
        until: u64,
    },
    Served {
        ticket: u64,
        outcome: Result<T, E>,
    },
}

impl<T, E> Slot<T, E> {
    fn ticket(&self) -> u64 {
        match self {
            Slot::Waiting { ticket, .. } | Slot::Served { ticket, .. } => *ticket,
        }
    }
}

/// A slot's `until` when its taker watches for no end through [`Waiters::due`].
pub(crate) const NO_END: u64 = u64::MAX;

/// What a taker finds when it looks at its slot.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Look<T, E> {
    Waiting,
    /// Still waiting, and the rules the wait was bounded by changed since the last look.
    Rearm,
    Served(Result<T, E>),
}

#[derive(Debug)]
pub(crate) struct Waiters<T, E> {
    slots: Slab<Slot<T, E>>,
    head: Option<usize>,
    tail: Option<usize>,
    len: usize,
    next_ticket: u64,
    /// No waiting slot's `until` is earlier (it may be earlier than any: a slot served or
    /// left since keeps it low until the next [`due`](Waiters::due) looks).
    earliest: u64,
}

impl<T, E> Default for Waiters<T, E> {
    fn default() -> Self {
        Waiters {
            slots: Slab::new(),
            head: None,
            tail: None,
            len: 0,
            next_ticket: 0,
            earliest: NO_END,
        }
    }
}

impl<T, E> Waiters<T, E> {
    /// Takers waiting (not yet served).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Joins the back of the queue.
    pub(crate) fn push(&mut self) -> WaitKey {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let index = self.slots.insert(Slot::Waiting {
            ticket,
            prev: self.tail,
            next: None,
            waker: None,
            rearm: false,
            until: NO_END,
        });
        match self.tail {
            Some(tail) => self.set_next(tail, Some(index)),
            None => self.head = Some(index),
        }
        self.tail = Some(index);
        self.len += 1;
        WaitKey { index, ticket }
    }

    fn set_next(&mut self, at: usize, to: Option<usize>) {
        if let Slot::Waiting { next, .. } = &mut self.slots[at] {
            *next = to;
        }
    }

    fn set_prev(&mut self, at: usize, to: Option<usize>) {
        if let Slot::Waiting { prev, .. } = &mut self.slots[at] {
            *prev = to;
        }
    }

    /// Takes a waiting slot out of the list (it stays in the slab), returning its waker.
    fn unlink(&mut self, index: usize) -> Option<Waker> {
        let Slot::Waiting {
            prev, next, waker, ..
        } = &mut self.slots[index]
        else {
            unreachable!("only waiting slots are linked")
        };
        let (prev, next, waker) = (*prev, *next, waker.take());
        match prev {
            Some(p) => self.set_next(p, next),
            None => self.head = next,
        }
        match next {
            Some(n) => self.set_prev(n, prev),
            None => self.tail = prev,
        }
        self.len -= 1;
        waker
    }

    /// Serves the oldest waiter with `outcome`; gives the outcome back if none waits. The
    /// waker to wake (after the lock is released) comes back with it.
    pub(crate) fn serve_oldest(
        &mut self,
        outcome: Result<T, E>,
    ) -> Result<Option<Waker>, Result<T, E>> {
        self.serve(self.head, outcome)
    }

    /// Serves the newest waiter with `outcome` (last in, first out, for a queue that stays
    /// long: docs/design.md, "Admission"); as [`Waiters::serve_oldest`] otherwise.
    pub(crate) fn serve_newest(
        &mut self,
        outcome: Result<T, E>,
    ) -> Result<Option<Waker>, Result<T, E>> {
        self.serve(self.tail, outcome)
    }

    /// Serves the waiter at `index` (none: nobody waits).
    fn serve(
        &mut self,
        index: Option<usize>,
        outcome: Result<T, E>,
    ) -> Result<Option<Waker>, Result<T, E>> {
        let Some(index) = index else {
            return Err(outcome);
        };
        let waker = self.unlink(index);
        let ticket = self.slots[index].ticket();
        self.slots[index] = Slot::Served { ticket, outcome };
        Ok(waker)
    }

    /// Looks at a taker's slot: still waiting (its waker is kept), or served (the slot is
    /// freed and the outcome handed over).
    /// A taker looks at its slot, leaving its waker and the end it watches for (`until`, a
    /// clock stamp, or [`NO_END`]).
    pub(crate) fn look(&mut self, key: WaitKey, waker: &Waker, until: u64) -> Look<T, E> {
        debug_assert_eq!(
            self.slots[key.index].ticket(),
            key.ticket,
            "a slot is its own taker's"
        );
        match &mut self.slots[key.index] {
            Slot::Waiting {
                waker: kept,
                rearm,
                until: end,
                ..
            } => {
                match kept {
                    Some(kept) if kept.will_wake(waker) => {}
                    _ => *kept = Some(waker.clone()),
                }
                if std::mem::take(rearm) {
                    *end = NO_END;
                    Look::Rearm
                } else {
                    *end = until;
                    self.earliest = self.earliest.min(until);
                    Look::Waiting
                }
            }
            Slot::Served { .. } => match self.slots.remove(key.index) {
                Slot::Served { outcome, .. } => Look::Served(outcome),
                Slot::Waiting { .. } => unreachable!("matched as served"),
            },
        }
    }

    /// Marks every waiting slot *rearm* (invariant 3), oldest first, and returns the wakers of
    /// those whose takers have looked, for the caller to wake once its lock is released.
    pub(crate) fn rearm(&mut self) -> Vec<Waker> {
        let mut wakers = Vec::with_capacity(self.len);
        let mut at = self.head;
        while let Some(index) = at {
            let Slot::Waiting {
                next, waker, rearm, ..
            } = &mut self.slots[index]
            else {
                unreachable!("only waiting slots are linked")
            };
            *rearm = true;
            wakers.extend(waker.clone());
            at = *next;
        }
        wakers
    }

    /// Marks *rearm* every waiting slot whose end is `by` or sooner (invariant 3), and returns
    /// the wakers of those, for the caller to wake once its lock is released: their takers
    /// then watch the end with a timer of their own.
    pub(crate) fn due(&mut self, by: u64) -> Vec<Waker> {
        let mut wakers = Vec::new();
        if by < self.earliest {
            return wakers;
        }
        self.earliest = NO_END;
        let mut at = self.head;
        while let Some(index) = at {
            let Slot::Waiting {
                next,
                waker,
                rearm,
                until,
                ..
            } = &mut self.slots[index]
            else {
                unreachable!("only waiting slots are linked")
            };
            if *until <= by {
                *until = NO_END;
                *rearm = true;
                wakers.extend(waker.clone());
            } else {
                self.earliest = self.earliest.min(*until);
            }
            at = *next;
        }
        wakers
    }

    /// A taker gives up its place: `None` if it was still waiting (it leaves the queue), or the
    /// outcome it had been served and not yet collected.
    pub(crate) fn leave(&mut self, key: WaitKey) -> Option<Result<T, E>> {
        debug_assert_eq!(
            self.slots[key.index].ticket(),
            key.ticket,
            "a slot is its own taker's"
        );
        if matches!(self.slots[key.index], Slot::Waiting { .. }) {
            drop(self.unlink(key.index));
        }
        match self.slots.remove(key.index) {
            Slot::Waiting { .. } => None,
            Slot::Served { outcome, .. } => Some(outcome),
        }
    }

    /// Invariants #2 and #3's `earliest`, O(n); for tests.
    #[cfg(test)]
    pub(crate) fn check(&self) {
        let mut seen = 0;
        let mut prev = None;
        let mut at = self.head;
        while let Some(index) = at {
            let Slot::Waiting {
                prev: p,
                next,
                until,
                ..
            } = &self.slots[index]
            else {
                panic!("a served slot is linked")
            };
            assert!(
                self.earliest <= *until,
                "a slot's end is earlier than `earliest`"
            );
            assert_eq!(*p, prev);
            prev = Some(index);
            at = *next;
            seen += 1;
        }
        assert_eq!(prev, self.tail);
        assert_eq!(seen, self.len);
        let waiting = self
            .slots
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Waiting { .. }))
            .count();
        assert_eq!(waiting, self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop() -> Waker {
        Waker::noop().clone()
    }

    #[test]
    fn served_oldest_first_and_collected_once() {
        let mut w: Waiters<u32, ()> = Waiters::default();
        let (a, b, c) = (w.push(), w.push(), w.push());
        assert_eq!(w.look(b, &noop(), NO_END), Look::Waiting);
        assert!(w.serve_oldest(Ok(1)).is_ok());
        assert!(w.serve_oldest(Ok(2)).is_ok());
        w.check();
        assert_eq!(w.len(), 1);
        assert_eq!(w.look(b, &noop(), NO_END), Look::Served(Ok(2)));
        assert_eq!(w.look(a, &noop(), NO_END), Look::Served(Ok(1)));
        assert_eq!(w.leave(c), None);
        assert!(w.is_empty());
        assert!(matches!(w.serve_oldest(Ok(3)), Err(Ok(3))));
        w.check();
    }

    #[test]
    fn served_newest_first_on_request() {
        let mut w: Waiters<u32, ()> = Waiters::default();
        let (a, b, c) = (w.push(), w.push(), w.push());
        assert!(w.serve_newest(Ok(1)).is_ok());
        assert!(w.serve_oldest(Ok(2)).is_ok());
        w.check();
        assert_eq!(w.look(c, &noop(), NO_END), Look::Served(Ok(1)));
        assert_eq!(w.look(a, &noop(), NO_END), Look::Served(Ok(2)));
        assert_eq!(w.look(b, &noop(), NO_END), Look::Waiting);
        assert!(w.serve_newest(Ok(3)).is_ok());
        assert!(w.is_empty());
        assert!(matches!(w.serve_newest(Ok(4)), Err(Ok(4))));
        assert_eq!(w.leave(b), Some(Ok(3)));
        w.check();
    }

    #[test]
    fn a_rearm_is_seen_once_by_each_waiting_taker() {
        let mut w: Waiters<u32, ()> = Waiters::default();
        let (a, b, c) = (w.push(), w.push(), w.push());
        assert_eq!(w.look(a, &noop(), NO_END), Look::Waiting);
        assert!(w.serve_oldest(Ok(1)).is_ok());
        assert_eq!(w.rearm().len(), 0, "b and c never looked: no waker to wake");
        assert_eq!(w.look(b, &noop(), NO_END), Look::Rearm);
        assert_eq!(w.look(b, &noop(), NO_END), Look::Waiting, "once");
        assert_eq!(w.rearm().len(), 1, "b's waker");
        assert_eq!(
            w.look(a, &noop(), NO_END),
            Look::Served(Ok(1)),
            "served before"
        );
        assert_eq!(w.look(c, &noop(), NO_END), Look::Rearm);
        assert_eq!(w.look(b, &noop(), NO_END), Look::Rearm);
        w.check();
    }

    #[test]
    fn an_end_coming_near_is_seen_once_by_its_taker_alone() {
        let mut w: Waiters<u32, ()> = Waiters::default();
        let (a, b, c) = (w.push(), w.push(), w.push());
        assert_eq!(w.look(a, &noop(), 100), Look::Waiting);
        assert_eq!(w.look(b, &noop(), 300), Look::Waiting);
        assert_eq!(w.look(c, &noop(), NO_END), Look::Waiting);
        assert_eq!(w.due(99).len(), 0, "no end by 99");
        assert_eq!(w.due(200).len(), 1, "a's");
        assert_eq!(w.due(200).len(), 0, "a's end is no longer watched");
        assert_eq!(w.look(a, &noop(), NO_END), Look::Rearm);
        assert_eq!(w.look(b, &noop(), 300), Look::Waiting);
        assert_eq!(w.due(u64::MAX - 1).len(), 1, "b's; c watches no end");
        assert_eq!(w.look(b, &noop(), 300), Look::Rearm);
        assert_eq!(w.look(c, &noop(), NO_END), Look::Waiting);
        w.check();
    }

    #[test]
    fn leaving_from_the_middle_keeps_the_order() {
        let mut w: Waiters<u32, ()> = Waiters::default();
        let keys: Vec<_> = (0..5).map(|_| w.push()).collect();
        assert_eq!(w.leave(keys[2]), None);
        assert_eq!(w.leave(keys[0]), None);
        assert_eq!(w.leave(keys[4]), None);
        w.check();
        assert!(w.serve_oldest(Ok(7)).is_ok());
        assert_eq!(
            w.leave(keys[1]),
            Some(Ok(7)),
            "served, not collected: handed back"
        );
        assert!(w.serve_oldest(Ok(8)).is_ok());
        assert_eq!(w.look(keys[3], &noop(), NO_END), Look::Served(Ok(8)));
        w.check();
    }
}
