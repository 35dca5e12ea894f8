//! Live tests against PostgreSQL (`POOLER_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`). Unreachable, they skip with a notice, or fail
//! under `POOLER_REQUIRE_SERVICES=1`.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::time::Duration;

use common::{admin, backend_pid, url};
use pooler::Manager as _;
use pooler::{Member, PoolConfig, Shutdown};
use pooler_postgres::{PgManager, Recycle, TxStatus};
use pooler_testkit::scenarios::Watched;
use pooler_testkit::{Proxy, eventually, host_port, scenarios, started};

/// The connection's transaction status once its driver has written everything and every
/// answer is read (bounded: a test that finds it never settles fails).
async fn settled(conn: &pooler_postgres::PgConnection) -> TxStatus {
    tokio::time::timeout(Duration::from_secs(5), conn.settled())
        .await
        .expect("the connection settles")
}

/// A manager whose connections carry `tag` as their application_name.
fn manager(url: &str, tag: &str) -> PgManager {
    let mut config: tokio_postgres::Config = url.parse().expect("a valid URL");
    config.application_name(tag);
    PgManager::from_config(config)
}

async fn sessions(admin: &tokio_postgres::Client, tag: &str) -> usize {
    let count: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&tag],
        )
        .await
        .expect("count sessions")
        .get(0);
    usize::try_from(count).unwrap_or(0)
}

