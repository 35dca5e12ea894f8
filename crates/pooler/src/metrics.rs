//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (pooler's `pooler:metrics/0`
//! and its telemetry events).
//!
//! Every metric carries the label `pool`; the removal and error counters also carry `reason`.
//! Handles are registered when a pool starts, so install the recorder before starting pools.
//!
//! Nothing here is on the take/return fast path: the pool counts take attempts (and takes
//! served at once, a wait of zero) in its hot core, and its housekeeping tick (every 100 ms)
//! publishes the gauges and flushes those counts;
//! [`Pool::publish_metrics`](crate::Pool::publish_metrics) does both at once, so a gauge read
//! right after it is exact. Removals, refusals and start
//! timeouts are counted where they happen (they are not the fast path). When a pool starts,
//! each gauge and histogram handle is probed for whether it reaches a recorder; with none, the
//! pool computes nothing to publish and reads no clock for the histograms.

/// The counts the gauges show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Gauges {
    pub(crate) in_use: usize,
    pub(crate) free: usize,
    pub(crate) starting: usize,
    pub(crate) stopping: usize,
    pub(crate) queued: usize,
}

/// The kind of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MetricKind {
    /// A monotonically increasing count.
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// A distribution of observations.
    Histogram,
}

/// One metric pooler emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Descriptor {
    /// The metric's name.
    pub name: &'static str,
    /// Its kind.
    pub kind: MetricKind,
    /// A one-line description, fit for a Prometheus `# HELP`.
    pub help: &'static str,
    /// Its label names.
    pub labels: &'static [&'static str],
    /// The values the `reason` label takes, if it has one.
    pub reasons: &'static [&'static str],
}

/// Why a member was removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Reason {
    /// Its `max_lifetime` ended.
    MaxLifetime,
    /// Culled: beyond the demand of the last `max_age`.
    MaxAge,
    /// It died, was found broken, or its holder panicked or was cancelled mid-use.
    Crashed,
    /// Its holder called `Member::fail`, or a health check failed.
    Failed,
    /// `reconfigure` lowered `max_count`.
    Reconfigured,
}

const REMOVAL_REASONS: &[&str; 5] = &[
    "max_lifetime",
    "max_age",
    "crashed",
    "failed",
    "reconfigured",
];
const START_FAILURE_REASONS: &[&str; 5] = &["error", "timeout", "died", "panicked", "broken"];

/// The `reason` label of a failed start.
pub(crate) fn start_failure_reason(error: &crate::error::StartError) -> usize {
    use crate::error::StartError;
    match error {
        StartError::Manager(_) => 0,
        StartError::TimedOut(_) => 1,
        StartError::Died => 2,
        StartError::Panicked => 3,
        StartError::Broken => 4,
    }
}

const NO_MEMBER_REASONS: &[&str; 7] = &[
    "at_capacity",
    "all_in_use",
    "queue_full",
    "timeout",
    "failed",
    "shed",
    "over_limit",
];

/// What the admission limiter did with the limit at a batch's end
/// ([`LimitMove::name`](crate::admission::LimitMove::name), `starting` aside: no batch ends in it).
const LIMIT_MOVE_REASONS: &[&str; 6] = &["grew", "shrank", "held", "idle", "probed", "late"];

/// The `reason` label of a batch the admission limiter judged.
#[cfg(feature = "metrics")]
fn limit_move_reason(judged: crate::admission::LimitMove) -> Option<usize> {
    LIMIT_MOVE_REASONS.iter().position(|r| *r == judged.name())
}

impl Reason {
    #[cfg(test)]
    const ALL: [Reason; 5] = [
        Reason::MaxLifetime,
        Reason::MaxAge,
        Reason::Crashed,
        Reason::Failed,
        Reason::Reconfigured,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        REMOVAL_REASONS[self as usize]
    }
}

const POOL: &[&str] = &["pool"];
const POOL_REASON: &[&str] = &["pool", "reason"];

macro_rules! descriptor {
    ($name:literal, $kind:ident, $labels:expr, $reasons:expr, $help:literal) => {
        Descriptor {
            name: $name,
            kind: MetricKind::$kind,
            help: $help,
            labels: $labels,
            reasons: $reasons,
        }
    };
}

