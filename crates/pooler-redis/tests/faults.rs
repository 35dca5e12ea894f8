//! A dead link, for real: Redis reached through a network namespace whose link the test takes
//! down, so packets vanish with no FIN and no RST (`pooler_testkit::blackhole`). With the
//! defaults, a command on the dead link fails within the bound (`TCP_USER_TIMEOUT`, 30 s), and
//! an idle member on it is found dead by the keepalives and never handed out after (about
//! half a minute of real time: the bound itself). A frozen server of the test's own
//! (SIGSTOP) costs each command the response timeout, and a connection whose answer is
//! owed serves nobody, and one restarted on the same port is served again once it listens
//! (about a second each).
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::time::{Duration, Instant};

use pooler::{Member, PoolConfig, Shutdown};
use pooler_redis::RedisManager;
use pooler_redis::redis;
use pooler_testkit::blackhole::Blackhole;
use pooler_testkit::redis::{self as redis_server, RedisServer};
use pooler_testkit::{scenarios, started};

/// The bound, with a margin for the kernel's timer granularity.
const BOUND: Duration = Duration::from_secs(40);

async fn through_a_blackhole() -> Option<(Blackhole, String)> {
    let url = common::url().await?;
    let hole = Blackhole::in_front_of(&url)?;
    let via = format!("redis://{}", hole.addr());
    Some((hole, via))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_on_a_dead_link_fails_and_an_idle_member_is_never_handed_out() {
    let Some((hole, url)) = through_a_blackhole().await else {
        return;
    };
    let config = PoolConfig::new("redis-dead", 2, 2);
    let pool = started(config, RedisManager::new(url.as_str()).unwrap()).await;
    scenarios::busy_and_idle_across_a_dead_link(&pool, &hole, BOUND, async |conn| {
        redis::cmd("PING")
            .query_async::<String>(&mut **conn)
            .await
            .map(drop)
    })
    .await;
}

/// A close while the server is unreachable: graceful and immediate both end at once — a
/// member's stop says goodbye to the server without waiting to be heard (the link may never
/// carry it), not after `member_shutdown` — and no task of the pool is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_with_the_server_unreachable_ends_at_once_and_leaves_no_task() {
    scenarios::closes_across_a_dead_link(
        async |name| {
            let (hole, url) = through_a_blackhole().await?;
            let manager = RedisManager::new(url.as_str()).unwrap();
            Some((hole, started(PoolConfig::new(name, 2, 2), manager).await))
        },
        async |conn| {
            let pong = redis::cmd("PING").query_async::<String>(&mut **conn).await;
            pong.map(drop)
        },
    )
    .await;
}

/// A frozen server (stopped by SIGSTOP: its kernel still acknowledges, so no TCP timeout
/// fires): each command fails at redis-rs's response timeout, its connection (an answer
/// outstanding) is replaced, a close does not wait on the server, and once it thaws the
/// pool serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_to_a_frozen_server_fails_at_the_response_timeout() {
    let Some((server, pool)) = own_server("redis-frozen").await else {
        return;
    };
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let _: String = redis::cmd("PING").query_async(&mut *conn).await.unwrap();
    let frozen = Member::id(&conn);
    server.signal("-STOP");
    let began = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        redis::cmd("PING").query_async::<String>(&mut *conn),
    )
    .await
    .expect("the command did not hang");
    let took = began.elapsed();
    eprintln!("a command to a frozen server failed after {took:?}");
    assert!(answer.is_err(), "the command failed");
    assert!(took < Duration::from_secs(2), "{took:?}");
    drop(conn);
    // Its answer still owed, that connection serves nobody while the server is frozen: the
    // next user would wait behind it (Redis answers a client's requests in order).
    let other = pool.take_member(Duration::from_secs(1)).await.unwrap();
    assert_ne!(Member::id(&other), frozen, "handed out with an answer owed");
    if let Ok(third) = pool.take_member(Duration::from_millis(500)).await {
        assert_ne!(Member::id(&third), frozen, "handed out with an answer owed");
    }
    drop(other);
    server.signal("-CONT");
    let thawed = [
        pool.take_member(Duration::from_secs(5)).await.unwrap(),
        pool.take_member(Duration::from_secs(5)).await.unwrap(),
    ];
    for mut conn in thawed {
        let _: String = redis::cmd("PING").query_async(&mut *conn).await.unwrap();
    }
    server.signal("-STOP");
    scenarios::closes_within(&pool, Shutdown::Graceful, Duration::from_secs(2)).await;
    server.signal("-CONT");
}