/// Whether the session is inside an explicit transaction. (Over the simple protocol: with
/// the extended one, `now()` and `statement_timestamp()` differ even outside a transaction.)
async fn in_transaction(conn: &tokio_postgres::Client) -> bool {
    let messages = conn
        .simple_query("SELECT now() = statement_timestamp()")
        .await
        .unwrap();
    !messages
        .iter()
        .any(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(r) if r.get(0) == Some("t")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_tasks_share_eight_connections_with_correct_results() {
    let Some(url) = url().await else { return };
    let config = scenarios::sixty_four_config("pg-64");
    let pool = started(config, manager(&url, "pooler-64")).await;
    scenarios::sixty_four_tasks_share_eight(&pool, async |conn, n| {
        let n = i32::try_from(n).unwrap();
        let row = conn
            .query_one("SELECT $1::INT, pg_backend_pid()", &[&n])
            .await
            .unwrap();
        assert_eq!(row.get::<_, i32>(0), n);
        u64::try_from(row.get::<_, i32>(1)).unwrap()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_backend_is_replaced_and_never_handed_out() {
    let Some(url) = url().await else { return };
    let admin = admin(&url).await;
    let pool = started(
        PoolConfig::new("pg-kill", 2, 2),
        manager(&url, "pooler-kill"),
    )
    .await;
    scenarios::killed_sessions_are_never_handed_out(
        &pool,
        Watched::Always,
        async |conn| u64::try_from(backend_pid(conn).await).unwrap(),
        async |pid| {
            let pid = i32::try_from(pid).unwrap();
            let sql = "SELECT pg_terminate_backend($1)";
            admin.execute(sql, &[&pid]).await.unwrap();
        },
        async |conn| conn.query_one("SELECT 1", &[]).await.is_ok(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_fails_fast_backs_off_and_refills_by_itself() {
    let Some(url) = url().await else { return };
    let proxy = Proxy::start(&host_port(&url)).await;
    proxy.set_open(false);
    // A fresh config: `host()` and `port()` add to a parsed one's list, not replace it.
    let parsed: tokio_postgres::Config = url.parse().unwrap();
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(proxy.addr().port())
        .application_name("pooler-outage");
    if let Some(user) = parsed.get_user() {
        config.user(user);
    }
    if let Some(db) = parsed.get_dbname() {
        config.dbname(db);
    }
    let pool = started(
        scenarios::outage_config("pg-outage"),
        PgManager::from_config(config),
    )
    .await;
    scenarios::outage_and_recovery(&pool, &proxy, async |conn| {
        conn.query_one("SELECT 1", &[]).await.is_ok()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_lifetime_with_jitter_recycles_real_connections() {
    let Some(url) = url().await else { return };
    let config = scenarios::lifetime_config("pg-life");
    let pool = started(config, manager(&url, "pooler-life")).await;
    scenarios::lifetimes_recycle_connections(&pool, async |conn| {
        let pid = backend_pid(conn).await;
        i64::from(pid)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_returned_inside_a_transaction_is_rolled_back() {
    let Some(url) = url().await else { return };
    let admin = admin(&url).await;
    admin
        .batch_execute("CREATE TABLE IF NOT EXISTS pooler_tx (v INT)")
        .await
        .unwrap();
    admin.batch_execute("DELETE FROM pooler_tx").await.unwrap();
    let pool = started(PoolConfig::new("pg-tx", 1, 1), manager(&url, "pooler-tx")).await;
    {
        let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
        conn.batch_execute("BEGIN; INSERT INTO pooler_tx VALUES (1)")
            .await
            .unwrap();
        // Returned without COMMIT or ROLLBACK.
    }
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert!(
        !in_transaction(&conn).await,
        "the next taker is not inside the old transaction"
    );
    let rows: i64 = admin
        .query_one("SELECT count(*) FROM pooler_tx", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "the insert was rolled back, not committed");
    drop(conn);

    // A failed transaction is rolled back too, and the same connection is offered again.
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let id = Member::id(&conn);
    conn.batch_execute("BEGIN").await.unwrap();
    assert!(conn.batch_execute("SELECT 1/0").await.is_err());
    // The error comes back at ErrorResponse; the ReadyForQuery saying "failed" may still be
    // on its way.
    assert!(
        matches!(conn.tx_status(), TxStatus::Failed | TxStatus::Unsettled),
        "{:?}",
        conn.tx_status()
    );
    drop(conn);
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert_eq!(Member::id(&conn), id);
    assert!(!in_transaction(&conn).await);
    let one: i32 = conn.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
    drop(conn);
    pool.close(Shutdown::Graceful).await;

    // Recycle::Nothing leaves the session as it was (documented trade-off).
    let plain = manager(&url, "pooler-tx-plain").recycle(Recycle::Nothing);
    let pool = started(PoolConfig::new("pg-tx-plain", 1, 1), plain).await;
    pool.take_member(Duration::from_secs(5))
        .await
        .unwrap()
        .batch_execute("BEGIN")
        .await
        .unwrap();
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert!(in_transaction(&conn).await);
    drop(conn);
    pool.close(Shutdown::Immediate).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_leaves_no_session_open() {
    let Some(url) = url().await else { return };
    let admin = admin(&url).await;
    let tag = "pooler-close";
    let pool = started(PoolConfig::new("pg-close", 5, 8), manager(&url, tag)).await;
    scenarios::close_leaves_nothing(&pool, async || sessions(&admin, tag).await).await;
}

/// Every way a session can be left inside a transaction, with the default
/// `Recycle::Observed`: the next taker of the same connection is never inside it, and nothing
/// the last user did inside it was committed. And a connection given back idle is offered
/// again with no query at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observed_status_keeps_every_abandoned_transaction_from_the_next_user() {
    let Some(url) = url().await else { return };
    let admin = admin(&url).await;
    admin
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS pooler_observed (v INT); DELETE FROM pooler_observed",
        )
        .await
        .unwrap();
    let pool = started(
        PoolConfig::new("pg-observed", 1, 1),
        manager(&url, "pooler-observed"),
    )
    .await;
    let take = async || pool.take_member(Duration::from_secs(5)).await.unwrap();

    // Idle after a query: no recycle at all, at once.
    let conn = take().await;
    let id = Member::id(&conn);
    conn.simple_query("SELECT 1").await.unwrap();
    assert_eq!(settled(&conn).await, TxStatus::Idle);
    assert!(!pool.manager().needs_recycle(&conn), "idle needs no query");
    // COPY FROM STDIN outside a transaction: still followed exactly.
    {
        use futures_util::SinkExt as _;
        let sink = conn
            .copy_in("COPY pooler_observed FROM STDIN")
            .await
            .unwrap();
        let mut sink = std::pin::pin!(sink);
        sink.send(bytes::Bytes::from_static(b"9\n")).await.unwrap();
        sink.finish().await.unwrap();
        conn.execute("DELETE FROM pooler_observed", &[])
            .await
            .unwrap();
    }
    // A simple query's answer ends with its ReadyForQuery: after it nothing is outstanding,
    // so the counts must agree (an extended query's future may finish a moment before).
    conn.simple_query("").await.unwrap();
    assert_eq!(
        settled(&conn).await,
        TxStatus::Idle,
        "after COPY FROM STDIN"
    );
    drop(conn);

    type Leave = for<'a> fn(
        &'a tokio_postgres::Client,
    ) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'a>>;
    let ways: [(&str, Leave); 6] = [
        ("BEGIN over the simple protocol", |c| {
            Box::pin(async move {
                c.simple_query("BEGIN; INSERT INTO pooler_observed VALUES (1)")
                    .await
                    .unwrap();
            })
        }),
        ("BEGIN over the extended protocol", |c| {
            Box::pin(async move {
                c.execute("BEGIN", &[]).await.unwrap();
                c.execute("INSERT INTO pooler_observed VALUES (2)", &[])
                    .await
                    .unwrap();
            })
        }),
        ("a failed statement inside a transaction", |c| {
            Box::pin(async move {
                c.batch_execute("BEGIN; INSERT INTO pooler_observed VALUES (3)")
                    .await
                    .unwrap();
                assert!(c.batch_execute("SELECT 1/0").await.is_err());
            })
        }),
        ("COPY out and in inside a transaction", |c| {
            Box::pin(async move {
                use futures_util::{SinkExt as _, TryStreamExt as _};
                c.batch_execute("BEGIN").await.unwrap();
                let out = c
                    .copy_out("COPY (SELECT generate_series(1, 5000)) TO STDOUT")
                    .await
                    .unwrap();
                let chunks: Vec<_> = out.try_collect().await.unwrap();
                assert!(!chunks.is_empty());
                let sink = c.copy_in("COPY pooler_observed FROM STDIN").await.unwrap();
                let mut sink = std::pin::pin!(sink);
                sink.send(bytes::Bytes::from_static(b"4\n4\n"))
                    .await
                    .unwrap();
                sink.finish().await.unwrap();
            })
        }),
        ("a session full of notices", |c| {
            Box::pin(async move {
                c.batch_execute(
                    "BEGIN; INSERT INTO pooler_observed VALUES (5); \
                     DO $$ BEGIN FOR i IN 1..3000 LOOP RAISE NOTICE 'notice %', i; END LOOP; END $$",
                )
                .await
                .unwrap();
            })
        }),
        ("a large result split across reads", |c| {
            Box::pin(async move {
                c.batch_execute("BEGIN; INSERT INTO pooler_observed VALUES (6)")
                    .await
                    .unwrap();
                let rows = c
                    .query(
                        "SELECT repeat('x', 100000) FROM generate_series(1, 40)",
                        &[],
                    )
                    .await
                    .unwrap();
                assert_eq!(rows.len(), 40);
            })
        }),
    ];
    for (way, leave) in ways {
        let conn = take().await;
        leave(&conn).await;
        drop(conn);
        let conn = take().await;
        assert_eq!(Member::id(&conn), id, "{way}: the same connection, kept");
        assert!(
            !in_transaction(&conn).await,
            "{way}: the next user is outside"
        );
        assert_eq!(settled(&conn).await, TxStatus::Idle, "{way}");
        drop(conn);
    }

    // A Transaction dropped uncommitted queues its ROLLBACK: the status may still be
    // unsettled when the connection comes back, and the pool waits for the answer.
    for _ in 0..20 {
        let mut conn = take().await;
        let tx = conn.transaction().await.unwrap();
        tx.execute("INSERT INTO pooler_observed VALUES (7)", &[])
            .await
            .unwrap();
        drop(tx);
        drop(conn);
        let conn = take().await;
        assert!(!in_transaction(&conn).await, "after a dropped Transaction");
    }

    let committed: i64 = admin
        .query_one("SELECT count(*) FROM pooler_observed", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        committed, 0,
        "nothing done inside an abandoned transaction was committed"
    );
    pool.close(Shutdown::Graceful).await;
}

/// `prepare_cached`: a second prepare of the same query is a hit, the cache holds at most its
/// capacity, and a replaced connection starts with an empty cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_are_cached_per_connection() {
    let Some(url) = url().await else { return };
    let pool = started(
        PoolConfig::new("pg-statements", 1, 1),
        manager(&url, "pooler-statements").statement_cache(2),
    )
    .await;
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    for n in [1_i32, 2] {
        let statement = conn.prepare_cached("SELECT $1::int4 + 1").await.unwrap();
        let row = conn.query_one(&statement, &[&n]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), n + 1);
    }
    let stats = conn.statement_cache();
    assert_eq!((stats.size, stats.hits, stats.misses), (1, 1, 1));
    conn.prepare_cached("SELECT 2").await.unwrap();
    conn.prepare_cached("SELECT 3").await.unwrap();
    let stats = conn.statement_cache();
    assert_eq!(
        (stats.size, stats.capacity, stats.misses),
        (2, 2, 3),
        "bounded"
    );
    conn.prepare_cached("SELECT $1::int4 + 1").await.unwrap();
    assert_eq!(conn.statement_cache().misses, 4, "the oldest was dropped");
    // Query strings run on the unnamed statement keep their parameter types in a bound of
    // their own: however many, they push no prepared statement out.
    for n in 0..5_i32 {
        let sql = format!("SELECT $1::int4 + {n}");
        conn.query_one(sql.as_str(), &[&n]).await.unwrap();
    }
    let before = conn.statement_cache();
    conn.prepare_cached("SELECT $1::int4 + 1").await.unwrap();
    conn.prepare_cached("SELECT 3").await.unwrap();
    let after = conn.statement_cache();
    assert_eq!(
        (
            after.hits - before.hits,
            after.misses - before.misses,
            after.size
        ),
        (2, 0, 4),
        "the prepared statements stayed beside two descriptions"
    );
    Member::fail(conn);
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let stats = conn.statement_cache();
    assert_eq!(
        (stats.size, stats.hits, stats.misses),
        (0, 0, 0),
        "a new connection"
    );
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// `PgConnection::cancel_query` stops the running query (its caller sees `query_canceled`)
/// and leaves the connection usable; tokio-postgres's own `cancel_query` cannot, on a socket
/// it did not open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_query_is_cancelled() {
    let Some(url) = url().await else { return };
    let pool = started(
        PoolConfig::new("pg-cancel", 1, 1),
        manager(&url, "pooler-cancel"),
    )
    .await;
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let sleeping = conn.batch_execute("SELECT pg_sleep(60)");
    let cancelling = async {
        // Once the server runs it: its session is active on pg_sleep.
        let admin = admin(&url).await;
        eventually("the query runs", async || {
            admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE application_name = 'pooler-cancel' AND query LIKE 'SELECT pg_sleep%' \
                     AND state = 'active'",
                    &[],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
                == 1
        })
        .await;
        conn.cancel_query()
            .await
            .expect("the cancel request is sent");
    };
    // A bound far above the round trips involved, far below the sleep: failing it means the
    // query was not cancelled.
    let (slept, ()) = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(sleeping, cancelling)
    })
    .await
    .expect("the query was cancelled, not slept through");
    let e = slept.expect_err("the query was cancelled");
    assert_eq!(
        e.code(),
        Some(&tokio_postgres::error::SqlState::QUERY_CANCELED),
        "{e}"
    );
    assert_eq!(conn.simple_query("SELECT 1").await.unwrap().len(), 3);
    assert_eq!(settled(&conn).await, TxStatus::Idle);
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// `target_session_attrs` is honoured as tokio-postgres's `connect` honours it: the local
/// server is read-write, so `read-only` refuses it, naming why, and `read-write` takes it.
/// Hosts are tried in turn: the first (a closed port) fails and the second connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_kind_and_every_host_are_honoured() {
    let Some(url) = url().await else { return };
    let base: tokio_postgres::Config = url.parse().unwrap();
    let config = |attrs| {
        let mut config = tokio_postgres::Config::new();
        // A port nothing listens on first, then the server.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let port = base.get_ports().first().copied().unwrap_or(5432);
        config
            .host("127.0.0.1")
            .port(closed)
            .host("127.0.0.1")
            .port(port)
            .user(base.get_user().unwrap_or("postgres"))
            .dbname(base.get_dbname().unwrap_or("test"))
            .target_session_attrs(attrs);
        PgManager::from_config(config)
    };
    let pool = started(
        PoolConfig::new("pg-read-only", 0, 1),
        config(tokio_postgres::config::TargetSessionAttrs::ReadOnly),
    )
    .await;
    let e = pool
        .take_member(Duration::from_secs(2))
        .await
        .map(drop)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("is a read-write primary, and target_session_attrs asks for read-only"),
        "{e}"
    );
    pool.close(Shutdown::Graceful).await;

    let pool = started(
        PoolConfig::new("pg-read-write", 1, 1),
        config(tokio_postgres::config::TargetSessionAttrs::ReadWrite),
    )
    .await;
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert_eq!(conn.simple_query("SELECT 1").await.unwrap().len(), 3);
    assert_eq!(
        settled(&conn).await,
        TxStatus::Idle,
        "the session check's answer is counted"
    );
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// One deadline for a whole request: `until` hands what is left of it to the server, which
/// cancels the statement when it passes; the connection then serves the next user at once,
/// and a statement that ends in time is untouched. A use with a request cut at its deadline
/// tells an admission limiter it was late (a sign of overload, not a latency); the next
/// use, answered in time, measures the server again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_handed_to_the_server_cancels_the_statement() {
    let Some(url) = url().await else { return };
    let pool = started(
        PoolConfig::new("pg-until", 1, 1),
        PgManager::new(&url).unwrap(),
    )
    .await;
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let begun = tokio::time::Instant::now();
    let deadline = begun + Duration::from_millis(200);
    let e = conn
        .until(deadline, conn.batch_execute("SELECT pg_sleep(30)"))
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Some(&tokio_postgres::error::SqlState::QUERY_CANCELED),
        "{e}"
    );
    assert!(
        begun.elapsed() < Duration::from_secs(5),
        "{:?}",
        begun.elapsed()
    );
    let asked = PgManager::new(&url).unwrap();
    assert_eq!(
        pooler::Manager::latency(&asked, &conn),
        pooler::Latency::Late
    );
    let rows = conn
        .until(
            tokio::time::Instant::now() + Duration::from_secs(5),
            conn.query("SELECT 1", &[]),
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert!(
        matches!(
            pooler::Manager::latency(&asked, &conn),
            pooler::Latency::Measured(_)
        ),
        "on time again"
    );
    drop(conn);
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert_eq!(conn.simple_query("SELECT 1").await.unwrap().len(), 3);
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// A deadline as far as an `Instant` goes is accepted as "no deadline", not an overflow:
/// the request runs to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_at_the_end_of_time_is_no_deadline() {
    let Some(url) = url().await else { return };
    let pool = started(
        PoolConfig::new("pg-until-far", 1, 1),
        PgManager::new(&url).unwrap(),
    )
    .await;
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let mut far = tokio::time::Instant::now();
    let mut step = Duration::from_secs(1 << 62);
    while !step.is_zero() {
        if let Some(later) = far.checked_add(step) {
            far = later;
        }
        step /= 2;
    }
    let rows = conn
        .until(far, conn.simple_query("SELECT 1"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 3);
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// A request that ends otherwise once `until` has sent its cancel (in time after all) leaves
/// a cancel that may still land: the connection is replaced, never handed to the next user,
/// whose statement it could cancel. One whose cancel landed is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_that_may_still_land_never_reaches_the_next_user() {
    let Some(url) = url().await else { return };
    let pool = started(
        PoolConfig::new("pg-until-stray", 1, 1),
        PgManager::new(&url).unwrap(),
    )
    .await;
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let first = backend_pid(&conn).await;
    // The deadline has passed when the request is still pending; it then ends well.
    let late = async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok::<_, tokio_postgres::Error>(())
    };
    conn.until(tokio::time::Instant::now(), late).await.unwrap();
    drop(conn);
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let second = backend_pid(&conn).await;
    assert_ne!(
        second, first,
        "the connection a cancel may still reach was replaced"
    );
    // A cancel that lands ends with query_canceled: the connection is kept.
    let e = conn
        .until(
            tokio::time::Instant::now() + Duration::from_millis(100),
            conn.batch_execute("SELECT pg_sleep(30)"),
        )
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Some(&tokio_postgres::error::SqlState::QUERY_CANCELED)
    );
    drop(conn);
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        backend_pid(&conn).await,
        second,
        "a landed cancel leaves nothing behind"
    );
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// The admission signal: the server's time per statement during a use, not the use's
/// length — two 20 ms statements with 200 ms of the application's own work between them
/// measure about 20 ms, not 240; a use with no statement measures nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_use_measures_the_servers_time_per_statement() {
    let Some(url) = url().await else { return };
    let manager = PgManager::new(&url).unwrap();
    let pool = started(PoolConfig::new("pg-latency", 1, 1), manager.clone()).await;
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    // The pool's own statements (the connect's, `after_connect`'s) are not this use's.
    assert_eq!(manager.latency(&conn), pooler::Latency::Unmeasured);
    for _ in 0..2 {
        conn.batch_execute("SELECT pg_sleep(0.02)").await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let measured = manager.latency(&conn);
    let pooler::Latency::Measured(took) = measured else {
        panic!("two statements answered: {measured:?}");
    };
    assert!(
        took >= Duration::from_millis(20) && took < Duration::from_millis(120),
        "the server's time per statement, not the hold's 240 ms: {took:?}"
    );
    assert_eq!(manager.latency(&conn), pooler::Latency::Unmeasured);
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// What the pool itself runs on a connection — the reset on its return, a health check —
/// is not the next use's latency: a use that sends nothing measures nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pools_own_statements_are_not_the_next_uses_latency() {
    let Some(url) = url().await else { return };
    let manager = PgManager::new(&url).unwrap().recycle(Recycle::Always);
    let pool = started(PoolConfig::new("pg-latency-own", 1, 1), manager.clone()).await;
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    // Asked once, as a pool with admission asks at every return: from then on it is timed.
    assert_eq!(manager.latency(&conn), pooler::Latency::Unmeasured);
    conn.batch_execute("SET application_name = 'left'")
        .await
        .unwrap();
    assert!(matches!(
        manager.latency(&conn),
        pooler::Latency::Measured(_)
    ));
    // Given back: the pool resets the session (RESET ALL and the rest) before anyone else
    // takes it.
    drop(conn);
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert_eq!(manager.latency(&conn), pooler::Latency::Unmeasured);
    drop(conn);
    pool.close(Shutdown::Graceful).await;

    // Nor the check a take runs on a member idle past `idle_check_threshold` (zero here:
    // every take checks).
    let manager = PgManager::new(&url).unwrap().recycle(Recycle::Nothing);
    let config = PoolConfig::new("pg-latency-check", 1, 1)
        .to_builder()
        .idle_check_threshold(Some(Duration::ZERO))
        .build()
        .unwrap();
    let pool = started(config, manager.clone()).await;
    for _ in 0..2 {
        let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
        assert_eq!(manager.latency(&conn), pooler::Latency::Unmeasured);
        drop(conn);
    }
    pool.close(Shutdown::Graceful).await;
}

/// Right after an awaited statement returns, the transaction status reads the server's
/// answer to it — never `Unsettled` — whichever statement method ran it, on the connection
/// or in a transaction, and whether it succeeded or failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_is_settled_when_a_statement_returns() {
    use TxStatus::{Failed, Idle, InTransaction};
    let Some(url) = url().await else { return };
    let pool = started(
        PoolConfig::new("pg-settled", 1, 1),
        manager(&url, "pooler-settled"),
    )
    .await;
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    // What read otherwise than expected: how often, and the first reading.
    let mut misses: std::collections::BTreeMap<&str, (usize, TxStatus)> = Default::default();
    let mut check = |what: &'static str, read: TxStatus, expected: TxStatus| {
        if read != expected {
            misses.entry(what).or_insert((0, read)).0 += 1;
        }
    };
    let cached = conn.prepare_cached("SELECT $1::int4").await.unwrap();
    for round in 0..200_i32 {
        conn.query("SELECT 1", &[]).await.unwrap();
        check("query", conn.tx_status(), Idle);
        conn.query_one("SELECT $1::int4", &[&round]).await.unwrap();
        check("query_one", conn.tx_status(), Idle);
        conn.query_opt("SELECT $1::int4 WHERE false", &[&round])
            .await
            .unwrap();
        check("query_opt", conn.tx_status(), Idle);
        conn.execute("SELECT $1::int4", &[&round]).await.unwrap();
        check("execute", conn.tx_status(), Idle);
        conn.execute_raw("SELECT $1::int4", [round]).await.unwrap();
        check("execute_raw", conn.tx_status(), Idle);
        conn.query(&cached, &[&round]).await.unwrap();
        check("query (prepared)", conn.tx_status(), Idle);
        conn.batch_execute("SELECT 1").await.unwrap();
        check("batch_execute", conn.tx_status(), Idle);
        conn.simple_query("SELECT 1").await.unwrap();
        check("simple_query", conn.tx_status(), Idle);
        conn.execute("SELECT 1/0", &[]).await.unwrap_err();
        check("execute (failed)", conn.tx_status(), Idle);

        let tx = conn.transaction().await.unwrap();
        check("transaction", tx.tx_status(), InTransaction);
        tx.query_one("SELECT $1::int4", &[&round]).await.unwrap();
        check("transaction query_one", tx.tx_status(), InTransaction);
        tx.execute("SELECT 1", &[]).await.unwrap();
        check("transaction execute", tx.tx_status(), InTransaction);
        tx.batch_execute("SELECT 1").await.unwrap();
        check("transaction batch_execute", tx.tx_status(), InTransaction);
        if round % 2 == 0 {
            tx.commit().await.unwrap();
            check("commit", conn.tx_status(), Idle);
        } else {
            tx.query_one("SELECT 1/0", &[]).await.unwrap_err();
            check("transaction query_one (failed)", tx.tx_status(), Failed);
            tx.rollback().await.unwrap();
            check("rollback", conn.tx_status(), Idle);
        }
    }
    assert!(
        misses.is_empty(),
        "read right after return, of 200: {misses:?}"
    );
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// A connection that dies with an answer outstanding ends every wait for it: `settled`
/// returns `Unsettled` at once rather than wait for an answer that cannot come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_connection_ends_the_wait_for_its_answer() {
    let Some(url) = url().await else { return };
    let admin = admin(&url).await;
    let pool = started(
        PoolConfig::new("pg-settled-dead", 1, 1),
        manager(&url, "pooler-settled-dead"),
    )
    .await;
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let pid = backend_pid(&conn).await;
    // Sent, then given up on: its answer is owed.
    let sleeping = tokio::time::timeout(
        Duration::from_millis(200),
        conn.batch_execute("SELECT pg_sleep(30)"),
    )
    .await;
    assert!(sleeping.is_err(), "the sleep cannot end in 200 ms");
    assert_eq!(conn.tx_status(), TxStatus::Unsettled);
    let _: bool = admin
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap()
        .get(0);
    let status = tokio::time::timeout(Duration::from_secs(5), conn.settled()).await;
    assert_eq!(
        status.ok(),
        Some(TxStatus::Unsettled),
        "the wait ends with the connection"
    );
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// Two statements under way on one connection at once (pipelined): the first answered
/// returns at its answer, not once the other's is in too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_does_not_wait_for_another_under_way() {
    let Some(url) = url().await else { return };
    let pool = started(
        PoolConfig::new("pg-settled-pipelined", 1, 1),
        manager(&url, "pooler-settled-pipelined"),
    )
    .await;
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    // Its parameter types described first: the description is a round trip of its own.
    conn.query_one("SELECT $1::int4", &[&1_i32]).await.unwrap();
    let began = std::time::Instant::now();
    let quick = async {
        conn.query_one("SELECT $1::int4", &[&1_i32]).await.unwrap();
        began.elapsed()
    };
    let slow = async {
        conn.execute("SELECT pg_sleep(2)", &[]).await.unwrap();
        began.elapsed()
    };
    let (quick, slow) = tokio::join!(quick, slow);
    assert!(
        quick < Duration::from_secs(1) && slow >= Duration::from_secs(2),
        "the quick statement returned after {quick:?}, the slow one after {slow:?}"
    );
    assert_eq!(conn.tx_status(), TxStatus::Idle, "both answered");
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// A socket setting the system refuses (`keepalives_idle` of 10 hours: Linux takes at most
/// 32 767 s; in a URL, tokio-postgres reads `tcp_user_timeout` in seconds) made every
/// connect fail with "Invalid argument", naming no key. The manager
/// refuses it by its key when it is made, and a config handed over whole
/// (`PgManager::from_config`) has each start fail naming it; in range, the pool connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_setting_the_system_refuses_is_named_by_its_key() {
    let Some(url) = url().await else { return };
    let sep = if url.contains('?') { '&' } else { '?' };
    for (query, key) in [
        ("keepalives_idle=36000", "keepalives_idle"),
        ("keepalives_interval=40000", "keepalives_interval"),
        ("keepalives_retries=200", "keepalives_retries"),
        ("tcp_user_timeout=2147484", "tcp_user_timeout"),
    ] {
        let bad = format!("{url}{sep}{query}");
        match PgManager::new(&bad) {
            Err(pooler_postgres::PgError::Setting { key: named, .. }) => {
                assert_eq!(named, key, "{query}");
            }
            other => panic!("{query}: {other:?}"),
        }
        let pool = pooler::Pool::start_lazy(
            PoolConfig::new("pg-setting", 0, 1),
            PgManager::from_config(bad.parse().unwrap()),
        )
        .expect("the pool starts");
        let refused = pool
            .take_member(Duration::from_millis(500))
            .await
            .unwrap_err();
        assert!(
            refused.to_string().contains(key),
            "{query}: the start error names {key}: {refused}"
        );
        pool.close(Shutdown::Immediate).await;
    }
    let edges = format!(
        "{url}{sep}keepalives_idle=32767&keepalives_interval=1&keepalives_retries=127\
         &tcp_user_timeout=2147483"
    );
    let pool = started(
        PoolConfig::new("pg-setting-edges", 1, 1),
        PgManager::new(&edges).unwrap(),
    )
    .await;
    let conn = pool
        .take_member(Duration::from_secs(5))
        .await
        .expect("connects");
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}
