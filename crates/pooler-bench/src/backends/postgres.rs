//! PostgreSQL alone: the fixed run that callgrind counts, and the paired runs of
//! pooler-postgres against deadpool-postgres.

use super::{
    SIZES, config, deadpool_pg, deadpool_pg_at, deadpool_pg_load, load, pooler_load, pooler_pg,
    postgres_url, select_one,
};

/// A fixed amount of client-side work for callgrind: `n` `SELECT 1` through `who`
/// ("pooler", "pooler-nothing" or "deadpool") on a current-thread runtime — from one task over
/// a pool of 1, or with `tasks` over a pool of 8 (`n` in all, shared among them). The
/// server's work is not counted (it is another process), so the instructions are what the
/// pool and its adapter cost the client. With `armed`, a timer far in the future is armed
/// for the run, as any program with a timeout pending has one: pooler's pool keeps timers of
/// its own (lifetimes, culling), and with one armed the runtime's timer wheel works at every
/// park (about 600 instructions a query from one task), which deadpool, arming none, is
/// otherwise spared.
pub(crate) async fn fixed_postgres(who: &str, n: u32, tasks: u32, armed: bool) {
    let _timer =
        armed.then(|| tokio::spawn(tokio::time::sleep(std::time::Duration::from_secs(3600))));
    let size = if tasks > 1 { 8 } else { 1 };
    let each = n / tasks.max(1);
    let mut running = Vec::new();
    if who == "deadpool" {
        let pool = deadpool_pg(size);
        for _ in 0..tasks.max(1) {
            let pool = pool.clone();
            running.push(tokio::spawn(async move {
                for _ in 0..each {
                    select_one(&pool.get().await.expect("a connection")).await;
                }
            }));
        }
        for task in running {
            task.await.expect("a task");
        }
        return;
    }
    let recycle = if who == "pooler" {
        pooler_postgres::Recycle::Observed
    } else {
        pooler_postgres::Recycle::Nothing
    };
    let pool = pooler::Pool::start(config(size), pooler_pg(recycle))
        .await
        .expect("a pool");
    for _ in 0..tasks.max(1) {
        let pool = pool.clone();
        running.push(tokio::spawn(async move {
            for _ in 0..each {
                simple_select(&pool.take().await.expect("a connection")).await;
            }
        }));
    }
    for task in running {
        task.await.expect("a task");
    }
    pool.close(pooler::Shutdown::Graceful).await;
}

