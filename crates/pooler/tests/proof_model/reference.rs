//! A reference model of one pool: a plain, sequential statement of the rules in
//! docs/design.md ("Taking", "Failing starts", and for the features a sequence turns on,
//! "Start throttling", "Shedding", "Admission" and "Lifetimes") — the free list in order,
//! the FIFO queue, the capacity, the starts each event decides, backoff, the start cap, the
//! shedding window and stale takes, the admission limit's bound on members in use with its
//! newest-first serving and bounded waits, lifetimes ending and their successors started
//! ahead — run in lockstep with the real pool. After every step the two must agree on what
//! each take got (which member, or which error), which waiters were served and in what
//! order, the members that exist (so the starts decided), and the counts.
//!
//! The admission limit itself moves with the latencies the pool measures; the model does
//! not restate the limiters (their unit tests and the overload simulation judge them). It
//! reads the limit from the pool after each step and states what the limit does.
//!
//! Time: the pool runs on tokio's paused clock, whose timers tick in whole milliseconds. So
//! that no two kinds of event ever share a tick, operations happen at even milliseconds,
//! backoff steps are even (100 ms × 2ⁿ: the pool runs without backoff jitter here), and every
//! taker's timeout is odd: a member can never arrive in the very tick a taker gives up.
//! Lifetimes and their overlaps are even too. Some timers may still meet in one tick — a
//! delayed start, a lifetime's end, a waiter's bound under admission (any whole millisecond)
//! and a tick that moved the limit — where the runtime's timer wheel picks the order; the
//! sequence ends there (rare: the test checks that most steps are compared). Starts and
//! stops complete at once (within the step), in the order they were spawned, and a served
//! taker collects its member when its task runs, as tasks do on a current-thread runtime.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::features::{Features, Window, features};
use crate::common::*;
use pooler::{Member, MemberOrder, MemberStatus, PoolConfig, TakeError};
use proptest::prelude::*;

/// How a take ended, as a taker sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Still queued.
    Waiting,
    /// Handed this member.
    Served(u64),
    /// Refused, with the error's reason (`TakeError::reason`, `unavailable`, or
    /// `timeout+cause` for a timeout that carries the last start error).
    Failed(&'static str),
    /// Dropped by the test while queued.
    Cancelled,
}

impl Outcome {
    fn of(result: &Result<Member<Fake>, TakeError>) -> Outcome {
        match result {
            Ok(m) => Outcome::Served(Member::id(m)),
            Err(e) => Outcome::Failed(kind(e)),
        }
    }
}

fn kind(e: &TakeError) -> &'static str {
    match e {
        TakeError::Unavailable { .. } => "unavailable",
        TakeError::Timeout {
            last_start_error: Some(_),
            ..
        } => "timeout+cause",
        TakeError::QueueShrunk { .. } => "queue_shrunk",
        TakeError::Stale { .. } => "stale",
        other => other.reason(),
    }
}

/// How often the sequences met each feature's rule: the test fails if one never came up.
static SEEN: [AtomicUsize; 9] = [const { AtomicUsize::new(0) }; 9];
const SHED: usize = 0;
const STALE: usize = 1;
const CAPPED: usize = 2;
const PREPAID: usize = 3;
const RETIRED: usize = 4;
const OVER_LIMIT: usize = 5;
const NEWEST: usize = 6;
const BOUNDED: usize = 7;
const LIMITED: usize = 8;

fn seen(what: usize) {
    SEEN[what].fetch_add(1, SeqCst);
}

/// The housekeeping tick's period, ms.
const TICK: u64 = 100;
/// The pool's timer horizon, in milliseconds: a queued take's bound further off is watched
/// by the tick until it comes within this (docs/design.md, "Timer horizon").
const HORIZON: u64 = 300;

/// The first backoff step and its cap (docs/design.md).
fn backoff(failures: u32) -> u64 {
    (100u64 << failures.saturating_sub(1).min(16)).min(10_000)
}

/// Work the pool does in its own tasks, in the order it was spawned.
#[derive(Debug, Clone, Copy)]
enum Task {
    /// A start attempts now: with the plan in force, it succeeds or fails at once.
    Start(u64),
    /// A stop ends (at once) and frees its slot.
    Stop,
    /// A member's driver task ends.
    DriverEnd(u64),
    /// A taker's `take_member`, first polled.
    Taker(usize),
    /// A queued taker (queued at the last field's time) handed this member, woken.
    Wake(usize, u64, u64),
}

/// A queued take.
#[derive(Debug, Clone, Copy)]
struct Waiter {
    w: usize,
    /// When it queued.
    since: u64,
    /// When it leaves if not served: its deadline, or with admission on its bound in the
    /// queue (`stale`).
    end: u64,
    stale: bool,
}

#[derive(Debug)]
struct Start {
    id: u64,
    /// How many backoff steps had been counted when the start was decided.
    epoch: u64,
    /// A start waiting out a backoff delay: when it attempts.
    at: Option<u64>,
}

