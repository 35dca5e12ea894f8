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
