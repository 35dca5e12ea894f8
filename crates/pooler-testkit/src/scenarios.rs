//! Live scenarios every backend crate runs the same way; each takes the one step that is
//! specific to its client (a query, a connection's server-side id, a count of sessions).

use std::collections::HashSet;
use std::time::Duration;

use pooler::{Manager, Member, Pool, PoolConfig, Shutdown, TakeError};
use tokio::time::Instant;

use crate::{Proxy, eventually};

/// The configuration [`sixty_four_tasks_share_eight`] expects: eight members, and room in
/// the queue for the 56 of the 64 tasks that may wait at once (above the default
/// `queue_max` of 50).
///
/// # Panics
///
/// Never: the configuration is valid.
#[must_use]
pub fn sixty_four_config(name: &str) -> PoolConfig {
    PoolConfig::new(name, 8, 8)
        .to_builder()
        .queue_max(64)
        .build()
        .expect("a valid configuration")
}

/// 64 tasks each take a member of `pool` ([`sixty_four_config`]) 20 times and `ask` it
/// with a number unique to that take; `ask` checks the server's answer and returns the
/// server-side id of the connection that gave it. Checks that at most 8 connections
/// answered. Closes the pool.
///
/// # Cancel safety
///
/// Not meant to be cancelled: a test awaits it to the end. Dropped, it leaves its takers running until the pool closes.
pub async fn sixty_four_tasks_share_eight<M, F, Fut>(pool: &Pool<M>, ask: F)
where
    M: Manager,
    F: Fn(Member<M>, u32) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = u64> + Send,
{
    let tasks: Vec<_> = (0..64u32)
        .map(|i| {
            let (pool, ask) = (pool.clone(), ask.clone());
            tokio::spawn(async move {
                let mut ids = HashSet::new();
                for j in 0..20 {
                    let member = pool.take_member(Duration::from_secs(10)).await.unwrap();
                    ids.insert(ask(member, i * 1000 + j).await);
                }
                ids
            })
        })
        .collect();
    let mut ids = HashSet::new();
    for t in tasks {
        ids.extend(t.await.unwrap());
    }
    assert!(ids.len() <= 8, "{} connections for a pool of 8", ids.len());
    pool.close(Shutdown::Graceful).await;
}

/// The config [`outage_and_recovery`] expects of its pool (2 members at first, 4 at most,
/// a start given up after 2 s), named `name`; for a pool of the same shape in other outage
/// tests too.
#[must_use]
pub fn outage_config(name: &str) -> PoolConfig {
    PoolConfig::builder(name)
        .init_count(2)
        .max_count(4)
        .member_start_timeout(Duration::from_secs(2))
        .build()
        .expect("a valid config")
}

/// Whether a pool learns by itself that the server ended one of its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watched {
    /// A task reads each connection and sees it end: a free member the server killed leaves
    /// the pool without any take, and one killed in use is known dead
    /// ([`Manager::is_broken`]) before it comes back.
    Always,
    /// Nothing reads a connection between uses (MySQL's): the check before a take
    /// (`idle_check_threshold` zero) finds one the server killed.
    AtCheck,
}

/// Connections the server kills — one while free, then one while in use — are never handed
/// out again, and later takers get working ones. `pool` holds two members (`init_count` and
/// `max_count` 2); `id` reads a connection's session id on the server, `kill(id)` has the
/// server end that session, `works` runs a query and says whether it answered. Closes the
/// pool.
///
/// # Cancel safety
///
/// Not meant to be cancelled: a test awaits it to the end.
pub async fn killed_sessions_are_never_handed_out<M: Manager>(
    pool: &Pool<M>,
    watched: Watched,
    id: impl AsyncFn(&mut Member<M>) -> u64,
    mut kill: impl AsyncFnMut(u64),
    works: impl AsyncFn(&mut Member<M>) -> bool,
) {
    let take = async || {
        pool.take_member(Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("a take: {e}"))
    };
    // Killed while free.
    let killed = id(&mut take().await).await;
    let before: Vec<u64> = pool.stats().iter().map(|s| s.id).collect();
    kill(killed).await;
    if watched == Watched::Always {
        eventually("the killed free member is replaced", async || {
            let ids: Vec<u64> = pool.stats().iter().map(|s| s.id).collect();
            ids.len() == 2 && ids != before && pool.utilization().free_count == 2
        })
        .await;
    }
    for _ in 0..10 {
        let mut both = [take().await, take().await];
        for conn in &mut both {
            assert_ne!(id(conn).await, killed, "the dead connection was handed out");
        }
    }

    // Killed while in use: its holder sees the failure, and it is replaced when it comes back
    // (or, unwatched, at the next take's check).
    let mut conn = take().await;
    let killed = id(&mut conn).await;
    kill(killed).await;
    if watched == Watched::Always {
        // The holder's error can come a moment before the connection's task has ended.
        eventually("the holder's connection is known dead", async || {
            pool.manager().is_broken(&conn)
        })
        .await;
    }
    assert!(!works(&mut conn).await, "the holder sees the failure");
    drop(conn);
    for _ in 0..5 {
        let mut conn = take().await;
        assert_ne!(
            id(&mut conn).await,
            killed,
            "the dead connection was handed out"
        );
        assert!(
            works(&mut conn).await,
            "a later taker gets a working connection"
        );
    }
    pool.close(Shutdown::Graceful).await;
}

