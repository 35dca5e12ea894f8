//! The hand-over: whatever one user leaves on a connection — an answer unread after a
//! cancelled query, `autocommit = 0`, locks, variables, temporary tables — never reaches the
//! next user. Live against MySQL or MariaDB (`POOLER_MYSQL_URL`).
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use common::{admin, url};
use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use pooler::{Member, Pool, PoolConfig, Shutdown};
use pooler_mysql::{MysqlManager, Recycle};
use pooler_testkit::started;

async fn one_of_one(url: &str, recycle: Recycle) -> pooler_mysql::Pool {
    Pool::start(
        PoolConfig::new("mysql-handover", 1, 1),
        MysqlManager::new(url).unwrap().recycle(recycle),
    )
    .await
    .expect("pool starts")
}

async fn take(pool: &pooler_mysql::Pool) -> pooler_mysql::Member {
    pool.take_member(Duration::from_secs(5))
        .await
        .expect("a connection")
}

/// A query cancelled by a timeout leaves its answer unread: the next user of that connection
/// must not read it as theirs (the last user's row), nor find the connection out of step —
/// in any mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_left_unread_by_a_cancelled_query_never_reaches_the_next_user() {
    let Some(url) = url().await else { return };
    for recycle in [Recycle::Reset, Recycle::Rollback, Recycle::Nothing] {
        let pool = one_of_one(&url, recycle).await;
        for round in 0..3 {
            let mut conn = take(&pool).await;
            let first = Member::id(&conn);
            let cancelled = tokio::time::timeout(
                Duration::from_millis(20),
                conn.query_first::<String, _>(
                    "SELECT 'the last user''s secret' FROM (SELECT SLEEP(0.2)) s",
                ),
            )
            .await;
            assert!(cancelled.is_err(), "the query was cancelled");
            drop(conn);
            let mut conn = take(&pool).await;
            let mine: Option<String> = conn.query_first("SELECT 'mine'").await.unwrap();
            assert_eq!(mine.as_deref(), Some("mine"), "{recycle:?}, round {round}");
            let two: Option<u32> = conn.query_first("SELECT 2").await.unwrap();
            assert_eq!(two, Some(2), "{recycle:?}, round {round}: in step");
            assert_ne!(
                Member::id(&conn),
                first,
                "{recycle:?}: replaced, not handed on"
            );
        }
        pool.close(Shutdown::Graceful).await;
    }
}

/// What the next user can see of a session, one string a probe: autocommit, sql_mode, a user
/// variable, the named lock, the time zone, whether a temporary table shadows a name, and
/// whether a table outside a `LOCK TABLES` can be read.
async fn fingerprint(conn: &mut Conn) -> Vec<String> {
    let mut seen = Vec::new();
    let row: Option<mysql_async::Row> = conn
        .query_first(
            "SELECT @@autocommit, @@session.sql_mode, @pooler_var, \
             IS_USED_LOCK('pooler_lock') <=> CONNECTION_ID(), @@session.time_zone, \
             @@session.tx_read_only, DATABASE(), CURRENT_ROLE()",
        )
        .await
        .unwrap();
    seen.extend(row.unwrap().unwrap().into_iter().map(|v| format!("{v:?}")));
    for probe in [
        "SELECT COUNT(*) FROM pooler_shadowed",
        "SELECT COUNT(*) FROM pooler_other",
    ] {
        let answer: Result<Option<i64>, _> = conn.query_first(probe).await;
        seen.push(format!("{probe}: {:?}", answer.map_err(|_| "refused")));
    }
    seen
}

type Leave = for<'a> fn(&'a mut Conn) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

fn ways() -> Vec<(&'static str, Leave)> {
    vec![
        ("autocommit = 0", |c| {
            Box::pin(async move { c.query_drop("SET autocommit = 0").await.unwrap() })
        }),
        ("a transaction left open", |c| {
            Box::pin(async move {
                c.query_drop("START TRANSACTION").await.unwrap();
                c.query_drop("INSERT INTO pooler_other VALUES (9)")
                    .await
                    .unwrap();
            })
        }),
        ("LOCK TABLES", |c| {
            Box::pin(async move {
                c.query_drop("LOCK TABLES pooler_locked WRITE")
                    .await
                    .unwrap();
            })
        }),
        ("a named lock (GET_LOCK)", |c| {
            Box::pin(async move {
                c.query_drop("SELECT GET_LOCK('pooler_lock', 1)")
                    .await
                    .unwrap();
            })
        }),
        ("a user variable", |c| {
            Box::pin(async move { c.query_drop("SET @pooler_var = 'left'").await.unwrap() })
        }),
        ("a temporary table shadowing a name", |c| {
            Box::pin(async move {
                c.query_drop("CREATE TEMPORARY TABLE pooler_shadowed (x INT)")
                    .await
                    .unwrap();
            })
        }),
        ("sql_mode", |c| {
            Box::pin(async move {
                c.query_drop("SET SESSION sql_mode = 'ANSI_QUOTES'")
                    .await
                    .unwrap();
            })
        }),
        ("USE another database", |c| {
            Box::pin(async move { c.query_drop("USE pooler_elsewhere").await.unwrap() })
        }),
        ("SET ROLE", |c| {
            Box::pin(async move { c.query_drop("SET ROLE pooler_role").await.unwrap() })
        }),
        ("time_zone and read-only transactions", |c| {
            Box::pin(async move {
                c.query_drop("SET time_zone = '+05:00'").await.unwrap();
                c.query_drop("SET SESSION TRANSACTION READ ONLY")
                    .await
                    .unwrap();
            })
        }),
    ]
}

