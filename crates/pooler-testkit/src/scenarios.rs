//! Live scenarios every backend crate runs the same way; each takes the one step that is
//! specific to its client (a query, a connection's server-side id, a count of sessions).

use std::collections::HashSet;
use std::time::Duration;

use pooler::{Manager, Member, MemberStatus, Pool, PoolConfig, Shutdown, TakeError};
use tokio::time::Instant;

use crate::{Proxy, eventually};

/// 64 tasks each take a member of `pool` (8 members, `queue_max` 64) 20 times and `ask` it
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

/// Every member of `pool` (`init_count` 4, `max_lifetime` 1.5 s ± 0.5 s) is replaced after its
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

/// Closes `pool` as `how` says and checks that the close ended within `bound` and left no
/// task. Returns how long it took.
///
/// # Cancel safety
///
/// Not meant to be cancelled: a test awaits it to the end.
pub async fn closes_within<M: Manager>(pool: &Pool<M>, how: Shutdown, bound: Duration) -> Duration {
    let began = Instant::now();
    pool.close(how).await;
    let took = began.elapsed();
    assert!(took < bound, "{how:?} close took {took:?}");
    assert_eq!(pool.live_tasks(), 0, "{how:?} close left tasks");
    took
}

/// The config [`checked_across_a_dead_link`] expects: one member, checked before every take
/// (`idle_check_threshold` 0), each check and start bounded by 2 s.
///
/// # Panics
///
/// Never: the config is valid.
#[must_use]
pub fn checked_config(name: &str) -> PoolConfig {
    PoolConfig::builder(name)
        .init_count(1)
        .max_count(1)
        .idle_check_threshold(Duration::ZERO)
        .member_start_timeout(Duration::from_secs(2))
        .build()
        .expect("a valid config")
}

/// A member idle on a link that dies is checked before it is handed out — the check times
/// out at `member_start_timeout` — and replaced, never handed out: the take ends at its
/// deadline with no member; once the link is back the pool serves again with a new member
/// that `works`; a close while the link is down does not wait on it and leaves no task.
/// `pool` has the [`checked_config`] and reaches its server through `hole`. Closes the pool.
///
/// # Cancel safety
///
/// Not meant to be cancelled: dropped mid-way, the link may stay down.
pub async fn checked_across_a_dead_link<M: Manager>(
    pool: &Pool<M>,
    hole: &crate::blackhole::Blackhole,
    works: impl AsyncFn(&mut Member<M>) -> bool,
) {
    // The check gives up at `member_start_timeout`.
    let found_within = pool.config().member_start_timeout;
    across_a_dead_link(pool, hole, Duration::ZERO, found_within, works).await;
}

/// With the pool's defaults, a member idle on a link that dies is checked before it is
/// handed out because its manager asks for a check of members idle past `idle`
/// (`Manager::idle_check_threshold`), and the check gives up after `check_timeout`: the member
/// is replaced, never handed out, and the take ends at its deadline with no member; once the
/// link is back the pool serves again with a new member that `works`; a close while the
/// link is down does not wait on it. `pool` has one member and reaches its server through
/// `hole`; its configuration sets no `idle_check_threshold`. Closes the pool.
///
/// # Cancel safety
///
/// Not cancel safe: cancelled midway, the link may be left down.
pub async fn defaults_across_a_dead_link<M: Manager>(
    pool: &Pool<M>,
    hole: &crate::blackhole::Blackhole,
    idle: Duration,
    check_timeout: Duration,
    works: impl AsyncFn(&mut Member<M>) -> bool,
) {
    across_a_dead_link(pool, hole, idle, check_timeout, works).await;
}

/// The fault both dead-link scenarios run: a member used, back on the free list, the link
/// down, `idle` waited, a take refused — the member on the dead link found dead (stopping or
/// gone) within `found_within` of the take, the take ending at its deadline 2 s later; the
/// link up, a new member served; a close with the link down.
async fn across_a_dead_link<M: Manager>(
    pool: &Pool<M>,
    hole: &crate::blackhole::Blackhole,
    idle: Duration,
    found_within: Duration,
    works: impl AsyncFn(&mut Member<M>) -> bool,
) {
    let first = {
        let mut member = pool.take_member(Duration::from_secs(5)).await.unwrap();
        assert!(works(&mut member).await, "a member works before the fault");
        Member::id(&member)
    };
    // Back on the free list (a recycle on return, diesel-async's, must end first), then idle.
    eventually("the member is free", async || {
        pool.utilization().in_use_count == 0
    })
    .await;
    hole.set_down(true);
    // Idle past the manager's threshold, if any: the next take checks it.
    if !idle.is_zero() {
        tokio::time::sleep(idle + Duration::from_millis(200)).await;
    }
    let deadline = found_within + Duration::from_secs(2);
    let (took, ()) = tokio::join!(refused_while_down(pool, deadline), async {
        tokio::time::sleep(found_within + Duration::from_millis(500)).await;
        let alive = pool
            .stats()
            .into_iter()
            .any(|m| m.id == first && matches!(m.status, MemberStatus::Free | MemberStatus::InUse));
        assert!(
            !alive,
            "the member on the dead link was not found dead within {found_within:?}"
        );
    });
    eprintln!("a take over a dead link ended after {took:?}");
    hole.set_down(false);
    let back = Instant::now();
    let mut member = pool
        .take_member(Duration::from_secs(30))
        .await
        .expect("a member once the link is back");
    assert_ne!(
        Member::id(&member),
        first,
        "the member on the dead link came back"
    );
    assert!(
        works(&mut member).await,
        "a member works once the link is back"
    );
    eprintln!(
        "serving again {:?} after the link came back",
        back.elapsed()
    );
    drop(member);
    hole.set_down(true);
    closes_within(pool, Shutdown::Graceful, Duration::from_secs(3)).await;
    hole.set_down(false);
}

