//! The hand-over: whatever one user leaves on a channel — a publish or an ack the broker will
//! answer by closing the channel, transactional or confirm mode, a prefetch limit — never
//! reaches the next user; and a closed pool leaves no connection open. Live against RabbitMQ
//! (`POOLER_AMQP_URL`).
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

use std::time::Duration;

use futures_util::StreamExt as _;
use lapin::BasicProperties;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions,
    BasicQosOptions, ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
    QueuePurgeOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use pooler::{Manager as _, Member, Pool, PoolConfig, Shutdown};
use pooler_lapin::{AmqpChannel, AmqpManager};
use pooler_testkit::handover::poll_once_and_drop;
use pooler_testkit::{Server, eventually, started};

mod common;

async fn url() -> Option<String> {
    Server::Amqp.url().await
}

async fn one_of_one(url: &str, name: &str) -> pooler_lapin::Pool {
    channels(url, name, 1, pooler::Hooks::default()).await
}

/// A pool of `size` channels (`name`) whose manager runs `hooks`.
async fn channels(
    url: &str,
    name: &str,
    size: usize,
    hooks: pooler::Hooks<AmqpChannel>,
) -> pooler_lapin::Pool {
    Pool::start(
        PoolConfig::new(name, size, size),
        AmqpManager::new(url).hooks(hooks),
    )
    .await
    .expect("pool starts")
}

/// The options that declare an exclusive queue.
fn exclusive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        exclusive: true,
        ..QueueDeclareOptions::default()
    }
}

/// The options of a passive declaration: it asks of a queue, and fails if there is none.
fn passive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    }
}

