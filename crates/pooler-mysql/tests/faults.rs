//! A dead link, for real: MariaDB reached through a network namespace whose link the test
//! takes down, so packets vanish with no FIN and no RST (`pooler_testkit::blackhole`).
//! mysql_async opens its own sockets and offers only the keepalive's idle time; the manager
//! sets `TCP_USER_TIMEOUT` and the keepalive probes on the socket its connect opened
//! (`LinkBounds`), and the check before a take (`idle_check_threshold`), bounded by
//! `member_start_timeout`, keeps a member on a dead link from being handed out
//! (docs/faults.md). A few seconds of real time, 30 for a query on a dead link.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use pooler::{Member, PoolConfig, Shutdown};
use pooler_mysql::MysqlManager;
use pooler_testkit::blackhole::Blackhole;
use pooler_testkit::{Direction, Proxy, host_port, scenarios, started};

/// With a check before each take, a member idle on a link that died is checked — the check
/// times out at `member_start_timeout` — and replaced, never handed out: the take ends at its
/// deadline with no member; once the link is back the pool serves again. A close while the
/// server is unreachable does not wait on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_member_on_a_dead_link_is_checked_and_never_handed_out() {
    let Some((hole, via)) = behind_a_blackhole().await else {
        return;
    };
    let pool = started(
        scenarios::checked_config("mysql-dead"),
        MysqlManager::new(&via).unwrap(),
    )
    .await;
    scenarios::checked_across_a_dead_link(&pool, &hole, async |conn| {
        conn.query_first::<i64, _>("SELECT 1").await.ok().flatten() == Some(1)
    })
    .await;
}

/// With the pool's defaults (no `idle_check_threshold` in its configuration) the manager's
/// own threshold applies ([`pooler_mysql::DEFAULT_IDLE_CHECK`]): a connection idle on a
/// link that died is pinged before a take hands it out, the ping gives up after
/// [`pooler_mysql::CHECK_TIMEOUT`], and the connection is replaced, never handed out — where
/// before its first query waited for the kernel (about 15 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_defaults_an_idle_member_on_a_dead_link_is_never_handed_out() {
    let Some((hole, via)) = behind_a_blackhole().await else {
        return;
    };
    let pool = started(
        PoolConfig::new("mysql-dead-defaults", 1, 1),
        MysqlManager::new(&via).unwrap(),
    )
    .await;
    scenarios::defaults_across_a_dead_link(
        &pool,
        &hole,
        pooler_mysql::DEFAULT_IDLE_CHECK,
        pooler_mysql::CHECK_TIMEOUT,
        async |conn| conn.query_first::<i64, _>("SELECT 1").await.ok().flatten() == Some(1),
    )
    .await;
}

/// The bound the defaults keep a dead link's detection under, with a margin for the
/// kernel's timer granularity.
const BOUND: Duration = Duration::from_secs(40);

/// A query sent into a link that died fails within the bound (`TCP_USER_TIMEOUT`, 30 s by
/// default), not after the kernel's ~15 minutes of retransmissions; the connection is then
/// replaced, never handed out again. Without the bounds (`link_bounds(None)`) the query is
/// still waiting when the test gives up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_on_a_dead_link_fails_within_the_bound() {
    let Some((hole, via)) = behind_a_blackhole().await else {
        return;
    };
    let pool = started(
        PoolConfig::new("mysql-dead-query", 1, 1),
        MysqlManager::new(&via).unwrap(),
    )
    .await;
    scenarios::query_across_a_dead_link(&pool, &hole, BOUND, async |conn| {
        conn.query_drop("SELECT 1").await
    })
    .await;
}

/// The server behind a link the test can take down, and the URL that reaches it there — not
/// over the Unix socket mysql_async moves to when the server is on this host, which would
/// bypass the link.
async fn behind_a_blackhole() -> Option<(Blackhole, String)> {
    let hole = Blackhole::in_front_of(&common::url().await?)?;
    let via = format!("mysql://root@{}/test?prefer_socket=false", hole.addr());
    Some((hole, via))
}

/// A close while the server is unreachable: graceful and immediate both end at once — a
/// member's stop does not wait to be heard by a server the link may never reach again, not
/// for `member_shutdown` — and no task of the pool is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_with_the_server_unreachable_ends_at_once_and_leaves_no_task() {
    scenarios::closes_across_a_dead_link(
        async |name| {
            let (hole, via) = behind_a_blackhole().await?;
            let manager = MysqlManager::new(&via).unwrap();
            Some((hole, started(PoolConfig::new(name, 2, 2), manager).await))
        },
        async |conn| conn.query_drop("SELECT 1").await,
    )
    .await;
}

/// A frozen server, seen from the wire (`Proxy::stall` in both directions: the proxy's
/// kernel still acknowledges, so no TCP timeout fires): as [`frozen_holds_nothing`] says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_holds_neither_a_take_nor_a_close() {
    let Some(url) = common::url().await else {
        return;
    };
    let proxy = Proxy::start(&host_port(&url)).await;
    let via = format!("mysql://root@{}/test?prefer_socket=false", proxy.addr());
    frozen_holds_nothing("mysql-frozen", &via, |frozen| {
        proxy.stall(Direction::ToServer, frozen);
        proxy.stall(Direction::ToClient, frozen);
    })
    .await;
}

