//! The differential hand-over fuzzer: user A runs a random sequence of statements — ones that
//! leave session state and ones that do not, in every spelling the scan must read (quoted,
//! qualified, in strings and comments, through functions it cannot see into), over the
//! simple and the extended protocol, from the statement cache, and cancelled before they were
//! written — then gives the connection back; user B's view of the session must equal a new
//! connection's, and B's write must be durable. Live against PostgreSQL.
//!
//! CI runs `POOLER_FUZZ_CASES` sequences (default 64); a long run sets it higher (10 000 is
//! the documented run). A failing sequence is printed whole and kept by proptest in
//! `tests/handover_fuzz.proptest-regressions`.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::future::Future;
use std::time::Duration;

use pooler::{PoolConfig, Shutdown};
use pooler_postgres::{PgConnection, PgManager};
use pooler_testkit::started;
use proptest::prelude::*;

/// How a statement is sent.
#[derive(Debug, Clone, Copy)]
enum Way {
    /// A simple Query (several statements allowed).
    Simple,
    /// The extended protocol, a statement prepared for the call (`execute`).
    Extended,
    /// The extended protocol, from the connection's statement cache: from its second use on,
    /// only bound and executed.
    Cached,
    /// Polled once and dropped: never written, or written and its answer never read.
    Cancelled,
}

/// The statements drawn from: (SQL, whether it is a single statement the extended protocol
/// can send).
const STATEMENTS: &[(&str, bool)] = &[
    ("SELECT 1", true),
    ("SELECT 'SET ROLE x; LISTEN y'", true),
    ("SELECT $$ ; LISTEN z $$", true),
    ("/* SET ROLE x; */ SELECT 2", true),
    ("BEGIN", true),
    ("COMMIT", true),
    ("ROLLBACK", true),
    ("SET search_path TO pg_catalog", true),
    ("set \"search_path\" = pg_catalog", true),
    ("SET SESSION statement_timeout = 1234", true),
    ("SET LOCAL statement_timeout = 4321", true),
    ("SET ROLE pooler_tenant", true),
    ("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", true),
    ("SELECT set_config('app.tenant', '7', false)", true),
    (
        "SELECT pg_catalog.set_config('search_path', 'pg_catalog', false)",
        true,
    ),
    (
        "SELECT \"set_config\"('statement_timeout', '999', false)",
        true,
    ),
    (
        "UPDATE pg_settings SET setting = 'pg_catalog' WHERE name = 'search_path'",
        true,
    ),
    ("SET app.tenant = '9'", true),
    ("LISTEN pooler_fuzz", true),
    ("SELECT pg_advisory_lock(4711)", true),
    ("SELECT \"pg_advisory_lock\"(4712)", true),
    ("SELECT pg_try_advisory_lock_shared(4713)", true),
    ("SELECT pg_advisory_xact_lock(4714)", true),
    (
        "CREATE TEMP TABLE IF NOT EXISTS pooler_fuzz_t (x int)",
        true,
    ),
    ("SELECT 1 AS x INTO LOCAL TEMP pooler_fuzz_into", true),
    ("PREPARE pooler_fuzz_p AS SELECT 1", true),
    ("DECLARE pooler_fuzz_c CURSOR WITH HOLD FOR SELECT 1", true),
    ("SELECT pooler_fuzz_sets()", true),
    (
        "DO $$BEGIN PERFORM set_config('search_path', 'pg_catalog', false); END$$",
        true,
    ),
    ("SELECT 1; SET ROLE pooler_tenant", false),
    ("BEGIN; SET search_path TO pg_catalog; COMMIT", false),
    ("SELECT ';'; LISTEN pooler_fuzz2 -- ; SELECT 1", false),
];

fn action() -> impl Strategy<Value = (usize, Way)> {
    (
        0..STATEMENTS.len(),
        prop_oneof![
            3 => Just(Way::Simple),
            2 => Just(Way::Extended),
            2 => Just(Way::Cached),
            1 => Just(Way::Cancelled),
        ],
    )
}

/// Polls `future` exactly once and drops it.
async fn poll_once_and_drop<F: Future>(future: F) {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        let _ = future.as_mut().poll(cx);
        std::task::Poll::Ready(())
    })
    .await;
}

