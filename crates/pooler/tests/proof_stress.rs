//! Stress: 64 tasks on a multi-threaded runtime take members over and over, hold them for
//! random times, fail them, panic inside `with_member`, get cancelled mid-take and mid-use,
//! while members crash at random. An exclusivity checker (each member records its holder; a
//! second holder is a failure) runs throughout; at the end every member is accounted for and
//! `close` leaves no task.
//!
//! Runs for about 3 seconds; `POOLER_STRESS_SECS=300` runs for five minutes.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use common::*;
use pooler::{Member, PoolConfig, Shutdown};
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

/// Marks the member as held by `me`; a member already held is a failure.
fn hold(m: &FakeMember, me: u64) {
    let before = m.holder.swap(me, SeqCst);
    assert_eq!(
        before, 0,
        "member {} held by {before} and {me} at once",
        m.id
    );
}

fn release(m: &FakeMember) {
    m.holder.store(0, SeqCst);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_tasks_never_share_a_member_and_nothing_is_lost() {
    std::panic::set_hook(Box::new(|info| {
        if !info.to_string().contains("planned panic") {
            eprintln!("{info}");
        }
    }));
    let secs = std::env::var("POOLER_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let config = PoolConfig {
        queue_max: 64,
        member_start_timeout: ms(200),
        cull_interval: ms(50),
        max_age: ms(100),
        max_lifetime: Some(ms(300)),
        max_lifetime_jitter: ms(100),
        ..PoolConfig::new("stress", 2, 8)
    };
    let (pool, probe) = pool_with(config, Fake::default()).await;
    let ops = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for me in 1..=64u64 {
        let (pool, ops) = (pool.clone(), ops.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(me);
            while Instant::now() < end {
                let hold_for = Duration::from_micros(rng.random_range(0..300));
                match rng.random_range(0..10) {
                    // with_member that panics inside, in its own task.
                    0 => {
                        let pool = pool.clone();
                        let run = tokio::spawn(async move {
                            pool.with_member(ms(100), async |m: &mut FakeMember| {
                                hold(m, me);
                                release(m);
                                panic!("planned panic");
                            })
                            .await
                        });
                        // It panicked inside, or its take timed out and the closure never ran.
                        match run.await {
                            Err(e) => assert!(e.is_panic()),
                            Ok(taken) => assert!(taken.is_err()),
                        }
                    }
                    // with_member cancelled mid-use.
                    1 => {
                        let _ = tokio::time::timeout(
                            hold_for,
                            pool.with_member(ms(100), async |m: &mut FakeMember| {
                                hold(m, me);
                                tokio::time::sleep(Duration::from_millis(1)).await;
                                release(m);
                            }),
                        )
                        .await;
                    }
                    // A take cancelled while it waits.
                    2 => {
                        let _ = tokio::time::timeout(
                            Duration::from_micros(50),
                            pool.take_member(ms(100)),
                        )
                        .await;
                    }
                    // Take, use, then fail or return.
                    n => {
                        if let Ok(m) = pool.take_member(ms(100)).await {
                            hold(&m, me);
                            tokio::time::sleep(hold_for).await;
                            release(&m);
                            if n == 3 { Member::fail(m) } else { drop(m) }
                        }
                    }
                }
                ops.fetch_add(1, SeqCst);
            }
        }));
    }
    // Crashes at random while the consumers run.
    let crasher = {
        let (pool, probe) = (pool.clone(), probe.clone());
        tokio::spawn(async move {
            let mut crashed = 0u64;
            while Instant::now() < end {
                tokio::time::sleep(ms(5)).await;
                let ids: Vec<u64> = pool.stats().iter().map(|s| s.id).collect();
                if let Some(id) = ids.get(rand::rng().random_range(0..ids.len().max(1))) {
                    crashed += u64::from(probe.try_crash(*id));
                }
            }
            crashed
        })
    };
    for t in tasks {
        t.await.expect("no consumer failed its checks");
    }
    let crashed = crasher.await.unwrap();

    // Quiet again: nothing in use or queued once every consumer has ended. With lifetimes and
    // culling switched off, starts and stops drain; then every member alive is free.
    let u = pool.utilization();
    assert_eq!((u.in_use_count, u.queued_count), (0, 0), "{u:?}");
    let calm = PoolConfig {
        cull_interval: Duration::ZERO,
        max_lifetime: None,
        max_lifetime_jitter: Duration::ZERO,
        ..pool.config()
    };
    pool.reconfigure(calm).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pool.utilization().starting_count + pool.utilization().stopping_count > 0 {
        assert!(
            Instant::now() < deadline,
            "starts and stops never drained: {:?}",
            pool.utilization()
        );
        tokio::time::sleep(ms(1)).await;
    }
    let u = pool.utilization();
    assert!(u.in_use_count + u.free_count + u.starting_count + u.stopping_count <= u.max_count);
    assert_eq!(probe.alive(), u.free_count, "members lost: {u:?}");
    pool.close(Shutdown::Graceful).await;
    assert_eq!((probe.alive(), pool.live_tasks()), (0, 0));
    eprintln!(
        "stress: {} operations by 64 tasks in {secs} s, {crashed} crashes",
        ops.load(SeqCst)
    );
}
