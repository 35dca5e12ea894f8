//! Taking members: the fast path, growth in batches, the FIFO queue and its limits.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::time::Duration;

use common::*;
use pooler::{Member, PoolConfig, TakeError};

#[tokio::test(start_paused = true)]
async fn start_returns_with_init_count_members_free() {
    let (pool, probe) = pool(3, 5).await;
    assert_eq!(counts(&pool), (0, 3, 0, 0, 0));
    assert_eq!(probe.attempts(), 3);
    let u = pool.utilization();
    assert_eq!((u.max_count, u.queue_max), (5, 50));
}

#[tokio::test(start_paused = true)]
async fn initial_starts_run_in_parallel() {
    let fake = Fake::default();
    fake.probe.set_start(Step::Slow(ms(100)));
    let t0 = tokio::time::Instant::now();
    let (pool, _) = pool_with(PoolConfig::new("p", 10, 10), fake).await;
    assert_eq!(
        t0.elapsed(),
        ms(100),
        "ten 100 ms starts take 100 ms, not a second"
    );
    assert_eq!(pool.utilization().free_count, 10);
}

#[tokio::test(start_paused = true)]
async fn a_failing_backend_gives_a_smaller_pool_not_an_error() {
    let fake = Fake::default();
    fake.probe.set_start(Step::Err);
    let (pool, probe) = pool_with(PoolConfig::new("p", 3, 5), fake).await;
    assert_eq!(probe.attempts(), 3);
    assert_eq!(pool.utilization().free_count, 0);
}