/// The pool, as the rules describe it. Times are milliseconds since the pool started.
#[derive(Debug)]
pub(crate) struct Model {
    now: u64,
    init: usize,
    max: usize,
    queue_max: usize,
    fifo: bool,
    next_id: u64,
    /// Front: idle longest.
    free: VecDeque<u64>,
    /// Held by the test, or handed to a taker.
    in_use: BTreeSet<u64>,
    /// In use, with its driver task ended: replaced when it comes back.
    dead: BTreeSet<u64>,
    broken: BTreeSet<u64>,
    stopping: usize,
    starting: Vec<Start>,
    /// Queued takers, oldest first.
    waiters: VecDeque<Waiter>,
    timeouts: Vec<u64>,
    outcomes: Vec<Outcome>,
    failures: u32,
    epoch: u64,
    retry_at: Option<u64>,
    last_error: bool,
    owed: usize,
    plan_ok: bool,
    attempts: usize,
    tasks: VecDeque<Task>,
    /// `max_concurrent_starts` (`usize::MAX`: none).
    cap: usize,
    /// With `queue_target`.
    shed: Option<Window>,
    /// `max_lifetime` and `max_lifetime_overlap`.
    lifetime: Option<(u64, Option<u64>)>,
    /// When each live member's lifetime ends (kept until it stops).
    expiry: BTreeMap<u64, u64>,
    /// The lifetime ends still to be seen by the pool's timer.
    expiries: BTreeMap<u64, u64>,
    /// When each live member's successor starts, until it is seen.
    early: BTreeMap<u64, u64>,
    /// Successors started ahead of lifetimes still to end.
    prepaid: usize,
    /// The admission limit (`usize::MAX`: admission off). It moves with the latencies the
    /// pool measures, which the model does not restate: it is read from the pool after each
    /// step, and the model states what the limit does to takes, returns and starts.
    limit: usize,
    /// With admission on, the queue target: past it a standing queue is served newest
    /// first, and a take waits at most twice it.
    lifo_after: Option<u64>,
    /// When the queue last stopped being empty, while `lifo_after` is set.
    queued_since: Option<u64>,
    /// The pool's next housekeeping tick (which may lower the limit, and wakes the queued
    /// takes whose bound has come within the timer horizon).
    next_tick: Option<u64>,
}

impl Model {
    /// A pool just started: `init` members started (and succeeded) in parallel.
    fn new(init: usize, max: usize, queue_max: usize, features: Features) -> Model {
        let mut m = Model {
            now: 0,
            init,
            max,
            queue_max,
            fifo: false,
            next_id: 1,
            free: VecDeque::new(),
            in_use: BTreeSet::new(),
            dead: BTreeSet::new(),
            broken: BTreeSet::new(),
            stopping: 0,
            starting: Vec::new(),
            waiters: VecDeque::new(),
            timeouts: Vec::new(),
            outcomes: Vec::new(),
            failures: 0,
            epoch: 0,
            retry_at: None,
            last_error: false,
            owed: 0,
            plan_ok: true,
            attempts: 0,
            tasks: VecDeque::new(),
            cap: features.cap.unwrap_or(usize::MAX),
            shed: features
                .shed
                .map(|(target, interval)| Window::new(target, interval)),
            lifetime: features.lifetime,
            expiry: BTreeMap::new(),
            expiries: BTreeMap::new(),
            early: BTreeMap::new(),
            prepaid: 0,
            limit: usize::MAX,
            lifo_after: features
                .admission
                .and(features.shed.map(|(target, _)| target)),
            queued_since: None,
            next_tick: Some(TICK),
        };
        let ids = m.reserve(init, None);
        m.spawn(ids);
        m.run();
        m
    }

    fn room(&self) -> usize {
        self.max.saturating_sub(
            self.in_use.len() + self.free.len() + self.starting.len() + self.stopping,
        )
    }

    /// `n` starts, or as many as `max_concurrent_starts` leaves room for.
    fn reserve(&mut self, n: usize, at: Option<u64>) -> Vec<u64> {
        let capped = n.min(self.cap.saturating_sub(self.starting.len()));
        if capped < n {
            seen(CAPPED);
        }
        let n = capped;
        (0..n)
            .map(|_| {
                let id = self.next_id;
                self.next_id += 1;
                self.starting.push(Start {
                    id,
                    epoch: self.epoch,
                    at,
                });
                id
            })
            .collect()
    }

    fn spawn(&mut self, starts: Vec<u64>) {
        self.tasks.extend(starts.into_iter().map(Task::Start));
    }

    /// While backing off: one start, when none is in flight and there is room, attempting
    /// once the backoff step has passed. Returns it if it attempts now.
    fn backoff_start(&mut self) -> (bool, Vec<u64>) {
        if !self.starting.is_empty() || self.room() == 0 {
            return (false, Vec::new());
        }
        let at = self.retry_at.unwrap_or(self.now).max(self.now);
        if at > self.now {
            self.reserve(1, Some(at));
            (true, Vec::new())
        } else {
            (true, self.reserve(1, None))
        }
    }

    /// Whether a start in flight attempts by `by`.
    fn start_reaches(&self, by: u64) -> bool {
        self.starting.iter().any(|s| s.at.is_none_or(|at| at <= by))
    }

