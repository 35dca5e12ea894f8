//! Housekeeping: one task per pool runs the clock tick, culls, health checks, leak reports
//! and lifetime expiries (docs/design.md, "Housekeeping").
//!
//! Each periodic job fires first one period after the pool's start, then one period after
//! its previous firing completed. A `reconfigure` that changes a job's period re-arms it from
//! the moment of the reconfigure, switching it on from off included; one that leaves the
//! period alone leaves the job alone. Expiries are not periodic: the task sleeps until the
//! soonest one, and is woken early when a new member (or a reconfigured lifetime) may expire
//! sooner. A health round runs beside the other jobs (its checks call the manager and take
//! time), so the tick never waits for it. A panic inside a job ends that round, never the
//! schedule.
//!
//! # Invariants
//!
//! 1. At most one health round runs at a time; while it runs, its next firing is not armed.
//! 2. Every job's next firing is `None` exactly when its period is `None` (or, for the health
//!    check, while a round runs).

use std::future::{Future, poll_fn};
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;

use crate::combinators::caught;
use tokio::time::Instant;

use crate::clock::{TICK, TIMER_HORIZON};
use crate::cold::{Limits, Status};
use crate::config::PoolConfig;
use crate::health::{Hook, vet};
use crate::held::Key;
use crate::manager::Manager;
use crate::member::{Member, Origin};
use crate::metrics::{Gauges, Reason};
use crate::shared::Shared;

/// The periodic jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Job {
    /// Every [`TICK`]: the coarse clock, the gauges and the counts the hot core kept.
    Tick,
    /// Every `cull_interval` (zero: off).
    Cull,
    /// Every `health_check_interval`.
    Health,
    /// Every half `leak_detection_threshold`, so a leak is reported at most 1.5 thresholds
    /// after the take.
    Leak,
}

const JOBS: [Job; 4] = [Job::Tick, Job::Cull, Job::Health, Job::Leak];

impl Job {
    fn period(self, config: &PoolConfig) -> Option<Duration> {
        match self {
            Job::Tick => Some(TICK),
            Job::Cull => Some(config.cull_interval).filter(|d| !d.is_zero()),
            Job::Health => config.health_check_interval,
            Job::Leak => config
                .leak_detection_threshold
                .map(|t| (t / 2).max(Duration::from_millis(1))),
        }
    }
}

/// One job's schedule.
#[derive(Debug, Clone, Copy)]
struct Timer {
    period: Option<Duration>,
    next: Option<Instant>,
}

/// What woke the task.
enum Woke {
    Due,
    Changed(bool),
    Poked,
    Checked,
}

type Round = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The housekeeping task, until the pool closes (the supervisor cancels it).
pub(crate) async fn run<M: Manager>(shared: Arc<Shared<M>>, origin: Instant) {
    let mut changes = shared.reconfigured.subscribe();
    let config = shared.config();
    let mut timers = JOBS.map(|job| {
        let period = job.period(&config);
        Timer {
            period,
            next: period.map(|p| origin + p),
        }
    });
    let mut round: Option<Round> = None;
    loop {
        let expiry = shared.next_expiry();
        let due = timers.iter().filter_map(|t| t.next).chain(expiry).min();
        let woke = {
            let changed = pin!(changes.changed());
            let poked = pin!(shared.lifetime_poke.notified());
            let sleep = pin!(tokio::time::sleep_until(
                due.unwrap_or_else(|| Instant::now() + crate::time::MAX_TIME)
            ));
            let (mut changed, mut poked, mut sleep) = (changed, poked, sleep);
            poll_fn(|cx| {
                if let Some(r) = round.as_mut()
                    && r.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(Woke::Checked);
                }
                if let Poll::Ready(r) = changed.as_mut().poll(cx) {
                    return Poll::Ready(Woke::Changed(r.is_ok()));
                }
                if poked.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Woke::Poked);
                }
                if due.is_some() && sleep.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Woke::Due);
                }
                Poll::Pending
            })
            .await
        };
        match woke {
            Woke::Due => {
                let now = Instant::now();
                if expiry.is_some_and(|at| at <= now) {
                    guarded(&shared, "lifetime expiry", || shared.expire_due());
                }
                for (job, timer) in JOBS.iter().zip(timers.iter_mut()) {
                    if timer.next.is_none_or(|at| at > now) {
                        continue;
                    }
                    match job {
                        Job::Tick => guarded(&shared, "tick", || shared.tick()),
                        Job::Cull => guarded(&shared, "cull", || shared.cull()),
                        Job::Leak => guarded(&shared, "leak report", || shared.report_leaks()),
                        Job::Health => {
                            let s = shared.clone();
                            round = Some(Box::pin(async move {
                                if caught(s.check_free_members()).await.is_err() {
                                    tracing::error!(pool = %s.name, job = "health check", "a housekeeping job panicked; its schedule goes on");
                                }
                            }));
                            timer.next = None;
                            continue;
                        }
                    }
                    timer.next = timer.period.map(|p| Instant::now() + p);
                }
            }
            Woke::Checked => {
                round = None;
                let health = &mut timers[2];
                health.next = health.period.map(|p| Instant::now() + p);
            }
            Woke::Changed(false) => return,
            Woke::Changed(true) => {
                let at = *changes.borrow_and_update();
                let config = shared.config();
                for (job, timer) in JOBS.iter().zip(timers.iter_mut()) {
                    let period = job.period(&config);
                    if period != timer.period {
                        timer.period = period;
                        let running = *job == Job::Health && round.is_some();
                        if !running {
                            timer.next = period.map(|p| at + p);
                        }
                    }
                }
            }
            Woke::Poked => {}
        }
    }
}

