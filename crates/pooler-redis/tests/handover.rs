//! The hand-over: whatever one user leaves on a connection — a blocking command cancelled,
//! an open `MULTI`, watched keys, another database, another name — never reaches the next
//! user. Live against Redis (`POOLER_REDIS_URL`). Commands go through the pool's guard as
//! deadpool-redis users write them: `query_async(&mut conn)`.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

mod common;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use common::{admin, url};
use pooler::{Manager as _, Member, Pool, PoolConfig, Shutdown};
use pooler_redis::redis::{self, AsyncCommands};
use pooler_redis::{RedisConnection, RedisManager};
use pooler_testkit::handover::poll_once_and_drop;
use pooler_testkit::started;

async fn one_of_one(url: &str, name: &str) -> pooler_redis::Pool {
    Pool::start(
        PoolConfig::new(name, 1, 1),
        RedisManager::new(url).unwrap().client_name(name),
    )
    .await
    .expect("pool starts")
}

async fn take(pool: &pooler_redis::Pool) -> pooler_redis::Member {
    pool.take_member(Duration::from_secs(5))
        .await
        .expect("a connection")
}

/// A `BLPOP k 0` cancelled by a timeout keeps the connection blocked on the server: the next
/// user gets another connection, which answers at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_blocking_command_never_blocks_the_next_user() {
    let Some(url) = url().await else { return };
    let pool = one_of_one(&url, "pooler-blpop").await;
    for (way, cmd) in [
        (
            "BLPOP k 0",
            redis::cmd("BLPOP").arg("pooler:never").arg(0).clone(),
        ),
        (
            "XREAD BLOCK 0",
            redis::cmd("XREAD")
                .arg("BLOCK")
                .arg(0)
                .arg("STREAMS")
                .arg("pooler:stream")
                .arg("$")
                .clone(),
        ),
    ] {
        let mut conn = take(&pool).await;
        let first = Member::id(&conn);
        let cancelled = tokio::time::timeout(
            Duration::from_millis(50),
            cmd.query_async::<redis::Value>(&mut conn),
        )
        .await;
        assert!(cancelled.is_err(), "{way}: still blocked when cancelled");
        drop(conn);
        let mut conn = take(&pool).await;
        assert_ne!(Member::id(&conn), first, "{way}: replaced");
        let pong = tokio::time::timeout(
            Duration::from_secs(1),
            redis::cmd("PING").query_async::<String>(&mut conn),
        )
        .await
        .unwrap_or_else(|_| panic!("{way}: the next user is blocked"))
        .unwrap();
        assert_eq!(pong, "PONG");
    }
    pool.close(Shutdown::Graceful).await;
}

/// A plain command cancelled before its answer came: the answer is drained (a PING after it,
/// in the same round trip as any restore) and the connection kept.
#[tokio::test(flavor = "current_thread")]
async fn an_answer_left_on_its_way_is_drained_and_the_connection_kept() {
    let Some(url) = url().await else { return };
    let pool = one_of_one(&url, "pooler-drain").await;
    let mut conn = take(&pool).await;
    let first = Member::id(&conn);
    let _: () = conn.set("pooler:drain", "theirs").await.unwrap();
    let get = redis::cmd("GET").arg("pooler:drain").clone();
    poll_once_and_drop(get.query_async::<String>(&mut conn)).await;
    assert!(
        pool.manager().needs_recycle(&conn),
        "an answer is on its way"
    );
    drop(conn);
    let mut conn = take(&pool).await;
    assert_eq!(Member::id(&conn), first, "kept");
    let mine: String = redis::cmd("ECHO")
        .arg("mine")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        mine, "mine",
        "the last user's answer is not read as the next user's"
    );
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

type Leave = for<'a> fn(&'a mut RedisConnection) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

