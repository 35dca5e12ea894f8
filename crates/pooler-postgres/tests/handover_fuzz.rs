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

use pooler::{Member, PoolConfig, Shutdown};
use pooler_postgres::PgManager;
use pooler_testkit::handover::{Session, poll_once_and_drop};
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
    ("SELECT set_config('app.tenant' || 'x', '5', false)", true),
    ("SET U&\"app\\002etenantx\" = '4'", true),
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
    (
        "CREATE TABLE IF NOT EXISTS \"pg_temp\".pooler_fuzz_q (x int)",
        true,
    ),
    (
        "CREATE TABLE IF NOT EXISTS U&\"pg\\005ftemp\".pooler_fuzz_u (x int)",
        true,
    ),
    ("PREPARE pooler_fuzz_p AS SELECT 1", true),
    ("DECLARE pooler_fuzz_c CURSOR WITH HOLD FOR SELECT 1", true),
    ("SELECT pooler_fuzz_sets()", true),
    ("SELECT pooler_fuzz.lower('x')", true),
    (
        "DO $$BEGIN PERFORM set_config('search_path', 'pg_catalog', false); END$$",
        true,
    ),
    // What undoes state, the hook's set-up included (the second run has one).
    ("UNLISTEN *", true),
    ("DISCARD TEMP", true),
    ("DEALLOCATE pooler_hooked", true),
    ("SELECT pg_advisory_unlock_all()", true),
    ("CLOSE ALL", true),
    ("DROP TABLE IF EXISTS pooler_hooked", true),
    (
        "ALTER TABLE IF EXISTS pooler_hooked ADD COLUMN IF NOT EXISTS pooler_fuzz int",
        true,
    ),
    (
        "CREATE INDEX IF NOT EXISTS pooler_fuzz_i ON pooler_hooked (x)",
        true,
    ),
    ("SELECT 1; SET ROLE pooler_tenant", false),
    ("BEGIN; SET search_path TO pg_catalog; COMMIT", false),
    ("SELECT ';'; LISTEN pooler_fuzz2 -- ; SELECT 1", false),
];

/// One action of user A's: a statement and how it is sent.
type Action = ((&'static str, bool), Way);

fn action() -> impl Strategy<Value = Action> {
    (
        proptest::sample::select(STATEMENTS),
        prop_oneof![
            3 => Just(Way::Simple),
            2 => Just(Way::Extended),
            2 => Just(Way::Cached),
            1 => Just(Way::Cancelled),
        ],
    )
}

/// Everything the next user can observe of a session, one row.
const FINGERPRINT: &str = "SELECT current_user, session_user, current_setting('search_path'), \
    current_setting('statement_timeout'), current_setting('default_transaction_read_only'), \
    current_setting('app.tenant', true), current_setting('app.tenantx', true), \
    (SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()), \
    (SELECT count(*) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
     WHERE c.relnamespace = pg_my_temp_schema() AND a.attnum > 0), \
    (SELECT count(*) FROM pg_prepared_statements WHERE from_sql), \
    (SELECT count(*) FROM pg_listening_channels()), \
    (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()), \
    (SELECT count(*) FROM pg_cursors), now() = statement_timestamp()";

struct Postgres;

impl Session for Postgres {
    type Manager = PgManager;
    type Action = Action;

    async fn act(&self, conn: &mut Member<PgManager>, &((sql, single), way): &Action) {
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

    async fn observe(&self, conn: &mut Member<PgManager>) -> String {
        format!("{:?}", common::one_row(conn, FINGERPRINT).await)
    }

    async fn write(&self, conn: &mut Member<PgManager>, mark: i64) -> bool {
        let sql = "INSERT INTO pooler_fuzz_writes VALUES ($1)";
        conn.execute(sql, &[&mark]).await.is_ok()
    }

    async fn count(&self, conn: &mut Member<PgManager>, mark: i64) -> i64 {
        let sql = "SELECT count(*) FROM pooler_fuzz_writes WHERE n = $1";
        conn.query_one(sql, &[&mark]).await.unwrap().get(0)
    }
}

/// Run twice, one after the other (they share the database's objects): without hooks, and
/// with an `after_connect` hook whose set-up the grammar can undo — a new connection's
/// session is then the hook's, and so must be the next user's.
#[test]
fn the_next_user_always_sees_a_session_like_a_new_one() {
    sessions_like_a_new_one(pooler::Hooks::default());
    sessions_like_a_new_one(common::hooked_set_up());
}

fn sessions_like_a_new_one(hooks: pooler::Hooks<pooler_postgres::PgConnection>) {
    let rt = pooler_testkit::runtime();
    let Some(url) = rt.block_on(common::url()) else {
        return;
    };
    let pool = rt.block_on(async {
        let admin = common::admin(&url).await;
        admin
            .batch_execute(
                "DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pooler_tenant') \
                 THEN CREATE ROLE pooler_tenant NOLOGIN; END IF; END$$; \
                 CREATE OR REPLACE FUNCTION pooler_fuzz_sets() RETURNS void LANGUAGE sql AS \
                 $$SELECT set_config('statement_timeout', '777', false)$$; \
                 GRANT EXECUTE ON FUNCTION pooler_fuzz_sets() TO PUBLIC; \
                 CREATE SCHEMA IF NOT EXISTS pooler_fuzz; \
                 GRANT USAGE ON SCHEMA pooler_fuzz TO PUBLIC; \
                 CREATE OR REPLACE FUNCTION pooler_fuzz.lower(text) RETURNS text LANGUAGE sql AS \
                 $$SELECT set_config('statement_timeout', '555', false)$$; \
                 CREATE TABLE IF NOT EXISTS pooler_fuzz_writes (n bigint)",
            )
            .await
            .unwrap();
        let manager = PgManager::new(&url)
            .unwrap()
            .custom_settings(["app.tenant"])
            .hooks(hooks);
        started(PoolConfig::new("pg-fuzz", 1, 1), manager).await
    });
    let outcome = pooler_testkit::fuzz_handover!(
        rt,
        &pool,
        &Postgres,
        proptest::collection::vec(action(), 1..8)
    );
    rt.block_on(async {
        let admin = common::admin(&url).await;
        let _ = admin.batch_execute("DELETE FROM pooler_fuzz_writes").await;
        pool.close(Shutdown::Graceful).await;
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
