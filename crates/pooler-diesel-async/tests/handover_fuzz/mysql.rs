//! The differential hand-over fuzzer for diesel-async on MySQL/MariaDB: user A runs a random
//! sequence — statements that leave session state (variables, `autocommit`, temporary
//! tables, named and table locks, another database, SQL `PREPARE`, a `HANDLER`) and ones that
//! do not, through diesel's `sql_query` (a prepared statement) and `batch_execute` (the text
//! protocol), transactions opened by SQL or by diesel's transaction manager and left open,
//! statements polled once and dropped — then gives the connection back; user B's view of the
//! session must equal a new connection's, and B's write must be durable. Live
//! (`POOLER_MYSQL_URL`).
//!
//! CI runs `POOLER_FUZZ_CASES` sequences (default 64); the documented long run is 10 000.

use super::{Way, sequence};
use pooler::{Member, PoolConfig, Shutdown};
use pooler_diesel_async::DieselManager;
use pooler_diesel_async::diesel::dsl::sql;
use pooler_diesel_async::diesel::sql_types::Text;
use pooler_diesel_async::diesel::{select, sql_query};
use pooler_diesel_async::diesel_async::{
    AnsiTransactionManager, AsyncConnection, AsyncMysqlConnection, RunQueryDsl,
    SimpleAsyncConnection, TransactionManager,
};
use pooler_testkit::handover::{Session, poll_once_and_drop};
use pooler_testkit::{Server, started};

/// The statements drawn from.
const STATEMENTS: &[&str] = &[
    "SELECT 1",
    "INSERT INTO pooler_fuzz_mysql_writes VALUES (-1)",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "SAVEPOINT pooler_fuzz_s",
    "SET @tenant = 7",
    "SELECT @tenant := 9",
    "SET SESSION sql_mode = 'ANSI'",
    "SET SESSION time_zone = '+05:00'",
    "SET autocommit = 0",
    "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
    "CREATE TEMPORARY TABLE IF NOT EXISTS pooler_fuzz_t (x INT)",
    "DO GET_LOCK('pooler_fuzz', 0)",
    "LOCK TABLES pooler_fuzz_mysql_writes WRITE",
    "USE mysql",
    "PREPARE pooler_fuzz_p FROM 'SELECT 1'",
    "HANDLER pooler_fuzz_mysql_writes OPEN",
];

type Conn = Member<DieselManager<AsyncMysqlConnection>>;

struct Mysql;

impl Session for Mysql {
    type Manager = DieselManager<AsyncMysqlConnection>;
    type Action = (&'static str, Way);

    async fn act(&self, conn: &mut Conn, &(statement, way): &Self::Action) {
        let conn = &mut **conn;
        match way {
            Way::Query => drop(sql_query(statement).execute(conn).await),
            Way::Dropped => poll_once_and_drop(conn.batch_execute(statement)).await,
            Way::Begin => drop(AnsiTransactionManager::begin_transaction(conn).await),
            Way::Batch => drop(conn.batch_execute(statement).await),
        }
    }

    /// The user, database, settings, transaction, user variables and whether it holds the
    /// named lock (a replaced connection's lock goes when it has closed, a moment later, as
    /// in the PostgreSQL fuzzer), then whether the temporary table, the SQL-prepared
    /// statement and the handler exist.
    async fn observe(&self, conn: &mut Conn) -> String {
        let conn = &mut **conn;
        let settings: String = select(sql::<Text>(
            "CONCAT_WS('|', CURRENT_USER(), COALESCE(DATABASE(), '<none>'), @@SESSION.sql_mode, \
             @@SESSION.time_zone, @@SESSION.autocommit, @@in_transaction, \
             COALESCE(CAST(@tenant AS CHAR), '<none>'), \
             IF(IS_USED_LOCK('pooler_fuzz') <=> CONNECTION_ID(), 'held', 'free'))",
        ))
        .get_result(&mut *conn)
        .await
        .unwrap_or_else(|e| format!("error: {e}"));
        let mut probes = Vec::new();
        for probe in [
            "SELECT COUNT(*) FROM pooler_fuzz_t",
            "EXECUTE pooler_fuzz_p",
            "HANDLER pooler_fuzz_mysql_writes READ FIRST",
        ] {
            probes.push(if conn.batch_execute(probe).await.is_ok() {
                "there"
            } else {
                "none"
            });
        }
        format!("{settings}|{}", probes.join("|"))
    }

    async fn write(&self, conn: &mut Conn, mark: i64) -> bool {
        let query = format!("INSERT INTO pooler_fuzz_mysql_writes VALUES ({mark})");
        sql_query(query).execute(&mut **conn).await.is_ok()
    }

    async fn count(&self, conn: &mut Conn, mark: i64) -> i64 {
        let query = format!(
            "CAST((SELECT COUNT(*) FROM pooler_fuzz_mysql_writes WHERE n = {mark}) AS CHAR)"
        );
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
    let Some(url) = rt.block_on(Server::Mysql.url()) else {
        return;
    };
    let pool = rt.block_on(async {
        let mut admin = AsyncMysqlConnection::establish(&url).await.unwrap();
        admin
            .batch_execute("CREATE TABLE IF NOT EXISTS pooler_fuzz_mysql_writes (n BIGINT)")
            .await
            .unwrap();
        let manager = DieselManager::<AsyncMysqlConnection>::new(url.as_str());
        started(PoolConfig::new("diesel-mysql-fuzz", 1, 1), manager).await
    });
    let outcome = pooler_testkit::fuzz_handover!(rt, &pool, &Mysql, sequence(STATEMENTS));
    rt.block_on(async {
        if let Ok(mut admin) = AsyncMysqlConnection::establish(&url).await {
            let _ = admin
                .batch_execute("DELETE FROM pooler_fuzz_mysql_writes")
                .await;
        }
        pool.close(Shutdown::Graceful).await;
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
