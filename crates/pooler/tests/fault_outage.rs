//! Outages and blips: how failed starts back off, and when a take fails fast (docs/design.md, "Failing starts").
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::time::Duration;

use common::*;
use pooler::{PoolConfig, TakeError};

fn config(init: usize, max: usize) -> PoolConfig {
    PoolConfig::new("p", init, max)
        .to_builder()
        .queue_max(20)
        .backoff_jitter(false)
        .build()
        .unwrap()
}

/// Regression: ten starts that failed together were ten backoff steps, so the next attempt
/// came ~10 s later and takers queued for 5 s all timed out although the backend was back
/// after 50 ms.
#[tokio::test(start_paused = true)]
async fn starts_failing_together_are_one_backoff_step() {
    let fake = Fake::default();
    fake.probe.set_start(Step::FailAfter(ms(50)));
    let t0 = tokio::time::Instant::now();
    let (pool, probe) = pool_with(config(10, 10), fake).await;
    assert_eq!((t0.elapsed(), probe.attempts()), (ms(50), 10));
    probe.set_start(Step::Ok);
    let takers: Vec<_> = (0..10)
        .map(|_| spawn_take(&pool, Duration::from_secs(5)))
        .collect();
    advance(ms(100)).await;
    for t in takers {
        assert!(
            t.await.unwrap().is_ok(),
            "served within the first backoff step"
        );
    }
    assert_eq!(t0.elapsed(), ms(150));
    assert_eq!(
        pool.utilization().in_use_count + pool.utilization().free_count,
        10
    );
}

/// Regression: after one failed start, with another start in flight, a new take got
/// `Unavailable` at once although the start in flight served takers 20 ms later.
#[tokio::test(start_paused = true)]
async fn a_take_queues_while_a_start_is_in_flight() {
    let (pool, probe) = pool_with(config(0, 3), Fake::default()).await;
    probe.script_starts([Step::Slow(ms(20)), Step::Err]);
    let a = spawn_take(&pool, Duration::from_secs(1));
    settle().await;
    let b = spawn_take(&pool, Duration::from_secs(1));
    settle().await;
    assert_eq!(probe.attempts(), 2, "the second start failed at once");
    let t = tokio::time::Instant::now();
    let c = spawn_take(&pool, Duration::from_secs(1));
    advance(ms(20)).await;
    for w in [a, b, c] {
        assert!(w.await.unwrap().is_ok());
    }
    assert!(t.elapsed() <= ms(120), "{:?}", t.elapsed());
}

/// Regression: one old failure (and no member needed since) made every later take fail
/// with that error, though the backend had long been healthy: no retry was ever scheduled.
#[tokio::test(start_paused = true)]
async fn an_old_failure_does_not_refuse_takes_forever() {
    let (pool, probe) = pool_with(config(0, 1), Fake::default()).await;
    probe.script_starts([Step::Err]);
    assert!(matches!(
        pool.try_take_member(),
        Err(TakeError::AllInUse { .. })
    ));
    settle().await;
    assert_eq!(probe.attempts(), 1);
    advance(Duration::from_secs(2)).await;
    let m = pool.take_member(Duration::from_secs(2)).await;
    assert!(m.is_ok(), "{:?}", m.map(drop));
}

/// Fail fast only when nothing can reach the taker before its deadline: the next attempt
/// falls after it, and nothing is in use or starting.
#[tokio::test(start_paused = true)]
async fn a_take_fails_fast_only_when_nothing_can_reach_it_in_time() {
    let (pool, probe) = pool_with(config(0, 1), Fake::default()).await;
    probe.set_start(Step::Err);
    assert!(pool.try_take_member().is_err());
    settle().await;
    // Failed once: the next attempt is 100 ms away.
    let t = tokio::time::Instant::now();
    let e = pool.take_member(ms(50)).await.map(drop).unwrap_err();
    assert!(matches!(e, TakeError::Unavailable { .. }), "{e}");
    assert_eq!(t.elapsed(), Duration::ZERO, "failed fast");
    // A deadline past the next attempt waits for it, and times out with its error.
    let e = pool.take_member(ms(500)).await.map(drop).unwrap_err();
    let TakeError::Timeout {
        last_start_error: Some(_),
        ..
    } = &e
    else {
        panic!("{e}")
    };
    assert!(t.elapsed() >= ms(100), "{:?}", t.elapsed());
}

/// docs/design.md, "Failing starts": with the capacity filled by starts in flight, a take that starts nothing is
/// `AtCapacity`; `AllInUse` says this take started members.
#[tokio::test(start_paused = true)]
async fn a_take_that_starts_nothing_at_capacity_is_at_capacity() {
    let fake = Fake::default();
    fake.probe.set_start(Step::Slow(ms(50)));
    let (pool, _) = pool_with(config(0, 1), fake).await;
    let e = pool.try_take_member().map(drop).unwrap_err();
    assert!(matches!(e, TakeError::AllInUse { .. }), "{e}");
    let e = pool.try_take_member().map(drop).unwrap_err();
    assert!(matches!(e, TakeError::AtCapacity { .. }), "{e}");
}

/// Regression: a start that failed after another start's failure had been counted and a
/// later start had succeeded (three in flight together: one slow to fail, one quick to fail,
/// one quick to succeed) left the start policy holding an error while not backing off; the
/// pool's task stopped on its own consistency check, and without that check takes reported
/// a start error the pool no longer had. The late failure is the newest news: it is a new
/// backoff step, and the pool goes on serving every taker.
#[tokio::test(start_paused = true)]
async fn a_failure_that_ends_after_a_success_is_a_new_backoff_step() {
    let (pool, probe) = pool_with(config(0, 3), Fake::default()).await;
    probe.script_starts([Step::FailAfter(ms(100)), Step::Slow(ms(10)), Step::Err]);
    let mut takers = Vec::new();
    for _ in 0..3 {
        takers.push(spawn_take(&pool, Duration::from_secs(5)));
        settle().await;
    }
    assert_eq!(
        probe.attempts(),
        3,
        "one start per take, all in flight together"
    );
    advance(ms(10)).await;
    assert_eq!(
        (counts(&pool).0, probe.attempts()),
        (2, 4),
        "the quick start served a taker and ended the backoff: the next start went at once"
    );
    // The slow start fails at 100 ms, after the success: the third taker's start waits out
    // a new backoff step (100 ms without jitter), it is not made at once.
    advance(ms(90)).await;
    assert_eq!(probe.attempts(), 4);
    advance(ms(50)).await;
    assert_eq!(probe.attempts(), 4, "still backing off at 150 ms");
    advance(ms(60)).await;
    assert_eq!(probe.attempts(), 5, "the backoff start at 200 ms");
    for t in takers {
        let m = t.await.unwrap();
        assert!(m.is_ok(), "every taker served: {:?}", m.map(drop));
    }
}
