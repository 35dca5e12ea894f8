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

use pooler::{Member, PoolConfig, Shutdown};
use pooler_redis::RedisManager;
use pooler_redis::redis::{self, AsyncCommands};
use pooler_testkit::handover::{Session, poll_once_and_drop};
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

/// One action of user A's: a command and how it is sent.
type Action = (&'static [&'static str], Way);

fn action() -> impl Strategy<Value = Action> {
    (
        proptest::sample::select(COMMANDS),
        prop_oneof![
            4 => Just(Way::Sent),
            2 => Just(Way::Unsent),
            1 => Just(Way::Unread),
        ],
    )
}

/// The fuzzer's session; the writes are counted through a connection of its own, in
/// database `db` (where every user starts).
struct Redis {
    url: String,
    db: i64,
}

impl Session for Redis {
    type Manager = RedisManager;
    type Action = Action;

    async fn act(&self, conn: &mut Member<RedisManager>, &(words, way): &Action) {
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
        let conn = &mut **conn;
        match way {
            Way::Sent => drop(cmd.query_async::<redis::Value>(conn).await),
            Way::Unsent => poll_once_and_drop(cmd.query_async::<redis::Value>(conn)).await,
            Way::Unread => {
                let answer = cmd.query_async::<redis::Value>(conn);
                drop(tokio::time::timeout(Duration::from_millis(5), answer).await);
            }
        }
    }

    /// `CLIENT INFO`'s database, name, transaction and watched keys.
    async fn observe(&self, conn: &mut Member<RedisManager>) -> String {
        let info: String = redis::cmd("CLIENT")
            .arg("INFO")
            .query_async(&mut **conn)
            .await
            .expect("CLIENT INFO");
        let fields: Vec<_> = info
            .split_whitespace()
            .filter(|f| {
                ["db=", "name=", "multi=", "watch="]
                    .iter()
                    .any(|k| f.starts_with(k))
            })
            .collect();
        fields.join(" ")
    }

    /// A plain write and a transaction.
    async fn write(&self, conn: &mut Member<RedisManager>, mark: i64) -> bool {
        let key = format!("pooler:fz:b:{mark}");
        let wrote: redis::RedisResult<()> = conn.set(&key, "b").await;
        let done: redis::RedisResult<Option<(String,)>> = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg(format!("{key}:tx"))
            .arg("b")
            .query_async(&mut **conn)
            .await;
        wrote.is_ok() && matches!(done, Ok(Some(_)))
    }

    /// Both writes there, in database `db`, count as one.
    async fn count(&self, _: &mut Member<RedisManager>, mark: i64) -> i64 {
        let key = format!("pooler:fz:b:{mark}");
        let mut admin = common::admin(&self.url).await;
        let _: () = redis::cmd("SELECT")
            .arg(self.db)
            .query_async(&mut admin)
            .await
            .unwrap();
        let a: Option<String> = admin.get(&key).await.unwrap();
        let b: Option<String> = admin.get(format!("{key}:tx")).await.unwrap();
        let _: () = admin
            .del(&[key.clone(), format!("{key}:tx")])
            .await
            .unwrap();
        i64::from(a.is_some() && b.is_some())
    }
}

/// Run twice: without hooks, and with an `after_connect` hook that selects a database and
/// gives a name — a new connection's are then the hook's, and so must be the next user's.
#[test]
fn the_next_user_always_gets_a_connection_like_a_new_one() {
    connections_like_a_new_one(0, pooler::Hooks::default());
    let hooks =
        pooler::Hooks::default().after_connect(|conn: &mut pooler_redis::RedisConnection| {
            Box::pin(async move {
                let _: () = redis::pipe()
                    .cmd("SELECT")
                    .arg(5)
                    .ignore()
                    .cmd("CLIENT")
                    .arg("SETNAME")
                    .arg("hooked")
                    .ignore()
                    .query_async(conn)
                    .await?;
                Ok(())
            })
        });
    connections_like_a_new_one(5, hooks);
}

fn connections_like_a_new_one(db: i64, hooks: pooler::Hooks<pooler_redis::RedisConnection>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let Some(url) = rt.block_on(common::url()) else {
        return;
    };
    let session = Redis { url, db };
    let pool = rt.block_on(async {
        started(
            PoolConfig::new("redis-fuzz", 1, 1),
            RedisManager::new(session.url.as_str())
                .unwrap()
                .hooks(hooks),
        )
        .await
    });
    let outcome = pooler_testkit::fuzz_handover!(
        rt,
        &pool,
        &session,
        proptest::collection::vec(action(), 1..8)
    );
    rt.block_on(pool.close(Shutdown::Graceful));
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
