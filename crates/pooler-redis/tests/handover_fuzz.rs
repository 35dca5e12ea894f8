//! The differential hand-over fuzzer for Redis: user A runs a random sequence of commands —
//! transactions begun, ended or not, keys watched, databases selected, names set, blocking
//! reads, pipelines — some cancelled before they were sent, some after; then gives the
//! connection back. User B's connection must look like a new one (`CLIENT INFO`: database,
//! name, transaction, watched keys) and B's write and transaction must land. Live
//! (`POOLER_REDIS_URL`).
//!
//! CI runs `POOLER_FUZZ_CASES` sequences (default 64); the documented long run is 10 000.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::time::Duration;

use pooler::{PoolConfig, Shutdown};
use pooler_redis::redis::{self, AsyncCommands};
use pooler_redis::{RedisConnection, RedisManager};
use pooler_testkit::started;
use proptest::prelude::*;

/// How a command is sent.
#[derive(Debug, Clone, Copy)]
enum Way {
    /// Awaited.
    Sent,
    /// Polled once and dropped: redis-rs never sends it.
    Unsent,
    /// Cut short by a deadline after it was sent: its answer left unread.
    Unread,
}

const COMMANDS: &[&[&str]] = &[
    &["PING"],
    &["MULTI"],
    &["EXEC"],
    &["DISCARD"],
    &["WATCH", "pooler:fz:w"],
    &["UNWATCH"],
    &["SELECT", "0"],
    &["SELECT", "3"],
    &["CLIENT", "SETNAME", "someone"],
    &["SET", "pooler:fz:a", "1"],
    &["GET", "pooler:fz:a"],
    &["BLPOP", "pooler:fz:never", "0"],
];

fn action() -> impl Strategy<Value = (usize, Way)> {
    (
        0..COMMANDS.len(),
        prop_oneof![
            4 => Just(Way::Sent),
            2 => Just(Way::Unsent),
            1 => Just(Way::Unread),
        ],
    )
}

async fn run(conn: &mut RedisConnection, (i, way): (usize, Way)) {
    let words = COMMANDS[i];
    let mut cmd = redis::cmd(words[0]);
    for w in &words[1..] {
        cmd.arg(*w);
    }
    // A blocking read is only ever cut short.
    let way = if words[0] == "BLPOP" && matches!(way, Way::Sent) {
        Way::Unread
    } else {
        way
    };
    match way {
        Way::Sent => drop(cmd.query_async::<redis::Value>(conn).await),
        Way::Unsent => {
            let mut answer = std::pin::pin!(cmd.query_async::<redis::Value>(conn));
            std::future::poll_fn(|cx| {
                let _ = answer.as_mut().poll(cx);
                std::task::Poll::Ready(())
            })
            .await;
        }
        Way::Unread => {
            drop(
                tokio::time::timeout(
                    Duration::from_millis(5),
                    cmd.query_async::<redis::Value>(conn),
                )
                .await,
            );
        }
    }
}

/// What the next user can see of the connection: `CLIENT INFO`'s database, name,
/// transaction and watched keys.
async fn fingerprint(conn: &mut RedisConnection) -> Vec<String> {
    let info: String = redis::cmd("CLIENT")
        .arg("INFO")
        .query_async(conn)
        .await
        .expect("CLIENT INFO");
    info.split_whitespace()
        .filter(|f| {
            ["db=", "name=", "multi=", "watch="]
                .iter()
                .any(|k| f.starts_with(k))
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_next_user_always_gets_a_connection_like_a_new_one() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let Some(url) = rt.block_on(common::url()) else {
        return;
    };
    let (pool, fresh) = rt.block_on(async {
        let pool = started(
            PoolConfig::new("redis-fuzz", 1, 1),
            RedisManager::new(url.as_str()).unwrap(),
        )
        .await;
        let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
        let fresh = fingerprint(&mut conn).await;
        drop(conn);
        (pool, fresh)
    });
    let mut runner = pooler_testkit::fuzz_runner!();
    let counter = std::sync::atomic::AtomicU64::new(0);
    let outcome = runner.run(&proptest::collection::vec(action(), 1..8), |actions| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let key = format!("pooler:fz:b:{n}");
        let (seen, wrote, landed) = rt.block_on(async {
            let mut admin = common::admin(&url).await;
            let mut conn = pool.take_member(Duration::from_secs(10)).await.unwrap();
            for a in &actions {
                run(&mut conn, *a).await;
            }
            drop(conn);
            let mut conn = pool.take_member(Duration::from_secs(10)).await.unwrap();
            let seen = fingerprint(&mut conn).await;
            // A plain write, and a transaction, both in database 0.
            let wrote: redis::RedisResult<()> = conn.set(&key, "b").await;
            let done: redis::RedisResult<Option<(String,)>> = redis::pipe()
                .atomic()
                .cmd("SET")
                .arg(format!("{key}:tx"))
                .arg("b")
                .query_async(&mut *conn)
                .await;
            let ok = wrote.is_ok() && matches!(done, Ok(Some(_)));
            if seen != fresh || !ok {
                pooler::Member::fail(conn);
            } else {
                drop(conn);
            }
            let a: Option<String> = admin.get(&key).await.unwrap();
            let b: Option<String> = admin.get(format!("{key}:tx")).await.unwrap();
            let _: () = admin
                .del(&[key.clone(), format!("{key}:tx")])
                .await
                .unwrap();
            (seen, ok, a.is_some() && b.is_some())
        });
        prop_assert_eq!(
            &seen,
            &fresh,
            "after {:?} the next user's connection differs from a new one",
            actions
        );
        prop_assert!(wrote, "after {:?} the next user's commands failed", actions);
        prop_assert!(
            landed,
            "after {:?} the next user's writes did not land in db 0",
            actions
        );
        Ok(())
    });
    rt.block_on(pool.close(Shutdown::Graceful));
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
