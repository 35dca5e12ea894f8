//! The differential hand-over fuzzer for RabbitMQ: user A runs a random sequence on a pooled
//! channel — publishes, `basic_get`s, acks (one or many), nacks, recovers, a prefetch limit,
//! transactional and confirm mode, a consumer — some awaited, some polled once and dropped;
//! then gives the channel back. User B, on the pool's one channel, must find it like a new
//! one (a publish is not in confirm mode, nor held in a transaction), every message A
//! published and did not ack must still be in the queue: a delivery A got and left unacked,
//! or one a consumer of A's holds, goes back to the queue, never to B's channel, where B's
//! `basic_ack(multiple)` would lose it; and no exclusive queue A declared is left on the
//! connection (the pool's second channel, held throughout, keeps the connection open when
//! A's channel is replaced). Live (`POOLER_AMQP_URL`).
//!
//! CI runs `POOLER_FUZZ_CASES` sequences (default 64); the documented long run is 10 000.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

use std::collections::BTreeSet;
use std::time::Duration;

use lapin::BasicProperties;
use lapin::Confirmation;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions,
    BasicQosOptions, BasicRecoverAsyncOptions, ConfirmSelectOptions, QueueDeclareOptions,
    QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use pooler::{Member, Pool, PoolConfig, Shutdown};
use pooler_lapin::{AmqpChannel, AmqpManager};
use pooler_testkit::handover::poll_once_and_drop;
use pooler_testkit::{Server, started};
use proptest::prelude::*;

mod common;

/// What user A does.
#[derive(Debug, Clone, Copy)]
enum Step {
    Publish,
    Get,
    /// Acks the last delivery got; `true`: every one up to it.
    Ack(bool),
    /// Nacks the last delivery got; `true`: back to the queue.
    Nack(bool),
    Recover,
    Qos(bool),
    TxSelect,
    TxCommit,
    TxRollback,
    ConfirmSelect,
    Consume,
    /// A passive `queue_declare`: of the test's queue, or of a missing one (refused by the
    /// broker closing the channel).
    Declare(bool),
    /// An exclusive queue declared: named by the broker (`true`) or by A.
    Exclusive(bool),
}

/// How a call is made.
#[derive(Debug, Clone, Copy)]
enum Way {
    Awaited,
    /// Polled once and dropped: it may or may not have reached the broker.
    Dropped,
}

fn action() -> impl Strategy<Value = (Step, Way)> {
    let step = prop_oneof![
        4 => Just(Step::Publish),
        3 => Just(Step::Get),
        2 => any::<bool>().prop_map(Step::Ack),
        1 => any::<bool>().prop_map(Step::Nack),
        1 => Just(Step::Recover),
        1 => any::<bool>().prop_map(Step::Qos),
        1 => Just(Step::TxSelect),
        1 => Just(Step::TxCommit),
        1 => Just(Step::TxRollback),
        1 => Just(Step::ConfirmSelect),
        1 => Just(Step::Consume),
        1 => any::<bool>().prop_map(Step::Declare),
        1 => any::<bool>().prop_map(Step::Exclusive),
    ];
    let way = prop_oneof![4 => Just(Way::Awaited), 1 => Just(Way::Dropped)];
    (step, way)
}

/// What the test knows of A's messages: those surely in the broker and not acked, and
/// those that may be. Whatever may have gone otherwise counts as "may be": a publish or an
/// ack dropped mid-way; anything once a transaction or confirm mode may be on, or once a
/// call failed (the broker may have closed the channel, dropping what followed); an ack of
/// many once deliveries the test did not see may be on the channel (a dropped `basic_get`,
/// a consumer).
#[derive(Debug, Default)]
struct Known {
    sure: BTreeSet<String>,
    maybe: BTreeSet<String>,
    /// Deliveries A got with acks on and has not settled, by tag.
    got: Vec<(u64, String)>,
    /// What is published or acked from now on may not count.
    uncertain: bool,
    /// Deliveries the test did not see may be on the channel.
    unseen: bool,
    published: usize,
    /// The exclusive queues A declared, or may have, whose names the test knows (one the
    /// broker names is known only from its answer).
    exclusive: Vec<String>,
    /// An argument every queue the broker names for A carries, so that one whose name the
    /// test did not learn can be listed; `unnamed` when there is such a queue.
    marker: String,
    unnamed: bool,
}

impl Known {
    fn unsure(&mut self, body: &str) {
        self.sure.remove(body);
        self.maybe.insert(body.to_owned());
    }

    /// A call ended: if it failed, the broker may have closed the channel.
    fn ended<T, E>(&mut self, done: Option<&Result<T, E>>) {
        if matches!(done, Some(Err(_))) {
            self.uncertain = true;
        }
    }
}

/// Runs `call` as `way` says; its output if it was awaited to the end.
async fn call<F: std::future::Future>(way: Way, call: F) -> Option<F::Output> {
    match way {
        Way::Awaited => Some(call.await),
        Way::Dropped => {
            poll_once_and_drop(call).await;
            None
        }
    }
}

