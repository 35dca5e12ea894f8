//! Live tests of `ClusterManager` (feature `cluster`) against a Redis Cluster of the test's
//! own: three masters with a replica each (`pooler_testkit::redis::RedisCluster`, made by
//! `redis-cli --cluster create`). Without `redis-server` or `redis-cli` they skip with a
//! notice, or fail under `POOLER_REQUIRE_SERVICES=1`.
#![cfg(feature = "cluster")]
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pooler::{Member, PoolConfig};
use pooler_redis::{ClusterManager, ClusterPool, redis};
use pooler_testkit::redis::{RedisCluster, RedisServer};
use pooler_testkit::started;

/// The node timeout of the cluster whose master the test kills: the replica is promoted
/// about this long after the kill.
const FAILOVER_NODE_TIMEOUT: Duration = Duration::from_millis(1000);
/// The node timeout of the other tests' clusters: long enough that a node slowed by a loaded
/// machine is never failed over by mistake (a master turned replica refuses `SETSLOT`).
const NODE_TIMEOUT: Duration = Duration::from_secs(5);

/// One cluster at a time: six servers per test on two cores, several tests at once, starve
/// a node past its timeout.
static ONE_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn pool(cluster: &RedisCluster, name: &str, size: usize) -> ClusterPool {
    let config = PoolConfig::new(name, size, size)
        .to_builder()
        .queue_max(64)
        .build()
        .unwrap();
    started(config, ClusterManager::new(cluster.urls()).unwrap()).await
}

/// A master in `CLUSTER NODES`: its id, port and slot ranges.
struct Master {
    id: String,
    port: u16,
    slots: Vec<(u16, u16)>,
}

fn masters(node: &RedisServer) -> Vec<Master> {
    node.cli(&["CLUSTER", "NODES"])
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 || !fields[2].contains("master") || fields[2].contains("fail") {
                return None;
            }
            let port = fields[1].split(['@', ':']).nth(1)?.parse().ok()?;
            let slots = fields[8..]
                .iter()
                .filter_map(|r| {
                    let (a, b) = r.split_once('-').unwrap_or((r, r));
                    Some((a.parse().ok()?, b.parse().ok()?))
                })
                .collect();
            Some(Master {
                id: fields[0].to_owned(),
                port,
                slots,
            })
        })
        .collect()
}

fn slot_of(node: &RedisServer, key: &str) -> u16 {
    node.cli(&["CLUSTER", "KEYSLOT", key])
        .trim()
        .parse()
        .unwrap()
}