fn ways() -> Vec<(&'static str, Leave)> {
    vec![
        ("MULTI left open", |c| {
            Box::pin(async move {
                let _: () = redis::cmd("MULTI").query_async(c).await.unwrap();
                let queued: String = redis::cmd("SET")
                    .arg("pooler:multi")
                    .arg("left")
                    .query_async(c)
                    .await
                    .unwrap();
                assert_eq!(queued, "QUEUED");
            })
        }),
        ("WATCH left", |c| {
            Box::pin(async move {
                let _: () = redis::cmd("WATCH")
                    .arg("pooler:watched")
                    .query_async(c)
                    .await
                    .unwrap();
            })
        }),
        ("SELECT another database", |c| {
            Box::pin(async move {
                let _: () = redis::cmd("SELECT").arg(5).query_async(c).await.unwrap();
            })
        }),
        ("CLIENT SETNAME", |c| {
            Box::pin(async move {
                let _: () = redis::cmd("CLIENT")
                    .arg("SETNAME")
                    .arg("someone-else")
                    .query_async(c)
                    .await
                    .unwrap();
            })
        }),
        ("all of them in one pipeline", |c| {
            Box::pin(async move {
                let _: () = redis::pipe()
                    .cmd("WATCH")
                    .arg("pooler:watched")
                    .cmd("SELECT")
                    .arg(3)
                    .cmd("CLIENT")
                    .arg("SETNAME")
                    .arg("x")
                    .cmd("MULTI")
                    .query_async(c)
                    .await
                    .unwrap();
            })
        }),
    ]
}

/// The hand-over matrix: after each way of leaving state, the next user of the same
/// connection writes and reads as on a new one — their `SET` is done, not queued; their
/// transaction is not aborted by the last user's `WATCH`; they are in database 0 under the
/// pool's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_user_gets_a_connection_like_a_new_one() {
    let Some(url) = url().await else { return };
    let mut admin = admin(&url).await;
    for (way, leave) in ways() {
        let pool = one_of_one(&url, "pooler-matrix").await;
        let mut conn = take(&pool).await;
        let id = Member::id(&conn);
        leave(&mut conn).await;
        // Another client changes the watched key: a WATCH still in force would abort the
        // next user's transaction.
        let _: () = admin.set("pooler:watched", way).await.unwrap();
        drop(conn);
        let mut conn = take(&pool).await;
        assert_eq!(Member::id(&conn), id, "{way}: the same connection, kept");
        let _: () = admin.set("pooler:db0", "here").await.unwrap();
        let set: String = redis::cmd("SET")
            .arg("pooler:mine")
            .arg(way)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(set, "OK", "{way}: done, not queued");
        let got: String = conn.get("pooler:db0").await.unwrap();
        assert_eq!(got, "here", "{way}: in database 0");
        let name: String = redis::cmd("CLIENT")
            .arg("GETNAME")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(name, "pooler-matrix", "{way}: the pool's name");
        let exec: Option<(String,)> = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg("pooler:tx")
            .arg(1)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            exec.is_some(),
            "{way}: the next user's transaction was aborted"
        );
        drop(conn);
        pool.close(Shutdown::Graceful).await;
        let multi: Option<String> = admin.get("pooler:multi").await.unwrap();
        assert_eq!(multi, None, "{way}: the last user's queued SET never ran");
    }
}

