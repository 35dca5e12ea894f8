//! A dead link under diesel-async's MySQL connection: MariaDB reached through a network
//! namespace whose link the test takes down (`pooler_testkit::blackhole`). As with
//! pooler-mysql, no socket option bounds a dead link here (mysql_async offers only the
//! keepalive's idle time, which `DieselManager::new` sets): the check before a take
//! (`idle_check_threshold`), bounded by `member_start_timeout`, keeps a member on a dead link
//! from being handed out. A few seconds of real time.
#![cfg(feature = "mysql")]
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

use pooler::Pool;
use pooler_diesel_async::DieselManager;
use pooler_diesel_async::diesel_async::{AsyncMysqlConnection, SimpleAsyncConnection};
use pooler_testkit::blackhole::Blackhole;
use pooler_testkit::{host_port, scenarios, service};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_member_on_a_dead_link_is_checked_and_never_handed_out() {
    let Some(url) = service(
        "POOLER_MYSQL_URL",
        "mysql://root@127.0.0.1:3306/test",
        host_port,
    )
    .await
    else {
        return;
    };
    let Some(hole) = Blackhole::in_front_of(&url) else {
        return;
    };
    // Not over the Unix socket mysql_async moves to for a server on this host.
    let via = format!("mysql://root@{}/test?prefer_socket=false", hole.addr());
    let pool = Pool::start(
        scenarios::checked_config("diesel-mysql-dead"),
        DieselManager::<AsyncMysqlConnection>::new(via),
    )
    .await
    .unwrap();
    scenarios::checked_across_a_dead_link(&pool, &hole, async |conn| {
        conn.batch_execute("SELECT 1").await.is_ok()
    })
    .await;
}
