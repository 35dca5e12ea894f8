//! Following a failover, live: a primary and a streaming standby of it, made for each test by
//! `scripts/failover-clusters.sh` on ports of their own; the primary stopped and the standby
//! promoted while pools write and read; and a server killed and started again on its port.
#![allow(clippy::disallowed_methods)] // tests spawn their own load tasks

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pooler::{PoolConfig, Shutdown};
use pooler_postgres::{PgManager, Pool, SessionTarget};
use pooler_testkit::{eventually, started};

use common::{backend_pid, url};

/// A primary and its standby, removed when dropped.
struct Clusters {
    dir: PathBuf,
    primary: u16,
    standby: u16,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/failover-clusters.sh")
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

impl Clusters {
    /// Fresh clusters, or `None` (with a notice) where PostgreSQL's server programs are not
    /// installed — a failure instead under `POOLER_REQUIRE_SERVICES=1`.
    fn up(name: &str) -> Option<Clusters> {
        let dir =
            std::env::temp_dir().join(format!("pooler-failover-{name}-{}", std::process::id()));
        let (primary, standby) = (free_port(), free_port());
        let out = Command::new(script())
            .args([
                "up",
                dir.to_str().unwrap(),
                &primary.to_string(),
                &standby.to_string(),
            ])
            .output();
        match out {
            Ok(out) if out.status.success() => Some(Clusters {
                dir,
                primary,
                standby,
            }),
            other => {
                let why = match other {
                    Ok(out) => String::from_utf8_lossy(&out.stderr).into_owned(),
                    Err(e) => e.to_string(),
                };
                if std::env::var("POOLER_REQUIRE_SERVICES").is_ok_and(|v| v == "1") {
                    panic!("cannot set up the failover clusters: {why}");
                }
                eprintln!("skipping: cannot set up the failover clusters: {why}");
                None
            }
        }
    }

    fn run(&self, args: &[&str]) {
        let mut all = vec![args[0], self.dir.to_str().unwrap()];
        all.extend(&args[1..]);
        let out = Command::new(script()).args(&all).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A manager over both hosts, primary first.
    fn manager(&self, target: SessionTarget) -> PgManager {
        PgManager::new(&format!(
            "host=127.0.0.1,127.0.0.1 port={},{} user=postgres dbname=test connect_timeout=2",
            self.primary, self.standby
        ))
        .unwrap()
        .target_session_attrs(target)
        .host_recheck(Duration::from_millis(500))
    }

    async fn admin(&self, port: u16) -> tokio_postgres::Client {
        common::admin(&format!("postgres://postgres@127.0.0.1:{port}/test")).await
    }
}

impl Drop for Clusters {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .args(["down", self.dir.to_str().unwrap()])
            .output();
    }
}

/// The server port a pooled connection is on.
async fn port_of(pool: &Pool) -> Result<u16, String> {
    let conn = pool
        .take_member(Duration::from_secs(3))
        .await
        .map_err(|e| e.to_string())?;
    let row = conn
        .query_one("SELECT inet_server_port()", &[])
        .await
        .map_err(|e| e.to_string())?;
    Ok(u16::try_from(row.get::<_, i32>(0)).unwrap())
}

/// Writers on a `read-write` pool over [primary, standby] while the primary is stopped and
/// the standby promoted: writes fail only until the pool has reached the new primary, and none
/// begun after fails (one begun before may still end in its wait). A `standby` pool lands on
/// the standby and, once it is promoted, gives its connections up; a `prefer-standby` pool
/// lands on the standby and keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_follow_a_failover() {
    let Some(clusters) = Clusters::up("writes") else {
        return;
    };
    clusters
        .admin(clusters.primary)
        .await
        .batch_execute("CREATE TABLE w (id bigserial, writer int)")
        .await
        .unwrap();
    let writes = started(
        PoolConfig::new("pg-failover-rw", 2, 4),
        clusters.manager(SessionTarget::ReadWrite),
    )
    .await;
    let reads = started(
        PoolConfig::new("pg-failover-standby", 1, 2),
        clusters.manager(SessionTarget::Standby),
    )
    .await;
    let prefer = started(
        PoolConfig::new("pg-failover-prefer", 1, 2),
        clusters.manager(SessionTarget::PreferStandby),
    )
    .await;
    assert_eq!(port_of(&writes).await, Ok(clusters.primary));
    assert_eq!(port_of(&reads).await, Ok(clusters.standby));
    assert_eq!(port_of(&prefer).await, Ok(clusters.standby));

