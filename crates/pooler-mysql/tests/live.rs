//! Live tests against MySQL or MariaDB (`POOLER_MYSQL_URL`, default
//! `mysql://root@127.0.0.1:3306/test`). Unreachable, they skip with a notice, or fail under
//! `POOLER_REQUIRE_SERVICES=1`.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::time::Duration;

use common::{admin, url};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder};
use pooler::{Member, PoolConfig, Shutdown};
use pooler_mysql::{MysqlManager, Recycle};
use pooler_testkit::scenarios::Watched;
use pooler_testkit::{Proxy, eventually, host_port, scenarios, started};

/// A manager whose connections use database `db` (created if needed), so the server's
/// process list tells them apart.
async fn manager_in(url: &str, db: &str) -> MysqlManager {
    let mut admin = admin(url).await;
    admin
        .query_drop(format!("CREATE DATABASE IF NOT EXISTS {db}"))
        .await
        .unwrap();
    admin.disconnect().await.unwrap();
    let opts = OptsBuilder::from_opts(Opts::from_url(url).unwrap()).db_name(Some(db));
    MysqlManager::from_opts(opts.into())
}

async fn sessions(admin: &mut Conn, db: &str) -> usize {
    let n: Option<u64> = admin
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = ?",
            (db,),
        )
        .await
        .unwrap();
    usize::try_from(n.unwrap_or(0)).unwrap()
}

async fn my_id(conn: &mut Conn) -> u64 {
    conn.query_first("SELECT CONNECTION_ID()")
        .await
        .unwrap()
        .unwrap()
}

/// Kills connection `id` and waits until the server no longer lists it (a KILL returns a
/// moment before the killed connection is gone).
async fn kill(admin: &mut Conn, id: u64) {
    admin.query_drop(format!("KILL {id}")).await.unwrap();
    eventually(
        "the killed connection is gone from the server",
        async || {
            let n: Option<u64> = admin
                .exec_first(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?",
                    (id,),
                )
                .await
                .unwrap();
            n == Some(0)
        },
    )
    .await;
}