/// How many messages `queue` holds ready, asked on `channel` (a passive declaration).
async fn ready(channel: &AmqpChannel, queue: &str) -> lapin::Result<u32> {
    let declared = channel
        .queue_declare(queue.into(), passive(), FieldTable::default())
        .await?;
    Ok(declared.message_count())
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

/// `body` published to `queue` through the default exchange, and its confirmation waited
/// for.
async fn published(channel: &AmqpChannel, queue: &str, body: &[u8]) {
    let options = BasicPublishOptions::default();
    channel
        .basic_publish(
            "".into(),
            queue.into(),
            options,
            body,
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
}

/// A pool of one channel (`amqp-{test}`), and a queue of the test's own holding `bodies`.
async fn holding(url: &str, test: &str, bodies: &[&[u8]]) -> (pooler_lapin::Pool, String) {
    let pool = one_of_one(url, &format!("amqp-{test}")).await;
    let name = format!("pooler-{test}-{}", std::process::id());
    let channel = take(&pool).await;
    queue(&channel, &name).await;
    for body in bodies {
        published(&channel, &name, body).await;
    }
    drop(channel);
    (pool, name)
}

/// The next delivery from `queue`, acks on.
async fn eventually_got(channel: &AmqpChannel, queue: &str) -> lapin::message::BasicGetMessage {
    for _ in 0..100 {
        let options = BasicGetOptions { no_ack: false };
        if let Some(message) = channel
            .basic_get(queue.into(), options)
            .await
            .expect("basic_get")
        {
            return message;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no delivery");
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
    cleared(&pool, take(&pool).await, &name).await;
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
    cleared(&pool, channel, &name).await;
}

/// Close means closed: after an immediate close with a channel in use, the channel's late
/// return leaves no AMQP connection open, even while a clone of the manager lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_immediate_close_leaves_no_connection_open_after_a_late_return() {
    let Some(url) = url().await else { return };
    let manager = AmqpManager::new(url);
    let pool = started(PoolConfig::new("amqp-immediate", 2, 2), manager.clone()).await;
    let held = take(&pool).await;
    pool.close(Shutdown::Immediate).await;
    assert!(manager.connected().await, "still open: a channel is in use");
    drop(held);
    eventually("the connection is closed", async || {
        !manager.connected().await
    })
    .await;
}

/// A delivery one user got and did not ack never becomes the next user's: the next user's
/// `basic_ack(tag, multiple = true)` must not ack it (the message would be lost); it is back
/// in the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_left_unacked_goes_back_to_its_queue() {
    let Some(url) = url().await else { return };
    let (pool, name) = holding(&url, "unacked", &[b"first", b"second"]).await;
    // User 1 gets "first" and gives the channel back without acking it.
    let channel = take(&pool).await;
    assert_eq!(
        eventually_got(&channel, &name).await.delivery.data,
        b"first"
    );
    drop(channel);
    // User 2 gets the next one and acks everything up to it.
    let channel = take(&pool).await;
    let mut seen = Vec::new();
    for _ in 0..100 {
        if let Some(m) = channel
            .basic_get(name.as_str().into(), BasicGetOptions { no_ack: false })
            .await
            .unwrap()
        {
            seen.push(m.delivery.data.clone());
            channel
                .basic_ack(m.delivery.delivery_tag, BasicAckOptions { multiple: true })
                .await
                .unwrap();
            if seen.len() == 2 {
                break;
            }
        } else {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        vec![b"first".to_vec(), b"second".to_vec()],
        "user 1's delivery came back to the queue, and nothing was lost"
    );
    cleared(&pool, channel, &name).await;
}

/// A delivery's `Acker` may outlive its user's turn (handed to a task that acks later).
/// Acked on the channel the next user holds, its delivery tag — already given back to the
/// queue at the return — made the broker close that user's channel under them. The channel
/// a delivery was got on is replaced instead: the late ack fails for its own user, the next
/// user's channel stays open, and the message is back in its queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_ack_never_closes_the_next_users_channel() {
    let Some(url) = url().await else { return };
    let (pool, name) = holding(&url, "late-ack", &[b"late"]).await;
    let channel = take(&pool).await;
    let got = eventually_got(&channel, &name).await;
    drop(channel);
    let next = take(&pool).await;
    // The first user acks after the return, on the channel it got the delivery on.
    let late = got.delivery.acker.ack(BasicAckOptions::default()).await;
    // The broker's answer to a wrong ack would close the channel it reached: a round trip
    // on the next user's channel comes after it.
    next.basic_qos(0, BasicQosOptions::default())
        .await
        .unwrap_or_else(|e| panic!("the next user's channel was closed (late ack: {late:?}): {e}"));
    assert!(next.status().connected());
    assert_eq!(
        eventually_get(&next, &name).await,
        b"late",
        "back in its queue"
    );
    cleared(&pool, next, &name).await;
}

/// A `mandatory` message the broker returns to one user is never the next user's: their
/// `wait_for_confirms()` returns only their own returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returned_message_never_reaches_the_next_user() {
    let Some(url) = url().await else { return };
    let pool = one_of_one(&url, "amqp-returned").await;
    let channel = take(&pool).await;
    channel
        .basic_publish(
            "".into(),
            format!("pooler-nowhere-{}", std::process::id())
                .as_str()
                .into(),
            BasicPublishOptions {
                mandatory: true,
                ..BasicPublishOptions::default()
            },
            b"user 1's",
            BasicProperties::default(),
        )
        .await
        .unwrap();
    drop(channel);
    let channel = take(&pool).await;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let returned = channel.wait_for_confirms().await.unwrap();
    assert!(
        returned.is_empty(),
        "the next user saw {} returned message(s) of the last user's",
        returned.len()
    );
    drop(channel);
    pool.close(Shutdown::Graceful).await;
}

/// The raw channel is reached only through `untracked()`, and a channel reached so is
/// replaced when it comes back: transactional mode set through it never reaches the next
/// user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raw_channel_is_reached_only_untracked_and_replaced() {
    async fn helper(channel: &lapin::Channel) {
        channel.tx_select().await.unwrap();
    }
    let Some(url) = url().await else { return };
    let pool = one_of_one(&url, "amqp-untracked").await;
    let channel = take(&pool).await;
    let first = Member::id(&channel);
    helper(channel.untracked()).await;
    drop(channel);
    let channel = take(&pool).await;
    assert_ne!(Member::id(&channel), first, "replaced");
    drop(channel);
    pool.close(Shutdown::Graceful).await;
}

