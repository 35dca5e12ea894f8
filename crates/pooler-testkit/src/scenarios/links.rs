//! A link that dies without a word, and a slow link under load (docs/faults.md).

use std::collections::HashSet;
use std::time::Duration;

use pooler::{Manager, Member, MemberStatus, Pool, PoolConfig, Shutdown, TakeError};
use tokio::time::Instant;

use super::{closes_within, refused_while_down};
use crate::{Proxy, eventually};

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

/// A query sent into a link that dies fails within `bound` — the dead-link bound the
/// backend's defaults promise (`TCP_USER_TIMEOUT`), not the kernel's ~15 minutes of
/// retransmissions — and the member it ran on is not handed out again. `pool` has one member
/// and reaches its server through `hole`; `query` is one round trip, `Ok` when answered.
/// Closes the pool.
///
/// # Panics
///
/// When the query is answered, hangs past `bound`, or the member is handed out again.
///
/// # Cancel safety
///
/// Not cancel safe: cancelled midway, the link may be left down.
pub async fn query_across_a_dead_link<M: Manager, E>(
    pool: &Pool<M>,
    hole: &crate::blackhole::Blackhole,
    bound: Duration,
    query: impl AsyncFn(&mut Member<M>) -> Result<(), E>,
) {
    let mut member = before_the_fault(pool).await;
    assert!(query(&mut member).await.is_ok(), "alive before the fault");
    hole.set_down(true);
    fails_within(&mut member, bound, &query).await;
    drop(member);
    assert!(
        pool.take_member(Duration::from_millis(500)).await.is_err(),
        "the member on the dead link is not handed out again"
    );
    hole.set_down(false);
    pool.close(Shutdown::Immediate).await;
}

/// A close while the link to the server is dead, graceful and then immediate: `start` puts a
/// blackhole in front of the server and starts a pool through it (`None`: the test is
/// skipped); after a member answered `query`, the link goes down and the close ends within
/// 2 s — a member's stop says goodbye to the server without waiting to be heard (the link
/// may never carry it), not after `member_shutdown` — and leaves no task of the pool.
///
/// # Panics
///
/// When the member does not answer before the fault, or a close outlasts 2 s or leaves a
/// task.
///
/// # Cancel safety
///
/// Not cancel safe: cancelled midway, the link may be left down.
pub async fn closes_across_a_dead_link<M: Manager, E>(
    start: impl AsyncFn(&str) -> Option<(crate::blackhole::Blackhole, Pool<M>)>,
    query: impl AsyncFn(&mut Member<M>) -> Result<(), E>,
) {
    for how in [Shutdown::Graceful, Shutdown::Immediate] {
        let Some((hole, pool)) = start(&format!("dead-close-{how:?}")).await else {
            return;
        };
        {
            let mut member = before_the_fault(&pool).await;
            assert!(query(&mut member).await.is_ok(), "alive before the fault");
        }
        hole.set_down(true);
        closes_within(&pool, how, Duration::from_secs(2)).await;
        hole.set_down(false);
    }
}

/// As [`query_across_a_dead_link`], with a second member idle meanwhile, for a backend whose
/// connections are read by a task of their own (the pool sees one end): the query on the
/// busy member fails within `bound`, the idle member is found dead within `bound` and leaves
/// the pool without being taken, neither is handed out while the link is down, and once it
/// is back the pool serves a member that answers `query`. `pool` has two members. Closes
/// the pool.
///
/// # Panics
///
/// When the query is answered or hangs past `bound`, the idle member is still free after
/// `bound`, or a member is handed out while the link is down.
///
/// # Cancel safety
///
/// Not cancel safe: cancelled midway, the link may be left down.
pub async fn busy_and_idle_across_a_dead_link<M: Manager, E>(
    pool: &Pool<M>,
    hole: &crate::blackhole::Blackhole,
    bound: Duration,
    query: impl AsyncFn(&mut Member<M>) -> Result<(), E>,
) {
    let mut busy = before_the_fault(pool).await;
    let idle = {
        let mut idle = before_the_fault(pool).await;
        assert!(query(&mut idle).await.is_ok(), "alive before the fault");
        Member::id(&idle)
    };
    assert!(query(&mut busy).await.is_ok(), "alive before the fault");
    hole.set_down(true);
    let began = Instant::now();
    fails_within(&mut busy, bound, &query).await;
    drop(busy);
    while pool.utilization().free_count > 0 {
        assert!(
            began.elapsed() < bound,
            "the dead idle member is still free after {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "an idle member on a dead link was found dead after {:?}",
        began.elapsed()
    );
    if let Ok(member) = pool.take_member(Duration::from_millis(500)).await {
        assert_ne!(Member::id(&member), idle, "the dead member was handed out");
        panic!("a member was handed out while the link is down");
    }
    served_once_back(pool, hole, async |member| query(member).await.is_ok()).await;
    pool.close(Shutdown::Immediate).await;
}

/// A member taken before the link goes down. The pool's first starts run through forwarders
/// that have just come up, and a start that fails there is retried with the pool's backoff:
/// the take waits as long as [`served_once_back`]'s, so only a pool that cannot start at all
/// fails the scenario here — before the fault, and saying so.
async fn before_the_fault<M: Manager>(pool: &Pool<M>) -> Member<M> {
    match pool.take_member(Duration::from_secs(30)).await {
        Ok(member) => member,
        Err(e) => panic!("no member before the fault (the link is up): {e}"),
    }
}

/// The link back up: a take gets a member within 30 s, and it `works`; its id.
async fn served_once_back<M: Manager>(
    pool: &Pool<M>,
    hole: &crate::blackhole::Blackhole,
    works: impl AsyncFn(&mut Member<M>) -> bool,
) -> u64 {
    hole.set_down(false);
    let back = Instant::now();
    let mut member = pool
        .take_member(Duration::from_secs(30))
        .await
        .expect("a member once the link is back");
    assert!(
        works(&mut member).await,
        "a member works once the link is back"
    );
    eprintln!(
        "serving again {:?} after the link came back",
        back.elapsed()
    );
    Member::id(&member)
}

/// `query` on `member`, over a link that is down: it fails, within `bound`.
async fn fails_within<M: Manager, E>(
    member: &mut Member<M>,
    bound: Duration,
    query: &impl AsyncFn(&mut Member<M>) -> Result<(), E>,
) {
    let began = Instant::now();
    let answer = tokio::time::timeout(bound + Duration::from_secs(10), query(member))
        .await
        .expect("the query did not hang past the bound");
    let took = began.elapsed();
    eprintln!("a query on a dead link failed after {took:?}");
    assert!(answer.is_err(), "the query failed");
    assert!(took <= bound, "failed after {took:?}, past {bound:?}");
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
        let mut member = before_the_fault(pool).await;
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
    let id = served_once_back(pool, hole, works).await;
    assert_ne!(id, first, "the member on the dead link came back");
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