/// The configuration [`lifetimes_recycle_connections`] expects: four members, each living
/// 1.5 s ± 0.5 s.
///
/// # Panics
///
/// Never: the configuration is valid.
#[must_use]
pub fn lifetime_config(name: &str) -> PoolConfig {
    PoolConfig::new(name, 4, 4)
        .to_builder()
        .max_lifetime(Duration::from_millis(1500))
        .max_lifetime_jitter(Duration::from_millis(500))
        .build()
        .expect("a valid configuration")
}

/// An outage and the recovery from it. `pool` has the [`outage_config`] and was started through
/// `proxy` while the proxy refused connections. Checks that a take that cannot wait fails
/// fast with the start error (or, while an attempt is connecting, is told one is starting),
/// that one that waits through the outage times out naming that error, that starts are spaced
/// by the backoff (at most 12 attempts in 3 s, not a storm; with full jitter a step may leave
/// fewer than one a second), that the pool refills by itself when the proxy opens, that a
/// refilled member `works`, and that members whose links are cut are replaced. Closes the
/// pool.
///
/// # Cancel safety
///
/// Not meant to be cancelled: dropped mid-way, the proxy may stay closed.
pub async fn outage_and_recovery<M: Manager>(
    pool: &Pool<M>,
    proxy: &Proxy,
    works: impl AsyncFn(&mut Member<M>) -> bool,
) {
    assert_eq!(pool.utilization().free_count, 0);
    // A take that cannot wait fails at once. While a backoff attempt is connecting it is told
    // new members are starting (`AllInUse`); between attempts, the start error.
    eventually(
        "a take that cannot wait is told the start error",
        async || match pool.try_take_member().map(drop).unwrap_err() {
            e @ TakeError::Unavailable { .. } => {
                assert!(e.to_string().contains("starting a member failed"), "{e}");
                true
            }
            TakeError::AllInUse { .. } => false,
            e => panic!("a take during an outage: {e}"),
        },
    )
    .await;
    let t = Instant::now();
    let e = pool
        .take_member(Duration::from_millis(700))
        .await
        .map(drop)
        .unwrap_err();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
    assert!(
        matches!(e, TakeError::Unavailable { .. } | TakeError::Timeout { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("starting a member failed"), "{e}");

    let start = proxy.attempts();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let attempts = proxy.attempts() - start;
    assert!(attempts <= 12, "{attempts} connection attempts in 3 s");

    proxy.set_open(true);
    eventually("the pool refills to init_count", async || {
        pool.utilization().free_count == 2
    })
    .await;
    let mut member = pool
        .take_member(Duration::from_secs(5))
        .await
        .map_err(|e| e.to_string())
        .unwrap();
    assert!(works(&mut member).await, "a refilled member works");
    drop(member);

    proxy.cut();
    eventually("members whose links were cut are replaced", async || {
        pool.utilization().free_count == 2 && pool.stats().iter().all(|s| s.id > 2)
    })
    .await;
    pool.close(Shutdown::Graceful).await;
}

/// Every member of `pool` ([`lifetime_config`]: four, each living 1.5 s ± 0.5 s) is replaced after its
/// lifetime: the server-side ids (`id_of`) of the four before and after are disjoint.
///
/// # Cancel safety
///
/// Not meant to be cancelled: a test awaits it to the end.
pub async fn lifetimes_recycle_connections<M: Manager>(
    pool: &Pool<M>,
    id_of: impl AsyncFn(&mut Member<M>) -> i64,
) {
    let ids = async || {
        let mut held = Vec::new();
        let mut ids = HashSet::new();
        for _ in 0..4 {
            let mut member = pool
                .take_member(Duration::from_secs(5))
                .await
                .map_err(|e| e.to_string())
                .unwrap();
            ids.insert(id_of(&mut member).await);
            held.push(member);
        }
        ids
    };
    let first = ids().await;
    assert_eq!(first.len(), 4);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let now = ids().await;
    assert!(
        first.is_disjoint(&now),
        "every connection was replaced after its lifetime: {first:?} {now:?}"
    );
    pool.close(Shutdown::Graceful).await;
}

/// A graceful close of `pool` (`init_count` 5), with one member in use, leaves no task and,
/// once the server has noticed, no session (`sessions` counts the pool's on the server).
///
/// # Cancel safety
///
/// Not meant to be cancelled: dropped, the pool is still closed (see `Pool::close`) but nothing is checked.
pub async fn close_leaves_nothing<M: Manager>(
    pool: &Pool<M>,
    mut sessions: impl AsyncFnMut() -> usize,
) {
    let held = pool
        .take_member(Duration::from_secs(5))
        .await
        .map_err(|e| e.to_string())
        .unwrap();
    assert_eq!(sessions().await, 5);
    let p = pool.clone();
    let closing = tokio::spawn(async move { p.close(Shutdown::Graceful).await });
    // The close has begun once its free members are gone; it then waits for the one held.
    eventually("the close begins", async || {
        pool.utilization().free_count == 0
    })
    .await;
    assert!(
        !closing.is_finished(),
        "a graceful close waits for the member in use"
    );
    drop(held);
    closing.await.unwrap();
    assert_eq!(pool.live_tasks(), 0);
    eventually("the server has no session of the pool", async || {
        sessions().await == 0
    })
    .await;
}

/// A take from `pool` with `deadline` while its server cannot serve (a dead link, a frozen
/// or stopped server): checks that no member is handed out, that the take is refused as a
/// take that found none (its deadline passed, every start is failing, or all are in use),
/// and that it ended within its deadline and 2 s. Returns how long it took.
///
/// # Cancel safety
///
/// Cancel safe: it only takes.
pub async fn refused_while_down<M: Manager>(pool: &Pool<M>, deadline: Duration) -> Duration {
    let began = Instant::now();
    match pool.take_member(deadline).await {
        Ok(member) => panic!(
            "member {} was handed out while the server cannot serve",
            Member::id(&member)
        ),
        Err(e) => assert!(
            matches!(
                e,
                TakeError::Timeout { .. }
                    | TakeError::Unavailable { .. }
                    | TakeError::AllInUse { .. }
            ),
            "{e}"
        ),
    }
    let took = began.elapsed();
    assert!(took < deadline + Duration::from_secs(2), "{took:?}");
    took
}

/// Closes `pool` as `how` says and checks that the close ended within `bound` (a close that
/// has not fails the test then, rather than hang it) and left no task. Returns how long it
/// took.
///
/// # Cancel safety
///
/// Not meant to be cancelled: a test awaits it to the end.
pub async fn closes_within<M: Manager>(pool: &Pool<M>, how: Shutdown, bound: Duration) -> Duration {
    let began = Instant::now();
    tokio::time::timeout(bound, pool.close(how))
        .await
        .unwrap_or_else(|_| panic!("{how:?} close did not end within {bound:?}"));
    let took = began.elapsed();
    eprintln!("{how:?} close took {took:?}");
    assert_eq!(pool.live_tasks(), 0, "{how:?} close left tasks");
    took
}

mod links;
mod restart;

pub use links::{
    UnderLoad, busy_and_idle_across_a_dead_link, checked_across_a_dead_link, checked_config,
    closes_across_a_dead_link, defaults_across_a_dead_link, query_across_a_dead_link,
    slow_link_under_load,
};
pub use restart::{Restarted, restarted_under_writers};