async fn run(ch: &AmqpChannel, queue: &str, known: &mut Known, (step, way): (Step, Way)) {
    match step {
        Step::Publish => {
            known.published += 1;
            let body = format!("a{}", known.published);
            let sent = call(
                way,
                ch.basic_publish(
                    "".into(),
                    queue.into(),
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    BasicProperties::default(),
                ),
            )
            .await;
            if matches!(sent, Some(Ok(_))) && !known.uncertain {
                known.sure.insert(body);
            } else {
                known.maybe.insert(body);
            }
            known.ended(sent.as_ref());
        }
        Step::Get => {
            let got = call(way, ch.basic_get(queue.into(), BasicGetOptions::default())).await;
            match &got {
                Some(Ok(Some(message))) => {
                    let body = String::from_utf8_lossy(&message.delivery.data).into_owned();
                    known.got.push((message.delivery.delivery_tag, body));
                }
                Some(_) => {}
                None => known.unseen = true,
            }
            known.ended(got.as_ref());
        }
        Step::Ack(many) | Step::Nack(many) => {
            let Some(&(tag, _)) = known.got.last() else {
                return;
            };
            let (done, requeue, many) = match step {
                Step::Ack(_) => {
                    let options = BasicAckOptions { multiple: many };
                    (call(way, ch.basic_ack(tag, options)).await, false, many)
                }
                _ => {
                    let options = BasicNackOptions {
                        multiple: false,
                        requeue: many,
                    };
                    (call(way, ch.basic_nack(tag, options)).await, many, false)
                }
            };
            let settled = |t: u64| t == tag || (many && t < tag);
            let gone: Vec<String> = known
                .got
                .iter()
                .filter(|(t, _)| settled(*t))
                .map(|(_, body)| body.clone())
                .collect();
            known.got.retain(|(t, _)| !settled(*t));
            if many && known.unseen {
                // It may settle deliveries the test never saw.
                let all: Vec<String> = known.sure.iter().cloned().collect();
                all.iter().for_each(|body| known.unsure(body));
            }
            if !requeue {
                for body in gone {
                    if matches!(done, Some(Ok(()))) && !known.uncertain {
                        known.sure.remove(&body);
                        known.maybe.remove(&body);
                    } else {
                        known.unsure(&body);
                    }
                }
            }
            known.ended(done.as_ref());
        }
        Step::Recover => {
            let options = BasicRecoverAsyncOptions { requeue: true };
            let done = call(way, ch.basic_recover_async(options)).await;
            // Whether it reached the broker or not, the tags got so far are not used again.
            known.got.clear();
            known.ended(done.as_ref());
        }
        Step::Qos(global) => {
            let done = call(way, ch.basic_qos(1, BasicQosOptions { global })).await;
            known.ended(done.as_ref());
        }
        Step::TxSelect | Step::TxCommit | Step::TxRollback | Step::ConfirmSelect => {
            known.uncertain = true;
            let _ = match step {
                Step::TxSelect => call(way, ch.tx_select()).await,
                Step::TxCommit => call(way, ch.tx_commit()).await,
                Step::TxRollback => call(way, ch.tx_rollback()).await,
                _ => call(way, ch.confirm_select(ConfirmSelectOptions::default())).await,
            };
        }
        Step::Declare(missing) => {
            let name = if missing {
                format!("{queue}-missing")
            } else {
                queue.to_owned()
            };
            let options = QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            };
            let declare = ch.queue_declare(name.as_str().into(), options, FieldTable::default());
            let done = call(way, declare).await;
            if missing {
                known.uncertain = true;
            }
            known.ended(done.as_ref());
        }
        Step::Exclusive(by_the_broker) => {
            let name = if by_the_broker {
                String::new()
            } else {
                format!("{queue}-x{}", known.exclusive.len())
            };
            let options = QueueDeclareOptions {
                exclusive: true,
                ..QueueDeclareOptions::default()
            };
            let mut arguments = FieldTable::default();
            if by_the_broker {
                let marker = AMQPValue::LongString(known.marker.as_str().into());
                arguments.insert("x-pooler-case".into(), marker);
            }
            let declare = ch.queue_declare(name.as_str().into(), options, arguments);
            let done = call(way, declare).await;
            match &done {
                Some(Ok(declared)) => known.exclusive.push(declared.name().to_string()),
                _ if !by_the_broker => known.exclusive.push(name),
                _ => known.unnamed = true,
            }
            known.ended(done.as_ref());
        }
        Step::Consume => {
            // Acks on: what it is sent stays unacked on A's channel.
            known.unseen = true;
            let consumer = call(
                way,
                ch.basic_consume(
                    queue.into(),
                    "".into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                ),
            )
            .await;
            if let Some(consumer) = &consumer {
                known.ended(Some(consumer));
            }
        }
    }
}

