//! Live tests against RabbitMQ (`POOLER_AMQP_URL`, default
//! `amqp://guest:guest@127.0.0.1:5672/%2f`). Unreachable, they skip with a notice, or fail
//! under `POOLER_REQUIRE_SERVICES=1`.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

use std::collections::HashSet;
use std::time::Duration;

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, BasicQosOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, ConnectionProperties};
use pooler::{Member, PoolConfig, Shutdown, TakeError};
use pooler_lapin::AmqpManager;
use pooler_testkit::{Proxy, Server, eventually, host_port, scenarios, started};

async fn url() -> Option<String> {
    Server::Amqp.url().await
}

/// The same URL through `proxy`.
fn through(url: &str, proxy: &Proxy) -> String {
    url.replace(&host_port(url), &proxy.addr().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_tasks_publish_and_get_back_their_own_messages() {
    let Some(url) = url().await else { return };
    let config = PoolConfig::builder("amqp-64")
        .init_count(8)
        .max_count(8)
        .queue_max(64)
        .build()
        .unwrap();
    let pool = started(config, AmqpManager::new(url)).await;
    let tasks: Vec<_> = (0..64u32)
        .map(|t| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let queue = format!("pooler-test-{}-{t}", std::process::id());
                let mut channels = HashSet::new();
                for n in 0..10u32 {
                    let channel = pool.take_member(Duration::from_secs(10)).await.unwrap();
                    channels.insert((Member::id(&channel), channel.id()));
                    channel
                        .queue_declare(
                            queue.as_str().into(),
                            QueueDeclareOptions {
                                auto_delete: false,
                                ..QueueDeclareOptions::default()
                            },
                            FieldTable::default(),
                        )
                        .await
                        .unwrap();
                    let body = format!("{t}:{n}");
                    channel
                        .basic_publish(
                            "".into(),
                            queue.as_str().into(),
                            BasicPublishOptions::default(),
                            body.as_bytes(),
                            BasicProperties::default(),
                        )
                        .await
                        .unwrap()
                        .await
                        .unwrap();
                    let got = loop {
                        let got = channel
                            .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
                            .await
                            .unwrap();
                        if let Some(got) = got {
                            break got;
                        }
                        tokio::task::yield_now().await;
                    };
                    assert_eq!(got.delivery.data, body.as_bytes(), "my own message");
                }
                let channel = pool.take_member(Duration::from_secs(10)).await.unwrap();
                channel
                    .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                    .await
                    .unwrap();
                channels
            })
        })
        .collect();
    let mut members = HashSet::new();
    for task in tasks {
        members.extend(
            task.await
                .expect("a task failed")
                .into_iter()
                .map(|(m, _)| m),
        );
    }
    assert!(
        members.len() <= 8,
        "{} members for a pool of 8",
        members.len()
    );
    pool.close(Shutdown::Graceful).await;
}

/// A passive declare of a queue that does not exist on `channel`: the broker refuses it by
/// closing the channel.
async fn refused(channel: &pooler_lapin::AmqpChannel) {
    let missing = format!("pooler-missing-{}", std::process::id());
    let options = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let declared = channel
        .queue_declare(missing.as_str().into(), options, FieldTable::default())
        .await;
    assert!(declared.is_err(), "the broker refused the passive declare");
}

/// The broker closes a channel (a passive declare of a queue that does not exist): that
/// member is replaced, never handed out again, and the others keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_the_broker_closed_is_replaced() {
    let Some(url) = url().await else { return };
    let pool = started(PoolConfig::new("amqp-closed", 2, 2), AmqpManager::new(url)).await;
    let channel = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let id = Member::id(&channel);
    refused(&channel).await;
    assert!(!channel.status().connected(), "and closed the channel");
    drop(channel);
    for _ in 0..5 {
        let both = [
            pool.take_member(Duration::from_secs(5)).await.unwrap(),
            pool.take_member(Duration::from_secs(5)).await.unwrap(),
        ];
        for channel in &both {
            assert_ne!(Member::id(channel), id, "the closed channel was handed out");
            assert!(channel.status().connected());
        }
    }
    pool.close(Shutdown::Graceful).await;
}