/// Runs one action on `conn`; errors are the sequence's own business (a `COMMIT` outside a
/// transaction, a statement refused in a failed one) and are ignored.
async fn run(conn: &PgConnection, (i, way): (usize, Way)) {
    let (sql, single) = STATEMENTS[i];
    match way {
        Way::Extended if single => drop(conn.execute(sql, &[]).await),
        Way::Cached if single => {
            if let Ok(statement) = conn.prepare_cached(sql).await {
                drop(conn.execute(&statement, &[]).await);
            }
        }
        Way::Cancelled => poll_once_and_drop(conn.batch_execute(sql)).await,
        _ => drop(conn.batch_execute(sql).await),
    }
}

/// Everything the next user can observe of a session, one row.
const FINGERPRINT: &str = "SELECT current_user, session_user, current_setting('search_path'), \
    current_setting('statement_timeout'), current_setting('default_transaction_read_only'), \
    current_setting('app.tenant', true), \
    (SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()), \
    (SELECT count(*) FROM pg_prepared_statements WHERE from_sql), \
    (SELECT count(*) FROM pg_listening_channels()), \
    (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()), \
    (SELECT count(*) FROM pg_cursors), now() = statement_timestamp()";

async fn fingerprint(conn: &PgConnection) -> Vec<Option<String>> {
    common::one_row(conn, FINGERPRINT).await
}

#[test]
fn the_next_user_always_sees_a_session_like_a_new_one() {
    let rt = pooler_testkit::runtime();
    let Some(url) = rt.block_on(common::url()) else {
        return;
    };
    let (pool, fresh) = rt.block_on(async {
        let admin = common::admin(&url).await;
        admin
            .batch_execute(
                "DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pooler_tenant') \
                 THEN CREATE ROLE pooler_tenant NOLOGIN; END IF; END$$; \
                 CREATE OR REPLACE FUNCTION pooler_fuzz_sets() RETURNS void LANGUAGE sql AS \
                 $$SELECT set_config('statement_timeout', '777', false)$$; \
                 GRANT EXECUTE ON FUNCTION pooler_fuzz_sets() TO PUBLIC; \
                 CREATE TABLE IF NOT EXISTS pooler_fuzz_writes (n bigint)",
            )
            .await
            .unwrap();
        let manager = PgManager::new(&url)
            .unwrap()
            .custom_settings(["app.tenant"]);
        let pool = started(PoolConfig::new("pg-fuzz", 1, 1), manager).await;
        let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
        let fresh = fingerprint(&conn).await;
        drop(conn);
        (pool, fresh)
    });
    let mut runner = pooler_testkit::fuzz_runner!();
    let counter = std::sync::atomic::AtomicI64::new(0);
    let outcome = runner.run(&proptest::collection::vec(action(), 1..8), |actions| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let seen = rt.block_on(async {
            let conn = pool.take_member(Duration::from_secs(10)).await.unwrap();
            for a in &actions {
                run(&conn, *a).await;
            }
            drop(conn);
            let conn = pool.take_member(Duration::from_secs(10)).await.unwrap();
            let seen = fingerprint(&conn).await;
            conn.execute("INSERT INTO pooler_fuzz_writes VALUES ($1)", &[&n])
                .await
                .expect("the next user's write");
            if seen != fresh {
                // Leaked: the connection is replaced, so the next case (a shrink's
                // included) starts from a clean one.
                pooler::Member::fail(conn);
            } else {
                drop(conn);
            }
            // Through the pool again (the write's connection was returned, maybe reset):
            // it must be there.
            let conn = pool.take_member(Duration::from_secs(10)).await.unwrap();
            let kept: i64 = conn
                .query_one(
                    "SELECT count(*) FROM pooler_fuzz_writes WHERE n = $1",
                    &[&n],
                )
                .await
                .unwrap()
                .get(0);
            drop(conn);
            (seen, kept)
        });
        let actions: Vec<_> = actions
            .iter()
            .map(|(i, way)| format!("{way:?}: {}", STATEMENTS[*i].0))
            .collect();
        prop_assert_eq!(
            &seen.0,
            &fresh,
            "after {:#?} the next user's session differs from a new one's",
            actions
        );
        prop_assert_eq!(
            seen.1,
            1,
            "after {:#?} the next user's write was lost",
            actions
        );
        Ok(())
    });
    rt.block_on(async {
        let admin = common::admin(&url).await;
        let _ = admin.batch_execute("DELETE FROM pooler_fuzz_writes").await;
        pool.close(Shutdown::Graceful).await;
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
