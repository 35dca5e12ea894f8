//! Stress and chaos: 64 tasks on a multi-threaded runtime take members over and over with
//! random timeouts, hold them for random times, fail them, panic inside `with_member`, get
//! cancelled mid-take and mid-use (dropped futures and `select!`), while members' driver
//! tasks end and panic at random, starts are quick, slow, refused at once or refused late
//! (each its own), every `Manager` hook panics now and then, recycling and
//! health checks run, and the pool is reconfigured up and down. An exclusivity checker (each
//! member records its holder; a second holder is a failure) runs throughout; at the end,
//! once quiet, every member is accounted for, and a graceful close leaves no member and no
//! task.
//!
//! Runs for about 3 seconds; `POOLER_STRESS_SECS=300 cargo test --release -p pooler --test
//! proof_stress -- --nocapture` runs for five minutes and prints what it did.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use common::*;
use pooler::{Member, PoolConfig, Shutdown};
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

/// A holder's mark on a member, cleared when the holder lets go (also when it is cancelled
/// or panics mid-use); a member already marked is held twice.
struct Holding<'a>(&'a FakeMember);

impl<'a> Holding<'a> {
    fn mark(m: &'a FakeMember, me: u64) -> Self {
        let before = m.holder.swap(me, SeqCst);
        assert_eq!(
            before, 0,
            "member {} held by {before} and {me} at once",
            m.id
        );
        Holding(m)
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.holder.store(0, SeqCst);
    }
}

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// What the run did, for its report.
#[derive(Default)]
struct Tally {
    ops: AtomicU64,
    taken: AtomicU64,
    crashes: AtomicU64,
    driver_panics: AtomicU64,
    reconfigures: AtomicU64,
}

