//! A dead link, for real: PostgreSQL reached through a network namespace whose link the test
//! takes down, so that packets vanish with no FIN and no RST (`pooler_testkit::blackhole`).
//! With the defaults (no health check, no timeout of the user's own) a query on the dead link
//! fails within the bound the docs state (`TCP_USER_TIMEOUT` 30 s), and an idle member on it
//! is found dead by the keepalives within 30 s and never handed out after (about half a
//! minute of real time each: the bound itself). A request bounded by `PgConnection::until`
//! ends by its deadline and `CANCEL_GRACE` on a dead link and on a frozen server (a backend
//! stopped with SIGSTOP), and a close does not wait on either (seconds each).
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::time::{Duration, Instant};

use pooler::{Member, PoolConfig, Shutdown, TakeError};
use pooler_postgres::PgManager;
use pooler_testkit::blackhole::Blackhole;
use pooler_testkit::{Direction, Proxy, host_port, scenarios, started};

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
    let pool = started(
        PoolConfig::new("pg-dead-query", 1, 1),
        PgManager::new(&url).unwrap(),
    )
    .await;
    scenarios::query_across_a_dead_link(&pool, &hole, BOUND, async |conn| {
        conn.simple_query("SELECT 1").await.map(drop)
    })
    .await;
}

/// An idle member on a link that died is found dead by the keepalives and never handed
/// out: after the bound, a take gets no member whose queries would hang; once the link is
/// back, the pool is full again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_member_on_a_dead_link_is_never_handed_out() {
    let Some((hole, url)) = through_a_blackhole().await else {
        return;
    };
    let pool = started(
        PoolConfig::new("pg-dead-idle", 1, 1),
        PgManager::new(&url).unwrap(),
    )
    .await;
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

/// A close while the server is unreachable: graceful and immediate both end at once — a
/// member's stop says goodbye to the server without waiting to be heard (the link may never
/// carry it), not after `member_shutdown` — and no task of the pool is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_with_the_server_unreachable_ends_at_once_and_leaves_no_task() {
    scenarios::closes_across_a_dead_link(
        async |name| {
            let (hole, url) = through_a_blackhole().await?;
            let pool = started(PoolConfig::new(name, 2, 2), PgManager::new(&url).unwrap()).await;
            Some((hole, pool))
        },
        async |conn| conn.simple_query("SELECT 1").await.map(drop),
    )
    .await;
}

/// A backend process stopped with SIGSTOP (sent again SIGCONT when dropped): a frozen
/// server, whose kernel still acknowledges every packet, so no TCP timeout ever fires.
struct Frozen(i32);

impl Frozen {
    fn stop(pid: i32) -> Frozen {
        signal("-STOP", pid);
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal("-CONT", self.0);
    }
}

fn signal(which: &str, pid: i32) {
    pooler_testkit::signal(u32::try_from(pid).expect("a backend's pid"), which);
}

/// A frozen server (its backend stopped): a request bounded by `PgConnection::until` ends
/// by its deadline and the cancel's grace, with an error that says it may have reached the
/// server — not never, as it did while `until` waited for the cancel to land; the
/// connection is replaced, never handed out again; a graceful close does not wait on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_to_a_frozen_server_ends_at_its_deadline() {
    let Some(url) = common::url().await else {
        return;
    };
    let pool = started(
        PoolConfig::new("pg-frozen", 2, 2),
        PgManager::new(&url).unwrap(),
    )
    .await;
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let (pid, id) = (common::backend_pid(&conn).await, Member::id(&conn));
    let frozen = Frozen::stop(pid);
    let took = ends_at_its_deadline(&conn, conn.simple_query("SELECT 1")).await;
    eprintln!("a request to a frozen server ended after {took:?}");
    drop(conn);
    for _ in 0..2 {
        let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
        assert_ne!(
            Member::id(&conn),
            id,
            "the frozen connection was handed out"
        );
        assert_eq!(conn.simple_query("SELECT 1").await.unwrap().len(), 3);
    }
    let began = Instant::now();
    pool.close(Shutdown::Graceful).await;
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "{:?}",
        began.elapsed()
    );
    drop(frozen);
}

/// The same on a dead link, where the cancel request cannot even be sent: `until` ends by
/// its deadline and the grace, and the close that follows does not wait on the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_on_a_dead_link_ends_at_its_deadline() {
    let Some((hole, url)) = through_a_blackhole().await else {
        return;
    };
    let pool = started(
        PoolConfig::new("pg-dead-until", 1, 1),
        PgManager::new(&url).unwrap(),
    )
    .await;
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    conn.simple_query("SELECT 1").await.unwrap();
    hole.set_down(true);
    let took = ends_at_its_deadline(&conn, conn.simple_query("SELECT 1")).await;
    eprintln!("a request on a dead link ended after {took:?}");
    drop(conn);
    scenarios::closes_within(&pool, Shutdown::Graceful, Duration::from_secs(2)).await;
    hole.set_down(false);
}

