//! What the live test files share: where the server is, and a connection to look at it
//! from outside the pool.
#![allow(dead_code)] // each test file uses what it needs

use mysql_async::{Conn, Opts};
use pooler_testkit::Server;

pub(crate) async fn url() -> Option<String> {
    Server::Mysql.url().await
}

/// A plain connection for looking at the server from outside the pool.
pub(crate) async fn admin(url: &str) -> Conn {
    Conn::new(Opts::from_url(url).unwrap())
        .await
        .expect("admin connection")
}
