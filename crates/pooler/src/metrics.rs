//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (pooler's `pooler:metrics/0`
//! and its telemetry events).
//!
//! Every metric carries the label `pool`; the removal and error counters also carry `reason`.
//! Gauges are set on every change of the pool's counts, not only on take. Handles are
//! registered when a pool starts, so install the recorder before starting pools.
//!
//! With no recorder installed the fast path pays one branch per lock release and one per
//! return, plus the take counter's own no-op branch: when a pool starts, each gauge and
//! histogram handle is probed for whether it reaches a recorder, and a pool whose gauges reach
//! nothing never computes or compares the counts it would publish.

use std::cell::Cell;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, IntoF64};
use tokio::time::Instant;

use crate::engine::Counts;

/// The kind of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

const REMOVAL_REASONS: &[&str] = &[
    "max_lifetime",
    "max_age",
    "crashed",
    "failed",
    "reconfigured",
];
const NO_MEMBER_REASONS: &[&str] = &[
    "at_capacity",
    "all_in_use",
    "queue_full",
    "timeout",
    "failed",
];

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
        "Members handed out by take_member and try_take_member."
    ),
    descriptor!(
        "pooler_error_no_members_total",
        Counter,
        POOL_REASON,
        NO_MEMBER_REASONS,
        "Takes that got no member, by reason."
    ),
    descriptor!(
        "pooler_killed_free_total",
        Counter,
        POOL_REASON,
        REMOVAL_REASONS,
        "Free members removed, by reason."
    ),
    descriptor!(
        "pooler_killed_in_use_total",
        Counter,
        POOL_REASON,
        REMOVAL_REASONS,
        "Members removed when they came back from use, by reason."
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
    descriptor!("pooler_free", Gauge, POOL, &[], "Members free to be taken."),
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
        "pooler_take_wait_seconds",
        Histogram,
        POOL,
        &[],
        "Time take_member waited for a member, in seconds."
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

/// A value that notes when it is converted for a recorder.
struct Probe<'a>(&'a Cell<bool>);

impl IntoF64 for Probe<'_> {
    fn into_f64(self) -> f64 {
        self.0.set(true);
        0.0
    }
}

