//! Real backends: PostgreSQL `SELECT 1` and Redis `PING` through pooler's adapters and
//! deadpool's and bb8's, MariaDB `SELECT 1` through pooler-mysql and mysql_async's own pool;
//! 64 tasks over pools of 8 and 16, every contender in its default mode and its cheapest,
//! interleaved round by round in one process.
//!
//! `cargo run --release -p pooler-bench -- backends` writes `docs/benchmarks-backends.md`;
//! with `--smoke` every cell runs for a moment and nothing is written.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod postgres;

pub(crate) use postgres::{fixed_postgres, paired_postgres};

const POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/test";
const REDIS: &str = "redis://127.0.0.1:6379";
const MYSQL: &str = "mysql://root@127.0.0.1:3306/test";
const TASKS: usize = 64;
const SIZES: [usize; 2] = [8, 16];

/// One pool under test, as a name and a way to run the load against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    PoolerPg,
    PoolerPgNothing,
    DeadpoolPg,
    Bb8Pg,
    Bb8PgNoTest,
    PoolerRedis,
    DeadpoolRedis,
    Bb8Redis,
    Bb8RedisNoTest,
    PoolerMysql,
    PoolerMysqlNothing,
    MysqlAsync,
    MysqlAsyncNoReset,
}

impl Contender {
    const ALL: [Contender; 13] = [
        Contender::PoolerPg,
        Contender::PoolerPgNothing,
        Contender::DeadpoolPg,
        Contender::Bb8Pg,
        Contender::Bb8PgNoTest,
        Contender::PoolerRedis,
        Contender::DeadpoolRedis,
        Contender::Bb8Redis,
        Contender::Bb8RedisNoTest,
        Contender::PoolerMysql,
        Contender::PoolerMysqlNothing,
        Contender::MysqlAsync,
        Contender::MysqlAsyncNoReset,
    ];

    fn backend(self) -> &'static str {
        match self {
            Contender::PoolerPg
            | Contender::PoolerPgNothing
            | Contender::DeadpoolPg
            | Contender::Bb8Pg
            | Contender::Bb8PgNoTest => "PostgreSQL `SELECT 1`",
            Contender::PoolerMysql
            | Contender::PoolerMysqlNothing
            | Contender::MysqlAsync
            | Contender::MysqlAsyncNoReset => "MariaDB `SELECT 1`",
            _ => "Redis `PING`",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Contender::PoolerPg => "pooler-postgres (default: `Recycle::Observed`)",
            Contender::PoolerPgNothing => "pooler-postgres `Recycle::Nothing`",
            Contender::DeadpoolPg => "deadpool-postgres (default: `RecyclingMethod::Fast`)",
            Contender::Bb8Pg => "bb8-postgres (default: `test_on_check_out`)",
            Contender::Bb8PgNoTest => "bb8-postgres, `test_on_check_out(false)`",
            Contender::PoolerRedis => "pooler-redis (default)",
            Contender::DeadpoolRedis => "deadpool-redis (default: PING on reuse)",
            Contender::Bb8Redis => "bb8-redis (default: `test_on_check_out`)",
            Contender::Bb8RedisNoTest => "bb8-redis, `test_on_check_out(false)`",
            Contender::PoolerMysql => "pooler-mysql (default: `Recycle::Reset`)",
            Contender::PoolerMysqlNothing => "pooler-mysql `Recycle::Nothing`",
            Contender::MysqlAsync => "mysql_async's pool (default: reset on return)",
            Contender::MysqlAsyncNoReset => "mysql_async's pool, `with_reset_connection(false)`",
        }
    }
}