const DESCRIPTORS: &[Descriptor] = &[
    descriptor!(
        "pooler_take_total",
        Counter,
        POOL,
        &[],
        "Take attempts (take_member, try_take_member, with_member, group takes), whatever their outcome; failed ones are also counted in pooler_error_no_members_total."
    ),
    descriptor!(
        "pooler_error_no_members_total",
        Counter,
        POOL_REASON,
        NO_MEMBER_REASONS,
        "Take attempts that got no member, by reason."
    ),
    descriptor!(
        "pooler_killed_free_total",
        Counter,
        POOL_REASON,
        REMOVAL_REASONS,
        "Members removed while free (expired, culled, failed a scheduled or idle check, found broken at take, died), by reason."
    ),
    descriptor!(
        "pooler_killed_in_use_total",
        Counter,
        POOL_REASON,
        REMOVAL_REASONS,
        "Members removed when they came back from use (failed, crashed, broken, expired in use, failed their recycle), by reason."
    ),
    descriptor!(
        "pooler_queue_max_reached_total",
        Counter,
        POOL,
        &[],
        "Takes refused because queue_max takers were already waiting."
    ),
    descriptor!(
        "pooler_starting_member_timeout_total",
        Counter,
        POOL,
        &[],
        "Member starts cancelled at member_start_timeout."
    ),
    descriptor!(
        "pooler_start_failed_total",
        Counter,
        POOL_REASON,
        START_FAILURE_REASONS,
        "Member starts that failed, by reason: the manager's error, member_start_timeout, the member's driver ended, a panic, or is_broken at birth."
    ),
    descriptor!("pooler_free", Gauge, POOL, &[], "Members free to be taken."),
    descriptor!(
        "pooler_max_count",
        Gauge,
        POOL,
        &[],
        "The pool's max_count (as configured, after each reconfigure)."
    ),
    descriptor!(
        "pooler_init_count",
        Gauge,
        POOL,
        &[],
        "The pool's init_count (as configured, after each reconfigure)."
    ),
    descriptor!(
        "pooler_in_use",
        Gauge,
        POOL,
        &[],
        "Members held by consumers."
    ),
    descriptor!(
        "pooler_starting",
        Gauge,
        POOL,
        &[],
        "Member starts in progress."
    ),
    descriptor!(
        "pooler_stopping",
        Gauge,
        POOL,
        &[],
        "Member stops in progress."
    ),
    descriptor!(
        "pooler_queue",
        Gauge,
        POOL,
        &[],
        "Takers waiting in the queue."
    ),
    descriptor!(
        "pooler_admission_limit",
        Gauge,
        POOL,
        &[],
        "Takes that may hold a member at once now (admission on)."
    ),
    descriptor!(
        "pooler_admission_latency_seconds",
        Gauge,
        POOL,
        &[],
        "The latency of the admission limiter's last batch of holds (the mean of its middle half)."
    ),
    descriptor!(
        "pooler_admission_baseline_seconds",
        Gauge,
        POOL,
        &[],
        "The latency the admission limiter compares holds with (vegas: unloaded; gradient: long-term)."
    ),
    descriptor!(
        "pooler_admission_moves_total",
        Counter,
        POOL_REASON,
        LIMIT_MOVE_REASONS,
        "Batches of uses the admission limiter judged, by what it did with the limit: grew, shrank, held, idle (under half of it used: it may only come down), probed (a batch of a probe of the database's unloaded latency)."
    ),
    descriptor!(
        "pooler_take_wait_seconds",
        Histogram,
        POOL,
        &[],
        "Time take_member waited for a member, in seconds."
    ),
    descriptor!(
        "pooler_member_start_seconds",
        Histogram,
        POOL,
        &[],
        "Time a member start took (Manager::start and initialize, after any backoff wait), failed or not, in seconds."
    ),
    descriptor!(
        "pooler_member_use_seconds",
        Histogram,
        POOL,
        &[],
        "Time a consumer held a member, in seconds."
    ),
];

