//! The same service on actix-web.
//!
//! actix-web runs its handlers on worker threads of its own, each with its own runtime; the
//! pool, started on the caller's runtime, is shared by all of them: its background tasks stay
//! on the runtime it was started on, and a take from any worker is served by the same FIFO
//! queue. The pool is app data ([`ThinData`]: a [`Pool`] handle is already a cheap `Clone`);
//! a refused take answers `503` with the pool's reason, as in the axum service.
//!
//! `cargo run -p pooler-web-example --bin actix` serves on 127.0.0.1:3001.

use std::future::Future;

use actix_web::web::{self, Query, ThinData};
use actix_web::{App, HttpResponse, HttpServer};
use pooler_postgres::Pool;
use pooler_postgres::pooler::Shutdown;

use crate::Operands;

/// Serves the routes over `pool` on `listener` until `shutdown` completes, lets the requests
/// in flight finish, then closes the pool gracefully.
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
    listener: std::net::TcpListener,
    pool: Pool,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app_pool = pool.clone();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(ThinData(app_pool.clone()))
            .route("/add", web::get().to(add))
            .route("/pool", web::get().to(utilization))
    })
    .workers(2)
    // The caller says when to stop; actix-web's own signal handling is off.
    .disable_signals()
    .listen(listener)?
    .run();
    let handle = server.handle();
    let mut server = std::pin::pin!(server);
    let served = tokio::select! {
        served = &mut server => served,
        () = shutdown => tokio::join!(handle.stop(true), server).1,
    };
    pool.close(Shutdown::Graceful).await;
    served
}

/// `GET /add?a=…&b=…`: the database adds them, on a pooled connection.
async fn add(ThinData(pool): ThinData<Pool>, Query(o): Query<Operands>) -> HttpResponse {
    let conn = match pool.take().await {
        Ok(conn) => conn,
        Err(e) => return HttpResponse::ServiceUnavailable().body(format!("{e}\n")),
    };
    match conn
        .query_one("SELECT $1::int4 + $2::int4", &[&o.a, &o.b])
        .await
    {
        Ok(row) => HttpResponse::Ok().body(format!("{}\n", row.get::<_, i32>(0))),
        Err(e) => HttpResponse::InternalServerError().body(format!("{e}\n")),
    }
}

/// `GET /pool`: the pool's counts.
async fn utilization(ThinData(pool): ThinData<Pool>) -> HttpResponse {
    HttpResponse::Ok().body(crate::counts(&pool))
}