    let stop = Arc::new(AtomicBool::new(false));
    let begun = Instant::now();
    let mut writers = Vec::new();
    for writer in 0..4i32 {
        let (pool, stop) = (writes.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let began = begun.elapsed();
                let done = match pool.take_member(Duration::from_millis(500)).await {
                    Ok(conn) => conn
                        .execute("INSERT INTO w (writer) VALUES ($1)", &[&writer])
                        .await
                        .map(drop)
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                if done.is_err() {
                    // A failed write is retried a little later, as an application would.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                outcomes.push((began, begun.elapsed(), done));
            }
            outcomes
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopped = begun.elapsed();
    clusters.run(&["stop", "primary"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    clusters.run(&["promote"]);
    let promoted = begun.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let mut outcomes = Vec::new();
    for writer in writers {
        outcomes.extend(writer.await.unwrap());
    }
    // Each write: when it began, when it ended, how.
    outcomes.sort_by_key(|(_, ended, _)| *ended);

    // The pool has seen the change once a write ends done after the promotion; a write
    // begun from then on must not fail (one begun before may still end in its wait).
    let first_after = outcomes
        .iter()
        .find(|(_, ended, done)| *ended > promoted && done.is_ok())
        .map(|(_, ended, _)| *ended)
        .expect("no write succeeded after the promotion");
    let failed_after: Vec<_> = outcomes
        .iter()
        .filter(|(began, _, done)| *began > first_after && done.is_err())
        .collect();
    let failed_during = outcomes
        .iter()
        .filter(|(began, ended, done)| *ended > stopped && *began <= first_after && done.is_err())
        .count();
    let served_after = outcomes
        .iter()
        .filter(|(began, _, _)| *began > first_after)
        .count();
    eprintln!(
        "failover: primary stopped at {stopped:?}, standby promoted at {promoted:?}, first write \
         on the new primary {:?} after the promotion; {failed_during} writes failed in between, \
         {served_after} begun after and {} of them failed",
        first_after - promoted,
        failed_after.len()
    );
    assert!(
        failed_after.is_empty(),
        "writes failed after the pool reached the new primary: {failed_after:?}"
    );
    assert!(
        served_after > 20,
        "{served_after} writes after the failover"
    );
    assert_eq!(port_of(&writes).await, Ok(clusters.standby));
    assert_eq!(port_of(&prefer).await, Ok(clusters.standby));

    // The standby pool's connections heard the promotion: given up, and with no standby left
    // a new one is refused, naming why.
    let mut refused = String::new();
    eventually(
        "the standby pool gives its promoted connections up",
        async || match port_of(&reads).await {
            Err(e) => {
                refused = e;
                true
            }
            Ok(_) => false,
        },
    )
    .await;
    assert!(refused.contains("asks for standby"), "{refused}");

    for pool in [writes, reads, prefer] {
        pool.close(Shutdown::Immediate).await;
    }
}

/// A primary its operator makes read-only (as a failover tool demotes one behind a proxy,
/// still answering `SELECT 1`): the connections of a `read-write` pool hear it at once and
/// are given up, new ones are refused naming why, and when it is writable again the pool
/// serves writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_made_read_only_is_left() {
    let Some(clusters) = Clusters::up("readonly") else {
        return;
    };
    let admin = clusters.admin(clusters.primary).await;
    admin
        .batch_execute("CREATE TABLE r (id int)")
        .await
        .unwrap();
    let manager = PgManager::new(&format!(
        "host=127.0.0.1 port={} user=postgres dbname=test",
        clusters.primary
    ))
    .unwrap()
    .target_session_attrs(SessionTarget::ReadWrite);
    let pool = started(PoolConfig::new("pg-made-read-only", 1, 1), manager).await;
    let conn = pool.take_member(Duration::from_secs(3)).await.unwrap();
    conn.execute("INSERT INTO r VALUES (1)", &[]).await.unwrap();
    drop(conn);

    let reconfigure = async |statement: &str| {
        admin.batch_execute(statement).await.unwrap();
        admin
            .batch_execute("SELECT pg_reload_conf()")
            .await
            .unwrap();
    };
    reconfigure("ALTER SYSTEM SET default_transaction_read_only = on").await;
    let mut refused = String::new();
    eventually("the pool leaves the read-only primary", async || {
        match pool.take_member(Duration::from_millis(300)).await {
            Ok(conn) => {
                // Served before its connection heard the reload: the write is refused.
                let _ = conn.execute("INSERT INTO r VALUES (2)", &[]).await;
                false
            }
            Err(e) => {
                refused = e.to_string();
                true
            }
        }
    })
    .await;
    assert!(
        refused
            .contains("whose sessions are read-only, and target_session_attrs asks for read-write"),
        "{refused}"
    );

    reconfigure("ALTER SYSTEM RESET default_transaction_read_only").await;
    eventually("the pool writes again", async || {
        match pool.take_member(Duration::from_millis(300)).await {
            Ok(conn) => conn.execute("INSERT INTO r VALUES (3)", &[]).await.is_ok(),
            Err(_) => false,
        }
    })
    .await;
    pool.close(Shutdown::Immediate).await;
}

/// A write refused as read-only (SQLSTATE 25006) retires the connection of a `primary` pool
/// when it is given back: the next user gets another session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_refused_as_read_only_retires_the_connection() {
    let Some(url) = url().await else { return };
    let manager = PgManager::new(&url)
        .unwrap()
        .target_session_attrs(SessionTarget::Primary);
    let pool = started(PoolConfig::new("pg-refused-write", 1, 1), manager).await;
    let conn = pool.take_member(Duration::from_secs(3)).await.unwrap();
    let first = backend_pid(&conn).await;
    drop(conn);
    let conn = pool.take_member(Duration::from_secs(3)).await.unwrap();
    assert_eq!(
        backend_pid(&conn).await,
        first,
        "a clean connection is kept"
    );
    let e = conn
        .batch_execute("BEGIN READ ONLY; CREATE TABLE pooler_refused (id int)")
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION)
    );
    drop(conn);
    let conn = pool.take_member(Duration::from_secs(3)).await.unwrap();
    assert_ne!(
        backend_pid(&conn).await,
        first,
        "the connection that was refused a write is retired"
    );
    drop(conn);
    pool.close(Shutdown::Graceful).await;
}

/// A server killed (an immediate stop: no goodbye to its clients) and started again on the
/// same port while writers run (`pooler_testkit::scenarios::restarted_under_writers`): the
/// pool serves again by itself once the server listens, no member on a dead connection is
/// handed out, and every write that was acknowledged is there after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_served_again_and_loses_nothing() {
    let Some(clusters) = Clusters::up("restart") else {
        return;
    };
    clusters
        .admin(clusters.primary)
        .await
        .batch_execute("CREATE TABLE r (v bigint PRIMARY KEY)")
        .await
        .unwrap();
    let manager = PgManager::new(&format!(
        "postgres://postgres@127.0.0.1:{}/test?connect_timeout=2",
        clusters.primary
    ))
    .unwrap();
    let pool = started(PoolConfig::new("pg-restart", 4, 4), manager).await;
    let seen = pooler_testkit::scenarios::restarted_under_writers(
        &pool,
        |conn, v| async move {
            conn.execute("INSERT INTO r (v) VALUES ($1)", &[&v])
                .await
                .is_ok()
        },
        |down| clusters.run(&[if down { "stop" } else { "start" }, "primary"]),
        async || {
            clusters
                .admin(clusters.primary)
                .await
                .query("SELECT v FROM r", &[])
                .await
                .unwrap()
                .iter()
                .map(|row| row.get(0))
                .collect()
        },
    )
    .await;
    eprintln!("a server killed and started again: {seen:?}");
    pool.close(Shutdown::Graceful).await;
}
