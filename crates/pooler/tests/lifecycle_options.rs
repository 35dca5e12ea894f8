//! auto_grow_threshold, member_order, health checks and leak detection.

mod common;

use std::time::Duration;

use common::*;
use pooler::{Member, MemberOrder, PoolConfig};

#[tokio::test(start_paused = true)]
async fn auto_grow_starts_init_count_more_when_free_drops_to_the_threshold() {
    let config = PoolConfig::new("p", 3, 7)
        .to_builder()
        .auto_grow_threshold(Some(1))
        .build()
        .unwrap();
    let (pool, probe) = pool_with(config, Fake::default()).await;
    let a = pool.try_take_member().unwrap();
    assert_eq!(
        counts(&pool),
        (1, 2, 0, 0, 0),
        "2 free > threshold 1: no growth"
    );
    let b = pool.try_take_member().unwrap();
    assert_eq!(
        counts(&pool),
        (2, 1, 3, 0, 0),
        "1 free ≤ 1: three more start"
    );
    settle().await;
    let c = pool.try_take_member().unwrap();
    let d = pool.try_take_member().unwrap();
    let e = pool.try_take_member().unwrap();
    // 5 in use, 1 free: growth is capped by max_count 7 (one slot left).
    assert_eq!(counts(&pool), (5, 1, 1, 0, 0));
    settle().await;
    assert_eq!(probe.attempts(), 7);
    drop((a, b, c, d, e));
}

#[tokio::test(start_paused = true)]
async fn without_a_threshold_the_pool_grows_only_on_demand() {
    let (pool, _) = pool(3, 7).await;
    let held: Vec<_> = (0..3).map(|_| pool.try_take_member().unwrap()).collect();
    assert_eq!(counts(&pool), (3, 0, 0, 0, 0));
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn fifo_hands_out_round_robin_and_can_be_switched_at_runtime() {
    let config = PoolConfig::new("p", 3, 3)
        .to_builder()
        .member_order(MemberOrder::Fifo)
        .build()
        .unwrap();
    let (pool, _) = pool_with(config.clone(), Fake::default()).await;
    let mut seen = Vec::new();
    for _ in 0..6 {
        let m = pool.try_take_member().unwrap();
        seen.push(Member::id(&m));
    }
    assert_eq!(seen, [1, 2, 3, 1, 2, 3], "round robin");

    pool.reconfigure(
        config
            .to_builder()
            .member_order(MemberOrder::Lifo)
            .build()
            .unwrap(),
    )
    .unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let m = pool.try_take_member().unwrap();
        seen.push(Member::id(&m));
    }
    assert_eq!(seen, [3, 3, 3], "lifo: the last returned again and again");
}

#[tokio::test(start_paused = true)]
async fn health_checks_replace_members_that_fail_them() {
    let config = PoolConfig::new("p", 2, 2)
        .to_builder()
        .health_check_interval(Duration::from_secs(5))
        .build()
        .unwrap();
    let (pool, probe) = pool_with(config, Fake::default()).await;
    advance(Duration::from_secs(5)).await;
    assert_eq!(
        probe.checks.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "each free member once"
    );
    assert_eq!(probe.stops(), 0);
    probe.set_check(Step::Err);
    advance(Duration::from_secs(5)).await;
    assert_eq!(probe.stops(), 2);
    settle().await;
    let ids: Vec<_> = pool.stats().iter().map(|s| s.id).collect();
    assert_eq!(ids, [3, 4]);
}

#[tokio::test(start_paused = true)]
async fn a_member_being_checked_is_never_handed_out() {
    let config = PoolConfig::new("p", 1, 1)
        .to_builder()
        .health_check_interval(Duration::from_secs(5))
        .build()
        .unwrap();
    let (pool, probe) = pool_with(config, Fake::default()).await;
    probe.set_check(Step::Slow(Duration::from_secs(1)));
    advance(Duration::from_secs(5)).await;
    assert_eq!(counts(&pool), (1, 0, 0, 0, 0), "claimed by the check");
    assert!(pool.try_take_member().is_err());
    // A queued taker gets it as soon as the check passes.
    let t0 = tokio::time::Instant::now();
    let m = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert_eq!(t0.elapsed(), Duration::from_secs(1));
    assert_eq!(Member::id(&m), 1);
}

