//! The pool's bookkeeping: a state machine with no `async` and no I/O.
//!
//! The async layer ([`crate::pool`]) holds an [`Engine`] behind one mutex, asks it what to do
//! (hand out this member, queue this taker, start this many members, stop that one), does the
//! I/O outside the lock, and reports back. Time comes in as arguments, so every rule here is
//! unit-tested without a runtime.
//!
//! Every member the pool knows has an entry, keyed by a [`Key`], in exactly one status:
//! `Starting` (a start task owns the slot), `Free` (the value sits in the free list), `InUse`
//! (a consumer, or a waiter's channel, holds it) or `Stopping` (a stop task owns it).
//!
//! # Invariants
//!
//! 1. `in_use + free + starting + stopping <= max_count`: stopping members count until their
//!    stop ends, starting ones from the moment the start is decided. The one exception is a
//!    `reconfigure` that lowers `max_count`: the members beyond the new cap are all stopping,
//!    the excess only shrinks as their stops end, and nothing starts until it is gone.
//! 2. Every entry is in exactly one status; the four counts are the numbers of entries in each
//!    status (`entries.len()` is their sum) and the free list holds exactly the `Free` entries.
//! 3. A waiter is queued only while no member is free: a member that becomes free goes to the
//!    oldest waiter first.
//! 4. At most `queue_max` waiters are queued.
//! 5. A closed engine has no waiters and decides no starts.
//! 6. While starts are failing (`failures > 0`) a new start is decided only when none is in
//!    flight, one at a time and after the backoff delay, so a dead backend sees one attempt
//!    per backoff step, not a storm.
//! 7. Only `Free` members are culled, expired by timer or claimed for a health check: a member
//!    in use is never taken from its holder.
//!
//! Lifecycle bookkeeping lives here too: the demand window behind culling (a monotone queue of
//! per-tick in-use peaks), each member's expiry (a min-heap with lazy deletion, untouched when
//! no `max_lifetime` is set), and where each member in use was taken (for leak reports).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::panic::Location;
use std::time::Duration;

use slab::Slab;
use tokio::time::Instant;

use crate::config::MemberOrder;
use crate::error::StartError;

/// Identifies an entry while it exists; reused after the entry is removed (pair it with the
/// member id to detect reuse).
pub(crate) type Key = usize;

/// Where a member is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Starting,
    Free,
    InUse,
    Stopping,
}

/// The first backoff step after a failed start.
pub(crate) const BACKOFF_BASE: Duration = Duration::from_millis(100);
/// The longest backoff step.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// The delay before the next start after `failures` consecutive failures: 100 ms doubling
/// to at most 10 s.
pub(crate) fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    BACKOFF_BASE.saturating_mul(1 << exp).min(BACKOFF_MAX)
}

/// Where a take was made, for leak reports.
pub(crate) type Caller = &'static Location<'static>;

#[derive(Debug)]
struct Entry {
    id: u64,
    status: Status,
    since: Instant,
    born: Instant,
    expires_at: Option<Instant>,
    /// The member's death signal was seen while it was starting or in use.
    dead: bool,
    /// Where the current holder took it.
    taken_by: Option<Caller>,
    /// A leak report was made for the current holder.
    leak_reported: bool,
}

#[derive(Debug)]
struct Idle<T> {
    key: Key,
    value: T,
    since: Instant,
}

/// The limits the engine enforces, taken from the pool's config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) init_count: usize,
    pub(crate) max_count: usize,
    pub(crate) queue_max: usize,
    pub(crate) order: MemberOrder,
    pub(crate) auto_grow_threshold: Option<usize>,
}

/// Counts of members in each status and of waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Counts {
    pub(crate) in_use: usize,
    pub(crate) free: usize,
    pub(crate) starting: usize,
    pub(crate) stopping: usize,
    pub(crate) queued: usize,
}

impl Counts {
    pub(crate) fn total(&self) -> usize {
        self.in_use + self.free + self.starting + self.stopping
    }
}

/// Starts the engine decided on: the caller spawns one start task per slot, each first
/// sleeping `delay` (non-zero only while backing off).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Starts {
    pub(crate) slots: Vec<(Key, u64)>,
    pub(crate) delay: Duration,
}

impl Starts {
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

/// Why a take found no member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Empty {
    /// No room to start more.
    AtCapacity,
    /// Members are starting (some perhaps just now).
    AllInUse,
    /// Starts are failing and nothing is in use that could come back.
    Unavailable,
    /// The pool is closed.
    Closed,
}

/// What a take found.
#[derive(Debug)]
pub(crate) enum Take<T> {
    /// A member, and since when it was idle.
    Member(Key, T, Instant),
    /// The member at the head had outlived its `max_lifetime`: it is now `Stopping` (and
    /// owed a replacement); the caller stops it and takes again.
    Expired(Key, T),
    Empty(Empty, Starts),
}

/// A member held past the leak threshold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Leak {
    pub(crate) id: u64,
    pub(crate) since: Instant,
    pub(crate) taken_by: Option<Caller>,
}

/// What a member's death signal did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Death<T> {
    /// Unknown or already stopping: nothing to do.
    Ignored,
    /// Starting or in use: it will be stopped when its start ends or it is returned.
    Marked,
    /// It was free: it is now `Stopping` and the caller stops this value.
    Removed(T),
}

/// An in-use member coming back, as the engine sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Returning {
    pub(crate) dead: bool,
    pub(crate) expired: bool,
    pub(crate) leaked: bool,
}

/// A member's row in [`Engine::stats`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub(crate) id: u64,
    pub(crate) status: Status,
    pub(crate) since: Instant,
    pub(crate) expires_at: Option<Instant>,
}

