//! Live tests behind a PgBouncer of the test's own (Debian's `pgbouncer`, in front of
//! `POOLER_POSTGRES_URL`), in transaction and session mode. Without `pgbouncer` installed they
//! skip with a notice, or fail under `POOLER_REQUIRE_SERVICES=1`.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::url;
use pooler::PoolConfig;
use pooler_postgres::{PgManager, Recycle, TxStatus};
use pooler_testkit::pgbouncer::{Mode, PgBouncer};
use pooler_testkit::started;

/// The connection's transaction status once its driver has caught up (bounded).
async fn settled(conn: &pooler_postgres::PgConnection) -> TxStatus {
    tokio::time::timeout(Duration::from_secs(5), conn.settled())
        .await
        .expect("the connection settles")
}

/// PgBouncer in `mode` in front of the test server, with fewer server connections (4) than
/// the pools below have clients, so that a client's transactions move between them.
async fn bouncer(mode: Mode, settings: &[&str]) -> Option<PgBouncer> {
    let url = url().await?;
    let upstream = pooler_testkit::host_port(&url)
        .parse()
        .expect("the server's address is an IP and a port");
    let mut all = vec!["default_pool_size = 4"];
    all.extend_from_slice(settings);
    PgBouncer::start(upstream, mode, &all)
}

