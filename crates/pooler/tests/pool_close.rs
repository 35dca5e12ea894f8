//! Closing: graceful and immediate, and no task of the pool outlives it.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use common::*;
use pooler::{PoolConfig, Shutdown, TakeError};
use tokio::runtime::Handle;

fn alive_tasks() -> usize {
    Handle::current().metrics().num_alive_tasks()
}

#[tokio::test(start_paused = true)]
async fn graceful_close_waits_for_members_in_use_and_leaves_no_task() {
    let before = alive_tasks();
    let (pool, probe) = pool(3, 4).await;
    assert_eq!(
        (alive_tasks(), pool.live_tasks()),
        (before + 4, 4),
        "one driver task per member, and the housekeeping task"
    );
    let held = pool.try_take_member().unwrap();

    let p = pool.clone();
    let closer = tokio::spawn(async move { p.close(Shutdown::Graceful).await });
    settle().await;
    assert!(matches!(
        pool.try_take_member(),
        Err(TakeError::Closed { .. })
    ));
    assert_eq!(probe.stops(), 2, "free members are stopped at once");
    assert!(!closer.is_finished(), "waits for the member in use");
    assert_eq!(counts(&pool), (1, 0, 0, 0, 0));

    drop(held);
    closer.await.unwrap();
    assert_eq!(counts(&pool), (0, 0, 0, 0, 0));
    assert_eq!(
        (probe.stops(), probe.alive()),
        (3, 0),
        "every member went through stop"
    );
    assert_eq!(pool.live_tasks(), 0);
    settle().await;
    assert_eq!(alive_tasks(), before, "no task of the pool outlives it");
}

#[tokio::test(start_paused = true)]
async fn close_refuses_queued_takers() {
    let (pool, _) = pool(1, 1).await;
    let held = pool.try_take_member().unwrap();
    let queued = spawn_take(&pool, ms(10_000));
    settle().await;
    let p = pool.clone();
    let closer = tokio::spawn(async move { p.close(Shutdown::Graceful).await });
    let e = queued.await.unwrap().unwrap_err();
    assert!(matches!(e, TakeError::Closed { .. }), "{e}");
    assert_eq!(e.to_string(), "pool `test`: closed");
    drop(held);
    closer.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn immediate_close_does_not_wait_for_members_in_use() {
    let before = alive_tasks();
    let (pool, probe) = pool(2, 2).await;
    let held = pool.try_take_member().unwrap();
    pool.close(Shutdown::Immediate).await;
    assert_eq!(pool.live_tasks(), 0);
    assert_eq!(probe.stops(), 1, "the free member was stopped");
    assert_eq!(probe.drivers(), 0, "the in-use member's driver ended too");
    drop(held);
    assert_eq!(
        probe.alive(),
        0,
        "returned after the close: dropped in place"
    );
    assert_eq!(probe.stops(), 1);
    settle().await;
    assert_eq!(alive_tasks(), before);
}

#[tokio::test(start_paused = true)]
async fn close_cancels_starts_in_progress() {
    let before = alive_tasks();
    let fake = Fake::default();
    let (pool, probe) = pool_with(PoolConfig::new("p", 0, 5), fake).await;
    probe.set_start(Step::Never);
    assert!(pool.try_take_member().is_err());
    assert_eq!(counts(&pool).2, 1);
    pool.close(Shutdown::Graceful).await;
    assert_eq!(counts(&pool), (0, 0, 0, 0, 0));
    settle().await;
    assert_eq!(alive_tasks(), before);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_last_handle_closes_the_pool() {
    let before = alive_tasks();
    let (pool, probe) = pool(3, 3).await;
    let clone = pool.clone();
    drop(pool);
    settle().await;
    assert_eq!(probe.alive(), 3, "a clone keeps it open");
    drop(clone);
    settle().await;
    assert_eq!((probe.alive(), probe.stops()), (0, 3));
    assert_eq!(alive_tasks(), before);
}

#[tokio::test(start_paused = true)]
async fn closing_twice_is_harmless() {
    let (pool, _) = pool(1, 1).await;
    pool.close(Shutdown::Graceful).await;
    pool.close(Shutdown::Immediate).await;
    assert!(matches!(
        pool.take_member(ms(10)).await,
        Err(TakeError::Closed { .. })
    ));
}

/// A graceful close waiting for a member in use, then an immediate close that finishes, then
/// the late return: the member leaves the in-use count and the graceful close returns.
#[tokio::test(start_paused = true)]
async fn a_late_return_after_an_immediate_close_ends_a_waiting_graceful_close() {
    for fate in ["good order", "failed"] {
        let before = alive_tasks();
        let (pool, probe) = pool(2, 2).await;
        let held = pool.try_take_member().unwrap();
        let p = pool.clone();
        let graceful = tokio::spawn(async move { p.close(Shutdown::Graceful).await });
        settle().await;
        assert!(
            !graceful.is_finished(),
            "{fate}: waits for the member in use"
        );
        pool.close(Shutdown::Immediate).await;
        if fate == "failed" {
            pooler::Member::fail(held);
        } else {
            drop(held);
        }
        assert_eq!(
            counts(&pool),
            (0, 0, 0, 0, 0),
            "{fate}: nothing counts in use"
        );
        tokio::time::timeout(ms(1_000), graceful)
            .await
            .unwrap_or_else(|_| panic!("{fate}: the graceful close never returned"))
            .unwrap();
        assert_eq!(probe.alive(), 0, "{fate}");
        settle().await;
        assert_eq!(alive_tasks(), before, "{fate}");
    }
}