/// The bookkeeping of one pool; `T` is a free member, `W` a queued waiter's hand-off.
#[derive(Debug)]
pub(crate) struct Engine<T, W> {
    limits: Limits,
    entries: Slab<Entry>,
    /// Back = returned most recently; front = idle longest.
    free: VecDeque<Idle<T>>,
    /// Front = waiting longest.
    waiters: VecDeque<(u64, W)>,
    in_use: usize,
    starting: usize,
    stopping: usize,
    /// Replacements owed for members destroyed (failed, crashed, expired) and not yet
    /// replaced by a successful start.
    owed: usize,
    /// Members beyond `max_count` after `reconfigure` lowered it, all stopping (invariant #1).
    excess: usize,
    /// Consecutive failed starts; zero after a success.
    failures: u32,
    retry_at: Option<Instant>,
    last_error: Option<StartError>,
    next_id: u64,
    next_waiter: u64,
    closed: bool,
    /// The highest in-use count since the last cull tick.
    peak: usize,
    /// When a member last changed holder; in-use counts only rise then, so with no take
    /// inside the window its peak is the current count.
    last_take: Option<Instant>,
    /// Per-tick peaks inside the demand window, values strictly decreasing front to back, so
    /// the front is the window's peak.
    demand: VecDeque<(Instant, usize)>,
    /// Members' expiries, soonest first; entries whose member is gone or whose expiry moved
    /// are skipped when they surface.
    expiries: BinaryHeap<Reverse<(Instant, Key, u64)>>,
}

impl<T, W> Engine<T, W> {
    pub(crate) fn new(limits: Limits) -> Self {
        Engine {
            limits,
            entries: Slab::with_capacity(limits.max_count.min(4096)),
            free: VecDeque::with_capacity(limits.max_count.min(4096)),
            waiters: VecDeque::new(),
            in_use: 0,
            starting: 0,
            stopping: 0,
            owed: 0,
            excess: 0,
            failures: 0,
            retry_at: None,
            last_error: None,
            next_id: 1,
            next_waiter: 0,
            closed: false,
            peak: 0,
            last_take: None,
            demand: VecDeque::new(),
            expiries: BinaryHeap::new(),
        }
    }

    /// Invariants #1–#5 in O(1); `debug_assert!`ed after every change.
    fn holds(&self) -> bool {
        let c = self.counts();
        c.total() <= self.limits.max_count + self.excess
            && self.excess <= c.stopping
            && self.entries.len() == c.total()
            && (self.waiters.is_empty() || self.free.is_empty())
            && self.waiters.len() <= self.limits.queue_max
            && (!self.closed || self.waiters.is_empty())
    }

    /// Invariant #2 entry by entry, O(n); for tests.
    #[cfg(test)]
    pub(crate) fn check_all(&self) {
        assert!(self.holds(), "{:?}", self.counts());
        let mut seen = [0usize; 4];
        for (_, e) in &self.entries {
            seen[e.status as usize] += 1;
        }
        assert_eq!(
            seen,
            [self.starting, self.free.len(), self.in_use, self.stopping]
        );
        for idle in &self.free {
            assert_eq!(self.entries[idle.key].status, Status::Free);
        }
    }

    pub(crate) fn counts(&self) -> Counts {
        Counts {
            in_use: self.in_use,
            free: self.free.len(),
            starting: self.starting,
            stopping: self.stopping,
            queued: self.waiters.len(),
        }
    }

    pub(crate) fn limits(&self) -> Limits {
        self.limits
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }

    fn room(&self) -> usize {
        self.limits.max_count.saturating_sub(self.counts().total())
    }

    fn set_status(&mut self, key: Key, to: Status, now: Instant) {
        let entry = &mut self.entries[key];
        let from = std::mem::replace(&mut entry.status, to);
        entry.since = now;
        for (status, delta) in [(from, false), (to, true)] {
            let count = match status {
                Status::Starting => &mut self.starting,
                Status::InUse => &mut self.in_use,
                Status::Stopping => &mut self.stopping,
                Status::Free => continue, // counted by the free list itself
            };
            if delta {
                *count += 1;
            } else {
                *count -= 1;
            }
        }
    }

    // ---- take -------------------------------------------------------------------------

    /// Hands out a free member (by `member_order`), or says why there is none and which
    /// starts the take decided (SPEC §4.1: a batch of `max(min(init − starting, room), 1)`).
    pub(crate) fn take(&mut self, now: Instant, caller: Caller) -> Take<T> {
        if self.closed {
            return Take::Empty(Empty::Closed, Starts::default());
        }
        let idle = match self.limits.order {
            MemberOrder::Lifo => self.free.pop_back(),
            MemberOrder::Fifo => self.free.pop_front(),
        };
        if let Some(Idle { key, value, since }) = idle {
            if self.entries[key].expires_at.is_some_and(|at| at <= now) {
                self.set_status(key, Status::Stopping, now);
                self.owe_replacement();
                debug_assert!(self.holds());
                return Take::Expired(key, value);
            }
            self.set_status(key, Status::InUse, now);
            self.handed_over(key, now, caller);
            debug_assert!(self.holds());
            return Take::Member(key, value, since);
        }
        let room = self.room();
        if self.failures > 0 {
            let starts = self.backoff_start(now);
            let why = if self.in_use == 0 {
                Empty::Unavailable
            } else {
                Empty::AllInUse
            };
            return Take::Empty(why, starts);
        }
        if room == 0 {
            let why = if self.starting > 0 {
                Empty::AllInUse
            } else {
                Empty::AtCapacity
            };
            return Take::Empty(why, Starts::default());
        }
        let batch = self
            .limits
            .init_count
            .saturating_sub(self.starting)
            .min(room)
            .max(1);
        Take::Empty(Empty::AllInUse, self.reserve(batch, Duration::ZERO, now))
    }

