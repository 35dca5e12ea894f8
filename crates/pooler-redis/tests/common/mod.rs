//! What the live test files share: where the server is, and a connection to look at it
//! from outside the pool.
#![allow(dead_code)] // each test file uses what it needs

use pooler_redis::redis;
use pooler_testkit::Server;

pub(crate) async fn url() -> Option<String> {
    Server::Redis.url().await
}

/// A plain connection for looking at the server from outside the pool.
pub(crate) async fn admin(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("admin connection")
}
