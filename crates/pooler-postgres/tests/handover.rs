//! The hand-over: whatever one user leaves on a connection — a request cancelled before it
//! was written, a COPY left open, session state — never reaches the next user, who sees a
//! session like a new connection's. Live against PostgreSQL (`POOLER_POSTGRES_URL`).
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::time::Duration;

use common::{admin, url};
use pooler::{Member, Pool, PoolConfig, Shutdown};
use pooler_postgres::{PgConnection, PgManager, Recycle, TxStatus};
use pooler_testkit::handover::poll_once_and_drop;
use pooler_testkit::started;

/// A manager tagged `tag`, cleaning as `recycle` says; the custom setting the tests use for
/// row-level security, `app.tenant`, is declared (`custom_settings`), as applications that
/// set one should.
fn manager(url: &str, tag: &str, recycle: Recycle) -> PgManager {
    let mut config: tokio_postgres::Config = url.parse().expect("a valid URL");
    config.application_name(tag);
    PgManager::from_config(config)
        .recycle(recycle)
        .custom_settings(["app.tenant"])
}

async fn one_of_one(url: &str, tag: &str, recycle: Recycle) -> pooler_postgres::Pool {
    Pool::start(PoolConfig::new(tag, 1, 1), manager(url, tag, recycle))
        .await
        .expect("pool starts")
}

async fn take(pool: &pooler_postgres::Pool) -> pooler_postgres::Member {
    pool.take_member(Duration::from_secs(5))
        .await
        .expect("a connection")
}

async fn count(admin: &tokio_postgres::Client, table: &str) -> i64 {
    admin
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .expect("count")
        .get(0)
}

/// A `BEGIN` cancelled before the driver wrote it reads as idle at the return unless the
/// pool looks at the driver: the next user's INSERT then runs inside it and is rolled back
/// at their return — a lost write. On a current-thread runtime the driver cannot run between
/// the poll and the drop, so this happens every time without the fix.
#[tokio::test(flavor = "current_thread")]
async fn a_begin_cancelled_before_it_was_written_never_swallows_the_next_users_write() {
    let Some(url) = url().await else { return };
    let admin = admin(&url).await;
    admin
        .batch_execute("CREATE TABLE IF NOT EXISTS pooler_lost (v INT); DELETE FROM pooler_lost")
        .await
        .unwrap();
    for recycle in [Recycle::Observed, Recycle::Transaction, Recycle::Always] {
        let pool = one_of_one(&url, "pg-lost", recycle.clone()).await;
        for round in 0..5 {
            {
                let conn = take(&pool).await;
                poll_once_and_drop(conn.batch_execute("BEGIN")).await;
            }
            {
                let conn = take(&pool).await;
                conn.batch_execute("INSERT INTO pooler_lost VALUES (1)")
                    .await
                    .unwrap();
            }
            // The next take waits for the return to finish; then the write must be there.
            drop(take(&pool).await);
            assert_eq!(
                count(&admin, "pooler_lost").await,
                round + 1,
                "{recycle:?}, round {round}: the next user's write was lost"
            );
        }
        pool.close(Shutdown::Graceful).await;
        admin
            .batch_execute("DELETE FROM pooler_lost")
            .await
            .unwrap();
    }
}

/// The same on a multi-thread runtime, with real microsecond timeouts (around the query, and
/// inside a `with_member` closure): whatever the timing, no write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_around_a_begin_never_lose_the_next_users_write() {
    let Some(url) = url().await else { return };
    let admin = admin(&url).await;
    admin
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS pooler_lost_mt (v INT); DELETE FROM pooler_lost_mt",
        )
        .await
        .unwrap();
    let pool = one_of_one(&url, "pg-lost-mt", Recycle::default()).await;
    let rounds = 200;
    for round in 0..rounds {
        let limit = Duration::from_micros(round % 40);
        if round % 2 == 0 {
            let conn = take(&pool).await;
            let _ = tokio::time::timeout(limit, conn.batch_execute("BEGIN")).await;
        } else {
            pool.with_member(Duration::from_secs(5), async |conn: &mut PgConnection| {
                let _ = tokio::time::timeout(limit, conn.execute("BEGIN", &[])).await;
            })
            .await
            .unwrap();
        }
        let conn = take(&pool).await;
        conn.batch_execute("INSERT INTO pooler_lost_mt VALUES (1)")
            .await
            .unwrap();
    }
    drop(take(&pool).await);
    assert_eq!(
        count(&admin, "pooler_lost_mt").await,
        i64::try_from(rounds).unwrap(),
        "every write after a cancelled BEGIN committed"
    );
    pool.close(Shutdown::Graceful).await;
}

