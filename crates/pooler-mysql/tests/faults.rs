//! A dead link, for real: MariaDB reached through a network namespace whose link the test
//! takes down, so packets vanish with no FIN and no RST (`pooler_testkit::blackhole`).
//! mysql_async opens its own sockets and offers only the keepalive's idle time, so no socket
//! option bounds a dead link here the way `TCP_USER_TIMEOUT` does for PostgreSQL and Redis
//! (docs/faults.md): the check before a take (`idle_check_threshold`), bounded by
//! `member_start_timeout`, is what keeps a member on a dead link from being handed out. A few
//! seconds of real time.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use pooler::{Member, Pool, PoolConfig, Shutdown};
use pooler_mysql::MysqlManager;
use pooler_testkit::blackhole::Blackhole;
use pooler_testkit::{Direction, Proxy, host_port, scenarios};

/// With a check before each take, a member idle on a link that died is checked — the check
/// times out at `member_start_timeout` — and replaced, never handed out: the take ends at its
/// deadline with no member; once the link is back the pool serves again. A close while the
/// server is unreachable does not wait on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_member_on_a_dead_link_is_checked_and_never_handed_out() {
    let Some(url) = common::url().await else {
        return;
    };
    let Some(hole) = Blackhole::in_front_of(&url) else {
        return;
    };
    // Not over the Unix socket mysql_async moves to when the server is on this host: that
    // would bypass the link.
    let via = format!("mysql://root@{}/test?prefer_socket=false", hole.addr());
    let pool = Pool::start(
        scenarios::checked_config("mysql-dead"),
        MysqlManager::new(&via).unwrap(),
    )
    .await
    .unwrap();
    scenarios::checked_across_a_dead_link(&pool, &hole, async |conn| {
        conn.query_first::<i64, _>("SELECT 1").await.ok().flatten() == Some(1)
    })
    .await;
}

/// A frozen server, seen from the wire (`Proxy::stall` in both directions: the proxy's
/// kernel still acknowledges, so no TCP timeout fires): a query the caller gives up on
/// leaves its connection replaced, never handed out again (its answer is unread); the idle
/// member is checked, the check times out, and it is replaced too; takes end at their
/// deadline; once the server thaws the pool serves again; a close does not wait on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_holds_neither_a_take_nor_a_close() {
    let Some(url) = common::url().await else {
        return;
    };
    let proxy = Proxy::start(&host_port(&url)).await;
    let via = format!("mysql://root@{}/test?prefer_socket=false", proxy.addr());
    let config = PoolConfig::builder("mysql-frozen")
        .init_count(2)
        .max_count(2)
        .idle_check_threshold(Duration::ZERO)
        .member_start_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let pool = Pool::start(config, MysqlManager::new(&via).unwrap())
        .await
        .unwrap();
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let one: Option<i64> = conn.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));
    let cut = Member::id(&conn);
    proxy.stall(Direction::ToServer, true);
    proxy.stall(Direction::ToClient, true);
    let given_up = tokio::time::timeout(
        Duration::from_millis(500),
        conn.query_first::<i64, _>("SELECT 1"),
    )
    .await;
    assert!(given_up.is_err(), "a frozen server answered");
    drop(conn);
    let took = scenarios::refused_while_down(&pool, Duration::from_secs(5)).await;
    eprintln!("a take from a frozen server ended after {took:?}");
    proxy.stall(Direction::ToServer, false);
    proxy.stall(Direction::ToClient, false);
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
    proxy.stall(Direction::ToServer, true);
    proxy.stall(Direction::ToClient, true);
    scenarios::closes_within(&pool, Shutdown::Graceful, Duration::from_secs(3)).await;
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
    let pool = Pool::start(
        PoolConfig::new("mysql-slow-load", 4, 4),
        MysqlManager::new(&via).unwrap(),
    )
    .await
    .unwrap();
    let seen = scenarios::slow_link_under_load(
        &pool,
        &proxy,
        Duration::from_millis(50),
        (16, Duration::from_secs(2), Duration::from_millis(300)),
        |mut conn| async move {
            conn.query_first::<i64, _>("SELECT 41 + 1")
                .await
                .ok()
                .flatten()
                == Some(42)
        },
    )
    .await;
    eprintln!("on a slow link under load: {seen:?}");
    scenarios::closes_within(&pool, Shutdown::Graceful, Duration::from_secs(3)).await;
}