/// The hand-over matrix for the default mode: every way of leaving state, and the next user's
/// view of the session compared with a new connection's; nothing the last user did inside an
/// open transaction is committed, and other sessions are not left blocked on a lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_hands_on_a_session_like_a_new_one() {
    let Some(url) = url().await else { return };
    let mut admin = admin(&url).await;
    for sql in [
        "CREATE TABLE IF NOT EXISTS pooler_other (v INT)",
        "CREATE TABLE IF NOT EXISTS pooler_locked (v INT)",
        "DELETE FROM pooler_other",
        "CREATE DATABASE IF NOT EXISTS pooler_elsewhere",
        "CREATE ROLE IF NOT EXISTS pooler_role",
        "GRANT pooler_role TO CURRENT_USER",
    ] {
        admin.query_drop(sql).await.unwrap();
    }
    let fresh = fingerprint(&mut self::admin(&url).await).await;
    for (way, leave) in ways() {
        let pool = one_of_one(&url, Recycle::default()).await;
        let mut conn = take(&pool).await;
        let id = Member::id(&conn);
        leave(&mut conn).await;
        drop(conn);
        let mut conn = take(&pool).await;
        assert_eq!(Member::id(&conn), id, "{way}: the same connection, kept");
        assert_eq!(
            fingerprint(&mut conn).await,
            fresh,
            "{way}: the next user's session differs from a new one's"
        );
        // The next user's write lands, whatever the last user set.
        conn.query_drop("INSERT INTO pooler_other VALUES (1)")
            .await
            .unwrap();
        drop(conn);
        drop(take(&pool).await);
        let committed: Option<i64> = admin
            .query_first("SELECT COUNT(*) FROM pooler_other WHERE v = 1")
            .await
            .unwrap();
        assert_eq!(committed, Some(1), "{way}: the next user's write was kept");
        let left: Option<i64> = admin
            .query_first("SELECT COUNT(*) FROM pooler_other WHERE v = 9")
            .await
            .unwrap();
        assert_eq!(
            left,
            Some(0),
            "{way}: the abandoned transaction was rolled back"
        );
        let free: Option<i64> = admin
            .query_first("SELECT IS_FREE_LOCK('pooler_lock')")
            .await
            .unwrap();
        assert_eq!(free, Some(1), "{way}: the named lock was released");
        admin.query_drop("DELETE FROM pooler_other").await.unwrap();
        pool.close(Shutdown::Graceful).await;
    }
}

/// Hooks: `after_connect` sets the session every user starts from, and the reset on return
/// does not take it away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_connect_survives_the_reset() {
    let Some(url) = url().await else { return };
    let hooks = pooler::Hooks::default().after_connect(|conn: &mut Conn| {
        Box::pin(async move {
            conn.query_drop("SET time_zone = '+01:00'").await?;
            Ok(())
        })
    });
    let pool = started(
        PoolConfig::new("mysql-hooks", 1, 1),
        MysqlManager::new(&url).unwrap().hooks(hooks),
    )
    .await;
    for _ in 0..3 {
        let mut conn = take(&pool).await;
        let zone: Option<String> = conn
            .query_first("SELECT @@session.time_zone")
            .await
            .unwrap();
        assert_eq!(zone.as_deref(), Some("+01:00"));
        conn.query_drop("SET time_zone = '+07:00'").await.unwrap();
    }
    pool.close(Shutdown::Graceful).await;
}

