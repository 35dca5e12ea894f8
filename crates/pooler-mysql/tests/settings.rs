//! A pool built from settings as a pools file names them, live against MySQL or MariaDB.
#![cfg(feature = "serde")]

mod common;

use common::url;
use pooler::{Pool, PoolConfig};
use pooler_mysql::mysql_async::prelude::Queryable;
use pooler_mysql::{MysqlManager, MysqlSettings};

#[tokio::test]
async fn a_pool_from_settings_connects_where_they_say() {
    let Some(url) = url().await else { return };
    let settings: MysqlSettings = toml::from_str(&format!(
        "url = \"{url}\"\ninit = [\"SET @from_settings = 42\", \"SET SESSION wait_timeout = 600\"]"
    ))
    .unwrap();
    let pool = Pool::start(
        PoolConfig::new("settings", 1, 1),
        MysqlManager::from_settings(&settings).unwrap(),
    )
    .await
    .unwrap();
    let mut conn = pool.take().await.unwrap();
    let row: Option<(i64, i64)> = conn
        .query_first("SELECT @from_settings, @@session.wait_timeout")
        .await
        .unwrap();
    assert_eq!(row, Some((42, 600)));
}
