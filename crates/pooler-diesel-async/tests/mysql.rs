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
    "POOLER_MYSQL_URL",
    "mysql://root@127.0.0.1:3306/test",
    session = "CAST(CONNECTION_ID() AS SIGNED)",
    sleep = "DO SLEEP(1)"
);

/// `SET autocommit = 0` left by one user: the next user's INSERT must be committed, not
/// rolled back at their return.
#[tokio::test]
async fn autocommit_off_never_loses_the_next_users_write() {
    use pooler_diesel_async::diesel::sql_query;
    let Some(url) = url().await else { return };
    let pool = pool(&url, 1).await;
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    sql_query("CREATE TABLE IF NOT EXISTS pooler_diesel_autocommit (v INT)")
        .execute(&mut *conn)
        .await
        .unwrap();
    sql_query("DELETE FROM pooler_diesel_autocommit")
        .execute(&mut *conn)
        .await
        .unwrap();
    sql_query("SET autocommit = 0")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    sql_query("INSERT INTO pooler_diesel_autocommit VALUES (1)")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    drop(pool.take_member(Duration::from_secs(5)).await.unwrap());
    let mut other = AsyncMysqlConnection::establish(&url).await.unwrap();
    let n: i64 = select(sql::<BigInt>(
        "(SELECT COUNT(*) FROM pooler_diesel_autocommit)",
    ))
    .get_result(&mut other)
    .await
    .unwrap();
    assert_eq!(n, 1, "the next user's write landed");
    pool.close(Shutdown::Graceful).await;
}
