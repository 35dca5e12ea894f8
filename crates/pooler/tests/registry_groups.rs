//! The Pooler registry and groups of pools.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use pooler::{
    ConfigError, GroupMember, GroupStrategy, Manager, MemberContext, PoolConfig, Pooler,
    PoolerError, Shutdown, TakeError,
};

/// Another manager type, to check typed lookups.
struct Words;

impl Manager for Words {
    type Member = String;
    type Error = std::io::Error;
    async fn start(&self, _: &MemberContext) -> Result<String, Self::Error> {
        Ok("word".into())
    }
}

fn member_of(group: &str, name: &str, init: usize, max: usize) -> PoolConfig {
    PoolConfig::new(name, init, max)
        .to_builder()
        .group(group)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn pools_are_registered_by_name_and_type() {
    let pooler = Pooler::new();
    pooler
        .new_pool(PoolConfig::new("a", 1, 2), Fake::default())
        .await
        .unwrap();
    pooler
        .new_pool(PoolConfig::new("w", 1, 1), Words)
        .await
        .unwrap();

    let e = pooler
        .new_pool(PoolConfig::new("a", 1, 1), Fake::default())
        .await
        .unwrap_err();
    assert_eq!(
        e,
        PoolerError::Config(ConfigError::DuplicateName { pool: "a".into() })
    );
    assert_eq!(
        e.to_string(),
        "pool `a`: a pool of that name already exists"
    );

    assert!(pooler.pool::<Fake>("a").unwrap().try_take_member().is_ok());
    let e = pooler.pool::<Fake>("w").unwrap_err();
    assert!(matches!(e, PoolerError::WrongType { .. }), "{e}");
    assert!(e.to_string().contains("Words"), "{e}");
    assert_eq!(
        pooler.pool::<Fake>("nope").unwrap_err(),
        PoolerError::NoSuchPool {
            pool: "nope".into()
        }
    );

    assert_eq!(pooler.pool_names(), ["a", "w"]);
    let util = pooler.utilization();
    assert_eq!(
        util.iter()
            .map(|(n, u)| (n.as_str(), u.free_count))
            .collect::<Vec<_>>(),
        [("a", 1), ("w", 1)]
    );

    pooler.rm_pool("a", Shutdown::Graceful).await.unwrap();
    assert_eq!(pooler.pool_names(), ["w"]);
    assert!(matches!(
        pooler.rm_pool("a", Shutdown::Graceful).await,
        Err(PoolerError::NoSuchPool { .. })
    ));
    // The name is free again.
    pooler
        .new_pool(PoolConfig::new("a", 0, 1), Fake::default())
        .await
        .unwrap();
    pooler.close(Shutdown::Graceful).await;
    assert!(pooler.pool_names().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_group_member_returns_to_the_pool_it_came_from() {
    let pooler = Pooler::new();
    for name in ["g1", "g2", "g3"] {
        pooler
            .new_pool(member_of("g", name, 1, 1), Fake::default())
            .await
            .unwrap();
    }
    let mut from = HashMap::new();
    let mut held = Vec::new();
    for _ in 0..3 {
        let m = pooler
            .take_group_member::<Fake>("g", Duration::ZERO)
            .await
            .unwrap();
        *from
            .entry(GroupMember::pool_name(&m).to_owned())
            .or_insert(0) += 1;
        held.push(m);
    }
    assert_eq!(
        from.len(),
        3,
        "falls back to the others when one is busy: {from:?}"
    );
    let e = pooler
        .take_group_member::<Fake>("g", Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(e, TakeError::AtCapacity { .. }), "{e}");
    let names: Vec<String> = held
        .iter()
        .map(|m| GroupMember::pool_name(m).to_owned())
        .collect();
    drop(held);
    for name in names {
        assert_eq!(
            pooler.pool::<Fake>(&name).unwrap().utilization().free_count,
            1,
            "{name}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn random_selection_spreads_takes_over_the_group() {
    let pooler = Pooler::new();
    for name in ["r1", "r2", "r3"] {
        pooler
            .new_pool(member_of("r", name, 1, 1), Fake::default())
            .await
            .unwrap();
    }
    let mut from = HashMap::new();
    for _ in 0..300 {
        let m = pooler
            .take_group_member::<Fake>("r", Duration::ZERO)
            .await
            .unwrap();
        *from
            .entry(GroupMember::pool_name(&m).to_owned())
            .or_insert(0) += 1;
    }
    assert_eq!(from.len(), 3);
    assert!(from.values().all(|n| (50..=150).contains(n)), "{from:?}");
}

#[tokio::test(start_paused = true)]
async fn most_free_first_picks_the_emptiest_pool() {
    let pooler = Pooler::new();
    pooler
        .new_pool(member_of("m", "small", 1, 1), Fake::default())
        .await
        .unwrap();
    pooler
        .new_pool(member_of("m", "big", 4, 4), Fake::default())
        .await
        .unwrap();
    pooler.set_group_strategy("m", GroupStrategy::MostFree);
    let mut held = Vec::new();
    for _ in 0..3 {
        let m = pooler
            .take_group_member::<Fake>("m", Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(GroupMember::pool_name(&m), "big");
        held.push(m);
    }
    // Now both have one free; either is fine, then the other.
    let a = pooler
        .take_group_member::<Fake>("m", Duration::ZERO)
        .await
        .unwrap();
    let b = pooler
        .take_group_member::<Fake>("m", Duration::ZERO)
        .await
        .unwrap();
    assert_ne!(GroupMember::pool_name(&a), GroupMember::pool_name(&b));
}

#[tokio::test(start_paused = true)]
async fn a_group_take_waits_on_every_pool_of_the_group() {
    let pooler = Pooler::new();
    pooler
        .new_pool(member_of("w", "w1", 1, 1), Fake::default())
        .await
        .unwrap();
    pooler
        .new_pool(member_of("w", "w2", 1, 1), Fake::default())
        .await
        .unwrap();
    let a = pooler
        .take_group_member::<Fake>("w", Duration::ZERO)
        .await
        .unwrap();
    let b = pooler
        .take_group_member::<Fake>("w", Duration::ZERO)
        .await
        .unwrap();
    let (first, second) = if GroupMember::pool_name(&a) == "w2" {
        (a, b)
    } else {
        (b, a)
    };
    let p = pooler.clone();
    let waiter = tokio::spawn(async move {
        p.take_group_member::<Fake>("w", Duration::from_secs(10))
            .await
    });
    settle().await;
    drop(first); // w2's member comes back: the group waiter gets it, wherever it queued first
    let got = waiter.await.unwrap().unwrap();
    assert_eq!(GroupMember::pool_name(&got), "w2");
    settle().await;
    let queued: usize = pooler
        .utilization()
        .iter()
        .map(|(_, u)| u.queued_count)
        .sum();
    assert_eq!(queued, 0, "it left the other pool's queue");
    drop(second);
    assert_eq!(
        pooler.pool::<Fake>("w1").unwrap().utilization().free_count,
        1,
        "no member swallowed"
    );
}

#[tokio::test(start_paused = true)]
async fn group_membership_follows_reconfigure() {
    let pooler = Pooler::new();
    let pool = pooler
        .new_pool(member_of("x", "p", 1, 1), Fake::default())
        .await
        .unwrap();
    assert_eq!(pooler.group_members("x"), ["p"]);
    pool.reconfigure(member_of("y", "p", 1, 1)).unwrap();
    assert!(pooler.group_members("x").is_empty());
    let e = pooler
        .take_group_member::<Fake>("x", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(e, TakeError::NoSuchGroup { .. }), "{e}");
    assert_eq!(e.to_string(), "group `x`: no such group, or no pool in it");
    assert!(
        pooler
            .take_group_member::<Fake>("y", Duration::ZERO)
            .await
            .is_ok()
    );
    // Pools of another member type are not part of a typed group take.
    assert!(matches!(
        pooler.take_group_member::<Words>("y", Duration::ZERO).await,
        Err(TakeError::NoSuchGroup { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn rm_group_closes_every_pool_of_the_group() {
    let pooler = Pooler::new();
    let mut probes = Vec::new();
    for name in ["a", "b"] {
        let fake = Fake::default();
        probes.push(fake.probe.clone());
        pooler
            .new_pool(member_of("z", name, 2, 2), fake)
            .await
            .unwrap();
    }
    pooler
        .new_pool(PoolConfig::new("other", 1, 1), Fake::default())
        .await
        .unwrap();
    assert_eq!(pooler.rm_group("z", Shutdown::Graceful).await.unwrap(), 2);
    assert_eq!(pooler.pool_names(), ["other"]);
    assert!(probes.iter().all(|p| p.alive() == 0));
    assert_eq!(
        pooler.rm_group("z", Shutdown::Graceful).await.unwrap_err(),
        PoolerError::NoSuchGroup { group: "z".into() }
    );
}

/// Regression: `rm_group` and `Pooler::close` closed one pool after another, so a future
/// dropped while the first close waited for a member in use left the others open and
/// registered.
#[tokio::test(start_paused = true)]
async fn dropping_rm_group_or_close_after_one_poll_still_closes_every_pool() {
    for whole_registry in [false, true] {
        let pooler = Pooler::new();
        let mut probes = Vec::new();
        let mut pools = Vec::new();
        let mut held = Vec::new();
        for name in ["a", "b"] {
            let fake = Fake::default();
            probes.push(fake.probe.clone());
            let pool = pooler
                .new_pool(member_of("z", name, 1, 1), fake)
                .await
                .unwrap();
            held.push(pool.take_member(ms(10)).await.unwrap());
            pools.push(pool);
        }
        let mut closing: std::pin::Pin<Box<dyn Future<Output = ()> + '_>> = if whole_registry {
            Box::pin(pooler.close(Shutdown::Graceful))
        } else {
            Box::pin(async {
                pooler.rm_group("z", Shutdown::Graceful).await.unwrap();
            })
        };
        assert!(
            futures_util::poll!(closing.as_mut()).is_pending(),
            "a graceful close waits for the members in use"
        );
        drop(closing);
        assert!(pooler.pool_names().is_empty(), "every pool was removed");
        for pool in &pools {
            let refused = pool.try_take_member().unwrap_err();
            assert!(matches!(refused, TakeError::Closed { .. }), "{refused:?}");
        }
        drop(held);
        settle().await;
        let alive: Vec<usize> = probes.iter().map(|p| p.alive()).collect();
        assert_eq!(
            alive,
            [0, 0],
            "members in use are stopped when they come back"
        );
    }
}
