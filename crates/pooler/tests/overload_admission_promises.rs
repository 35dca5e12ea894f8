//! A take over the admission limit waits in the pool's one queue and keeps every promise of
//! it: a close serves it `Closed`, a closed pool answers `Closed` whatever its limit,
//! `queue_max` counts it with the takes waiting for a member, and a take that gives up hands
//! its place on. A reconfigure of the admission rules reaches the takes already waiting.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::time::Duration;

use common::*;
use pooler::{AdmissionMode, PoolConfig, Shutdown, TakeError};

fn config(mode: AdmissionMode, max: usize, queue_max: usize) -> PoolConfig {
    PoolConfig::new("gate", max, max)
        .to_builder()
        .admission(mode)
        .queue_max(queue_max)
        .build()
        .unwrap()
}

const MODES: [AdmissionMode; 2] = [AdmissionMode::Vegas, AdmissionMode::Gradient];

/// Takes waiting over the limit (the limit is reached) are served `Closed` by either close,
/// at once: `take_member` with a deadline and `take` without one.
#[tokio::test(start_paused = true)]
async fn a_close_serves_the_takes_waiting_over_the_limit() {
    for mode in MODES {
        for how in [Shutdown::Graceful, Shutdown::Immediate] {
            let (pool, _) = pool_with(config(mode, 1, 50), Fake::default()).await;
            let held = pool.try_take_member().unwrap();
            let timed = spawn_take(&pool, Duration::from_secs(10));
            let p = pool.clone();
            let untimed = tokio::spawn(async move { p.take().await });
            settle().await;
            assert!(!timed.is_finished() && !untimed.is_finished());
            let closing = {
                let pool = pool.clone();
                tokio::spawn(async move { pool.close(how).await })
            };
            settle().await;
            for waiter in [timed, untimed] {
                assert!(waiter.is_finished(), "{mode:?} {how:?}: still waiting");
                let e = waiter.await.unwrap().unwrap_err();
                assert!(
                    matches!(e, TakeError::Closed { .. }),
                    "{mode:?} {how:?}: {e}"
                );
            }
            drop(held);
            closing.await.unwrap();
        }
    }
}

/// A closed pool at its admission limit says `Closed`, at once, to every kind of take.
#[tokio::test(start_paused = true)]
async fn a_closed_pool_at_its_limit_answers_closed() {
    for mode in MODES {
        let (pool, _) = pool_with(config(mode, 1, 50), Fake::default()).await;
        let held = pool.try_take_member().unwrap();
        let closing = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.close(Shutdown::Graceful).await })
        };
        settle().await;
        let e = pool.try_take_member().unwrap_err();
        assert!(matches!(e, TakeError::Closed { .. }), "{mode:?} try: {e}");
        let e = pool.take_member(Duration::ZERO).await.unwrap_err();
        assert!(matches!(e, TakeError::Closed { .. }), "{mode:?} zero: {e}");
        let at = tokio::time::Instant::now();
        let e = pool.take_member(Duration::from_secs(10)).await.unwrap_err();
        assert!(matches!(e, TakeError::Closed { .. }), "{mode:?} timed: {e}");
        assert_eq!(at.elapsed(), Duration::ZERO, "{mode:?}: refused at once");
        let e = pool.take().await.unwrap_err();
        assert!(matches!(e, TakeError::Closed { .. }), "{mode:?} take: {e}");
        drop(held);
        closing.await.unwrap();
    }
}

/// `queue_max = 5`, 100 takes over a held member: with or without admission, 5 wait and 95
/// are refused with `QueueFull` at once.
#[tokio::test(start_paused = true)]
async fn queue_max_bounds_the_takes_waiting_over_the_limit() {
    for mode in [
        AdmissionMode::Off,
        AdmissionMode::Vegas,
        AdmissionMode::Gradient,
    ] {
        let (pool, _) = pool_with(config(mode, 1, 5), Fake::default()).await;
        let held = pool.try_take_member().unwrap();
        let takes: Vec<_> = (0..100)
            .map(|_| spawn_take(&pool, Duration::from_secs(10)))
            .collect();
        settle().await;
        let mut refused = 0;
        let mut waiting = Vec::new();
        for take in takes {
            if take.is_finished() {
                let e = take.await.unwrap().unwrap_err();
                assert!(
                    matches!(e, TakeError::QueueFull { queue_max: 5, .. }),
                    "{mode:?}: {e}"
                );
                refused += 1;
            } else {
                waiting.push(take);
            }
        }
        assert_eq!((refused, waiting.len()), (95, 5), "{mode:?}");
        // The five are served in turn as the member comes back.
        drop(held);
        for take in waiting {
            drop(take.await.unwrap().expect("served"));
        }
    }
}

/// With `queue_max = 0` a take over the limit is refused with the reason it would have
/// waited for, at once.
#[tokio::test(start_paused = true)]
async fn no_queue_refuses_over_the_limit_at_once() {
    let (pool, _) = pool_with(config(AdmissionMode::Vegas, 1, 0), Fake::default()).await;
    let _held = pool.try_take_member().unwrap();
    let e = pool.take_member(Duration::from_secs(10)).await.unwrap_err();
    assert!(matches!(e, TakeError::OverLimit { .. }), "{e}");
}

