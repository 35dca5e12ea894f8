//! Culling back to init_count after a burst, by the demand window.

mod common;

use std::time::Duration;

use common::*;
use pooler::{MemberOrder, PoolConfig};

fn config(order: MemberOrder) -> PoolConfig {
    PoolConfig::new("p", 2, 10)
        .to_builder()
        .cull_interval(Duration::from_secs(1))
        .max_age(Duration::from_secs(10))
        .member_order(order)
        .build()
        .unwrap()
}

async fn seconds(n: u64) {
    for _ in 0..n {
        advance(Duration::from_secs(1)).await;
    }
}

/// Takes `n` members at once (growing the pool as needed) and returns them all.
async fn burst(pool: &pooler::Pool<Fake>, n: usize) {
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(pool.take_member(ms(1000)).await.unwrap());
    }
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn after_a_burst_the_pool_holds_its_size_for_max_age_then_shrinks_to_init() {
    for order in [MemberOrder::Lifo, MemberOrder::Fifo] {
        let (pool, probe) = pool_with(config(order), Fake::default()).await;
        burst(&pool, 8).await;
        assert_eq!(counts(&pool), (0, 8, 0, 0, 0), "{order:?}");
        seconds(9).await;
        assert_eq!(
            pool.utilization().free_count,
            8,
            "{order:?}: held within max_age"
        );
        seconds(3).await;
        assert_eq!(
            counts(&pool),
            (0, 2, 0, 0, 0),
            "{order:?}: back to init_count"
        );
        assert_eq!(probe.stops(), 6);
    }
}

#[tokio::test(start_paused = true)]
async fn the_pool_keeps_the_peak_of_the_window_not_the_current_use() {
    let (pool, _) = pool_with(config(MemberOrder::Lifo), Fake::default()).await;
    burst(&pool, 8).await;
    seconds(5).await;
    burst(&pool, 5).await; // a smaller burst inside the window
    seconds(7).await; // the 8-peak has left the window, the 5-peak has not
    assert_eq!(pool.utilization().free_count, 5);
    seconds(10).await;
    assert_eq!(pool.utilization().free_count, 2);
}

#[tokio::test(start_paused = true)]
async fn members_in_use_are_never_culled() {
    let (pool, _) = pool_with(config(MemberOrder::Lifo), Fake::default()).await;
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(pool.take_member(ms(1000)).await.unwrap());
    }
    seconds(30).await;
    assert_eq!(counts(&pool).0, 6, "all six still held");
    drop(held);
    seconds(12).await;
    assert_eq!(counts(&pool), (0, 2, 0, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn the_oldest_idle_members_go_first() {
    let (pool, _) = pool_with(config(MemberOrder::Lifo), Fake::default()).await;
    burst(&pool, 4).await; // members 1..4 are free; lifo hands out 4 first
    let recent = pool.take_member(ms(10)).await.unwrap();
    let recent_id = pooler::Member::id(&recent);
    seconds(1).await;
    drop(recent); // returned last: the most recently idle
    seconds(12).await;
    let ids: Vec<_> = pool.stats().iter().map(|s| s.id).collect();
    assert_eq!(ids.len(), 2);
    assert!(
        ids.contains(&recent_id),
        "kept the most recently used, culled the oldest: {ids:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn fixed_size_pools_and_a_zero_interval_never_cull() {
    let fixed = config(MemberOrder::Lifo)
        .to_builder()
        .init_count(4)
        .max_count(4)
        .build()
        .unwrap();
    let (pool, probe) = pool_with(fixed, Fake::default()).await;
    burst(&pool, 4).await;
    seconds(30).await;
    assert_eq!((pool.utilization().free_count, probe.stops()), (4, 0));

    let off = config(MemberOrder::Lifo)
        .to_builder()
        .cull_interval(Duration::ZERO)
        .build()
        .unwrap();
    let (pool, probe) = pool_with(off, Fake::default()).await;
    burst(&pool, 8).await;
    seconds(60).await;
    assert_eq!((pool.utilization().free_count, probe.stops()), (8, 0));
}

/// Regression: a peak was stamped with the tick that recorded it, not with when it was seen,
/// so it held the pool up to a whole cull interval longer than `max_age` (docs/design.md, "Culling").
#[tokio::test(start_paused = true)]
async fn a_peak_counts_for_max_age_from_when_it_was_last_seen() {
    let config = PoolConfig::new("p", 1, 10)
        .to_builder()
        .cull_interval(Duration::from_secs(10))
        .max_age(Duration::from_secs(15))
        .build()
        .unwrap();
    // A burst that ends at once is forgotten by the tick at 20 s (0 + 15 < 20) …
    let (pool, _) = pool_with(config.clone(), Fake::default()).await;
    burst(&pool, 8).await;
    seconds(10).await;
    assert_eq!(pool.utilization().free_count, 8, "10 s: within max_age");
    advance(ms(10_500)).await;
    assert_eq!(
        pool.utilization().free_count,
        1,
        "20.5 s: culled to init_count"
    );

    // … while one held until 9 s still counts at the tick at 20 s (9 + 15 ≥ 20).
    let (pool, _) = pool_with(config, Fake::default()).await;
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(pool.take_member(ms(1000)).await.unwrap());
    }
    seconds(9).await;
    drop(held);
    advance(ms(11_500)).await;
    assert_eq!(pool.utilization().free_count, 8, "20.5 s: seen at 9 s");
    advance(Duration::from_secs(10)).await;
    assert_eq!(pool.utilization().free_count, 1, "30.5 s: forgotten");
}