    /// Waiters a new member could serve: those the admission limit lets hold one.
    fn wanting(&self) -> usize {
        self.waiters
            .len()
            .min(self.limit.saturating_sub(self.in_use.len()))
    }

    /// The starts the pool needs: to hold `init`, serve every waiter the limit lets hold a
    /// member, pay what is owed.
    fn refill(&mut self) -> Vec<u64> {
        let live = self.in_use.len() + self.free.len();
        let need = self
            .init
            .saturating_sub(live)
            .max(self.wanting())
            .max(self.owed)
            .saturating_sub(self.starting.len())
            .min(self.room());
        if need == 0 {
            return Vec::new();
        }
        if self.failures > 0 {
            return self.backoff_start().1;
        }
        self.reserve(need, None)
    }

    /// A take with this deadline: a member, or why none (docs/design.md, "Taking"), spawning the starts
    /// it decided.
    fn take(&mut self, deadline: u64) -> Result<u64, &'static str> {
        loop {
            // Over the admission limit a start would not help: the take waits for a member
            // in use to come back.
            if self.in_use.len() >= self.limit {
                seen(OVER_LIMIT);
                return Err("over_limit");
            }
            if let Some(id) = self.pop() {
                if self.broken.contains(&id) {
                    self.destroy(id, false);
                    continue;
                }
                return Ok(id);
            }
            if self.failures > 0 {
                let (started, now) = self.backoff_start();
                self.spawn(now);
                return Err(if self.in_use.is_empty() && !self.start_reaches(deadline) {
                    if self.last_error {
                        "unavailable"
                    } else {
                        "all_in_use"
                    }
                } else if self.room() == 0 && !started {
                    "at_capacity"
                } else {
                    "all_in_use"
                });
            }
            let room = self.room();
            if room == 0 {
                return Err("at_capacity");
            }
            let batch = self
                .init
                .saturating_sub(self.starting.len())
                .min(room)
                .max(1);
            let ids = self.reserve(batch, None);
            self.spawn(ids);
            return Err("all_in_use");
        }
    }

    /// A free member by `member_order`, now in use.
    fn pop(&mut self) -> Option<u64> {
        let id = if self.fifo {
            self.free.pop_front()
        } else {
            self.free.pop_back()
        }?;
        self.in_use.insert(id);
        Some(id)
    }

    /// Stops a member taken from use and owes its replacement — none for a lifetime's end
    /// whose successor was started ahead. Its place under the limit goes to a waiter.
    fn destroy(&mut self, id: u64, lifetime: bool) {
        self.in_use.remove(&id);
        self.hand_free();
        self.stops(id);
        if lifetime && self.prepaid > 0 {
            self.prepaid -= 1;
        } else {
            self.owed = (self.owed + 1).min(self.max);
        }
        let starts = self.refill();
        self.tasks.push_back(Task::Stop);
        self.spawn(starts);
    }

    /// A member leaves the live ones: it is stopping.
    fn stops(&mut self, id: u64) {
        self.stopping += 1;
        self.expiry.remove(&id);
        self.expiries.remove(&id);
        self.early.remove(&id);
    }

    /// Joins the queue; with admission on, a take waits twice the target at most, and no
    /// longer than half its own budget once it has waited the target (docs/design.md,
    /// "Admission"). Timers fire at the first whole millisecond at or after their instant.
    fn enqueue(&mut self, w: usize, timeout: u64) {
        let since = self.now;
        let (end, stale) = match self.lifo_after {
            Some(target) => {
                let bound_us = (2 * target * 1000).min((target * 1000).max(timeout * 500));
                if bound_us < timeout * 1000 {
                    (since + bound_us.div_ceil(1000), true)
                } else {
                    (since + timeout, false)
                }
            }
            None => (since + timeout, false),
        };
        if self.lifo_after.is_some() && self.waiters.is_empty() {
            self.queued_since = Some(since);
        }
        self.waiters.push_back(Waiter {
            w,
            since,
            end,
            stale,
        });
    }

    /// The queue lost a waiter.
    fn left(&mut self) {
        if self.waiters.is_empty() {
            self.queued_since = None;
        }
    }

    /// Hands `id` (in use) to a waiter — the oldest, or the newest once a standing queue
    /// has passed the target — who collects it when its task runs.
    fn serve(&mut self, id: u64) {
        let newest = match (self.lifo_after, self.queued_since) {
            (Some(after), Some(since)) => self.now - since > after,
            _ => false,
        };
        let waiter = if newest {
            seen(NEWEST);
            self.waiters.pop_back()
        } else {
            self.waiters.pop_front()
        };
        let waiter = waiter.expect("a waiter to serve");
        self.left();
        self.tasks.push_back(Task::Wake(waiter.w, id, waiter.since));
    }

    /// A member in use given back in good order: to a waiter while the limit allows, else
    /// to the back of the free list.
    fn give(&mut self, id: u64) {
        if self.waiters.is_empty() || self.in_use.len() > self.limit {
            self.in_use.remove(&id);
            self.free.push_back(id);
        } else {
            self.serve(id);
        }
    }

    /// A member just started: to a waiter while the limit allows, else free.
    fn admit(&mut self, id: u64) {
        if self.in_use.len() < self.limit && !self.waiters.is_empty() {
            self.in_use.insert(id);
            self.serve(id);
        } else {
            self.free.push_back(id);
        }
    }

    /// Free members to waiters while the limit allows (it rose, or a member left use).
    fn hand_free(&mut self) {
        while self.in_use.len() < self.limit && !self.waiters.is_empty() {
            let Some(id) = self.pop() else {
                break;
            };
            self.serve(id);
        }
    }

    /// The limit read from the pool after a step; whether it rose.
    fn set_limit(&mut self, limit: Option<usize>) -> bool {
        let raised = limit.unwrap_or(usize::MAX) > self.limit;
        self.limit = limit.unwrap_or(usize::MAX);
        if self.limit < self.max {
            seen(LIMITED);
        }
        self.hand_free();
        raised
    }

    /// A member given back: `ok` unless failed or dropped in a panic. An unfit one is
    /// replaced, as is one whose lifetime has ended. `raised`: the hold moved the admission
    /// limit up, so waiters it lets through and no free member serves get members started —
    /// before the member is replaced, after it is given on.
    fn give_back(&mut self, id: u64, ok: bool, raised: bool) {
        let expired = self.expiry.get(&id).is_some_and(|at| *at <= self.now);
        if !ok || self.broken.contains(&id) || self.dead.contains(&id) || expired {
            self.start_for_raised(raised);
            let lifetime = ok && !self.broken.contains(&id) && !self.dead.contains(&id);
            self.destroy(id, lifetime);
        } else {
            self.give(id);
            self.start_for_raised(raised);
        }
    }

    /// After a hold that raised the limit: starts for the waiters it lets through, if any
    /// wants one.
    fn start_for_raised(&mut self, raised: bool) {
        if raised && self.wanting() > 0 {
            let starts = self.refill();
            self.spawn(starts);
        }
    }

    /// Runs the pool's tasks until none is left.
    fn run(&mut self) {
        while let Some(task) = self.tasks.pop_front() {
            match task {
                Task::Start(id) => {
                    let at = self.starting.iter().position(|s| s.id == id).unwrap();
                    let start = self.starting.remove(at);
                    self.attempts += 1;
                    if self.plan_ok {
                        self.failures = 0;
                        self.retry_at = None;
                        self.last_error = false;
                        self.owed = self.owed.saturating_sub(1);
                        if let Some((lifetime, overlap)) = self.lifetime {
                            let at = self.now + lifetime;
                            self.expiry.insert(id, at);
                            self.expiries.insert(id, at);
                            if let Some(overlap) = overlap {
                                self.early.insert(id, at - overlap);
                            }
                        }
                        self.admit(id);
                    } else {
                        if start.epoch == self.epoch {
                            self.failures += 1;
                            self.epoch += 1;
                            self.retry_at = Some(self.now + backoff(self.failures));
                        }
                        self.last_error = true;
                    }
                    let starts = self.refill();
                    self.spawn(starts);
                }
                Task::Stop => {
                    self.stopping -= 1;
                    let starts = self.refill();
                    self.spawn(starts);
                }
                Task::DriverEnd(id) => {
                    let was_free = self.free.iter().position(|f| *f == id);
                    if let Some(at) = was_free {
                        self.free.remove(at);
                        self.stops(id);
                        self.owed = (self.owed + 1).min(self.max);
                    } else if self.in_use.contains(&id) {
                        // Marked, and replaced when it comes back: nothing else changes.
                        self.dead.insert(id);
                    }
                    if was_free.is_some() {
                        let starts = self.refill();
                        self.tasks.push_back(Task::Stop);
                        self.spawn(starts);
                    }
                }
                Task::Taker(w) => {
                    let now = self.now;
                    let timeout = self.timeouts[w];
                    self.outcomes[w] = match self.take(now + timeout) {
                        Ok(id) => Outcome::Served(id),
                        Err(why @ ("unavailable" | "closed")) => Outcome::Failed(why),
                        // It would queue: an overloaded pool sheds it instead.
                        Err(_)
                            if self.waiters.len() < self.queue_max
                                && self.shed.as_mut().is_some_and(|s| s.sheds(now)) =>
                        {
                            seen(SHED);
                            Outcome::Failed("shed")
                        }
                        Err(_) if self.waiters.len() < self.queue_max => {
                            self.enqueue(w, timeout);
                            Outcome::Waiting
                        }
                        Err(why) if self.queue_max == 0 => Outcome::Failed(why),
                        Err(_) => Outcome::Failed("queue_full"),
                    };
                }
                Task::Wake(w, id, since) => {
                    let (now, waited) = (self.now, self.now - since);
                    let stale = self.shed.as_mut().is_some_and(|s| {
                        s.waited(waited, now);
                        s.stale(waited, now)
                    });
                    if stale {
                        // Its turn came too late: the member goes on as the pool's own.
                        seen(STALE);
                        self.outcomes[w] = Outcome::Failed("stale");
                        self.give_back(id, true, false);
                    } else {
                        self.outcomes[w] = Outcome::Served(id);
                    }
                }
            }
        }
    }

    /// The next instant, up to `until`, at which a delayed start attempts or a taker's
    /// deadline passes.
    fn next_event(&self, until: u64) -> Option<u64> {
        let starts = self.starting.iter().filter_map(|s| s.at);
        let ends = self.waiters.iter().map(|w| w.end);
        let lifetimes = self.expiries.values().chain(self.early.values()).copied();
        starts
            .chain(ends)
            .chain(lifetimes)
            .chain(self.next_tick)
            .filter(|t| *t <= until)
            .min()
    }

    /// Whether two timers due at `t` run in an order the rules do not say (the runtime's
    /// timer wheel keeps it), and it matters: a delayed start and a lifetime's timer, or
    /// either and a waiter's bound in the queue (whole milliseconds of any parity), or
    /// either and a tick that moved the admission limit (to `limit`, read from the pool), or
    /// either and a tick that wakes waiters whose bound has come within the timer horizon
    /// (they look at the queue again, and the order the runtime then runs them in decides
    /// which member goes back to the free list first).
    fn ambiguous(&self, t: u64, limit: Option<usize>) -> bool {
        let start = self.starting.iter().any(|s| s.at == Some(t));
        let lifetime = self
            .expiries
            .values()
            .chain(self.early.values())
            .any(|at| *at == t);
        let moved = self.next_tick == Some(t) && limit.unwrap_or(usize::MAX) != self.limit;
        let ends = self.waiters.iter().any(|w| w.end == t);
        let woken = self.next_tick == Some(t)
            && self
                .waiters
                .iter()
                .any(|w| w.end > t && w.end <= t + HORIZON);
        (start && lifetime) || ((start || lifetime) && (moved || ends || woken))
    }

    /// The pool's timer for lifetimes at `now` (docs/design.md, "Lifetimes"): successors
    /// of lifetimes about to end start first (within room, not while starts are failing),
    /// prepaid; then free members whose lifetime has ended are retired, each owing a
    /// replacement unless one was prepaid; members in use are retired when they come back.
    fn lifetimes_due(&mut self) {
        let now = self.now;
        let early: Vec<u64> = self
            .early
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| *id)
            .collect();
        let mut successors = Vec::new();
        if !early.is_empty() {
            early.iter().for_each(|id| {
                self.early.remove(id);
            });
            if self.failures == 0 {
                successors = self.reserve(early.len().min(self.room()), None);
                self.prepaid += successors.len();
                if !successors.is_empty() {
                    seen(PREPAID);
                }
            }
        }
        let due: Vec<u64> = self
            .expiries
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| *id)
            .collect();
        due.iter().for_each(|id| {
            self.expiries.remove(id);
        });
        // Free ones, idle longest first.
        let retired: Vec<u64> = self
            .free
            .iter()
            .filter(|id| due.contains(id))
            .copied()
            .collect();
        for id in &retired {
            seen(RETIRED);
            self.free.retain(|f| f != id);
            self.stops(*id);
            if self.prepaid > 0 {
                self.prepaid -= 1;
            } else {
                self.owed = (self.owed + 1).min(self.max);
            }
            self.tasks.push_back(Task::Stop);
        }
        let starts = self.refill();
        self.spawn(successors);
        self.spawn(starts);
    }

    /// Moves the clock to `t` and lets what is due happen; `limit` is the admission limit
    /// the pool has then (a tick may have lowered it).
    fn fire(&mut self, t: u64, limit: Option<usize>) {
        self.now = t;
        if self.next_tick == Some(t) {
            self.next_tick = Some(t + TICK);
            let _ = self.set_limit(limit);
        }
        for s in &mut self.starting {
            if s.at == Some(t) {
                s.at = None;
                self.tasks.push_back(Task::Start(s.id));
            }
        }
        let lifetimes = self.expiries.values().chain(self.early.values());
        if lifetimes.into_iter().any(|at| *at <= t) {
            self.lifetimes_due();
        }
        let cause = self.last_error;
        let mut kept = VecDeque::new();
        for waiter in std::mem::take(&mut self.waiters) {
            if waiter.end == t {
                self.outcomes[waiter.w] = Outcome::Failed(match (waiter.stale, cause) {
                    (true, _) => {
                        seen(BOUNDED);
                        "stale"
                    }
                    (false, true) => "timeout+cause",
                    (false, false) => "timeout",
                });
                if let Some(s) = &mut self.shed {
                    s.waited(t - waiter.since, t);
                }
            } else {
                kept.push_back(waiter);
            }
        }
        self.waiters = kept;
        self.left();
        self.run();
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Op {
    TryTake,
    /// Take with a timeout of `2n + 1` ms.
    Take(u64),
    Return(usize),
    Fail(usize),
    PanicDrop(usize),
    CancelWaiter(usize),
    Crash(usize),
    Break(usize),
    Starts(bool),
    /// Advance the clock by `2n` ms.
    Advance(u64),
    Reconfigure {
        queue_max: usize,
        fifo: bool,
    },
}

pub(crate) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::TryTake),
        4 => (0u64..100).prop_map(Op::Take),
        // Deadlines past the timer horizon: watched by the housekeeping tick until near.
        1 => (200u64..500).prop_map(Op::Take),
        4 => any::<usize>().prop_map(Op::Return),
        1 => any::<usize>().prop_map(Op::Fail),
        1 => any::<usize>().prop_map(Op::PanicDrop),
        1 => any::<usize>().prop_map(Op::CancelWaiter),
        1 => any::<usize>().prop_map(Op::Crash),
        1 => any::<usize>().prop_map(Op::Break),
        1 => proptest::bool::weighted(0.7).prop_map(Op::Starts),
        3 => (0u64..150).prop_map(Op::Advance),
        1 => (0usize..4, any::<bool>()).prop_map(|(queue_max, fifo)| Op::Reconfigure { queue_max, fifo }),
    ]
}

