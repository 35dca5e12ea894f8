//! max_lifetime with jitter: recycling by timer, at take and at return.

mod common;

use std::time::Duration;

use common::*;
use pooler::{Member, MemberStatus, PoolConfig};
use tokio::time::Instant;

fn config(init: usize, max: usize, life: u64, jitter: u64) -> PoolConfig {
    PoolConfig::new("p", init, max)
        .to_builder()
        .max_lifetime(Duration::from_secs(life))
        .max_lifetime_jitter(Duration::from_secs(jitter))
        .cull_interval(Duration::ZERO)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn idle_members_are_recycled_at_their_lifetime_and_replaced() {
    let t0 = Instant::now();
    let (pool, probe) = pool_with(config(2, 2, 60, 0), Fake::default()).await;
    let stats = pool.stats();
    assert!(
        stats
            .iter()
            .all(|s| s.expires_at == Some(t0 + Duration::from_secs(60)))
    );
    advance(Duration::from_secs(59)).await;
    assert_eq!(probe.stops(), 0);
    advance(Duration::from_secs(1)).await;
    assert_eq!(probe.stops(), 2);
    let ids: Vec<_> = pool.stats().iter().map(|s| s.id).collect();
    assert_eq!(ids, [3, 4], "both replaced");
    assert_eq!(counts(&pool), (0, 2, 0, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn an_expired_member_is_never_handed_out() {
    let (pool, _) = pool_with(config(1, 1, 60, 0), Fake::default()).await;
    // Jump past the expiry and take before the lifetime timer has had a chance to run.
    tokio::time::advance(Duration::from_secs(61)).await;
    let now = Instant::now();
    let m = pool.take_member(ms(1000)).await.unwrap();
    assert_eq!(
        Member::id(&m),
        2,
        "the expired member 1 was evicted, a new one served"
    );
    let row = pool.stats().into_iter().find(|s| s.id == 2).unwrap();
    assert!(row.expires_at.unwrap() > now);
}

/// A member that expired in use can come back before the pool's coarse time has caught up
/// (the return then reads no clock): it goes back free, and the next take's exact check
/// still retires it instead of handing it out.
#[tokio::test(start_paused = true)]
async fn a_member_that_expired_in_use_and_came_back_unnoticed_is_never_handed_out() {
    let (pool, probe) = pool_with(config(1, 1, 60, 0), Fake::default()).await;
    let m = pool.try_take_member().unwrap();
    // Past its expiry before the housekeeping tick or the lifetime timer has run.
    tokio::time::advance(Duration::from_secs(61)).await;
    drop(m);
    let m = pool.take_member(ms(1000)).await.unwrap();
    assert_eq!(
        Member::id(&m),
        2,
        "member 1 retired at the take, a new one served"
    );
    settle().await;
    assert_eq!(probe.stops(), 1);
}

#[tokio::test(start_paused = true)]
async fn members_in_use_are_never_taken_away_and_are_recycled_at_return() {
    let (pool, probe) = pool_with(config(1, 1, 60, 0), Fake::default()).await;
    let mut m = pool.try_take_member().unwrap();
    advance(Duration::from_secs(90)).await;
    m.uses += 1; // still ours, past its lifetime
    assert_eq!(probe.stops(), 0);
    assert_eq!(pool.stats()[0].status, MemberStatus::InUse);
    drop(m);
    settle().await;
    assert_eq!(probe.stops(), 1);
    assert_eq!(pool.stats().iter().map(|s| s.id).collect::<Vec<_>>(), [2]);
}

#[tokio::test(start_paused = true)]
async fn jitter_spreads_the_expiry_of_members_started_together() {
    let (pool, probe) = pool_with(config(100, 100, 60, 10), Fake::default()).await;
    let t0 = Instant::now();
    let expiries: Vec<_> = pool
        .stats()
        .iter()
        .map(|s| s.expires_at.unwrap() - t0)
        .collect();
    assert!(
        expiries
            .iter()
            .all(|e| *e >= Duration::from_secs(50) && *e <= Duration::from_secs(70))
    );
    // Recycled second by second over the 20 s window, never all at once.
    advance(Duration::from_secs(49)).await;
    assert_eq!(probe.stops(), 0);
    let mut per_second = Vec::new();
    for _ in 0..21 {
        let before = probe.stops();
        advance(Duration::from_secs(1)).await;
        per_second.push(probe.stops() - before);
    }
    assert_eq!(
        per_second.iter().sum::<usize>(),
        100,
        "every original member recycled once"
    );
    let busiest = *per_second.iter().max().unwrap();
    assert!(
        busiest <= 20,
        "{busiest} members recycled in one second: {per_second:?}"
    );
    assert!(
        per_second.iter().filter(|n| **n > 0).count() >= 15,
        "{per_second:?}"
    );
    assert_eq!(pool.utilization().free_count, 100, "and replaced");
}

#[tokio::test(start_paused = true)]
async fn without_max_lifetime_nothing_expires() {
    let (pool, probe) = pool(2, 2).await;
    assert!(pool.stats().iter().all(|s| s.expires_at.is_none()));
    advance(Duration::from_secs(365 * 24 * 3600)).await;
    assert_eq!(probe.stops(), 0);
}

/// Make before break: with `max_lifetime_overlap`, members whose lifetimes end — in use or
/// free — have their successors started and ready first, so takes right after the expiry are
/// served at once (and the pool ends with `init_count` members, no more); without it they
/// find nothing free while the replacements connect.
#[tokio::test(start_paused = true)]
async fn with_an_overlap_no_take_waits_for_a_connection_at_expiry() {
    for overlap in [Some(Duration::from_secs(1)), None] {
        let fake = Fake::default();
        fake.probe.set_start(Step::Slow(ms(200)));
        let config = config(2, 4, 10, 0)
            .to_builder()
            .max_lifetime_overlap(overlap)
            .build()
            .unwrap();
        let (pool, probe) = pool_with(config, fake).await;
        // One member held through its expiry, one free.
        let held = pool.try_take_member().unwrap();
        // Step through the second before the expiry as time would pass, then past it.
        for _ in 0..101 {
            advance(ms(100)).await;
        }
        drop(held);
        settle().await;
        let first = pool.try_take_member();
        let second = pool.try_take_member();
        match overlap {
            Some(_) => {
                assert!(first.is_ok() && second.is_ok(), "{first:?} {second:?}");
                assert_eq!(probe.stops(), 2, "both old members retired");
            }
            None => assert!(
                first.is_err() || second.is_err(),
                "without an overlap the replacements are still connecting"
            ),
        }
        drop((first, second));
        advance(Duration::from_secs(1)).await;
        if overlap.is_some() {
            let u = pool.utilization();
            assert_eq!(
                (u.free_count, u.in_use_count, u.starting_count),
                (2, 0, 0),
                "back to init_count, nothing extra"
            );
        }
    }
}

#[test]
fn an_overlap_needs_a_longer_lifetime() {
    let refused = |c: PoolConfig| match c.validate() {
        Err(pooler::ConfigError::InvalidValue { key, .. }) => key == "max_lifetime_overlap",
        _ => false,
    };
    let mut c = PoolConfig::new("p", 1, 2);
    c.max_lifetime_overlap = Some(Duration::from_secs(1));
    assert!(refused(c.clone()), "no lifetime");
    c.max_lifetime = Some(Duration::from_secs(1));
    assert!(refused(c.clone()), "not shorter than the lifetime");
    c.max_lifetime = Some(Duration::from_secs(2));
    assert!(c.validate().is_ok());
}

/// A lifetime too short to serve (a typo of units, `"2ns"`) is refused, naming the key and
/// the floor, instead of a pool that reconnects tens of thousands of times a second.
#[test]
fn a_lifetime_too_short_to_serve_is_refused() {
    let e = PoolConfig::new("storm", 1, 4)
        .to_builder()
        .max_lifetime(Duration::from_nanos(2))
        .build()
        .unwrap_err();
    assert!(
        matches!(&e, pooler::ConfigError::InvalidValue { key, reason, .. }
            if key == "max_lifetime" && reason.contains("100ms")),
        "{e}"
    );
    PoolConfig::new("ok", 1, 4)
        .to_builder()
        .max_lifetime(pooler::MIN_LIFETIME)
        .build()
        .unwrap();
}
