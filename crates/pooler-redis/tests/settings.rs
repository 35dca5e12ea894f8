//! A pool built from settings as a pools file names them, live against Redis.
#![cfg(feature = "serde")]

mod common;

use common::url;
use pooler::PoolConfig;
use pooler_redis::redis;
use pooler_redis::{RedisManager, RedisSettings};
use pooler_testkit::started;

#[tokio::test]
async fn a_pool_from_settings_connects_where_they_say() {
    let Some(url) = url().await else { return };
    let settings: RedisSettings = toml::from_str(&format!(
        "url = \"{url}\"\ndb = 3\nclient_name = \"from-settings\"\nprotocol = \"resp3\""
    ))
    .unwrap();
    let manager = RedisManager::from_settings(&settings).unwrap();
    let pool = started(PoolConfig::new("settings", 1, 1), manager).await;
    let mut conn = pool.take().await.unwrap();
    let name: String = redis::cmd("CLIENT")
        .arg("GETNAME")
        .query_async(&mut *conn)
        .await
        .unwrap();
    assert_eq!(name, "from-settings");
    let info: String = redis::cmd("CLIENT")
        .arg("INFO")
        .query_async(&mut *conn)
        .await
        .unwrap();
    assert!(info.contains(" db=3 "), "{info}");
    assert!(info.contains(" resp=3"), "{info}");
}