/// The `i`-th (modulo their number) of `ids` in ascending order.
fn pick(ids: impl IntoIterator<Item = u64>, i: usize) -> Option<u64> {
    let mut ids: Vec<u64> = ids.into_iter().collect();
    ids.sort_unstable();
    (!ids.is_empty()).then(|| ids[i % ids.len()])
}

/// Runs `ops` on a real pool with `features` and on the model, comparing them after every
/// step, counting them in `steps`. A sequence ends early where the rules do not say what
/// happens (two timers in one tick, [`Model::ambiguous`]).
pub(crate) fn run(ops: Vec<Op>, features: Features, steps: Arc<AtomicUsize>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async move {
        // Exact backoff steps (no jitter), so the model knows when each retry comes.
        let config = PoolConfig::new("reference", 1, 3)
            .to_builder()
            .cull_interval(Duration::ZERO)
            .queue_max(3)
            .backoff_jitter(false)
            .build()
            .unwrap();
        let config = features.apply(config);
        let (pool, probe) = pool_with(config.clone(), Fake::default()).await;
        let mut model = Model::new(1, 3, 3, features);
        let _ = model.set_limit(pool.admission().map(|a| a.limit));
        let held: Arc<Mutex<Vec<Member<Fake>>>> = Arc::default();
        let outcomes: Arc<Mutex<Vec<Outcome>>> = Arc::default();
        let mut takers = Vec::new();
        'ops: for (step, op) in ops.iter().enumerate() {
            let mut try_take = None;
            match *op {
                Op::TryTake => {
                    let got = pool.try_take_member();
                    try_take = Some((Outcome::of(&got), {
                        let deadline = model.now;
                        match model.take(deadline) {
                            Ok(id) => Outcome::Served(id),
                            Err(why) => Outcome::Failed(why),
                        }
                    }));
                    if let Ok(m) = got {
                        held.lock().unwrap().push(m);
                    }
                }
                Op::Take(half) => {
                    let w = model.outcomes.len();
                    let timeout = 2 * half + 1;
                    model.outcomes.push(Outcome::Waiting);
                    model.timeouts.push(timeout);
                    model.tasks.push_back(Task::Taker(w));
                    outcomes.lock().unwrap().push(Outcome::Waiting);
                    let (pool, held, outcomes) = (pool.clone(), held.clone(), outcomes.clone());
                    takers.push(tokio::spawn(async move {
                        let got = pool.take_member(Duration::from_millis(timeout)).await;
                        outcomes.lock().unwrap()[w] = Outcome::of(&got);
                        if let Ok(m) = got {
                            held.lock().unwrap().push(m);
                        }
                    }));
                }
                Op::Return(i) | Op::Fail(i) | Op::PanicDrop(i) => {
                    let id = pick(model.in_use.iter().copied(), i);
                    if let Some(id) = id {
                        let m = {
                            let mut held = held.lock().unwrap();
                            let at = held.iter().position(|m| Member::id(m) == id);
                            held.swap_remove(at.unwrap_or_else(|| {
                                panic!("step {step} {op:?}: member {id} is not held")
                            }))
                        };
                        match op {
                            Op::Return(_) => drop(m),
                            Op::Fail(_) => Member::fail(m),
                            _ => crash_holding(m),
                        }
                        // The hold's latency may have moved the limit before the member
                        // went back.
                        let raised = model.set_limit(pool.admission().map(|a| a.limit));
                        model.give_back(id, matches!(op, Op::Return(_)), raised);
                    }
                }
                Op::CancelWaiter(i) => {
                    let queued: Vec<usize> = model.waiters.iter().map(|q| q.w).collect();
                    if !queued.is_empty() {
                        let w = queued[i % queued.len()];
                        takers[w].abort();
                        outcomes.lock().unwrap()[w] = Outcome::Cancelled;
                        model.waiters.retain(|q| q.w != w);
                        model.left();
                        model.outcomes[w] = Outcome::Cancelled;
                    }
                }
                Op::Crash(i) => {
                    let alive = model.free.iter().chain(&model.in_use).copied();
                    if let Some(id) = pick(alive.filter(|id| !model.dead.contains(id)), i) {
                        assert!(
                            probe.try_crash(id),
                            "step {step}: member {id} has no driver"
                        );
                        model.tasks.push_back(Task::DriverEnd(id));
                    }
                }
                Op::Break(i) => {
                    if let Some(id) = pick(model.free.iter().chain(&model.in_use).copied(), i) {
                        probe.break_member(id);
                        model.broken.insert(id);
                    }
                }
                Op::Starts(ok) => {
                    probe.set_start(if ok { Step::Ok } else { Step::Err });
                    model.plan_ok = ok;
                }
                Op::Advance(half) => {
                    let until = model.now + 2 * half;
                    while let Some(t) = model.next_event(until) {
                        settle().await;
                        tokio::time::advance(Duration::from_millis(t - model.now)).await;
                        settle().await;
                        let limit = pool.admission().map(|a| a.limit);
                        if model.ambiguous(t, limit) {
                            break 'ops;
                        }
                        model.fire(t, limit);
                        compare(&pool, &probe, &model, &outcomes, &held, step, op);
                    }
                    settle().await;
                    tokio::time::advance(Duration::from_millis(until - model.now)).await;
                    model.now = until;
                }
                Op::Reconfigure { queue_max, fifo } => {
                    let order = if fifo {
                        MemberOrder::Fifo
                    } else {
                        MemberOrder::Lifo
                    };
                    pool.reconfigure(
                        config
                            .to_builder()
                            .queue_max(queue_max)
                            .member_order(order)
                            .build()
                            .unwrap(),
                    )
                    .unwrap();
                    let shed = model.waiters.len().saturating_sub(queue_max);
                    let now = model.now;
                    for Waiter { w, since, .. } in model.waiters.drain(..shed).collect::<Vec<_>>() {
                        model.outcomes[w] = Outcome::Failed("queue_shrunk");
                        // A wait that ends, however it ends, is a wait the shedder sees.
                        if let Some(s) = &mut model.shed {
                            s.waited(now - since, now);
                        }
                    }
                    model.queue_max = queue_max;
                    model.fifo = fifo;
                    let _ = model.set_limit(pool.admission().map(|a| a.limit));
                    let starts = model.refill();
                    model.spawn(starts);
                }
            }
            model.run();
            settle().await;
            if let Some((real, predicted)) = try_take {
                assert_eq!(real, predicted, "step {step} {op:?}: try_take_member");
            }
            compare(&pool, &probe, &model, &outcomes, &held, step, op);
            steps.fetch_add(1, SeqCst);
        }
        for t in &takers {
            t.abort();
        }
        settle().await;
        drop(std::mem::take(&mut *held.lock().unwrap()));
        pool.close(pooler::Shutdown::Immediate).await;
        assert_eq!(pool.live_tasks(), 0);
    });
}