/// A `copy_in` cancelled before the server's answer was read is followed to its end: the
/// layer settles idle by itself (no "unsettled" left to cost the next taker a second and a
/// query).
#[tokio::test(flavor = "current_thread")]
async fn a_copy_in_cancelled_early_settles_by_itself() {
    let Some(url) = url().await else { return };
    let admin = admin(&url).await;
    // A table of its own: two `CREATE TABLE IF NOT EXISTS` of one name at once can both
    // miss it and one then fails on PostgreSQL's catalog (tests here run side by side).
    admin
        .batch_execute("CREATE TABLE IF NOT EXISTS pooler_copy_early (v INT)")
        .await
        .unwrap();
    let pool = one_of_one(&url, "pg-copy-early", Recycle::default()).await;
    let conn = take(&pool).await;
    // Prepared first, so the one poll sends the Bind, Execute and Sync, and the drop the
    // CopyFail — all written before the server's CopyInResponse is read.
    let statement = conn
        .prepare("COPY pooler_copy_early FROM STDIN")
        .await
        .unwrap();
    for round in 0..6 {
        if round % 2 == 0 {
            poll_once_and_drop(conn.copy_in::<_, bytes::Bytes>(&statement)).await;
        } else {
            poll_once_and_drop(
                conn.copy_in::<_, bytes::Bytes>("COPY pooler_copy_early FROM STDIN"),
            )
            .await;
        }
        conn.simple_query("").await.unwrap();
        let status = tokio::time::timeout(Duration::from_secs(2), conn.settled()).await;
        assert_eq!(
            status,
            Ok(TxStatus::Idle),
            "counts agree after the COPY's end"
        );
    }
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// A COPY whose sink is forgotten (or kept past the return) leaves the server in copy-in
/// mode: that connection is replaced at once, never handed on, and the next taker waits for
/// a new connection, not for the recycle and stop timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_left_in_copy_is_replaced_at_once() {
    let Some(url) = url().await else { return };
    let admin = admin(&url).await;
    admin
        .batch_execute("CREATE TABLE IF NOT EXISTS pooler_copy_left (v INT)")
        .await
        .unwrap();
    for recycle in [Recycle::Observed, Recycle::Nothing] {
        let pool = one_of_one(&url, "pg-copy-left", recycle.clone()).await;
        let conn = take(&pool).await;
        let first = Member::id(&conn);
        let sink = conn
            .copy_in::<_, bytes::Bytes>("COPY pooler_copy_left FROM STDIN")
            .await
            .unwrap();
        let kept = if recycle == Recycle::Nothing {
            Some(sink)
        } else {
            std::mem::forget(sink);
            None
        };
        drop(conn);
        let next = pool
            .take_member(Duration::from_secs(3))
            .await
            .unwrap_or_else(|e| panic!("{recycle:?}: the next taker waited: {e}"));
        assert_ne!(Member::id(&next), first, "{recycle:?}: replaced");
        assert_eq!(next.simple_query("SELECT 1").await.unwrap().len(), 3);
        drop(next);
        drop(kept);
        pool.close(Shutdown::Immediate).await;
    }
}

/// What the next user can see of a session, one row: who they are, settings, temporary
/// tables, statements prepared in SQL, channels listened to, advisory locks, open cursors,
/// and whether a transaction is open.
const FINGERPRINT: &str = "SELECT current_user, session_user, current_setting('search_path'), \
    current_setting('statement_timeout'), current_setting('default_transaction_read_only'), \
    coalesce(current_setting('app.tenant', true), ''), \
    (SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()), \
    (SELECT count(*) FROM pg_prepared_statements WHERE from_sql), \
    (SELECT count(*) FROM pg_listening_channels()), \
    (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()), \
    (SELECT count(*) FROM pg_cursors), now() = statement_timestamp()";

async fn fingerprint(conn: &tokio_postgres::Client) -> Vec<Option<String>> {
    common::one_row(conn, FINGERPRINT).await
}

