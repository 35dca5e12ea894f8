//! Faults in the tasks a pool supervises: driver tasks that panic, a runtime that is gone,
//! recycles that hang through a close, members that are broken from birth.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use common::*;
use pooler::{Member, Pool, PoolConfig, Shutdown, TakeError};

/// Regression: a free member whose driver task panicked stayed free and was handed out.
#[tokio::test(start_paused = true)]
async fn a_free_member_whose_driver_panics_is_removed_and_replaced() {
    quiet_planned_panics();
    let (pool, probe) = pool(1, 1).await;
    let id = pool.stats()[0].id;
    probe.panic_driver(id);
    settle().await;
    let stats = pool.stats();
    assert_eq!(stats.len(), 1, "{stats:?}");
    assert_ne!(stats[0].id, id, "the member with the dead driver is gone");
    assert_eq!(counts(&pool), (0, 1, 0, 0, 0));
    assert_ne!(Member::id(&pool.try_take_member().unwrap()), id);
}

/// Regression: an in-use member whose driver task panicked went back to the free list.
#[tokio::test(start_paused = true)]
async fn an_in_use_member_whose_driver_panics_is_replaced_on_return() {
    quiet_planned_panics();
    let (pool, probe) = pool(1, 1).await;
    let m = pool.try_take_member().unwrap();
    let id = Member::id(&m);
    probe.panic_driver(id);
    settle().await;
    drop(m);
    settle().await;
    assert_eq!(counts(&pool), (0, 1, 0, 0, 0));
    assert_ne!(
        Member::id(&pool.try_take_member().unwrap()),
        id,
        "the member with the dead driver was not reused"
    );
    assert_eq!(probe.stops(), 1);
}

/// A member that `is_broken` rejects as soon as it has started never reaches a waiter: it is
/// a failed start, and the waiter is served by the next, healthy one.
#[tokio::test(start_paused = true)]
async fn a_member_broken_at_start_never_reaches_a_waiter() {
    let (pool, probe) = pool(0, 1).await;
    probe.born_broken.store(true, SeqCst);
    let waiter = spawn_take(&pool, ms(5_000));
    settle().await;
    assert_eq!(probe.attempts(), 1);
    probe.born_broken.store(false, SeqCst);
    for _ in 0..10 {
        advance(ms(50)).await;
    }
    let m = waiter.await.unwrap().unwrap();
    assert!(
        !probe.is_broken(Member::id(&m)),
        "a broken member was handed out"
    );
    assert_eq!(probe.attempts(), 2, "the broken start was retried");
}

/// Regression: a pool used from a second runtime after its own was shut down lost every slot
/// to starts that never ran, and takes timed out with no word of why.
#[test]
fn a_pool_whose_runtime_is_gone_says_so_and_loses_no_slot() {
    let first = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (pool, probe) = first.block_on(pool(1, 2));
    drop(first);
    let second = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    second.block_on(async {
        let t = tokio::time::Instant::now();
        let e = pool.take_member(Duration::from_secs(5)).await.map(drop);
        assert!(
            matches!(e, Err(TakeError::RuntimeGone { .. })),
            "{e:?} after {:?}",
            t.elapsed()
        );
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "it did not wait for the timeout"
        );
        let u = pool.utilization();
        assert_eq!(
            (u.starting_count, u.stopping_count, u.in_use_count),
            (0, 0, 0),
            "no slot is held by a task that will never run: {u:?}"
        );
        pool.close(Shutdown::Immediate).await;
        assert_eq!(pool.live_tasks(), 0);
    });
    assert_eq!(probe.alive(), 0, "every member value was dropped");
}

/// Regression: an immediate close waited for a hung recycle (up to member_start_timeout).
#[tokio::test(start_paused = true)]
async fn an_immediate_close_cancels_a_recycle_in_flight() {
    let config = PoolConfig::new("p", 1, 1)
        .to_builder()
        .member_start_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let (pool, probe) = pool_with(config, Fake::default()).await;
    probe.recycle_on.store(true, SeqCst);
    probe.set_recycle(Step::Never);
    drop(pool.try_take_member().unwrap());
    settle().await;
    assert_eq!(probe.recycles.load(SeqCst), 1);
    let t = tokio::time::Instant::now();
    pool.close(Shutdown::Immediate).await;
    assert!(t.elapsed() < ms(100), "close waited {:?}", t.elapsed());
    settle().await;
    assert_eq!((pool.live_tasks(), probe.alive()), (0, 0));
}

/// Starts and stops spawned for a pool hold their slot through a guard made before the
/// spawn, so one dropped before its first poll gives the slot back.
#[tokio::test(start_paused = true)]
async fn a_pool_closed_while_members_start_and_stop_holds_no_slot() {
    let fake = Fake::default();
    fake.probe.set_stop(Step::Never);
    let config = PoolConfig::new("p", 2, 4)
        .to_builder()
        .member_shutdown(Duration::from_secs(3600))
        .build()
        .unwrap();
    let (pool, probe) = pool_with(config, fake).await;
    probe.set_start(Step::Never);
    Member::fail(pool.try_take_member().unwrap());
    assert_eq!(counts(&pool), (0, 1, 1, 1, 0));
    let closing = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.close(Shutdown::Immediate).await })
    };
    advance(Duration::from_secs(3600)).await;
    closing.await.unwrap();
    assert_eq!(counts(&pool), (0, 0, 0, 0, 0));
    assert_eq!((pool.live_tasks(), probe.alive()), (0, 0));
    let _: Pool<Fake> = pool;
}