#[allow(clippy::too_many_arguments)]
fn compare(
    pool: &pooler::Pool<Fake>,
    probe: &Probe,
    model: &Model,
    outcomes: &Mutex<Vec<Outcome>>,
    held: &Mutex<Vec<Member<Fake>>>,
    n: usize,
    op: &Op,
) {
    let at = format!("step {n} {op:?} at {} ms", model.now);
    // `POOLER_MODEL_TRACE=1`: each comparison's state, to follow a failing sequence.
    if std::env::var_os("POOLER_MODEL_TRACE").is_some() {
        eprintln!(
            "{at}: limit {:?} (model {}), in use {:?}, free {:?}, queued {:?} since {:?}, \
             starting {:?}, owed {}, dead {:?}, broken {:?}\n  real {:?}\n  model {:?}",
            pool.admission().map(|a| a.limit),
            model.limit,
            model.in_use,
            model.free,
            model.waiters,
            model.queued_since,
            model.starting.iter().map(|s| s.id).collect::<Vec<_>>(),
            model.owed,
            model.dead,
            model.broken,
            outcomes.lock().unwrap(),
            model.outcomes,
        );
    }
    assert_eq!(
        *outcomes.lock().unwrap(),
        model.outcomes,
        "{at}: what each take got"
    );
    let mut held: Vec<u64> = held.lock().unwrap().iter().map(Member::id).collect();
    held.sort_unstable();
    assert_eq!(
        held,
        model.in_use.iter().copied().collect::<Vec<_>>(),
        "{at}: members held"
    );
    let u = pool.utilization();
    assert_eq!(
        (
            u.in_use_count,
            u.free_count,
            u.starting_count,
            u.stopping_count,
            u.queued_count
        ),
        (
            model.in_use.len(),
            model.free.len(),
            model.starting.len(),
            model.stopping,
            model.waiters.len()
        ),
        "{at}: counts"
    );
    let mut free: Vec<u64> = pool
        .stats()
        .iter()
        .filter(|s| s.status == MemberStatus::Free)
        .map(|s| s.id)
        .collect();
    free.sort_unstable();
    let mut expected: Vec<u64> = model.free.iter().copied().collect();
    expected.sort_unstable();
    assert_eq!(
        free, expected,
        "{at}: free members (and so the starts decided)"
    );
    assert_eq!(probe.attempts(), model.attempts, "{at}: start attempts");
}