/// A way of leaving state on a session: SQL run over the simple protocol, or something else.
enum Leave {
    Sql(&'static str),
    /// `SET` over the extended protocol (a Parse the scan reads).
    Extended(&'static str),
    /// A statement cancelled before its driver wrote it.
    Cancelled(&'static str),
}

impl Leave {
    async fn on(&self, c: &PgConnection) {
        match *self {
            Leave::Sql(sql) => c.batch_execute(sql).await.unwrap(),
            Leave::Extended(sql) => drop(c.execute(sql, &[]).await.unwrap()),
            Leave::Cancelled(sql) => poll_once_and_drop(c.batch_execute(sql)).await,
        }
    }
}

/// Every way of leaving state on a session that the matrix tries.
fn ways() -> Vec<(&'static str, Leave)> {
    use Leave::{Cancelled, Extended, Sql};
    vec![
        ("SET ROLE", Sql("SET ROLE pooler_tenant")),
        ("SET search_path", Sql("SET search_path TO pg_catalog")),
        (
            "SET over the extended protocol",
            Extended("SET statement_timeout = 1234"),
        ),
        (
            "SET SESSION CHARACTERISTICS … READ ONLY",
            Sql("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"),
        ),
        (
            "set_config(…, false) for row-level security",
            Sql("SELECT set_config('app.tenant', '7', false)"),
        ),
        (
            "SET ROLE inside a DO block (seen through the reported parameter)",
            Sql("DO $$BEGIN EXECUTE 'SET ROLE pooler_tenant'; END$$"),
        ),
        (
            "a temporary table",
            Sql("CREATE TEMP TABLE pooler_tmp (x int)"),
        ),
        (
            "a table in \"pg_temp\"",
            Sql("CREATE TABLE \"pg_temp\".pooler_tmp (x int)"),
        ),
        (
            "a table in pg_temp spelled with Unicode escapes",
            Sql("CREATE TABLE U&\"pg\\005ftemp\".pooler_tmp (x int)"),
        ),
        (
            "a statement PREPAREd in SQL",
            Sql("PREPARE pooler_p AS SELECT 1"),
        ),
        ("LISTEN", Sql("LISTEN pooler_channel")),
        (
            "a session advisory lock",
            Sql("SELECT pg_advisory_lock(4242)"),
        ),
        (
            "a cursor WITH HOLD",
            Sql("BEGIN; DECLARE pooler_c CURSOR WITH HOLD FOR SELECT 1; COMMIT"),
        ),
        (
            "SET ROLE left inside an open transaction",
            Sql("SET ROLE pooler_tenant; BEGIN; SELECT 1"),
        ),
        (
            "SET ROLE cancelled before it was written",
            Cancelled("SET ROLE pooler_tenant"),
        ),
        (
            "everything at once",
            Sql("SET ROLE pooler_tenant; SET search_path TO pg_catalog; \
                 SELECT set_config('app.tenant', '7', false); LISTEN pooler_channel; \
                 CREATE TEMP TABLE pooler_tmp2 (x int); PREPARE pooler_q AS SELECT 2; \
                 SELECT pg_advisory_lock(4243)"),
        ),
    ]
}

/// The hand-over matrix: every way of leaving state × the modes that promise a clean
/// session. The next user's view of the session is compared with a new connection's, and in
/// `Observed` the connection is kept (reset, not replaced).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_user_sees_a_session_like_a_new_one_in_every_cleaning_mode() {
    let Some(url) = url().await else { return };
    let admin = admin(&url).await;
    admin
        .batch_execute(
            "DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pooler_tenant') \
             THEN CREATE ROLE pooler_tenant NOLOGIN; END IF; END$$",
        )
        .await
        .unwrap();
    let fresh = fingerprint(&admin).await;
    let custom = Recycle::custom(
        "CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; UNLISTEN *; \
         SELECT pg_advisory_unlock_all(); DISCARD TEMP; DEALLOCATE pooler_p; \
         DEALLOCATE pooler_q",
    )
    .unwrap();
    for recycle in [Recycle::Observed, Recycle::Always, custom] {
        for (way, leave) in ways() {
            if matches!(recycle, Recycle::Custom(_)) && !way.starts_with("SET") {
                continue; // the custom query deallocates by name: the settings rows suffice
            }
            let pool = one_of_one(&url, "pg-matrix", recycle.clone()).await;
            let conn = take(&pool).await;
            let id = Member::id(&conn);
            leave.on(&conn).await;
            drop(conn);
            let conn = take(&pool).await;
            assert_eq!(
                fingerprint(&conn).await,
                fresh,
                "{recycle:?}, {way}: the next user's session differs from a new one's"
            );
            if recycle == Recycle::Observed {
                assert_eq!(Member::id(&conn), id, "{way}: reset, not replaced");
            }
            drop(conn);
            pool.close(Shutdown::Graceful).await;
        }
    }
}

/// A session's own temporary schema by its name (`pg_temp_3`) can be written to once the
/// session has made a temporary object, and still after a reset dropped it: a later user
/// makes a table there without writing `TEMP`, and the next one must not see it.
#[tokio::test(flavor = "current_thread")]
async fn a_table_in_the_sessions_own_temporary_schema_never_reaches_the_next_user() {
    let Some(url) = url().await else { return };
    let fresh = fingerprint(&admin(&url).await).await;
    let pool = one_of_one(&url, "pg-temp-schema", Recycle::Observed).await;
    let conn = take(&pool).await;
    let id = Member::id(&conn);
    conn.batch_execute("CREATE TEMP TABLE pooler_first (x int)")
        .await
        .unwrap();
    drop(conn);
    let conn = take(&pool).await;
    assert_eq!(Member::id(&conn), id, "reset, not replaced");
    let schema: String = conn
        .query_one(
            "SELECT nspname::text FROM pg_namespace WHERE oid = pg_my_temp_schema()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    conn.batch_execute(&format!("CREATE TABLE {schema}.pooler_later (x int)"))
        .await
        .unwrap();
    drop(conn);
    let conn = take(&pool).await;
    assert_eq!(
        fingerprint(&conn).await,
        fresh,
        "a table made in {schema} reached the next user"
    );
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// Clean returns cost nothing: after statements that leave no state (queries, writes,
/// transactions ended, `SET LOCAL`, transaction-level advisory locks), `Observed` needs no
/// recycle at all; after `SET`, it does.
#[tokio::test(flavor = "current_thread")]
async fn a_clean_return_needs_no_recycle_and_a_dirty_one_does() {
    use pooler::Manager as _;
    let Some(url) = url().await else { return };
    let pool = one_of_one(&url, "pg-zero", Recycle::default()).await;
    let conn = take(&pool).await;
    for sql in [
        "SELECT 1",
        "BEGIN; SET LOCAL search_path TO pg_catalog; SELECT pg_advisory_xact_lock(1); COMMIT",
        "SELECT 'SET ROLE x; LISTEN y'",
        "CREATE TEMP TABLE IF NOT EXISTS x (temp int) ON COMMIT DROP",
    ] {
        conn.batch_execute(sql).await.unwrap();
        assert_eq!(conn.settled().await, TxStatus::Idle);
        let clean = sql.starts_with("CREATE TEMP"); // a temp table is state, even dropped
        assert_eq!(
            pool.manager().needs_recycle(&conn),
            clean,
            "{sql}: recycle needed?"
        );
    }
    drop(conn);
    let conn = take(&pool).await;
    conn.batch_execute("SELECT 1").await.unwrap();
    conn.settled().await;
    assert!(!pool.manager().needs_recycle(&conn), "reset: clean again");
    conn.batch_execute("SET application_name = 'someone else'")
        .await
        .unwrap();
    conn.settled().await;
    assert!(pool.manager().needs_recycle(&conn), "SET: dirty");
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// `conn.cancel_token().cancel_query(NoTls)`, as deadpool users write it, from another task:
/// the long query ends with `query_canceled`, and the connection serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_token_cancels_a_long_query_from_another_task() {
    let Some(url) = url().await else { return };
    let pool = one_of_one(&url, "pg-cancel-token", Recycle::default()).await;
    let conn = take(&pool).await;
    let pid = common::backend_pid(&conn).await;
    let token = conn.cancel_token();
    let cancel = async move { token.cancel_query(tokio_postgres::NoTls).await };
    common::sleep_is_cancelled(&conn, admin(&url).await, pid, cancel).await;
    assert_eq!(conn.simple_query("SELECT 1").await.unwrap().len(), 3);
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// The statement cache: typed statements, through a transaction, and the statement used
/// least recently makes room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_statement_cache_serves_typed_statements_and_transactions_and_evicts_lru() {
    let Some(url) = url().await else { return };
    let manager = manager(&url, "pg-cache", Recycle::default()).statement_cache(2);
    let pool = started(PoolConfig::new("pg-cache", 1, 1), manager).await;
    let mut conn = take(&pool).await;
    let int4 = [tokio_postgres::types::Type::INT4];
    let stats = |conn: &PgConnection| {
        let s = conn.statement_cache();
        (s.size, s.hits, s.misses)
    };
    conn.prepare_cached("SELECT 1").await.unwrap();
    let typed = conn.prepare_typed_cached("SELECT $1", &int4).await.unwrap();
    assert_eq!(typed.params(), &int4);
    assert_eq!(stats(&conn), (2, 0, 2));
    // `SELECT 1` used again: the typed one is now the least recently used.
    conn.prepare_cached("SELECT 1").await.unwrap();
    assert_eq!(stats(&conn), (2, 1, 2), "a hit");
    {
        let tx = conn.transaction().await.unwrap();
        let inside = tx.prepare_cached("SELECT 1").await.unwrap();
        let row = tx.query_one(&inside, &[]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), 1);
        tx.prepare_cached("SELECT 2").await.unwrap(); // evicts the typed one
        tx.commit().await.unwrap();
    }
    assert_eq!(stats(&conn), (2, 2, 3), "the connection's cache, inside");
    conn.prepare_cached("SELECT 1").await.unwrap();
    assert_eq!(stats(&conn), (2, 3, 3), "kept: used recently");
    conn.prepare_typed_cached("SELECT $1", &int4).await.unwrap();
    assert_eq!(stats(&conn), (2, 3, 4), "evicted: used least recently");
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// Hooks: `after_connect` sets the session every user starts from (and is not reset away);
/// `after_return` runs on every return after the cleaning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_set_up_connections_without_losing_the_clean_return() {
    let Some(url) = url().await else { return };
    let returns = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = returns.clone();
    let hooks = pooler::Hooks::default()
        .after_connect(|conn: &mut PgConnection| {
            Box::pin(async move {
                conn.batch_execute("SET search_path TO pg_catalog, public")
                    .await?;
                Ok(())
            })
        })
        .after_return(move |_conn: &mut PgConnection| {
            let counted = counted.clone();
            Box::pin(async move {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            })
        });
    let manager = manager(&url, "pg-hooks", Recycle::default()).hooks(hooks);
    let pool = started(PoolConfig::new("pg-hooks", 1, 1), manager).await;
    let search_path = async |conn: &PgConnection| -> String {
        conn.query_one("SELECT current_setting('search_path')", &[])
            .await
            .unwrap()
            .get(0)
    };
    let conn = take(&pool).await;
    assert_eq!(search_path(&conn).await, "pg_catalog, public");
    conn.batch_execute("BEGIN; SET search_path TO x")
        .await
        .unwrap();
    drop(conn);
    let conn = take(&pool).await;
    assert_eq!(
        search_path(&conn).await,
        "pg_catalog, public",
        "the hook's setting is the session's start; the user's is gone"
    );
    drop(conn);
    // This take waits for the second return's recycle to finish.
    let conn = take(&pool).await;
    assert_eq!(returns.load(std::sync::atomic::Ordering::SeqCst), 2);
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// What an `after_connect` hook set up — a listener, a temporary table, a setting — is where
/// every user starts, whatever the last user left: the same connection comes back with the
/// set-up whole, not part of it undone by the reset, nor replaced because the hook, run
/// again over what the reset kept, failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hooks_set_up_is_whole_after_any_reset() {
    let Some(url) = url().await else { return };
    let hooks = common::hooked_set_up();
    let manager = manager(&url, "pg-hooked-set-up", Recycle::default()).hooks(hooks);
    let pool = started(PoolConfig::new("pg-hooked-set-up", 1, 1), manager).await;
    let first = common::backend_pid(&*take(&pool).await).await;
    for (left, sql) in [
        ("a listener", "LISTEN pooler_other"),
        ("a setting", "SET search_path TO public"),
        ("a temporary table", "CREATE TEMP TABLE pooler_own (x int)"),
        ("an advisory lock", "SELECT pg_advisory_lock(77)"),
        // What undoes part of the set-up, the user's own statements having left nothing.
        ("an unlisten", "UNLISTEN *"),
        ("a discard", "DISCARD TEMP"),
        ("a deallocate", "DEALLOCATE pooler_hooked"),
        ("an unlock", "SELECT pg_advisory_unlock_all()"),
        ("a close", "CLOSE pooler_hooked"),
        ("a close of all", "CLOSE ALL"),
        ("a drop", "DROP TABLE pooler_hooked"),
        ("an alter", "ALTER TABLE pooler_hooked ADD COLUMN y int"),
        ("a fetch", "FETCH pooler_hooked"),
        (
            "an index",
            "CREATE INDEX pooler_hooked_x ON pooler_hooked (x)",
        ),
    ] {
        let conn = take(&pool).await;
        conn.batch_execute(sql).await.unwrap();
        drop(conn);
        let conn = take(&pool).await;
        assert_eq!(
            common::backend_pid(&conn).await,
            first,
            "after {left}: the connection was replaced"
        );
        let row = conn
            .query_one(
                "SELECT (SELECT string_agg(c, ',' ORDER BY c) FROM pg_listening_channels() c), \
                 (SELECT count(*) FROM pg_attribute \
                  WHERE attrelid = to_regclass('pg_temp.pooler_hooked') AND attnum > 0), \
                 to_regclass('pg_temp.pooler_own') IS NULL, \
                 current_setting('search_path'), \
                 (SELECT count(*) FROM pg_prepared_statements WHERE name = 'pooler_hooked'), \
                 (SELECT string_agg(objid::text, ',' ORDER BY objid) FROM pg_locks \
                  WHERE locktype = 'advisory' AND pid = pg_backend_pid()), \
                 (SELECT count(*) FROM pg_cursors WHERE name = 'pooler_hooked') \
                 + (SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema())",
                &[],
            )
            .await
            .unwrap();
        // The hook's cursor is where it began: its one row still to come.
        let rows = conn.simple_query("FETCH ALL pooler_hooked").await.unwrap();
        let fetched = rows
            .iter()
            .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
            .count();
        assert_eq!(fetched, 1, "after {left}: the hook's cursor moved");
        let seen: (Option<String>, i64, bool, String, i64, Option<String>, i64) = (
            row.get(0),
            row.get(1),
            row.get(2),
            row.get(3),
            row.get(4),
            row.get(5),
            row.get(6),
        );
        assert_eq!(
            seen,
            (
                Some("pooler_hooked".to_owned()),
                1,
                true,
                "pg_catalog, public".to_owned(),
                1,
                Some("4242".to_owned()),
                2,
            ),
            "after {left}: (listening, the hook's table's columns, the user's table gone, \
             search_path, the hook's statement, advisory locks, the hook's cursor and \
             temporary relations)"
        );
        drop(conn);
    }
    pool.close(Shutdown::Graceful).await;
}

/// The modes that keep the session (`Transaction`, `Query`) still never hand on a
/// transaction: the next user is outside it, and the session settings are as the last user
/// left them (the documented trade-off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transaction_modes_end_the_transaction_and_keep_the_session() {
    let Some(url) = url().await else { return };
    for recycle in [Recycle::Transaction, Recycle::Query] {
        let pool = one_of_one(&url, "pg-tx-modes", recycle.clone()).await;
        let conn = take(&pool).await;
        // Apart: a `BEGIN` later in the same query would take the `SET` into its
        // transaction, and the rollback would undo it.
        conn.batch_execute("SET search_path TO pg_catalog")
            .await
            .unwrap();
        conn.batch_execute("BEGIN; SELECT 1").await.unwrap();
        drop(conn);
        let conn = take(&pool).await;
        let print = fingerprint(&conn).await;
        assert_eq!(
            print.last().cloned().flatten().as_deref(),
            Some("t"),
            "{recycle:?}: outside a transaction"
        );
        assert_eq!(
            print[2].as_deref(),
            Some("pg_catalog"),
            "{recycle:?}: the session's settings kept"
        );
        drop(conn);
        pool.close(Shutdown::Graceful).await;
    }
}

/// The multi-tenant pattern for row-level security: each request sets its tenant (and takes
/// a session advisory lock) through cached statements. From the second request on, a cached
/// statement is only bound and executed — its text is never sent again — yet it leaves the
/// same state each time: the next request must never run as the previous tenant or inherit
/// its lock. Through the connection, as query strings, inside a transaction, and pipelined;
/// the connection is reset, not replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_statement_dirties_the_session_on_every_use() {
    let Some(url) = url().await else { return };
    let admin = admin(&url).await;
    let fresh = fingerprint(&admin).await;
    let pool = one_of_one(&url, "pg-tenant", Recycle::default()).await;
    let id = Member::id(&take(&pool).await);
    const SET: &str = "SELECT set_config('app.tenant', $1, false)";
    const LOCK: &str = "SELECT pg_advisory_lock($1)";
    for round in 0..3_i64 {
        for how in ["connection", "string", "transaction", "pipelined"] {
            let mut conn = take(&pool).await;
            let tenant = format!("{round}");
            match how {
                "connection" => {
                    let set = conn.prepare_cached(SET).await.unwrap();
                    conn.query_one(&set, &[&tenant]).await.unwrap();
                    let lock = conn.prepare_cached(LOCK).await.unwrap();
                    conn.query_one(&lock, &[&(7000 + round)]).await.unwrap();
                }
                "string" => {
                    // The query strings themselves: on the unnamed statement, described once.
                    conn.query_one(SET, &[&tenant]).await.unwrap();
                    let tx = conn.transaction().await.unwrap();
                    tx.query_one(LOCK, &[&(7200 + round)]).await.unwrap();
                    tx.commit().await.unwrap();
                }
                "transaction" => {
                    let tx = conn.transaction().await.unwrap();
                    let set = tx.prepare_cached(SET).await.unwrap();
                    tx.query_one(&set, &[&tenant]).await.unwrap();
                    tx.commit().await.unwrap();
                }
                _ => {
                    let set = conn.prepare_cached(SET).await.unwrap();
                    let lock = conn.prepare_cached(LOCK).await.unwrap();
                    let key = 7100 + round;
                    let (a, b) = futures_util::future::join(
                        conn.query_one(&set, &[&tenant]),
                        conn.query_one(&lock, &[&key]),
                    )
                    .await;
                    a.unwrap();
                    b.unwrap();
                }
            }
            drop(conn);
            let conn = take(&pool).await;
            assert_eq!(
                fingerprint(&conn).await,
                fresh,
                "round {round}, {how}: the next request sees the last one's session"
            );
            assert_eq!(Member::id(&conn), id, "reset, not replaced");
        }
    }
    pool.close(Shutdown::Graceful).await;
}

/// A `COPY … TO STDOUT` stream dropped midway: the server goes on sending the rest, which
/// only the connection's driver can read and discard. That connection is replaced at once
/// (in every mode), so the next taker of a full pool waits for a new connection, not for the
/// whole copy to drain; and the copy never reaches the next user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_out_dropped_midway_is_replaced_at_once() {
    use futures_util::StreamExt as _;
    let Some(url) = url().await else { return };
    for recycle in [Recycle::Observed, Recycle::Nothing] {
        let pool = one_of_one(&url, "pg-copy-out", recycle.clone()).await;
        let conn = take(&pool).await;
        let first = Member::id(&conn);
        {
            let stream = conn
                .copy_out("COPY (SELECT g, repeat('x', 200) FROM generate_series(1, 20000000) g) TO STDOUT")
                .await
                .unwrap();
            let mut stream = std::pin::pin!(stream);
            let chunk = stream.next().await.expect("a first row").unwrap();
            assert!(!chunk.is_empty());
        }
        drop(conn);
        replaced_within(pool, first, Duration::from_secs(3), &recycle).await;
    }
}