/// 16 tasks over a pool of 8, each running 50 rounds of parameterised statements (a query
/// with one row, one with an optional row, a command, rows through `query_raw`) and a
/// transaction with a cached statement; the failures, with the first one's text.
async fn workload(pool: &pooler_postgres::Pool) -> (usize, Option<String>) {
    let failures = Arc::new(AtomicUsize::new(0));
    let first = Arc::new(std::sync::Mutex::new(None::<String>));
    let mut tasks = Vec::new();
    for t in 0..16_i32 {
        let pool = pool.clone();
        let failures = failures.clone();
        let first = first.clone();
        tasks.push(tokio::spawn(async move {
            let fail = |e: String| {
                failures.fetch_add(1, Ordering::Relaxed);
                first.lock().unwrap().get_or_insert(e);
            };
            for i in 0..50_i32 {
                let mut conn = pool.take().await.expect("a member");
                let n = t * 1000 + i;
                match conn.query_one("SELECT $1::int4 + 1", &[&n]).await {
                    Ok(row) => assert_eq!(row.get::<_, i32>(0), n + 1),
                    Err(e) => fail(format!("query_one: {e:?}")),
                }
                // A statement returns settled, behind PgBouncer too.
                if conn.tx_status() != TxStatus::Idle {
                    fail(format!("status after query_one: {:?}", conn.tx_status()));
                }
                match conn
                    .query_opt("SELECT $1::text WHERE $2::bool", &[&"x", &false])
                    .await
                {
                    Ok(row) => assert!(row.is_none()),
                    Err(e) => fail(format!("query_opt: {e:?}")),
                }
                if let Err(e) = conn.execute("SELECT $1::int8", &[&i64::from(n)]).await {
                    fail(format!("execute: {e:?}"));
                }
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&n];
                match conn
                    .query_raw("SELECT generate_series(1, $1 % 3 + 1)", params)
                    .await
                {
                    Ok(rows) => {
                        let rows: Vec<_> =
                            futures_util::TryStreamExt::try_collect(rows).await.unwrap();
                        assert_eq!(rows.len(), usize::try_from(n % 3 + 1).unwrap());
                    }
                    Err(e) => fail(format!("query_raw: {e:?}")),
                }
                match conn.transaction().await {
                    Ok(tx) => {
                        let done = async {
                            let st = tx.prepare_cached("SELECT $1::int4 * 2").await?;
                            let row = tx.query_one(&st, &[&n]).await?;
                            assert_eq!(row.get::<_, i32>(0), n * 2);
                            tx.commit().await
                        };
                        if let Err(e) = done.await {
                            fail(format!("transaction: {e:?}"));
                        }
                    }
                    Err(e) => fail(format!("begin: {e:?}")),
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("a task of the workload");
    }
    let first = first.lock().unwrap().take();
    (failures.load(Ordering::Relaxed), first)
}

fn pool_config(name: &str) -> PoolConfig {
    PoolConfig::new(name, 8, 8)
        .to_builder()
        .queue_max(16)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_transaction_pooling_parameterised_and_cached_statements_never_fail() {
    let Some(bouncer) = bouncer(Mode::Transaction, &[]).await else {
        return;
    };
    let manager = PgManager::new(&bouncer.url("postgres"))
        .unwrap()
        .transaction_pooling(true);
    let pool = started(pool_config("pgb-tx"), manager).await;
    let (failed, first) = workload(&pool).await;
    assert_eq!(failed, 0, "of 4 000 statements; the first: {first:?}");
    pool.close(pooler::Shutdown::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_session_pooling_the_defaults_serve_unchanged() {
    let Some(bouncer) = bouncer(Mode::Session, &[]).await else {
        return;
    };
    // Session mode: a client keeps its server connection, so more clients than the 4 server
    // connections would wait on PgBouncer; 4 clients here.
    let manager = PgManager::new(&bouncer.url("postgres")).unwrap();
    let config = PoolConfig::new("pgb-session", 4, 4)
        .to_builder()
        .queue_max(16)
        .build()
        .unwrap();
    let pool = started(config, manager).await;
    let (failed, first) = workload(&pool).await;
    assert_eq!(failed, 0, "of 4 000 statements; the first: {first:?}");
    let conn = pool.take().await.unwrap();
    conn.prepare_cached("SELECT 1").await.unwrap();
    assert!(
        conn.statement_cache().hits > 0,
        "the statement cache serves as without PgBouncer"
    );
    drop(conn);
    pool.close(pooler::Shutdown::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_transaction_pooling_a_transaction_left_open_is_rolled_back() {
    let Some(bouncer) = bouncer(Mode::Transaction, &[]).await else {
        return;
    };
    let manager = PgManager::new(&bouncer.url("postgres"))
        .unwrap()
        .transaction_pooling(true);
    let pool = started(PoolConfig::new("pgb-open", 1, 1), manager).await;
    let conn = pool.take().await.unwrap();
    conn.batch_execute("BEGIN; CREATE TEMP TABLE left_open (n int)")
        .await
        .unwrap();
    drop(conn);
    // The same client: its transaction was rolled back on return, so it is idle, and the
    // server connection it held went back to PgBouncer with the table gone.
    let conn = pool.take().await.unwrap();
    assert_eq!(settled(&conn).await, TxStatus::Idle);
    let left: i64 = conn
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relname = 'left_open' AND relpersistence = 't'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
    drop(conn);
    pool.close(pooler::Shutdown::Graceful).await;
}

/// A pool of `size` behind transaction pooling.
async fn transaction_pool(bouncer: &PgBouncer, name: &str, size: usize) -> pooler_postgres::Pool {
    let manager = PgManager::new(&bouncer.url("postgres"))
        .unwrap()
        .transaction_pooling(true);
    let config = PoolConfig::new(name, size, size)
        .to_builder()
        .queue_max(16)
        .build()
        .unwrap();
    started(config, manager).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_pgbouncer_resetting_each_server_connection_no_setting_reaches_another_client() {
    // The decision (docs/design.md, "Behind PgBouncer"): the pool cannot reach the server
    // connection a `SET` ran on once its transaction is over; PgBouncer can, and
    // `server_reset_query_always` makes it. Unnamed statements keep working under it (it
    // deallocates every named statement after each transaction).
    let Some(bouncer) = bouncer(
        Mode::Transaction,
        &[
            "server_reset_query = DISCARD ALL",
            "server_reset_query_always = 1",
        ],
    )
    .await
    else {
        return;
    };
    let pool = transaction_pool(&bouncer, "pgb-reset", 8).await;
    let (failed, first) = workload(&pool).await;
    assert_eq!(failed, 0, "of 4 000 statements; the first: {first:?}");
    let setter = pool.take().await.unwrap();
    setter
        .execute("SET statement_timeout = '1234s'", &[])
        .await
        .unwrap();
    drop(setter);
    for _ in 0..40 {
        let conn = pool.take().await.unwrap();
        let timeout: String = conn
            .query_one("SELECT current_setting('statement_timeout')", &[])
            .await
            .unwrap()
            .get(0);
        assert_ne!(timeout, "1234s", "a setting reached another client");
    }
    pool.close(pooler::Shutdown::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_transaction_pooling_the_cache_keeps_descriptions_and_forgets_a_stale_one() {
    let Some(bouncer) = bouncer(Mode::Transaction, &[]).await else {
        return;
    };
    let pool = transaction_pool(&bouncer, "pgb-describe", 1).await;
    let conn = pool.take().await.unwrap();
    let table = format!("pgb_stale_{}", std::process::id());
    conn.batch_execute(&format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (a int4)"
    ))
    .await
    .unwrap();
    let insert = format!("INSERT INTO {table} (a) VALUES ($1)");
    for n in 0..3_i32 {
        assert_eq!(conn.execute(&insert, &[&n]).await.unwrap(), 1);
    }
    let stats = conn.statement_cache();
    assert_eq!(
        (stats.size, stats.misses, stats.hits),
        (1, 1, 2),
        "{stats:?}"
    );

    // A wrong number of parameters: tokio-postgres's own error, before anything runs.
    let e = conn.execute(&insert, &[&1_i32, &2_i32]).await.unwrap_err();
    assert!(e.to_string().contains("parameters"), "{e}");

    // The column's type changes under the description, and the application with it: the
    // first run fails (the parameter does not fit the type described), the description is
    // forgotten, and the next run is described anew.
    conn.batch_execute(&format!(
        "ALTER TABLE {table} ALTER a TYPE bool USING a <> 0"
    ))
    .await
    .unwrap();
    assert!(conn.execute(&insert, &[&true]).await.is_err());
    assert_eq!(conn.execute(&insert, &[&true]).await.unwrap(), 1);
    // The server's refusal forgets it the same way.
    assert!(conn.execute(&insert, &[&7_i32]).await.is_err());
    assert_eq!(conn.execute(&insert, &[&false]).await.unwrap(), 1);

    // A statement the server cannot parse: its error, and the connection idle after it.
    let e = conn.query("SELEKT $1::int4", &[&1_i32]).await.unwrap_err();
    assert_eq!(
        e.code(),
        Some(&tokio_postgres::error::SqlState::SYNTAX_ERROR),
        "{e}"
    );
    assert_eq!(settled(&conn).await, TxStatus::Idle);
    conn.batch_execute(&format!("DROP TABLE {table}"))
        .await
        .unwrap();
    drop(conn);
    pool.close(pooler::Shutdown::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_transaction_pooling_a_statement_dropped_while_described_leaves_no_transaction() {
    let Some(bouncer) = bouncer(Mode::Transaction, &[]).await else {
        return;
    };
    let pool = transaction_pool(&bouncer, "pgb-dropped", 1).await;
    for round in 0..3_i32 {
        let conn = pool.take().await.unwrap();
        // Polled once: its describing `BEGIN` and Parse are sent, then it is dropped.
        let query = format!("SELECT $1::int4 + {round}");
        let polled = futures_util::FutureExt::now_or_never(conn.query_one(&query, &[&1_i32]));
        assert!(
            polled.is_none(),
            "a round trip cannot be over at the first poll"
        );
        drop(conn);
        let conn = pool.take().await.unwrap();
        assert_eq!(settled(&conn).await, TxStatus::Idle, "round {round}");
        let row = conn.query_one(&query, &[&1_i32]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), 1 + round);
    }
    pool.close(pooler::Shutdown::Graceful).await;
}

/// PgBouncer frozen (SIGSTOP: its kernel still takes the bytes, nothing answers): a request
/// bounded by `until` ends by its deadline and the grace, saying it may have reached the
/// server (PgBouncer forwards the cancel, and cannot now); the connection is replaced; a
/// close does not wait on it; thawed, the pool serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_pgbouncer_holds_neither_a_request_nor_a_close() {
    let Some(bouncer) = bouncer(Mode::Transaction, &[]).await else {
        return;
    };
    let pool = transaction_pool(&bouncer, "pgb-frozen", 2).await;
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    conn.simple_query("SELECT 1").await.unwrap();
    let id = pooler::Member::id(&conn);
    bouncer.signal("-STOP");
    let began = tokio::time::Instant::now();
    let answer = conn
        .until(
            began + Duration::from_millis(300),
            conn.simple_query("SELECT 1"),
        )
        .await;
    let took = began.elapsed();
    let e = answer.unwrap_err();
    assert!(
        matches!(e, pooler_postgres::PgError::Deadline { .. }),
        "{e}"
    );
    assert!(
        took < Duration::from_millis(800) + pooler_postgres::CANCEL_GRACE,
        "{took:?}"
    );
    eprintln!("a request through a frozen PgBouncer ended after {took:?}");
    drop(conn);
    bouncer.signal("-CONT");
    for _ in 0..2 {
        let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
        assert_ne!(
            pooler::Member::id(&conn),
            id,
            "the abandoned connection came back"
        );
        assert_eq!(conn.simple_query("SELECT 1").await.unwrap().len(), 3);
    }
    bouncer.signal("-STOP");
    pooler_testkit::scenarios::closes_within(
        &pool,
        pooler::Shutdown::Graceful,
        Duration::from_secs(2),
    )
    .await;
    bouncer.signal("-CONT");
}

/// A dead link between the pool and PgBouncer (a network namespace in front of it whose
/// link is taken down: packets vanish with no FIN and no RST). pooler-postgres's socket
/// bounds hold there as in front of the server: a statement in flight fails within the
/// bound (`TCP_USER_TIMEOUT`, 30 s), the idle member is found dead by the keepalives and
/// never handed out, and once the link is back the pool serves again. About half a minute
/// of real time: the bound itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_pgbouncer_a_dead_link_is_found_within_the_bound() {
    use pooler_testkit::blackhole::Blackhole;
    /// The bound, with a margin for the kernel's timer granularity.
    const BOUND: Duration = Duration::from_secs(40);
    let Some(bouncer) = bouncer(Mode::Transaction, &[]).await else {
        return;
    };
    let Some(hole) = Blackhole::new(bouncer.addr()) else {
        return;
    };
    let via = format!(
        "postgres://postgres@{}/test?sslmode=disable&connect_timeout=3",
        hole.addr()
    );
    let manager = PgManager::new(&via).unwrap().transaction_pooling(true);
    let pool = started(PoolConfig::new("pgbouncer-dead", 2, 2), manager).await;
    pooler_testkit::scenarios::busy_and_idle_across_a_dead_link(
        &pool,
        &hole,
        BOUND,
        async |conn| conn.query_one("SELECT $1::int4", &[&1_i32]).await.map(drop),
    )
    .await;
}

/// A manager with `transaction_pooling` whose connections go through a
/// [`PipelineWatch`](pooler_testkit::pgwire::PipelineWatch) in front of the server at `url`,
/// and the watch.
async fn watched(url: &str) -> (pooler_testkit::pgwire::PipelineWatch, PgManager) {
    let upstream = pooler_testkit::host_port(url);
    let watch = pooler_testkit::pgwire::PipelineWatch::start(&upstream).await;
    let watched = url.replacen(&upstream, &watch.addr().to_string(), 1);
    let manager = PgManager::new(&watched).unwrap().transaction_pooling(true);
    (watch, manager)
}

/// What a transaction pooler cannot serve is never sent with `transaction_pooling`: no
/// message behind a sync point begun outside a transaction and still unanswered (at its
/// answer PgBouncer may hand the server to another client, who then reads the rest as
/// "unexpected message from server"). Watched on the wire, without a pooler, so every
/// instance is seen rather than the rare one that lands: the connection's setup, the pool's
/// check before each take and its reset at each return, and the workload above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_transaction_pooling_nothing_is_sent_behind_an_unanswered_sync_point() {
    let Some(url) = url().await else {
        return;
    };
    let (watch, manager) = watched(&url).await;
    let config = pool_config("pgb-pipeline")
        .to_builder()
        .idle_check_threshold(Duration::ZERO)
        .build()
        .unwrap();
    let pool = started(config, manager).await;
    let (failed, first) = workload(&pool).await;
    assert_eq!(failed, 0, "of 4 000 statements; the first: {first:?}");
    pool.close(pooler::Shutdown::Graceful).await;
    assert_eq!(watch.pipelined(), Vec::<String>::new());
}

/// A statement kept past the connection's return closes itself when it is dropped:
/// tokio-postgres sends Close and Sync then, whatever the connection is doing. The pool's
/// check before the next take, and its reset at the return in every mode, wait for that
/// answer rather than send behind it (with `transaction_pooling`, one they cannot wait for
/// fails, and the connection is replaced).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_transaction_pooling_a_statement_dropped_late_is_answered_before_the_pool_sends() {
    let Some(url) = url().await else {
        return;
    };
    for recycle in [Recycle::Observed, Recycle::Query, Recycle::Always] {
        let (watch, manager) = watched(&url).await;
        let manager = manager.recycle(recycle.clone());
        let config = PoolConfig::new("pgb-late-close", 1, 1)
            .to_builder()
            .idle_check_threshold(Duration::ZERO)
            .build()
            .unwrap();
        let pool = started(config, manager).await;
        for after_the_return in [true, false] {
            for _ in 0..10 {
                let conn = pool.take().await.expect("a member");
                let statement = conn.prepare("SELECT 1").await.expect("prepared");
                if after_the_return {
                    // Dropped while the member is free, its return done.
                    drop(conn);
                    pooler_testkit::eventually("the member is given back", async || {
                        pool.utilization().free_count > 0
                    })
                    .await;
                    drop(statement);
                } else {
                    drop(statement);
                    drop(conn);
                }
                let conn = pool.take().await.expect("a member, checked");
                assert_eq!(
                    conn.simple_query("SELECT 2").await.expect("served").len(),
                    3
                );
            }
        }
        pool.close(pooler::Shutdown::Graceful).await;
        assert_eq!(watch.pipelined(), Vec::<String>::new(), "{recycle:?}");
    }
}

/// With `transaction_pooling`, a connection given back with an answer outstanding past the
/// return's wait (a long query whose future was dropped) is replaced: asking the server
/// whether a transaction is open would go behind that request's sync point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_transaction_pooling_a_connection_with_an_answer_outstanding_is_replaced() {
    let Some(url) = url().await else {
        return;
    };
    let (watch, manager) = watched(&url).await;
    let pool = started(PoolConfig::new("pgb-outstanding", 1, 1), manager).await;
    let pid = |conn: pooler::Member<PgManager>| async move {
        let row = conn.query_one("SELECT pg_backend_pid()", &[]).await;
        row.expect("served").get::<_, i32>(0)
    };
    let first = pid(pool.take().await.expect("a member")).await;
    let conn = pool.take().await.expect("a member");
    let slow = tokio::time::timeout(
        Duration::from_millis(100),
        conn.simple_query("SELECT pg_sleep(3)"),
    )
    .await;
    assert!(slow.is_err(), "cut at its deadline");
    drop(conn);
    let second = pid(pool.take().await.expect("a member")).await;
    assert_ne!(first, second, "the connection was replaced");
    pool.close(pooler::Shutdown::Graceful).await;
    assert_eq!(watch.pipelined(), Vec::<String>::new());
}
