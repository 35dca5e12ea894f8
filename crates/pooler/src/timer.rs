//! The pool's timers: the housekeeping tick, culling, health checks and leak reports share
//! one loop; the lifetime timer sleeps until the next expiry.
//!
//! Each fires first one period after `origin` (the pool's start), then one period after the
//! previous firing completed. A `reconfigure` that changes a timer's period re-arms it from
//! the moment of the reconfigure, switching it on from off included; one that leaves the
//! period alone leaves the timer alone. (The lifetime timer is different: it sleeps until the
//! next expiry, see `lifetime`.)

use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::{Either, select};
use tokio::time::Instant;

use crate::clock::TICK;
use crate::config::PoolConfig;
use crate::manager::Manager;
use crate::shared::Shared;

/// Which periodic job a timer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Periodic {
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

impl Periodic {
    fn period(self, config: &PoolConfig) -> Option<Duration> {
        match self {
            Periodic::Tick => Some(TICK),
            Periodic::Cull => Some(config.cull_interval).filter(|d| !d.is_zero()),
            Periodic::Health => config.health_check_interval,
            Periodic::Leak => config
                .leak_detection_threshold
                .map(|t| (t / 2).max(Duration::from_millis(1))),
        }
    }

    async fn fire<M: Manager>(self, shared: &Shared<M>) {
        match self {
            Periodic::Tick => shared.tick(),
            Periodic::Cull => shared.cull(),
            Periodic::Health => shared.check_free_members().await,
            Periodic::Leak => shared.report_leaks(),
        }
    }
}

/// Runs one periodic job until the pool closes (the supervisor cancels it).
pub(crate) async fn run<M: Manager>(shared: Arc<Shared<M>>, job: Periodic, origin: Instant) {
    let mut changes = shared.reconfigured.subscribe();
    let mut period = job.period(&shared.cold().config);
    let tick = tokio::time::sleep_until(origin + period.unwrap_or_default());
    tokio::pin!(tick);
    loop {
        let woke = {
            let due = async {
                if period.is_some() {
                    tick.as_mut().await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            match select(pin!(due), pin!(changes.changed())).await {
                Either::Left(((), _)) => None,
                Either::Right((changed, _)) => Some(changed.is_ok()),
            }
        };
        match woke {
            None => {
                // A panic inside a job (there is no user code in one, but should there be)
                // ends that round, never the schedule.
                if AssertUnwindSafe(job.fire(&shared))
                    .catch_unwind()
                    .await
                    .is_err()
                {
                    tracing::error!(pool = %shared.name, job = ?job, "a periodic job panicked; its schedule goes on");
                }
                tick.as_mut()
                    .reset(Instant::now() + period.unwrap_or_default());
            }
            Some(false) => return,
            Some(true) => {
                let at = *changes.borrow_and_update();
                let now = job.period(&shared.cold().config);
                if now != period {
                    period = now;
                    tick.as_mut().reset(at + period.unwrap_or_default());
                }
            }
        }
    }
}

/// The lifetime timer: sleeps until the soonest expiry, retires what is due, and starts
/// replacements. Woken early when a new member (or a reconfigured lifetime) may expire
/// sooner.
pub(crate) async fn lifetimes<M: Manager>(shared: Arc<Shared<M>>) {
    loop {
        match shared.next_expiry() {
            Some(at) => {
                let due = tokio::time::sleep_until(at);
                let poked = shared.lifetime_poke.notified();
                if let Either::Left(_) = select(pin!(due), pin!(poked)).await {
                    shared.expire_due();
                }
            }
            None => shared.lifetime_poke.notified().await,
        }
    }
}