/// The next taker of `pool` (of one member; member `first` just given back) gets a new
/// connection within `within`, and it serves; then `pool` is closed.
async fn replaced_within(
    pool: pooler_postgres::Pool,
    first: u64,
    within: Duration,
    recycle: &Recycle,
) {
    let next = pool
        .take_member(within)
        .await
        .unwrap_or_else(|e| panic!("{recycle:?}: the next taker waited: {e}"));
    assert_ne!(Member::id(&next), first, "{recycle:?}: replaced");
    assert_eq!(next.simple_query("SELECT 1").await.unwrap().len(), 3);
    drop(next);
    pool.close(Shutdown::Immediate).await;
}

/// A `RowStream` kept past the connection's return holds its rows, and tokio-postgres reads
/// nothing more on that connection until they are taken: the return's question, sent behind
/// the stream, was never answered, and the next taker of a full pool waited for the pool's
/// one-minute bound on a recycle. The connection is replaced a few seconds after the return
/// (in the modes that ask), and the next user's statements run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_stream_kept_past_the_return_holds_the_pool_for_seconds_at_most() {
    let Some(url) = url().await else { return };
    for recycle in [Recycle::Observed, Recycle::Query] {
        let pool = one_of_one(&url, "pg-row-stream", recycle.clone()).await;
        let conn = take(&pool).await;
        let first = Member::id(&conn);
        let none: [i32; 0] = [];
        let rows = conn
            .query_raw("SELECT g FROM generate_series(1, 10000000) g", none)
            .await
            .unwrap();
        drop(conn);
        replaced_within(pool, first, Duration::from_secs(15), &recycle).await;
        drop(rows);
    }
}

