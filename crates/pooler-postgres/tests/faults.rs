//! A dead link, for real: PostgreSQL reached through a network namespace whose link the test
//! takes down, so that packets vanish with no FIN and no RST (`pooler_testkit::blackhole`).
//! With the defaults (no health check, no timeout of the user's own) a query on the dead link
//! fails within the bound the docs state (`TCP_USER_TIMEOUT` 30 s), and an idle member on it
//! is found dead by the keepalives within 30 s and never handed out after. Each test runs
//! about half a minute of real time: the bound itself.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::time::{Duration, Instant};

use pooler::{Member, Pool, PoolConfig, Shutdown, TakeError};
use pooler_postgres::PgManager;
use pooler_testkit::blackhole::Blackhole;

/// The bound the defaults keep a dead link's detection under, with a margin for the
/// kernel's timer granularity.
const BOUND: Duration = Duration::from_secs(40);

async fn through_a_blackhole() -> Option<(Blackhole, String)> {
    let url = common::url().await?;
    let hole = Blackhole::in_front_of(&url)?;
    let via = format!(
        "postgres://postgres@{}/test?sslmode=disable&connect_timeout=3",
        hole.addr()
    );
    Some((hole, via))
}

/// A query sent into a dead link fails within the bound, not after the kernel's ~15 min of
/// retransmissions; the pool then replaces the member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_on_a_dead_link_fails_within_the_bound() {
    let Some((hole, url)) = through_a_blackhole().await else {
        return;
    };
    let pool = Pool::start(
        PoolConfig::new("pg-dead-query", 1, 1),
        PgManager::new(&url).unwrap(),
    )
    .await
    .unwrap();
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    conn.simple_query("SELECT 1").await.expect("alive before");
    hole.set_down(true);
    let began = Instant::now();
    let answer = tokio::time::timeout(
        BOUND + Duration::from_secs(20),
        conn.simple_query("SELECT 1"),
    )
    .await
    .expect("the query did not hang past the bound");
    let took = began.elapsed();
    eprintln!("a query on a dead link failed after {took:?}");
    assert!(answer.is_err(), "the query failed");
    assert!(took <= BOUND, "failed after {took:?}, past {BOUND:?}");
    drop(conn);
    hole.set_down(false);
    pool.close(Shutdown::Immediate).await;
}

/// An idle member on a link that died is found dead by the keepalives and never handed
/// out: after the bound, a take gets no member whose queries would hang; once the link is
/// back, the pool is full again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_member_on_a_dead_link_is_never_handed_out() {
    let Some((hole, url)) = through_a_blackhole().await else {
        return;
    };
    let pool = Pool::start(
        PoolConfig::new("pg-dead-idle", 1, 1),
        PgManager::new(&url).unwrap(),
    )
    .await
    .unwrap();
    let first = {
        let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
        conn.simple_query("SELECT 1").await.unwrap();
        Member::id(&conn)
    };
    hole.set_down(true);
    let began = Instant::now();
    // Found dead: the member leaves the pool (its driver ended), within the bound.
    loop {
        let u = pool.utilization();
        if u.free_count == 0 {
            break;
        }
        assert!(
            began.elapsed() < BOUND,
            "the dead member is still free after {BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "an idle member on a dead link was found dead after {:?}",
        began.elapsed()
    );
    // A take now gets no member at all, never the dead one.
    match pool.take_member(Duration::from_millis(500)).await {
        Err(
            TakeError::Timeout { .. } | TakeError::Unavailable { .. } | TakeError::AllInUse { .. },
        ) => {}
        Err(e) => panic!("unexpected refusal: {e}"),
        Ok(conn) => {
            assert_ne!(Member::id(&conn), first, "the dead member was handed out");
            panic!("a member was handed out while the link is down");
        }
    }
    hole.set_down(false);
    let back = Instant::now();
    let conn = pool
        .take_member(Duration::from_secs(30))
        .await
        .expect("a member once the link is back");
    conn.simple_query("SELECT 1").await.unwrap();
    eprintln!("full again {:?} after the link came back", back.elapsed());
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}