/// Paired Postgres runs: pooler-postgres's default and deadpool-postgres's default, both pools
/// open side by side, measured `secs` each in alternating order (pooler first in odd pairs,
/// deadpool first in even ones), `pairs` times per pool size and statement. Each pair's ratio
/// compares two runs a few seconds apart, so slow drifts of the machine (the server shares its
/// cores) cancel out of it. Prints each size's ratios: median, quartiles, lowest and highest.
///
/// Each side runs the call its users write on what its pool hands out: `simple_query("SELECT
/// 1")`, and `query_one("SELECT $1::int4", &[&1])` — a query string, which pooler-postgres runs
/// on the unnamed statement in one round trip (and both return once their answer is read),
/// tokio-postgres (under deadpool-postgres) as a named statement prepared, run and closed.
///
/// With `bouncer`, both reach the server through a PgBouncer of the run's own in transaction
/// mode with as many server connections as the pools have clients (pooler-postgres with
/// `transaction_pooling` on): only `SELECT 1` is paired there, and pooler's rate for the
/// parameterised statement is printed alone (tokio-postgres's named statements, which
/// deadpool-postgres runs, fail there).
pub(crate) async fn paired_postgres(pairs: usize, secs: f64, bouncer: bool) {
    for size in SIZES {
        let pgbouncer = bouncer.then(|| {
            let upstream = postgres_url();
            let upstream = upstream
                .split('@')
                .nth(1)
                .and_then(|rest| rest.split('/').next())
                .and_then(|hp| hp.parse().ok())
                .expect("the server's URL names an IP and a port");
            let pool_size = format!("default_pool_size = {size}");
            pooler_testkit::pgbouncer::PgBouncer::start(
                upstream,
                pooler_testkit::pgbouncer::Mode::Transaction,
                &[&pool_size],
            )
            .expect("pgbouncer is installed")
        });
        let url = pgbouncer
            .as_ref()
            .map_or_else(postgres_url, |b| b.url("postgres"));
        let manager = pooler_postgres::PgManager::new(&url)
            .expect("a URL")
            .transaction_pooling(bouncer);
        let ours = pooler::Pool::start(config(size), manager)
            .await
            .expect("a pool");
        let theirs = deadpool_pg_at(&url, size);
        let at = if bouncer { " through PgBouncer" } else { "" };
        // Warm both: deadpool opens its connections on first use.
        pooler_load(&ours, 0.5, |conn| async move { simple_select(&conn).await }).await;
        deadpool_pg_load(&theirs, 0.5).await;
        let ratios = paired(
            pairs,
            || {
                pooler_load(
                    &ours,
                    secs,
                    |conn| async move { simple_select(&conn).await },
                )
            },
            || deadpool_pg_load(&theirs, secs),
        )
        .await;
        report_pairs(&format!("pool of {size}{at}"), "`SELECT 1`", secs, ratios);
        if bouncer {
            let mut rates: Vec<f64> = Vec::with_capacity(pairs);
            for _ in 0..pairs {
                rates.push(
                    pooler_load(&ours, secs, |conn| async move { select_int(&conn).await }).await,
                );
            }
            rates.sort_by(f64::total_cmp);
            println!(
                "pool of {size}{at}: pooler-postgres, `SELECT $1::int4`: median {:.0}/s, range {:.0}–{:.0}",
                rates[rates.len() / 2],
                rates[0],
                rates[rates.len() - 1]
            );
        } else {
            let ratios = paired(
                pairs,
                || pooler_load(&ours, secs, |conn| async move { select_int(&conn).await }),
                || {
                    let p = theirs.clone();
                    load(secs, move || {
                        let p = p.clone();
                        async move {
                            let client = p.get().await.expect("a connection");
                            let row = client
                                .query_one("SELECT $1::int4", &[&1_i32])
                                .await
                                .expect("an answer");
                            assert_eq!(row.get::<_, i32>(0), 1);
                        }
                    })
                },
            )
            .await;
            report_pairs(
                &format!("pool of {size}"),
                "`SELECT $1::int4`",
                secs,
                ratios,
            );
        }
        ours.close(pooler::Shutdown::Graceful).await;
        theirs.close();
        drop(pgbouncer);
    }
}

/// `SELECT 1` over the simple protocol through pooler-postgres's connection.
async fn simple_select(conn: &pooler_postgres::PgConnection) {
    conn.simple_query("SELECT 1").await.expect("an answer");
}

/// `SELECT $1::int4` through pooler-postgres's connection.
async fn select_int(conn: &pooler_postgres::PgConnection) {
    let row = conn
        .query_one("SELECT $1::int4", &[&1_i32])
        .await
        .expect("an answer");
    assert_eq!(row.get::<_, i32>(0), 1);
}

/// `pairs` ratios of our rate to theirs, the two run in alternating order.
async fn paired<A, B, FA, FB>(pairs: usize, ours: A, theirs: B) -> Vec<f64>
where
    A: Fn() -> FA,
    B: Fn() -> FB,
    FA: Future<Output = f64>,
    FB: Future<Output = f64>,
{
    let mut ratios = Vec::with_capacity(pairs);
    for pair in 0..pairs {
        let (a, b) = if pair % 2 == 0 {
            let a = ours().await;
            (a, theirs().await)
        } else {
            let b = theirs().await;
            (ours().await, b)
        };
        eprintln!(
            "pair {:>2}: pooler {a:>7.0}/s, deadpool {b:>7.0}/s, {:.3}",
            pair + 1,
            a / b
        );
        ratios.push(a / b);
    }
    ratios
}

/// Prints the ratios of one paired run: median, quartiles, range, and how often pooler won.
fn report_pairs(label: &str, statement: &str, secs: f64, mut ratios: Vec<f64>) {
    let pairs = ratios.len();
    ratios.sort_by(f64::total_cmp);
    // Quantiles by linear interpolation between the nearest ranks.
    let q = |f: f64| {
        let at = (ratios.len() - 1) as f64 * f;
        let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
        ratios[lo] + (ratios[hi] - ratios[lo]) * (at - lo as f64)
    };
    let faster = ratios.iter().filter(|&&r| r > 1.0).count();
    println!(
        "{label}: pooler-postgres ÷ deadpool-postgres, {statement}, pairs of {secs} s: {pairs}; \
         median {:.3}, quartiles {:.3}–{:.3}, range {:.3}–{:.3}; pooler faster in {faster}",
        q(0.5),
        q(0.25),
        q(0.75),
        ratios[0],
        ratios[pairs - 1]
    );
}
