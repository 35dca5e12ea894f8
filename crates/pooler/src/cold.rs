//! The cold engine: the bookkeeping of members' lives — slots and their statuses, starts and
//! their backoff, stops, owed replacements, the demand window, expiries. A state machine
//! with no `async` and no I/O, behind its own lock, which takes and returns never touch
//! unless they must start members or stop one.
//!
//! Every member the pool knows has a slot, keyed by a [`Key`], in one status: `Starting` (a
//! start task owns the slot), `Live` (free or in use: the hot core knows which) or
//! `Stopping` (a stop task owns it). The hot core's counts come in as a [`View`].
//!
//! # Invariants
//!
//! 1. `live + starting + stopping <= max_count`: stopping members count until their stop
//!    ends, starting ones from the moment the start is decided. The one exception is a
//!    `reconfigure` that lowers `max_count`: the members beyond the new cap are all stopping
//!    (`excess`), the excess only shrinks as their stops end, and nothing starts until it is
//!    gone.
//! 2. Every slot is in exactly one status, and the counts are the numbers of slots in each;
//!    `live` equals the hot core's `in_use + free`.
//! 3. A closed engine decides no starts.
//! 4. The start policy's invariants (see [`crate::backoff`]): while starts are failing a new
//!    start is decided only when none is in flight, after the backoff step.
//! 5. The expiry set holds exactly the expiries of `Live` members that have one; the
//!    early-start set, with `max_lifetime_overlap`, those expiries moved earlier by it.
//! 6. No start is decided while `max_concurrent_starts` are in progress (a reconfigure that
//!    lowers it lets the starts under way finish).
//! 7. With `max_start_rate`, no two starts begin less than `1 s / rate` apart: each start
//!    decided sleeps until its turn (it counts as in progress meanwhile).

use std::time::Duration;

use slab::Slab;
use tokio::time::Instant;

use crate::backoff::StartPolicy;
use crate::demand::Demand;
use crate::error::{Empty, StartError};
use crate::expiries::Expiries;
use crate::held::Key;
use crate::hot::View;

mod lifetimes;
mod stops;
mod types;
pub(crate) use types::{Death, Limits, Row, Starts, Status};

#[derive(Debug)]
struct Slot<P> {
    id: u64,
    status: Status,
    born: Instant,
    expires_at: Option<Instant>,
    /// A start: the start policy's epoch when it was decided.
    epoch: u64,
    /// A start: the member's death signal was seen.
    dead: bool,
    /// What the pool keeps with a live member (its shared metadata).
    payload: Option<P>,
}

#[derive(Debug)]
pub(crate) struct Cold<P> {
    limits: Limits,
    slots: Slab<Slot<P>>,
    live: usize,
    starting: usize,
    stopping: usize,
    /// Replacements owed for members destroyed and not yet replaced by a successful start.
    owed: usize,
    /// Members beyond `max_count` after `reconfigure` lowered it, all stopping (invariant #1).
    excess: usize,
    closed: bool,
    policy: StartPolicy,
    demand: Demand,
    expiries: Expiries,
    /// When each live member's replacement starts, with `max_lifetime_overlap`.
    early: Expiries,
    /// Replacements started ahead of lifetimes still to end: each pays for one retirement at
    /// `max_lifetime`, which then owes none.
    prepaid: usize,
    /// With `max_start_rate`: the earliest a next start may begin (invariant #7).
    paced_until: Option<Instant>,
    next_id: u64,
}

impl<P> Cold<P> {
    pub(crate) fn new(limits: Limits) -> Self {
        Cold {
            limits,
            slots: Slab::with_capacity(limits.max_count.min(64)),
            live: 0,
            starting: 0,
            stopping: 0,
            owed: 0,
            excess: 0,
            closed: false,
            policy: StartPolicy::new(limits.backoff_jitter.then(fastrand::Rng::new)),
            demand: Demand::default(),
            expiries: Expiries::default(),
            early: Expiries::default(),
            prepaid: 0,
            paced_until: None,
            next_id: 1,
        }
    }

    /// Invariants #1–#3 and #5 in O(1); `debug_assert!`ed after every change.
    fn holds(&self) -> bool {
        let total = self.live + self.starting + self.stopping;
        total <= self.limits.max_count + self.excess
            && self.excess <= self.stopping
            && self.slots.len() == total
            && self.expiries.len() <= self.live
            && self.early.len() <= self.live
    }

    /// Invariant #2 slot by slot against the hot core's counts, O(n); for tests.
    #[cfg(test)]
    pub(crate) fn check_all(&self, view: View) {
        assert!(self.holds());
        assert_eq!(self.live, view.live());
        let mut seen = [0usize; 3];
        for (_, s) in &self.slots {
            seen[s.status as usize] += 1;
        }
        assert_eq!(seen, [self.starting, self.live, self.stopping]);
    }

    pub(crate) fn limits(&self) -> Limits {
        self.limits
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }

    pub(crate) fn starting(&self) -> usize {
        self.starting
    }

    pub(crate) fn stopping(&self) -> usize {
        self.stopping
    }