/// The other modes do what the README's table says: `Rollback` ends the transaction and
/// keeps the session's state; `Nothing` keeps both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_other_modes_keep_what_the_table_says() {
    let Some(url) = url().await else { return };
    for (recycle, transaction_kept) in [(Recycle::Rollback, false), (Recycle::Nothing, true)] {
        let pool = one_of_one(&url, recycle).await;
        let mut conn = take(&pool).await;
        conn.query_drop("SET @pooler_var = 'left'").await.unwrap();
        conn.query_drop("START TRANSACTION").await.unwrap();
        drop(conn);
        let mut conn = take(&pool).await;
        let var: Option<String> = conn.query_first("SELECT @pooler_var").await.unwrap();
        assert_eq!(
            var.as_deref(),
            Some("left"),
            "{recycle:?}: the session kept"
        );
        let started: Option<i64> = conn.query_first("SELECT @@in_transaction").await.unwrap();
        assert_eq!(
            started == Some(1),
            transaction_kept,
            "{recycle:?}: the transaction"
        );
        drop(conn);
        pool.close(Shutdown::Graceful).await;
    }
}

/// A transaction guard forgotten (`std::mem::forget`): the reset rolls the server back, and
/// the client must not go on believing it is in a transaction — the next user's
/// `start_transaction` works, and their write lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_transaction_guard_never_blocks_the_next_users_transaction() {
    let Some(url) = url().await else { return };
    let mut admin = admin(&url).await;
    admin
        .query_drop("CREATE TABLE IF NOT EXISTS pooler_forgot (v INT)")
        .await
        .unwrap();
    admin.query_drop("DELETE FROM pooler_forgot").await.unwrap();
    let pool = one_of_one(&url, Recycle::default()).await;
    for round in 0..3 {
        let mut conn = take(&pool).await;
        let tx = conn
            .start_transaction(mysql_async::TxOpts::default())
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        std::mem::forget(tx);
        drop(conn);
        let mut conn = take(&pool).await;
        let mut tx = conn
            .start_transaction(mysql_async::TxOpts::default())
            .await
            .unwrap_or_else(|e| panic!("round {round}: the next user's transaction: {e}"));
        tx.query_drop("INSERT INTO pooler_forgot VALUES (1)")
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    let landed: Option<i64> = admin
        .query_first("SELECT COUNT(*) FROM pooler_forgot")
        .await
        .unwrap();
    assert_eq!(landed, Some(3));
    pool.close(Shutdown::Graceful).await;
}

/// `change_user` to another user or database: the connection is not handed on as that user
/// (the pool's next user starts as the manager's user, in its database).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_changed_to_another_user_or_database_is_not_handed_on() {
    let Some(url) = url().await else { return };
    let mut admin = admin(&url).await;
    for sql in [
        "CREATE DATABASE IF NOT EXISTS pooler_elsewhere",
        "CREATE USER IF NOT EXISTS 'pooler_other_user'@'%'",
        "CREATE USER IF NOT EXISTS 'pooler_other_user'@'localhost'",
    ] {
        admin.query_drop(sql).await.unwrap();
    }
    let expected: Option<(String, Option<String>)> = admin
        .query_first("SELECT SUBSTRING_INDEX(USER(), '@', 1), DATABASE()")
        .await
        .unwrap();
    let pool = one_of_one(&url, Recycle::default()).await;
    for change in [
        mysql_async::ChangeUserOpts::default().with_db_name(Some("pooler_elsewhere".into())),
        mysql_async::ChangeUserOpts::default()
            .with_user(Some("pooler_other_user".into()))
            .with_pass(None)
            .with_db_name(None),
    ] {
        let mut conn = take(&pool).await;
        conn.change_user(change.clone()).await.unwrap();
        drop(conn);
        let mut conn = take(&pool).await;
        let seen: Option<(String, Option<String>)> = conn
            .query_first("SELECT SUBSTRING_INDEX(USER(), '@', 1), DATABASE()")
            .await
            .unwrap();
        assert_eq!(seen, expected, "after {change:?}");
    }
    pool.close(Shutdown::Graceful).await;
}

/// A query cancelled right after it was written, before mysql_async knew to wait for its
/// answer, and the connection used again: the next command reads the cancelled one's answer,
/// and the connection is out of step without mysql_async's mark. Found by the hand-over
/// fuzzer. The next user of the pool must never read an answer that is not theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_out_of_step_is_never_handed_on() {
    let Some(url) = url().await else { return };
    for recycle in [Recycle::Reset, Recycle::Rollback] {
        let pool = one_of_one(&url, recycle).await;
        for round in 0..5 {
            let mut conn = take(&pool).await;
            let _ = tokio::time::timeout(
                Duration::from_millis(1),
                conn.query_drop("SELECT SLEEP(0.05)"),
            )
            .await;
            let _ = conn.query_drop("SET @pooler_after = 1").await;
            drop(conn);
            let mut conn = take(&pool).await;
            let mine: Option<String> = conn.query_first("SELECT 'mine'").await.unwrap();
            assert_eq!(mine.as_deref(), Some("mine"), "{recycle:?}, round {round}");
        }
        pool.close(Shutdown::Graceful).await;
    }
}
