//! diesel-async behind a PgBouncer of the test's own in transaction mode (Debian's
//! `pgbouncer`, in front of `POOLER_POSTGRES_URL`). diesel-async prepares named statements
//! and keeps them per connection, which a transaction pooler cannot serve across
//! transactions; what works there — `DieselManager::transaction_pooling` (the statement cache
//! off) and each use in a transaction, where the server connection stays the same — is what
//! the README says, and this test holds it to that. Without `pgbouncer` it skips with a notice, or fails under
//! `POOLER_REQUIRE_SERVICES=1`.
#![cfg(feature = "postgres")]
#![allow(clippy::disallowed_methods)] // tests spawn their own users

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pooler::{PoolConfig, Shutdown};
use pooler_diesel_async::DieselManager;
use pooler_diesel_async::diesel::sql_types::Integer;
use pooler_diesel_async::diesel::{IntoSql, QueryableByName, select, sql_query};
use pooler_diesel_async::diesel_async::SimpleAsyncConnection;
use pooler_diesel_async::diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use pooler_testkit::pgbouncer::{Mode, PgBouncer};
use pooler_testkit::pgwire::PipelineWatch;
use pooler_testkit::{Server, host_port, started};

#[derive(QueryableByName)]
struct Answer {
    #[diesel(sql_type = Integer)]
    n: i32,
}

/// The test server's URL (`POOLER_POSTGRES_URL`), or `None` (with a notice) to skip.
async fn postgres_url() -> Option<String> {
    Server::Postgres.url().await
}

/// 16 tasks over a pool of 8 run 50 transactions each through PgBouncer (4 server
/// connections), each with a raw parameterised statement and one of diesel's DSL, with
/// diesel-async's statement cache on (`cached`) or off (`transaction_pooling`); the failed
/// transactions.
async fn failures(bouncer: &PgBouncer, cached: bool) -> (usize, Option<String>) {
    let manager = DieselManager::<AsyncPgConnection>::new(bouncer.url("postgres"))
        .transaction_pooling(!cached);
    let config = PoolConfig::new("diesel-pgbouncer", 8, 8)
        .to_builder()
        .queue_max(16)
        .build()
        .unwrap();
    let pool = started(config, manager).await;
    let failed = Arc::new(AtomicUsize::new(0));
    let first = Arc::new(std::sync::Mutex::new(None::<String>));
    let tasks: Vec<_> = (0..16_i32)
        .map(|t| {
            let (pool, failed, first) = (pool.clone(), failed.clone(), first.clone());
            tokio::spawn(async move {
                for i in 0..50_i32 {
                    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
                    let n = t * 1000 + i;
                    let answer = conn
                        .transaction::<_, pooler_diesel_async::diesel::result::Error, _>(
                            async |conn| {
                                let raw = sql_query("SELECT $1::int4 + 1 AS n")
                                    .bind::<Integer, _>(n)
                                    .get_result::<Answer>(conn)
                                    .await?;
                                // A query of diesel's DSL: diesel-async prepares it once and
                                // keeps it (unless the cache is off).
                                let built = select(n.into_sql::<Integer>())
                                    .get_result::<i32>(conn)
                                    .await?;
                                Ok((raw, built))
                            },
                        )
                        .await;
                    match answer {
                        Ok((raw, built)) => assert_eq!((raw.n, built), (n + 1, n)),
                        Err(e) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            first.lock().unwrap().get_or_insert(e.to_string());
                        }
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    pool.close(Shutdown::Graceful).await;
    let first = first.lock().unwrap().take();
    (AtomicUsize::load(&failed, Ordering::Relaxed), first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_transaction_pooling_statements_in_transactions_with_the_cache_off_never_fail() {
    let Some(url) = postgres_url().await else {
        return;
    };
    let upstream = host_port(&url).parse().expect("an IP and a port");
    let Some(bouncer) = PgBouncer::start(upstream, Mode::Transaction, &["default_pool_size = 4"])
    else {
        return;
    };
    let (failed, first) = failures(&bouncer, false).await;
    assert_eq!(failed, 0, "of 800; the first: {first:?}");
    // With diesel-async's statement cache on, a statement kept from one transaction is
    // missing on the next one's server connection.
    let (failed, first) = failures(&bouncer, true).await;
    eprintln!("with the statement cache on: {failed} of 800 failed; the first: {first:?}");
    assert!(
        failed > 0,
        "the cache on was expected to fail behind transaction pooling"
    );
}

/// What a transaction pooler cannot serve is never sent: no message behind a sync point begun
/// outside a transaction and still unanswered (at its answer PgBouncer may hand the server
/// to another client, who then reads the rest as "unexpected message from server"). Watched
/// on the wire, without a pooler, so every instance is seen, not the rare one that lands:
/// a connection's setup (diesel-async sends its two `SET`s at once), the statement cache
/// turned off (each statement it held is closed), the pool's check and reset, and users'
/// transactions and simple statements outside one. (A statement of diesel's outside a
/// transaction cannot work behind a transaction pooler: it is prepared at one sync point and
/// run at the next, as README says.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_sent_behind_an_unanswered_sync_point_outside_a_transaction() {
    let Some(url) = postgres_url().await else {
        return;
    };
    let watch = PipelineWatch::start(&host_port(&url)).await;
    let watched = url.replacen(&host_port(&url), &watch.addr().to_string(), 1);
    let manager = DieselManager::<AsyncPgConnection>::new(watched).transaction_pooling(true);
    let config = PoolConfig::new("diesel-pipeline", 2, 2)
        .to_builder()
        .idle_check_threshold(Duration::ZERO)
        .build()
        .unwrap();
    let pool = started(config, manager).await;
    for n in 0..20_i32 {
        let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
        conn.batch_execute("SELECT 1").await.unwrap();
        conn.transaction::<_, pooler_diesel_async::diesel::result::Error, _>(async |conn| {
            conn.batch_execute("SELECT 1").await?;
            select(n.into_sql::<Integer>())
                .get_result::<i32>(conn)
                .await
        })
        .await
        .unwrap();
    }
    pool.close(Shutdown::Graceful).await;
    assert_eq!(watch.pipelined(), Vec::<String>::new());
}
