//! A dead link, for real: RabbitMQ reached through a network namespace whose link the test
//! takes down, so packets vanish with no FIN and no RST (`pooler_testkit::blackhole`). With
//! the defaults (a heartbeat of 10 s asked for: docs/faults.md), a channel's request on the
//! dead link fails within the bound instead of hanging, a channel on it is never handed out
//! after, and the pool is full again once the link is back. Twenty to thirty seconds of real
//! time: the bound itself. Beside it, a frozen broker and a slow link (a broker killed
//! and started again is `tests/restart.rs`).
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

use std::time::{Duration, Instant};

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use pooler::{Member, PoolConfig, Shutdown};
use pooler_lapin::AmqpManager;
use pooler_testkit::blackhole::Blackhole;
use pooler_testkit::{Server, eventually, host_port, scenarios, started};
/// Two heartbeats of 10 s after the last frame heard, and the one under way, with a margin.
const BOUND: Duration = Duration::from_secs(35);

fn exclusive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        exclusive: true,
        ..QueueDeclareOptions::default()
    }
}

/// A request on `busy` once `silence()` has made the broker unreachable without a word fails
/// within [`BOUND`], not never: lapin gives the connection up after two silent heartbeats.
async fn fails_within_the_bound(
    busy: &pooler::Member<AmqpManager>,
    what: &str,
    silence: impl FnOnce(),
) {
    busy.queue_declare("".into(), exclusive(), FieldTable::default())
        .await
        .unwrap();
    silence();
    let began = Instant::now();
    let answer = tokio::time::timeout(
        BOUND + Duration::from_secs(30),
        busy.queue_declare("".into(), exclusive(), FieldTable::default()),
    )
    .await
    .expect("the request did not hang past the bound");
    let took = began.elapsed();
    eprintln!("a request {what} failed after {took:?}");
    assert!(answer.is_err(), "the request failed");
    assert!(took <= BOUND, "failed after {took:?}, past {BOUND:?}");
}

