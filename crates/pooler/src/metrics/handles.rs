//! The handles of one pool, registered with the `metrics` facade when the pool starts.

use std::cell::Cell;

use metrics::{Counter, Gauge, Histogram, IntoF64};
use tokio::time::Instant;

use super::{
    DESCRIPTORS, Gauges, LIMIT_MOVE_REASONS, MetricKind, NO_MEMBER_REASONS, Naming,
    REMOVAL_REASONS, Reason, START_FAILURE_REASONS, registered,
};
use crate::error::TakeError;

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
    no_members: [Counter; 7],
    killed_free: [Counter; 5],
    killed_in_use: [Counter; 5],
    queue_max_reached: Counter,
    start_timeout: Counter,
    start_failed: [Counter; 5],
    start_time: Histogram,
    max_count: Gauge,
    init_count: Gauge,
    free: Gauge,
    in_use: Gauge,
    starting: Gauge,
    stopping: Gauge,
    queue: Gauge,
    admission_limit: Gauge,
    admission_latency: Gauge,
    admission_baseline: Gauge,
    admission_moves: [Counter; 6],
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
        let naming = super::naming();
        let counter = |name: &'static str, reason: Option<&'static str>| {
            let (name, labels) = registered(naming, name, reason, pool);
            metrics::counter!(name, labels)
        };
        let gauge = |name: &'static str| {
            let (name, labels) = registered(naming, name, None, pool);
            metrics::gauge!(name, labels)
        };
        let histogram = |name: &'static str| {
            let (name, labels) = registered(naming, name, None, pool);
            metrics::histogram!(name, labels)
        };
        fn by_reason<const N: usize>(
            counter: impl Fn(&'static str, Option<&'static str>) -> Counter,
            name: &'static str,
            reasons: &[&'static str; N],
        ) -> [Counter; N] {
            std::array::from_fn(|i| counter(name, Some(reasons[i])))
        }
        let no_members: [Counter; NO_MEMBER_REASONS.len()] = std::array::from_fn(|i| {
            counter("pooler_error_no_members_total", Some(NO_MEMBER_REASONS[i]))
        });
        for d in DESCRIPTORS {
            match d.kind {
                MetricKind::Counter => metrics::describe_counter!(d.name, d.help),
                MetricKind::Gauge => metrics::describe_gauge!(d.name, d.help),
                MetricKind::Histogram => {
                    metrics::describe_histogram!(d.name, metrics::Unit::Seconds, d.help)
                }
            }
        }
        if naming == Naming::OpenTelemetry {
            for o in super::otel_names() {
                let help = match o.name {
                    "db.client.connection.count" => {
                        "Members (connections) free or held, by db.client.connection.state: idle or used."
                    }
                    "db.client.connection.timeouts" => {
                        "Takes that waited until their deadline and got no member."
                    }
                    _ => DESCRIPTORS
                        .iter()
                        .find(|d| d.name == o.pooler)
                        .map_or("", |d| d.help),
                };
                match o.name {
                    "db.client.connection.timeouts" => metrics::describe_counter!(o.name, help),
                    n if n.ends_with("_time") => {
                        metrics::describe_histogram!(o.name, metrics::Unit::Seconds, help)
                    }
                    _ => metrics::describe_gauge!(o.name, help),
                }
            }
        }
        let free = gauge("pooler_free");
        let in_use = gauge("pooler_in_use");
        let starting = gauge("pooler_starting");
        let stopping = gauge("pooler_stopping");
        let queue = gauge("pooler_queue");
        let admission_limit = gauge("pooler_admission_limit");
        let admission_latency = gauge("pooler_admission_latency_seconds");
        let admission_baseline = gauge("pooler_admission_baseline_seconds");
        let take_wait = histogram("pooler_take_wait_seconds");
        let member_use = histogram("pooler_member_use_seconds");
        let gauges_live = [
            &free,
            &in_use,
            &starting,
            &stopping,
            &queue,
            &admission_limit,
        ]
        .into_iter()
        .any(|g| reaches_recorder(|p| g.increment(p)));
        let wait_live = reaches_recorder(|p| take_wait.record_many(p, 0));
        let use_live = reaches_recorder(|p| member_use.record_many(p, 0));
        PoolMetrics {
            take: counter("pooler_take_total", None),
            no_members,
            killed_free: by_reason(counter, "pooler_killed_free_total", REMOVAL_REASONS),
            killed_in_use: by_reason(counter, "pooler_killed_in_use_total", REMOVAL_REASONS),
            queue_max_reached: counter("pooler_queue_max_reached_total", None),
            start_timeout: counter("pooler_starting_member_timeout_total", None),
            start_failed: by_reason(counter, "pooler_start_failed_total", START_FAILURE_REASONS),
            start_time: histogram("pooler_member_start_seconds"),
            max_count: gauge("pooler_max_count"),
            init_count: gauge("pooler_init_count"),
            free,
            in_use,
            starting,
            stopping,
            queue,
            admission_limit,
            admission_latency,
            admission_baseline,
            admission_moves: by_reason(counter, "pooler_admission_moves_total", LIMIT_MOVE_REASONS),
            take_wait,
            member_use,
            gauges_live,
            wait_live,
            use_live,
        }
    }

    /// Whether the wait histogram reaches a recorder.
    pub(crate) fn wait_live(&self) -> bool {
        self.wait_live
    }

    /// Whether the use histogram reaches a recorder (the pool then reads the clock at take
    /// and return).
    pub(crate) fn use_live(&self) -> bool {
        self.use_live
    }

    /// Sets the gauges (values go in as `u32`, converted to `f64` only inside a recorder).
    pub(crate) fn publish(&self, g: Gauges) {
        if !self.gauges_live {
            return;
        }
        for (gauge, n) in [
            (&self.free, g.free),
            (&self.in_use, g.in_use),
            (&self.starting, g.starting),
            (&self.stopping, g.stopping),
            (&self.queue, g.queued),
        ] {
            gauge.set(u32::try_from(n).unwrap_or(u32::MAX));
        }
    }

    /// Sets the admission gauges: the limit, the last batch's latency and its baseline.
    pub(crate) fn admission(&self, status: Option<crate::admission::AdmissionStatus>) {
        if !self.gauges_live {
            return;
        }
        if let Some(a) = status {
            self.admission_limit
                .set(u32::try_from(a.limit).unwrap_or(u32::MAX));
            self.admission_latency.set(a.latency.as_secs_f64());
            self.admission_baseline.set(a.baseline.as_secs_f64());
        }
    }

    /// Counts a batch the admission limiter judged, by what it did with the limit.
    pub(crate) fn limit_judged(&self, judged: crate::admission::LimitMove) {
        if let Some(i) = super::limit_move_reason(judged) {
            self.admission_moves[i].increment(1);
        }
    }

    /// Adds what the hot core counted since the last flush: take attempts, and takes served
    /// at once (waits of zero).
    pub(crate) fn flush(&self, takes: u64, zero_waits: u64) {
        if takes > 0 {
            self.take.increment(takes);
        }
        if zero_waits > 0 && self.wait_live {
            self.take_wait
                .record_many(0.0, usize::try_from(zero_waits).unwrap_or(usize::MAX));
        }
    }

    /// A `take_member` that waited (it queued or checked its member first, at `started`)
    /// was handed a member now. Takes served at once are counted in the hot core instead.
    pub(crate) fn waited(&self, started: Instant) {
        if self.wait_live {
            self.take_wait.record(started.elapsed().as_secs_f64());
        }
    }

    /// A member taken at `taken_at` came back at `now`; the hold stands for `weight` holds
    /// (itself and those not timed since the last timed one).
    pub(crate) fn used(&self, taken_at: Instant, now: Instant, weight: u32) {
        if self.use_live {
            let secs = now.saturating_duration_since(taken_at).as_secs_f64();
            match weight {
                0 => {}
                1 => self.member_use.record(secs),
                n => self
                    .member_use
                    .record_many(secs, usize::try_from(n).unwrap_or(usize::MAX)),
            }
        }
    }

    /// A take got no member; `reason` is [`TakeError::reason`](crate::TakeError::reason).
    /// A take found the pool full.
    #[inline]
    pub(crate) fn at_capacity(&self) {
        self.no_members[0].increment(1);
    }

    /// A take got no member.
    pub(crate) fn no_member(&self, error: &TakeError) {
        // The index of the error's reason in NO_MEMBER_REASONS.
        let at = match error {
            TakeError::AtCapacity { .. } => 0,
            TakeError::AllInUse { .. } => 1,
            TakeError::QueueFull { .. } | TakeError::QueueShrunk { .. } => {
                self.queue_max_reached.increment(1);
                2
            }
            TakeError::Timeout { .. } => 3,
            TakeError::Unavailable { .. } => 4,
            TakeError::Shed { .. } | TakeError::Stale { .. } => 5,
            TakeError::OverLimit { .. } => 6,
            _ => return,
        };
        debug_assert_eq!(NO_MEMBER_REASONS[at], error.reason());
        self.no_members[at].increment(1);
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

    /// A start failed, for the reason at `reason` in the start-failure reasons.
    pub(crate) fn start_failed(&self, reason: usize) {
        if let Some(counter) = self.start_failed.get(reason) {
            counter.increment(1);
        }
    }

    /// A start ended (well or badly) after `took`.
    pub(crate) fn start_took(&self, took: std::time::Duration) {
        self.start_time.record(took.as_secs_f64());
    }

    /// The configured `init_count` and `max_count`.
    pub(crate) fn limits(&self, init_count: usize, max_count: usize) {
        self.init_count
            .set(u32::try_from(init_count).unwrap_or(u32::MAX));
        self.max_count
            .set(u32::try_from(max_count).unwrap_or(u32::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