    fn room(&self, view: View) -> usize {
        debug_assert_eq!(self.live, view.live(), "invariant #2");
        self.limits
            .max_count
            .saturating_sub(view.live() + self.starting + self.stopping)
    }

    /// Whether a take that finds nothing free could start nothing and is decided by the
    /// limits alone: no room, starts not failing, not closed. The hot core keeps a copy.
    pub(crate) fn saturated(&self, view: View) -> bool {
        self.room(view) == 0 && !self.policy.failing() && !self.closed
    }

    /// The most recent start failure, while starts are failing.
    pub(crate) fn last_error(&self) -> Option<&StartError> {
        self.policy.last_error()
    }

    // ---- takes ------------------------------------------------------------------------

    /// A take at `now` that found nothing free (docs/design.md, "Taking" and "Failing starts"): why, and the starts it
    /// decided — a batch of `max(min(init − starting, room), 1)`, or while starts are failing
    /// the one backoff start. `deadline` is when the taker stops waiting.
    pub(crate) fn take(&mut self, now: Instant, deadline: Instant, view: View) -> (Empty, Starts) {
        if self.closed {
            return (Empty::Closed, Starts::default());
        }
        if self.policy.failing() {
            let starts = self.backoff_start(now, view);
            let why = if view.in_use == 0 && !self.policy.reaches(self.starting, deadline) {
                Empty::Unavailable
            } else if self.room(view) == 0 && starts.is_empty() {
                Empty::AtCapacity
            } else {
                Empty::AllInUse
            };
            return (why, starts);
        }
        let room = self.room(view);
        if room == 0 {
            return (Empty::AtCapacity, Starts::default());
        }
        let batch = self
            .limits
            .init_count
            .saturating_sub(self.starting)
            .min(room)
            .max(1);
        (Empty::AllInUse, self.reserve(batch, Duration::ZERO, now))
    }

    /// After a take that left `view.free` members free: if at most `auto_grow_threshold` are,
    /// start up to `init_count` more within `max_count`.
    pub(crate) fn auto_grow(&mut self, now: Instant, view: View) -> Starts {
        match self.limits.auto_grow_threshold {
            Some(threshold) if view.free <= threshold && !self.policy.failing() && !self.closed => {
                let n = self
                    .limits
                    .init_count
                    .saturating_sub(self.starting)
                    .min(self.room(view));
                self.reserve(n, Duration::ZERO, now)
            }
            _ => Starts::default(),
        }
    }

    /// While backing off: one start if none is in flight and there is room, attempting at
    /// the end of the backoff step.
    fn backoff_start(&mut self, now: Instant, view: View) -> Starts {
        if self.starting > 0 || self.room(view) == 0 || self.closed {
            return Starts::default();
        }
        let at = self.policy.attempt_at(now);
        let starts = self.reserve(1, at - now, now);
        if at > now
            && let Some(&(key, _)) = starts.slots.first()
        {
            self.policy.delay(key, at);
        }
        starts
    }

    fn reserve(&mut self, n: usize, delay: Duration, now: Instant) -> Starts {
        // Invariant #6: never more than `max_concurrent_starts` in progress.
        let n = n.min(self.limits.max_starts.saturating_sub(self.starting));
        // `n` is bounded by the room under max_count, itself bounded by validation; still,
        // nothing is allocated ahead from a number a user chose.
        let mut slots = Vec::with_capacity(n.min(64));
        for _ in 0..n {
            let id = self.next_id;
            self.next_id += 1;
            let key = self.slots.insert(Slot {
                id,
                status: Status::Starting,
                born: now,
                expires_at: None,
                epoch: self.policy.epoch(),
                dead: false,
                payload: None,
            });
            self.starting += 1;
            slots.push((key, id));
        }
        debug_assert!(self.holds(), "invariant #1: reserved past max_count");
        // Invariant #7: with `max_start_rate`, starts begin `spacing` apart, counted from the
        // last one decided.
        let (delay, spacing) = match self.limits.start_spacing {
            Some(spacing) if n > 0 => {
                let first = self.paced_until.map_or(now + delay, |p| p.max(now + delay));
                self.paced_until = Some(first + spacing.saturating_mul(n as u32));
                (first - now, spacing)
            }
            _ => (delay, Duration::ZERO),
        };
        Starts {
            slots,
            delay,
            spacing,
        }
    }

    // ---- starts -----------------------------------------------------------------------