/// A channel the broker closes for a method its user left (a `tx_rollback` outside a
/// transaction, polled once and dropped), replaced when it comes back: the stop must not
/// close it from this side at the same moment — lapin then failed the connection's close,
/// the connection stayed open and kept the channel's unacked delivery from its queue (8 of
/// 200 rounds before the fix). Every round's message is in the queue for the next user.
#[tokio::test]
async fn a_channel_the_broker_is_closing_is_not_closed_over_it() {
    let Some(url) = url().await else { return };
    let pool = one_of_one(&url, "amqp-closing").await;
    let name = format!("pooler-closing-{}", std::process::id());
    queue(&*take(&pool).await, &name).await;
    for round in 0..100 {
        let channel = take(&pool).await;
        let body = format!("round {round}");
        // Replaced on return: a consumer (cancelled at once) is a mode no method undoes.
        drop(
            channel
                .basic_consume(
                    name.as_str().into(),
                    "".into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await,
        );
        channel
            .basic_qos(1, BasicQosOptions { global: true })
            .await
            .unwrap();
        channel
            .basic_publish(
                "".into(),
                name.as_str().into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                BasicProperties::default(),
            )
            .await
            .unwrap();
        if let Some(got) = channel
            .basic_get(name.as_str().into(), BasicGetOptions::default())
            .await
            .unwrap()
        {
            let requeue = BasicNackOptions {
                multiple: false,
                requeue: true,
            };
            channel
                .basic_nack(got.delivery.delivery_tag, requeue)
                .await
                .unwrap();
        }
        // Polled once and dropped: a get that may leave a delivery unacked, and a rollback
        // outside a transaction, which the broker refuses by closing the channel.
        poll_once_and_drop(channel.basic_get(name.as_str().into(), BasicGetOptions::default()))
            .await;
        poll_once_and_drop(channel.tx_rollback()).await;
        drop(channel);
        let channel = take(&pool).await;
        assert_eq!(
            eventually_get(&channel, &name).await,
            body.as_bytes(),
            "round {round}: the message left unacked is back in its queue"
        );
    }
    cleared(&pool, take(&pool).await, &name).await;
}

/// The test's queue `name` deleted through `channel`, which goes back, and `pool` closed.
async fn cleared(pool: &pooler_lapin::Pool, channel: pooler_lapin::Member, name: &str) {
    channel
        .queue_delete(name.into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    drop(channel);
    pool.close(Shutdown::Graceful).await;
}

/// An exclusive queue belongs to the connection, and the pool's connection outlives every
/// user: one a user declared (named by the user or by the broker) is gone when the next user
/// gets the channel — whether the channel came back clean, was replaced for a mode it was
/// left in, or was closed by the broker — so no user sees another's, and a pool that serves
/// requests declaring reply queues does not pile them up on the broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exclusive_queue_a_user_declared_is_gone_when_the_channel_is_back() {
    let Some(url) = url().await else { return };
    // Two channels, one held throughout: the last channel's stop closes the connection, and
    // with it every exclusive queue on it.
    let pool = channels(&url, "amqp-exclusive", 2, pooler::Hooks::default()).await;
    let held = take(&pool).await;
    let exclusive = exclusive();
    for (round, left) in ["clean", "a mode", "closed by the broker"]
        .into_iter()
        .enumerate()
    {
        let channel = take(&pool).await;
        let named = format!("pooler-exclusive-{}-{round}", std::process::id());
        channel
            .queue_declare(named.as_str().into(), exclusive, FieldTable::default())
            .await
            .unwrap();
        let by_the_broker = channel
            .queue_declare("".into(), exclusive, FieldTable::default())
            .await
            .unwrap()
            .name()
            .to_string();
        for name in [&named, &by_the_broker] {
            assert!(common::exists(&url, name).await, "{left}: {name} declared");
        }
        match left {
            "a mode" => channel
                .confirm_select(ConfirmSelectOptions::default())
                .await
                .unwrap(),
            "closed by the broker" => {
                let missing = channel
                    .queue_declare(
                        "pooler-no-such-queue".into(),
                        passive(),
                        FieldTable::default(),
                    )
                    .await;
                assert!(missing.is_err());
            }
            _ => {}
        }
        drop(channel);
        let next = take(&pool).await;
        for name in [&named, &by_the_broker] {
            assert!(
                !common::exists(&url, name).await,
                "{left}: {name} outlived its user"
            );
        }
        drop(next);
    }
    drop(held);
    pool.close(Shutdown::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exclusive_queue_the_broker_names_is_gone_even_when_nobody_read_its_name() {
    let Some(url) = url().await else { return };
    let pool = channels(&url, "amqp-exclusive-unnamed", 2, pooler::Hooks::default()).await;
    // Held throughout, so the connection (and every exclusive queue on it) stays open.
    let held = take(&pool).await;
    // A mode left after the dropped declaration has the channel replaced: its stop deletes.
    for how in [
        "dropped before its answer",
        "dropped before its answer, a mode left",
        "nowait",
        "dropped unsent",
    ] {
        let marker = format!("pooler-unnamed-{}-{how}", std::process::id());
        let mut arguments = FieldTable::default();
        arguments.insert(
            "x-pooler-test".into(),
            AMQPValue::LongString(marker.as_str().into()),
        );
        let options = QueueDeclareOptions {
            exclusive: true,
            nowait: how == "nowait",
            ..QueueDeclareOptions::default()
        };
        let channel = take(&pool).await;
        let declaring = channel.queue_declare("".into(), options, arguments);
        match how {
            "dropped before its answer" => poll_once_and_drop(declaring).await,
            "dropped before its answer, a mode left" => {
                poll_once_and_drop(declaring).await;
                channel
                    .confirm_select(ConfirmSelectOptions::default())
                    .await
                    .unwrap();
            }
            "nowait" => {
                let queue = declaring.await.unwrap();
                // The name is in the answer, which `nowait` would not wait for.
                assert!(queue.name().as_str().starts_with("amq.gen-"), "{queue:?}");
            }
            _ => drop(declaring),
        }
        if how != "dropped unsent" {
            eventually(&format!("{how}: the queue is declared"), async || {
                common::listed(&url, &marker).is_none_or(|names| !names.is_empty())
            })
            .await;
        }
        drop(channel);
        let next = take(&pool).await;
        if let Some(left) = common::listed(&url, &marker) {
            assert_eq!(
                left,
                Vec::<String>::new(),
                "{how}: the queue outlived its user"
            );
        }
        drop(next);
    }
    drop(held);
    pool.close(Shutdown::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exclusive_queue_the_hooks_declared_stays_when_a_user_declares_it_again() {
    let Some(url) = url().await else { return };
    let exclusive = exclusive();
    for hook in ["after_connect", "after_return"] {
        let set_up = format!("pooler-hooked-{}-{hook}", std::process::id());
        let name = set_up.clone();
        let hooks = match hook {
            "after_connect" => pooler::Hooks::default()
                .after_connect(move |channel| declared(channel, name.clone(), exclusive)),
            _ => pooler::Hooks::default()
                .after_return(move |channel| declared(channel, name.clone(), exclusive)),
        };
        let pool = channels(&url, "amqp-hooked", 1, hooks).await;
        let own = format!("pooler-hooked-own-{}", std::process::id());
        for round in 0..3 {
            let channel = take(&pool).await;
            // Code that declares what it uses before using it declares the set-up's queue
            // again (the first user of an `after_return` hook's pool declares it first).
            for name in [&set_up, &own] {
                channel
                    .queue_declare(name.as_str().into(), exclusive, FieldTable::default())
                    .await
                    .unwrap();
            }
            published(&channel, &set_up, b"kept").await;
            drop(channel);
            let next = take(&pool).await;
            assert!(
                !common::exists(&url, &own).await,
                "{hook}, round {round}: the user's own queue outlived its user"
            );
            let kept = ready(&next, &set_up)
                .await
                .unwrap_or_else(|e| panic!("{hook}, round {round}: the hook's queue: {e}"));
            // Deleted and declared again by the hook, it would be empty.
            if round > 0 || hook == "after_connect" {
                assert_eq!(
                    kept, 1,
                    "{hook}, round {round}: the queue the hook declared went with a user"
                );
            }
            next.queue_purge(set_up.as_str().into(), QueuePurgeOptions::default())
                .await
                .unwrap();
            drop(next);
        }
        pool.close(Shutdown::Graceful).await;
    }
}

/// A hook's declaration of `name`.
fn declared(
    channel: &mut AmqpChannel,
    name: String,
    options: QueueDeclareOptions,
) -> pooler::HookFuture<'_> {
    Box::pin(async move {
        channel
            .queue_declare(name.as_str().into(), options, FieldTable::default())
            .await?;
        Ok(())
    })
}

/// The prefetch limit an `after_connect` hook set is where every user starts: a user who
/// changed it, or only published (the return's confirming round trip is a `basic_qos`), hands
/// on the hook's limit, not none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prefetch_limit_the_hook_set_is_where_every_user_starts() {
    let Some(url) = url().await else { return };
    for global in [false, true] {
        let hooks = pooler::Hooks::default().after_connect(move |channel: &mut AmqpChannel| {
            Box::pin(async move {
                channel.basic_qos(3, BasicQosOptions { global }).await?;
                Ok(())
            })
        });
        let pool = channels(&url, "amqp-hooked-qos", 1, hooks).await;
        for left in [
            "a publish",
            "a limit of its own",
            "a limit in the other scope",
        ] {
            let name = format!("pooler-hooked-qos-{}-{global}", std::process::id());
            let channel = take(&pool).await;
            queue(&channel, &name).await;
            for n in 0..10u8 {
                published(&channel, &name, &[n]).await;
            }
            let scope = match left {
                "a limit of its own" => Some(global),
                "a limit in the other scope" => Some(!global),
                _ => None,
            };
            if let Some(global) = scope {
                channel
                    .basic_qos(50, BasicQosOptions { global })
                    .await
                    .unwrap();
            }
            drop(channel);
            // The next user consumes without acking: the limit holds the rest in the queue.
            let next = take(&pool).await;
            let mut consumer = next
                .basic_consume(
                    name.as_str().into(),
                    "".into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await
                .unwrap();
            for _ in 0..3 {
                let delivery = tokio::time::timeout(Duration::from_secs(5), consumer.next())
                    .await
                    .expect("a delivery");
                assert!(matches!(delivery, Some(Ok(_))), "{delivery:?}");
            }
            let held_back = ready(&next, &name).await.unwrap();
            assert_eq!(
                held_back, 7,
                "global {global}, after {left}: the hook's limit of 3"
            );
            next.queue_delete(name.as_str().into(), QueueDeleteOptions::default())
                .await
                .unwrap();
            drop(next);
        }
        pool.close(Shutdown::Graceful).await;
    }
}

/// A queue the broker names for a channel's set-up (a reply queue an `after_connect` hook
/// declares) is that channel's alone: it goes when the channel is replaced, and replacements
/// do not pile such queues up on the pool's connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_queue_the_hook_declared_goes_with_its_channel() {
    let Some(url) = url().await else { return };
    let marker = format!("pooler-hooked-reply-{}", std::process::id());
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-pooler-test".into(),
        AMQPValue::LongString(marker.as_str().into()),
    );
    let options = exclusive();
    let hooks = pooler::Hooks::default().after_connect(move |channel: &mut AmqpChannel| {
        let arguments = arguments.clone();
        Box::pin(async move {
            channel.queue_declare("".into(), options, arguments).await?;
            Ok(())
        })
    });
    let pool = channels(&url, "amqp-hooked-reply", 2, hooks).await;
    // Held throughout, so the connection (and every exclusive queue on it) stays open.
    let held = take(&pool).await;
    for round in 0..3 {
        let channel = take(&pool).await;
        // A mode no method undoes: the channel is replaced, and its replacement's hook
        // declares a reply queue of its own.
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        drop(channel);
        drop(take(&pool).await);
        if common::listed(&url, &marker).is_none() {
            break;
        }
        eventually(
            &format!("round {round}: one reply queue a channel"),
            async || common::listed(&url, &marker).is_none_or(|names| names.len() == 2),
        )
        .await;
    }
    drop(held);
    pool.close(Shutdown::Graceful).await;
}

/// A channel the manager's hook put in transactional mode (`tx_select`) is that mode's from
/// its start: what one user published and did not commit never becomes the next user's to
/// commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_the_last_user_left_open_is_not_the_next_users() {
    let Some(url) = url().await else { return };
    let hooks = pooler::Hooks::default().after_connect(|channel: &mut AmqpChannel| {
        Box::pin(async move {
            channel.tx_select().await?;
            Ok(())
        })
    });
    let pool = channels(&url, "amqp-hooked-tx", 1, hooks).await;
    let name = format!("pooler-hooked-tx-{}", std::process::id());
    let channel = take(&pool).await;
    queue(&channel, &name).await;
    published(&channel, &name, b"uncommitted").await;
    let id = channel.id();
    drop(channel);
    let next = take(&pool).await;
    assert_eq!(next.id(), id, "the same channel, kept");
    next.tx_commit().await.unwrap();
    let left = ready(&next, &name).await.unwrap();
    assert_eq!(left, 0, "the last user's publish was committed by the next");
    cleared(&pool, next, &name).await;
}

/// A channel the manager's hook put in confirm mode: the returned messages and confirms of
/// one user's publishes are not the next user's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_hooks_confirm_mode_a_returned_message_never_reaches_the_next_user() {
    let Some(url) = url().await else { return };
    let hooks = pooler::Hooks::default().after_connect(|channel: &mut AmqpChannel| {
        Box::pin(async move {
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await?;
            Ok(())
        })
    });
    let pool = channels(&url, "amqp-hooked-confirm", 1, hooks).await;
    let channel = take(&pool).await;
    let nowhere = format!("pooler-nowhere-{}", std::process::id());
    let mandatory = BasicPublishOptions {
        mandatory: true,
        ..BasicPublishOptions::default()
    };
    // The confirmation is not waited for: the user leaves it, and the returned message.
    drop(
        channel
            .basic_publish(
                "".into(),
                nowhere.as_str().into(),
                mandatory,
                b"user 1's",
                BasicProperties::default(),
            )
            .await
            .unwrap(),
    );
    let id = channel.id();
    drop(channel);
    let channel = take(&pool).await;
    assert_eq!(channel.id(), id, "the same channel, kept");
    let returned = channel.wait_for_confirms().await.unwrap();
    assert!(
        returned.is_empty(),
        "the next user saw {} returned message(s) of the last user's",
        returned.len()
    );
    drop(channel);
    pool.close(Shutdown::Graceful).await;
}