#[tokio::test(start_paused = true)]
async fn try_take_never_waits_and_says_why() {
    let (pool, _) = pool(0, 2).await;
    // Nothing free, room to grow: a batch starts and the take fails at once.
    let e = pool.try_take_member().unwrap_err();
    assert!(matches!(e, TakeError::AllInUse { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "pool `test`: all members are in use; new ones are starting"
    );
    assert_eq!(
        counts(&pool),
        (0, 0, 1, 0, 0),
        "batch = max(min(0 - 0, 2), 1)"
    );
    settle().await;
    let a = pool.try_take_member().unwrap();
    let e = pool.try_take_member().unwrap_err();
    assert!(matches!(e, TakeError::AllInUse { .. }));
    settle().await;
    let b = pool.try_take_member().unwrap();
    // Nothing free, nothing starting, no room.
    let e = pool.try_take_member().unwrap_err();
    assert!(matches!(e, TakeError::AtCapacity { .. }), "{e}");
    assert_eq!(e.reason(), "at_capacity");
    assert_ne!(Member::id(&a), Member::id(&b));
}

#[tokio::test(start_paused = true)]
async fn growth_starts_a_batch_of_init_count_within_max() {
    let (pool, probe) = pool(3, 4).await;
    let held: Vec<_> = (0..3).map(|_| pool.try_take_member().unwrap()).collect();
    assert!(pool.try_take_member().is_err());
    assert_eq!(counts(&pool), (3, 0, 1, 0, 0), "min(init 3, room 1) = 1");
    settle().await;
    assert_eq!(probe.attempts(), 4);
    assert_eq!(counts(&pool), (3, 1, 0, 0, 0));
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn the_default_order_is_lifo() {
    let (pool, _) = pool(3, 3).await;
    let a = pool.try_take_member().unwrap();
    let b = pool.try_take_member().unwrap();
    let b_id = Member::id(&b);
    drop(a);
    drop(b);
    assert_eq!(
        Member::id(&pool.try_take_member().unwrap()),
        b_id,
        "last returned goes out first"
    );
}

#[tokio::test(start_paused = true)]
async fn queued_takers_are_served_in_arrival_order() {
    let (pool, _) = pool(1, 1).await;
    let first = pool.try_take_member().unwrap();
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let (pool, order) = (pool.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let m = pool.take_member(ms(10_000)).await.unwrap();
            order.lock().unwrap().push(i);
            tokio::task::yield_now().await;
            drop(m);
        }));
        settle().await; // arrival order is the spawn order
    }
    assert_eq!(pool.utilization().queued_count, 4);
    drop(first);
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3]);
    assert_eq!(counts(&pool), (0, 1, 0, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_is_served_by_a_newly_started_member() {
    let fake = Fake::default();
    fake.probe.set_start(Step::Slow(ms(50)));
    let (pool, _) = pool_with(PoolConfig::new("p", 0, 1), fake).await;
    let t0 = tokio::time::Instant::now();
    let m = pool.take_member(ms(1000)).await.unwrap();
    assert_eq!(t0.elapsed(), ms(50));
    assert_eq!(counts(&pool), (1, 0, 0, 0, 0));
    drop(m);
}

#[tokio::test(start_paused = true)]
async fn the_queue_is_bounded() {
    let config = PoolConfig::new("p", 1, 1)
        .to_builder()
        .queue_max(2)
        .build()
        .unwrap();
    let (pool, _) = pool_with(config, Fake::default()).await;
    let held = pool.try_take_member().unwrap();
    let w1 = spawn_take(&pool, ms(10_000));
    let w2 = spawn_take(&pool, ms(10_000));
    settle().await;
    let e = pool.take_member(ms(1000)).await.unwrap_err();
    assert!(
        matches!(e, TakeError::QueueFull { queue_max: 2, .. }),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "pool `p`: the queue of waiting takers is full (queue_max = 2)"
    );
    drop(held);
    assert!(w1.await.unwrap().is_ok());
    assert!(w2.await.unwrap().is_ok());
}

#[tokio::test(start_paused = true)]
async fn queue_max_zero_never_queues() {
    let config = PoolConfig::new("p", 1, 1)
        .to_builder()
        .queue_max(0)
        .build()
        .unwrap();
    let (pool, _) = pool_with(config, Fake::default()).await;
    let _held = pool.try_take_member().unwrap();
    let t0 = tokio::time::Instant::now();
    let e = pool.take_member(ms(1000)).await.unwrap_err();
    assert!(matches!(e, TakeError::AtCapacity { .. }), "{e}");
    assert_eq!(t0.elapsed(), ms(0));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_times_out_and_leaves_the_queue() {
    let (pool, _) = pool(1, 1).await;
    let held = pool.try_take_member().unwrap();
    let t0 = tokio::time::Instant::now();
    let e = pool.take_member(ms(250)).await.unwrap_err();
    assert_eq!(t0.elapsed(), ms(250));
    assert!(
        matches!(
            e,
            TakeError::Timeout {
                last_start_error: None,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "pool `test`: no member became free within 250ms"
    );
    assert_eq!(pool.utilization().queued_count, 0);
    drop(held);
    assert_eq!(
        counts(&pool),
        (0, 1, 0, 0, 0),
        "the member did not go to the departed waiter"
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_leaves_the_queue_and_loses_no_member() {
    let (pool, _) = pool(1, 1).await;
    let held = pool.try_take_member().unwrap();
    let waiter = spawn_take(&pool, ms(10_000));
    settle().await;
    assert_eq!(pool.utilization().queued_count, 1);
    waiter.abort();
    settle().await;
    assert_eq!(pool.utilization().queued_count, 0);
    drop(held);
    assert_eq!(counts(&pool), (0, 1, 0, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_member_handed_to_a_waiter_that_vanishes_comes_back() {
    // The member is sent to the waiter; the waiter is dropped before it polls again.
    let (pool, _) = pool(1, 1).await;
    let held = pool.try_take_member().unwrap();
    let fut = pool.take_member(ms(10_000));
    let mut fut = Box::pin(fut);
    assert!(futures_poll_once(fut.as_mut()).await.is_none());
    drop(held); // hands the member to the queued future
    assert_eq!(counts(&pool), (1, 0, 0, 0, 0), "in flight to the waiter");
    drop(fut);
    assert_eq!(
        counts(&pool),
        (0, 1, 0, 0, 0),
        "back on the free list, not lost"
    );
    assert!(pool.try_take_member().is_ok());
}

/// Cancel waiters at random while members flow: no member is lost, none is shared, and the
/// counts add up at the end.
#[tokio::test(start_paused = true)]
async fn random_cancellation_loses_no_member() {
    use rand::{Rng, SeedableRng};
    let (pool, probe) = pool(4, 4).await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut tasks = Vec::new();
    for i in 0..400u64 {
        let pool = pool.clone();
        let hold = ms(rng.random_range(0..20));
        let timeout = ms(rng.random_range(1..40));
        tasks.push(tokio::spawn(async move {
            if let Ok(m) = pool.take_member(timeout).await {
                let _held = Holding::mark(&m, i + 1);
                tokio::time::sleep(hold).await;
            }
        }));
        if rng.random_bool(0.3) {
            let victim = rng.random_range(0..tasks.len());
            tasks[victim].abort();
        }
        if i % 8 == 0 {
            tokio::time::sleep(ms(1)).await;
        }
    }
    // A task aborted above ends cancelled; one whose exclusivity check failed ends in a panic,
    // which must fail this test (its assertion runs inside the task).
    let mut cancelled = 0;
    for t in tasks {
        match t.await {
            Ok(()) => {}
            Err(e) if e.is_cancelled() => cancelled += 1,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    assert!(cancelled >= 30, "only {cancelled} takers were cancelled");
    settle().await;
    let (in_use, free, starting, stopping, queued) = counts(&pool);
    assert_eq!((in_use, starting, stopping, queued), (0, 0, 0, 0));
    assert_eq!(
        free + in_use,
        probe.alive(),
        "every member alive is in the pool"
    );
    assert_eq!(free, 4);
}

/// A holder's mark on a member, cleared when the holder lets go (also when it is aborted
/// mid-use); a member already marked is held twice.
struct Holding<'a>(&'a FakeMember);

impl<'a> Holding<'a> {
    fn mark(m: &'a FakeMember, holder: u64) -> Self {
        let prev = m.holder.swap(holder, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            prev, 0,
            "member {} held by {prev} and {holder} at once",
            m.id
        );
        Holding(m)
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.holder.store(0, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Polls a future once, returning its output if it finished.
async fn futures_poll_once<F: std::future::Future + Unpin>(f: F) -> Option<F::Output> {
    let mut f = f;
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

/// Regression: `Pool::start` with a count of `usize::MAX` panicked on a capacity overflow.
#[tokio::test(start_paused = true)]
async fn a_huge_count_is_refused_not_a_crash() {
    let e = pooler::Pool::start(
        PoolConfig::new("p", usize::MAX, usize::MAX),
        Fake::default(),
    )
    .await
    .map(drop)
    .unwrap_err();
    assert!(e.to_string().contains("init_count"), "{e}");
}

/// A pool of one member shedding with `queue_target` 50 ms and `queue_interval` 1 s, and its
/// member, given to a take after 200 ms in the queue: the interval has a wait above target.
async fn overloaded(name: &str) -> (pooler::Pool<Fake>, pooler::Member<Fake>) {
    let config = PoolConfig::new(name, 1, 1)
        .to_builder()
        .queue_target(ms(50))
        .queue_interval(Duration::from_secs(1))
        .build()
        .unwrap();
    let (pool, _probe) = pool_with(config, Fake::default()).await;
    let member = wait_200ms_for(&pool, pool.try_take_member().unwrap()).await;
    (pool, member)
}

/// Queue-delay shedding: after an interval whose shortest wait beat `queue_target`, a take
/// that would queue is refused at once with `Shed`, naming the target and the delay; an
/// interval with no waits lets takes queue again.
#[tokio::test(start_paused = true)]
async fn an_overloaded_pool_sheds_takes_instead_of_queueing_them() {
    let (pool, served) = overloaded("shed").await;

    // The interval ends with 200 ms as its shortest wait, above the 50 ms target.
    advance(ms(900)).await;
    let asked = tokio::time::Instant::now();
    let shed = pool.take_member(ms(500)).await;
    assert!(
        matches!(
            &shed,
            Err(TakeError::Shed { target, delay, .. }) if *target == ms(50) && *delay == ms(200)
        ),
        "{shed:?}"
    );
    assert_eq!(
        asked.elapsed(),
        Duration::ZERO,
        "refused at once, not after waiting"
    );
    assert_eq!(shed.unwrap_err().reason(), "shed");
    assert!(
        matches!(pool.health(), pooler::Health::Shedding { .. }),
        "{:?}",
        pool.health()
    );
    assert!(pool.ready(), "shedding, but serving");

    // Nobody queued for a whole interval: takes queue again (and this one times out).
    advance(Duration::from_secs(1)).await;
    let queued = pool.take_member(ms(100)).await;
    assert!(
        matches!(queued, Err(TakeError::Timeout { .. })),
        "{queued:?}"
    );
    drop(served);
}

/// While overloaded, a take whose turn comes after more than twice `queue_target` is refused
/// with `Stale` (its caller has likely given up), and the member goes on to the next waiter;
/// one whose turn comes sooner is served.
#[tokio::test(start_paused = true)]
async fn an_overloaded_pool_refuses_a_take_whose_turn_came_too_late() {
    // An interval whose every wait beat the target: overloaded for the next one.
    let (pool, held) = overloaded("shed-stale").await;
    advance(ms(700)).await;
    // This take queues before the interval ends (no verdict yet) and waits 150 ms, past
    // the verdict.
    let stale = spawn_take(&pool, Duration::from_secs(5));
    settle().await;
    assert!(matches!(pool.health(), pooler::Health::Serving));
    advance(ms(150)).await;
    assert!(matches!(pool.health(), pooler::Health::Shedding { .. }));
    drop(held);
    let refused = stale.await.unwrap().map(drop).unwrap_err();
    assert!(
        matches!(&refused, TakeError::Stale { waited, .. } if *waited == ms(150)),
        "{refused}"
    );
    // The member it would have had is free for the next take.
    assert_eq!(pool.utilization().free_count, 1);
    drop(pool.try_take_member().unwrap());
}

/// Shedding refuses a take instead of queueing it, never one already waiting: a take that
/// queued before shedding was turned on, and is told near its deadline to arm a timer of
/// its own, waits out its deadline even while the pool is overloaded.
#[tokio::test(start_paused = true)]
async fn shedding_turned_on_never_sheds_a_take_already_waiting() {
    let plain = PoolConfig::new("shed-later", 1, 1);
    let (pool, _probe) = pool_with(plain.clone(), Fake::default()).await;
    let held = pool.try_take_member().unwrap();
    let asked = tokio::time::Instant::now();
    let waiting = spawn_take(&pool, ms(1500));
    settle().await;
    let shedding = plain
        .to_builder()
        .queue_target(ms(50))
        .queue_interval(Duration::from_secs(1))
        .build()
        .unwrap();
    pool.reconfigure(shedding).unwrap();
    // A wait of 200 ms in this interval: above the target, so the next one sheds.
    let timed_out = pool.take_member(ms(200)).await.map(drop).unwrap_err();
    assert_eq!(timed_out.reason(), "timeout");
    advance(ms(900)).await;
    let shed = pool.take_member(ms(100)).await.map(drop).unwrap_err();
    assert_eq!(shed.reason(), "shed", "{shed}");
    let e = waiting.await.unwrap().map(drop).unwrap_err();
    assert!(matches!(e, TakeError::Timeout { .. }), "{e}");
    assert_eq!(asked.elapsed(), ms(1500), "refused at its deadline");
    drop(held);
}
