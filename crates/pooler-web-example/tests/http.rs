//! The service under real HTTP requests, live against PostgreSQL (`POOLER_POSTGRES_URL`):
//! many concurrent requests share the pool's connections, and a graceful shutdown lets the
//! requests in flight finish, then closes the pool with nothing left behind.
#![allow(clippy::disallowed_methods)] // the test spawns its own clients

use std::net::SocketAddr;

use pooler_testkit::{Server, eventually};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// One HTTP/1.1 request on a connection of its own: the status code and the body.
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// Which version of the service a test serves.
#[derive(Clone, Copy, Debug)]
enum Framework {
    Axum,
    Actix,
}

/// 200 requests at once over a pool of at most 8 connections are all answered right; then a
/// graceful shutdown stops the server and closes the pool, leaving no task of it.
async fn concurrent_requests_share_the_pool_and_shutdown_closes_it(framework: Framework) {
    let Some(url) = Server::Postgres.url().await else {
        return;
    };
    let pool = pooler_web_example::pool(&url)
        .await
        .expect("the pool starts");
    let (stop, stopped) = oneshot::channel::<()>();
    let stopped = async {
        let _ = stopped.await;
    };
    let (addr, server) = match framework {
        Framework::Axum => {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let served = pooler_web_example::serve(listener, pool.clone(), stopped);
            (addr, tokio::spawn(served))
        }
        Framework::Actix => {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let served = pooler_web_example::actix::serve(listener, pool.clone(), stopped);
            (addr, tokio::spawn(served))
        }
    };

    let requests: Vec<_> = (0..200)
        .map(|i| tokio::spawn(async move { (i, get(addr, &format!("/add?a={i}&b=1")).await) }))
        .collect();
    for request in requests {
        let (i, (status, body)) = request.await.unwrap();
        assert_eq!(status, 200, "{framework:?}, request {i}: {body}");
        assert_eq!(
            body.trim(),
            (i + 1).to_string(),
            "{framework:?}, request {i}"
        );
    }
    // Every connection comes back (one whose statement's last message was still on its way
    // when its request ended is checked first, for a moment, while counted in use).
    eventually("every connection back in the pool", async || {
        let (status, body) = get(addr, "/pool").await;
        assert_eq!(status, 200, "{framework:?}: {body}");
        body.contains("in_use=0")
    })
    .await;
    let u = pool.utilization();
    assert!(u.free_count + u.in_use_count <= 8, "{u:?}");

    // Shutdown: the server stops, the pool closes, and nothing of it is left.
    stop.send(()).unwrap();
    server.await.unwrap().expect("the server ran");
    assert!(pool.is_closed(), "{framework:?}");
    assert_eq!(
        pool.live_tasks(),
        0,
        "{framework:?}: no task of the pool outlives the service"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_requests_share_the_pool_and_shutdown_closes_it() {
    concurrent_requests_share_the_pool_and_shutdown_closes_it(Framework::Axum).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actix_requests_share_the_pool_and_shutdown_closes_it() {
    concurrent_requests_share_the_pool_and_shutdown_closes_it(Framework::Actix).await;
}