    /// An in-use member changes holder (a take, or a hand-off to a waiter): record where and
    /// when, and the demand it adds.
    pub(crate) fn handed_over(&mut self, key: Key, now: Instant, caller: Caller) {
        let entry = &mut self.entries[key];
        entry.since = now;
        entry.taken_by = Some(caller);
        entry.leak_reported = false;
        self.peak = self.peak.max(self.in_use);
        self.last_take = Some(now);
    }

    /// After a successful take: if at most `auto_grow_threshold` members are free, start up
    /// to `init_count` more within `max_count`.
    pub(crate) fn auto_grow(&mut self, now: Instant) -> Starts {
        match self.limits.auto_grow_threshold {
            Some(threshold)
                if self.free.len() <= threshold && self.failures == 0 && !self.closed =>
            {
                let n = self
                    .limits
                    .init_count
                    .saturating_sub(self.starting)
                    .min(self.room());
                self.reserve(n, Duration::ZERO, now)
            }
            _ => Starts::default(),
        }
    }

    /// While backing off: one delayed start if none is in flight and there is room.
    fn backoff_start(&mut self, now: Instant) -> Starts {
        if self.starting > 0 || self.room() == 0 || self.closed {
            return Starts::default();
        }
        let delay = self
            .retry_at
            .map_or(Duration::ZERO, |at| at.saturating_duration_since(now));
        self.reserve(1, delay, now)
    }

    fn reserve(&mut self, n: usize, delay: Duration, now: Instant) -> Starts {
        let mut slots = Vec::with_capacity(n);
        for _ in 0..n {
            let id = self.next_id;
            self.next_id += 1;
            let key = self.entries.insert(Entry {
                id,
                status: Status::Starting,
                since: now,
                born: now,
                expires_at: None,
                dead: false,
                taken_by: None,
                leak_reported: false,
            });
            self.starting += 1;
            slots.push((key, id));
        }
        debug_assert!(self.holds(), "invariant #1: reserved past max_count");
        Starts { slots, delay }
    }

    // ---- queue ------------------------------------------------------------------------

    /// Queues a waiter, or gives it back when the queue is full (or the pool closed).
    pub(crate) fn enqueue(&mut self, waiter: W) -> Result<u64, W> {
        debug_assert!(
            self.free.is_empty(),
            "invariant #3: queueing beside a free member"
        );
        if self.closed || self.waiters.len() >= self.limits.queue_max {
            return Err(waiter);
        }
        let id = self.next_waiter;
        self.next_waiter += 1;
        self.waiters.push_back((id, waiter));
        debug_assert!(self.holds());
        Ok(id)
    }

    /// Removes a waiter that gave up; `None` if it was already served (or failed).
    pub(crate) fn cancel_waiter(&mut self, id: u64) -> Option<W> {
        let at = self.waiters.iter().position(|(w, _)| *w == id)?;
        self.waiters.remove(at).map(|(_, w)| w)
    }

    /// The oldest waiter, removed from the queue, to hand a member to.
    pub(crate) fn pop_waiter(&mut self) -> Option<W> {
        self.waiters.pop_front().map(|(_, w)| w)
    }

    // ---- return -----------------------------------------------------------------------

    /// What the pool must know of an in-use member coming back, from one look at its entry:
    /// whether it died, whether its lifetime ended, and whether its holder was reported as a
    /// leak (the rare case: [`reported_leak`](Self::reported_leak) has the details).
    pub(crate) fn returning(&self, key: Key, now: Instant) -> Returning {
        let e = &self.entries[key];
        Returning {
            dead: e.dead,
            expired: e.expires_at.is_some_and(|at| at <= now),
            leaked: e.leak_reported,
        }
    }

    /// The leak report made for an in-use member's holder.
    pub(crate) fn reported_leak(&self, key: Key) -> Leak {
        let e = &self.entries[key];
        Leak {
            id: e.id,
            since: e.since,
            taken_by: e.taken_by,
        }
    }

    /// Puts an in-use member on the free list. The caller has found no waiter to hand it to.
    pub(crate) fn put_free(&mut self, key: Key, value: T, now: Instant) {
        debug_assert!(
            self.waiters.is_empty(),
            "invariant #3: freeing past a waiter"
        );
        debug_assert_eq!(self.entries[key].status, Status::InUse);
        self.set_status(key, Status::Free, now);
        self.entries[key].taken_by = None;
        self.free.push_back(Idle {
            key,
            value,
            since: now,
        });
        debug_assert!(self.holds());
    }

    /// An in-use or starting member is to be stopped by the caller.
    pub(crate) fn begin_stop(&mut self, key: Key, now: Instant) {
        debug_assert!(matches!(
            self.entries[key].status,
            Status::InUse | Status::Starting
        ));
        self.set_status(key, Status::Stopping, now);
        debug_assert!(self.holds());
    }

    /// A stop ended (or gave up at `member_shutdown`): the slot is free.
    pub(crate) fn stop_done(&mut self, key: Key) {
        debug_assert_eq!(self.entries[key].status, Status::Stopping);
        self.entries.remove(key);
        self.stopping -= 1;
        self.excess = self.excess.saturating_sub(1);
        debug_assert!(self.holds());
    }

    /// A destroyed member is to be replaced once there is room.
    pub(crate) fn owe_replacement(&mut self) {
        self.owed = (self.owed + 1).min(self.limits.max_count);
    }

    // ---- starts -----------------------------------------------------------------------

    /// A start produced a member: it becomes `InUse` for the caller to hand to a waiter or put
    /// on the free list. Returns `false` (and makes it `Stopping`) if it died while starting
    /// or the pool closed meanwhile.
    pub(crate) fn started(&mut self, key: Key, now: Instant, expires_at: Option<Instant>) -> bool {
        debug_assert_eq!(self.entries[key].status, Status::Starting);
        if self.closed {
            self.set_status(key, Status::Stopping, now);
            return false;
        }
        if self.entries[key].dead {
            // A backend that accepts and then drops every connection must back off too.
            self.start_failed(key, StartError::Died, true, now);
            return false;
        }
        let entry = &mut self.entries[key];
        entry.born = now;
        entry.expires_at = expires_at;
        if let Some(at) = expires_at {
            self.expiries.push(Reverse((at, key, entry.id)));
        }
        self.failures = 0;
        self.retry_at = None;
        self.last_error = None;
        self.owed = self.owed.saturating_sub(1);
        self.set_status(key, Status::InUse, now);
        debug_assert!(self.holds());
        true
    }