/// Runs one synchronous job; a panic is logged and the schedule goes on.
fn guarded<M: Manager>(shared: &Shared<M>, job: &'static str, f: impl FnOnce()) {
    if std::panic::catch_unwind(AssertUnwindSafe(f)).is_err() {
        tracing::error!(pool = %shared.name, job, "a housekeeping job panicked; its schedule goes on");
    }
}

impl<M: Manager> Shared<M> {
    /// The housekeeping tick: brings the coarse clock forward, wakes the queued takes whose
    /// deadline is within [`TIMER_HORIZON`] to arm their timers, publishes the gauges and
    /// flushes the counts the hot core kept, and lets the admission limit come down if the
    /// tick did not use it (after the publish, whose look at the peak the tick's peak folds
    /// in).
    pub(crate) fn tick(&self) {
        let now = self.clock.read();
        // Queued takes whose deadline is near arm their own timers: first, so that a
        // metrics recorder that panics in the publish (user code) cannot keep them waiting.
        let horizon = u64::try_from(TIMER_HORIZON.as_nanos()).unwrap_or(u64::MAX);
        let due = self.hot.lock().due(now.saturating_add(horizon));
        due.into_iter().for_each(Waker::wake);
        self.publish();
        let moved = self.hot.lock().ticked();
        if let Some(moved) = moved {
            self.metrics.limit_judged(moved);
        }
    }

    /// The pool's counts now, from both locks, and its limits; nothing published.
    pub(crate) fn counts(&self) -> (Gauges, Limits) {
        self.step(|s| (s.gauges(), s.cold.engine.limits()))
    }

    /// One row per member that exists (starting slots have no member yet): id, status,
    /// whether free, since when, when it expires.
    pub(crate) fn rows(&self) -> Vec<(u64, Status, bool, Instant, Option<Instant>)> {
        let coarse = self.clock.instant(self.clock.coarse());
        let mut rows: Vec<_> = self
            .step(|s| {
                let free: std::collections::HashSet<Key> =
                    s.hot.free().map(|h| h.meta.key).collect();
                s.cold
                    .engine
                    .rows()
                    .filter(|r| r.status != Status::Starting)
                    .map(|r| {
                        let since = r.payload.map(|m| m.since());
                        (r.id, r.status, free.contains(&r.key), since, r.expires_at)
                    })
                    .collect::<Vec<_>>()
            })
            .into_iter()
            .map(|(id, status, free, since, expires)| {
                let since = since.map_or(coarse, |stamp| self.clock.instant(stamp));
                (id, status, free, since, expires)
            })
            .collect();
        rows.sort_by_key(|r| r.0);
        rows
    }

    /// Publishes the gauges and flushes the hot core's counts.
    pub(crate) fn publish(&self) {
        let (gauges, (takes, zero_waits), admission) =
            self.step(|s| (s.gauges(), s.hot.take_counts(), s.hot.admission()));
        self.metrics.publish(gauges);
        self.metrics.admission(admission);
        self.metrics.flush(takes, zero_waits);
    }

    /// One cull (docs/design.md, "Culling"): free members beyond the window's demand are
    /// retired, oldest idle first.
    pub(crate) fn cull(&self) {
        let culled = self.step(|s| s.cull());
        if culled > 0 {
            tracing::info!(pool = %self.name, members = culled, "culled to the demand window's peak");
        }
    }

    /// Retires the free members whose lifetime has ended (each replaced at once). Members in
    /// use are left to their holders and retired when they come back.
    pub(crate) fn expire_due(&self) {
        let expired = self.step(|s| {
            // Make before break: replacements for lifetimes about to end start first.
            let early = s.cold.engine.start_early(s.now, s.hot.view());
            s.effects.starts.push(early);
            let due: std::collections::HashSet<_> = s.cold.engine.due(s.now).into_iter().collect();
            let expired = s.retire_free(due.len(), Reason::MaxLifetime, |h| {
                due.contains(&(h.meta.key, h.meta.id))
            });
            for _ in 0..expired {
                s.cold.engine.owe_after_lifetime();
            }
            s.refill();
            expired
        });
        if expired > 0 {
            tracing::debug!(pool = %self.name, members = expired, "retiring members at max_lifetime");
        }
    }

    /// When the next lifetime ends.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        self.cold.read(|c| c.engine.next_expiry())
    }

    /// One health-check round: every member idle since before the round began is checked
    /// once, oldest idle first, one at a time (the rest stay available to takes). A member
    /// given back during the round carries a stamp no older than the round's, so none is
    /// checked twice.
    pub(crate) async fn check_free_members(&self) {
        let round = self.clock.coarse();
        loop {
            let claimed = self.hot.lock().claim_for_check(|h| h.meta.since() < round);
            let Some(held) = claimed else { break };
            let member = Member::new(self.arc(), held, Origin::Checked, 0);
            drop(vet(self, member, Hook::Check, None).await);
        }
    }

    /// Reports every holder past `leak_detection_threshold` not reported yet.
    pub(crate) fn report_leaks(&self) {
        let Some(threshold) = self.cold.read(|c| c.config.leak_detection_threshold) else {
            return;
        };
        let now = self.clock.now();
        let Some(held_before) = now.checked_sub(threshold) else {
            return;
        };
        for leak in self.leaks.overdue(held_before) {
            tracing::warn!(
                pool = %self.name,
                member = leak.id,
                held_for = %crate::time::Human(now - leak.taken_at),
                taken_at = %leak.caller,
                "member held past leak_detection_threshold; possible leak"
            );
        }
    }
}
