//! What the live test files share: where the server is, and a connection to look at it
//! from outside the pool.
#![allow(dead_code)] // each test file uses what it needs

use pooler_testkit::Server;

pub(crate) async fn url() -> Option<String> {
    Server::Postgres.url().await
}

/// A plain connection for looking at the server from outside the pool.
pub(crate) async fn admin(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("admin connection");
    tokio::spawn(conn);
    client
}

/// Waits until the server session `pid` is running a statement (so that a cancel request sent
/// now finds it running, not idle before it).
pub(crate) async fn running(admin: &tokio_postgres::Client, pid: i32) {
    for _ in 0..500 {
        let active: bool = admin
            .query_one(
                "SELECT count(*) = 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active'",
                &[&pid],
            )
            .await
            .expect("pg_stat_activity")
            .get(0);
        if active {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("session {pid} never ran its statement");
}

/// `SELECT pg_sleep(60)` on `conn` ends with `query_canceled`: `cancel` (a cancel request for
/// the session `pid`) is sent from another task once the query runs, and must go through.
pub(crate) async fn sleep_is_cancelled<F, E>(
    conn: &tokio_postgres::Client,
    admin: tokio_postgres::Client,
    pid: i32,
    cancel: F,
) where
    F: std::future::Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Debug + Send + 'static,
{
    let canceller = tokio::spawn(async move {
        running(&admin, pid).await;
        cancel.await
    });
    let e = conn
        .batch_execute("SELECT pg_sleep(60)")
        .await
        .expect_err("cancelled");
    assert_eq!(
        e.code(),
        Some(&tokio_postgres::error::SqlState::QUERY_CANCELED),
        "{e}"
    );
    canceller
        .await
        .unwrap()
        .expect("the cancel request went through");
}

/// The server process id of `client`'s session.
pub(crate) async fn backend_pid(client: &tokio_postgres::Client) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

/// The one row `sql` answers over the simple protocol, each column as text (`None`: NULL):
/// what the hand-over tests compare a session by.
pub(crate) async fn one_row(conn: &tokio_postgres::Client, sql: &str) -> Vec<Option<String>> {
    let messages = conn.simple_query(sql).await.expect("the row's query");
    let row = messages
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        })
        .expect("a row");
    (0..row.len())
        .map(|i| row.get(i).map(str::to_owned))
        .collect()
}

/// An `after_connect` hook whose set-up has one of each kind of state a user's statement can
/// undo: a search path, a listener, a temporary table, a prepared statement, a cursor
/// `WITH HOLD` (all named `pooler_hooked`) and advisory lock 4242.
pub(crate) fn hooked_set_up() -> pooler::Hooks<pooler_postgres::PgConnection> {
    pooler::Hooks::default().after_connect(|conn: &mut pooler_postgres::PgConnection| {
        Box::pin(async move {
            conn.batch_execute(
                "SET search_path TO pg_catalog, public; LISTEN pooler_hooked; \
                 CREATE TEMP TABLE pooler_hooked (x int); \
                 PREPARE pooler_hooked AS SELECT 1; SELECT pg_advisory_lock(4242); \
                 DECLARE pooler_hooked CURSOR WITH HOLD FOR SELECT 1",
            )
            .await?;
            Ok(())
        })
    })
}
