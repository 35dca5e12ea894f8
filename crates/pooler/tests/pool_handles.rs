//! Starting a pool (in a runtime or not, waiting or lazily) and the handles users keep.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use common::*;
use pooler::{ConfigError, Pool, PoolConfig, Shutdown};

/// Outside a tokio runtime, both ways of starting a pool say so with a typed error naming the
/// pool, instead of panicking.
#[test]
fn starting_outside_a_runtime_is_a_typed_error() {
    let lazy = Pool::start_lazy(PoolConfig::new("outside", 1, 2), Fake::default());
    assert!(
        matches!(&lazy, Err(ConfigError::NoRuntime { pool }) if pool == "outside"),
        "{lazy:?}"
    );
    let mut start = pin!(Pool::start(
        PoolConfig::new("outside", 1, 2),
        Fake::default()
    ));
    let polled = start.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    let Poll::Ready(Err(e)) = polled else {
        panic!("the first poll answers at once")
    };
    assert!(matches!(&e, ConfigError::NoRuntime { pool } if pool == "outside"));
    assert!(e.to_string().contains("no tokio runtime"), "{e}");
    // A bad config is still reported as such first.
    let bad = Pool::start_lazy(PoolConfig::new("bad", 3, 2), Fake::default());
    assert!(matches!(bad, Err(ConfigError::InitExceedsMax { .. })));
}

/// `start_lazy` returns at once with the initial starts under way; a take waits for them.
#[tokio::test(start_paused = true)]
async fn a_lazy_pool_returns_at_once_and_starts_in_the_background() {
    let fake = Fake::default();
    let probe = fake.probe.clone();
    probe.set_start(Step::Slow(ms(500)));
    let pool = Pool::start_lazy(PoolConfig::new("lazy", 2, 4), fake).unwrap();
    assert_eq!(
        counts(&pool),
        (0, 0, 2, 0, 0),
        "both starts under way, none done"
    );
    let member = pool.take_member(ms(2_000)).await.unwrap();
    drop(member);
    settle().await;
    let (in_use, free, ..) = counts(&pool);
    // The take that found nothing free may have started a batch of its own as well.
    assert!(in_use == 0 && free >= 2, "{:?}", counts(&pool));
    pool.close(Shutdown::Graceful).await;
}

/// A weak handle reaches the pool while a `Pool` holds it, and does not keep it open;
/// `is_closed` says when a close has begun.
#[tokio::test(start_paused = true)]
async fn a_weak_handle_does_not_keep_the_pool_and_is_closed_says_when_it_closes() {
    let (pool, probe) = pool(2, 2).await;
    let weak = pool.downgrade();
    assert!(!pool.is_closed());
    let again = weak.upgrade().expect("held by `pool`");
    assert_eq!(again.name(), "test");
    drop(again);
    drop(pool);
    assert!(
        weak.upgrade().is_none(),
        "no Pool left: the weak handle does not hold it"
    );
    settle().await;
    assert_eq!(
        probe.alive(),
        0,
        "the pool closed when its last handle went"
    );

    let (pool, _) = common::pool(1, 1).await;
    let held = pool.try_take_member().unwrap();
    let closing = pool.clone();
    let closer = tokio::spawn(async move { closing.close(Shutdown::Graceful).await });
    settle().await;
    assert!(pool.is_closed(), "closing: takes fail from now on");
    drop(held);
    closer.await.unwrap();
    assert!(pool.is_closed());
}

/// A detached member leaves the pool for good: never stopped by it, its place taken by a new
/// member, and nothing counted against the pool any more; a close does not wait for it.
#[tokio::test(start_paused = true)]
async fn a_detached_member_is_the_callers_and_its_place_is_filled() {
    let (pool, probe) = pool_with(PoolConfig::new("d", 1, 1), Fake::default()).await;
    let member = pool.try_take_member().unwrap();
    let id = pooler::Member::id(&member);
    let kept = pooler::Member::detach(member);
    assert_eq!(kept.id, id, "the value itself comes out");
    settle().await;
    let u = pool.utilization();
    assert_eq!(
        (u.in_use_count, u.free_count),
        (0, 1),
        "a replacement started"
    );
    let next = pool.try_take_member().unwrap();
    assert_ne!(pooler::Member::id(&next), id);
    drop(next);
    assert_eq!(probe.stops(), 0, "the pool never stops what it gave away");
    pool.close(Shutdown::Graceful).await;
    assert_eq!(probe.stops(), 1, "the close stopped the replacement only");
    drop(kept);
}

/// `health` and `ready` follow the pool: serving, failing to start with no member (not
/// ready), failing with members still live (ready), and closed.
#[tokio::test(start_paused = true)]
async fn health_and_readiness_follow_the_pool() {
    let fake = Fake::default();
    let (pool, probe) = pool_with(
        PoolConfig::new("h", 1, 2)
            .to_builder()
            .backoff_jitter(false)
            .build()
            .unwrap(),
        fake,
    )
    .await;
    assert!(matches!(pool.health(), pooler::Health::Serving));
    assert!(pool.ready());

    // The member dies and no start succeeds: failing, and nothing left to serve.
    probe.set_start(Step::Err);
    let id = pooler::Member::id(&pool.try_take_member().unwrap());
    probe.crash(id);
    settle().await;
    advance(ms(50)).await;
    match pool.health() {
        pooler::Health::Failing { live, .. } => assert_eq!(live, 0),
        other => panic!("{other:?}"),
    }
    assert!(!pool.ready());

    // Starts succeed again: serving.
    probe.set_start(Step::Ok);
    advance(std::time::Duration::from_secs(11)).await;
    assert!(
        matches!(pool.health(), pooler::Health::Serving),
        "{:?}",
        pool.health()
    );
    assert!(pool.ready());

    pool.close(Shutdown::Immediate).await;
    assert!(matches!(pool.health(), pooler::Health::Closed));
    assert!(!pool.ready());
}
