//! Metrics through the `metrics` facade, and `tracing` events.
#![cfg(feature = "metrics")]

mod common;

use std::time::Duration;

use common::*;
use pooler::{Member, PoolConfig};

/// A recorder that keeps every value where a test can read it at any time.
mod recorder {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use metrics::{
        Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString,
        Unit,
    };

    #[derive(Default)]
    struct Samples(Mutex<Vec<f64>>);

    impl HistogramFn for Samples {
        fn record(&self, value: f64) {
            self.0.lock().unwrap().push(value);
        }
    }

    #[derive(Default)]
    pub(super) struct Store {
        counters: Mutex<HashMap<String, Arc<AtomicU64>>>,
        gauges: Mutex<HashMap<String, Arc<AtomicU64>>>,
        histograms: Mutex<HashMap<String, Arc<Samples>>>,
    }

    /// `name{label=value,…}` with labels in registration order.
    fn id(key: &Key) -> String {
        let labels: Vec<_> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        format!("{}{{{}}}", key.name(), labels.join(","))
    }

    impl Store {
        /// Counter `name` of pool `pool`, with its `reason` label when there is one.
        pub(super) fn counted(&self, name: &str, pool: &str, reason: Option<&str>) -> u64 {
            match reason {
                Some(r) => self.counter(&format!("{name}{{pool={pool},reason={r}}}")),
                None => self.counter(&format!("{name}{{pool={pool}}}")),
            }
        }
        pub(super) fn counter(&self, id: &str) -> u64 {
            self.counters
                .lock()
                .unwrap()
                .get(id)
                .map_or(0, |c| c.load(Ordering::SeqCst))
        }
        pub(super) fn gauge(&self, id: &str) -> f64 {
            let gauges = self.gauges.lock().unwrap();
            f64::from_bits(
                gauges
                    .get(id)
                    .unwrap_or_else(|| panic!("no gauge {id}"))
                    .load(Ordering::SeqCst),
            )
        }
        pub(super) fn samples(&self, id: &str) -> usize {
            self.values(id).len()
        }
        pub(super) fn values(&self, id: &str) -> Vec<f64> {
            self.histograms
                .lock()
                .unwrap()
                .get(id)
                .map_or_else(Vec::new, |h| h.0.lock().unwrap().clone())
        }
    }

    impl Recorder for Store {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            Counter::from_arc(
                self.counters
                    .lock()
                    .unwrap()
                    .entry(id(key))
                    .or_default()
                    .clone(),
            )
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::from_arc(
                self.gauges
                    .lock()
                    .unwrap()
                    .entry(id(key))
                    .or_default()
                    .clone(),
            )
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::from_arc(
                self.histograms
                    .lock()
                    .unwrap()
                    .entry(id(key))
                    .or_default()
                    .clone(),
            )
        }
    }
}

