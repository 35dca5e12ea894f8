//! The cancellation matrix (in the manner of deadpool's): the manager's start, initialize,
//! check and stop are each Ok, Err, Slow or Never — every one of the 256 combinations — while
//! takes are cancelled after every number of polls (every await point they reach) and a
//! `with_member` is cancelled mid-use. Throughout, the pool stays within max_count; afterwards,
//! with the manager healthy again, it serves; closed, it leaves no member and no task.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};
use std::time::Duration;

use common::*;
use pooler::{Pool, PoolConfig, Shutdown};

const STEPS: [Step; 4] = [
    Step::Ok,
    Step::Err,
    Step::Slow(Duration::from_millis(40)),
    Step::Never,
];

fn within_max(pool: &Pool<Fake>) {
    let u = pool.utilization();
    let total = u.in_use_count + u.free_count + u.starting_count + u.stopping_count;
    assert!(total <= u.max_count, "{u:?}");
}

/// Polls `fut` `polls` times, moving the clock 15 ms between polls, then drops it.
async fn cancel_after<F: Future>(fut: F, polls: usize) {
    let mut fut = pin!(fut);
    for _ in 0..polls {
        let ready = std::future::poll_fn(|cx: &mut Context<'_>| {
            Poll::Ready(fut.as_mut().poll(cx).is_ready())
        })
        .await;
        if ready {
            return;
        }
        advance(ms(15)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn every_fault_combination_with_takes_cancelled_at_every_await_point() {
    let mut combinations = 0;
    let mut cancellations = 0;
    for start in STEPS {
        for init in STEPS {
            for check in STEPS {
                for stop in STEPS {
                    let config = PoolConfig::new("matrix", 1, 2)
                        .to_builder()
                        .member_start_timeout(ms(100))
                        .member_shutdown(ms(100))
                        .idle_check_threshold(Duration::ZERO)
                        .health_check_interval(ms(70))
                        .build()
                        .unwrap();
                    let (pool, probe) = pool_with(config, Fake::default()).await;
                    probe.set_start(start);
                    probe.set_init(init);
                    probe.set_check(check);
                    probe.set_stop(stop);
                    // A member that is replaced goes through stop and a fresh start.
                    if let Ok(m) = pool.try_take_member() {
                        pooler::Member::fail(m);
                    }
                    for polls in 0..8 {
                        cancel_after(pool.take_member(ms(500)), polls).await;
                        cancellations += 1;
                        within_max(&pool);
                        let work = pool.with_member(ms(500), async |m: &mut FakeMember| {
                            m.uses += 1;
                            tokio::time::sleep(ms(30)).await;
                        });
                        cancel_after(work, polls).await;
                        cancellations += 1;
                        within_max(&pool);
                    }
                    // Healthy again: the pool recovers and serves.
                    probe.set_start(Step::Ok);
                    probe.set_init(Step::Ok);
                    probe.set_check(Step::Ok);
                    probe.set_stop(Step::Ok);
                    // Past the longest backoff step, in small steps so retries can cascade.
                    for _ in 0..60 {
                        advance(ms(250)).await;
                    }
                    let m = pool.take_member(std::time::Duration::from_secs(30)).await;
                    assert!(m.is_ok(), "{start:?} {init:?} {check:?} {stop:?}: {m:?}");
                    drop(m);
                    within_max(&pool);
                    tokio::time::timeout(Duration::from_secs(3600), pool.close(Shutdown::Graceful))
            .await
            .unwrap_or_else(|_| panic!("{start:?} {init:?} {check:?} {stop:?}: the close never finished (a member was lost)"));
                    settle().await;
                    assert_eq!(
                        (probe.alive(), pool.live_tasks()),
                        (0, 0),
                        "{start:?} {init:?} {check:?} {stop:?}: leaked"
                    );
                    combinations += 1;
                }
            }
        }
    }
    eprintln!(
        "cancellation matrix: {combinations} combinations, {cancellations} cancelled operations"
    );
    assert_eq!(combinations, 256);
}