/// Runs `TASKS` tasks doing `op` for `secs`; returns operations per second.
async fn load<F, Fut>(secs: f64, op: F) -> f64
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let done = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (op, done) = (op.clone(), done.clone());
            tokio::spawn(async move {
                while Instant::now() < end {
                    op().await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let started = Instant::now();
    for t in tasks {
        t.await.expect("a load task ended in a panic");
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// The load on an open pooler pool: `op` on a member taken with `take`, returned on drop.
async fn pooler_load<M, F, Fut>(pool: &pooler::Pool<M>, secs: f64, op: F) -> f64
where
    M: pooler::Manager,
    F: Fn(pooler::Member<M>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let p = pool.clone();
    load(secs, move || {
        let (p, op) = (p.clone(), op.clone());
        async move { op(p.take().await.expect("a member")).await }
    })
    .await
}

/// A pool of `manager` (`size` members, all started first) under the load, then closed.
async fn pooler_rate<M, F, Fut>(size: usize, manager: M, secs: f64, op: F) -> f64
where
    M: pooler::Manager,
    F: Fn(pooler::Member<M>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let pool = pooler::Pool::start(config(size), manager)
        .await
        .expect("a pool");
    let rate = pooler_load(&pool, secs, op).await;
    pool.close(pooler::Shutdown::Graceful).await;
    rate
}

/// pooler's config for `size` members, all started before the load, and room in the queue
/// for every task.
fn config(size: usize) -> pooler::PoolConfig {
    pooler::PoolConfig::builder("bench")
        .init_count(size)
        .max_count(size)
        .queue_max(TASKS)
        .build()
        .expect("a valid config")
}

pub(crate) fn postgres_url() -> String {
    std::env::var("POOLER_POSTGRES_URL").unwrap_or_else(|_| POSTGRES.into())
}

/// pooler-postgres's pool manager, recycling as `recycle` says.
fn pooler_pg(recycle: pooler_postgres::Recycle) -> pooler_postgres::PgManager {
    pooler_postgres::PgManager::new(&postgres_url())
        .expect("a URL")
        .recycle(recycle)
}

/// deadpool-postgres's pool of `size`, in its default mode (connections open on first use).
fn deadpool_pg(size: usize) -> deadpool_postgres::Pool {
    deadpool_pg_at(&postgres_url(), size)
}

/// deadpool-postgres's pool of `size` for `url`, in its default mode.
fn deadpool_pg_at(url: &str, size: usize) -> deadpool_postgres::Pool {
    let mut cfg = deadpool_postgres::Config::new();
    cfg.url = Some(url.to_owned());
    cfg.pool = Some(deadpool_postgres::PoolConfig::new(size));
    cfg.create_pool(
        Some(deadpool_postgres::Runtime::Tokio1),
        pooler_postgres::tokio_postgres::NoTls,
    )
    .expect("a pool")
}

/// The load on a deadpool-postgres pool: `SELECT 1` on a connection taken with `get`.
async fn deadpool_pg_load(pool: &deadpool_postgres::Pool, secs: f64) -> f64 {
    let p = pool.clone();
    load(secs, move || {
        let p = p.clone();
        async move { select_one(&p.get().await.expect("a connection")).await }
    })
    .await
}

/// The Postgres command every contender runs.
async fn select_one(client: &pooler_postgres::tokio_postgres::Client) {
    client.simple_query("SELECT 1").await.expect("an answer");
}

async fn cell(who: Contender, size: usize, secs: f64) -> f64 {
    let redis_url = std::env::var("POOLER_REDIS_URL").unwrap_or_else(|_| REDIS.into());
    let mysql_url = std::env::var("POOLER_MYSQL_URL").unwrap_or_else(|_| MYSQL.into());
    let max = u32::try_from(size).expect("a small pool");
    match who {
        Contender::PoolerPg | Contender::PoolerPgNothing => {
            let recycle = if who == Contender::PoolerPg {
                pooler_postgres::Recycle::Observed
            } else {
                pooler_postgres::Recycle::Nothing
            };
            pooler_rate(size, pooler_pg(recycle), secs, |conn| async move {
                select_one(&conn).await;
            })
            .await
        }
        Contender::DeadpoolPg => {
            let pool = deadpool_pg(size);
            let rate = deadpool_pg_load(&pool, secs).await;
            pool.close();
            rate
        }
        Contender::Bb8Pg | Contender::Bb8PgNoTest => {
            let manager = bb8_postgres::PostgresConnectionManager::new_from_stringlike(
                postgres_url(),
                pooler_postgres::tokio_postgres::NoTls,
            )
            .expect("a URL");
            let pool = bb8::Pool::builder()
                .max_size(max)
                .test_on_check_out(who == Contender::Bb8Pg)
                .build(manager)
                .await
                .expect("a pool");
            load(secs, move || {
                let p = pool.clone();
                async move { select_one(&p.get().await.expect("a connection")).await }
            })
            .await
        }
        Contender::PoolerRedis => {
            let manager = pooler_redis::RedisManager::new(redis_url.as_str()).expect("a URL");
            pooler_rate(size, manager, secs, |mut conn| async move {
                let pong: String = pooler_redis::redis::cmd("PING")
                    .query_async(&mut *conn)
                    .await
                    .expect("an answer");
                assert_eq!(pong, "PONG");
            })
            .await
        }
        Contender::DeadpoolRedis => {
            let mut cfg = deadpool_redis::Config::from_url(redis_url);
            cfg.pool = Some(deadpool_redis::PoolConfig::new(size));
            let pool = cfg
                .create_pool(Some(deadpool_redis::Runtime::Tokio1))
                .expect("a pool");
            let p = pool.clone();
            let rate = load(secs, move || {
                let p = p.clone();
                async move {
                    let mut conn = p.get().await.expect("a connection");
                    let pong: String = deadpool_redis::redis::cmd("PING")
                        .query_async(&mut conn)
                        .await
                        .expect("an answer");
                    assert_eq!(pong, "PONG");
                }
            })
            .await;
            pool.close();
            rate
        }
        Contender::PoolerMysql | Contender::PoolerMysqlNothing => {
            let recycle = if who == Contender::PoolerMysql {
                pooler_mysql::Recycle::Reset
            } else {
                pooler_mysql::Recycle::Nothing
            };
            let manager = pooler_mysql::MysqlManager::new(&mysql_url)
                .expect("a URL")
                .recycle(recycle);
            pooler_rate(size, manager, secs, |mut conn| async move {
                use pooler_mysql::mysql_async::prelude::Queryable as _;
                conn.query_drop("SELECT 1").await.expect("an answer");
            })
            .await
        }
        Contender::MysqlAsync | Contender::MysqlAsyncNoReset => {
            use pooler_mysql::mysql_async::{self, prelude::Queryable as _};
            let constraints = mysql_async::PoolConstraints::new(size, size).expect("min ≤ max");
            let pool_opts = mysql_async::PoolOpts::default()
                .with_constraints(constraints)
                .with_reset_connection(who == Contender::MysqlAsync);
            let opts = mysql_async::OptsBuilder::from_opts(
                mysql_async::Opts::from_url(&mysql_url).expect("a URL"),
            )
            .pool_opts(pool_opts);
            let pool = mysql_async::Pool::new(opts);
            let p = pool.clone();
            let rate = load(secs, move || {
                let p = p.clone();
                async move {
                    let mut conn = p.get_conn().await.expect("a connection");
                    conn.query_drop("SELECT 1").await.expect("an answer");
                }
            })
            .await;
            pool.disconnect().await.expect("the pool disconnects");
            rate
        }
        Contender::Bb8Redis | Contender::Bb8RedisNoTest => {
            let manager = bb8_redis::RedisConnectionManager::new(redis_url).expect("a URL");
            let pool = bb8::Pool::builder()
                .max_size(max)
                .test_on_check_out(who == Contender::Bb8Redis)
                .build(manager)
                .await
                .expect("a pool");
            load(secs, move || {
                let p = pool.clone();
                async move {
                    let mut conn = p.get().await.expect("a connection");
                    let pong: String = bb8_redis::redis::cmd("PING")
                        .query_async(&mut *conn)
                        .await
                        .expect("an answer");
                    assert_eq!(pong, "PONG");
                }
            })
            .await
        }
    }
}

/// Every contender's rates, per pool size, one per round.
pub(crate) struct Rates(Vec<(Contender, usize, Vec<f64>)>);

/// The pause before each cell.
const SETTLE: Duration = Duration::from_millis(500);

/// Runs `rounds` rounds of every cell whose backend starts with `only` (every cell for ""),
/// `secs` each, in turn, each round starting one cell further on.
pub(crate) async fn run(secs: f64, rounds: usize, only: &str) -> Rates {
    let mut rates: Vec<(Contender, usize, Vec<f64>)> = Contender::ALL
        .iter()
        .filter(|c| c.backend().to_lowercase().starts_with(&only.to_lowercase()))
        .flat_map(|&c| SIZES.map(|s| (c, s, Vec::new())))
        .collect();
    let cells = rates.len();
    for round in 0..rounds {
        // Each round starts one cell further on, so no contender always runs first (on a cold
        // process) or always right after the same neighbour.
        for i in 0..cells {
            let (who, size, got) = &mut rates[(round + i) % cells];
            // The previous cell's connections end in the background (servers' processes
            // exit): let that finish before measuring.
            tokio::time::sleep(SETTLE).await;
            let rate = cell(*who, *size, secs).await;
            eprintln!(
                "round {} {:<55} pool {size:>2}: {rate:>9.0}/s",
                round + 1,
                who.label()
            );
            got.push(rate);
        }
    }
    Rates(rates)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

impl Rates {
    fn of(&self, who: Contender, size: usize) -> &[f64] {
        self.0
            .iter()
            .find(|(c, s, _)| *c == who && *s == size)
            .map(|(_, _, v)| v.as_slice())
            .unwrap_or(&[])
    }

    /// The report, in Markdown.
    pub(crate) fn markdown(&self, rounds: usize, secs: f64) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# Real backends\n\nWritten by `cargo run --release -p pooler-bench -- backends`. \
             {TASKS} tasks, each taking a connection, running one command and giving it back, \
             for {secs} s per cell; {rounds} rounds, every contender in turn in each round (each round \
             starting one cell further on, after a pause of half a second per cell), in one \
             process, against the local servers (PostgreSQL, Redis and MariaDB on 127.0.0.1). Each cell is \
             the median rate of the rounds, with the lowest and highest in brackets; `÷` columns \
             divide pooler's default by the contender's (above 1.00: pooler is faster)."
        );
        for backend in [
            "PostgreSQL `SELECT 1`",
            "Redis `PING`",
            "MariaDB `SELECT 1`",
        ] {
            let (ours, header) = if backend.starts_with("Postgre") {
                (Contender::PoolerPg, "simple_query(\"SELECT 1\")")
            } else if backend.starts_with("Redis") {
                (Contender::PoolerRedis, "cmd(\"PING\")")
            } else {
                (Contender::PoolerMysql, "query_drop(\"SELECT 1\")")
            };
            if !self.0.iter().any(|(c, _, _)| c.backend() == backend) {
                continue;
            }
            let _ = writeln!(out, "\n## {backend} (`{header}`)\n");
            let _ = writeln!(
                out,
                "| pool | {} |",
                SIZES
                    .map(|s| format!("pool of {s}, queries/s | ÷"))
                    .join(" | ")
            );
            let _ = writeln!(out, "|---|{}", "---:|---:|".repeat(SIZES.len()));
            for who in Contender::ALL
                .iter()
                .filter(|c| c.backend() == backend && !self.of(**c, SIZES[0]).is_empty())
            {
                let mut row = format!("| {} |", who.label());
                for size in SIZES {
                    let v = self.of(*who, size);
                    if v.is_empty() {
                        row.push_str(" n/a | |");
                        continue;
                    }
                    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = v.iter().copied().fold(0.0, f64::max);
                    let ratio = median(self.of(ours, size)) / median(v);
                    let _ = write!(
                        row,
                        " {:.0} ({:.0}–{:.0}) | {ratio:.2} |",
                        median(v),
                        lo,
                        hi
                    );
                }
                let _ = writeln!(out, "{row}");
            }
        }
        out
    }
}

/// Runs the suite and writes the report into `dir` (unless `smoke`, or `only` picks some
/// backends: then the report is printed).
pub(crate) async fn main(dir: &Path, smoke: bool, rounds: usize, only: &str) {
    let (secs, rounds) = if smoke { (0.2, 1) } else { (3.0, rounds) };
    let rates = run(secs, rounds, only).await;
    let report = rates.markdown(rounds, secs);
    if !only.is_empty() {
        println!("{report}");
    } else if smoke {
        println!("smoke run: every backend cell ran");
    } else {
        let path = dir.join("benchmarks-backends.md");
        std::fs::write(&path, report).expect("the report is written");
        println!("wrote {}", path.display());
    }
}