/// Every metric pooler emits, with its kind, help text and labels (pooler's
/// `pooler:metrics/0`): declare them up front with an exporter that needs it.
///
/// ```
/// let names: Vec<_> = pooler::metrics::descriptors().iter().map(|d| d.name).collect();
/// assert!(names.contains(&"pooler_take_total"));
/// ```
#[must_use]
pub fn descriptors() -> &'static [Descriptor] {
    DESCRIPTORS
}

mod otel;
#[cfg(feature = "metrics")]
use otel::registered;
pub use otel::{
    Naming, OTEL_POOL_LABEL, OTEL_STATE_LABEL, OtelName, naming, otel_names, set_naming,
};

#[cfg(feature = "metrics")]
mod handles;
#[cfg(feature = "metrics")]
pub(crate) use handles::PoolMetrics;

/// Without the `metrics` feature: the same calls, doing nothing.
#[cfg(not(feature = "metrics"))]
#[derive(Debug)]
pub(crate) struct PoolMetrics;

#[cfg(not(feature = "metrics"))]
#[allow(clippy::unused_self)]
impl PoolMetrics {
    pub(crate) fn new(_pool: &str) -> Self {
        PoolMetrics
    }
    pub(crate) fn wait_live(&self) -> bool {
        false
    }
    pub(crate) fn use_live(&self) -> bool {
        false
    }
    pub(crate) fn publish(&self, _: Gauges) {}
    pub(crate) fn admission(&self, _: Option<crate::admission::AdmissionStatus>) {}
    pub(crate) fn limit_judged(&self, _: crate::admission::LimitMove) {}
    pub(crate) fn flush(&self, _: u64, _: u64) {}
    pub(crate) fn waited(&self, _: tokio::time::Instant) {}
    pub(crate) fn used(&self, _: tokio::time::Instant, _: tokio::time::Instant, _: u32) {}
    pub(crate) fn at_capacity(&self) {}
    pub(crate) fn no_member(&self, _: &crate::error::TakeError) {}
    pub(crate) fn killed(&self, _: Reason, _: bool) {}
    pub(crate) fn start_timed_out(&self) {}
    pub(crate) fn start_failed(&self, _: usize) {}
    pub(crate) fn start_took(&self, _: std::time::Duration) {}
    pub(crate) fn limits(&self, _: usize, _: usize) {}
}

#[cfg(test)]
mod tests {
    /// The README's table is exactly [`otel_names`], row for row.
    #[test]
    fn the_readme_maps_the_same_names_as_the_code() {
        let readme = include_str!("../README.md");
        let start = readme
            .find("<!-- otel-table:")
            .expect("the README has the table");
        let end = readme.find("<!-- otel-table end -->").expect("its end");
        let table: Vec<&str> = readme[start..end]
            .lines()
            .filter(|l| l.starts_with("| `"))
            .collect();
        let rows: Vec<String> = super::otel_names()
            .iter()
            .map(|o| {
                let pooler = match o.reason {
                    Some(r) => format!("`{}`, `reason` = `{r}`", o.pooler),
                    None => format!("`{}`", o.pooler),
                };
                let otel = match o.state {
                    Some(s) => format!("`{}`, `{}` = `{s}`", o.name, super::OTEL_STATE_LABEL),
                    None => format!("`{}`", o.name),
                };
                format!("| {pooler} | {otel} |")
            })
            .collect();
        assert_eq!(table, rows);
    }

    use super::*;

    #[test]
    fn reasons_index_their_labels() {
        for r in Reason::ALL {
            assert_eq!(REMOVAL_REASONS[r as usize], r.as_str());
        }
    }

    #[test]
    fn every_spec_metric_is_described() {
        let names: Vec<_> = descriptors().iter().map(|d| d.name).collect();
        for name in [
            "pooler_take_total",
            "pooler_error_no_members_total",
            "pooler_killed_free_total",
            "pooler_killed_in_use_total",
            "pooler_queue_max_reached_total",
            "pooler_starting_member_timeout_total",
            "pooler_free",
            "pooler_in_use",
            "pooler_starting",
            "pooler_stopping",
            "pooler_queue",
            "pooler_take_wait_seconds",
            "pooler_member_use_seconds",
        ] {
            assert!(names.contains(&name), "{name}");
        }
        assert!(
            descriptors()
                .iter()
                .all(|d| d.labels[0] == "pool" && !d.help.is_empty())
        );
    }
}
