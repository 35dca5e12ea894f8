//! `Manager` hooks that panic or hang: each counts as that hook failing for that member, no
//! slot is lost, and every periodic job keeps its schedule.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use common::*;
use pooler::{Member, PoolConfig, Shutdown, TakeError};

/// Regression: a panicking `check` ended the health-check timer for good.
#[tokio::test(start_paused = true)]
async fn a_panicking_check_fails_that_member_and_checks_go_on() {
    quiet_planned_panics();
    let config = PoolConfig::new("p", 1, 1)
        .to_builder()
        .health_check_interval(Duration::from_secs(1))
        .build()
        .unwrap();
    let (pool, probe) = pool_with(config, Fake::default()).await;
    let first = pool.stats()[0].id;
    probe.set_check(Step::Panic);
    advance(Duration::from_secs(1)).await;
    let second = pool.stats()[0].id;
    assert_ne!(
        second, first,
        "the member whose check panicked was replaced"
    );
    assert_eq!(counts(&pool), (0, 1, 0, 0, 0));
    probe.set_check(Step::Err);
    advance(Duration::from_secs(1)).await;
    assert_eq!(probe.checks.load(SeqCst), 2, "the next round ran");
    assert_ne!(
        pool.stats()[0].id,
        second,
        "and replaced the failing member"
    );
}

/// Regression: a panic in `is_broken` at take lost the slot (in use by nobody).
#[tokio::test(start_paused = true)]
async fn a_panicking_is_broken_at_take_means_broken() {
    quiet_planned_panics();
    let (pool, probe) = pool(1, 1).await;
    probe.panic_is_broken.store(true, SeqCst);
    // Found broken, it is stopping: its slot is held until the stop ends.
    let e = pool.try_take_member().map(drop).unwrap_err();
    assert!(matches!(e, TakeError::AtCapacity { .. }), "{e}");
    probe.panic_is_broken.store(false, SeqCst);
    settle().await;
    assert_eq!(
        counts(&pool),
        (0, 1, 0, 0, 0),
        "replaced, slot accounted for"
    );
    assert_eq!(probe.stops(), 1);
    let m = pool.take_member(ms(100)).await.unwrap();
    drop(m);
    pool.close(Shutdown::Graceful).await;
}

/// Regression: a panic in `is_broken` or `needs_recycle` at return dropped the member with
/// its slot still in use, and a graceful close never finished.
#[tokio::test(start_paused = true)]
async fn a_panicking_hook_at_return_means_broken() {
    quiet_planned_panics();
    for flag in ["is_broken", "needs_recycle"] {
        let (pool, probe) = pool(1, 1).await;
        let m = pool.try_take_member().unwrap();
        let id = Member::id(&m);
        match flag {
            "is_broken" => probe.panic_is_broken.store(true, SeqCst),
            _ => probe.panic_needs_recycle.store(true, SeqCst),
        }
        drop(m);
        probe.panic_is_broken.store(false, SeqCst);
        probe.panic_needs_recycle.store(false, SeqCst);
        settle().await;
        assert_eq!(counts(&pool), (0, 1, 0, 0, 0), "{flag}");
        assert_ne!(pool.stats()[0].id, id, "{flag}: the member was replaced");
        pool.close(Shutdown::Graceful).await;
        assert_eq!((probe.alive(), pool.live_tasks()), (0, 0), "{flag}");
    }
}

/// A recycle or a stop that panics is that hook failing: the member is replaced, or its stop
/// ends and frees the slot.
#[tokio::test(start_paused = true)]
async fn a_panicking_recycle_or_stop_loses_nothing() {
    quiet_planned_panics();
    let (pool, probe) = pool(1, 1).await;
    probe.recycle_on.store(true, SeqCst);
    probe.set_recycle(Step::Panic);
    let id = Member::id(&pool.try_take_member().unwrap());
    settle().await;
    assert_eq!(counts(&pool), (0, 1, 0, 0, 0));
    assert_ne!(pool.stats()[0].id, id);
    probe.recycle_on.store(false, SeqCst);
    probe.set_stop(Step::Panic);
    Member::fail(pool.try_take_member().unwrap());
    settle().await;
    assert_eq!(
        counts(&pool),
        (0, 1, 0, 0, 0),
        "the panicking stop freed its slot"
    );
    pool.close(Shutdown::Graceful).await;
    assert_eq!((probe.alive(), pool.live_tasks()), (0, 0));
}

/// Regression: `take_member(100 ms)` waited `member_start_timeout` (3 s) for an idle check
/// that hung, and said it had waited 100 ms.
#[tokio::test(start_paused = true)]
async fn the_takers_deadline_bounds_an_idle_check() {
    let config = PoolConfig::new("p", 2, 2)
        .to_builder()
        .member_start_timeout(Duration::from_secs(3))
        .idle_check_threshold(Duration::ZERO)
        .build()
        .unwrap();
    let (pool, probe) = pool_with(config, Fake::default()).await;
    probe.set_check(Step::Never);
    let t = tokio::time::Instant::now();
    let e = pool.take_member(ms(100)).await.map(drop).unwrap_err();
    assert_eq!(t.elapsed(), ms(100), "{e}");
    let TakeError::Timeout { waited, .. } = e else {
        panic!("{e}")
    };
    assert_eq!(waited, ms(100));
    settle().await;
    assert_eq!(
        pool.utilization().in_use_count,
        0,
        "the member whose check was cut short is not held"
    );
}

/// Regression: a panicking idle check reached the taker as a panic.
#[tokio::test(start_paused = true)]
async fn a_panicking_idle_check_replaces_the_member_and_the_take_goes_on() {
    quiet_planned_panics();
    let config = PoolConfig::new("p", 1, 1)
        .to_builder()
        .idle_check_threshold(Duration::ZERO)
        .build()
        .unwrap();
    let (pool, probe) = pool_with(config, Fake::default()).await;
    let first = pool.stats()[0].id;
    probe.set_check(Step::Panic);
    let take = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.take_member(ms(1_000)).await.map(|m| Member::id(&m)) })
    };
    settle().await;
    probe.set_check(Step::Ok);
    advance(ms(10)).await;
    let got = take.await.expect("the take did not panic").unwrap();
    assert_ne!(got, first, "served by the replacement");
}
