//! Durations at every edge of the API: zero, one nanosecond, `Duration::MAX`, and deadlines
//! past what `Instant` can hold. None panics, in a debug build or a release one; zero never
//! queues, and a wait too long to reach a deadline waits as one without a deadline.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::time::Duration;

use common::*;
use pooler::{AdmissionMode, PoolConfig, Pooler, TakeError};
use proptest::prelude::*;

const EDGES: [Duration; 5] = [
    Duration::ZERO,
    Duration::from_nanos(1),
    Duration::from_secs(400 * 24 * 3600), // past the longest key, 365 days
    Duration::from_secs(u64::MAX),
    Duration::MAX,
];

/// Admission on, its queue target (50 ms by default) set as long as a key allows, so a take
/// waits as long as its own timeout says.
fn gated(max: usize) -> PoolConfig {
    PoolConfig::new("gated", max, max)
        .to_builder()
        .admission(AdmissionMode::Vegas)
        .queue_target(Duration::from_secs(365 * 24 * 3600))
        .build()
        .unwrap()
}

/// With a member free, every timeout takes it at once.
#[tokio::test(start_paused = true)]
async fn any_timeout_takes_a_free_member() {
    for config in [PoolConfig::new("p", 1, 1), gated(1)] {
        let (pool, _) = pool_with(config, Fake::default()).await;
        for t in EDGES {
            let m = pool.take_member(t).await;
            assert!(m.is_ok(), "{t:?}: {m:?}");
            drop(m);
            let n = pool.with_member(t, async |_| 7).await;
            assert_eq!(n.ok(), Some(7), "with_member {t:?}");
        }
    }
}

/// With nothing free and no room: zero refuses at once (as `try_take_member`), one
/// nanosecond times out, and the long ones wait until a member comes back.
#[tokio::test(start_paused = true)]
async fn with_nothing_free_zero_refuses_and_the_longest_waits_for_a_return() {
    for config in [PoolConfig::new("p", 1, 1), gated(1)] {
        let (pool, _) = pool_with(config, Fake::default()).await;
        let held = pool.try_take_member().unwrap();
        let e = pool.take_member(Duration::ZERO).await.unwrap_err();
        assert!(
            matches!(
                e,
                TakeError::AtCapacity { .. } | TakeError::OverLimit { .. }
            ),
            "{e}"
        );
        let e = pool.take_member(Duration::from_nanos(1)).await.unwrap_err();
        assert!(matches!(e, TakeError::Timeout { .. }), "{e}");
        let mut held = Some(held);
        for t in &EDGES[2..] {
            let waiter = spawn_take(&pool, *t);
            advance(Duration::from_secs(3600)).await;
            assert!(!waiter.is_finished(), "{t:?} still waits after an hour");
            drop(held.take());
            let m = waiter.await.unwrap();
            assert!(m.is_ok(), "{t:?}: {m:?}");
            held = m.ok();
        }
    }
}

/// `take_timeout` of zero: `take()` never queues; of the longest a key accepts: it waits.
#[tokio::test(start_paused = true)]
async fn take_with_a_zero_or_longest_take_timeout() {
    let zero = PoolConfig::new("p", 1, 1)
        .to_builder()
        .take_timeout(Duration::ZERO)
        .build()
        .unwrap();
    let (pool, _) = pool_with(zero, Fake::default()).await;
    let held = pool.take().await.unwrap();
    let e = pool.take().await.unwrap_err();
    assert!(matches!(e, TakeError::AtCapacity { .. }), "{e}");
    drop(held);

    let longest = PoolConfig::new("p", 1, 1)
        .to_builder()
        .take_timeout(pooler::time::MAX_TIME)
        .build()
        .unwrap();
    let (pool, _) = pool_with(longest, Fake::default()).await;
    let held = pool.take().await.unwrap();
    let p = pool.clone();
    let waiter = tokio::spawn(async move { p.take().await });
    advance(Duration::from_secs(3600)).await;
    assert!(!waiter.is_finished());
    drop(held);
    assert!(waiter.await.unwrap().is_ok());
}