/// Custom settings: a new connection of the pool reads what every later user reads. Declared
/// (`custom_settings`), a custom setting is defined as `''` on every connection and reset to
/// it, the connection kept; one not declared, or one whose name the scan cannot read (a
/// parameter), has the connection replaced, so the next user reads `NULL`, as on a new
/// connection, and `current_setting(..)::int` does not fail for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_setting_never_reaches_the_next_user_defined() {
    let Some(url) = url().await else { return };
    const READ: &str = "SELECT current_setting('app.tenant', true), \
                        current_setting('app.other', true), current_setting('app.tenantx', true)";
    type Read = (Option<String>, Option<String>, Option<String>);
    async fn read(conn: &PgConnection) -> Read {
        let row = conn.query_one(READ, &[]).await.unwrap();
        (row.get(0), row.get(1), row.get(2))
    }
    let pool = one_of_one(&url, "pg-custom", Recycle::default()).await;
    let mut conn = take(&pool).await;
    let first = Member::id(&conn);
    let fresh = read(&conn).await;
    assert_eq!(
        fresh,
        (Some(String::new()), None, None),
        "declared: ''; not declared: NULL"
    );
    // Declared, set three ways: reset, kept.
    for set in [
        "SET app.tenant = '7'",
        "SELECT set_config('app.tenant', '7', false)",
        "SET SESSION \"app\".\"tenant\" TO '7'",
    ] {
        conn.batch_execute(set).await.unwrap();
        drop(conn);
        conn = take(&pool).await;
        assert_eq!(read(&conn).await, fresh, "{set}");
        assert_eq!(Member::id(&conn), first, "{set}: reset, not replaced");
    }
    // Not declared, or not readable: replaced.
    let mut id = first;
    for set in [
        "SET app.other = '7'",
        "SELECT set_config('app.other', '7', false)",
        "RESET app.other",
        // A declared name that goes on into another, and one spelled with escapes.
        "SELECT set_config('app.tenant' || 'x', '7', false)",
        "SELECT set_config('app.tenant'\n'x', '7', false)",
        "SET U&\"app\\002eother\" = '7'",
        "SET app.U&\"tenant\\0078\" = '7'",
    ] {
        conn.batch_execute(set).await.unwrap();
        drop(conn);
        conn = take(&pool).await;
        assert_eq!(read(&conn).await, fresh, "{set}");
        assert_ne!(Member::id(&conn), id, "{set}: replaced");
        id = Member::id(&conn);
    }
    let by_parameter = conn
        .prepare_cached("SELECT set_config($1, '7', false)")
        .await
        .unwrap();
    conn.query_one(&by_parameter, &[&"app.other"])
        .await
        .unwrap();
    drop(conn);
    let next = take(&pool).await;
    assert_eq!(read(&next).await, fresh, "a name passed as a parameter");
    assert_ne!(
        Member::id(&next),
        id,
        "a name passed as a parameter: replaced"
    );
    assert_eq!(
        next.query_one(
            "SELECT coalesce(current_setting('app.other', true), '0')::int",
            &[]
        )
        .await
        .unwrap()
        .get::<_, i32>(0),
        0,
        "the next user's cast does not fail"
    );
    drop(next);
    pool.close(Shutdown::Graceful).await;
}