    /// A start failed (error, timeout or panic) and the pool backs off. If the start
    /// produced a member that must still be stopped, the slot becomes `Stopping`; otherwise
    /// it is free.
    pub(crate) fn start_failed(
        &mut self,
        key: Key,
        error: StartError,
        produced: bool,
        now: Instant,
    ) {
        debug_assert_eq!(self.entries[key].status, Status::Starting);
        if produced {
            self.set_status(key, Status::Stopping, now);
        } else {
            self.entries.remove(key);
            self.starting -= 1;
        }
        self.failures = self.failures.saturating_add(1);
        self.retry_at = Some(now + backoff(self.failures));
        self.last_error = Some(error);
        debug_assert!(self.holds());
    }

    /// A start was dropped by a close: the slot is free, and nothing failed.
    pub(crate) fn start_abandoned(&mut self, key: Key) {
        debug_assert_eq!(self.entries[key].status, Status::Starting);
        self.entries.remove(key);
        self.starting -= 1;
        debug_assert!(self.holds());
    }

    /// The most recent start failure, while starts are failing.
    pub(crate) fn last_error(&self) -> Option<&StartError> {
        self.last_error.as_ref()
    }

    /// The starts the pool needs now: enough to hold `init_count` members, serve every
    /// waiter and pay the replacements owed, less those already starting, within `max_count`;
    /// while backing off, one delayed start at a time (invariant #6).
    pub(crate) fn refill(&mut self, now: Instant) -> Starts {
        if self.closed {
            return Starts::default();
        }
        let live = self.in_use + self.free.len();
        let need = self
            .limits
            .init_count
            .saturating_sub(live)
            .max(self.waiters.len())
            .max(self.owed)
            .saturating_sub(self.starting)
            .min(self.room());
        if need == 0 {
            return Starts::default();
        }
        if self.failures > 0 {
            return self.backoff_start(now);
        }
        self.reserve(need, Duration::ZERO, now)
    }

    /// Reserves exactly `n` starts (within room), for pool start and `reconfigure`.
    pub(crate) fn grow(&mut self, n: usize, now: Instant) -> Starts {
        if self.closed {
            return Starts::default();
        }
        let n = n.min(self.room());
        self.reserve(n, Duration::ZERO, now)
    }

    // ---- death, removal, close --------------------------------------------------------

    /// A member's death signal (its driver task ended). `id` guards against key reuse.
    pub(crate) fn mark_dead(&mut self, key: Key, id: u64, now: Instant) -> Death<T> {
        let Some(entry) = self.entries.get_mut(key).filter(|e| e.id == id) else {
            return Death::Ignored;
        };
        match entry.status {
            Status::Stopping => Death::Ignored,
            Status::Starting | Status::InUse => {
                entry.dead = true;
                Death::Marked
            }
            Status::Free => match self.remove_free(key, now) {
                Some(value) => Death::Removed(value),
                None => Death::Ignored,
            },
        }
    }

    /// Takes a particular free member off the free list, making it `Stopping`.
    pub(crate) fn remove_free(&mut self, key: Key, now: Instant) -> Option<T> {
        let at = self.free.iter().position(|i| i.key == key)?;
        let Idle { value, .. } = self.free.remove(at)?;
        self.entries[key].status = Status::Stopping;
        self.entries[key].since = now;
        self.stopping += 1;
        debug_assert!(self.holds());
        Some(value)
    }

    /// Closes the engine: no more takes or starts. Returns the waiters (to fail) and the free
    /// members (now `Stopping`, to stop).
    pub(crate) fn close(&mut self, now: Instant) -> (Vec<W>, Vec<(Key, T)>) {
        self.closed = true;
        let waiters = self.waiters.drain(..).map(|(_, w)| w).collect();
        let mut free = Vec::with_capacity(self.free.len());
        while let Some(Idle { key, value, .. }) = self.free.pop_front() {
            self.entries[key].status = Status::Stopping;
            self.entries[key].since = now;
            self.stopping += 1;
            free.push((key, value));
        }
        debug_assert!(self.holds());
        (waiters, free)
    }

    /// Whether nothing is starting or stopping (and, if `with_in_use`, nothing is in use).
    pub(crate) fn is_drained(&self, with_in_use: bool) -> bool {
        self.starting == 0 && self.stopping == 0 && (!with_in_use || self.in_use == 0)
    }

    // ---- lifecycle: cull, lifetime, health, leaks, reconfigure ------------------------

    /// A cull tick (SPEC §4.6): records the peak in-use count since the last tick, drops
    /// peaks older than `max_age`, and takes off the free list (oldest idle first) every
    /// member beyond `max(init_count, the window's peak)`. The caller stops them.
    pub(crate) fn cull(&mut self, now: Instant, max_age: Duration) -> Vec<(Key, T)> {
        let window_start = now.checked_sub(max_age);
        let stale = match (self.last_take, window_start) {
            (None, _) => true,
            (Some(take), Some(start)) => take <= start,
            (Some(_), None) => false,
        };
        let peak = std::mem::replace(&mut self.peak, self.in_use);
        let peak = if stale {
            self.in_use
        } else {
            peak.max(self.in_use)
        };
        while self.demand.back().is_some_and(|&(_, p)| p <= peak) {
            self.demand.pop_back();
        }
        self.demand.push_back((now, peak));
        if let Some(start) = window_start {
            while self.demand.front().is_some_and(|&(at, _)| at <= start) {
                self.demand.pop_front();
            }
        }
        let window_peak = self.demand.front().map_or(0, |&(_, p)| p).max(self.in_use);
        let target = self.limits.init_count.max(window_peak);
        let live = self.in_use + self.free.len();
        let excess = live.saturating_sub(target).min(self.free.len());
        self.take_oldest_free(excess, now)
    }

