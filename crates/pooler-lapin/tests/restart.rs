//! A RabbitMQ broker of the test's own killed and started again under publishers. In a test
//! binary of its own: the broker's boot takes both cores for seconds, which the timing of
//! the fault tests beside it (`tests/faults.rs`) must not share.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

use std::collections::HashSet;
use std::time::Duration;

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Confirmation};
use pooler::{PoolConfig, Shutdown};
use pooler_lapin::AmqpManager;
use pooler_testkit::{scenarios, started};

/// A broker killed (SIGKILL, a RabbitMQ node of the test's own) and started again on its
/// port while publishers run (`pooler_testkit::scenarios::restarted_under_writers`):
/// channels on the killed connection are never handed out, the pool serves again by itself
/// once the broker listens, and every message the broker confirmed (persistent, to a
/// durable queue) is there after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_broker_is_served_again_and_loses_nothing_it_confirmed() {
    let Some(mut broker) = pooler_testkit::rabbitmq::RabbitMqServer::start() else {
        return;
    };
    const QUEUE: &str = "pooler-restart";
    let pool = started(
        PoolConfig::new("lapin-restart", 4, 4),
        AmqpManager::new(broker.url()),
    )
    .await;
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    pool.take_member(Duration::from_secs(5))
        .await
        .unwrap()
        .queue_declare(QUEUE.into(), durable, FieldTable::default())
        .await
        .unwrap();
    let seen = scenarios::restarted_under_writers(
        &pool,
        |channel, v| async move {
            // Confirm mode (the channel is replaced when it comes back): a write counts as
            // acknowledged only once the broker has taken it for its disk.
            if channel
                .confirm_select(ConfirmSelectOptions::default())
                .await
                .is_err()
            {
                return false;
            }
            let persistent = BasicProperties::default().with_delivery_mode(2);
            let published = channel
                .basic_publish(
                    "".into(),
                    QUEUE.into(),
                    BasicPublishOptions::default(),
                    &v.to_be_bytes(),
                    persistent,
                )
                .await;
            match published {
                Ok(confirm) => matches!(confirm.await, Ok(Confirmation::Ack(_))),
                Err(_) => false,
            }
        },
        |down| {
            if down {
                broker.kill();
            } else {
                broker.restart();
            }
        },
        async || {
            let channel = pool.take_member(Duration::from_secs(5)).await.unwrap();
            let mut stored = HashSet::new();
            while let Some(got) = channel
                .basic_get(QUEUE.into(), BasicGetOptions { no_ack: true })
                .await
                .unwrap()
            {
                let bytes: [u8; 8] = got.delivery.data.as_slice().try_into().unwrap();
                stored.insert(i64::from_be_bytes(bytes));
            }
            stored
        },
    )
    .await;
    eprintln!("a broker killed and started again: {seen:?}");
    scenarios::closes_within(&pool, Shutdown::Graceful, Duration::from_secs(3)).await;
}
