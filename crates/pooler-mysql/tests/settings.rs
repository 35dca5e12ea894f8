//! A pool built from settings as a pools file names them, live against MySQL or MariaDB.
#![cfg(feature = "serde")]

mod common;

use common::url;
use pooler::PoolConfig;
use pooler_mysql::mysql_async::prelude::Queryable;
use pooler_mysql::{MysqlManager, MysqlSettings};
use pooler_testkit::started;

#[tokio::test]
async fn a_pool_from_settings_connects_where_they_say() {
    let Some(url) = url().await else { return };
    let settings: MysqlSettings = toml::from_str(&format!(
        "url = \"{url}\"\nsetup = [\"SET @from_settings = 42\", \"SET SESSION wait_timeout = 600\"]"
    ))
    .unwrap();
    let pool = started(
        PoolConfig::new("settings", 1, 1),
        MysqlManager::from_settings(&settings).unwrap(),
    )
    .await;
    let mut conn = pool.take().await.unwrap();
    let id = pooler::Member::id(&conn);
    let session = "SELECT @from_settings, @@session.wait_timeout";
    let row: Option<(Option<i64>, i64)> = conn.query_first(session).await.unwrap();
    assert_eq!(row, Some((Some(42), 600)));
    // The user changes both; the session reset on return must bring the settings' back.
    conn.query_drop("SET @from_settings = 1, SESSION wait_timeout = 30")
        .await
        .unwrap();
    drop(conn);
    let mut conn = pool.take().await.unwrap();
    assert_eq!(pooler::Member::id(&conn), id, "the same connection, reset");
    let row: Option<(Option<i64>, i64)> = conn.query_first(session).await.unwrap();
    assert_eq!(
        row,
        Some((Some(42), 600)),
        "every user starts from the settings' statements"
    );
}