/// What [`slow_link_under_load`] saw.
#[derive(Debug, Clone, Copy)]
pub struct UnderLoad {
    /// Uses that took a member and whose work succeeded.
    pub served: usize,
    /// Takes refused (their deadline passed, or the queue was full).
    pub refused: usize,
    /// The longest a take waited, refused or not.
    pub longest_take: Duration,
}

/// The ids of every member of `pool`, all taken at once (it must be full and idle).
async fn member_ids<M: Manager>(pool: &Pool<M>) -> HashSet<u64> {
    let mut held = Vec::new();
    for _ in 0..pool.utilization().max_count {
        held.push(
            pool.take_member(Duration::from_secs(5))
                .await
                .expect("every member of the pool"),
        );
    }
    held.iter().map(|m| Member::id(m)).collect()
}

/// A slow link under load: 16 tasks take members of `pool` (4 members, full and idle when
/// it begins; it reaches its server through `proxy`) for 2 s with a deadline of 300 ms
/// each, and run `work` on each member (one or a few requests; `true` if the answers were
/// right) while every chunk waits 50 ms each way. Checks that every take ended by its
/// deadline (a margin of 250 ms), that no work failed (a slow answer is not a failure, and
/// nothing is lost), that some uses were served, that no member was replaced for being
/// slow, and that once the link is fast again a take and its work end within 2 s. Returns
/// what it saw.
///
/// # Panics
///
/// When a check fails, or a task panicked.
///
/// # Cancel safety
///
/// Not meant to be cancelled: dropped, it leaves the link slow and its tasks running until
/// the pool closes.
pub async fn slow_link_under_load<M, F, Fut>(pool: &Pool<M>, proxy: &Proxy, work: F) -> UnderLoad
where
    M: Manager,
    F: Fn(Member<M>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send,
{
    let (delay, tasks, load, deadline) = (
        Duration::from_millis(50),
        16,
        Duration::from_secs(2),
        Duration::from_millis(300),
    );
    let before = member_ids(pool).await;
    proxy.set_delay(delay);
    let until = Instant::now() + load;
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (pool, work) = (pool.clone(), work.clone());
            tokio::spawn(async move {
                let (mut served, mut refused, mut failed) = (0, 0, 0);
                let mut longest = Duration::ZERO;
                while Instant::now() < until {
                    let began = Instant::now();
                    let taken = pool.take_member(deadline).await;
                    longest = longest.max(began.elapsed());
                    match taken {
                        Ok(member) => {
                            if work(member).await {
                                served += 1;
                            } else {
                                failed += 1;
                            }
                        }
                        Err(e) => {
                            assert!(
                                matches!(
                                    e,
                                    TakeError::Timeout { .. } | TakeError::QueueFull { .. }
                                ),
                                "{e}"
                            );
                            refused += 1;
                        }
                    }
                }
                (served, refused, failed, longest)
            })
        })
        .collect();
    let mut seen = UnderLoad {
        served: 0,
        refused: 0,
        longest_take: Duration::ZERO,
    };
    let mut failed = 0;
    for handle in handles {
        let (served, refused, f, longest) = handle.await.expect("a task of the load");
        seen.served += served;
        seen.refused += refused;
        failed += f;
        seen.longest_take = seen.longest_take.max(longest);
    }
    proxy.set_delay(Duration::ZERO);
    assert_eq!(failed, 0, "uses whose work failed on a slow link: {seen:?}");
    assert!(seen.served > 0, "nothing served: {seen:?}");
    assert!(
        seen.longest_take <= deadline + Duration::from_millis(250),
        "a take waited past its deadline: {seen:?}"
    );
    assert_eq!(
        member_ids(pool).await,
        before,
        "a member was replaced for being slow: {seen:?}"
    );
    let began = Instant::now();
    let member = pool
        .take_member(Duration::from_secs(2))
        .await
        .expect("a member once the link is fast");
    assert!(work(member).await, "a use once the link is fast");
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "{:?}",
        began.elapsed()
    );
    seen
}