/// A close while the broker is unreachable: graceful and immediate both end at once — a
/// channel's and its connection's close do not wait to be heard — and leave no task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_with_the_broker_unreachable_ends_at_once_and_leaves_no_task() {
    scenarios::closes_across_a_dead_link(
        async |name| {
            let url = Server::Amqp.url().await?;
            let hole = Blackhole::in_front_of(&url)?;
            let via = url.replace(&host_port(&url), &hole.addr().to_string());
            Some((
                hole,
                started(PoolConfig::new(name, 2, 2), AmqpManager::new(via)).await,
            ))
        },
        async |channel| channel.basic_qos(8, Default::default()).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_on_a_dead_link_fails_within_two_heartbeats_and_no_channel_on_it_is_handed_out() {
    let Some(url) = Server::Amqp.url().await else {
        return;
    };
    let Some(hole) = Blackhole::in_front_of(&url) else {
        return;
    };
    let via = url.replace(&host_port(&url), &hole.addr().to_string());
    let pool = started(PoolConfig::new("amqp-dead", 2, 2), AmqpManager::new(via)).await;
    let busy = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let idle_id = Member::id(&pool.take_member(Duration::from_secs(5)).await.unwrap());
    fails_within_the_bound(&busy, "on a dead link", || hole.set_down(true)).await;
    drop(busy);
    // The free channel leaves the pool once its driver hears the connection's error, which
    // lapin hands the channels one by one: the failed request may be told a moment first.
    let heard = Instant::now();
    while pool.utilization().free_count > 0 {
        assert!(
            heard.elapsed() < Duration::from_secs(5),
            "the dead connection's free channel is still free"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Every channel was on the one dead connection: none is handed out while it is down.
    if let Ok(channel) = pool.take_member(Duration::from_millis(500)).await {
        assert_ne!(
            Member::id(&channel),
            idle_id,
            "the dead channel was handed out"
        );
        let declared = channel
            .queue_declare("".into(), exclusive(), FieldTable::default())
            .await;
        assert!(declared.is_err(), "a channel opened across a dead link");
    }
    hole.set_down(false);
    let back = Instant::now();
    let channel = pool
        .take_member(Duration::from_secs(30))
        .await
        .expect("a channel once the link is back");
    channel
        .queue_declare("".into(), exclusive(), FieldTable::default())
        .await
        .expect("a live channel once the link is back");
    eprintln!(
        "serving again {:?} after the link came back",
        back.elapsed()
    );
    drop(channel);
    pool.close(Shutdown::Immediate).await;
}

/// A frozen broker, staged from the wire (`Proxy::stall` both ways: the proxy's kernel still
/// acknowledges what fits in its buffers, so no TCP timeout fires — a stopped process, for a
/// broker the tests share and cannot SIGSTOP). The heartbeats decide, as for the blackhole:
/// a request in flight fails when lapin gives the connection up after two silent
/// heartbeats, no channel on it is handed out after, takes meanwhile end at their deadline;
/// a graceful close while frozen does not wait on the broker and leaves no task; thawed,
/// the pool serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_broker_fails_requests_within_two_heartbeats_and_holds_no_close() {
    use pooler_testkit::{Direction, Proxy};
    let Some(url) = Server::Amqp.url().await else {
        return;
    };
    let proxy = Proxy::start(&host_port(&url)).await;
    let via = url.replace(&host_port(&url), &proxy.addr().to_string());
    let freeze = |frozen: bool| {
        proxy.stall(Direction::ToServer, frozen);
        proxy.stall(Direction::ToClient, frozen);
    };
    let config = PoolConfig::new("amqp-frozen", 2, 2)
        .to_builder()
        .member_start_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let pool = started(config, AmqpManager::new(via.clone())).await;
    let busy = pool.take_member(Duration::from_secs(5)).await.unwrap();
    fails_within_the_bound(&busy, "to a frozen broker", || freeze(true)).await;
    drop(busy);
    // The connection is given up: its channels leave once their drivers hear its error,
    // which lapin hands out after it has failed the request (as on a dead link, above)...
    eventually("the frozen connection's channels leave", async || {
        pool.utilization().free_count == 0
    })
    .await;
    // ...and new ones cannot be opened while the broker stays frozen (their handshake
    // stalls past `member_start_timeout`).
    let took = scenarios::refused_while_down(&pool, Duration::from_secs(3)).await;
    eprintln!("a take while the broker is frozen ended after {took:?}");
    freeze(false);
    let back = Instant::now();
    let channel = pool
        .take_member(Duration::from_secs(30))
        .await
        .expect("a channel once the broker is thawed");
    channel
        .queue_declare("".into(), exclusive(), FieldTable::default())
        .await
        .expect("a live channel once the broker is thawed");
    eprintln!("serving again {:?} after the thaw", back.elapsed());
    drop(channel);
    pool.close(Shutdown::Immediate).await;

    // Frozen under a pool whose channels are all idle: the graceful close's channel and
    // connection closes go unanswered, and each stop gives up waiting after `GOODBYE`, long
    // before `member_shutdown` (30 s).
    let config = PoolConfig::new("amqp-frozen-close", 2, 2);
    let pool = started(config, AmqpManager::new(via)).await;
    drop(pool.take_member(Duration::from_secs(5)).await.unwrap());
    freeze(true);
    let took = scenarios::closes_within(&pool, Shutdown::Graceful, Duration::from_secs(2)).await;
    eprintln!("a graceful close with the broker frozen took {took:?}");
    freeze(false);
}

/// A slow link under load (every chunk waits 50 ms each way): 16 tasks share 4 channels for
/// 2 s, each take with a 300 ms deadline. Every take ends by its deadline, no request fails,
/// no channel is replaced for being slow, and once the link is fast a take is served at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_link_under_load_keeps_every_deadline_and_loses_nothing() {
    use pooler_testkit::{Proxy, scenarios};
    let Some(url) = Server::Amqp.url().await else {
        return;
    };
    let proxy = Proxy::start(&host_port(&url)).await;
    let via = url.replace(&host_port(&url), &proxy.addr().to_string());
    let pool = started(
        PoolConfig::new("amqp-slow-load", 4, 4),
        AmqpManager::new(via),
    )
    .await;
    let seen = scenarios::slow_link_under_load(&pool, &proxy, |channel| async move {
        channel
            .queue_declare("".into(), exclusive(), FieldTable::default())
            .await
            .is_ok()
    })
    .await;
    eprintln!("on a slow link under load: {seen:?}");
    scenarios::closes_within(&pool, Shutdown::Graceful, Duration::from_secs(3)).await;
}
