//! Supervised starts and stops: the start timeout, backoff during an outage, refilling, and
//! stops bounded by member_shutdown.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use common::*;
use pooler::{Member, Pool, PoolConfig, StartError, TakeError};

fn config(init: usize, max: usize) -> PoolConfig {
    PoolConfig::new("p", init, max)
        .to_builder()
        .member_start_timeout(ms(150))
        .member_shutdown(ms(500))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_start_timeout_has_millisecond_precision() {
    let fake = Fake::default();
    fake.probe.set_start(Step::Slow(ms(149)));
    let (pool, _) = pool_with(config(1, 1), fake).await;
    assert_eq!(pool.utilization().free_count, 1, "149 ms < 150 ms");

    let fake = Fake::default();
    fake.probe.set_start(Step::Slow(ms(151)));
    let t0 = tokio::time::Instant::now();
    let (pool, probe) = pool_with(config(1, 1), fake).await;
    assert_eq!(
        t0.elapsed(),
        ms(150),
        "cancelled at the timeout, not when start would end"
    );
    assert_eq!(pool.utilization().free_count, 0);
    assert_eq!(probe.alive(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_member_started_but_not_initialized_in_time_is_stopped() {
    let fake = Fake::default();
    fake.probe.set_start(Step::Slow(ms(100)));
    fake.probe.set_init(Step::Slow(ms(100)));
    let (pool, probe) = pool_with(config(1, 1), fake).await;
    assert_eq!(counts(&pool).1, 0);
    settle().await;
    assert_eq!(
        probe.stops(),
        1,
        "the produced member went through Manager::stop"
    );
    assert_eq!(probe.alive(), 0, "and is gone");
    assert_eq!(probe.drivers(), 0, "with its driver task");
}

#[tokio::test(start_paused = true)]
async fn a_member_whose_initialize_fails_is_stopped_and_the_error_kept() {
    let fake = Fake::default();
    fake.probe.set_init(Step::Err);
    let (pool, probe) = pool_with(config(1, 1), fake).await;
    settle().await;
    assert_eq!((probe.stops(), probe.alive()), (1, 0));
    let e = pool.try_take_member().unwrap_err();
    let TakeError::Unavailable {
        source: StartError::Manager(cause),
        ..
    } = &e
    else {
        panic!("{e}")
    };
    assert_eq!(cause.to_string(), "initialize refused");
    assert_eq!(
        e.to_string(),
        "pool `p`: no member available, starts are failing: starting a member failed: initialize refused"
    );
}

#[tokio::test(start_paused = true)]
async fn an_outage_fails_fast_backs_off_and_refills_when_the_backend_returns() {
    let fake = Fake::default();
    fake.probe.set_start(Step::Err);
    // Exact backoff steps, to count the attempts they allow.
    let exact = config(3, 5)
        .to_builder()
        .backoff_jitter(false)
        .build()
        .unwrap();
    let (pool, probe) = pool_with(exact, fake).await;
    assert_eq!(probe.attempts(), 3);

    // The three starts failed together: one backoff step, the next attempt 100 ms away. A
    // take whose deadline comes first fails at once with the manager's error (docs/design.md, "Failing starts").
    let t0 = tokio::time::Instant::now();
    let e = pool.take_member(ms(50)).await.unwrap_err();
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert!(matches!(e, TakeError::Unavailable { .. }), "{e}");
    assert!(e.to_string().contains("start refused"), "{e}");
    for _ in 0..100 {
        assert!(pool.try_take_member().is_err());
    }

    // Sixty seconds of outage: retries are spaced 0.1, 0.2, 0.4 … up to 4 s, one at a time
    // (3 at the start, 6 doubling steps, then one every 4 s: 22).
    advance(Duration::ZERO).await;
    for _ in 0..600 {
        advance(ms(100)).await;
    }
    let attempts = probe.attempts();
    assert!(
        (20..=24).contains(&attempts),
        "{attempts} attempts in 60 s: a storm or a stall"
    );
    assert!(pool.utilization().starting_count <= 1);

    // The backend comes back: within one backoff step the pool refills to init_count.
    probe.set_start(Step::Ok);
    for _ in 0..100 {
        advance(ms(100)).await;
    }
    assert_eq!(counts(&pool), (0, 3, 0, 0, 0));
    assert!(pool.try_take_member().is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_timeout_during_an_outage_names_the_cause() {
    let (pool, probe) = pool_with(config(1, 2), Fake::default()).await;
    let held = pool.try_take_member().unwrap();
    probe.set_start(Step::Err);
    // One member is in use, so the taker queues; the growth start fails meanwhile.
    let e = pool.take_member(ms(300)).await.unwrap_err();
    let TakeError::Timeout {
        last_start_error: Some(cause),
        ..
    } = &e
    else {
        panic!("{e}")
    };
    assert_eq!(cause.to_string(), "starting a member failed: start refused");
    assert!(e.to_string().contains("start refused"), "{e}");
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn a_start_that_never_ends_is_cancelled_and_retried() {
    let fake = Fake::default();
    fake.probe.set_start(Step::Never);
    let (pool, probe) = pool_with(config(1, 1), fake).await;
    assert_eq!(probe.attempts(), 1);
    probe.set_start(Step::Ok);
    advance(ms(150)).await;
    assert_eq!(
        counts(&pool),
        (0, 1, 0, 0, 0),
        "the retry after 100 ms backoff succeeded"
    );
}

#[tokio::test(start_paused = true)]
async fn stopping_members_count_against_max_count() {
    let (pool, probe) = pool_with(config(1, 1), Fake::default()).await;
    probe.set_stop(Step::Slow(ms(200)));
    Member::fail(pool.try_take_member().unwrap());
    settle().await;
    assert_eq!(counts(&pool), (0, 0, 0, 1, 0));
    let e = pool.try_take_member().unwrap_err();
    assert!(matches!(e, TakeError::AtCapacity { .. }), "{e}");
    advance(ms(200)).await;
    assert_eq!(
        counts(&pool),
        (0, 1, 0, 0, 0),
        "slot freed, replacement started"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hung_stop_frees_its_slot_at_member_shutdown() {
    let (pool, probe) = pool_with(config(1, 1), Fake::default()).await;
    probe.set_stop(Step::Never);
    Member::fail(pool.try_take_member().unwrap());
    settle().await;
    advance(ms(499)).await;
    assert_eq!(counts(&pool).3, 1, "still stopping before the bound");
    advance(ms(1)).await;
    assert_eq!(counts(&pool), (0, 1, 0, 0, 0));
    assert_eq!(
        probe.alive(),
        1,
        "the hung member was dropped with its stop"
    );
    assert_eq!(probe.drivers(), 1, "and its driver task ended");
}

#[tokio::test(start_paused = true)]
async fn a_member_dying_while_starting_is_never_handed_out() {
    let fake = Fake::default();
    fake.probe.set_init(Step::Slow(ms(50)));
    let (pool, probe) = pool_with(config(0, 1), fake).await;
    let waiter = spawn_take(&pool, ms(1000));
    settle().await;
    assert_eq!(probe.attempts(), 1);
    probe.crash(1); // its driver ends during initialize
    let m = waiter.await.unwrap().unwrap();
    assert_eq!(
        Member::id(&m),
        2,
        "the dead one was stopped and a second start served the waiter"
    );
    assert_eq!(probe.stops(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_replacement_starts_at_once_when_there_is_room() {
    let (pool, probe) = pool_with(config(1, 3), Fake::default()).await;
    probe.set_stop(Step::Slow(ms(200)));
    Member::fail(pool.try_take_member().unwrap());
    settle().await;
    assert_eq!(
        counts(&pool),
        (0, 1, 0, 1, 0),
        "replaced while the old one still stops"
    );
}

#[tokio::test(start_paused = true)]
async fn a_start_that_panics_is_a_failed_start_and_the_pool_recovers() {
    let fake = Fake::default();
    fake.probe.set_init(Step::Panic);
    let (pool, probe) = pool_with(config(1, 1), fake).await;
    let e = pool.try_take_member().unwrap_err();
    assert!(
        matches!(
            e,
            TakeError::Unavailable {
                source: StartError::Panicked,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(probe.alive(), 0, "the member it produced did not leak");
    probe.set_init(Step::Ok);
    advance(ms(150)).await;
    assert_eq!(counts(&pool), (0, 1, 0, 0, 0));
}

/// Full jitter: each wait is drawn from `[0, step]`, so two pools whose backend died at the
/// same moment do not retry in lockstep, and neither storms it.
#[tokio::test(start_paused = true)]
async fn jittered_backoff_spreads_the_retries_of_pools_failing_together() {
    let start = |_| async {
        let fake = Fake::default();
        fake.probe.set_start(Step::Err);
        pool_with(config(1, 1), fake).await
    };
    let (a, probe_a) = start(()).await;
    let (b, probe_b) = start(()).await;
    let mut seen = (Vec::new(), Vec::new());
    // The retry after n steps comes within 100 ms × 2^(n−1) of the failure before it.
    for _ in 0..20_000 {
        advance(ms(1)).await;
        for (probe, times) in [(&probe_a, &mut seen.0), (&probe_b, &mut seen.1)] {
            if probe.attempts() > times.len() + 1 {
                times.push(tokio::time::Instant::now());
            }
        }
    }
    assert!(
        seen.0.len() >= 6 && seen.1.len() >= 6,
        "{} and {} retries in 20 s",
        seen.0.len(),
        seen.1.len()
    );
    assert!(
        seen.0.len() <= 60 && seen.1.len() <= 60,
        "not a storm: {seen:?}"
    );
    assert_ne!(seen.0, seen.1, "two pools retry at different times");
    drop((a, b));
}

/// `max_concurrent_starts` bounds the starts in progress — filling the pool, growing for a
/// burst of takes, and replacing members whose lifetimes end together — and every taker is
/// still served.
#[tokio::test(start_paused = true)]
async fn starts_in_progress_never_exceed_max_concurrent_starts() {
    let fake = Fake::default();
    fake.probe.set_start(Step::Slow(Duration::from_millis(100)));
    let config = PoolConfig::new("storm", 6, 12)
        .to_builder()
        .max_concurrent_starts(Some(2))
        .max_lifetime(Duration::from_secs(60))
        .cull_interval(Duration::ZERO)
        .queue_max(100)
        .build()
        .unwrap();
    let most = Arc::new(AtomicUsize::new(0));
    let pool = {
        let start = tokio::spawn(Pool::start(config, fake.clone()));
        // Watch the starts while the pool fills.
        while !start.is_finished() {
            most.fetch_max(starting(&fake), SeqCst);
            tokio::time::advance(Duration::from_millis(10)).await;
        }
        start.await.unwrap().unwrap()
    };
    assert_eq!(
        pool.utilization().free_count,
        6,
        "Pool::start waited for all six"
    );
    assert_eq!(most.load(SeqCst), 2);

    // A burst of twelve takes on six members: six more start, two at a time.
    let takers: Vec<_> = (0..12)
        .map(|_| spawn_take(&pool, Duration::from_secs(5)))
        .collect();
    let mut held = Vec::new();
    for taker in takers {
        loop {
            most.fetch_max(pool.utilization().starting_count, SeqCst);
            if taker.is_finished() {
                break;
            }
            tokio::time::advance(Duration::from_millis(10)).await;
        }
        held.push(taker.await.unwrap().expect("every taker is served"));
    }
    assert_eq!(most.load(SeqCst), 2, "never more than two at a time");
    drop(held);

    // Twelve lifetimes end together: their replacements start two at a time too.
    let attempts = fake.probe.attempts();
    tokio::time::advance(Duration::from_secs(60)).await;
    for _ in 0..100 {
        most.fetch_max(pool.utilization().starting_count, SeqCst);
        tokio::time::advance(Duration::from_millis(10)).await;
    }
    assert_eq!(most.load(SeqCst), 2);
    assert_eq!(fake.probe.attempts(), attempts + 12, "each member replaced");
    let u = pool.utilization();
    assert_eq!(u.free_count, 12, "{u:?}");
}

/// Starts in progress, from the manager's side (started, not yet ended).
fn starting(fake: &Fake) -> usize {
    fake.probe.attempts() - fake.probe.started.load(SeqCst)
}

/// `max_start_rate` spaces starts evenly: five a second fill a burst of ten takes over two
/// seconds, one start every 200 ms, and every taker is served.
#[tokio::test(start_paused = true)]
async fn starts_begin_no_faster_than_max_start_rate() {
    let fake = Fake::default();
    let config = PoolConfig::new("paced", 0, 10)
        .to_builder()
        .max_start_rate(Some(5))
        .queue_max(100)
        .build()
        .unwrap();
    let pool = Pool::start(config, fake.clone()).await.unwrap();
    let takers: Vec<_> = (0..10)
        .map(|_| spawn_take(&pool, Duration::from_secs(5)))
        .collect();
    // The takers ask now; then the starts are looked at halfway between two turns.
    settle().await;
    let mut seen = Vec::new();
    tokio::time::advance(Duration::from_millis(100)).await;
    for _ in 0..10 {
        settle().await;
        seen.push(fake.probe.attempts());
        tokio::time::advance(Duration::from_millis(200)).await;
    }
    assert_eq!(seen, (1..=10).collect::<Vec<_>>(), "one start each 200 ms");
    for taker in takers {
        drop(taker.await.unwrap().expect("every taker is served"));
    }
    let e = PoolConfig::new("paced", 0, 10)
        .to_builder()
        .max_start_rate(Some(0))
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("max_start_rate"), "{e}");
}
