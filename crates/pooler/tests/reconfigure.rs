//! Runtime reconfiguration: each action, its order, and atomic rejection.

mod common;

use std::time::Duration;

use common::*;
use pooler::{ConfigError, MemberOrder, PoolConfig, ReconfigureAction as A, TakeError};

fn base() -> PoolConfig {
    PoolConfig::new("p", 2, 6)
        .to_builder()
        .cull_interval(Duration::ZERO)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn raising_init_count_starts_members() {
    let (pool, _) = pool_with(base(), Fake::default()).await;
    let actions = pool
        .reconfigure(base().to_builder().init_count(5).build().unwrap())
        .unwrap();
    assert_eq!(actions, [A::Changed("init_count"), A::Started(3)]);
    settle().await;
    assert_eq!(counts(&pool), (0, 5, 0, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn lowering_init_count_culls_back_to_it() {
    let config = base().to_builder().init_count(5).build().unwrap();
    let (pool, probe) = pool_with(config, Fake::default()).await;
    let actions = pool
        .reconfigure(base().to_builder().init_count(1).build().unwrap())
        .unwrap();
    assert_eq!(actions, [A::Changed("init_count"), A::Culled]);
    settle().await;
    assert_eq!((counts(&pool), probe.stops()), ((0, 1, 0, 0, 0), 4));
}

#[tokio::test(start_paused = true)]
async fn lowering_max_count_stops_free_members() {
    let config = base().to_builder().init_count(6).build().unwrap();
    let (pool, probe) = pool_with(config, Fake::default()).await;
    let held = pool.try_take_member().unwrap();
    let actions = pool
        .reconfigure(
            base()
                .to_builder()
                .init_count(2)
                .max_count(3)
                .build()
                .unwrap(),
        )
        .unwrap();
    assert_eq!(
        actions,
        [
            A::Changed("init_count"),
            A::Changed("max_count"),
            A::Retired(3),
            A::Culled
        ]
    );
    settle().await;
    // Three stopped for max_count; the cull for the lower init_count took one more, since
    // the only demand was the one member in use.
    assert_eq!(counts(&pool), (1, 1, 0, 0, 0));
    assert_eq!(probe.stops(), 4);
    assert_eq!(pool.utilization().max_count, 3);
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn a_rejected_config_changes_nothing() {
    let (pool, _) = pool_with(
        base().to_builder().init_count(3).build().unwrap(),
        Fake::default(),
    )
    .await;
    let held: Vec<_> = (0..3).map(|_| pool.try_take_member().unwrap()).collect();
    let before = (pool.config(), pool.utilization(), pool.stats());

    let e = pool
        .reconfigure(
            base()
                .to_builder()
                .max_count(2)
                .init_count(1)
                .build()
                .unwrap(),
        )
        .unwrap_err();
    assert_eq!(
        e,
        ConfigError::NotEnoughFree {
            pool: "p".into(),
            max_count: 2,
            needed: 1,
            free: 0
        }
    );
    assert_eq!(
        e.to_string(),
        "pool `p`: cannot lower max_count to 2: 1 members would have to stop but only 0 are free"
    );
    // An invalid config, built without the builder's validation: reconfigure validates too.
    let mut invalid = base();
    invalid.init_count = 9;
    let e = pool.reconfigure(invalid).unwrap_err();
    assert!(matches!(e, ConfigError::InitExceedsMax { .. }), "{e}");
    let e = pool
        .reconfigure(base().to_builder().name("q").build().unwrap())
        .unwrap_err();
    assert!(matches!(e, ConfigError::NameChanged { .. }), "{e}");

    assert_eq!((pool.config(), pool.utilization(), pool.stats()), before);
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn lowering_queue_max_refuses_the_oldest_waiters_at_once() {
    let (pool, _) = pool_with(
        base()
            .to_builder()
            .max_count(1)
            .init_count(1)
            .build()
            .unwrap(),
        Fake::default(),
    )
    .await;
    let held = pool.try_take_member().unwrap();
    let waiters: Vec<_> = (0..3)
        .map(|_| spawn_take(&pool, Duration::from_secs(60)))
        .collect();
    settle().await;
    assert_eq!(pool.utilization().queued_count, 3);
    let actions = pool
        .reconfigure(
            base()
                .to_builder()
                .max_count(1)
                .init_count(1)
                .queue_max(1)
                .build()
                .unwrap(),
        )
        .unwrap();
    assert_eq!(actions, [A::Changed("queue_max"), A::Shed(2)]);
    let mut waiters = waiters.into_iter();
    for _ in 0..2 {
        let e = waiters.next().unwrap().await.unwrap().unwrap_err();
        assert!(
            matches!(e, TakeError::QueueShrunk { queue_max: 1, .. }),
            "{e}"
        );
    }
    drop(held);
    assert!(
        waiters.next().unwrap().await.unwrap().is_ok(),
        "the newest waiter kept its place"
    );
}

#[tokio::test(start_paused = true)]
async fn turning_culling_on_from_zero_starts_the_timer() {
    let (pool, _) = pool_with(
        base()
            .to_builder()
            .max_age(Duration::from_secs(5))
            .build()
            .unwrap(),
        Fake::default(),
    )
    .await;
    let held: Vec<_> = futures_take(&pool, 6).await;
    drop(held);
    advance(Duration::from_secs(60)).await;
    assert_eq!(pool.utilization().free_count, 6, "culling is off");
    let on = base()
        .to_builder()
        .cull_interval(Duration::from_secs(1))
        .max_age(Duration::from_secs(5))
        .build()
        .unwrap();
    let actions = pool.reconfigure(on).unwrap();
    assert_eq!(actions, [A::Changed("cull_interval"), A::CullTimerReset]);
    advance(Duration::from_secs(1)).await;
    assert_eq!(
        pool.utilization().free_count,
        2,
        "the demand of a minute ago is out of the window"
    );
}

#[tokio::test(start_paused = true)]
async fn adding_changing_and_removing_a_lifetime_moves_existing_expiries() {
    let (pool, probe) = pool_with(base(), Fake::default()).await;
    let t0 = tokio::time::Instant::now();
    advance(Duration::from_secs(30)).await;
    let life = |s| {
        base()
            .to_builder()
            .max_lifetime(Duration::from_secs(s))
            .build()
            .unwrap()
    };

    let actions = pool.reconfigure(life(100)).unwrap();
    assert_eq!(
        actions,
        [A::Changed("max_lifetime"), A::LifetimesRecomputed]
    );
    assert!(
        pool.stats()
            .iter()
            .all(|s| s.expires_at == Some(t0 + Duration::from_secs(100)))
    );

    // Shortened below the members' age: they are recycled at once.
    pool.reconfigure(life(20)).unwrap();
    settle().await;
    assert_eq!(probe.stops(), 2);
    assert!(
        pool.stats()
            .iter()
            .all(|s| s.id > 2 && s.expires_at.is_some())
    );

    pool.reconfigure(base()).unwrap();
    assert!(pool.stats().iter().all(|s| s.expires_at.is_none()));
    advance(Duration::from_secs(3600)).await;
    assert_eq!(probe.stops(), 2);
}

#[tokio::test(start_paused = true)]
async fn group_order_and_plain_parameters_are_reported_in_pooler_order() {
    let (pool, _) = pool_with(
        base().to_builder().group("a").build().unwrap(),
        Fake::default(),
    )
    .await;
    let new = base()
        .to_builder()
        .group("b")
        .member_order(MemberOrder::Fifo)
        .member_shutdown(Duration::from_secs(1))
        .max_age(Duration::from_secs(1))
        .build()
        .unwrap();
    let actions = pool.reconfigure(new.clone()).unwrap();
    assert_eq!(
        actions,
        [
            A::Changed("group"),
            A::Changed("max_age"),
            A::Changed("member_order"),
            A::Changed("member_shutdown"),
            A::CullTimerReset,
            A::Culled,
            A::LeftGroup("a".into()),
            A::JoinedGroup("b".into()),
            A::MemberOrderChanged(MemberOrder::Fifo),
        ]
    );
    assert_eq!(pool.config(), new);
    assert_eq!(
        pool.reconfigure(new).unwrap(),
        [],
        "the same config again does nothing"
    );
}

async fn futures_take(pool: &pooler::Pool<Fake>, n: usize) -> Vec<pooler::Member<Fake>> {
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(pool.take_member(ms(1000)).await.unwrap());
    }
    held
}

/// Regression: members already stopping were counted as members still to stop, so lowering
/// `max_count` was refused with 2 in use and 2 stopping, and stopped every free member with 2
/// free and 2 stopping.
#[tokio::test(start_paused = true)]
async fn lowering_max_count_counts_stopping_members_as_part_of_the_excess() {
    for in_use in [true, false] {
        let config = base()
            .to_builder()
            .init_count(4)
            .max_count(4)
            .member_shutdown(Duration::from_secs(3600))
            .build()
            .unwrap();
        let (pool, probe) = pool_with(config.clone(), Fake::default()).await;
        let mut held: Vec<_> = (0..4).map(|_| pool.try_take_member().unwrap()).collect();
        probe.set_stop(Step::Never);
        pooler::Member::fail(held.pop().unwrap());
        pooler::Member::fail(held.pop().unwrap());
        if !in_use {
            held.clear();
        }
        settle().await;
        let before = counts(&pool);
        assert_eq!(before.3, 2, "two stopping");
        let actions = pool
            .reconfigure(
                config
                    .to_builder()
                    .init_count(2)
                    .max_count(2)
                    .build()
                    .unwrap(),
            )
            .unwrap();
        assert!(
            !actions.iter().any(|a| matches!(a, A::Retired(_))),
            "in use: {in_use}: {actions:?}"
        );
        let (u, f, s, _, _) = counts(&pool);
        assert_eq!(u + f + s, 2, "in use: {in_use}: two members kept");
        drop(held);
    }
}
