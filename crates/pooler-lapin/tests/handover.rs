//! The hand-over: whatever one user leaves on a channel — a publish or an ack the broker will
//! answer by closing the channel, transactional or confirm mode, a prefetch limit — never
//! reaches the next user; and a closed pool leaves no connection open. Live against RabbitMQ
//! (`POOLER_AMQP_URL`).
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

use std::time::Duration;

use lapin::BasicProperties;
use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions, QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::FieldTable;
use pooler::{Manager as _, Member, Pool, PoolConfig, Shutdown};
use pooler_lapin::{AmqpChannel, AmqpManager};
use pooler_testkit::{eventually, host_port, service};

const DEFAULT: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

async fn url() -> Option<String> {
    service("POOLER_AMQP_URL", DEFAULT, host_port).await
}

async fn one_of_one(url: &str, name: &str) -> pooler_lapin::Pool {
    Pool::start(PoolConfig::new(name, 1, 1), AmqpManager::new(url))
        .await
        .expect("pool starts")
}

async fn take(pool: &pooler_lapin::Pool) -> pooler_lapin::Member {
    pool.take_member(Duration::from_secs(5))
        .await
        .expect("a channel")
}

/// A queue of this test's own, empty.
async fn queue(channel: &AmqpChannel, name: &str) {
    channel
        .queue_declare(
            name.into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    channel
        .queue_purge(name.into(), QueuePurgeOptions::default())
        .await
        .unwrap();
}

/// The next user publishes to `queue` and gets the message back: the channel works for them.
async fn publish_and_get(channel: &AmqpChannel, queue: &str, body: &[u8]) {
    channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            body,
            BasicProperties::default(),
        )
        .await
        .expect("the next user's publish")
        .await
        .expect("its confirmation");
    let got = eventually_get(channel, queue).await;
    assert_eq!(got, body, "the next user's message arrived");
}

async fn eventually_get(channel: &AmqpChannel, queue: &str) -> Vec<u8> {
    for _ in 0..100 {
        let message = channel
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await
            .expect("the next user's basic_get");
        if let Some(message) = message {
            return message.delivery.data.clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the message never arrived");
}

/// A publish to a missing exchange, or an ack of a delivery tag the channel never had, is
/// answered by the broker closing the channel — after the user has given it back. The next
/// user never gets that channel: it is confirmed alive by one round trip first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_the_broker_reports_later_never_reaches_the_next_user() {
    let Some(url) = url().await else { return };
    let pool = one_of_one(&url, "amqp-later").await;
    let name = format!("pooler-later-{}", std::process::id());
    queue(&*take(&pool).await, &name).await;
    for round in 0..10 {
        let channel = take(&pool).await;
        let first = Member::id(&channel);
        if round % 2 == 0 {
            let _ = channel
                .basic_publish(
                    format!("pooler-missing-{}", std::process::id())
                        .as_str()
                        .into(),
                    "x".into(),
                    BasicPublishOptions::default(),
                    b"lost",
                    BasicProperties::default(),
                )
                .await;
        } else {
            let _ = channel.basic_ack(999_999, BasicAckOptions::default()).await;
        }
        drop(channel);
        let channel = take(&pool).await;
        assert_ne!(Member::id(&channel), first, "round {round}: replaced");
        publish_and_get(&channel, &name, format!("round {round}").as_bytes()).await;
    }
    let channel = take(&pool).await;
    channel
        .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    drop(channel);
    pool.close(Shutdown::Graceful).await;
}

/// Modes no method undoes — `tx_select` (the next user's publish would wait for a commit
/// that never comes), `confirm_select` — have the channel replaced; a prefetch limit is put
/// back on the same channel; a channel left as found costs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_modes_are_reset_or_the_channel_replaced() {
    let Some(url) = url().await else { return };
    let pool = one_of_one(&url, "amqp-modes").await;
    let name = format!("pooler-modes-{}", std::process::id());
    queue(&*take(&pool).await, &name).await;

    let channel = take(&pool).await;
    let first = Member::id(&channel);
    channel.tx_select().await.unwrap();
    assert!(
        pool.manager().is_broken(&channel),
        "transactional: replaced"
    );
    drop(channel);
    let channel = take(&pool).await;
    assert_ne!(Member::id(&channel), first);
    publish_and_get(&channel, &name, b"not held for a commit").await;
    drop(channel);

    let channel = take(&pool).await;
    let first = Member::id(&channel);
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    drop(channel);
    let channel = take(&pool).await;
    assert_ne!(Member::id(&channel), first, "confirm mode: replaced");
    drop(channel);

    let channel = take(&pool).await;
    let first = Member::id(&channel);
    channel
        .basic_qos(5, BasicQosOptions::default())
        .await
        .unwrap();
    assert!(pool.manager().needs_recycle(&channel));
    drop(channel);
    let channel = take(&pool).await;
    assert_eq!(
        Member::id(&channel),
        first,
        "prefetch put back, channel kept"
    );
    assert!(
        !pool.manager().needs_recycle(&channel),
        "a channel as found costs nothing"
    );
    channel
        .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    drop(channel);
    pool.close(Shutdown::Graceful).await;
}

/// Close means closed: after an immediate close with a channel in use, the channel's late
/// return leaves no AMQP connection open, even while a clone of the manager lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_immediate_close_leaves_no_connection_open_after_a_late_return() {
    let Some(url) = url().await else { return };
    let manager = AmqpManager::new(url);
    let pool = Pool::start(PoolConfig::new("amqp-immediate", 2, 2), manager.clone())
        .await
        .unwrap();
    let held = take(&pool).await;
    pool.close(Shutdown::Immediate).await;
    assert!(manager.connected().await, "still open: a channel is in use");
    drop(held);
    eventually("the connection is closed", async || {
        !manager.connected().await
    })
    .await;
}
