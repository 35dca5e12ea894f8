//! Metrics under the OpenTelemetry names: a test binary of its own, since the naming is chosen
//! for the whole process.
#![cfg(feature = "metrics")]

mod common;

use std::time::Duration;

use common::*;
use pooler::PoolConfig;
use pooler::metrics::Naming;

#[tokio::test(start_paused = true)]
async fn opentelemetry_names_follow_the_database_client_conventions() {
    pooler::metrics::set_naming(Naming::OpenTelemetry);
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let (pool, _probe) = pool_with(PoolConfig::new("p", 1, 1), Fake::default()).await;
    let held = pool.take_member(ms(10)).await.unwrap();
    let waiter = spawn_take(&pool, Duration::from_secs(1));
    settle().await;
    pool.publish_metrics();
    let scrape = handle.render();
    let pool_label = "db_client_connection_pool_name=\"p\"";
    for line in [
        format!("db_client_connection_count{{{pool_label},db_client_connection_state=\"used\"}} 1"),
        format!("db_client_connection_count{{{pool_label},db_client_connection_state=\"idle\"}} 0"),
        format!("db_client_connection_max{{{pool_label}}} 1"),
        format!("db_client_connection_idle_min{{{pool_label}}} 1"),
        format!("db_client_connection_pending_requests{{{pool_label}}} 1"),
        // What has no OpenTelemetry name keeps pooler's, with the same pool label.
        format!("pooler_starting{{{pool_label}}} 0"),
    ] {
        assert!(scrape.contains(&line), "no `{line}` in\n{scrape}");
    }
    assert!(waiter.await.unwrap().is_err(), "the waiter timed out");
    drop(held);
    let _ = pool.take_member(ms(10)).await.unwrap();
    pool.publish_metrics();
    let scrape = handle.render();
    for line in [
        format!("db_client_connection_timeouts{{{pool_label}}} 1"),
        format!("db_client_connection_wait_time_count{{{pool_label}}} 2"),
        format!("db_client_connection_use_time_count{{{pool_label}}} 2"),
        format!("db_client_connection_create_time_count{{{pool_label}}} 1"),
    ] {
        assert!(scrape.contains(&line), "no `{line}` in\n{scrape}");
    }
    assert!(!scrape.contains("pooler_in_use"), "{scrape}");
    assert!(
        !scrape.contains("pool=\""),
        "one label names the pool: {scrape}"
    );
}