/// With a check before each take, against a server `freeze(true)` freezes and
/// `freeze(false)` thaws: a query the caller gives up on leaves its connection replaced,
/// never handed out again (its answer is unread); the idle member is checked, the check
/// times out, and it is replaced too; takes end at their deadline; once the server thaws the
/// pool serves again; a close while it is frozen does not wait on it.
async fn frozen_holds_nothing(name: &str, url: &str, freeze: impl Fn(bool)) {
    let config = PoolConfig::builder(name)
        .init_count(2)
        .max_count(2)
        .idle_check_threshold(Duration::ZERO)
        .member_start_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let pool = started(config, MysqlManager::new(url).unwrap()).await;
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let one: Option<i64> = conn.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));
    let cut = Member::id(&conn);
    freeze(true);
    let given_up = tokio::time::timeout(
        Duration::from_millis(500),
        conn.query_first::<i64, _>("SELECT 1"),
    )
    .await;
    assert!(given_up.is_err(), "a frozen server answered: {given_up:?}");
    drop(conn);
    let took = scenarios::refused_while_down(&pool, Duration::from_secs(5)).await;
    eprintln!("a take from a frozen server ended after {took:?}");
    freeze(false);
    let thawed = Instant::now();
    let mut conn = pool
        .take_member(Duration::from_secs(30))
        .await
        .expect("a member once the server thaws");
    assert_ne!(Member::id(&conn), cut, "the cut member was handed out");
    let one: Option<i64> = conn.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));
    eprintln!("serving again {:?} after the thaw", thawed.elapsed());
    drop(conn);
    freeze(true);
    scenarios::closes_within(&pool, Shutdown::Graceful, Duration::from_secs(3)).await;
    freeze(false);
}

/// A slow link under load (every chunk waits 50 ms each way): 16 tasks share 4 connections
/// for 2 s, each take with a 300 ms deadline. Every take ends by its deadline, no query
/// fails, no connection is replaced for being slow (its reset at each return crosses the
/// slow link too), and once the link is fast a take is served at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_link_under_load_keeps_every_deadline_and_loses_nothing() {
    let Some(url) = common::url().await else {
        return;
    };
    let proxy = Proxy::start(&host_port(&url)).await;
    let via = format!("mysql://root@{}/test?prefer_socket=false", proxy.addr());
    let pool = started(
        PoolConfig::new("mysql-slow-load", 4, 4),
        MysqlManager::new(&via).unwrap(),
    )
    .await;
    let seen = scenarios::slow_link_under_load(&pool, &proxy, |mut conn| async move {
        conn.query_first::<i64, _>("SELECT 41 + 1")
            .await
            .ok()
            .flatten()
            == Some(42)
    })
    .await;
    eprintln!("on a slow link under load: {seen:?}");
    scenarios::closes_within(&pool, Shutdown::Graceful, Duration::from_secs(3)).await;
}

/// A server killed (SIGKILL, a MariaDB of the test's own) and started again on its port
/// while writers run (`pooler_testkit::scenarios::restarted_under_writers`): free members
/// whose connections the kill ended are never handed out, the pool serves again by itself
/// once the server listens, and every acknowledged write is there after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_served_again_and_loses_nothing() {
    let Some(mut server) = pooler_testkit::mariadb::MariaDbServer::with_writes_table() else {
        return;
    };
    let pool = started(
        PoolConfig::new("mysql-restart", 4, 4),
        MysqlManager::new(&server.url()).unwrap(),
    )
    .await;
    let seen = scenarios::restarted_under_writers(
        &pool,
        |mut conn, v| async move {
            conn.exec_drop("INSERT INTO r (v) VALUES (?)", (v,))
                .await
                .is_ok()
        },
        |down| {
            if down {
                server.kill();
            } else {
                server.restart();
            }
        },
        async || {
            let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
            conn.query::<i64, _>("SELECT v FROM r")
                .await
                .unwrap()
                .into_iter()
                .collect()
        },
    )
    .await;
    eprintln!("a server killed and started again: {seen:?}");
    scenarios::closes_within(&pool, Shutdown::Graceful, Duration::from_secs(3)).await;
}

/// A frozen server, for real (a MariaDB of the test's own stopped by SIGSTOP: the kernel
/// still accepts and acknowledges, so no TCP timeout fires): as [`frozen_holds_nothing`]
/// says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stopped_by_sigstop_holds_neither_a_take_nor_a_close() {
    let Some(server) = pooler_testkit::mariadb::MariaDbServer::start() else {
        return;
    };
    frozen_holds_nothing("mysql-sigstop", &server.url(), |frozen| {
        server.signal(if frozen { "-STOP" } else { "-CONT" });
    })
    .await;
}