#[tokio::test(start_paused = true)]
async fn metrics_follow_every_change_with_reasons() {
    let store = recorder::Store::default();
    let _local = metrics::set_default_local_recorder(&store);
    let counter = |name: &str, reason: Option<&str>| store.counted(name, "p", reason);
    let gauge = |name: &str| store.gauge(&format!("{name}{{pool=p}}"));
    let histogram_len = |name: &str| store.samples(&format!("{name}{{pool=p}}"));
    let config = PoolConfig::new("p", 1, 1)
        .to_builder()
        .queue_max(1)
        .build()
        .unwrap();
    let (pool, probe) = pool_with(config, Fake::default()).await;
    // Gauges and the take counter are published by the pool's tick and by
    // `publish_metrics()`; everything else is counted where it happens.
    let publish = || pool.publish_metrics();

    let m = pool.try_take_member().unwrap();
    publish();
    assert_eq!(counter("pooler_take_total", None), 1);
    assert_eq!((gauge("pooler_in_use"), gauge("pooler_free")), (1.0, 0.0));
    assert!(pool.try_take_member().is_err());
    assert_eq!(
        counter("pooler_error_no_members_total", Some("at_capacity")),
        1
    );

    let waiter = spawn_take(&pool, ms(100));
    settle().await;
    publish();
    assert_eq!(gauge("pooler_queue"), 1.0);
    assert!(pool.take_member(ms(100)).await.is_err());
    assert_eq!(
        counter("pooler_error_no_members_total", Some("queue_full")),
        1
    );
    assert_eq!(counter("pooler_queue_max_reached_total", None), 1);
    assert!(waiter.await.unwrap().is_err());
    assert_eq!(counter("pooler_error_no_members_total", Some("timeout")), 1);

    // A return alone (no take, no read) reaches the gauges by the next tick: pooler's
    // stale-gauge bug cannot happen.
    drop(m);
    advance(ms(100)).await;
    assert_eq!((gauge("pooler_in_use"), gauge("pooler_free")), (0.0, 1.0));
    assert_eq!(histogram_len("pooler_member_use_seconds"), 1);

    Member::fail(pool.try_take_member().unwrap());
    assert_eq!(counter("pooler_killed_in_use_total", Some("failed")), 1);
    publish();
    assert_eq!(gauge("pooler_stopping"), 1.0);
    settle().await;
    publish();
    assert_eq!((gauge("pooler_stopping"), gauge("pooler_free")), (0.0, 1.0));

    let id = pool.stats()[0].id;
    probe.crash(id);
    settle().await;
    assert_eq!(counter("pooler_killed_free_total", Some("crashed")), 1);

    probe.set_start(Step::Never);
    Member::fail(pool.try_take_member().unwrap());
    settle().await;
    publish();
    assert_eq!(gauge("pooler_starting"), 1.0);
    advance(Duration::from_secs(60)).await;
    assert_eq!(counter("pooler_starting_member_timeout_total", None), 1);
    assert_eq!(
        histogram_len("pooler_take_wait_seconds"),
        0,
        "try_take_member never waits"
    );
    probe.set_start(Step::Ok);
    advance(Duration::from_secs(10)).await;
    drop(pool.take_member(ms(100)).await.unwrap());
    publish();
    assert_eq!(histogram_len("pooler_take_wait_seconds"), 1);

    // The values: a take served at once waited nothing, a queued one until the hand-off,
    // and a use lasts from take to return. Holds of takes served at once are timed one per
    // clock tick (100 ms), each standing for the holds since the last; after a tick, the next
    // one is timed. Queued takes are timed each.
    advance(ms(100)).await;
    let before = histogram_len("pooler_member_use_seconds");
    let held = pool.take_member(ms(100)).await.unwrap();
    let waiter = spawn_take(&pool, Duration::from_secs(1));
    settle().await;
    advance(ms(30)).await;
    drop(held);
    let served = waiter.await.unwrap().unwrap();
    advance(ms(5)).await;
    drop(served);
    publish();
    let mut waits = store.values("pooler_take_wait_seconds{pool=p}");
    waits.sort_by(f64::total_cmp);
    assert_eq!(waits, [0.0, 0.0, 0.030]);
    let uses = store.values("pooler_member_use_seconds{pool=p}");
    let timed = &uses[before..];
    assert_eq!(
        timed.last(),
        Some(&0.005),
        "the queued take's hold: {uses:?}"
    );
    assert!(
        timed[..timed.len() - 1].iter().all(|u| *u == 0.030),
        "the timed hold, standing for itself and the untimed one before it: {uses:?}"
    );
    // Every hold up to the last timed one is counted once: 6 takes were returned.
    assert_eq!(uses.len(), 6, "{uses:?}");
}