/// What [`restarted_under_writers`] saw.
#[derive(Debug, Clone, Copy)]
pub struct Restarted {
    /// Writes acknowledged, before, during and after.
    pub acknowledged: usize,
    /// How long a take while the server was down took to be refused.
    pub refused: Duration,
    /// From the server listening again to the first write acknowledged after.
    pub served_again: Duration,
}

/// A server killed and started again on its port while four writers run: `server(true)`
/// kills it (no goodbye to its clients), `server(false)` starts it again and returns once it
/// listens. Each writer takes a member of `pool` (deadline 500 ms) and `write`s a value of
/// its own, unique in the run; `stored` reads back every value the server has, after the
/// restart. Checks that a take while the server is down is refused by its deadline with no
/// member handed out, that the pool serves again by itself within 5 s of the server
/// listening (the start backoff's step is at most 4 s however long the outage, and a
/// server's boot makes it long: docs/design.md, "Failing starts"), and that every
/// acknowledged write is stored. The writers run for 3 s after the restart, and on until the
/// first write after it is acknowledged, or 6 s; a write unanswered for 30 s fails the check.
///
/// # Panics
///
/// When a check fails, or a writer panicked.
///
/// # Cancel safety
///
/// Not meant to be cancelled: dropped, it leaves its writers running until the pool closes.
pub async fn restarted_under_writers<M, W, Fut>(
    pool: &Pool<M>,
    write: W,
    mut server: impl FnMut(bool),
    stored: impl AsyncFnOnce() -> HashSet<i64>,
) -> Restarted
where
    M: Manager,
    W: Fn(Member<M>, i64) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send,
{
    use std::sync::atomic::{AtomicBool, Ordering};
    // A write on a killed server's connection fails when the connection does: a write
    // unanswered this long hangs, and fails the check rather than the run.
    const HUNG: Duration = Duration::from_secs(30);
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    // Raised once the server listens again; then, by the first write acknowledged after.
    let restarted = std::sync::Arc::new(AtomicBool::new(false));
    let served = std::sync::Arc::new(AtomicBool::new(false));
    let begun = Instant::now();
    let writers: Vec<_> = (0..4_i64)
        .map(|writer| {
            let (pool, stop, write) = (pool.clone(), stop.clone(), write.clone());
            let (restarted, served) = (restarted.clone(), served.clone());
            tokio::spawn(async move {
                // Each write: its value, when it ended, and whether it was acknowledged; and
                // the writes still unanswered after 30 s, given up on.
                let (mut writes, mut hung) = (Vec::new(), Vec::new());
                let mut n = 0_i64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let v = writer * 1_000_000 + n;
                    let acknowledged = match pool.take_member(Duration::from_millis(500)).await {
                        Ok(member) => {
                            let write = tokio::time::timeout(HUNG, write(member, v));
                            write.await.unwrap_or_else(|_| {
                                hung.push(v);
                                false
                            })
                        }
                        Err(_) => false,
                    };
                    if !acknowledged {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    } else if restarted.load(Ordering::Relaxed) {
                        served.store(true, Ordering::Relaxed);
                    }
                    writes.push((v, begun.elapsed(), acknowledged));
                }
                (writes, hung)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    server(true);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let refused = refused_while_down(pool, Duration::from_millis(500)).await;
    server(false);
    restarted.store(true, Ordering::Relaxed);
    let restarted = begun.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    while !served.load(Ordering::Relaxed) && begun.elapsed() - restarted < Duration::from_secs(6) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let (mut writes, mut hung) = (Vec::new(), Vec::new());
    for writer in writers {
        let (its, its_hung) = writer.await.expect("a writer");
        writes.extend(its);
        hung.extend(its_hung);
    }
    assert!(
        hung.is_empty(),
        "writes unanswered after {HUNG:?}: {hung:?}"
    );
    let served_again = writes
        .iter()
        .filter(|(_, ended, ok)| *ok && *ended > restarted)
        .map(|(_, ended, _)| *ended - restarted)
        .min()
        .expect("no write acknowledged within 6 s of the restart");
    let acknowledged: Vec<i64> = writes
        .iter()
        .filter(|(.., ok)| *ok)
        .map(|(v, ..)| *v)
        .collect();
    let stored = stored().await;
    let lost: Vec<_> = acknowledged
        .iter()
        .filter(|v| !stored.contains(v))
        .collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    assert!(
        served_again < Duration::from_secs(5),
        "served again only {served_again:?} after the restart"
    );
    Restarted {
        acknowledged: acknowledged.len(),
        refused,
        served_again,
    }
}
