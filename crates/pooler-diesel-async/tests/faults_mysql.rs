//! A dead link under diesel-async's MySQL connection: MariaDB reached through a network
//! namespace whose link the test takes down (`pooler_testkit::blackhole`). As with
//! pooler-mysql, `DieselManager::new` bounds the link once it is open (`TCP_USER_TIMEOUT` and
//! the keepalive probes; mysql_async offers only the keepalive's idle time), and the check
//! before a take (`idle_check_threshold`), bounded by `member_start_timeout`, keeps a member
//! on a dead link from being handed out. A few seconds of real time, 30 for a query on a dead
//! link.
#![cfg(feature = "mysql")]
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

use std::time::Duration;

use pooler::{PoolConfig, Shutdown};
use pooler_diesel_async::diesel_async::{AsyncMysqlConnection, SimpleAsyncConnection};
use pooler_diesel_async::{CHECK_TIMEOUT, DieselManager, PooledConnection};
use pooler_testkit::blackhole::Blackhole;
use pooler_testkit::{Server, scenarios, started};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_member_on_a_dead_link_is_checked_and_never_handed_out() {
    let Some((hole, via)) = behind_a_blackhole().await else {
        return;
    };
    let pool = started(
        scenarios::checked_config("diesel-mysql-dead"),
        DieselManager::<AsyncMysqlConnection>::new(via),
    )
    .await;
    scenarios::checked_across_a_dead_link(&pool, &hole, async |conn| {
        conn.batch_execute("SELECT 1").await.is_ok()
    })
    .await;
}

/// With the pool's defaults the connection's own idle check applies
/// ([`PooledConnection::IDLE_CHECK`], 500 ms for MySQL): a connection idle on a link that
/// died is checked, the check gives up after [`CHECK_TIMEOUT`], and the connection is
/// replaced, never handed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_defaults_an_idle_member_on_a_dead_link_is_never_handed_out() {
    let Some((hole, via)) = behind_a_blackhole().await else {
        return;
    };
    let pool = started(
        PoolConfig::new("diesel-mysql-dead-defaults", 1, 1),
        DieselManager::<AsyncMysqlConnection>::new(via),
    )
    .await;
    scenarios::defaults_across_a_dead_link(
        &pool,
        &hole,
        AsyncMysqlConnection::IDLE_CHECK.expect("MySQL's idle check"),
        CHECK_TIMEOUT,
        async |conn| conn.batch_execute("SELECT 1").await.is_ok(),
    )
    .await;
}

/// A query sent into a link that died fails within the bound (`TCP_USER_TIMEOUT`, 30 s as
/// `DieselManager::new` opens a connection), not after the kernel's ~15 minutes, and the
/// connection is not handed out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_on_a_dead_link_fails_within_the_bound() {
    let Some((hole, via)) = behind_a_blackhole().await else {
        return;
    };
    let pool = started(
        PoolConfig::new("diesel-mysql-dead-query", 1, 1),
        DieselManager::<AsyncMysqlConnection>::new(via),
    )
    .await;
    scenarios::query_across_a_dead_link(&pool, &hole, Duration::from_secs(40), async |conn| {
        conn.batch_execute("SELECT 1").await
    })
    .await;
}

/// A close while the server is unreachable: graceful and immediate both end at once and
/// leave no task, as with pooler-mysql.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_with_the_server_unreachable_ends_at_once_and_leaves_no_task() {
    scenarios::closes_across_a_dead_link(
        async |name| {
            let (hole, via) = behind_a_blackhole().await?;
            let manager = DieselManager::<AsyncMysqlConnection>::new(via);
            Some((hole, started(PoolConfig::new(name, 2, 2), manager).await))
        },
        async |conn| conn.batch_execute("SELECT 1").await,
    )
    .await;
}

/// The server behind a link the test can take down, and the URL that reaches it there — not
/// over the Unix socket mysql_async moves to for a server on this host, which would bypass
/// the link.
async fn behind_a_blackhole() -> Option<(Blackhole, String)> {
    let url = Server::Mysql.url().await?;
    let hole = Blackhole::in_front_of(&url)?;
    let via = format!("mysql://root@{}/test?prefer_socket=false", hole.addr());
    Some((hole, via))
}

/// A server killed (SIGKILL, a MariaDB of the test's own) and started again on its port
/// while writers run (`pooler_testkit::scenarios::restarted_under_writers`), as pooler-mysql
/// is: connections the kill ended are never handed out, the pool serves again by itself
/// once the server listens, and every acknowledged write is there after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_served_again_and_loses_nothing() {
    use pooler_diesel_async::diesel::dsl::{select, sql};
    use pooler_diesel_async::diesel::sql_types::{Nullable, Text};
    use pooler_diesel_async::diesel_async::RunQueryDsl;
    let Some(mut server) = pooler_testkit::mariadb::MariaDbServer::with_writes_table() else {
        return;
    };
    let pool = started(
        PoolConfig::new("diesel-mysql-restart", 4, 4),
        DieselManager::<AsyncMysqlConnection>::new(server.url()),
    )
    .await;
    let seen = scenarios::restarted_under_writers(
        &pool,
        |mut conn, v| async move {
            let insert = format!("INSERT INTO r (v) VALUES ({v})");
            conn.batch_execute(&insert).await.is_ok()
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
            conn.batch_execute("SET SESSION group_concat_max_len = 1073741824")
                .await
                .unwrap();
            let all: Option<String> =
                select(sql::<Nullable<Text>>("(SELECT GROUP_CONCAT(v) FROM r)"))
                    .get_result(&mut *conn)
                    .await
                    .unwrap();
            all.unwrap_or_default()
                .split(',')
                .filter(|v| !v.is_empty())
                .map(|v| v.parse().unwrap())
                .collect()
        },
    )
    .await;
    eprintln!("a server killed and started again: {seen:?}");
    scenarios::closes_within(&pool, Shutdown::Graceful, Duration::from_secs(3)).await;
}
