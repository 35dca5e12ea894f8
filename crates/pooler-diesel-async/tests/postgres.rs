//! Live tests against PostgreSQL (`POOLER_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`). Unreachable, they skip with a notice, or fail
//! under `POOLER_REQUIRE_SERVICES=1`.
#![cfg(feature = "postgres")]
#![allow(clippy::disallowed_methods)] // tests spawn their own users

#[macro_use]
mod common;

use pooler_diesel_async::diesel_async::AsyncPgConnection;
use pooler_testkit::started;

live_tests!(
    AsyncPgConnection,
    pooler_testkit::Server::Postgres,
    session = "pg_backend_pid()::int8",
    sleep = "SELECT pg_sleep(1)",
    refused = "keepalives_idle=36000",
    key = "keepalives_idle"
);

/// The text SQL expression `expr` reads on `conn`.
async fn text(conn: &mut AsyncPgConnection, expr: &str) -> String {
    let read = select(sql::<pooler_diesel_async::diesel::sql_types::Text>(expr));
    read.get_result(conn).await.unwrap()
}

/// What a user set on the session, read by the next user: `application_name`.
async fn after_a_user_set_the_application_name(
    manager: DieselManager<AsyncPgConnection>,
) -> String {
    let config = PoolConfig::builder("diesel-reset")
        .init_count(1)
        .max_count(1)
        .build()
        .unwrap();
    let pool = started(config, manager).await;
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    pooler_diesel_async::diesel::sql_query("SET application_name = 'left-behind'")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let name = text(&mut conn, "current_setting('application_name')").await;
    drop(conn);
    pool.close(Shutdown::Graceful).await;
    name
}

/// By default every return resets the session; `on_return` replaces that reset with the
/// user's own statement (here one that ends the transaction and keeps the settings).
#[tokio::test]
async fn the_default_reset_clears_the_session_and_on_return_replaces_it() {
    let Some(url) = url().await else { return };
    let reset = after_a_user_set_the_application_name(DieselManager::new(url.as_str())).await;
    assert_eq!(reset, "", "the default reset");
    let kept = after_a_user_set_the_application_name(
        DieselManager::new(url.as_str()).on_return("ROLLBACK"),
    )
    .await;
    assert_eq!(
        kept, "left-behind",
        "on_return(\"ROLLBACK\") keeps the settings"
    );
}

#[tokio::test]
async fn connections_open_the_way_given_and_run_the_hooks() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let Some(url) = url().await else { return };
    let opened = Arc::new(AtomicUsize::new(0));
    let counted = opened.clone();
    let manager = DieselManager::<AsyncPgConnection>::new("postgres://nowhere.invalid/none")
        .establish_with(move |_ignored| {
            counted.fetch_add(1, Ordering::Relaxed);
            let url = url.clone();
            async move { AsyncPgConnection::establish(&url).await }
        })
        .hooks(
            pooler::Hooks::default().after_connect(|conn: &mut AsyncPgConnection| {
                Box::pin(async move {
                    pooler_diesel_async::diesel::sql_query("SET application_name = 'hooked'")
                        .execute(conn)
                        .await?;
                    Ok(())
                })
            }),
        );
    let config = PoolConfig::builder("diesel-hooks")
        .init_count(2)
        .max_count(2)
        .build()
        .unwrap();
    let pool = started(config, manager).await;
    assert_eq!(AtomicUsize::load(&opened, Ordering::Relaxed), 2);
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let name = text(&mut conn, "current_setting('application_name')").await;
    assert_eq!(name, "hooked");
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// Session state a user sets (`SET search_path`, `SET ROLE`, a custom setting) is not the
/// next user's: by default every return resets the session.
#[tokio::test]
async fn the_next_user_starts_from_a_fresh_session() {
    use pooler_diesel_async::diesel::sql_query;
    let Some(url) = url().await else { return };
    let mut admin = AsyncPgConnection::establish(&url).await.unwrap();
    sql_query(
        "DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pooler_tenant') \
         THEN CREATE ROLE pooler_tenant NOLOGIN; END IF; END$$",
    )
    .execute(&mut admin)
    .await
    .unwrap();
    let probe = "current_user || ',' || current_setting('search_path') || ',' || \
                 coalesce(current_setting('app.tenant', true), '')";
    let fresh = text(&mut admin, probe).await;
    let pool = pool(&url, 1).await;
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    for statement in [
        "SET search_path TO pg_catalog",
        "SET ROLE pooler_tenant",
        "SELECT set_config('app.tenant', '7', false)",
    ] {
        sql_query(statement).execute(&mut *conn).await.unwrap();
    }
    drop(conn);
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let seen = text(&mut conn, probe).await;
    assert_eq!(seen, fresh);
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// A connection the server ends while it is free (`pg_terminate_backend`: an administrator,
/// a failover, `idle_session_timeout`) leaves the pool as soon as its socket closes, before
/// anyone takes it: the pool drives the connection itself and sees it end. The next take
/// gets a new session that works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_the_server_ends_while_free_leaves_the_pool_and_is_never_handed_out() {
    use pooler_diesel_async::diesel::sql_query;
    use std::time::Instant;
    let Some(url) = url().await else { return };
    let pool = pool(&url, 1).await;
    let (id, pid) = {
        let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
        (pooler::Member::id(&conn), session(&mut conn).await)
    };
    let mut admin = AsyncPgConnection::establish(&url).await.unwrap();
    sql_query(format!("SELECT pg_terminate_backend({pid})"))
        .execute(&mut admin)
        .await
        .unwrap();
    // The socket's close reaches the pool within milliseconds; the bound is for a busy CI.
    let began = Instant::now();
    while pool.stats().iter().any(|m| m.id == id) {
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "the ended connection is still in the pool after 5 s: {:?}",
            pool.stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert_ne!(
        pooler::Member::id(&conn),
        id,
        "the ended connection was handed out"
    );
    assert_ne!(session(&mut conn).await, pid);
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}
