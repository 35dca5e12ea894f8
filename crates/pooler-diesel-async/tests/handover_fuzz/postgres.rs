//! The differential hand-over fuzzer for diesel-async on PostgreSQL: user A runs a random
//! sequence — statements that leave session state and ones that do not, through diesel's
//! `sql_query` (the extended protocol) and `batch_execute` (the simple one), transactions
//! opened by SQL or by diesel's transaction manager and left open, statements polled once
//! and dropped — then gives the connection back; user B's view of the session must equal a
//! new connection's, and B's write must be durable. Live (`POOLER_POSTGRES_URL`).
//!
//! CI runs `POOLER_FUZZ_CASES` sequences (default 64); the documented long run is 10 000.

use super::{Way, sequence};
use pooler::{Member, PoolConfig, Shutdown};
use pooler_diesel_async::DieselManager;
use pooler_diesel_async::diesel::dsl::sql;
use pooler_diesel_async::diesel::sql_types::Text;
use pooler_diesel_async::diesel::{select, sql_query};
use pooler_diesel_async::diesel_async::{
    AnsiTransactionManager, AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection,
    TransactionManager,
};
use pooler_testkit::handover::{Session, poll_once_and_drop};
use pooler_testkit::{Server, started};

/// The statements drawn from: (SQL, whether it is one statement `sql_query` can send).
const STATEMENTS: &[(&str, bool)] = &[
    ("SELECT 1", true),
    ("BEGIN", true),
    ("COMMIT", true),
    ("ROLLBACK", true),
    ("SAVEPOINT pooler_fuzz_s", true),
    ("SET search_path TO pg_catalog", true),
    ("SET SESSION statement_timeout = 1234", true),
    ("SET LOCAL statement_timeout = 4321", true),
    ("SET ROLE pooler_tenant", true),
    ("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", true),
    ("SELECT set_config('app.tenant', '7', false)", true),
    ("SET app.tenant = '9'", true),
    ("LISTEN pooler_fuzz", true),
    ("SELECT pg_advisory_lock(4711)", true),
    ("SELECT pg_advisory_xact_lock(4714)", true),
    (
        "CREATE TEMP TABLE IF NOT EXISTS pooler_fuzz_t (x int)",
        true,
    ),
    ("PREPARE pooler_fuzz_p AS SELECT 1", true),
    ("DECLARE pooler_fuzz_c CURSOR WITH HOLD FOR SELECT 1", true),
    ("SELECT nextval('pooler_fuzz_seq')", true),
    ("BEGIN; SET search_path TO pg_catalog; COMMIT", false),
    ("SELECT 1; SET ROLE pooler_tenant", false),
];

/// Everything the next user can observe of a session, as one text.
const FINGERPRINT: &str = "concat_ws('|', current_user, session_user, \
    current_setting('search_path'), current_setting('statement_timeout'), \
    current_setting('default_transaction_read_only'), \
    coalesce(current_setting('app.tenant', true), '<none>'), \
    (SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()), \
    (SELECT count(*) FROM pg_prepared_statements WHERE from_sql), \
    (SELECT count(*) FROM pg_listening_channels()), \
    (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()), \
    (SELECT count(*) FROM pg_cursors), now() = statement_timestamp())";

type Conn = Member<DieselManager<AsyncPgConnection>>;

struct Postgres;

impl Session for Postgres {
    type Manager = DieselManager<AsyncPgConnection>;
    type Action = ((&'static str, bool), Way);

    async fn act(&self, conn: &mut Conn, &((statement, single), way): &Self::Action) {
        let conn = &mut **conn;
        match way {
            Way::Query if single => drop(sql_query(statement).execute(conn).await),
            Way::Dropped => poll_once_and_drop(conn.batch_execute(statement)).await,
            Way::Begin => drop(AnsiTransactionManager::begin_transaction(conn).await),
            _ => drop(conn.batch_execute(statement).await),
        }
    }

    async fn observe(&self, conn: &mut Conn) -> String {
        select(sql::<Text>(FINGERPRINT))
            .get_result(&mut **conn)
            .await
            .unwrap_or_else(|e| format!("error: {e}"))
    }

    async fn write(&self, conn: &mut Conn, mark: i64) -> bool {
        let query = format!("INSERT INTO pooler_fuzz_diesel_writes VALUES ({mark})");
        sql_query(query).execute(&mut **conn).await.is_ok()
    }

    async fn count(&self, conn: &mut Conn, mark: i64) -> i64 {
        let query =
            format!("(SELECT count(*) FROM pooler_fuzz_diesel_writes WHERE n = {mark})::text");
        let kept: String = select(sql::<Text>(&query))
            .get_result(&mut **conn)
            .await
            .unwrap();
        kept.parse().unwrap()
    }
}

#[test]
fn the_next_user_always_sees_a_session_like_a_new_one() {
    let rt = pooler_testkit::runtime();
    let Some(url) = rt.block_on(Server::Postgres.url()) else {
        return;
    };
    let pool = rt.block_on(async {
        let mut admin = AsyncPgConnection::establish(&url).await.unwrap();
        admin
            .batch_execute(
                "DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pooler_tenant') \
                 THEN CREATE ROLE pooler_tenant NOLOGIN; END IF; END$$; \
                 CREATE SEQUENCE IF NOT EXISTS pooler_fuzz_seq; \
                 GRANT USAGE ON SEQUENCE pooler_fuzz_seq TO PUBLIC; \
                 CREATE TABLE IF NOT EXISTS pooler_fuzz_diesel_writes (n bigint)",
            )
            .await
            .unwrap();
        // The custom setting the application uses, defined at connect (a custom setting
        // once set stays defined on the session, so the reset restores it to this).
        let manager = DieselManager::<AsyncPgConnection>::new(url.as_str()).hooks(
            pooler::Hooks::default().after_connect(|conn: &mut AsyncPgConnection| {
                Box::pin(async move {
                    conn.batch_execute("SELECT set_config('app.tenant', '', false)")
                        .await?;
                    Ok(())
                })
            }),
        );
        started(PoolConfig::new("diesel-fuzz", 1, 1), manager).await
    });
    let outcome = pooler_testkit::fuzz_handover!(rt, &pool, &Postgres, sequence(STATEMENTS));
    rt.block_on(async {
        if let Ok(mut admin) = AsyncPgConnection::establish(&url).await {
            let _ = admin
                .batch_execute("DELETE FROM pooler_fuzz_diesel_writes")
                .await;
        }
        pool.close(Shutdown::Graceful).await;
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