/// A group take with each edge timeout.
#[tokio::test(start_paused = true)]
async fn a_group_take_with_any_timeout() {
    let registry = Pooler::new();
    let config = PoolConfig::new("g1", 1, 1)
        .to_builder()
        .group("g")
        .build()
        .unwrap();
    registry.new_pool(config, Fake::default()).await.unwrap();
    for t in EDGES {
        let m = registry.take_group_member::<Fake>("g", t).await;
        assert!(m.is_ok(), "{t:?}: {m:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any timeout, over the whole range, on a pool with and without admission, with a member
    /// free or none: the take ends or waits, and never panics.
    #[test]
    fn no_timeout_panics(nanos in any::<u64>(), secs in any::<u64>(), gate in any::<bool>()) {
        let t = Duration::new(secs, u32::try_from(nanos % 1_000_000_000).unwrap());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let config = if gate { gated(1) } else { PoolConfig::new("p", 1, 1) };
            let (pool, _) = pool_with(config, Fake::default()).await;
            let held = pool.take_member(t).await.unwrap();
            let waiter = spawn_take(&pool, t);
            advance(Duration::from_secs(1)).await;
            drop(held);
            let taken = waiter.await.expect("the take did not panic");
            if t.is_zero() {
                prop_assert!(taken.is_err());
            } else if t > Duration::from_secs(1) {
                prop_assert!(taken.is_ok(), "{:?}", taken);
            }
            Ok(())
        })?;
    }
}

/// A queued take is refused at its deadline, to the millisecond of tokio's timer, whether
/// the deadline is within the timer horizon (a timer armed at once) or past it (watched by
/// the housekeeping tick until near, then by a timer): the edges of the horizon and of the
/// tick included. The same for the bound admission sets (twice the queue target).
#[tokio::test(start_paused = true)]
async fn a_queued_take_ends_at_its_deadline_near_the_timer_horizon_and_far_past_it() {
    let (pool, _) = pool_with(PoolConfig::new("p", 1, 1), Fake::default()).await;
    let held = pool.try_take_member().unwrap();
    for ms in [
        1, 99, 100, 101, 299, 300, 301, 399, 400, 401, 1_000, 10_000, 3_600_000,
    ] {
        let d = Duration::from_millis(ms);
        let began = tokio::time::Instant::now();
        let e = tokio::time::timeout(d + Duration::from_secs(1), pool.take_member(d))
            .await
            .unwrap_or_else(|_| panic!("{d:?}: still waiting a second past the deadline"))
            .unwrap_err();
        let took = began.elapsed();
        assert!(matches!(e, TakeError::Timeout { .. }), "{d:?}: {e}");
        assert!(
            took >= d && took <= d + Duration::from_millis(1),
            "{d:?}: refused after {took:?}"
        );
    }
    drop(held);
    for target_ms in [100, 150, 1_000] {
        let target = Duration::from_millis(target_ms);
        let config = PoolConfig::new("g", 1, 1)
            .to_builder()
            .admission(AdmissionMode::Vegas)
            .queue_target(target)
            .build()
            .unwrap();
        let (pool, _) = pool_with(config, Fake::default()).await;
        let held = pool.try_take_member().unwrap();
        let began = tokio::time::Instant::now();
        let e = tokio::time::timeout(target * 2 + Duration::from_secs(1), pool.take())
            .await
            .unwrap_or_else(|_| panic!("{target:?}: still waiting a second past the bound"))
            .unwrap_err();
        let took = began.elapsed();
        assert!(matches!(e, TakeError::Stale { .. }), "{target:?}: {e}");
        assert!(
            took >= target * 2 && took <= target * 2 + Duration::from_millis(1),
            "{target:?}: refused after {took:?}"
        );
        drop(held);
    }
}