/// Runs `request` bounded by `until` with a deadline 300 ms away on a server whose answers
/// do not come (to it nor to its cancel): it must end with `PgError::Deadline` (saying the request may
/// have reached the server) by the deadline and `CANCEL_GRACE`. How long it took.
async fn ends_at_its_deadline<F, T>(conn: &pooler_postgres::PgConnection, request: F) -> Duration
where
    F: Future<Output = Result<T, tokio_postgres::Error>>,
    T: std::fmt::Debug,
{
    let began = tokio::time::Instant::now();
    let deadline = began + Duration::from_millis(300);
    let answer = tokio::time::timeout(Duration::from_secs(10), conn.until(deadline, request))
        .await
        .expect("until ended");
    let took = began.elapsed();
    let e = answer.unwrap_err();
    assert!(
        matches!(e, pooler_postgres::PgError::Deadline { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("may have"), "{e}");
    assert!(
        took < Duration::from_millis(800) + pooler_postgres::CANCEL_GRACE,
        "{took:?}"
    );
    took
}

/// The answers stop on their way back (`Proxy::stall` towards the client: the server runs
/// what it is sent, and nothing it says arrives): a write bounded by `until` ends by its
/// deadline and the grace with `PgError::Deadline`, which says the request may have reached
/// the server — and it did: the row is there. Retrying it blindly would write it twice. The
/// connection is not handed out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_answer_is_lost_says_it_may_have_reached_the_server() {
    let Some(url) = common::url().await else {
        return;
    };
    let admin = common::admin(&url).await;
    let table = format!("faults_lost_{}", std::process::id());
    admin
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (n int)"
        ))
        .await
        .unwrap();
    let proxy = Proxy::start(&host_port(&url)).await;
    let via = format!("postgres://postgres@{}/test?sslmode=disable", proxy.addr());
    let pool = started(
        PoolConfig::new("pg-lost-answer", 1, 1),
        PgManager::new(&via).unwrap(),
    )
    .await;
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let insert = format!("INSERT INTO {table} VALUES (1)");
    conn.batch_execute(&insert).await.unwrap();
    let id = Member::id(&conn);
    proxy.stall(Direction::ToClient, true);
    ends_at_its_deadline(&conn, conn.batch_execute(&insert)).await;
    let rows: i64 = admin
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        rows, 2,
        "the write the error said may have reached the server did"
    );
    drop(conn);
    proxy.stall(Direction::ToClient, false);
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert_ne!(
        Member::id(&conn),
        id,
        "the connection whose answer was lost came back"
    );
    assert_eq!(conn.simple_query("SELECT 1").await.unwrap().len(), 3);
    drop(conn);
    pool.close(Shutdown::Graceful).await;
    admin
        .batch_execute(&format!("DROP TABLE {table}"))
        .await
        .unwrap();
}

/// A slow link (`Proxy::set_delay`: every chunk waits 150 ms each way): a take and a request
/// bounded by `until` still end by their deadlines — the request's cancel crosses the same
/// slow link and lands, and the server answers `query_canceled` — and the connection serves
/// its next user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_slow_link_deadlines_still_hold() {
    let Some(url) = common::url().await else {
        return;
    };
    let proxy = Proxy::start(&host_port(&url)).await;
    let via = format!("postgres://postgres@{}/test?sslmode=disable", proxy.addr());
    let pool = started(
        PoolConfig::new("pg-slow-link", 1, 1),
        PgManager::new(&via).unwrap(),
    )
    .await;
    proxy.set_delay(Duration::from_millis(150));
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let began = tokio::time::Instant::now();
    let answer = conn
        .until(
            began + Duration::from_millis(500),
            conn.batch_execute("SELECT pg_sleep(30)"),
        )
        .await;
    let took = began.elapsed();
    let e = answer.unwrap_err();
    assert_eq!(
        e.code(),
        Some(&tokio_postgres::error::SqlState::QUERY_CANCELED),
        "{e}"
    );
    eprintln!("a request on a slow link ended {took:?} after it began (deadline 500 ms)");
    assert!(
        took < Duration::from_millis(500) + pooler_postgres::CANCEL_GRACE,
        "{took:?}"
    );
    // Held: a take with a deadline ends by it.
    let began = Instant::now();
    assert!(pool.take_member(Duration::from_millis(300)).await.is_err());
    assert!(
        began.elapsed() < Duration::from_millis(800),
        "{:?}",
        began.elapsed()
    );
    let id = Member::id(&conn);
    drop(conn);
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        Member::id(&conn),
        id,
        "a cancelled request that landed leaves it clean"
    );
    assert_eq!(conn.simple_query("SELECT 1").await.unwrap().len(), 3);
    drop(conn);
    proxy.set_delay(Duration::ZERO);
    scenarios::closes_within(&pool, Shutdown::Graceful, Duration::from_secs(2)).await;
}

/// A slow link under load (every chunk waits 50 ms each way): 16 tasks share 4 connections
/// for 2 s, each take with a 300 ms deadline. Every take ends by its deadline, no query
/// fails or is lost, no connection is replaced for being slow, and once the link is fast a
/// take is served at once (`pooler_testkit::scenarios::slow_link_under_load`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_link_under_load_keeps_every_deadline_and_loses_nothing() {
    let Some(url) = common::url().await else {
        return;
    };
    let proxy = Proxy::start(&host_port(&url)).await;
    let via = format!("postgres://postgres@{}/test?sslmode=disable", proxy.addr());
    let pool = started(
        PoolConfig::new("pg-slow-load", 4, 4),
        PgManager::new(&via).unwrap(),
    )
    .await;
    let seen = scenarios::slow_link_under_load(&pool, &proxy, |conn| async move {
        conn.query_one("SELECT $1::int4 + 1", &[&41_i32])
            .await
            .is_ok_and(|row| row.get::<_, i32>(0) == 42)
    })
    .await;
    eprintln!("on a slow link under load: {seen:?}");
    scenarios::closes_within(&pool, Shutdown::Graceful, Duration::from_secs(2)).await;
}
