//! The differential hand-over fuzzer for MySQL and MariaDB: user A runs a random sequence of
//! statements and API calls — ones that leave session state and ones that do not, as text
//! and as prepared statements, cancelled part-way, a transaction guard forgotten, a
//! `change_user` elsewhere — then gives the connection back; user B's view of the session
//! must equal a new connection's, and B's write must be durable. Live (`POOLER_MYSQL_URL`).
//!
//! CI runs `POOLER_FUZZ_CASES` sequences (default 64); the documented long run is 10 000.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::time::Duration;

use mysql_async::prelude::Queryable;
use pooler::{Member, PoolConfig, Shutdown};
use pooler_mysql::MysqlManager;
use pooler_testkit::handover::Session;
use pooler_testkit::started;
use proptest::prelude::*;

/// What user A does.
#[derive(Debug, Clone, Copy)]
enum Act {
    /// A statement as text.
    Text(&'static str),
    /// The same, as a prepared statement.
    Prepared(&'static str),
    /// The same, cancelled by a deadline already spent: its answer never read.
    Cancelled(&'static str),
    /// `start_transaction` and the guard forgotten.
    ForgottenTransaction,
    /// `change_user` to another database.
    ChangeUser,
}

const STATEMENTS: &[&str] = &[
    "SELECT 1",
    "SELECT 'SET autocommit = 0; USE x'",
    "SET autocommit = 0",
    "START TRANSACTION",
    "INSERT INTO pooler_mfuzz_a VALUES (1)",
    "COMMIT",
    "ROLLBACK",
    "LOCK TABLES pooler_mfuzz_l WRITE",
    "UNLOCK TABLES",
    "SELECT GET_LOCK('pooler_mfuzz', 0)",
    "SET @pooler_v = 'left'",
    "CREATE TEMPORARY TABLE IF NOT EXISTS pooler_mfuzz_t (x INT)",
    "SET SESSION sql_mode = 'ANSI_QUOTES'",
    "SET time_zone = '+05:00'",
    "SET SESSION TRANSACTION READ ONLY",
    "USE pooler_elsewhere",
    "SET ROLE pooler_role",
    "SELECT SLEEP(0.05)",
];

fn act() -> impl Strategy<Value = Act> {
    let statement = || proptest::sample::select(STATEMENTS);
    prop_oneof![
        4 => statement().prop_map(Act::Text),
        2 => statement().prop_map(Act::Prepared),
        1 => statement().prop_map(Act::Cancelled),
        1 => Just(Act::ForgottenTransaction),
        1 => Just(Act::ChangeUser),
    ]
}

struct Mysql;

impl Session for Mysql {
    type Manager = MysqlManager;
    type Action = Act;

    async fn act(&self, conn: &mut Member<MysqlManager>, act: &Act) {
        match *act {
            Act::Text(sql) => drop(conn.query_drop(sql).await),
            Act::Prepared(sql) => drop(conn.exec_drop(sql, ()).await),
            Act::Cancelled(sql) => {
                drop(tokio::time::timeout(Duration::from_millis(1), conn.query_drop(sql)).await);
            }
            Act::ForgottenTransaction => {
                if let Ok(tx) = conn.start_transaction(mysql_async::TxOpts::default()).await {
                    std::mem::forget(tx);
                }
            }
            Act::ChangeUser => {
                let to = mysql_async::ChangeUserOpts::default()
                    .with_db_name(Some("pooler_elsewhere".into()));
                drop(conn.change_user(to).await);
            }
        }
    }

    async fn observe(&self, conn: &mut Member<MysqlManager>) -> String {
        let row: Option<mysql_async::Row> = conn
            .query_first(
                "SELECT @@autocommit, @@session.sql_mode, @pooler_v, \
                 IS_USED_LOCK('pooler_mfuzz') <=> CONNECTION_ID(), @@session.time_zone, \
                 @@session.tx_read_only, DATABASE(), CURRENT_ROLE(), @@in_transaction, \
                 SUBSTRING_INDEX(USER(), '@', 1)",
            )
            .await
            .unwrap();
        let mut seen: Vec<String> = row
            .unwrap()
            .unwrap()
            .into_iter()
            .map(|v| format!("{v:?}"))
            .collect();
        for probe in [
            "SELECT COUNT(*) FROM pooler_mfuzz_t",
            "SELECT COUNT(*) FROM pooler_mfuzz_b WHERE v < 0",
        ] {
            let answer: Result<Option<i64>, _> = conn.query_first(probe).await;
            seen.push(format!("{probe}: {:?}", answer.map_err(|_| "refused")));
        }
        seen.join("|")
    }

    async fn write(&self, conn: &mut Member<MysqlManager>, mark: i64) -> bool {
        let sql = "INSERT INTO pooler_mfuzz_b VALUES (?)";
        conn.exec_drop(sql, (mark,)).await.is_ok()
    }

    async fn count(&self, conn: &mut Member<MysqlManager>, mark: i64) -> i64 {
        let sql = "SELECT COUNT(*) FROM pooler_mfuzz_b WHERE v = ?";
        let kept: Option<i64> = conn.exec_first(sql, (mark,)).await.unwrap();
        kept.unwrap_or(0)
    }
}

#[test]
fn the_next_user_always_sees_a_session_like_a_new_one() {
    let rt = pooler_testkit::runtime();
    let Some(url) = rt.block_on(common::url()) else {
        return;
    };
    let pool = rt.block_on(async {
        let mut admin = common::admin(&url).await;
        for sql in [
            "CREATE TABLE IF NOT EXISTS pooler_mfuzz_a (v INT)",
            "CREATE TABLE IF NOT EXISTS pooler_mfuzz_b (v BIGINT)",
            "CREATE TABLE IF NOT EXISTS pooler_mfuzz_l (v INT)",
            "CREATE DATABASE IF NOT EXISTS pooler_elsewhere",
            "CREATE ROLE IF NOT EXISTS pooler_role",
            "GRANT pooler_role TO CURRENT_USER",
        ] {
            admin.query_drop(sql).await.unwrap();
        }
        started(
            PoolConfig::new("mysql-fuzz", 1, 1),
            MysqlManager::new(&url).unwrap(),
        )
        .await
    });
    let outcome =
        pooler_testkit::fuzz_handover!(rt, &pool, &Mysql, proptest::collection::vec(act(), 1..8));
    rt.block_on(async {
        let mut admin = common::admin(&url).await;
        let _ = admin.query_drop("DELETE FROM pooler_mfuzz_b").await;
        pool.close(Shutdown::Graceful).await;
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