async fn in_transaction(conn: &mut Conn) -> bool {
    let v: Option<u8> = conn.query_first("SELECT @@in_transaction").await.unwrap();
    v == Some(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_tasks_share_eight_connections_with_correct_results() {
    let Some(url) = url().await else { return };
    let config = scenarios::sixty_four_config("mysql-64");
    let pool = started(config, MysqlManager::new(&url).unwrap()).await;
    scenarios::sixty_four_tasks_share_eight(&pool, async |mut conn, n| {
        let back: Option<u32> = conn.exec_first("SELECT ?", (n,)).await.unwrap();
        assert_eq!(back, Some(n));
        my_id(&mut conn).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_connection_is_replaced_and_never_handed_out() {
    let Some(url) = url().await else { return };
    let mut admin = admin(&url).await;
    // MySQL connections have no background reader: a check before handing out a connection
    // that has been idle is what finds one killed while free.
    let config = PoolConfig::builder("mysql-kill")
        .init_count(2)
        .max_count(2)
        .idle_check_threshold(Duration::ZERO)
        .build()
        .unwrap();
    let pool = started(config, MysqlManager::new(&url).unwrap()).await;
    scenarios::killed_sessions_are_never_handed_out(
        &pool,
        Watched::AtCheck,
        async |conn| my_id(conn).await,
        async |id| kill(&mut admin, id).await,
        async |conn| conn.query_first::<u8, _>("SELECT 1").await.ok() == Some(Some(1)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_fails_fast_backs_off_and_refills_by_itself() {
    let Some(url) = url().await else { return };
    let proxy = Proxy::start(&host_port(&url)).await;
    proxy.set_open(false);
    let opts = OptsBuilder::from_opts(Opts::from_url(&url).unwrap())
        .ip_or_hostname("127.0.0.1")
        .tcp_port(proxy.addr().port());
    let config = scenarios::outage_config("mysql-outage");
    let pool = started(config, MysqlManager::from_opts(opts.into())).await;
    scenarios::outage_and_recovery(&pool, &proxy, async |conn| {
        conn.query_first::<u8, _>("SELECT 1").await.is_ok()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_lifetime_with_jitter_recycles_real_connections() {
    let Some(url) = url().await else { return };
    let config = scenarios::lifetime_config("mysql-life");
    let pool = started(config, MysqlManager::new(&url).unwrap()).await;
    scenarios::lifetimes_recycle_connections(&pool, async |conn| {
        i64::try_from(my_id(conn).await).unwrap()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_leaves_no_session_open() {
    let Some(url) = url().await else { return };
    let db = "pooler_close";
    let manager = manager_in(&url, db).await;
    let mut admin = admin(&url).await;
    let pool = started(PoolConfig::new("mysql-close", 5, 8), manager).await;
    scenarios::close_leaves_nothing(&pool, async || sessions(&mut admin, db).await).await;
}

/// A connection returned inside a transaction: the next user of the same connection is not in
/// it, and nothing done inside it was committed. With `Recycle::Nothing`, it is (the
/// documented trade-off), which shows the test can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_returned_inside_a_transaction_is_rolled_back() {
    let Some(url) = url().await else { return };
    let mut admin = admin(&url).await;
    admin
        .query_drop("CREATE TABLE IF NOT EXISTS pooler_tx (v INT) ENGINE=InnoDB")
        .await
        .unwrap();
    admin.query_drop("DELETE FROM pooler_tx").await.unwrap();
    for recycle in [Recycle::Rollback, Recycle::Reset] {
        let pool = started(
            PoolConfig::new("mysql-tx", 1, 1),
            MysqlManager::new(&url).unwrap().recycle(recycle),
        )
        .await;
        let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
        let id = Member::id(&conn);
        conn.query_drop("BEGIN").await.unwrap();
        conn.query_drop("INSERT INTO pooler_tx VALUES (1)")
            .await
            .unwrap();
        assert!(in_transaction(&mut conn).await);
        drop(conn);
        let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
        assert_eq!(Member::id(&conn), id, "{recycle:?}: the same connection");
        assert!(!in_transaction(&mut conn).await, "{recycle:?}: outside");
        drop(conn);
        pool.close(Shutdown::Graceful).await;
        let rows: Option<u64> = admin
            .query_first("SELECT COUNT(*) FROM pooler_tx")
            .await
            .unwrap();
        assert_eq!(rows, Some(0), "{recycle:?}: nothing was committed");
    }

    let pool = started(
        PoolConfig::new("mysql-tx-plain", 1, 1),
        MysqlManager::new(&url).unwrap().recycle(Recycle::Nothing),
    )
    .await;
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    conn.query_drop("BEGIN").await.unwrap();
    drop(conn);
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert!(in_transaction(&mut conn).await);
    conn.query_drop("ROLLBACK").await.unwrap();
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// The pool's connections count against the server the way a user would see them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_sees_exactly_the_pools_connections() {
    let Some(url) = url().await else { return };
    let db = "pooler_count";
    let manager = manager_in(&url, db).await;
    let mut admin = admin(&url).await;
    let pool = started(PoolConfig::new("mysql-count", 3, 3), manager).await;
    eventually("the server lists three sessions", async || {
        sessions(&mut admin, db).await == 3
    })
    .await;
    pool.close(Shutdown::Graceful).await;
}

/// A `tcp_keepalive` the socket refuses (past Linux's 32 767 s) made every connect fail with
/// "Invalid argument", naming no setting: options handed over whole have each start's error
/// name it (`MysqlManager::new` refuses it by name: a unit test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keepalive_the_socket_refuses_is_named_by_its_key() {
    let Some(url) = url().await else { return };
    let opts = OptsBuilder::from_opts(Opts::from_url(&url).unwrap())
        .tcp_keepalive(Some(Duration::from_secs(36_000)));
    let pool = pooler::Pool::start_lazy(
        PoolConfig::new("mysql-keepalive", 0, 1),
        MysqlManager::from_opts(opts.into()),
    )
    .unwrap();
    let Err(refused) = pool.take_member(Duration::from_millis(500)).await else {
        panic!("connected with a keepalive of 10 hours");
    };
    assert!(
        refused.to_string().contains("tcp_keepalive"),
        "the start error names tcp_keepalive: {refused}"
    );
    pool.close(Shutdown::Immediate).await;
}
