//! `SELECT 1` through a pool of 8 connections from 64 concurrent tasks, for a few seconds each,
//! over the simple protocol and the extended one, with each recycle mode.
//! `cargo run --release -p pooler-postgres --example throughput [URL]`
#![allow(clippy::disallowed_methods)] // an application spawns its own tasks

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pooler::{Pool, PoolConfig, Shutdown};
use pooler_postgres::{PgManager, Recycle};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into());
    for (recycle, extended) in [
        (Recycle::Nothing, false),
        (Recycle::Observed, false),
        (Recycle::Query, false),
        (Recycle::Nothing, true),
        (Recycle::Observed, true),
    ] {
        let config = PoolConfig::new("pg", 8, 8)
            .to_builder()
            .queue_max(64)
            .build()
            .unwrap();
        let pool = Pool::start(config, PgManager::new(&url)?.recycle(recycle.clone())).await?;
        let done = Arc::new(AtomicU64::new(0));
        let end = Instant::now() + Duration::from_secs(5);
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (pool, done) = (pool.clone(), done.clone());
                tokio::spawn(async move {
                    while Instant::now() < end {
                        let conn = pool
                            .take_member(Duration::from_secs(5))
                            .await
                            .expect("a connection");
                        if extended {
                            let statement =
                                conn.prepare_cached("SELECT 1").await.expect("a statement");
                            conn.query_one(&statement, &[]).await.expect("a row");
                        } else {
                            conn.simple_query("SELECT 1").await.expect("a result");
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await?;
        }
        println!(
            "SELECT 1 ({}), 64 tasks, pool of 8, recycle {recycle:?}: {:.0} queries/s",
            if extended {
                "prepare_cached + query_one"
            } else {
                "simple_query"
            },
            done.load(Ordering::Relaxed) as f64 / 5.0
        );
        pool.close(Shutdown::Graceful).await;
    }
    Ok(())
}