/// A server restarted on the same port (killed, so no connection is closed politely; then
/// started again): a free member leaves the pool as its connection's driver ends with the
/// socket, and is never handed out after; a member in use fails its next command and is replaced on return; takes while
/// the server is down end by their deadline; once it is back, the pool serves again without
/// anyone's help.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_on_the_same_port_is_served_again() {
    let Some((server, pool)) = own_server("redis-restart").await else {
        return;
    };
    let port = server.port();
    let mut held = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let _: String = redis::cmd("PING").query_async(&mut *held).await.unwrap();
    let before = [Member::id(&held), {
        let idle = pool.take_member(Duration::from_secs(5)).await.unwrap();
        Member::id(&idle)
    }];
    drop(server);
    let began = Instant::now();
    let failed = redis::cmd("PING").query_async::<String>(&mut *held).await;
    assert!(failed.is_err(), "a command to a killed server");
    drop(held);
    // The free member's driver ends as its socket closes: it leaves the pool.
    while pool.utilization().free_count > 0 {
        assert!(began.elapsed() < Duration::from_secs(2), "still free");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Down: no member of the old server is handed out, and a take ends by its deadline.
    scenarios::refused_while_down(&pool, Duration::from_millis(500)).await;
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "{:?}",
        began.elapsed()
    );
    let server = RedisServer::on(port, &[]);
    let back = Instant::now();
    let mut conns = Vec::new();
    for _ in 0..2 {
        let mut conn = pool
            .take_member(Duration::from_secs(30))
            .await
            .expect("served again");
        assert!(
            !before.contains(&Member::id(&conn)),
            "an old member handed out"
        );
        let _: String = redis::cmd("PING").query_async(&mut *conn).await.unwrap();
        conns.push(conn);
    }
    eprintln!("served again {:?} after the restart", back.elapsed());
    drop(conns);
    pool.close(Shutdown::Graceful).await;
    assert_eq!(pool.live_tasks(), 0);
    drop(server);
}

/// A slow link under load (every chunk waits 50 ms each way): 16 tasks share 4 connections
/// for 2 s, each take with a 300 ms deadline. Every take ends by its deadline, no command
/// fails (redis-rs's 500 ms response timeout is not reached) or is lost, no connection is
/// replaced for being slow, and once the link is fast a take is served at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_link_under_load_keeps_every_deadline_and_loses_nothing() {
    use pooler_testkit::{Proxy, host_port};
    let Some(url) = common::url().await else {
        return;
    };
    let proxy = Proxy::start(&host_port(&url)).await;
    let pool = started(
        PoolConfig::new("redis-slow-load", 4, 4),
        RedisManager::new(format!("redis://{}", proxy.addr()).as_str()).unwrap(),
    )
    .await;
    let seen = scenarios::slow_link_under_load(&pool, &proxy, |mut conn| async move {
        redis::cmd("INCR")
            .arg("pooler-slow-load")
            .query_async::<i64>(&mut *conn)
            .await
            .is_ok()
    })
    .await;
    eprintln!("on a slow link under load: {seen:?}");
    scenarios::closes_within(&pool, Shutdown::Graceful, Duration::from_secs(2)).await;
}

/// A `redis-server` of the test's own and a pool of two named `name` in front of it; `None`
/// (the test skipped) where there is no `redis-server` to start.
async fn own_server(name: &str) -> Option<(RedisServer, pooler::Pool<RedisManager>)> {
    if !redis_server::available() {
        return None;
    }
    let server = RedisServer::start(&[]);
    let manager = RedisManager::new(server.url().as_str()).unwrap();
    let pool = started(PoolConfig::new(name, 2, 2), manager).await;
    Some((server, pool))
}
