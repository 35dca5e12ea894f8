//! What a pool says of itself: its counts, health, admission limit, members and tasks, and
//! its metrics published on demand. Reads only: nothing here changes the pool.

use super::Pool;
use crate::admission::AdmissionStatus;
use crate::cold::Status;
use crate::manager::Manager;
use crate::status::{Health, MemberStats, MemberStatus, Utilization};

use tokio::time::Instant;

impl<M: Manager> Pool<M> {
    /// The pool's counts now, exact (the gauges are published by the pool's 100 ms tick,
    /// not by this read).
    #[must_use]
    pub fn utilization(&self) -> Utilization {
        let (g, limits) = self.shared().counts();
        Utilization {
            max_count: limits.max_count,
            in_use_count: g.in_use,
            free_count: g.free,
            starting_count: g.starting,
            stopping_count: g.stopping,
            queued_count: g.queued,
            queue_max: limits.queue_max,
            admission_limit: self.shared().hot.lock().admission().map(|a| a.limit),
        }
    }

    /// How the pool is doing now: closed, failing to start members, shedding load, or
    /// serving. Never waits.
    #[must_use]
    pub fn health(&self) -> Health {
        let shared = self.shared();
        let (closed, failing, live) = shared.step(|s| {
            (
                s.cold.engine.is_closed(),
                s.cold.engine.last_error().cloned(),
                s.hot.view().live(),
            )
        });
        if closed {
            return Health::Closed;
        }
        if let Some(last_error) = failing {
            return Health::Failing { live, last_error };
        }
        match shared.shedder.shed(Instant::now()) {
            Some((target, delay)) => Health::Shedding { target, delay },
            None => Health::Serving,
        }
    }

    /// The admission limit and what moved it, if `admission` is on (docs/design.md,
    /// "Admission"). Never waits.
    #[must_use]
    pub fn admission(&self) -> Option<AdmissionStatus> {
        self.shared().hot.lock().admission()
    }

    /// Whether the pool can serve a take now or soon: open, and not failing with no member
    /// at all (a readiness probe's answer). Never waits.
    #[must_use]
    pub fn ready(&self) -> bool {
        match self.health() {
            Health::Serving | Health::Shedding { .. } => true,
            Health::Failing { live, .. } => live > 0,
            Health::Closed => false,
        }
    }

    /// How many members are free now (the hot lock alone; for a group's `MostFree` choice).
    pub(crate) fn free_now(&self) -> usize {
        self.shared().hot.lock().view().free
    }

    /// Publishes the pool's gauges and flushes its take counts to the metrics recorder now,
    /// as the pool's 100 ms tick does: for a scrape that must not be up to a tick behind.
    pub fn publish_metrics(&self) {
        self.shared().publish();
    }

    /// One row per member, by id.
    ///
    /// `since` is exact when the pool reads the clock at take and return (a `max_lifetime`,
    /// `idle_check_threshold` or leak threshold is set, or a metrics recorder times uses);
    /// otherwise it is to within the pool's 100 ms clock tick.
    #[must_use]
    pub fn stats(&self) -> Vec<MemberStats> {
        self.shared()
            .rows()
            .into_iter()
            .map(|(id, status, free, since, expires_at)| MemberStats {
                id,
                status: match (status, free) {
                    (Status::Live, true) => MemberStatus::Free,
                    (Status::Live, false) => MemberStatus::InUse,
                    (Status::Stopping | Status::Starting, _) => MemberStatus::Stopping,
                },
                since,
                expires_at,
            })
            .collect()
    }

    /// How many of the pool's tasks (starts, stops, timers, driver tasks) are alive.
    #[must_use]
    pub fn live_tasks(&self) -> usize {
        self.shared().supervisor.live_tasks()
    }
}
