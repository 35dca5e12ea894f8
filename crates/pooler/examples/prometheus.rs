//! Wiring pooler's metrics to Prometheus: install the exporter's recorder before starting
//! pools, use a pool, and print a scrape. Run with `cargo run --example prometheus`.

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use pooler::{Manager, Member, MemberContext, Pool, PoolConfig, Shutdown};

struct Conns;

impl Manager for Conns {
    type Member = u64;
    type Error = std::io::Error;
    async fn start(&self, ctx: &MemberContext) -> Result<u64, Self::Error> {
        Ok(ctx.member_id())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // First the recorder, then the pools: a pool registers its metrics when it starts.
    let prometheus = PrometheusBuilder::new().install_recorder()?;

    let pool = Pool::start(PoolConfig::new("db", 1, 2), Conns).await?;
    let a = pool.take_member(Duration::from_millis(100)).await?;
    let b = pool.take_member(Duration::from_millis(100)).await?;
    let _refused = pool.try_take_member().unwrap_err(); // counted as at_capacity
    drop(a);
    Member::fail(b); // counted in pooler_killed_in_use_total{reason="failed"}
    tokio::time::sleep(Duration::from_millis(10)).await;

    // Take counts and gauges reach the recorder on the pool's 100 ms tick; a scrape that
    // must show everything up to now publishes first.
    pool.publish_metrics();
    print!("{}", prometheus.render());
    pool.close(Shutdown::Graceful).await;
    Ok(())
}