/// The live master that owns `slot`, as `node` sees it (none while a failover is under way).
fn owner(node: &RedisServer, slot: u16) -> Option<Master> {
    masters(node)
        .into_iter()
        .find(|m| m.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
}

/// Sends `args` to `node` with `redis-cli`; it must answer `OK`.
fn ok(node: &RedisServer, args: &[&str]) {
    let answer = node.cli(args);
    assert_eq!(
        answer.trim(),
        "OK",
        "{args:?} on {}: {}\n{}",
        node.port(),
        node.cli(&["ROLE"]),
        node.cli(&["CLUSTER", "NODES"])
    );
}

fn node_on(cluster: &RedisCluster, port: u16) -> &RedisServer {
    cluster.nodes().iter().find(|n| n.port() == port).unwrap()
}

/// `tasks` tasks `INCR`ing keys of the hash tag `tag` through `pool` until stopped: the
/// increments acknowledged, and the errors.
struct Load {
    acknowledged: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    last_error: Arc<std::sync::Mutex<Option<String>>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(pool: &ClusterPool, tag: &str, tasks: usize) -> Load {
        let acknowledged = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let last_error = Arc::new(std::sync::Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..tasks)
            .map(|t| {
                let (pool, acknowledged, errors, last_error, stop) = (
                    pool.clone(),
                    acknowledged.clone(),
                    errors.clone(),
                    last_error.clone(),
                    stop.clone(),
                );
                let tag = tag.to_owned();
                tokio::spawn(async move {
                    let mut i = 0_u64;
                    while !stop.load(Ordering::Relaxed) {
                        let key = format!("{{{tag}}}:{}", (i * 7 + t as u64) % 50);
                        i += 1;
                        let done = async {
                            let mut conn = pool
                                .take_member(Duration::from_secs(2))
                                .await
                                .map_err(|e| e.to_string())?;
                            redis::cmd("INCR")
                                .arg(&key)
                                .query_async::<i64>(&mut *conn)
                                .await
                                .map_err(|e| e.to_string())
                        };
                        match tokio::time::timeout(Duration::from_secs(5), done).await {
                            Ok(Ok(_)) => {
                                acknowledged.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(Err(e)) => {
                                errors.fetch_add(1, Ordering::Relaxed);
                                *last_error.lock().unwrap() = Some(e);
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            Err(_) => {
                                errors.fetch_add(1, Ordering::Relaxed);
                                *last_error.lock().unwrap() = Some("timed out".into());
                            }
                        }
                    }
                })
            })
            .collect();
        Load {
            acknowledged,
            errors,
            last_error,
            stop,
            tasks,
        }
    }

    /// Stops it: (acknowledged, errors, the last error).
    async fn stop(self) -> (u64, u64, Option<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.expect("a load task");
        }
        let last = self.last_error.lock().unwrap().take();
        (
            self.acknowledged.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
            last,
        )
    }
}

/// The sum of the 50 counters of `tag`, read through the pool.
async fn total(pool: &ClusterPool, tag: &str) -> u64 {
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let mut sum = 0;
    for k in 0..50 {
        let n: Option<u64> = redis::cmd("GET")
            .arg(format!("{{{tag}}}:{k}"))
            .query_async(&mut *conn)
            .await
            .unwrap();
        sum += n.unwrap_or(0);
    }
    sum
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_on_every_master_are_served_through_one_pool() {
    let _one = ONE_CLUSTER.lock().await;
    let Some(cluster) = RedisCluster::start(3, 1, NODE_TIMEOUT) else {
        return;
    };
    let pool = pool(&cluster, "cluster-keys", 4).await;
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    for i in 0..300 {
        let _: () = redis::cmd("SET")
            .arg(format!("key:{i}"))
            .arg(i)
            .query_async(&mut *conn)
            .await
            .unwrap();
    }
    for i in 0..300 {
        let v: i64 = redis::cmd("GET")
            .arg(format!("key:{i}"))
            .query_async(&mut *conn)
            .await
            .unwrap();
        assert_eq!(v, i);
    }
    drop(conn);
    for master in masters(&cluster.nodes()[0]) {
        let keys: u64 = node_on(&cluster, master.port)
            .cli(&["DBSIZE"])
            .trim()
            .parse()
            .unwrap();
        assert!(keys > 0, "master on {} holds none of the keys", master.port);
    }
    pool.close(pooler::Shutdown::Graceful).await;
}

/// A slot moved from one master to another under load (`MIGRATING`/`IMPORTING`, `MIGRATE`,
/// then `SETSLOT … NODE`): redis-rs follows `ASK` and `MOVED`; no increment fails and none
/// acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_under_load_loses_nothing() {
    let _one = ONE_CLUSTER.lock().await;
    let Some(cluster) = RedisCluster::start(3, 1, NODE_TIMEOUT) else {
        return;
    };
    let pool = pool(&cluster, "cluster-migrate", 4).await;
    let tag = "moving";
    let first = &cluster.nodes()[0];
    let slot = slot_of(first, &format!("{{{tag}}}"));
    let from = owner(first, slot).expect("an owner");
    let to = masters(first)
        .into_iter()
        .find(|m| m.id != from.id)
        .unwrap();
    let load = Load::start(&pool, tag, 8);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (source, target) = (node_on(&cluster, from.port), node_on(&cluster, to.port));
    let slot_arg = slot.to_string();
    ok(
        target,
        &["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &from.id],
    );
    ok(
        source,
        &["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &to.id],
    );
    loop {
        let keys = source.cli(&["CLUSTER", "GETKEYSINSLOT", &slot_arg, "10"]);
        let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
        if keys.is_empty() {
            break;
        }
        let port = to.port.to_string();
        let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        args.extend(keys.iter().copied());
        ok(source, &args);
        // Slowly, so that the load meets the slot half moved.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for node in [target, source] {
        ok(node, &["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to.id]);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (acknowledged, errors, last) = load.stop().await;
    assert_eq!(errors, 0, "last: {last:?}");
    assert!(acknowledged > 100, "the load ran: {acknowledged}");
    assert_eq!(
        owner(target, slot).expect("an owner").id,
        to.id,
        "the slot moved"
    );
    assert_eq!(
        total(&pool, tag).await,
        acknowledged,
        "an acknowledged increment lost"
    );
    pool.close(pooler::Shutdown::Graceful).await;
}

/// A master killed under load: its replica is promoted after the node timeout, redis-rs
/// finds the new slot owner, and the pool serves again within a bound; no member is
/// handed out that cannot serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_under_load_is_followed_to_its_promoted_replica() {
    let _one = ONE_CLUSTER.lock().await;
    let Some(mut cluster) = RedisCluster::start(3, 1, FAILOVER_NODE_TIMEOUT) else {
        return;
    };
    let pool = pool(&cluster, "cluster-kill", 4).await;
    let tag = "killed";
    let slot = slot_of(&cluster.nodes()[0], &format!("{{{tag}}}"));
    let victim = owner(&cluster.nodes()[0], slot).expect("an owner");
    let load = Load::start(&pool, tag, 8);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = load.acknowledged.load(Ordering::Relaxed);
    assert!(before > 0, "the load runs");
    let index = cluster
        .nodes()
        .iter()
        .position(|n| n.port() == victim.port)
        .unwrap();
    let began = Instant::now();
    cluster.node_mut(index).kill();
    let alive = cluster
        .nodes()
        .iter()
        .find(|n| n.port() != victim.port)
        .unwrap();
    // The replica is promoted once the masters agree the victim failed (the node timeout),
    // and the load moves forward again on it.
    while owner(alive, slot).is_none_or(|m| m.port == victim.port) {
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "no replica promoted within 20 s:\n{}",
            alive.cli(&["CLUSTER", "NODES"])
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let promoted = began.elapsed();
    let at_promotion = load.acknowledged.load(Ordering::Relaxed);
    let resumed = loop {
        if load.acknowledged.load(Ordering::Relaxed) > at_promotion + 200 {
            break began.elapsed();
        }
        assert!(
            began.elapsed() < promoted + Duration::from_secs(10),
            "not served again within 10 s of the promotion (last error {:?})",
            load.last_error.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!("replica promoted {promoted:?} after the kill");
    let errors_then = load.errors.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (acknowledged, errors, last) = load.stop().await;
    eprintln!(
        "served again {resumed:?} after the master was killed; {errors} errors (last: {last:?}), {acknowledged} acknowledged"
    );
    assert_eq!(errors, errors_then, "errors after the failover: {last:?}");
    // Every member serves the slot on its new owner.
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
        let _: i64 = redis::cmd("INCR")
            .arg(format!("{{{tag}}}:0"))
            .query_async(&mut *conn)
            .await
            .unwrap();
        held.push(conn);
    }
    drop(held);
    pool.close(pooler::Shutdown::Graceful).await;
}

/// The hand-over on a cluster member: a plain command keeps it; `WATCH` left, or a blocking
/// command cancelled, has it replaced (no keyless command can undo them on the right node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_member_left_unclean_is_replaced() {
    let _one = ONE_CLUSTER.lock().await;
    let Some(cluster) = RedisCluster::start(3, 0, NODE_TIMEOUT) else {
        return;
    };
    let pool = pool(&cluster, "cluster-handover", 1).await;
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let first = Member::id(&conn);
    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg(1)
        .query_async(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert_eq!(Member::id(&conn), first, "a clean member is kept");
    let _: () = redis::cmd("WATCH")
        .arg("plain")
        .query_async(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let second = Member::id(&conn);
    assert_ne!(second, first, "a member left watching was handed out");
    let blocked = tokio::time::timeout(
        Duration::from_millis(100),
        redis::cmd("BLPOP")
            .arg("nothing-comes")
            .arg(0)
            .query_async::<Option<(String, String)>>(&mut *conn),
    )
    .await;
    assert!(blocked.is_err(), "BLPOP cannot return");
    drop(conn);
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert_ne!(
        Member::id(&conn),
        second,
        "a member left blocked was handed out"
    );
    drop(conn);
    pool.close(pooler::Shutdown::Graceful).await;
}
