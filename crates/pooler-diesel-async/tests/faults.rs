//! A dead link, for real: PostgreSQL reached through a network namespace whose link the test
//! takes down, so packets vanish with no FIN and no RST (`pooler_testkit::blackhole`). With
//! `DieselManager::new`'s defaults, a query on the dead link fails within the bound
//! (`tcp_user_timeout`, 30 s) and an idle member on it is found dead by the keepalives and
//! never handed out after — diesel-async's own connection sets neither, and hung for the
//! kernel's ~15 minutes. About half a minute of real time: the bound itself.
#![cfg(feature = "postgres")]
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

use std::time::Duration;

use pooler::{PoolConfig, Shutdown};
use pooler_diesel_async::DieselManager;
use pooler_diesel_async::diesel_async::{AsyncPgConnection, SimpleAsyncConnection};
use pooler_testkit::blackhole::Blackhole;
use pooler_testkit::{Server, host_port, scenarios, started};

/// The bound, with a margin for the kernel's timer granularity.
const BOUND: Duration = Duration::from_secs(40);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_on_a_dead_link_fails_and_an_idle_member_is_never_handed_out() {
    let Some((hole, via)) = behind_a_blackhole().await else {
        return;
    };
    let pool = started(
        PoolConfig::new("diesel-dead", 2, 2),
        DieselManager::<AsyncPgConnection>::new(via),
    )
    .await;
    scenarios::busy_and_idle_across_a_dead_link(&pool, &hole, BOUND, async |conn| {
        conn.batch_execute("SELECT 1").await
    })
    .await;
}

/// A close while the server is unreachable: graceful and immediate both end at once and
/// leave no task, as with pooler-postgres.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_with_the_server_unreachable_ends_at_once_and_leaves_no_task() {
    scenarios::closes_across_a_dead_link(
        async |name| {
            let (hole, via) = behind_a_blackhole().await?;
            let manager = DieselManager::<AsyncPgConnection>::new(via);
            Some((hole, started(PoolConfig::new(name, 2, 2), manager).await))
        },
        async |conn| conn.batch_execute("SELECT 1").await,
    )
    .await;
}

/// The server behind a link the test can take down, and the URL that reaches it there.
async fn behind_a_blackhole() -> Option<(Blackhole, String)> {
    let url = Server::Postgres.url().await?;
    let hole = Blackhole::in_front_of(&url)?;
    let via = format!(
        "postgres://postgres@{}/test?sslmode=disable&connect_timeout=3",
        hole.addr()
    );
    Some((hole, via))
}

/// A slow link under load (every chunk waits 50 ms each way): 16 tasks share 4 connections
/// for 2 s, each take with a 300 ms deadline. Every take ends by its deadline, no query
/// fails (the return's round trip crosses the slow link too), no connection is replaced for
/// being slow, and once the link is fast a take is served at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_link_under_load_keeps_every_deadline_and_loses_nothing() {
    use pooler_testkit::{Proxy, scenarios};
    let Some(url) = Server::Postgres.url().await else {
        return;
    };
    let proxy = Proxy::start(&host_port(&url)).await;
    let via = format!("postgres://postgres@{}/test?sslmode=disable", proxy.addr());
    let pool = started(
        PoolConfig::new("diesel-slow-load", 4, 4),
        DieselManager::<AsyncPgConnection>::new(via),
    )
    .await;
    let seen = scenarios::slow_link_under_load(&pool, &proxy, |mut conn| async move {
        conn.batch_execute("SELECT 41 + 1").await.is_ok()
    })
    .await;
    eprintln!("on a slow link under load: {seen:?}");
    scenarios::closes_within(&pool, Shutdown::Graceful, Duration::from_secs(3)).await;
}