/// A clean return costs nothing: after plain commands, pipelines and transactions that end,
/// no recycle.
#[tokio::test(flavor = "current_thread")]
async fn a_clean_return_needs_no_recycle() {
    let Some(url) = url().await else { return };
    let pool = one_of_one(&url, "pooler-zero").await;
    let mut conn = take(&pool).await;
    let _: () = conn.set("pooler:zero", 1).await.unwrap();
    let _: (i64,) = redis::pipe()
        .atomic()
        .incr("pooler:zero", 1)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("WATCH")
        .arg("pooler:zero")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("UNWATCH").query_async(&mut conn).await.unwrap();
    let _: () = redis::cmd("SELECT")
        .arg(2)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(pool.manager().needs_recycle(&conn), "in database 2");
    let _: () = redis::cmd("SELECT")
        .arg(0)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        !pool.manager().needs_recycle(&conn),
        "all put back by the user"
    );
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// Reaching the multiplexed connection underneath is allowed, and safe: the connection is
/// replaced when it comes back, since what was sent through it was not seen.
#[tokio::test(flavor = "current_thread")]
async fn an_untracked_connection_is_replaced_on_return() {
    let Some(url) = url().await else { return };
    let pool = one_of_one(&url, "pooler-untracked").await;
    let mut conn = take(&pool).await;
    let first = Member::id(&conn);
    let _: () = redis::cmd("MULTI")
        .query_async(conn.untracked())
        .await
        .unwrap();
    drop(conn);
    let mut conn = take(&pool).await;
    assert_ne!(Member::id(&conn), first);
    let set: String = redis::cmd("SET")
        .arg("pooler:u")
        .arg(1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(set, "OK");
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// Hooks: the database `after_connect` selects, and the name it gives, are where every user
/// starts (a user's `SELECT` and `CLIENT SETNAME` are put back to them), and `after_return`
/// runs on each return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_set_where_every_user_starts() {
    let Some(url) = url().await else { return };
    let returns = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = returns.clone();
    let hooks = pooler::Hooks::default()
        .after_connect(|conn: &mut RedisConnection| {
            Box::pin(async move {
                let _: () = redis::cmd("SELECT").arg(2).query_async(&mut *conn).await?;
                let _: () = redis::cmd("CLIENT")
                    .arg("SETNAME")
                    .arg("hooked")
                    .query_async(conn)
                    .await?;
                Ok(())
            })
        })
        .after_return(move |_: &mut RedisConnection| {
            let counted = counted.clone();
            Box::pin(async move {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            })
        });
    let pool = started(
        PoolConfig::new("pooler-hooks", 1, 1),
        RedisManager::new(url.as_str()).unwrap().hooks(hooks),
    )
    .await;
    let mut conn = take(&pool).await;
    assert_eq!(conn.db(), 2);
    let _: () = redis::cmd("SELECT")
        .arg(0)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("someone")
        .query_async(&mut conn)
        .await
        .unwrap();
    drop(conn);
    let mut conn = take(&pool).await;
    assert_eq!(conn.db(), 2, "back where the hook put it");
    let name: Option<String> = redis::cmd("CLIENT")
        .arg("GETNAME")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(name.as_deref(), Some("hooked"), "the name the hook gave");
    let info: String = redis::cmd("CLIENT")
        .arg("INFO")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(info.contains(" db=2 "), "the server agrees: {info}");
    assert_eq!(returns.load(std::sync::atomic::Ordering::SeqCst), 1);
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// The shared path: one multiplexed connection, cloned into 64 tasks that send commands on it
/// at once, each getting its own answers.
#[cfg(feature = "shared")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shared_connection_serves_many_tasks_at_once() {
    let Some(url) = url().await else { return };
    let shared = RedisManager::new(url.as_str())
        .unwrap()
        .shared()
        .await
        .unwrap();
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let mut conn = shared.clone();
            tokio::spawn(async move {
                let key = format!("pooler:shared:{i}");
                for n in 0..20 {
                    let _: () = conn.set(&key, n).await.unwrap();
                    let got: i64 = conn.get(&key).await.unwrap();
                    assert_eq!(got, n);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// Polls `cmd` on `conn` exactly once and drops it: on a current-thread runtime redis-rs's
/// driver has not taken it, and never sends it (a deadline already spent, a `select!`).
async fn unsent(conn: &mut pooler_redis::Member, cmd: &redis::Cmd) {
    poll_once_and_drop(cmd.query_async::<redis::Value>(&mut **conn)).await;
}

/// A command that may or may not have reached the server counts as sent for what it leaves
/// (`MULTI`, `WATCH`, `SELECT n`) and as unsent for what it cleans (`EXEC`, `DISCARD`,
/// `UNWATCH`, `SELECT` back): each of these, cancelled before it was sent, must not leave the
/// next user queued in a transaction, writing into another database, or watching keys.
#[tokio::test(flavor = "current_thread")]
async fn a_cleaning_command_cancelled_before_it_was_sent_cleans_nothing() {
    let Some(url) = url().await else { return };
    let mut admin = admin(&url).await;
    let pool = one_of_one(&url, "pooler-unsent").await;

    // MULTI, then an EXEC that never left.
    let mut conn = take(&pool).await;
    let _: () = redis::cmd("MULTI").query_async(&mut *conn).await.unwrap();
    unsent(&mut conn, &redis::cmd("EXEC")).await;
    drop(conn);
    let mut conn = take(&pool).await;
    let set: String = redis::cmd("SET")
        .arg("pooler:unsent:a")
        .arg("mine")
        .query_async(&mut *conn)
        .await
        .unwrap();
    assert_eq!(set, "OK", "the next user's SET ran, not QUEUED");
    drop(conn);

    // SELECT 3, then a SELECT 0 that never left.
    let mut conn = take(&pool).await;
    let _: () = redis::cmd("SELECT")
        .arg(3)
        .query_async(&mut *conn)
        .await
        .unwrap();
    unsent(&mut conn, &redis::cmd("SELECT").arg(0).clone()).await;
    drop(conn);
    let mut conn = take(&pool).await;
    let _: () = conn.set("pooler:unsent:b", "db0").await.unwrap();
    drop(conn);
    let in_db0: Option<String> = admin.get("pooler:unsent:b").await.unwrap();
    assert_eq!(
        in_db0.as_deref(),
        Some("db0"),
        "the next user wrote into db 0"
    );

    // WATCH k, k changed by someone else, then an UNWATCH that never left.
    let mut conn = take(&pool).await;
    let _: () = redis::cmd("WATCH")
        .arg("pooler:unsent:w")
        .query_async(&mut *conn)
        .await
        .unwrap();
    let _: () = admin.set("pooler:unsent:w", "changed").await.unwrap();
    unsent(&mut conn, &redis::cmd("UNWATCH")).await;
    drop(conn);
    let mut conn = take(&pool).await;
    let done: Option<Vec<String>> = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("pooler:unsent:c")
        .arg("mine")
        .query_async(&mut *conn)
        .await
        .unwrap();
    assert_eq!(
        done,
        Some(vec!["OK".to_owned()]),
        "the next user's transaction ran"
    );
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// A command that ends the connection or changes what it is (`QUIT`, a `CLIENT KILL` that
/// may match it, replication's handshake, the debugger, a cluster's one-shot `ASKING`, a
/// `CLIENT` subcommand the tracking does not know) has it replaced: handed on, it would
/// break under the next user (seen: `QUIT`, then the next user's `SET` failed with a broken
/// pipe in two of three runs) or behave as no new connection does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_ends_or_changes_the_connection_has_it_replaced() {
    let Some(url) = url().await else { return };
    let ways: [&[&str]; 6] = [
        &["QUIT"],
        &["CLIENT", "KILL", "ID"],
        &["REPLCONF", "listening-port", "1"],
        &["SCRIPT", "DEBUG", "NO"],
        &["ASKING"],
        &["CLIENT", "NO-SUCH-SUBCOMMAND"],
    ];
    for way in ways {
        let pool = one_of_one(&url, "pooler-ends").await;
        let mut conn = take(&pool).await;
        let first = Member::id(&conn);
        let mut cmd = redis::cmd(way[0]);
        for arg in &way[1..] {
            cmd.arg(*arg);
        }
        if way.ends_with(&["ID"]) {
            // This connection's own id: other tests' connections run beside it.
            let id: i64 = redis::cmd("CLIENT")
                .arg("ID")
                .query_async(&mut conn)
                .await
                .unwrap();
            cmd.arg(id);
        }
        // Its answer, or its error (`ASKING` without cluster support), is beside the point.
        drop(cmd.query_async::<redis::Value>(&mut conn).await);
        drop(conn);
        let mut conn = take(&pool).await;
        assert_ne!(Member::id(&conn), first, "{way:?}: replaced");
        let set: String = redis::cmd("SET")
            .arg("pooler:ends")
            .arg(1)
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{way:?}: the next user's SET failed: {e}"));
        assert_eq!(set, "OK");
        drop(conn);
        pool.close(Shutdown::Graceful).await;
    }
}
