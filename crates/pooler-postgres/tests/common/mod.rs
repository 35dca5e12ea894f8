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
