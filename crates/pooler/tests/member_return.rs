//! Giving members back: a normal drop, `fail`, a panicking holder, a cancelled `with_member`,
//! and members found dead or broken.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::time::Duration;

use common::*;
use pooler::{Member, MemberStatus};

#[tokio::test(start_paused = true)]
async fn dropping_the_guard_returns_the_member() {
    let (pool, probe) = pool(1, 1).await;
    let mut m = pool.try_take_member().unwrap();
    m.uses += 1;
    let id = Member::id(&m);
    assert_eq!(counts(&pool), (1, 0, 0, 0, 0));
    drop(m);
    assert_eq!(counts(&pool), (0, 1, 0, 0, 0));
    let m = pool.try_take_member().unwrap();
    assert_eq!(
        (Member::id(&m), m.uses),
        (id, 1),
        "the same member, as it was left"
    );
    assert_eq!(probe.stops(), 0);
}

#[tokio::test(start_paused = true)]
async fn fail_destroys_and_replaces() {
    let (pool, probe) = pool(1, 1).await;
    let m = pool.try_take_member().unwrap();
    let id = Member::id(&m);
    Member::fail(m);
    assert_eq!(counts(&pool), (0, 0, 0, 1, 0), "stopping, holding its slot");
    settle().await;
    assert_eq!(probe.stops(), 1);
    assert_eq!(
        counts(&pool),
        (0, 1, 0, 0, 0),
        "replaced once the stop ended"
    );
    assert_ne!(Member::id(&pool.try_take_member().unwrap()), id);
    assert_eq!(probe.alive(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_holder_that_panics_destroys_the_member() {
    let (pool, probe) = pool(1, 1).await;
    let p = pool.clone();
    let task = tokio::spawn(async move {
        let _m = p.try_take_member().unwrap();
        panic!("consumer crashed");
    });
    assert!(task.await.unwrap_err().is_panic());
    settle().await;
    assert_eq!(probe.stops(), 1);
    assert_eq!(counts(&pool), (0, 1, 0, 0, 0));
    assert_eq!(pool.stats()[0].id, 2, "a new member replaced member 1");
}

#[tokio::test(start_paused = true)]
async fn with_member_returns_the_member_after_use() {
    let (pool, probe) = pool(1, 1).await;
    let n = pool
        .with_member(ms(100), async |m: &mut FakeMember| {
            m.uses += 1;
            m.id
        })
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(counts(&pool), (0, 1, 0, 0, 0));
    assert_eq!(probe.stops(), 0);
}

#[tokio::test(start_paused = true)]
async fn with_member_cancelled_mid_use_destroys_the_member() {
    let (pool, probe) = pool(1, 1).await;
    let p = pool.clone();
    let task = tokio::spawn(async move {
        p.with_member(ms(100), async |m: &mut FakeMember| {
            m.uses += 1; // half-way through a transaction…
            tokio::time::sleep(Duration::from_secs(60)).await;
        })
        .await
    });
    settle().await;
    assert_eq!(counts(&pool), (1, 0, 0, 0, 0));
    task.abort();
    settle().await;
    assert_eq!(
        probe.stops(),
        1,
        "the half-used member was stopped, not returned"
    );
    let m = pool.try_take_member().unwrap();
    assert_eq!((m.id, m.uses), (2, 0), "a fresh member");
}

#[tokio::test(start_paused = true)]
async fn with_member_panicking_destroys_the_member() {
    let (pool, probe) = pool(1, 1).await;
    let p = pool.clone();
    let task = tokio::spawn(async move {
        p.with_member(ms(100), async |_m: &mut FakeMember| {
            tokio::task::yield_now().await;
            panic!("bug in the transaction");
        })
        .await
    });
    assert!(task.await.unwrap_err().is_panic());
    settle().await;
    assert_eq!(probe.stops(), 1);
    assert_eq!(counts(&pool), (0, 1, 0, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_free_member_whose_driver_ends_is_removed_and_replaced() {
    let (pool, probe) = pool(2, 2).await;
    probe.crash(1);
    settle().await;
    assert_eq!(probe.stops(), 1);
    let ids: Vec<_> = pool.stats().iter().map(|s| s.id).collect();
    assert_eq!(ids, [2, 3]);
    assert_eq!(counts(&pool), (0, 2, 0, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn an_in_use_member_whose_driver_ends_is_replaced_on_return() {
    let (pool, probe) = pool(1, 1).await;
    let m = pool.try_take_member().unwrap();
    probe.crash(Member::id(&m));
    settle().await;
    assert_eq!(
        counts(&pool),
        (1, 0, 0, 0, 0),
        "never taken away from its holder"
    );
    drop(m);
    assert_eq!(counts(&pool), (0, 0, 0, 1, 0));
    settle().await;
    assert_eq!(pool.stats().iter().map(|s| s.id).collect::<Vec<_>>(), [2]);
}

#[tokio::test(start_paused = true)]
async fn broken_members_are_never_handed_out() {
    let (pool, probe) = pool(2, 2).await;
    // Broken while free: skipped at take, the next one is handed out, and it is replaced.
    probe.break_member(2);
    let m = pool.try_take_member().unwrap();
    assert_eq!(Member::id(&m), 1);
    settle().await;
    assert_eq!(probe.stops(), 1);
    // Broken while in use: replaced when returned.
    probe.break_member(1);
    drop(m);
    settle().await;
    assert_eq!(probe.stops(), 2);
    let mut ids: Vec<_> = pool.stats().iter().map(|s| s.id).collect();
    ids.sort();
    assert_eq!(ids, [3, 4]);
}

#[tokio::test(start_paused = true)]
async fn stats_agree_with_what_happened() {
    let (pool, _) = pool(2, 3).await;
    let t0 = tokio::time::Instant::now();
    advance(ms(10)).await;
    let m = pool.try_take_member().unwrap();
    let stats = pool.stats();
    assert_eq!(stats.len(), 2);
    let row = |id| stats.iter().find(|s| s.id == id).unwrap();
    // With no feature that reads the clock at take, `since` is the pool's coarse time: at
    // most one 100 ms tick behind, never ahead.
    assert_eq!(row(2).status, MemberStatus::InUse);
    let taken = t0 + ms(10);
    assert!(
        row(2).since <= taken && taken - row(2).since <= ms(100),
        "{:?}",
        row(2)
    );
    assert_eq!((row(1).status, row(1).since), (MemberStatus::Free, t0));
    assert!(stats.iter().all(|s| s.expires_at.is_none()));
    Member::fail(m);
    assert_eq!(
        pool.stats().iter().find(|s| s.id == 2).unwrap().status,
        MemberStatus::Stopping
    );
}

#[tokio::test(start_paused = true)]
async fn a_member_that_needs_recycling_is_recycled_before_anyone_else_gets_it() {
    let (pool, probe) = pool(1, 1).await;
    probe
        .recycle_on
        .store(true, std::sync::atomic::Ordering::SeqCst);
    probe.set_recycle(Step::Slow(ms(50)));
    let mut m = pool.try_take_member().unwrap();
    m.uses = 7; // left dirty
    drop(m);
    assert_eq!(
        counts(&pool),
        (1, 0, 0, 0, 0),
        "still in use while it is recycled"
    );
    let t0 = tokio::time::Instant::now();
    let m = pool.take_member(ms(1000)).await.unwrap();
    assert_eq!(t0.elapsed(), ms(50), "served as soon as the recycle ended");
    assert_eq!((m.id, m.uses), (1, 0), "the same member, clean");
    assert_eq!(probe.recycles.load(std::sync::atomic::Ordering::SeqCst), 1);
    drop(m);
    advance(ms(50)).await; // its second recycle

    // A recycle that fails replaces the member.
    probe.set_recycle(Step::Err);
    drop(pool.try_take_member().unwrap());
    settle().await;
    assert_eq!(probe.stops(), 1);
    assert_eq!(pool.stats().iter().map(|s| s.id).collect::<Vec<_>>(), [2]);

    // A failed or crashed member is not recycled, only replaced.
    let before = probe.recycles.load(std::sync::atomic::Ordering::SeqCst);
    Member::fail(pool.try_take_member().unwrap());
    settle().await;
    assert_eq!(
        probe.recycles.load(std::sync::atomic::Ordering::SeqCst),
        before
    );
}