/// A server killed (SIGKILL, a MariaDB of the test's own) and started again on its port
/// while writers run: the writes in flight fail, free members whose connections the kill
/// ended are never handed out, takes while it is down end by their deadline, the pool
/// serves again by itself once the server listens (within the start backoff's bound), and
/// every write that was acknowledged is there after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_served_again_and_loses_nothing() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let Some(mut server) = pooler_testkit::mariadb::MariaDbServer::start() else {
        return;
    };
    server.sql("CREATE TABLE test.r (v BIGINT PRIMARY KEY) ENGINE = InnoDB");
    let pool = Pool::start(
        PoolConfig::new("mysql-restart", 4, 4),
        MysqlManager::new(&server.url()).unwrap(),
    )
    .await
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let begun = Instant::now();
    let mut writers = Vec::new();
    for writer in 0..4_i64 {
        let (pool, stop) = (pool.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            // Each write: its value, when it ended, and whether it was acknowledged.
            let mut writes = Vec::new();
            let mut n = 0_i64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let v = writer * 1_000_000 + n;
                let acknowledged = match pool.take_member(Duration::from_millis(500)).await {
                    Ok(mut conn) => conn
                        .exec_drop("INSERT INTO r (v) VALUES (?)", (v,))
                        .await
                        .is_ok(),
                    Err(_) => false,
                };
                if !acknowledged {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                writes.push((v, begun.elapsed(), acknowledged));
            }
            writes
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.kill();
    let killed = begun.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let refused = scenarios::refused_while_down(&pool, Duration::from_millis(500)).await;
    server.restart();
    let restarted = begun.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let mut writes = Vec::new();
    for writer in writers {
        writes.extend(writer.await.expect("a writer"));
    }
    let served_again = writes
        .iter()
        .filter(|(_, ended, ok)| *ok && *ended > restarted)
        .map(|(_, ended, _)| *ended)
        .min()
        .expect("no write acknowledged after the restart");
    let acknowledged: Vec<i64> = writes
        .iter()
        .filter(|(.., ok)| *ok)
        .map(|(v, ..)| *v)
        .collect();
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let stored: std::collections::HashSet<i64> = conn
        .query::<i64, _>("SELECT v FROM r")
        .await
        .unwrap()
        .into_iter()
        .collect();
    drop(conn);
    let lost: Vec<_> = acknowledged
        .iter()
        .filter(|v| !stored.contains(v))
        .collect();
    eprintln!(
        "killed at {killed:?}, a take while down refused in {refused:?}, started again at \
         {restarted:?}, served again {:?} after; {} writes acknowledged, {} lost",
        served_again - restarted,
        acknowledged.len(),
        lost.len()
    );
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    // The start backoff doubles from 100 ms with full jitter: 5 s with a margin.
    assert!(
        served_again - restarted < Duration::from_secs(5),
        "served again only {:?} after the restart",
        served_again - restarted
    );
    scenarios::closes_within(&pool, Shutdown::Graceful, Duration::from_secs(3)).await;
}

/// A frozen server, for real (a MariaDB of the test's own stopped by SIGSTOP: the kernel
/// still accepts and acknowledges, so no TCP timeout fires), with a check before each take:
/// a query the caller gives up on leaves its connection replaced; the idle member's check
/// times out and it is replaced; takes end at their deadline; a close does not wait on it;
/// thawed, the pool serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stopped_by_sigstop_holds_neither_a_take_nor_a_close() {
    let Some(server) = pooler_testkit::mariadb::MariaDbServer::start() else {
        return;
    };
    let config = PoolConfig::builder("mysql-sigstop")
        .init_count(2)
        .max_count(2)
        .idle_check_threshold(Duration::ZERO)
        .member_start_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let pool = Pool::start(config, MysqlManager::new(&server.url()).unwrap())
        .await
        .unwrap();
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let one: Option<i64> = conn.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));
    let cut = Member::id(&conn);
    server.signal("-STOP");
    let given_up = tokio::time::timeout(
        Duration::from_millis(500),
        conn.query_first::<i64, _>("SELECT 1"),
    )
    .await;
    assert!(given_up.is_err(), "a frozen server answered: {given_up:?}");
    drop(conn);
    let took = scenarios::refused_while_down(&pool, Duration::from_secs(5)).await;
    eprintln!("a take from a stopped server ended after {took:?}");
    server.signal("-CONT");
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
    server.signal("-STOP");
    scenarios::closes_within(&pool, Shutdown::Graceful, Duration::from_secs(3)).await;
    server.signal("-CONT");
}
