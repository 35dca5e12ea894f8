//! Adaptive admission (`admission = "vegas"`): the limit follows the latency of holds, takes
//! over it wait in the queue (or are refused when they cannot wait), lowering it closes nothing,
//! and every way a take can end leaves the count of members in use true.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Fake, LATE_US, advance, ms, pool_with, settle, spawn_take};
use pooler::{AdmissionMode, LimitMove, PoolConfig, TakeError};

/// The longest `queue_target` a key accepts: admission without shedding, takes waiting as
/// long as their own timeouts say.
const NO_SHEDDING: Duration = Duration::from_secs(365 * 24 * 3600);

/// Admission on, with its default queue target set aside ([`NO_SHEDDING`]): these tests
/// watch the limit itself.
fn config(name: &str, max: usize) -> PoolConfig {
    PoolConfig::new(name, max, max)
        .to_builder()
        .admission(AdmissionMode::Vegas)
        .queue_target(NO_SHEDDING)
        .build()
        .unwrap()
}

/// Admission on with a 50 ms queue target over an interval of a second (long enough that
/// no interval judges the pool overloaded while a test looks at the stale rule).
fn shedding(name: &str, max: usize) -> PoolConfig {
    config(name, max)
        .to_builder()
        .queue_target(ms(50))
        .queue_interval(Duration::from_secs(1))
        .build()
        .unwrap()
}