/// Starts are measured and their failures counted by reason; `max_count` and `init_count`
/// are gauges, kept current by `reconfigure`.
#[tokio::test(start_paused = true)]
async fn starts_are_timed_failures_counted_by_reason_and_limits_published() {
    let store = recorder::Store::default();
    let _local = metrics::set_default_local_recorder(&store);
    let counter = |reason: &str| store.counted("pooler_start_failed_total", "s", Some(reason));
    let fake = Fake::default();
    let probe = fake.probe.clone();
    probe.set_start(Step::Slow(ms(250)));
    let (pool, _) = pool_with(PoolConfig::new("s", 2, 4), fake).await;
    let starts = store.values("pooler_member_start_seconds{pool=s}");
    assert_eq!(starts, [0.25, 0.25], "both initial starts, timed");
    assert_eq!(store.gauge("pooler_init_count{pool=s}"), 2.0);
    assert_eq!(store.gauge("pooler_max_count{pool=s}"), 4.0);

    probe.set_start(Step::Err);
    let held = [
        pool.try_take_member().unwrap(),
        pool.try_take_member().unwrap(),
    ];
    assert!(pool.try_take_member().is_err(), "starts a batch that fails");
    settle().await;
    assert!(counter("error") >= 1, "a manager error");
    probe.set_start(Step::Panic);
    advance(Duration::from_secs(11)).await; // past any backoff step
    assert!(pool.try_take_member().is_err(), "starts another batch");
    settle().await;
    assert!(counter("panicked") >= 1, "a panic in start");
    assert_eq!(counter("timeout"), 0);
    drop(held);

    pool.reconfigure(
        pool.config()
            .to_builder()
            .init_count(1)
            .max_count(6)
            .build()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(store.gauge("pooler_init_count{pool=s}"), 1.0);
    assert_eq!(store.gauge("pooler_max_count{pool=s}"), 6.0);
}

/// Takes a member, waiting for starts if needed (the pool below cannot queue).
async fn take(pool: &pooler::Pool<Fake>) -> Member<Fake> {
    loop {
        if let Ok(m) = pool.try_take_member() {
            return m;
        }
        advance(ms(50)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn tracing_events_name_the_pool() {
    let logs = Logs::capture();
    let config = PoolConfig::new("p", 1, 3)
        .to_builder()
        .queue_max(1)
        .member_start_timeout(ms(100))
        .member_shutdown(ms(100))
        .cull_interval(ms(500))
        .max_age(ms(500))
        .build()
        .unwrap();
    let (pool, probe) = pool_with(config.clone(), Fake::default()).await;

    // Growth to 3, a full queue, then a cull back to 1.
    let held = vec![take(&pool).await, take(&pool).await, take(&pool).await];
    let waiter = spawn_take(&pool, ms(10));
    settle().await;
    assert!(pool.take_member(ms(10)).await.is_err());
    let _ = waiter.await;
    drop(held);
    advance(Duration::from_secs(2)).await;
    assert_eq!(pool.utilization().free_count, 1);

    // A start that fails, then one that times out, then the pool refills.
    probe.set_start(Step::Err);
    Member::fail(take(&pool).await);
    settle().await;
    probe.set_start(Step::Never);
    advance(Duration::from_secs(1)).await;
    probe.set_start(Step::Ok);
    let m = take(&pool).await;
    let id = Member::id(&m);
    drop(m);

    // A free member dies, and its stop hangs.
    probe.set_stop(Step::Never);
    probe.crash(id);
    advance(Duration::from_secs(1)).await;
    pool.reconfigure(config.to_builder().queue_max(5).build().unwrap())
        .unwrap();

    let text = logs.text();
    for event in [
        "queue full",
        "culled to the demand window's peak",
        "member start failed",
        "member start timed out",
        "free member died",
        "member stop hung past member_shutdown",
        "reconfigured",
    ] {
        let line = text
            .lines()
            .find(|l| l.contains(event))
            .unwrap_or_else(|| panic!("no {event:?} in\n{text}"));
        assert!(line.contains("pool=p"), "{line}");
    }
    assert!(
        text.contains("start refused"),
        "the manager's error is in the log"
    );
}

/// Counting (docs/design.md, "Counting"): every take attempt is a take (failures also by reason), and a free
/// member that fails its scheduled check is a `killed_free`, not a `killed_in_use`.
#[tokio::test(start_paused = true)]
async fn takes_count_attempts_and_free_removals_are_killed_free() {
    let store = recorder::Store::default();
    let _local = metrics::set_default_local_recorder(&store);
    let counter = |name: &str, reason: Option<&str>| store.counted(name, "p", reason);
    let config = PoolConfig::new("p", 1, 1)
        .to_builder()
        .health_check_interval(Duration::from_secs(1))
        .build()
        .unwrap();
    let (pool, probe) = pool_with(config, Fake::default()).await;
    let m = pool.try_take_member().unwrap();
    assert!(pool.try_take_member().is_err());
    assert!(pool.take_member(ms(10)).await.is_err());
    pool.publish_metrics();
    assert_eq!(counter("pooler_take_total", None), 3, "every attempt");
    assert_eq!(
        counter("pooler_error_no_members_total", Some("at_capacity"))
            + counter("pooler_error_no_members_total", Some("timeout")),
        2
    );
    drop(m);
    probe.set_check(Step::Err);
    advance(Duration::from_secs(1)).await;
    assert_eq!(counter("pooler_killed_free_total", Some("failed")), 1);
    assert_eq!(counter("pooler_killed_in_use_total", Some("failed")), 0);
}

/// Each batch of uses the admission limiter judges is counted by what it did with the limit.
#[tokio::test(start_paused = true)]
async fn admission_batches_are_counted_by_what_the_limit_did() {
    let store = recorder::Store::default();
    let _local = metrics::set_default_local_recorder(&store);
    let moves = |reason: &str| store.counted("pooler_admission_moves_total", "a", Some(reason));
    let config = PoolConfig::new("a", 4, 4)
        .to_builder()
        .admission(pooler::AdmissionMode::Vegas)
        .build()
        .unwrap();
    let (pool, _) = pool_with(config, Fake::default()).await;
    // 16 rounds of all four held for 10 ms, the limit in full use at an unchanging latency:
    // it grows (held at `max_count`). Every use is timed once more than half the limit is
    // in use, and the first of a tick is: 63 of the 64 (the first round's second take
    // began with a quarter in use), 7 batches of 8.
    for _ in 0..16 {
        let held: Vec<_> = (0..4).map(|_| pool.try_take_member().unwrap()).collect();
        advance(ms(10)).await;
        drop(held);
    }
    assert_eq!(moves("grew"), 7);
    // Then one use at a time for a second: a tick that sees less than half the limit used
    // brings it down, a step a tick, to twice the use (4 to 3 to 2); there a batch at the
    // same latency grows it again (by a third: a small limit grows by what would keep its
    // latency within half again the base, docs/design.md), and so on: 7 moves down by
    // ticks, 6 up by the batches the ticks' samples fill.
    for _ in 0..100 {
        let held = pool.try_take_member().unwrap();
        advance(ms(10)).await;
        drop(held);
    }
    assert_eq!((moves("idle"), moves("grew")), (7, 13));
    assert!((2..=4).contains(&pool.admission().unwrap().limit));
    for reason in ["shrank", "held", "probed", "late"] {
        assert_eq!(moves(reason), 0, "{reason}");
    }
}

/// A recorder whose every gauge is one [`GaugeFn`] of the test's (the others do nothing).
mod gauges_to {
    use std::sync::Arc;

    use metrics::{
        Counter, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };

    #[derive(Default)]
    pub(super) struct GaugesTo<G>(pub(super) Arc<G>);

    impl<G: GaugeFn + Send + Sync + 'static> Recorder for GaugesTo<G> {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
            Counter::noop()
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::from_arc(self.0.clone())
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }
}

/// A gauge that reads the pool from inside its update (as a recorder that logs the pool's
/// state with each value might).
mod reentrant {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use metrics::GaugeFn;

    use crate::common::Fake;

    #[derive(Default)]
    pub(super) struct Reader {
        pub(super) pool: OnceLock<pooler::Pool<Fake>>,
        pub(super) reads: AtomicUsize,
    }

    impl GaugeFn for Reader {
        fn increment(&self, _: f64) {}
        fn decrement(&self, _: f64) {}
        fn set(&self, _: f64) {
            if let Some(pool) = self.pool.get() {
                let _ = pool.utilization();
                self.reads.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

/// A recorder is user code: the pool never calls it under its locks, so one that reads the
/// pool from inside an update does not deadlock — through a reconfigure (whose gauges of the
/// limits change) and a publish.
#[tokio::test(start_paused = true)]
async fn a_recorder_that_reads_the_pool_never_deadlocks_it() {
    let recorder = gauges_to::GaugesTo::<reentrant::Reader>::default();
    let _local = metrics::set_default_local_recorder(&recorder);
    let config = PoolConfig::new("reentrant", 1, 2);
    let (pool, _probe) = pool_with(config.clone(), Fake::default()).await;
    let reader = recorder.0.clone();
    assert!(reader.pool.set(pool.clone()).is_ok());
    // On a thread of its own, so that a deadlock fails the test instead of hanging it.
    let (done, finished) = std::sync::mpsc::channel();
    let other = pool.clone();
    std::thread::spawn(move || {
        let grown = config.to_builder().max_count(3).build().unwrap();
        let _ = done.send(other.reconfigure(grown).map(|_| other.publish_metrics()));
    });
    let Ok(outcome) = finished.recv_timeout(Duration::from_secs(10)) else {
        // The pool's lock stays held for ever: unwinding would block on it in the pool's
        // drop. End the test binary instead.
        eprintln!("the reconfigure or the publish deadlocked in the recorder");
        std::process::abort();
    };
    assert!(outcome.is_ok(), "{outcome:?}");
    assert!(
        reader.reads.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "the recorder read the pool"
    );
}

/// A gauge that panics once armed.
mod panicky {
    use std::sync::atomic::{AtomicBool, Ordering};

    use metrics::GaugeFn;

    #[derive(Default)]
    pub(super) struct Armed(pub(super) AtomicBool);

    impl GaugeFn for Armed {
        fn increment(&self, _: f64) {}
        fn decrement(&self, _: f64) {}
        fn set(&self, _: f64) {
            assert!(!self.0.load(Ordering::SeqCst), "planned panic in a gauge");
        }
    }
}

/// A recorder is user code: one that panics at every publish of the gauges (each
/// housekeeping tick) does not keep a queued take past its deadline, though that deadline is
/// past the timer horizon and so watched by the tick until it is near.
#[tokio::test(start_paused = true)]
async fn a_recorder_that_panics_at_every_tick_keeps_no_take_past_its_deadline() {
    let recorder = gauges_to::GaugesTo::<panicky::Armed>::default();
    let _local = metrics::set_default_local_recorder(&recorder);
    let (pool, _probe) = pool_with(PoolConfig::new("panicky", 1, 1), Fake::default()).await;
    let held = pool.try_take_member().unwrap();
    recorder
        .0
        .0
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let began = tokio::time::Instant::now();
    let deadline = Duration::from_secs(2);
    let taken = tokio::time::timeout(Duration::from_secs(10), pool.take_member(deadline))
        .await
        .expect("the take ended");
    assert!(
        matches!(taken, Err(pooler::TakeError::Timeout { .. })),
        "{taken:?}"
    );
    assert!(
        began.elapsed() < deadline + Duration::from_millis(2),
        "{:?}",
        began.elapsed()
    );
    recorder
        .0
        .0
        .store(false, std::sync::atomic::Ordering::SeqCst);
    drop(held);
}