    /// Takes the `n` members idle longest off the free list, making them `Stopping`.
    pub(crate) fn take_oldest_free(&mut self, n: usize, now: Instant) -> Vec<(Key, T)> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let Some(Idle { key, value, .. }) = self.free.pop_front() else {
                break;
            };
            self.set_status(key, Status::Stopping, now);
            out.push((key, value));
        }
        debug_assert!(self.holds());
        out
    }

    /// When the next free member's lifetime ends, skipping heap entries that went stale.
    pub(crate) fn next_expiry(&mut self) -> Option<Instant> {
        while let Some(&Reverse((at, key, id))) = self.expiries.peek() {
            let live = self.entries.get(key).is_some_and(|e| {
                e.id == id
                    && e.expires_at == Some(at)
                    && matches!(e.status, Status::Free | Status::InUse)
            });
            if live {
                return Some(at);
            }
            self.expiries.pop();
        }
        None
    }

    /// Free members whose lifetime has ended, now `Stopping` and owed replacements. Members
    /// in use are left to their holders (invariant #7) and recycled when returned.
    pub(crate) fn expire_due(&mut self, now: Instant) -> Vec<(Key, T)> {
        let mut out = Vec::new();
        while let Some(&Reverse((at, key, id))) = self.expiries.peek() {
            if at > now {
                break;
            }
            self.expiries.pop();
            let due = self.entries.get(key).is_some_and(|e| {
                e.id == id && e.expires_at == Some(at) && e.status == Status::Free
            });
            if due && let Some(value) = self.remove_free(key, now) {
                self.owe_replacement();
                out.push((key, value));
            }
        }
        out
    }

    /// Gives every member a new expiry computed from its birth (`reconfigure` changed the
    /// lifetime); `None` removes lifetimes altogether.
    pub(crate) fn reschedule(&mut self, mut expiry: impl FnMut(Instant) -> Option<Instant>) {
        self.expiries.clear();
        for (key, e) in &mut self.entries {
            if matches!(e.status, Status::Free | Status::InUse) {
                e.expires_at = expiry(e.born);
                if let Some(at) = e.expires_at {
                    self.expiries.push(Reverse((at, key, e.id)));
                }
            }
        }
    }

    /// Claims the member idle longest for a health check, as a take would (it counts as in
    /// use, adds no demand, and no take can get it meanwhile). Only members idle since before
    /// `idle_before` are claimed, so a round never checks a member twice.
    pub(crate) fn claim_for_check(
        &mut self,
        now: Instant,
        idle_before: Instant,
    ) -> Option<(Key, T)> {
        if self.free.front().is_none_or(|i| i.since >= idle_before) {
            return None;
        }
        let Idle { key, value, .. } = self.free.pop_front()?;
        self.set_status(key, Status::InUse, now);
        self.entries[key].taken_by = None;
        debug_assert!(self.holds());
        Some((key, value))
    }

    /// Members held since before `held_before` and not yet reported; each is reported once
    /// per holder.
    pub(crate) fn leaks(&mut self, held_before: Instant) -> Vec<Leak> {
        let mut out = Vec::new();
        for (_, e) in &mut self.entries {
            if e.status == Status::InUse
                && e.taken_by.is_some()
                && !e.leak_reported
                && e.since <= held_before
            {
                e.leak_reported = true;
                out.push(Leak {
                    id: e.id,
                    since: e.since,
                    taken_by: e.taken_by,
                });
            }
        }
        out
    }

    /// New limits from `reconfigure`. The caller has already made stopping every member
    /// beyond a lower `max_count` (invariant #1) and shed the waiters beyond `queue_max`.
    pub(crate) fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
        self.excess = self.counts().total().saturating_sub(limits.max_count);
        debug_assert!(
            self.holds(),
            "invariant #1: the excess over a lower max_count must be stopping"
        );
    }

    /// Removes the oldest waiters beyond `keep`, for `reconfigure` lowering `queue_max`.
    pub(crate) fn shed_waiters(&mut self, keep: usize) -> Vec<W> {
        let excess = self.waiters.len().saturating_sub(keep);
        self.waiters.drain(..excess).map(|(_, w)| w).collect()
    }

    /// One row per member that exists (starting slots have no member yet).
    pub(crate) fn stats(&self) -> Vec<Row> {
        let mut rows: Vec<Row> = self
            .entries
            .iter()
            .filter(|(_, e)| e.status != Status::Starting)
            .map(|(_, e)| Row {
                id: e.id,
                status: e.status,
                since: e.since,
                expires_at: e.expires_at,
            })
            .collect();
        rows.sort_by_key(|r| r.id);
        rows
    }

    /// The member id of an entry.
    #[cfg(test)]
    pub(crate) fn id(&self, key: Key) -> u64 {
        self.entries[key].id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type E = Engine<&'static str, u32>;

    fn limits(init: usize, max: usize) -> Limits {
        Limits {
            init_count: init,
            max_count: max,
            queue_max: 2,
            order: MemberOrder::Lifo,
            auto_grow_threshold: None,
        }
    }

    fn now() -> Instant {
        Instant::now()
    }

    /// Starts `n` members through the take path and brings them up as free members.
    fn fill(e: &mut E, values: &[&'static str]) -> Vec<Key> {
        let starts = e.grow(values.len(), now());
        let mut keys = Vec::new();
        for ((key, _), v) in starts.slots.into_iter().zip(values) {
            assert!(e.started(key, now(), None));
            e.put_free(key, v, now());
            keys.push(key);
        }
        e.check_all();
        keys
    }

    #[test]
    fn take_prefers_lifo_then_fifo_when_switched() {
        let mut e = E::new(limits(0, 4));
        fill(&mut e, &["a", "b", "c"]);
        let Take::Member(k, v, _) = e.take(now(), Location::caller()) else {
            panic!()
        };
        assert_eq!(v, "c");
        e.put_free(k, v, now());
        e.limits.order = MemberOrder::Fifo;
        let Take::Member(_, v, _) = e.take(now(), Location::caller()) else {
            panic!()
        };
        assert_eq!(v, "a");
        e.check_all();
    }

    #[test]
    fn empty_take_starts_a_batch_of_init_count_within_room() {
        let mut e = E::new(limits(3, 4));
        let Take::Empty(why, starts) = e.take(now(), Location::caller()) else {
            panic!()
        };
        assert_eq!(why, Empty::AllInUse);
        assert_eq!(starts.slots.len(), 3);
        // init − starting = 0, so the next take starts max(0, 1) = 1 within the one slot left.
        let Take::Empty(_, starts) = e.take(now(), Location::caller()) else {
            panic!()
        };
        assert_eq!(starts.slots.len(), 1);
        let Take::Empty(why, starts) = e.take(now(), Location::caller()) else {
            panic!()
        };
        assert_eq!((why, starts.slots.len()), (Empty::AllInUse, 0));
        assert_eq!(e.counts().starting, 4);
        e.check_all();
    }

    #[test]
    fn at_capacity_when_all_in_use_and_nothing_starting() {
        let mut e = E::new(limits(1, 1));
        fill(&mut e, &["a"]);
        let Take::Member(..) = e.take(now(), Location::caller()) else {
            panic!()
        };
        let Take::Empty(why, starts) = e.take(now(), Location::caller()) else {
            panic!()
        };
        assert_eq!((why, starts.is_empty()), (Empty::AtCapacity, true));
    }

    #[test]
    fn stopping_members_hold_their_slot_until_the_stop_ends() {
        let mut e = E::new(limits(1, 1));
        fill(&mut e, &["a"]);
        let Take::Member(k, _, _) = e.take(now(), Location::caller()) else {
            panic!()
        };
        e.begin_stop(k, now());
        e.owe_replacement();
        assert!(e.refill(now()).is_empty(), "no room while stopping");
        e.stop_done(k);
        assert_eq!(
            e.refill(now()).slots.len(),
            1,
            "replacement once the slot is free"
        );
        e.check_all();
    }

    #[test]
    fn queue_is_bounded_and_cancellable() {
        let mut e = E::new(limits(0, 1));
        let a = e.enqueue(1).unwrap();
        let _b = e.enqueue(2).unwrap();
        assert_eq!(e.enqueue(3), Err(3));
        assert_eq!(e.cancel_waiter(a), Some(1));
        assert_eq!(e.cancel_waiter(a), None);
        assert_eq!(e.pop_waiter(), Some(2));
        assert_eq!(e.pop_waiter(), None);
    }

    #[test]
    fn failing_starts_back_off_one_at_a_time() {
        let mut e = E::new(limits(3, 10));
        let t0 = now();
        let starts = e.refill(t0);
        assert_eq!(starts.slots.len(), 3);
        for (k, _) in starts.slots {
            e.start_failed(k, StartError::Died, false, t0);
        }
        assert_eq!(e.failures, 3);
        let retry = e.refill(t0);
        assert_eq!(retry.slots.len(), 1, "one probe while backing off");
        assert_eq!(retry.delay, backoff(3));
        assert!(e.refill(t0).is_empty(), "never a second probe in flight");
        let Take::Empty(why, starts) = e.take(t0, Location::caller()) else {
            panic!()
        };
        assert_eq!((why, starts.is_empty()), (Empty::Unavailable, true));
        // The probe succeeds: the backoff ends and the rest start at once.
        let (k, _) = retry.slots[0];
        assert!(e.started(k, t0, None));
        e.put_free(k, "a", t0);
        assert_eq!(e.refill(t0).slots.len(), 2);
        assert!(e.last_error().is_none());
        e.check_all();
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        assert_eq!(backoff(1), Duration::from_millis(100));
        assert_eq!(backoff(2), Duration::from_millis(200));
        assert_eq!(backoff(5), Duration::from_millis(1600));
        assert_eq!(backoff(40), BACKOFF_MAX);
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }

    #[test]
    fn death_of_a_free_member_removes_it_and_ignores_reused_keys() {
        let mut e = E::new(limits(0, 2));
        let keys = fill(&mut e, &["a", "b"]);
        let id = e.id(keys[0]);
        assert_eq!(e.mark_dead(keys[0], id + 100, now()), Death::Ignored);
        assert_eq!(e.mark_dead(keys[0], id, now()), Death::Removed("a"));
        assert_eq!(e.counts().stopping, 1);
        assert_eq!(e.mark_dead(keys[0], id, now()), Death::Ignored);
        let Take::Member(k, "b", _) = e.take(now(), Location::caller()) else {
            panic!()
        };
        assert_eq!(e.mark_dead(k, e.id(k), now()), Death::Marked);
        assert!(e.returning(k, now()).dead);
        e.check_all();
    }

    #[test]
    fn a_member_that_died_while_starting_is_stopped_not_handed_out() {
        let mut e = E::new(limits(1, 1));
        let starts = e.refill(now());
        let (k, id) = starts.slots[0];
        assert_eq!(e.mark_dead(k, id, now()), Death::Marked);
        assert!(!e.started(k, now(), None));
        assert_eq!(e.counts().stopping, 1);
        e.check_all();
    }

    /// Regression: a member dying as it started counted as a successful start and reset the
    /// backoff, so a backend that accepts and then drops every connection got a start storm.
    #[test]
    fn a_member_dying_as_it_starts_counts_as_a_failed_start() {
        let mut e = E::new(limits(1, 2));
        let t0 = now();
        let (k, id) = e.refill(t0).slots[0];
        e.mark_dead(k, id, t0);
        assert!(!e.started(k, t0, None));
        assert!(matches!(e.last_error(), Some(StartError::Died)));
        e.stop_done(k);
        let retry = e.refill(t0);
        assert_eq!(
            (retry.slots.len(), retry.delay),
            (1, backoff(1)),
            "the retry waits out a backoff step"
        );
        e.check_all();
    }

    #[test]
    fn close_fails_waiters_and_stops_free_members() {
        let mut e = E::new(limits(0, 3));
        e.enqueue(7).unwrap();
        let (waiters, free) = e.close(now());
        assert_eq!((waiters, free.len()), (vec![7], 0));
        assert!(e.refill(now()).is_empty());
        assert!(matches!(
            e.take(now(), Location::caller()),
            Take::Empty(Empty::Closed, _)
        ));
        assert_eq!(e.enqueue(8), Err(8));

        let mut e = E::new(limits(0, 3));
        fill(&mut e, &["a", "b"]);
        let (_, free) = e.close(now());
        assert_eq!(free.len(), 2);
        assert!(!e.is_drained(false));
        for (k, _) in free {
            e.stop_done(k);
        }
        assert!(e.is_drained(true));
        e.check_all();
    }

    #[test]
    fn refill_serves_floor_waiters_and_debts_within_room() {
        let mut e = E::new(limits(2, 5));
        assert_eq!(e.refill(now()).slots.len(), 2, "up to init_count");
        assert!(e.refill(now()).is_empty(), "already starting");
        for _ in 0..2 {
            e.enqueue(0).unwrap();
        }
        assert!(e.refill(now()).is_empty(), "two starting serve two waiters");
        e.owe_replacement();
        e.owe_replacement();
        e.owe_replacement();
        assert_eq!(e.refill(now()).slots.len(), 1, "three owed, two starting");
        e.check_all();
    }

    #[test]
    fn an_expired_head_is_evicted_at_take_and_owed_a_replacement() {
        let mut e = E::new(limits(0, 2));
        let t0 = now();
        let starts = e.grow(2, t0);
        for ((k, _), v) in starts.slots.into_iter().zip(["old", "young"]) {
            let life = if v == "old" { 10 } else { 100 };
            assert!(e.started(k, t0, Some(t0 + Duration::from_secs(life))));
            e.put_free(k, v, t0);
        }
        e.limits.order = MemberOrder::Fifo; // "old" is at the head
        let later = t0 + Duration::from_secs(20);
        let Take::Expired(k, "old") = e.take(later, Location::caller()) else {
            panic!()
        };
        assert_eq!(e.counts().stopping, 1);
        e.stop_done(k);
        let Take::Member(_, "young", _) = e.take(later, Location::caller()) else {
            panic!()
        };
        assert_eq!(
            e.refill(later).slots.len(),
            1,
            "the expired one is replaced"
        );
        e.check_all();
    }

    #[test]
    fn the_expiry_heap_skips_members_that_left_or_moved() {
        let mut e = E::new(limits(0, 3));
        let t0 = now();
        let keys = fill(&mut e, &["a", "b", "c"]);
        e.reschedule(|born| Some(born + Duration::from_secs(10)));
        let first = e.next_expiry().unwrap();
        assert!(first >= t0 + Duration::from_secs(10));
        let Take::Member(k, v, _) = e.take(t0, Location::caller()) else {
            panic!()
        };
        let later = first + Duration::from_secs(1);
        let due = e.expire_due(later);
        assert_eq!(due.len(), 2, "the one in use stays with its holder");
        assert!(e.returning(k, later).expired);
        e.put_free(k, v, t0);
        e.reschedule(|_| None);
        assert_eq!(e.next_expiry(), None);
        assert_eq!(keys.len(), 3);
        e.check_all();
    }

    #[test]
    fn cull_keeps_the_window_peak_and_never_touches_members_in_use() {
        let mut e = E::new(limits(1, 10));
        let t0 = now();
        fill(&mut e, &["a", "b", "c", "d", "e"]);
        let mut held = Vec::new();
        for _ in 0..4 {
            let Take::Member(k, v, _) = e.take(t0, Location::caller()) else {
                panic!()
            };
            held.push((k, v));
        }
        let max_age = Duration::from_secs(10);
        assert_eq!(
            e.cull(t0, max_age).len(),
            1,
            "only the free member beyond the peak of 4"
        );
        assert_eq!(e.counts().in_use, 4, "in-use members untouched");
        for (k, v) in held.drain(..) {
            e.put_free(k, v, t0);
        }
        let at = |s| t0 + Duration::from_secs(s);
        // The 4 in use until the returns are the peak of the tick at 5 s.
        assert!(e.cull(at(5), max_age).is_empty());
        assert!(
            e.cull(at(11), max_age).is_empty(),
            "that peak is still in the window"
        );
        assert_eq!(e.cull(at(16), max_age).len(), 3, "down to init_count");
        assert_eq!(e.counts().free, 1);
        e.check_all();
    }

    #[test]
    fn a_health_claim_takes_each_idle_member_once_per_round() {
        let mut e = E::new(limits(0, 3));
        let t0 = now();
        fill(&mut e, &["a", "b"]);
        let round = t0 + Duration::from_secs(1);
        let (k, v) = e.claim_for_check(round, round).unwrap();
        assert_eq!(v, "a", "idle longest first");
        assert_eq!(e.counts().in_use, 1);
        e.put_free(k, v, round);
        let (k2, v2) = e.claim_for_check(round, round).unwrap();
        assert_eq!(v2, "b");
        e.put_free(k2, v2, round);
        assert!(
            e.claim_for_check(round, round).is_none(),
            "both checked this round"
        );
        e.check_all();
    }

    /// Regression: lowering max_count below the members held broke invariant #1 (stopping
    /// members still count until their stops end).
    #[test]
    fn lowering_max_count_keeps_the_excess_stopping_and_starts_nothing() {
        let mut e = E::new(limits(0, 4));
        let t0 = now();
        fill(&mut e, &["a", "b", "c", "d"]);
        let stopping = e.take_oldest_free(2, t0);
        e.set_limits(Limits {
            max_count: 2,
            ..e.limits
        });
        e.owe_replacement();
        assert!(
            e.refill(t0).is_empty(),
            "no room until the excess has stopped"
        );
        let Take::Empty(Empty::AtCapacity, starts) = ({
            let _a = e.take(t0, Location::caller());
            let _b = e.take(t0, Location::caller());
            e.take(t0, Location::caller())
        }) else {
            panic!()
        };
        assert!(starts.is_empty());
        for (k, _) in stopping {
            e.stop_done(k);
        }
        e.check_all();
    }

    /// Regression: with culling off, the peak since the last tick never reset, so turning
    /// culling on kept a burst from long before the window.
    #[test]
    fn a_peak_older_than_the_window_is_forgotten_when_no_take_happened() {
        let mut e = E::new(limits(1, 6));
        let t0 = now();
        fill(&mut e, &["a", "b", "c", "d", "e", "f"]);
        let mut held = Vec::new();
        for _ in 0..6 {
            let Take::Member(k, v, _) = e.take(t0, Location::caller()) else {
                panic!()
            };
            held.push((k, v));
        }
        for (k, v) in held {
            e.put_free(k, v, t0);
        }
        let a_minute_later = t0 + Duration::from_secs(60);
        assert_eq!(e.cull(a_minute_later, Duration::from_secs(10)).len(), 5);
        e.check_all();
    }
}

/// Loom models of the hand-off protocol the pool builds on the engine: the engine under one
/// lock, a returned member handed to the oldest waiter through a cell, waiters that give up
/// (cancel) concurrently, and a competing taker. Every interleaving must end with the one
/// member held by exactly one party or free, never lost, never doubled.
///
/// `RUSTFLAGS="--cfg pooler_loom" cargo test -p pooler --lib --release loom`
#[cfg(all(test, pooler_loom))]
mod loom_models {
    use super::*;
    use loom::sync::{Arc, Mutex};

    /// A waiter's hand-off cell: a member, or nothing yet.
    type Cell = Arc<Mutex<Option<(Key, u32)>>>;
    type Shared = Arc<Mutex<Engine<u32, Cell>>>;

    fn pool_with_one_member_taken() -> (Shared, (Key, u32)) {
        let mut e = Engine::new(Limits {
            init_count: 0,
            max_count: 1,
            queue_max: 4,
            order: MemberOrder::Lifo,
            auto_grow_threshold: None,
        });
        let now = Instant::now();
        let starts = e.grow(1, now);
        let (key, _) = starts.slots[0];
        assert!(e.started(key, now, None));
        (Arc::new(Mutex::new(e)), (key, 7))
    }

    /// The returner: to the oldest waiter (through its cell), else to the free list.
    fn give_back(shared: &Shared, member: (Key, u32)) {
        let mut e = shared.lock().unwrap();
        if let Some(cell) = e.pop_waiter() {
            *cell.lock().unwrap() = Some(member);
            e.handed_over(member.0, Instant::now(), Location::caller());
        } else {
            e.put_free(member.0, member.1, Instant::now());
        }
    }

    /// A taker that queues, then gives up; returns what it ended up holding.
    fn take_then_cancel(shared: &Shared) -> Option<(Key, u32)> {
        let cell: Cell = Arc::new(Mutex::new(None));
        let id = {
            let mut e = shared.lock().unwrap();
            match e.take(Instant::now(), Location::caller()) {
                Take::Member(k, v, _) => return Some((k, v)),
                Take::Expired(..) => unreachable!(),
                Take::Empty(..) => match e.enqueue(cell.clone()) {
                    Ok(id) => id,
                    Err(_) => return None,
                },
            }
        };
        loom::thread::yield_now();
        let still_queued = shared.lock().unwrap().cancel_waiter(id).is_some();
        let handed = cell.lock().unwrap().take();
        assert!(
            !(still_queued && handed.is_some()),
            "a member went to a waiter still queued"
        );
        handed
    }

    fn settle(shared: &Shared, held: Vec<Option<(Key, u32)>>) {
        let held: Vec<_> = held.into_iter().flatten().collect();
        let e = shared.lock().unwrap();
        let c = e.counts();
        assert!(held.len() <= 1, "one member held twice: {held:?}");
        assert_eq!(c.in_use, held.len(), "held ≠ in use: {c:?}");
        assert_eq!(c.in_use + c.free, 1, "the member was lost: {c:?}");
        assert_eq!(c.queued, 0);
        e.check_all();
    }

    #[test]
    fn loom_return_races_a_waiter_that_gives_up() {
        loom::model(|| {
            let (shared, member) = pool_with_one_member_taken();
            let s = shared.clone();
            let waiter = loom::thread::spawn(move || take_then_cancel(&s));
            give_back(&shared, member);
            let held = waiter.join().unwrap();
            settle(&shared, vec![held]);
        });
    }

    #[test]
    fn loom_two_waiters_and_a_return() {
        loom::model(|| {
            let (shared, member) = pool_with_one_member_taken();
            let (a, b) = (shared.clone(), shared.clone());
            let first = loom::thread::spawn(move || take_then_cancel(&a));
            let second = loom::thread::spawn(move || take_then_cancel(&b));
            give_back(&shared, member);
            let held = vec![first.join().unwrap(), second.join().unwrap()];
            settle(&shared, held);
        });
    }
}