/// Users that each take, hold for a time that grows with how many hold at once past
/// `capacity` (a database sharing itself among its queries), and give back.
async fn load(
    pool: &pooler::Pool<Fake>,
    users: usize,
    capacity: usize,
    base: Duration,
    rounds: usize,
) {
    let holding = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..users {
        let (pool, holding) = (pool.clone(), holding.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let member = pool.take_member(Duration::from_secs(60)).await.unwrap();
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                let share = now.max(capacity) as u32;
                tokio::time::sleep(base * share / capacity as u32).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                drop(member);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

/// Four users, then twenty, on a pool of 20 over a database that serves 4 at once: the limit
/// comes down toward what the database serves, the members all stay open, and when the load
/// stops the pool admits the same number again (nothing is lost to the limit's moves).
#[tokio::test(start_paused = true)]
async fn the_limit_follows_latency_and_closes_nothing() {
    let (pool, probe) = pool_with(config("admit", 20), Fake::default()).await;
    let before = pool.admission().unwrap();
    assert_eq!(
        (before.limit, before.admitted, before.last_move),
        (20, 0, LimitMove::Starting)
    );
    // The database's own latency first, then more users than it serves at once.
    load(&pool, 4, 4, ms(10), 100).await;
    load(&pool, 20, 4, ms(10), 60).await;
    let after = pool.admission().unwrap();
    assert!(after.limit < 12, "the limit came down: {after:?}");
    assert!(
        matches!(after.last_move, LimitMove::Shrank | LimitMove::Held),
        "{after:?}"
    );
    assert_eq!(after.admitted, 0);
    assert!(after.latency > after.baseline, "{after:?}");
    assert_eq!(probe.alive(), 20, "lowering the limit closes no member");
    // Exactly `limit` takes are admitted, then refused without waiting.
    let held: Vec<_> = (0..after.limit)
        .map(|_| pool.try_take_member().unwrap())
        .collect();
    let refused = pool.try_take_member().map(drop).unwrap_err();
    assert!(
        matches!(refused, TakeError::OverLimit { limit, .. } if limit == after.limit),
        "{refused}"
    );
    assert_eq!(refused.reason(), "over_limit");
    assert_eq!(
        pool.utilization().free_count,
        20 - after.limit,
        "free members stay open"
    );
    drop(held);
    assert_eq!(pool.admission().unwrap().admitted, 0);
}

/// With the server's own latency measured by the manager, the limit follows the server, not
/// the hold: holds that grow with the number of users (the application sharing its own CPU
/// between statements) while the server answers as fast as ever do not bring it down — they
/// do when the hold is all the pool has to go by. A use with nothing measured is not a
/// sample.
#[tokio::test(start_paused = true)]
async fn the_limit_follows_the_latency_the_manager_measures() {
    for (measured, shrinks) in [(false, true), (true, false)] {
        let fake = Fake::default();
        if measured {
            fake.probe.latency_us.store(10_000, Ordering::SeqCst);
        }
        let (pool, _probe) = pool_with(config("admit-measured", 20), fake).await;
        load(&pool, 4, 4, ms(10), 100).await;
        // Five times the users, each holding longer for it: the server is no slower.
        load(&pool, 20, 4, ms(10), 60).await;
        let after = pool.admission().unwrap();
        assert_eq!(
            after.limit < 12,
            shrinks,
            "measured by the manager: {measured}; {after:?}"
        );
        if measured {
            assert_eq!(after.latency, ms(10), "{after:?}");
        }
    }
    // Nothing measured: the limit does not move from where it starts. Every use cut at its
    // deadline: no latency either, but overload — the limit must not stay where nothing
    // measures it any more; each batch halves it.
    for (said, name, limit, last_move) in [
        (u64::MAX, "admit-unmeasured", 20, LimitMove::Starting),
        (LATE_US, "admit-late", 1, LimitMove::Late),
    ] {
        let fake = Fake::default();
        fake.probe.latency_us.store(said, Ordering::SeqCst);
        let (pool, _probe) = pool_with(config(name, 20), fake).await;
        load(&pool, 20, 4, ms(10), 60).await;
        let after = pool.admission().unwrap();
        assert_eq!(
            (after.limit, after.last_move),
            (limit, last_move),
            "{after:?}"
        );
    }
}

/// A manager that measures the server says what it saw since it was last asked; so that is
/// the use that just ended, it is asked on every good return while admission is on — timed
/// or not (only a timed hold's answer is heard) — never with admission off, and not for a
/// failed use. Otherwise an untimed use's slow query, or its request cut at its deadline,
/// would be laid on a later use.
#[tokio::test(start_paused = true)]
async fn the_manager_is_asked_the_latency_of_every_use_while_admission_is_on() {
    let off = PoolConfig::new("admit-asked-off", 4, 4);
    for (config, asked) in [(config("admit-asked", 4), 20), (off, 0)] {
        let (pool, probe) = pool_with(config, Fake::default()).await;
        for _ in 0..20 {
            let member = pool.take_member(ms(100)).await.unwrap();
            advance(ms(1)).await;
            drop(member);
        }
        pooler::Member::fail(pool.take_member(ms(100)).await.unwrap());
        settle().await;
        assert_eq!(probe.latency_asked.load(Ordering::SeqCst), asked);
    }
}

/// With admission on and no `queue_target`, the target follows the database: 50 ms until
/// the limiter has measured it, then half its latency; one set stays as set.
#[tokio::test(start_paused = true)]
async fn the_queue_target_admission_brings_follows_the_database() {
    let derived = PoolConfig::new("admit-target", 8, 8)
        .to_builder()
        .admission(AdmissionMode::Vegas)
        .build()
        .unwrap();
    let set = derived.to_builder().queue_target(ms(30)).build().unwrap();
    for (config, before, after) in [(derived, ms(50), ms(5)), (set, ms(30), ms(30))] {
        let (pool, _probe) = pool_with(config, Fake::default()).await;
        assert_eq!(pool.admission().unwrap().queue_target, before);
        load(&pool, 8, 8, ms(10), 40).await;
        let status = pool.admission().unwrap();
        assert_eq!(status.baseline, ms(10), "{status:?}");
        assert_eq!(status.queue_target, after, "{status:?}");
    }
}

/// A take over the limit waits in the queue, first come first served, and is admitted when a
/// holder gives back; one that waits out its deadline there times out; one dropped while
/// waiting leaves no trace; one admitted that then fails to get a member gives its admission
/// back.
#[tokio::test(start_paused = true)]
async fn every_way_a_take_ends_gives_its_admission_back() {
    let (pool, probe) = pool_with(config("admit-ends", 2), Fake::default()).await;
    let a = pool.try_take_member().unwrap();
    let b = pool.try_take_member().unwrap();
    assert_eq!(pool.admission().unwrap().admitted, 2);

    // Waits out its deadline in the queue.
    let timed_out = spawn_take(&pool, ms(100));
    settle().await;
    advance(ms(100)).await;
    let e = timed_out.await.unwrap().map(drop).unwrap_err();
    assert_eq!(e.reason(), "timeout", "{e}");

    // Dropped while waiting over the limit.
    let dropped = spawn_take(&pool, Duration::from_secs(10));
    settle().await;
    dropped.abort();
    settle().await;

    // First come, first served.
    let first = spawn_take(&pool, Duration::from_secs(10));
    settle().await;
    let second = spawn_take(&pool, Duration::from_secs(10));
    settle().await;
    drop(a);
    settle().await;
    assert!(first.is_finished() && !second.is_finished());
    let first = first.await.unwrap().unwrap();
    drop(b);
    let second = second.await.unwrap().unwrap();
    assert_eq!(pool.admission().unwrap().admitted, 2);
    drop((first, second));
    assert_eq!(pool.admission().unwrap().admitted, 0);

    // Admitted, then no member within the deadline (the one failed is replaced slowly):
    // the admission is given back with the refusal.
    probe_slow_starts(&probe);
    pooler::Member::fail(pool.try_take_member().unwrap());
    let busy = pool.try_take_member().unwrap();
    let late = spawn_take(&pool, ms(100));
    settle().await;
    advance(ms(100)).await;
    let e = late.await.unwrap().map(drop).unwrap_err();
    assert_eq!(e.reason(), "timeout", "{e}");
    assert_eq!(
        pool.admission().unwrap().admitted,
        1,
        "only the holder is admitted"
    );
    drop(busy);
    advance(Duration::from_secs(1)).await;
    settle().await;

    // Two admitted again: a member failed and one detached give theirs back too.
    pooler::Member::fail(pool.try_take_member().unwrap());
    let kept = pooler::Member::detach(pool.try_take_member().unwrap());
    settle().await;
    assert_eq!(pool.admission().unwrap().admitted, 0);
    drop(kept);
}

fn probe_slow_starts(probe: &common::Probe) {
    probe.set_start(common::Step::Slow(Duration::from_secs(1)));
}

/// Turned on and off by `reconfigure`: on, takes go under the limit from then; off, a take
/// waiting over the limit goes through at once.
#[tokio::test(start_paused = true)]
async fn reconfigure_turns_admission_on_and_off() {
    let plain = PoolConfig::new("admit-reconf", 2, 4);
    let (pool, _probe) = pool_with(plain.clone(), Fake::default()).await;
    assert!(pool.admission().is_none());
    pool.reconfigure(config("admit-reconf", 1)).unwrap();
    let status = pool.admission().unwrap();
    assert_eq!(status.limit, 1);
    let held = pool.try_take_member().unwrap();
    let waiting = spawn_take(&pool, Duration::from_secs(10));
    settle().await;
    assert!(!waiting.is_finished());
    let mut off = plain;
    off.max_count = 1;
    off.init_count = 1;
    pool.reconfigure(off).unwrap();
    assert!(pool.admission().is_none());
    drop(held);
    drop(waiting.await.unwrap().unwrap());
}

/// With shedding too, a take that has waited twice `queue_target` in the queue is refused
/// with `Stale` (the queue is served newest first by then, so it would wait out its budget behind
/// newer takes) and its place passes on; that wait makes the pool overloaded for the next
/// interval, in which a take over the limit is refused at once.
#[tokio::test(start_paused = true)]
async fn a_take_waiting_twice_the_target_is_shed() {
    let (pool, _probe) = pool_with(shedding("admit-shed", 1), Fake::default()).await;
    let held = pool.try_take_member().unwrap();
    let stale = spawn_take(&pool, Duration::from_secs(5));
    settle().await;
    advance(ms(99)).await;
    settle().await;
    assert!(!stale.is_finished(), "under twice the target, it waits");
    advance(ms(1)).await;
    let refused = stale.await.unwrap().map(drop).unwrap_err();
    assert!(
        matches!(&refused, TakeError::Stale { waited, .. } if *waited == ms(100)),
        "{refused}"
    );
    assert_eq!(
        refused.to_string(),
        "pool `admit-shed`: overloaded, take shed after waiting 100ms in a queue standing past queue_target = 50ms"
    );
    assert_eq!(pool.admission().unwrap().admitted, 1, "only the holder");
    // The next interval: overloaded, and a take over the limit is refused at once.
    advance(Duration::from_secs(1)).await;
    let at_once = pool
        .take_member(Duration::from_secs(5))
        .await
        .map(drop)
        .unwrap_err();
    assert!(
        matches!(&at_once, TakeError::Shed { delay, .. } if *delay == ms(100)),
        "{at_once}"
    );
    drop(held);
    assert_eq!(pool.admission().unwrap().admitted, 0);
    drop(pool.try_take_member().unwrap());
}

/// Admission turned on alone brings queue-delay shedding with it: with no `queue_target` set,
/// 50 ms is in force, and a take over the limit is refused as stale at twice it rather than
/// waiting out its budget. A target set as long as a key allows sets shedding aside: the take
/// waits until its own deadline, however long the queue has stood.
#[tokio::test(start_paused = true)]
async fn admission_alone_brings_a_queue_target_that_a_long_one_sets_aside() {
    let alone = PoolConfig::new("admit-alone", 1, 1)
        .to_builder()
        .admission(AdmissionMode::Vegas)
        .build()
        .unwrap();
    assert_eq!(alone.queue_target, None);
    assert_eq!(alone.queue_target_in_force(), Some(ms(50)));
    for (config, ends) in [
        (alone, ("shed", ms(100))),
        (config("admit-wait", 1), ("timeout", ms(800))),
    ] {
        let (pool, _probe) = pool_with(config, Fake::default()).await;
        let held = pool.try_take_member().unwrap();
        let begun = tokio::time::Instant::now();
        let e = pool
            .take_member(Duration::from_millis(800))
            .await
            .map(drop)
            .unwrap_err();
        assert_eq!((e.reason(), begun.elapsed()), ends, "{e}");
        drop(held);
    }
}

/// With admission on and a `queue_target`, every take in the one queue waits twice the
/// target at most — one waiting for a member in use as much as one over the limit — and a
/// take refused so takes nothing from the count: the members in use are what the limit
/// bounds, and the next take is let through when one comes back.
#[tokio::test(start_paused = true)]
async fn a_take_refused_as_stale_takes_nothing_from_the_count() {
    let config = shedding("stale-count", 3)
        .to_builder()
        .init_count(2)
        .build()
        .unwrap();
    let (pool, probe) = pool_with(config, Fake::default()).await;
    probe_slow_starts(&probe);
    let kept = pool.try_take_member().unwrap();
    let second = pool.try_take_member().unwrap();
    // No member free and a start slow: the take waits in the queue, and is refused at twice
    // the target, not at its own deadline.
    let begun = tokio::time::Instant::now();
    let stale = spawn_take(&pool, Duration::from_secs(5));
    let refused = stale.await.unwrap().map(drop).unwrap_err();
    assert_eq!(
        (refused.reason(), begun.elapsed()),
        ("shed", ms(100)),
        "{refused}"
    );
    assert_eq!(
        pool.admission().unwrap().admitted,
        2,
        "the two holders are still counted"
    );
    drop(second);
    let third = pool
        .try_take_member()
        .expect("the member given back is free");
    drop((kept, third));
    settle().await;
    assert_eq!(pool.admission().unwrap().admitted, 0);
}

/// A take whose budget is no longer than twice the target does not wait it out in a
/// standing queue: it is refused as stale at half its budget, or at the target when that is
/// longer (twice the target for a longer budget), leaving its caller the rest. (It timed
/// out at its deadline, the refusal useless by then: with deadlines of 100 ms against a
/// 50 ms target, every take a slowed database could not serve waited its whole budget.)
#[tokio::test(start_paused = true)]
async fn a_short_budget_is_refused_as_stale_at_half_of_it() {
    let (pool, _probe) = pool_with(shedding("stale-half", 1), Fake::default()).await;
    let held = pool.try_take_member().unwrap();
    for (budget, ends) in [(ms(100), ms(50)), (ms(60), ms(50)), (ms(400), ms(100))] {
        let begun = tokio::time::Instant::now();
        let e = pool.take_member(budget).await.map(drop).unwrap_err();
        assert_eq!(
            (e.reason(), begun.elapsed()),
            ("shed", ends),
            "{budget:?}: {e}"
        );
        assert!(matches!(e, TakeError::Stale { .. }), "{e}");
    }
    drop(held);
}

/// The limit bounds the members in use, whenever they were taken: members in use when
/// admission is turned on count from then, and come back (or are detached) as any other;
/// turned off and on again, the count is still the members in use.
#[tokio::test(start_paused = true)]
async fn the_count_survives_turning_admission_on_and_off() {
    let plain = PoolConfig::new("admit-on", 4, 4);
    let (pool, _probe) = pool_with(plain.clone(), Fake::default()).await;
    let before: Vec<_> = (0..2).map(|_| pool.try_take_member().unwrap()).collect();
    pool.reconfigure(config("admit-on", 4)).unwrap();
    assert_eq!(
        pool.admission().unwrap().admitted,
        2,
        "the two taken before"
    );
    let mut admitted: Vec<_> = (0..2).map(|_| pool.try_take_member().unwrap()).collect();
    assert_eq!(pool.admission().unwrap().admitted, 4);
    let mut before = before.into_iter();
    drop(before.next());
    let kept = pooler::Member::detach(before.next().unwrap());
    settle().await;
    assert_eq!(
        pool.admission().unwrap().admitted,
        2,
        "one given back, one detached: the two taken since still hold"
    );
    pool.reconfigure(plain).unwrap();
    assert!(pool.admission().is_none());
    drop(admitted.pop());
    settle().await;
    pool.reconfigure(config("admit-on", 4)).unwrap();
    assert_eq!(pool.admission().unwrap().admitted, 1);
    drop(admitted);
    settle().await;
    assert_eq!(pool.admission().unwrap().admitted, 0);
    drop(kept);
}
