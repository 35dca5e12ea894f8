//! Live tests of `RedisManager::via_sentinels`, against servers of the test's own: a master,
//! its replica, and a Sentinel watching them (`pooler_testkit::redis`). Without
//! `redis-server` they skip with a notice, or fail under `POOLER_REQUIRE_SERVICES=1`.
//!
//! A failover — forced by `SENTINEL FAILOVER` with the old master alive, or after the master
//! is killed — is followed: writes resume on the new master within a bound, and no member
//! talks to the old one after. A connection whose server answers `READONLY` (a master
//! demoted) is replaced.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pooler::{Member, PoolConfig};
use pooler_redis::{RedisManager, SentinelRole, redis};
use pooler_testkit::redis::{self as redis_server, RedisServer};
use pooler_testkit::started;

const SERVICE: &str = "pooler";

/// A master, its replica and a Sentinel that knows both (it has seen the replica in sync).
async fn servers() -> Option<(RedisServer, RedisServer, RedisServer)> {
    if !redis_server::available() {
        return None;
    }
    let master = RedisServer::start(&[]);
    let replica = RedisServer::replica_of(master.port());
    let sentinel = RedisServer::sentinel(SERVICE, master.port(), Duration::from_millis(1000));
    let mut admin = common::admin(&sentinel.url()).await;
    let began = Instant::now();
    loop {
        let replicas: Vec<std::collections::HashMap<String, String>> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(SERVICE)
            .query_async(&mut admin)
            .await
            .unwrap();
        let ready = replicas.iter().any(|r| {
            r.get("port") == Some(&replica.port().to_string())
                && r.get("master-link-status").map(String::as_str) == Some("ok")
                && r.get("flags").map(String::as_str) == Some("slave")
        });
        if ready {
            return Some((master, replica, sentinel));
        }
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "the Sentinel never saw the replica in sync: {replicas:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn manager(sentinel: &RedisServer, role: SentinelRole) -> RedisManager {
    // The address gives the database and credentials only: the Sentinel names the server.
    RedisManager::new("redis://127.0.0.1:1/0")
        .unwrap()
        .via_sentinels([sentinel.url()], SERVICE, role)
        .unwrap()
}

/// The port of the server a member talks to, and its role.
async fn whose(conn: &mut Member<RedisManager>) -> (u16, String) {
    let (port, role): (Vec<String>, redis::Value) = redis::pipe()
        .cmd("CONFIG")
        .arg("GET")
        .arg("port")
        .cmd("ROLE")
        .query_async(&mut **conn)
        .await
        .unwrap();
    let role = match role {
        redis::Value::Array(items) => match items.first() {
            Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            other => format!("{other:?}"),
        },
        other => format!("{other:?}"),
    };
    (port[1].parse().unwrap(), role)
}

/// Writers on `pool` until `stop`: each success is recorded with its time and the port of
/// the server that took it; failures are counted.
struct Writers {
    done: Arc<Mutex<Vec<(Instant, u16)>>>,
    failed: Arc<std::sync::atomic::AtomicUsize>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Writers {
    fn start(pool: &pooler_redis::Pool, n: usize) -> Writers {
        let done = Arc::new(Mutex::new(Vec::new()));
        let failed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tasks = (0..n)
            .map(|_| {
                let (pool, done, failed, stop) =
                    (pool.clone(), done.clone(), failed.clone(), stop.clone());
                tokio::spawn(async move {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let wrote = async {
                            let mut conn = pool
                                .take_member(Duration::from_secs(1))
                                .await
                                .map_err(|e| e.to_string())?;
                            let (_, port): (i64, Vec<String>) = redis::pipe()
                                .cmd("INCR")
                                .arg("writes")
                                .cmd("CONFIG")
                                .arg("GET")
                                .arg("port")
                                .query_async(&mut *conn)
                                .await
                                .map_err(|e| e.to_string())?;
                            Ok::<u16, String>(port[1].parse().unwrap())
                        };
                        match tokio::time::timeout(Duration::from_secs(3), wrote).await {
                            Ok(Ok(port)) => done.lock().unwrap().push((Instant::now(), port)),
                            _ => {
                                failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                })
            })
            .collect();
        Writers {
            done,
            failed,
            stop,
            tasks,
        }
    }

    /// The first write the server on `port` took after `since`, waiting up to `bound`.
    async fn first_on(&self, port: u16, since: Instant, bound: Duration) -> Duration {
        loop {
            let first = self
                .done
                .lock()
                .unwrap()
                .iter()
                .find(|(at, p)| *p == port && *at > since)
                .map(|(at, _)| *at - since);
            if let Some(first) = first {
                return first;
            }
            assert!(
                since.elapsed() < bound,
                "no write reached the new master within {bound:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for task in self.tasks {
            task.await.expect("a writer");
        }
        self.failed.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Every member of `pool` (of `size`) talks to the master on `port`.
async fn all_on(pool: &pooler_redis::Pool, size: usize, port: u16) {
    let mut held = Vec::new();
    for _ in 0..size {
        let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
        assert_eq!(whose(&mut conn).await, (port, "master".to_owned()));
        held.push(conn);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_with_the_old_master_alive_is_followed() {
    let Some((master, replica, sentinel)) = servers().await else {
        return;
    };
    let pool = started(
        PoolConfig::new("redis-sentinel-forced", 3, 3),
        manager(&sentinel, SentinelRole::Master),
    )
    .await;
    all_on(&pool, 3, master.port()).await;
    let writers = Writers::start(&pool, 3);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut admin = common::admin(&sentinel.url()).await;
    let began = Instant::now();
    let _: () = redis::cmd("SENTINEL")
        .arg("FAILOVER")
        .arg(SERVICE)
        .query_async(&mut admin)
        .await
        .unwrap();
    // The old master takes writes until the Sentinel reconfigures it (up to ten seconds
    // later; each is lost when it becomes a replica): the pool's watch moves every member
    // within half a second of the switch.
    let resumed = writers
        .first_on(replica.port(), began, Duration::from_secs(3))
        .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let late_on_old = writers
        .done
        .lock()
        .unwrap()
        .iter()
        .filter(|(at, port)| {
            *port == master.port() && *at > began + resumed + 2 * pooler_redis::SENTINEL_WATCH
        })
        .count();
    assert_eq!(late_on_old, 0, "writes still went to the old master");
    let failed = writers.stop().await;
    eprintln!(
        "writes resumed on the new master {resumed:?} after SENTINEL FAILOVER; {failed} failed"
    );
    all_on(&pool, 3, replica.port()).await;
    pool.close(pooler::Shutdown::Graceful).await;
    drop(master);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_followed_to_the_promoted_replica() {
    let Some((mut master, replica, sentinel)) = servers().await else {
        return;
    };
    let pool = started(
        PoolConfig::new("redis-sentinel-killed", 3, 3),
        manager(&sentinel, SentinelRole::Master),
    )
    .await;
    let writers = Writers::start(&pool, 3);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let began = Instant::now();
    master.kill();
    // The Sentinel calls it down after 1 s without an answer, then promotes the replica.
    let resumed = writers
        .first_on(replica.port(), began, Duration::from_secs(20))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let failed = writers.stop().await;
    eprintln!(
        "writes resumed on the promoted replica {resumed:?} after the master was killed; {failed} failed"
    );
    all_on(&pool, 3, replica.port()).await;
    pool.close(pooler::Shutdown::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replica_role_serves_reads_from_a_replica() {
    let Some((master, replica, sentinel)) = servers().await else {
        return;
    };
    let mut on_master = common::admin(&master.url()).await;
    let _: () = redis::cmd("SET")
        .arg("seen")
        .arg("yes")
        .query_async(&mut on_master)
        .await
        .unwrap();
    let pool = started(
        PoolConfig::new("redis-sentinel-replica", 2, 2),
        manager(&sentinel, SentinelRole::Replica),
    )
    .await;
    for _ in 0..4 {
        let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
        assert_eq!(whose(&mut conn).await, (replica.port(), "slave".to_owned()));
        let began = Instant::now();
        loop {
            let seen: Option<String> = redis::cmd("GET")
                .arg("seen")
                .query_async(&mut *conn)
                .await
                .unwrap();
            if seen.as_deref() == Some("yes") {
                break;
            }
            assert!(began.elapsed() < Duration::from_secs(5), "never replicated");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    pool.close(pooler::Shutdown::Graceful).await;
    // The pool's Sentinel watch ended with it: over three of its periods, nobody connects
    // to the Sentinel (it opens a connection for each question).
    let mut admin = common::admin(&sentinel.url()).await;
    let received = async |admin: &mut redis::aio::MultiplexedConnection| -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query_async(admin)
            .await
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("total_connections_received")
    };
    let before = received(&mut admin).await;
    tokio::time::sleep(3 * pooler_redis::SENTINEL_WATCH).await;
    assert_eq!(
        received(&mut admin).await,
        before,
        "something still asks the Sentinel"
    );
}

/// Without Sentinel too: a server made a replica under the pool answers writes with
/// `READONLY`, and the connection that heard it is replaced, not handed out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_server_answers_readonly_is_replaced() {
    if !redis_server::available() {
        return;
    }
    let server = RedisServer::start(&[]);
    let other = RedisServer::start(&[]);
    let pool = started(
        PoolConfig::new("redis-readonly", 1, 1),
        RedisManager::new(server.url().as_str()).unwrap(),
    )
    .await;
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let before = Member::id(&conn);
    let mut admin = common::admin(&server.url()).await;
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(other.port())
        .query_async(&mut admin)
        .await
        .unwrap();
    let refused = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query_async::<()>(&mut *conn)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some("READONLY"), "{refused}");
    drop(conn);
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert_ne!(
        Member::id(&conn),
        before,
        "the demoted connection was handed out again"
    );
    drop(conn);
    pool.close(pooler::Shutdown::Graceful).await;
}

/// Sentinels that want a password get the one their URLs carry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_that_wants_a_password_is_asked_with_its_urls() {
    if !redis_server::available() {
        return;
    }
    let master = RedisServer::start(&[]);
    let sentinel = RedisServer::sentinel_with(
        SERVICE,
        master.port(),
        Duration::from_millis(1000),
        &["requirepass sentinel-secret"],
    );
    let with = format!("redis://:sentinel-secret@127.0.0.1:{}", sentinel.port());
    let manager = RedisManager::new("redis://127.0.0.1:1/0")
        .unwrap()
        .via_sentinels([with.as_str()], SERVICE, SentinelRole::Master)
        .unwrap();
    let pool = started(PoolConfig::new("redis-sentinel-auth", 1, 1), manager).await;
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert_eq!(whose(&mut conn).await, (master.port(), "master".to_owned()));
    drop(conn);
    pool.close(pooler::Shutdown::Graceful).await;
    // Without it, the Sentinel refuses, and no member starts.
    let without = RedisManager::new("redis://127.0.0.1:1/0")
        .unwrap()
        .via_sentinels([sentinel.url()], SERVICE, SentinelRole::Master)
        .unwrap();
    let config = PoolConfig::builder("redis-sentinel-noauth")
        .init_count(0)
        .max_count(1)
        .build()
        .unwrap();
    let pool = started(config, without).await;
    let e = pool
        .take_member(Duration::from_secs(2))
        .await
        .map(drop)
        .unwrap_err();
    assert!(e.to_string().to_lowercase().contains("auth"), "{e}");
    pool.close(pooler::Shutdown::Graceful).await;
}