fn base() -> PoolConfig {
    PoolConfig::new("stress", 2, 8)
        .to_builder()
        .queue_max(64)
        .member_start_timeout(ms(200))
        .member_shutdown(ms(100))
        .cull_interval(ms(50))
        .max_age(ms(100))
        .max_lifetime(ms(300))
        .max_lifetime_jitter(ms(100))
        .health_check_interval(ms(20))
        .idle_check_threshold(ms(10))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_tasks_never_share_a_member_and_nothing_is_lost() {
    quiet_planned_panics();
    let secs = std::env::var("POOLER_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let (pool, probe) = pool_with(base(), Fake::default()).await;
    probe.chaos_permille.store(1, SeqCst);
    let tally = Arc::new(Tally::default());
    let end = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for me in 1..=64u64 {
        let (pool, tally) = (pool.clone(), tally.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(me);
            while Instant::now() < end {
                let hold_for = Duration::from_micros(rng.random_range(0..300));
                let timeout = ms(rng.random_range(1..100));
                match rng.random_range(0..12) {
                    // with_member that panics inside, in its own task.
                    0 => {
                        let pool = pool.clone();
                        let run = tokio::spawn(async move {
                            pool.with_member(timeout, async |m: &mut FakeMember| {
                                let _held = Holding::mark(m, me);
                                panic!("planned panic");
                            })
                            .await
                        });
                        // It panicked inside with the planned panic (any other panic, such
                        // as the exclusivity check's, is passed on), or its take failed and
                        // the closure never ran.
                        match run.await {
                            Err(e) => {
                                let panic = e.into_panic();
                                if !panic_message(&*panic).contains("planned panic") {
                                    std::panic::resume_unwind(panic);
                                }
                            }
                            Ok(taken) => assert!(taken.is_err()),
                        }
                    }
                    // with_member cancelled mid-use.
                    1 => {
                        let _ = tokio::time::timeout(
                            hold_for,
                            pool.with_member(timeout, async |m: &mut FakeMember| {
                                let _held = Holding::mark(m, me);
                                tokio::time::sleep(Duration::from_millis(1)).await;
                            }),
                        )
                        .await;
                    }
                    // A take dropped while it waits.
                    2 => {
                        let _ = tokio::time::timeout(
                            Duration::from_micros(50),
                            pool.take_member(timeout),
                        )
                        .await;
                    }
                    // A take that loses a race in a select!.
                    3 => {
                        tokio::select! {
                            taken = pool.take_member(timeout) => {
                                if let Ok(m) = taken {
                                    let _held = Holding::mark(&m, me);
                                    tally.taken.fetch_add(1, SeqCst);
                                }
                            }
                            () = tokio::time::sleep(Duration::from_micros(rng.random_range(0..200))) => {}
                        }
                    }
                    // A take that never waits.
                    4 => {
                        if let Ok(m) = pool.try_take_member() {
                            let _held = Holding::mark(&m, me);
                            tally.taken.fetch_add(1, SeqCst);
                        }
                    }
                    // Take, use, then fail or return.
                    n => {
                        if let Ok(m) = pool.take_member(timeout).await {
                            tally.taken.fetch_add(1, SeqCst);
                            let held = Holding::mark(&m, me);
                            tokio::time::sleep(hold_for).await;
                            drop(held);
                            if n == 5 { Member::fail(m) } else { drop(m) }
                        }
                    }
                }
                tally.ops.fetch_add(1, SeqCst);
                // A take refused at once returns without yielding; a consumer that retried in
                // a tight loop would starve the pool's own tasks on the two workers.
                tokio::task::yield_now().await;
            }
        }));
    }
    // Members die (driver tasks end or panic), recycling switches on and off, and the pool is
    // reconfigured up and down, while the consumers run.
    let chaos = {
        let (pool, probe, tally) = (pool.clone(), probe.clone(), tally.clone());
        tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(0);
            while Instant::now() < end {
                tokio::time::sleep(ms(10)).await;
                let ids: Vec<u64> = pool.stats().iter().map(|s| s.id).collect();
                if let Some(id) = ids.get(rng.random_range(0..ids.len().max(1))) {
                    if rng.random_bool(0.5) {
                        tally
                            .crashes
                            .fetch_add(u64::from(probe.try_crash(*id)), SeqCst);
                    } else {
                        tally
                            .driver_panics
                            .fetch_add(u64::from(probe.try_panic_driver(*id)), SeqCst);
                    }
                }
                probe.recycle_on.store(rng.random_bool(0.3), SeqCst);
                // Starts are quick, slow, refused at once or refused late, each its own, so
                // failures and successes of starts in flight together end in every order.
                if probe.scripted() < 16 {
                    let steps: Vec<Step> = (0..16)
                        .map(|_| match rng.random_range(0..10) {
                            0..=4 => Step::Ok,
                            5..=6 => Step::Slow(ms(rng.random_range(1..=5))),
                            7 => Step::Err,
                            _ => Step::FailAfter(ms(rng.random_range(1..=20))),
                        })
                        .collect();
                    probe.script_starts(steps);
                }
                if rng.random_bool(0.05) {
                    let max_count = rng.random_range(4..=12);
                    // Admission comes and goes, with and without shedding, a start rate, a
                    // start cap and successors started ahead of lifetimes: the count of
                    // members in use may not drift however takes end meanwhile.
                    let admission = [
                        pooler::AdmissionMode::Off,
                        pooler::AdmissionMode::Vegas,
                        pooler::AdmissionMode::Gradient,
                    ][rng.random_range(0..3)];
                    let config = base()
                        .to_builder()
                        .init_count(rng.random_range(1..=4))
                        .max_count(max_count)
                        .queue_max(rng.random_range(48..=64))
                        .admission(admission)
                        .queue_target(rng.random_bool(0.3).then(|| ms(5)))
                        .queue_interval(ms(50))
                        .max_start_rate(rng.random_bool(0.3).then_some(500))
                        .max_concurrent_starts(
                            rng.random_bool(0.3).then(|| rng.random_range(1..=3)),
                        )
                        .max_lifetime_overlap(rng.random_bool(0.3).then(|| ms(100)))
                        .build()
                        .unwrap();
                    // Refused when too few members are free to lower max_count: fine.
                    if pool.reconfigure(config).is_ok() {
                        tally.reconfigures.fetch_add(1, SeqCst);
                    }
                }
            }
        })
    };
    for t in tasks {
        t.await.expect("no consumer failed its checks");
    }
    chaos.await.unwrap();

    // Quiet again: nothing in use or queued once every consumer has ended. With the chaos,
    // lifetimes and culling switched off, starts and stops drain; then every member alive
    // is free.
    probe.chaos_permille.store(0, SeqCst);
    probe.recycle_on.store(false, SeqCst);
    probe.clear_script();
    // A health check or a recycle under way holds its member in use for a moment after the
    // last consumer ended: what is still in use must come back within a bound, or it is lost.
    let settle_by = Instant::now() + Duration::from_secs(5);
    loop {
        let u = pool.utilization();
        if (u.in_use_count, u.queued_count) == (0, 0) {
            break;
        }
        assert!(Instant::now() < settle_by, "members stayed in use: {u:?}");
        tokio::time::sleep(ms(1)).await;
    }
    // Admission counts the members in use whenever they were taken: turned on now (with the
    // same limits), it shows none.
    let gated = pool
        .config()
        .to_builder()
        .admission(pooler::AdmissionMode::Vegas)
        .build()
        .unwrap();
    pool.reconfigure(gated).unwrap();
    let a = pool.admission().expect("admission is on");
    assert_eq!(a.admitted, 0, "the count drifted: {a:?}");
    let calm = pool
        .config()
        .to_builder()
        .cull_interval(Duration::ZERO)
        .max_lifetime(None)
        .max_lifetime_overlap(None)
        .max_lifetime_jitter(Duration::ZERO)
        .health_check_interval(None)
        .build()
        .unwrap();
    pool.reconfigure(calm).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let u = pool.utilization();
        if u.starting_count + u.stopping_count + u.in_use_count == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "starts, stops and checks never drained: {u:?}"
        );
        tokio::time::sleep(ms(1)).await;
    }
    let u = pool.utilization();
    assert!(u.in_use_count + u.free_count + u.starting_count + u.stopping_count <= u.max_count);
    assert_eq!(probe.alive(), u.free_count, "members lost: {u:?}");
    tokio::time::timeout(Duration::from_secs(30), pool.close(Shutdown::Graceful))
        .await
        .unwrap_or_else(|_| panic!("the close never finished (a member was lost)"));
    assert_eq!((probe.alive(), pool.live_tasks()), (0, 0));
    eprintln!(
        "stress: {} operations ({} members taken) by 64 tasks in {secs} s; {} driver tasks \
         ended and {} panicked, {} hook panics, {} reconfigures; 0 members held twice, 0 lost, \
         0 tasks left",
        tally.ops.load(SeqCst),
        tally.taken.load(SeqCst),
        tally.crashes.load(SeqCst),
        tally.driver_panics.load(SeqCst),
        probe.chaos_panics.load(SeqCst),
        tally.reconfigures.load(SeqCst),
    );
}