/// Closes, through `rabbitmqctl`, the broker's connection whose client named itself `name`.
/// False (with a notice) when `rabbitmqctl` cannot be run here, unless
/// `POOLER_REQUIRE_SERVICES=1`: then that is a failure.
fn broker_closes(name: &str) -> bool {
    let ctl = |args: &[&str]| {
        std::process::Command::new("rabbitmqctl")
            .args(args)
            .output()
    };
    let listed = match ctl(&["-q", "list_connections", "pid", "client_properties"]) {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        other => {
            if std::env::var("POOLER_REQUIRE_SERVICES").is_ok_and(|v| v == "1") {
                panic!("rabbitmqctl cannot list connections: {other:?}");
            }
            eprintln!("skipped: rabbitmqctl cannot list connections here ({other:?})");
            return false;
        }
    };
    let ours: Vec<&str> = listed
        .lines()
        .filter(|line| line.contains(name))
        .filter_map(|line| line.split('\t').next())
        .collect();
    assert_eq!(
        ours.len(),
        1,
        "one broker connection named {name}: {listed}"
    );
    let closed = ctl(&["-q", "close_connection", ours[0], "closed by a pooler test"])
        .expect("rabbitmqctl runs");
    assert!(closed.status.success(), "close_connection: {closed:?}");
    true
}

/// The broker closes the connection (`rabbitmqctl close_connection`, this test's connection
/// only): the holder's channel is dead and never handed out again, the free channel goes
/// without a take, and the pool refills on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_the_broker_closed_ends_every_channel_and_the_pool_refills() {
    let Some(url) = url().await else { return };
    let name = format!("pooler-broker-close-{}", std::process::id());
    let manager = AmqpManager::new(url)
        .properties(ConnectionProperties::default().with_connection_name(name.as_str().into()));
    let pool = started(PoolConfig::new("amqp-broker-close", 2, 4), manager.clone()).await;
    let held = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let before: HashSet<u64> = pool.stats().iter().map(|s| s.id).collect();
    assert_eq!(before.len(), 2);

    if !broker_closes(&name) {
        return;
    }
    eventually("the holder's channel is closed", async || {
        !held.status().connected()
    })
    .await;
    drop(held);
    eventually(
        "both channels are replaced on a new connection",
        async || {
            let stats = pool.stats();
            pool.utilization().free_count == 2 && stats.iter().all(|s| !before.contains(&s.id))
        },
    )
    .await;
    assert!(manager.connected().await, "a new connection is open");
    let both = [
        pool.take_member(Duration::from_secs(5)).await.unwrap(),
        pool.take_member(Duration::from_secs(5)).await.unwrap(),
    ];
    for channel in &both {
        assert!(
            !before.contains(&Member::id(channel)),
            "a dead channel was handed out"
        );
        channel
            .queue_declare(
                "".into(),
                QueueDeclareOptions {
                    exclusive: true,
                    auto_delete: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("the new channel works");
    }
    drop(both);
    pool.close(Shutdown::Graceful).await;
}

/// The connection is cut: takes fail fast while the broker is unreachable (once the broken
/// channels are found), and the pool refills by itself when it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_fails_fast_and_the_pool_refills() {
    let Some(url) = url().await else { return };
    let proxy = Proxy::start(&host_port(&url)).await;
    let config = scenarios::outage_config("amqp-outage");
    let manager = AmqpManager::new(through(&url, &proxy));
    let pool = started(config, manager.clone()).await;
    assert_eq!(pool.utilization().free_count, 2);
    assert!(manager.connected().await);

    proxy.set_open(false);
    proxy.cut();
    // The lost connection is every channel's death, free ones included: they go without a
    // take or a health check looking at them.
    eventually("the dead free channels are removed", async || {
        pool.stats().iter().all(|s| s.id > 2)
    })
    .await;
    // Their replacements cannot connect.
    let failed = eventually("a take fails fast", async || {
        matches!(pool.try_take_member(), Err(TakeError::Unavailable { .. }))
    });
    failed.await;

    proxy.set_open(true);
    eventually("the pool refills on a new connection", async || {
        pool.utilization().free_count == 2 && pool.stats().iter().all(|s| s.id > 2)
    })
    .await;
    let channel = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert!(channel.status().connected());
    drop(channel);
    pool.close(Shutdown::Graceful).await;
    assert!(
        !manager.connected().await,
        "a closed pool leaves no connection open"
    );
}

