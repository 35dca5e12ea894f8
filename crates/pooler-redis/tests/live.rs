//! Live tests against Redis (`POOLER_REDIS_URL`, default `redis://127.0.0.1:6379`).
//! Unreachable, they skip with a notice, or fail under `POOLER_REQUIRE_SERVICES=1`.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::time::Duration;

use common::{admin, url};
use pooler::{PoolConfig, Shutdown};
use pooler_redis::RedisManager;
use pooler_redis::redis::{self, AsyncCommands};
use pooler_testkit::scenarios::Watched;
use pooler_testkit::{Proxy, host_port, scenarios, started};

/// The ids of the server's clients named `name`.
async fn clients(admin: &mut redis::aio::MultiplexedConnection, name: &str) -> Vec<u64> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(admin)
        .await
        .unwrap();
    list.lines()
        .filter(|l| l.split(' ').any(|f| f == format!("name={name}")))
        .filter_map(|l| {
            l.split(' ')
                .find_map(|f| f.strip_prefix("id="))
                .and_then(|id| id.parse().ok())
        })
        .collect()
}

async fn my_id(conn: &mut (impl redis::aio::ConnectionLike + Send)) -> u64 {
    redis::cmd("CLIENT")
        .arg("ID")
        .query_async(conn)
        .await
        .unwrap()
}

async fn kill(admin: &mut redis::aio::MultiplexedConnection, id: u64) {
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .query_async(admin)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_tasks_share_eight_connections_with_correct_results() {
    let Some(url) = url().await else { return };
    let manager = RedisManager::new(url.as_str())
        .unwrap()
        .client_name("pooler-64");
    let config = scenarios::sixty_four_config("redis-64");
    let pool = started(config, manager).await;
    scenarios::sixty_four_tasks_share_eight(&pool, async |mut conn, n| {
        let key = format!("pooler:test:{n}");
        let _: () = conn.set_ex(&key, n, 60).await.unwrap();
        let back: u32 = conn.get(&key).await.unwrap();
        assert_eq!(back, n);
        my_id(&mut conn).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_connection_is_replaced_and_never_handed_out() {
    let Some(url) = url().await else { return };
    let mut admin = admin(&url).await;
    let manager = RedisManager::new(url.as_str())
        .unwrap()
        .client_name("pooler-kill");
    let pool = started(PoolConfig::new("redis-kill", 2, 2), manager).await;
    scenarios::killed_sessions_are_never_handed_out(
        &pool,
        Watched::Always,
        async |conn| my_id(conn).await,
        async |id| kill(&mut admin, id).await,
        async |conn| {
            let pong = redis::cmd("PING").query_async::<String>(&mut **conn).await;
            pong.is_ok_and(|pong| pong == "PONG")
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_fails_fast_backs_off_and_refills_by_itself() {
    let Some(url) = url().await else { return };
    let proxy = Proxy::start(&host_port(&url)).await;
    proxy.set_open(false);
    let manager = RedisManager::new(format!("redis://{}", proxy.addr())).unwrap();
    let config = scenarios::outage_config("redis-outage");
    let pool = started(config, manager).await;
    scenarios::outage_and_recovery(&pool, &proxy, async |conn| {
        redis::cmd("PING")
            .query_async::<String>(&mut **conn)
            .await
            .is_ok_and(|pong| pong == "PONG")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_lifetime_with_jitter_recycles_real_connections() {
    let Some(url) = url().await else { return };
    let config = scenarios::lifetime_config("redis-life");
    let pool = started(config, RedisManager::new(url.as_str()).unwrap()).await;
    scenarios::lifetimes_recycle_connections(&pool, async |conn| {
        i64::try_from(my_id(conn).await).unwrap()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_leaves_no_connection_open() {
    let Some(url) = url().await else { return };
    let admin = admin(&url).await;
    let manager = RedisManager::new(url.as_str())
        .unwrap()
        .client_name("pooler-close");
    let pool = started(PoolConfig::new("redis-close", 5, 8), manager).await;
    scenarios::close_leaves_nothing(&pool, async || {
        let mut admin = admin.clone(); // a multiplexed handle: clones share one connection
        clients(&mut admin, "pooler-close").await.len()
    })
    .await;
}

/// A Unix-socket address works end to end: the test listens on a socket of its own and
/// forwards to the server's TCP port (the local server has no socket configured).
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unix_socket_address_works() {
    let Some(url) = url().await else { return };
    let dir = std::env::temp_dir().join(format!("pooler-redis-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("redis.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let upstream = host_port(&url);
    let forward = tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    let manager = RedisManager::new(format!("redis+unix://{}", path.display())).unwrap();
    let pool = started(PoolConfig::new("redis-unix", 2, 2), manager).await;
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let pong: String = redis::cmd("PING").query_async(&mut *conn).await.unwrap();
    assert_eq!(pong, "PONG");
    drop(conn);
    pool.close(Shutdown::Graceful).await;
    forward.abort();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_tls_address_is_refused_when_the_manager_is_made() {
    let e = RedisManager::new("rediss://127.0.0.1:6380").unwrap_err();
    assert!(
        e.to_string().contains("TLS") || e.to_string().contains("tls"),
        "{e}"
    );
}