#[test]
fn the_pool_does_what_the_reference_model_says() {
    std::panic::set_hook(Box::new(|info| {
        let text = info.to_string();
        if !text.contains("consumer crashed") && !text.contains("planned panic") {
            eprintln!("{info}");
        }
    }));
    let cases = std::env::var("POOLER_MODEL_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(500);
    let steps = Arc::new(AtomicUsize::new(0));
    let counted = steps.clone();
    proptest!(crate::common::keeping_failures(cases), |(ops in proptest::collection::vec(op(), 200), features in features())| {
        run(ops, features, counted.clone());
    });
    let steps = steps.load(SeqCst);
    eprintln!("reference model: {steps} steps compared");
    // Sequences cut short by two timers in one tick are rare; most steps are compared.
    assert!(steps >= cases as usize * 180, "{steps} steps");
    let seen = SEEN.each_ref().map(|n| n.load(SeqCst));
    eprintln!(
        "reference model: shed, stale, capped, prepaid, retired, over the limit, newest \
         first, bounded wait, limit below max_count: {seen:?}"
    );
    if cases >= 100 {
        assert!(
            seen.iter().all(|n| *n > 0),
            "a feature's rule never came up: {seen:?}"
        );
    }
}

/// Found by the model: with admission on, a hold whose end raised the limit let a queued
/// take through with no member free for it and room to start one, and nothing started one —
/// the take waited for a return (here, out its deadline). Now the raise starts members for
/// the waiters it lets through (docs/design.md, "Admission").
#[test]
fn a_raised_limit_starts_members_for_the_waiters_it_lets_through() {
    let ops = vec![
        Op::TryTake,
        Op::Advance(29),
        Op::Return(0),
        Op::Return(0),
        Op::Break(0),
        Op::TryTake,
        Op::Return(0),
        Op::TryTake,
        Op::Advance(21),
        Op::TryTake,
        Op::TryTake,
        Op::TryTake,
        Op::Return(802217187451153382),
        Op::TryTake,
        Op::TryTake,
        Op::Fail(0),
        Op::TryTake,
        Op::TryTake,
        Op::TryTake,
        Op::CancelWaiter(0),
        Op::Advance(0),
        Op::TryTake,
        Op::Fail(5755896004409638123),
        Op::TryTake,
        Op::Return(7180538703773028530),
        Op::Fail(0),
        Op::TryTake,
        Op::Return(0),
        Op::TryTake,
        Op::Crash(2957697278014809746),
        Op::Fail(0),
        Op::TryTake,
        Op::TryTake,
        Op::TryTake,
        Op::Starts(false),
        Op::Return(0),
        Op::TryTake,
        Op::TryTake,
        Op::Fail(0),
        Op::TryTake,
        Op::TryTake,
        Op::Fail(0),
        Op::Advance(0),
        Op::TryTake,
        Op::TryTake,
        Op::TryTake,
        Op::Advance(20),
        Op::TryTake,
        Op::TryTake,
        Op::Advance(7),
        Op::Advance(95),
        Op::TryTake,
        Op::TryTake,
        Op::TryTake,
        Op::TryTake,
        Op::Advance(106),
        Op::TryTake,
        Op::Advance(73),
        Op::Advance(97),
        Op::TryTake,
        Op::Advance(113),
        Op::TryTake,
        Op::Starts(true),
        Op::TryTake,
        Op::TryTake,
        Op::TryTake,
        Op::Advance(2),
        Op::TryTake,
        Op::TryTake,
        Op::TryTake,
        Op::TryTake,
        Op::Advance(99),
        Op::TryTake,
        Op::TryTake,
        Op::TryTake,
        Op::TryTake,
        Op::TryTake,
        Op::Advance(11),
        Op::TryTake,
        Op::TryTake,
        Op::TryTake,
        Op::TryTake,
        Op::TryTake,
        Op::TryTake,
        Op::Advance(127),
        Op::TryTake,
        Op::TryTake,
        Op::TryTake,
        Op::Return(0),
        Op::TryTake,
        Op::TryTake,
        Op::TryTake,
        Op::Fail(0),
        Op::TryTake,
        Op::TryTake,
        Op::Return(0),
        Op::Return(0),
        Op::TryTake,
        Op::Fail(0),
        Op::TryTake,
        Op::CancelWaiter(0),
        Op::TryTake,
        Op::Take(0),
        Op::TryTake,
        Op::Take(0),
        Op::Break(552751310807574907),
        Op::Crash(904155752907467711),
        Op::Return(6606300179774121662),
        Op::Crash(0),
    ];
    let features = Features {
        shed: Some((1, 10)),
        admission: Some(pooler::AdmissionMode::Vegas),
        ..Features::default()
    };
    let steps = Arc::new(AtomicUsize::new(0));
    run(ops, features, steps.clone());
    assert_eq!(steps.load(SeqCst), 109, "every step compared");
}
