//! Live tests against MySQL or MariaDB (`POOLER_MYSQL_URL`, default
//! `mysql://root@127.0.0.1:3306/test`). Unreachable, they skip with a notice, or fail under
//! `POOLER_REQUIRE_SERVICES=1`.
#![cfg(feature = "mysql")]
#![allow(clippy::disallowed_methods)] // tests spawn their own users

#[macro_use]
mod common;

use pooler_diesel_async::diesel_async::AsyncMysqlConnection;

live_tests!(
    AsyncMysqlConnection,
    pooler_testkit::Server::Mysql,
    session = "CAST(CONNECTION_ID() AS SIGNED)",
    sleep = "DO SLEEP(1)",
    refused = "tcp_keepalive=36000000",
    key = "tcp_keepalive"
);

/// `SET autocommit = 0` left by one user: the next user's INSERT must be committed, not
/// rolled back at their return.
#[tokio::test]
async fn autocommit_off_never_loses_the_next_users_write() {
    next_users_write_lands_after("SET autocommit = 0", "pooler_diesel_autocommit").await;
}

/// What one user leaves on a MySQL session no statement resets — a user variable (also one
/// assigned inside a `SELECT`), a session variable, a temporary table, a named lock, a
/// database switched to — never reaches the next user: the next user reads what a new
/// connection reads. A user who leaves nothing keeps the connection (no new connection per
/// return).
#[tokio::test]
async fn session_state_a_user_leaves_never_reaches_the_next_user() {
    use pooler_diesel_async::diesel::sql_query;
    use pooler_diesel_async::diesel::sql_types::{Nullable, Text};
    use pooler_diesel_async::diesel_async::SimpleAsyncConnection;
    let Some(url) = url().await else { return };
    let pool = pool(&url, 1).await;
    // (what the user runs, what the next user reads: what a new connection reads there)
    let cases: [(&str, &str); 6] = [
        ("SET @tenant = 42", "CAST(@tenant AS CHAR)"),
        ("SELECT @tenant := 42", "CAST(@tenant AS CHAR)"),
        ("SET SESSION sql_mode = 'ANSI'", "@@SESSION.sql_mode"),
        (
            "CREATE TEMPORARY TABLE pooler_left (a INT)",
            "(SELECT CAST(COUNT(*) AS CHAR) FROM pooler_left)",
        ),
        (
            "DO GET_LOCK('pooler-left', 0)",
            "CAST(IS_USED_LOCK('pooler-left') AS CHAR)",
        ),
        ("USE mysql", "DATABASE()"),
    ];
    let mut fresh = AsyncMysqlConnection::establish(&url).await.unwrap();
    for (left, read) in cases {
        let expected: Option<String> = select(sql::<Nullable<Text>>(read))
            .get_result(&mut fresh)
            .await
            .ok()
            .flatten();
        let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
        conn.batch_execute(left).await.unwrap();
        drop(conn);
        let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
        let seen: Option<String> = select(sql::<Nullable<Text>>(read))
            .get_result(&mut *conn)
            .await
            .ok()
            .flatten();
        assert_eq!(
            seen, expected,
            "after `{left}`, the next user read `{read}`"
        );
    }
    // Nothing left — queries, writes, a diesel transaction: the same connection serves the
    // next user.
    // (A CREATE TABLE counts as a statement that may leave state — MySQL counts temporary
    // tables with the others — so the table is made outside the pool.)
    sql_query("CREATE TABLE IF NOT EXISTS pooler_diesel_kept (v INT)")
        .execute(&mut fresh)
        .await
        .unwrap();
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let id = pooler::Member::id(&conn);
    sql_query("SELECT 1").execute(&mut *conn).await.unwrap();
    conn.transaction::<_, pooler_diesel_async::diesel::result::Error, _>(async |c| {
        sql_query("INSERT INTO pooler_diesel_kept VALUES (1)")
            .execute(c)
            .await
    })
    .await
    .unwrap();
    drop(conn);
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        pooler::Member::id(&conn),
        id,
        "a clean connection was replaced"
    );
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}