    /// A start produced a member: its slot becomes `Live` (the caller admits it to the hot
    /// core). Returns `false`, and makes it `Stopping`, if it died while starting (a failed
    /// start: the policy backs off) or the pool closed meanwhile.
    pub(crate) fn started(
        &mut self,
        key: Key,
        now: Instant,
        expires_at: Option<Instant>,
        payload: P,
    ) -> bool {
        debug_assert_eq!(self.slots[key].status, Status::Starting);
        self.policy.ended(key);
        if self.closed {
            self.set_status(key, Status::Stopping);
            return false;
        }
        if self.slots[key].dead {
            // A backend that accepts and then drops every connection must back off too.
            self.start_failed(key, StartError::Died, true, now);
            return false;
        }
        let slot = &mut self.slots[key];
        slot.born = now;
        slot.expires_at = expires_at;
        slot.payload = Some(payload);
        if let Some(at) = expires_at {
            self.expiries.insert(at, key, slot.id);
            if let Some(overlap) = self.limits.overlap {
                self.early
                    .insert(at.checked_sub(overlap).unwrap_or(at), key, slot.id);
            }
        }
        self.policy.succeeded();
        self.owed = self.owed.saturating_sub(1);
        self.set_status(key, Status::Live);
        debug_assert!(self.holds());
        true
    }

    /// A start failed (error, timeout, panic, death or a broken member) and the pool backs
    /// off (invariant #4). If the start produced a member that must still be stopped, the
    /// slot becomes `Stopping`; otherwise it is removed.
    pub(crate) fn start_failed(
        &mut self,
        key: Key,
        error: StartError,
        produced: bool,
        now: Instant,
    ) {
        debug_assert_eq!(self.slots[key].status, Status::Starting);
        self.policy.ended(key);
        let epoch = self.slots[key].epoch;
        if produced {
            self.set_status(key, Status::Stopping);
        } else {
            self.slots.remove(key);
            self.starting -= 1;
        }
        self.policy.failed(epoch, error, now);
        debug_assert!(self.holds());
    }

    /// A start was dropped by a close (or its runtime going): the slot is removed, and
    /// nothing failed.
    pub(crate) fn start_abandoned(&mut self, key: Key) {
        debug_assert_eq!(self.slots[key].status, Status::Starting);
        self.policy.ended(key);
        self.slots.remove(key);
        self.starting -= 1;
        debug_assert!(self.holds());
    }

    /// The starts the pool needs now: enough to hold `init_count` members, serve every
    /// waiter the admission limit lets hold a member, and pay the replacements owed, less those already starting, within `max_count`;
    /// while backing off, one delayed start at a time (invariant #4).
    pub(crate) fn refill(&mut self, now: Instant, view: View) -> Starts {
        if self.closed {
            return Starts::default();
        }
        let need = self
            .limits
            .init_count
            .saturating_sub(view.live())
            .max(view.wanting())
            .max(self.owed)
            .saturating_sub(self.starting)
            .min(self.room(view));
        if need == 0 {
            return Starts::default();
        }
        if self.policy.failing() {
            return self.backoff_start(now, view);
        }
        self.reserve(need, Duration::ZERO, now)
    }

    /// Reserves exactly `n` starts (within room), for pool start and `reconfigure`.
    pub(crate) fn grow(&mut self, n: usize, now: Instant, view: View) -> Starts {
        if self.closed {
            return Starts::default();
        }
        let n = n.min(self.room(view));
        self.reserve(n, Duration::ZERO, now)
    }

    // ---- lifecycle: cull, lifetimes, reconfigure, stats -------------------------------

    /// A cull tick (docs/design.md, "Culling"): records `peak` (the highest in-use count since the last tick,
    /// last seen at `seen`) in the demand window and says how many free members are beyond
    /// `max(init_count, the window's peak)`, to be stopped oldest idle first.
    pub(crate) fn cull(
        &mut self,
        now: Instant,
        max_age: Duration,
        peak: usize,
        seen: Instant,
        view: View,
    ) -> usize {
        let window_peak = self.demand.tick(now, max_age, peak, seen, view.in_use);
        let target = self.limits.init_count.max(window_peak);
        view.live().saturating_sub(target).min(view.free)
    }

    /// New limits from `reconfigure`. The caller has already made stopping every member
    /// beyond a lower `max_count` (invariant #1).
    pub(crate) fn set_limits(&mut self, limits: Limits, view: View) {
        let overlap_changed = self.limits.overlap != limits.overlap;
        self.limits = limits;
        if overlap_changed {
            self.early.clear();
            if let Some(overlap) = limits.overlap {
                for (key, slot) in &self.slots {
                    if let (Status::Live, Some(at)) = (slot.status, slot.expires_at) {
                        self.early
                            .insert(at.checked_sub(overlap).unwrap_or(at), key, slot.id);
                    }
                }
            }
        }
        self.excess =
            (view.live() + self.starting + self.stopping).saturating_sub(limits.max_count);
        debug_assert!(
            self.holds(),
            "invariant #1: the excess over a lower max_count must be stopping"
        );
    }

    /// Every slot, for stats.
    pub(crate) fn rows(&self) -> impl Iterator<Item = Row<'_, P>> {
        self.slots.iter().map(|(key, s)| Row {
            key,
            id: s.id,
            status: s.status,
            expires_at: s.expires_at,
            payload: s.payload.as_ref(),
        })
    }

    /// The payload of a live member.
    pub(crate) fn payload(&self, key: Key) -> Option<&P> {
        self.slots.get(key).and_then(|s| s.payload.as_ref())
    }
}

#[cfg(test)]
mod tests;
