//! An axum service that takes PostgreSQL connections from a pooler pool in its handlers.
//!
//! The pool is the router's state (a [`Pool`] handle is a cheap `Clone`); each handler takes a
//! connection with [`Pool::take`], which waits in the pool's FIFO queue up to the pool's
//! `take_timeout`, uses it, and returns it by dropping the guard. A take the pool refuses
//! (a full queue, a timeout, a closed pool) answers `503 Service Unavailable` with the
//! pool's reason, so an overloaded database shows as fast refusals, not as requests piling
//! up. [`serve`] stops taking new requests on shutdown, lets those in flight finish, then
//! closes the pool gracefully: when it returns, no connection and no task of the pool is
//! left.
//!
//! `cargo run -p pooler-web-example` serves on 127.0.0.1:3000 against
//! `POOLER_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`):
//! `curl 'localhost:3000/add?a=2&b=3'`, `curl localhost:3000/pool`. The [`actix`] module
//! is the same service on actix-web.

use std::future::Future;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing::get;
use pooler_postgres::pooler::{PoolConfig, Shutdown, TakeError};
use pooler_postgres::{PgManager, Pool};
use tokio::net::TcpListener;

pub mod actix;

/// The example's pool: up to 8 connections, 2 opened at start, takers waiting at most 2 s
/// (and at most 256 of them: a burst beyond that is refused at once).
///
/// # Errors
///
/// When the URL cannot be parsed, or the config is refused.
///
/// # Cancel safety
///
/// As [`Pool::start`]: dropping the future closes the half-started pool.
pub async fn pool(url: &str) -> Result<Pool, Box<dyn std::error::Error + Send + Sync>> {
    let config = PoolConfig::builder("web")
        .init_count(2)
        .max_count(8)
        .queue_max(256)
        .take_timeout(std::time::Duration::from_secs(2))
        .build()?;
    Ok(Pool::start(config, PgManager::new(url)?).await?)
}

/// The routes, over `pool`.
pub fn app(pool: Pool) -> Router {
    Router::new()
        .route("/add", get(add))
        .route("/pool", get(utilization))
        .with_state(pool)
}

/// Serves `app(pool)` on `listener` until `shutdown` completes, lets the requests in flight
/// finish, then closes the pool gracefully.
///
/// # Errors
///
/// The server's I/O error.
///
/// # Cancel safety
///
/// Not cancel safe: dropping the future stops serving at once and leaves the pool to close
/// itself when its last handle goes.
pub async fn serve(
    listener: TcpListener,
    pool: Pool,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let served = axum::serve(listener, app(pool.clone()))
        .with_graceful_shutdown(shutdown)
        .await;
    pool.close(Shutdown::Graceful).await;
    served
}

/// The two numbers `/add` adds.
#[derive(serde::Deserialize)]
struct Operands {
    a: i32,
    b: i32,
}

/// A refused take, as the client sees it.
fn unavailable(e: &TakeError) -> (StatusCode, String) {
    (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n"))
}

/// `GET /add?a=…&b=…`: the database adds them, on a pooled connection.
async fn add(
    State(pool): State<Pool>,
    Query(Operands { a, b }): Query<Operands>,
) -> Result<String, (StatusCode, String)> {
    let conn = pool.take().await.map_err(|e| unavailable(&e))?;
    let row = conn
        .query_one("SELECT $1::int4 + $2::int4", &[&a, &b])
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")))?;
    let sum: i32 = row.get(0);
    Ok(format!("{sum}\n"))
}

/// `GET /pool`: the pool's counts.
async fn utilization(State(pool): State<Pool>) -> String {
    counts(&pool)
}

/// The pool's counts, as `/pool` says them.
fn counts(pool: &Pool) -> String {
    let u = pool.utilization();
    format!(
        "in_use={} free={} starting={} queued={} max={}\n",
        u.in_use_count, u.free_count, u.starting_count, u.queued_count, u.max_count
    )
}