/// A function of the application's own is dirty by default (the scan cannot see into it) and
/// clean once declared neutral (`neutral_functions`), however it is called: plainly, by a
/// schema-qualified name, from the statement cache.
#[tokio::test(flavor = "current_thread")]
async fn a_function_declared_neutral_needs_no_reset() {
    use pooler::Manager as _;
    let Some(url) = url().await else { return };
    let admin = admin(&url).await;
    admin
        .batch_execute(
            "CREATE OR REPLACE FUNCTION pooler_neutral_fn(int) RETURNS int LANGUAGE sql AS \
             $$SELECT $1 + 1$$; \
             CREATE OR REPLACE FUNCTION pooler_other_fn(int) RETURNS int LANGUAGE sql AS \
             $$SELECT $1 + 2$$",
        )
        .await
        .unwrap();
    let manager =
        manager(&url, "pg-neutral", Recycle::default()).neutral_functions(["Pooler_Neutral_Fn"]);
    let pool = started(PoolConfig::new("pg-neutral", 1, 1), manager).await;
    for (sql, dirty) in [
        ("SELECT pooler_neutral_fn(1)", false),
        ("SELECT public.pooler_neutral_fn(1)", false),
        ("SELECT count(*), pooler_neutral_fn(2) FROM pg_class", false),
        ("SELECT pooler_other_fn(1)", true),
        ("SELECT pooler_neutral_fn(1), pooler_other_fn(1)", true),
        ("SELECT \"pooler_neutral_fn\"(1)", true),
    ] {
        let conn = take(&pool).await;
        let statement = conn.prepare_cached(sql).await.unwrap();
        for _ in 0..2 {
            conn.query(&statement, &[]).await.unwrap();
            assert_eq!(conn.settled().await, TxStatus::Idle);
            assert_eq!(pool.manager().needs_recycle(&conn), dirty, "{sql}");
        }
        drop(conn);
    }
    pool.close(Shutdown::Graceful).await;
}

/// A name declared as a custom setting must be one (`app.tenant`, with its dot): one of
/// PostgreSQL's own (`search_path`) was defined as `''` on every connection when it opened,
/// and every user's unqualified table names then failed. Such a declaration is refused by
/// its key at each start, before anything is connected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_custom_setting_without_a_dot_is_refused() {
    let Some(url) = url().await else { return };
    let pool = pooler::Pool::start_lazy(
        PoolConfig::new("pg-declared", 0, 1),
        PgManager::new(&url)
            .unwrap()
            .custom_settings(["app.tenant", "search_path"]),
    )
    .unwrap();
    let refused = match pool.take_member(Duration::from_millis(500)).await {
        Err(e) => e.to_string(),
        Ok(conn) => {
            let path: String = conn
                .query_one("SELECT current_setting('search_path')", &[])
                .await
                .unwrap()
                .get(0);
            panic!("connected, with search_path {path:?}");
        }
    };
    assert!(refused.contains("custom_settings"), "{refused}");
    pool.close(Shutdown::Immediate).await;
}