#[tokio::test(start_paused = true)]
async fn take_member_checks_a_member_idle_past_the_threshold() {
    let config = PoolConfig::new("p", 2, 2)
        .to_builder()
        .idle_check_threshold(ms(500))
        .build()
        .unwrap();
    let (pool, probe) = pool_with(config, Fake::default()).await;
    let checks = || probe.checks.load(std::sync::atomic::Ordering::SeqCst);
    drop(pool.take_member(ms(100)).await.unwrap());
    assert_eq!(checks(), 0, "just started: not idle long");
    advance(ms(100)).await;
    drop(pool.take_member(ms(100)).await.unwrap());
    assert_eq!(checks(), 0, "used 100 ms ago: bypassed");
    advance(ms(600)).await;
    probe.set_check(Step::Err);
    let m = pool.take_member(ms(100)).await.unwrap();
    assert_eq!(
        checks(),
        2,
        "both idle members were checked, failed, and replaced"
    );
    assert!(Member::id(&m) > 2, "the taker got a fresh replacement");
    settle().await;
    assert_eq!(probe.stops(), 2);
}

/// A manager that asks for a check of members idle past its threshold gets it when the
/// configuration sets none (pooler-mysql's, whose driver's dead links nothing else finds);
/// the configuration's own threshold wins, and a reconfigure that sets none falls back to
/// the manager's again.
#[tokio::test(start_paused = true)]
async fn the_managers_idle_check_threshold_applies_when_the_config_sets_none() {
    let fake = Fake::default();
    fake.probe
        .idle_check_ms
        .store(500, std::sync::atomic::Ordering::SeqCst);
    let (pool, probe) = pool_with(PoolConfig::new("p", 1, 1), fake).await;
    let checks = || probe.checks.load(std::sync::atomic::Ordering::SeqCst);
    drop(pool.take_member(ms(100)).await.unwrap());
    advance(ms(400)).await;
    drop(pool.take_member(ms(100)).await.unwrap());
    assert_eq!(checks(), 0, "idle 400 ms, under the manager's 500 ms");
    advance(ms(600)).await;
    drop(pool.take_member(ms(100)).await.unwrap());
    assert_eq!(
        checks(),
        1,
        "idle 600 ms: checked by the manager's threshold"
    );

    // The configuration's own threshold wins over the manager's.
    let config = PoolConfig::new("p", 1, 1)
        .to_builder()
        .idle_check_threshold(Duration::from_secs(5))
        .build()
        .unwrap();
    pool.reconfigure(config).unwrap();
    advance(ms(600)).await;
    drop(pool.take_member(ms(100)).await.unwrap());
    assert_eq!(checks(), 1, "idle 600 ms, under the configuration's 5 s");
    // Set to none again: the manager's threshold is back.
    pool.reconfigure(PoolConfig::new("p", 1, 1)).unwrap();
    advance(ms(600)).await;
    drop(pool.take_member(ms(100)).await.unwrap());
    assert_eq!(checks(), 2, "idle 600 ms: the manager's threshold again");
}

/// Without a threshold anywhere, nothing is checked however long a member idles.
#[tokio::test(start_paused = true)]
async fn without_any_idle_check_threshold_an_idle_member_is_not_checked() {
    let (pool, probe) = pool_with(PoolConfig::new("p", 1, 1), Fake::default()).await;
    advance(Duration::from_secs(3600)).await;
    drop(pool.take_member(ms(100)).await.unwrap());
    assert_eq!(probe.checks.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// A pool of one with a leak threshold of 10 s, and its logs.
async fn watched_for_leaks() -> (Logs, pooler::Pool<Fake>) {
    let logs = Logs::capture();
    let config = PoolConfig::new("p", 1, 1)
        .to_builder()
        .leak_detection_threshold(Duration::from_secs(10))
        .build()
        .unwrap();
    let (pool, _) = pool_with(config, Fake::default()).await;
    (logs, pool)
}

/// A member given back before the threshold leaves no record behind: however long it then
/// stays free, it is never reported.
#[tokio::test(start_paused = true)]
async fn a_member_given_back_in_time_is_never_reported_as_a_leak() {
    let (logs, pool) = watched_for_leaks().await;
    for held in [Duration::from_secs(1), Duration::from_secs(9)] {
        let m = pool.take_member(ms(100)).await.unwrap();
        advance(held).await;
        drop(m);
    }
    for _ in 0..30 {
        advance(Duration::from_secs(1)).await;
    }
    assert_eq!(logs.count("possible leak"), 0, "{}", logs.text());
}

#[tokio::test(start_paused = true)]
async fn a_leak_is_reported_once_with_where_it_was_taken_and_again_on_return() {
    let (logs, pool) = watched_for_leaks().await;
    let m = pool.take_member(ms(100)).await.unwrap();
    let line = line!() - 1;
    advance(Duration::from_secs(9)).await;
    assert_eq!(logs.count("possible leak"), 0);
    for _ in 0..30 {
        advance(Duration::from_secs(1)).await;
    }
    assert_eq!(logs.count("possible leak"), 1, "{}", logs.text());
    assert!(
        logs.text()
            .contains(&format!("lifecycle_options.rs:{line}")),
        "{}",
        logs.text()
    );
    drop(m);
    assert_eq!(logs.count("came back"), 1);
}