/// Whether `touch` hands its value to a recorder. A handle registered with no recorder (or
/// one a recorder declined) is a no-op that never converts the value it is given, so the
/// probe is never converted; a live one must convert it. `touch` must leave the metric as it
/// was (add zero to a gauge, record zero observations): the probe converts to `0.0`.
///
/// Should a handle ever convert eagerly, the probe reports it live and the pool publishes
/// as if a recorder were installed: slower, never wrong.
fn reaches_recorder(touch: impl FnOnce(Probe<'_>)) -> bool {
    let live = Cell::new(false);
    touch(Probe(&live));
    live.get()
}

/// One pool's registered handles.
pub(crate) struct PoolMetrics {
    take: Counter,
    no_members: [Counter; 5],
    killed_free: [Counter; 5],
    killed_in_use: [Counter; 5],
    queue_max_reached: Counter,
    start_timeout: Counter,
    free: Gauge,
    in_use: Gauge,
    starting: Gauge,
    stopping: Gauge,
    queue: Gauge,
    take_wait: Histogram,
    member_use: Histogram,
    /// Some gauge reaches a recorder: publish counts.
    gauges_live: bool,
    /// `take_wait` reaches a recorder: measure how long takes wait.
    wait_live: bool,
    /// `member_use` reaches a recorder: measure how long members are held.
    use_live: bool,
}

impl PoolMetrics {
    pub(crate) fn new(pool: &str) -> Self {
        let pool = pool.to_owned();
        let by_reason = |name: &'static str, reasons: &[&'static str]| -> [Counter; 5] {
            std::array::from_fn(
                |i| metrics::counter!(name, "pool" => pool.clone(), "reason" => reasons[i]),
            )
        };
        for d in DESCRIPTORS {
            match d.kind {
                MetricKind::Counter => metrics::describe_counter!(d.name, d.help),
                MetricKind::Gauge => metrics::describe_gauge!(d.name, d.help),
                MetricKind::Histogram => {
                    metrics::describe_histogram!(d.name, metrics::Unit::Seconds, d.help)
                }
            }
        }
        let free = metrics::gauge!("pooler_free", "pool" => pool.clone());
        let in_use = metrics::gauge!("pooler_in_use", "pool" => pool.clone());
        let starting = metrics::gauge!("pooler_starting", "pool" => pool.clone());
        let stopping = metrics::gauge!("pooler_stopping", "pool" => pool.clone());
        let queue = metrics::gauge!("pooler_queue", "pool" => pool.clone());
        let take_wait = metrics::histogram!("pooler_take_wait_seconds", "pool" => pool.clone());
        let member_use = metrics::histogram!("pooler_member_use_seconds", "pool" => pool.clone());
        let gauges_live = [&free, &in_use, &starting, &stopping, &queue]
            .into_iter()
            .any(|g| reaches_recorder(|p| g.increment(p)));
        let wait_live = reaches_recorder(|p| take_wait.record_many(p, 0));
        let use_live = reaches_recorder(|p| member_use.record_many(p, 0));
        PoolMetrics {
            take: metrics::counter!("pooler_take_total", "pool" => pool.clone()),
            no_members: by_reason("pooler_error_no_members_total", NO_MEMBER_REASONS),
            killed_free: by_reason("pooler_killed_free_total", REMOVAL_REASONS),
            killed_in_use: by_reason("pooler_killed_in_use_total", REMOVAL_REASONS),
            queue_max_reached: metrics::counter!("pooler_queue_max_reached_total", "pool" => pool.clone()),
            start_timeout: metrics::counter!("pooler_starting_member_timeout_total", "pool" => pool),
            free,
            in_use,
            starting,
            stopping,
            queue,
            take_wait,
            member_use,
            gauges_live,
            wait_live,
            use_live,
        }
    }

    /// Publishes the counts that differ from `last` (what was published before) to the
    /// gauges; `counts` is not even called when the gauges reach no recorder. Values go in
    /// as `u32`, converted to `f64` only inside a recorder.
    #[inline]
    pub(crate) fn counts(&self, counts: impl FnOnce() -> Counts, last: &mut Counts) {
        #[inline]
        fn publish(gauge: &Gauge, now: usize, before: &mut usize) {
            if now != *before {
                *before = now;
                gauge.set(u32::try_from(now).unwrap_or(u32::MAX));
            }
        }
        if !self.gauges_live {
            return;
        }
        let c = counts();
        publish(&self.free, c.free, &mut last.free);
        publish(&self.in_use, c.in_use, &mut last.in_use);
        publish(&self.starting, c.starting, &mut last.starting);
        publish(&self.stopping, c.stopping, &mut last.stopping);
        publish(&self.queue, c.queued, &mut last.queued);
    }

    /// A take handed out a member without waiting.
    #[inline]
    pub(crate) fn taken_at_once(&self) {
        self.take.increment(1);
    }

    /// A take handed out a member, having first queued or checked a member at `started`
    /// (`None`: served at once, a wait of zero). The wait runs until now, so it includes
    /// the time the taker took to wake after the hand-over.
    pub(crate) fn taken(&self, started: Option<Instant>) {
        self.take.increment(1);
        if self.wait_live {
            let waited = started.map_or(Duration::ZERO, |s| s.elapsed());
            self.take_wait.record(waited.as_secs_f64());
        }
    }

    /// A member taken at `taken_at` came back at `now`.
    #[inline]
    pub(crate) fn used(&self, taken_at: Instant, now: Instant) {
        if self.use_live {
            self.member_use.record((now - taken_at).as_secs_f64());
        }
    }

    /// A take got no member; `reason` is [`TakeError::reason`](crate::TakeError::reason).
    pub(crate) fn no_member(&self, reason: &str) {
        if let Some(i) = NO_MEMBER_REASONS.iter().position(|r| *r == reason) {
            self.no_members[i].increment(1);
        }
        if reason == "queue_full" {
            self.queue_max_reached.increment(1);
        }
    }

    pub(crate) fn killed(&self, reason: Reason, in_use: bool) {
        let counters = if in_use {
            &self.killed_in_use
        } else {
            &self.killed_free
        };
        counters[reason as usize].increment(1);
    }

    pub(crate) fn start_timed_out(&self) {
        self.start_timeout.increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_index_their_labels() {
        for r in Reason::ALL {
            assert_eq!(REMOVAL_REASONS[r as usize], r.as_str());
        }
    }

    #[test]
    fn handles_registered_with_no_recorder_are_seen_as_dead() {
        let m = PoolMetrics::new("probe-none");
        assert!(!m.gauges_live);
        assert!(!m.wait_live);
        assert!(!m.use_live);
    }

    #[test]
    fn handles_registered_with_a_recorder_are_seen_as_live_and_left_unchanged() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let m = metrics::with_local_recorder(&recorder, || PoolMetrics::new("probe-live"));
        assert!(m.gauges_live);
        assert!(m.wait_live);
        assert!(m.use_live);
        let scrape = handle.render();
        assert!(
            scrape.contains("pooler_free{pool=\"probe-live\"} 0"),
            "{scrape}"
        );
        assert!(
            scrape.contains("pooler_member_use_seconds_count{pool=\"probe-live\"} 0"),
            "{scrape}"
        );
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