/// B's turn: a publish not in confirm mode and not held in a transaction, and every message
/// still in the queue — drained (acks off). The bodies drained and B's confirmation.
async fn next_user(
    ch: &AmqpChannel,
    queue: &str,
    known: &Known,
    mine: &str,
) -> (Vec<String>, Option<Confirmation>) {
    let confirmation = match ch
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            mine.as_bytes(),
            BasicProperties::default(),
        )
        .await
    {
        Ok(confirm) => confirm.await.ok(),
        Err(_) => None,
    };
    let mut drained = Vec::new();
    let began = std::time::Instant::now();
    loop {
        match ch
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await
        {
            Ok(Some(message)) => {
                drained.push(String::from_utf8_lossy(&message.delivery.data).into_owned());
                continue;
            }
            Ok(None) => {}
            Err(e) => {
                drained.push(format!("error: {e}"));
                break;
            }
        }
        let all = known
            .sure
            .iter()
            .map(String::as_str)
            .chain([mine])
            .all(|body| drained.iter().any(|d| d == body));
        if all || began.elapsed() > Duration::from_secs(3) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (drained, confirmation)
}

/// The last cases run, numbered.
type History = std::cell::RefCell<std::collections::VecDeque<(u64, Vec<(Step, Way)>)>>;

/// Prints the last cases run if the case under way panics.
struct Reported<'a>(&'a History);

impl Drop for Reported<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("the last cases run: {:?}", self.0.borrow());
        }
    }
}

/// The pool's one channel, within 10 s; a failure says what the pool was doing.
async fn taken(pool: &Pool<AmqpManager>) -> pooler::Member<AmqpManager> {
    match pool.take_member(Duration::from_secs(10)).await {
        Ok(ch) => ch,
        Err(e) => panic!("{e:?}; the pool: {:?}", pool.utilization()),
    }
}

#[test]
fn the_next_user_gets_a_channel_like_a_new_one_and_no_message_is_lost() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let Some(url) = rt.block_on(Server::Amqp.url()) else {
        return;
    };
    let queue = format!("pooler-fuzz-{}", std::process::id());
    let (pool, held) = rt.block_on(async {
        let pool = started(PoolConfig::new("amqp-fuzz", 2, 2), AmqpManager::new(&url)).await;
        let held = pool.take_member(Duration::from_secs(5)).await.unwrap();
        held.queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
        (pool, held)
    });
    let mut runner = pooler_testkit::fuzz_runner!();
    let counter = std::sync::atomic::AtomicU64::new(0);
    // The last cases run: a pool left unable to serve fails the cases after the one that
    // left it so, which shrinking then cannot tell apart.
    let history: History = std::cell::RefCell::new(std::collections::VecDeque::new());
    let outcome = runner.run(&proptest::collection::vec(action(), 1..10), |actions| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let mine = format!("b{n}");
        {
            let mut history = history.borrow_mut();
            if history.len() == 3 {
                history.pop_front();
            }
            history.push_back((n, actions.clone()));
        }
        let _history = Reported(&history);
        let (known, drained, confirmation, outlived) = rt.block_on(async {
            let ch = taken(&pool).await;
            ch.queue_purge(queue.as_str().into(), QueuePurgeOptions::default())
                .await
                .expect("the queue is purged: the channel the last case left works");
            let mut known = Known {
                marker: format!("{queue}/{mine}/"),
                ..Known::default()
            };
            for a in &actions {
                run(&ch, &queue, &mut known, *a).await;
            }
            drop(ch);
            let ch = taken(&pool).await;
            let (drained, confirmation) = next_user(&ch, &queue, &known, &mine).await;
            // A channel that failed B is not handed to the next case.
            if confirmation != Some(Confirmation::NotRequested) {
                Member::fail(ch);
            }
            let mut outlived = Vec::new();
            for name in &known.exclusive {
                if common::exists(&url, name).await {
                    outlived.push(name.clone());
                }
            }
            if known.unnamed {
                outlived.extend(common::listed(&url, &known.marker).unwrap_or_default());
            }
            (known, drained, confirmation, outlived)
        });
        prop_assert!(
            outlived.is_empty(),
            "after {:?}: A's exclusive queues {:?} outlived A",
            actions,
            outlived
        );
        prop_assert_eq!(
            confirmation,
            Some(Confirmation::NotRequested),
            "after {:?} the next user's publish was not that of a new channel",
            actions
        );
        let lost: Vec<_> = known
            .sure
            .iter()
            .chain([&mine])
            .filter(|body| !drained.contains(body))
            .collect();
        prop_assert!(
            lost.is_empty(),
            "after {:?}: {:?} lost (drained {:?}; known {:?})",
            actions,
            lost,
            drained,
            known
        );
        let unique: BTreeSet<_> = drained.iter().collect();
        prop_assert_eq!(
            unique.len(),
            drained.len(),
            "after {:?}: a message twice: {:?}",
            actions,
            drained
        );
        let strange: Vec<_> = drained
            .iter()
            .filter(|d| **d != mine && !known.sure.contains(*d) && !known.maybe.contains(*d))
            .collect();
        prop_assert!(
            strange.is_empty(),
            "after {:?}: {:?} drained, acked by A (known {:?})",
            actions,
            strange,
            known
        );
        Ok(())
    });
    rt.block_on(async {
        let _ = held
            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
            .await;
        drop(held);
        pool.close(Shutdown::Graceful).await;
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
