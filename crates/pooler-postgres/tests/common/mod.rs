//! What the live test files share: where the server is, and a connection to look at it
//! from outside the pool.
#![allow(dead_code)] // each test file uses what it needs

use pooler_testkit::{host_port, service};

pub(crate) const DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/test";

pub(crate) async fn url() -> Option<String> {
    service("POOLER_POSTGRES_URL", DEFAULT, host_port).await
}

/// A plain connection for looking at the server from outside the pool.
pub(crate) async fn admin(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("admin connection");
    tokio::spawn(conn);
    client
}