/// A take that gives up in the queue (dropped, or timed out) leaves no place behind: the
/// next take after it is served by the next return.
#[tokio::test(start_paused = true)]
async fn a_take_that_gives_up_over_the_limit_leaves_no_place() {
    let (pool, _) = pool_with(config(AdmissionMode::Vegas, 1, 2), Fake::default()).await;
    let held = pool.try_take_member().unwrap();
    let dropped = spawn_take(&pool, Duration::from_secs(10));
    // Under the 50 ms target admission brings: a budget that short times out (a longer one
    // is refused as stale first, which leaves its place as well).
    let timed_out = spawn_take(&pool, ms(40));
    settle().await;
    dropped.abort();
    advance(ms(40)).await;
    let e = timed_out.await.unwrap().unwrap_err();
    assert!(matches!(e, TakeError::Timeout { .. }), "{e}");
    // Both places are free again: two more may wait.
    let a = spawn_take(&pool, Duration::from_secs(10));
    let b = spawn_take(&pool, Duration::from_secs(10));
    settle().await;
    assert!(!a.is_finished() && !b.is_finished());
    drop(held);
    let a = a.await.unwrap().expect("served first");
    drop(a);
    drop(b.await.unwrap().expect("served next"));
    assert_eq!(pool.admission().unwrap().admitted, 0);
}

/// A reconfigure that turns admission on gives the takes already waiting the bound a take
/// that queued under it has: twice the queue target, counted from the reconfigure for a take
/// that read no clock when it queued. Without it, a `take()` queued before would wait for
/// ever at the back of a queue served newest first.
#[tokio::test(start_paused = true)]
async fn admission_turned_on_bounds_the_takes_already_waiting() {
    for mode in MODES {
        let plain = PoolConfig::new("gate", 1, 1);
        let (pool, _) = pool_with(plain.clone(), Fake::default()).await;
        let held = pool.try_take_member().unwrap();
        let p = pool.clone();
        let untimed = tokio::spawn(async move { p.take().await });
        let timed = spawn_take(&pool, Duration::from_secs(10));
        settle().await;
        let target = Duration::from_millis(10);
        let admitted = plain
            .to_builder()
            .admission(mode)
            .queue_target(target)
            .build()
            .unwrap();
        pool.reconfigure(admitted).unwrap();
        settle().await;
        assert!(!untimed.is_finished() && !timed.is_finished());
        tokio::time::advance(target * 2 + Duration::from_millis(1)).await;
        settle().await;
        for waiter in [untimed, timed] {
            assert!(
                waiter.is_finished(),
                "{mode:?}: still waiting past twice the target"
            );
            let e = waiter.await.unwrap().unwrap_err();
            assert!(matches!(e, TakeError::Stale { .. }), "{mode:?}: {e}");
        }
        drop(held);
        pool.close(Shutdown::Immediate).await;
    }
}

/// The other way: a reconfigure that turns admission off lifts the bound from the takes
/// waiting under it, and they wait as any take does — for their own deadline, or a member.
#[tokio::test(start_paused = true)]
async fn admission_turned_off_lifts_the_bound_from_the_takes_waiting() {
    for mode in MODES {
        let target = Duration::from_millis(10);
        let admitted = PoolConfig::new("gate", 1, 1)
            .to_builder()
            .admission(mode)
            .queue_target(target)
            .build()
            .unwrap();
        let (pool, _) = pool_with(admitted.clone(), Fake::default()).await;
        let held = pool.try_take_member().unwrap();
        let p = pool.clone();
        let untimed = tokio::spawn(async move { p.take().await });
        settle().await;
        let mut plain = admitted.clone();
        plain.admission = AdmissionMode::Off;
        plain.queue_target = None;
        pool.reconfigure(plain).unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        settle().await;
        assert!(
            !untimed.is_finished(),
            "{mode:?}: refused with admission off"
        );
        drop(held);
        settle().await;
        assert!(
            untimed.await.unwrap().is_ok(),
            "{mode:?}: served the member"
        );
        pool.close(Shutdown::Immediate).await;
    }
}

/// A reconfigure that moves the queue target moves the bound of the takes already waiting:
/// queued under a target of a second, a take is refused twice the new target of 10 ms after
/// it queued.
#[tokio::test(start_paused = true)]
async fn a_new_queue_target_rebounds_the_takes_waiting() {
    for mode in MODES {
        let config = |target| {
            PoolConfig::new("gate", 1, 1)
                .to_builder()
                .admission(mode)
                .queue_target(target)
                .build()
                .unwrap()
        };
        let (pool, _) = pool_with(config(Duration::from_secs(1)), Fake::default()).await;
        let held = pool.try_take_member().unwrap();
        let p = pool.clone();
        let untimed = tokio::spawn(async move { p.take().await });
        settle().await;
        pool.reconfigure(config(Duration::from_millis(10))).unwrap();
        tokio::time::advance(Duration::from_millis(21)).await;
        settle().await;
        assert!(untimed.is_finished(), "{mode:?}: still waiting");
        let e = untimed.await.unwrap().unwrap_err();
        assert!(matches!(e, TakeError::Stale { .. }), "{mode:?}: {e}");
        drop(held);
        pool.close(Shutdown::Immediate).await;
    }
}