/// Channels put in confirm mode are replaced when they come back, and the last channel's stop
/// closes the connection. A start for the replacement may pick the connection up at the same
/// moment: the connection must not be closed under a channel being opened on it, so with no
/// fault anywhere every publish of every round is confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_replaced_on_every_return_is_never_handed_out_on_a_closing_connection() {
    use lapin::Confirmation;
    use lapin::options::ConfirmSelectOptions;
    let Some(url) = url().await else { return };
    let queue = format!("pooler-replaced-{}", std::process::id());
    for (init, max, tasks) in [(1, 1, 1), (2, 2, 2), (4, 4, 4)] {
        let config = PoolConfig::builder("amqp-replaced")
            .init_count(init)
            .max_count(max)
            .build()
            .unwrap();
        let pool = started(config, AmqpManager::new(url.clone())).await;
        pool.take_member(Duration::from_secs(5))
            .await
            .unwrap()
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        let rounds: Vec<_> = (0..tasks)
            .map(|_| {
                let (pool, queue) = (pool.clone(), queue.clone());
                tokio::spawn(async move {
                    let mut failed = Vec::new();
                    for round in 0..100 {
                        let channel = pool.take_member(Duration::from_secs(5)).await.unwrap();
                        let published = async {
                            channel
                                .confirm_select(ConfirmSelectOptions::default())
                                .await?;
                            channel
                                .basic_publish(
                                    "".into(),
                                    queue.as_str().into(),
                                    BasicPublishOptions::default(),
                                    b"x",
                                    BasicProperties::default(),
                                )
                                .await?
                                .await
                        };
                        match tokio::time::timeout(Duration::from_secs(10), published).await {
                            Ok(Ok(Confirmation::Ack(_))) => {}
                            other => failed.push(format!("round {round}: {other:?}")),
                        }
                    }
                    failed
                })
            })
            .collect();
        for task in rounds {
            let failed = task.await.unwrap();
            assert!(failed.is_empty(), "pool of {max}: {failed:?}");
        }
        pool.take_member(Duration::from_secs(5))
            .await
            .unwrap()
            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
            .await
            .unwrap();
        scenarios::closes_within(&pool, Shutdown::Graceful, Duration::from_secs(3)).await;
    }
}

/// A URI asking for a frame under the protocol's smallest (4 096 bytes) had every connect
/// refused by the broker ("frame too large: 504 bytes"), naming no key: each start now
/// fails naming `frame_max`, and the smallest frame allowed connects.
#[tokio::test]
async fn a_uri_asking_for_a_frame_under_the_protocols_minimum_is_named_by_its_key() {
    let Some(url) = url().await else { return };
    let sep = if url.contains('?') { '&' } else { '?' };
    let pool = pooler::Pool::start_lazy(
        PoolConfig::new("amqp-small-frame", 0, 1),
        AmqpManager::new(format!("{url}{sep}frame_max=504")),
    )
    .expect("the pool starts");
    let refused = pool.take_member(Duration::from_secs(2)).await.unwrap_err();
    assert!(
        refused.to_string().contains("`frame_max`"),
        "the start error names frame_max: {refused}"
    );
    pool.close(Shutdown::Immediate).await;
    let pool = started(
        PoolConfig::new("amqp-smallest-frame", 1, 1),
        AmqpManager::new(format!("{url}{sep}frame_max=4096")),
    )
    .await;
    let channel = pool.take_member(Duration::from_secs(5)).await.unwrap();
    assert!(channel.status().connected());
}

/// The broker closing one channel (a refused passive declare) is that channel's end only:
/// lapin reports it on the connection's event stream as it reports a lost connection, and
/// read as a loss it ended every channel on the connection and every one opened on it
/// after — on a current-thread runtime no replacement was ever handed out. The other channel
/// keeps serving, and the closed one's replacement comes at once.
#[tokio::test]
async fn a_channel_the_broker_closed_ends_no_other_channel() {
    let Some(url) = url().await else { return };
    let pool = started(
        PoolConfig::new("amqp-one-closed", 2, 2),
        AmqpManager::new(url),
    )
    .await;
    let held = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let kept = Member::id(&held);
    for round in 0..3 {
        let channel = pool.take_member(Duration::from_secs(5)).await.unwrap();
        refused(&channel).await;
        drop(channel);
        let replaced = pool.take_member(Duration::from_secs(5)).await;
        assert!(replaced.is_ok(), "round {round}: {replaced:?}");
        drop(replaced);
    }
    // The held channel is still open, and the pool hands it out again.
    assert!(held.status().connected());
    held.basic_qos(0, BasicQosOptions::default()).await.unwrap();
    drop(held);
    let both = [
        pool.take_member(Duration::from_secs(5)).await.unwrap(),
        pool.take_member(Duration::from_secs(5)).await.unwrap(),
    ];
    assert!(
        both.iter().any(|c| Member::id(c) == kept),
        "the held channel was replaced"
    );
    drop(both);
    pool.close(Shutdown::Graceful).await;
}
