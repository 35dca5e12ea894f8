//! `overload-live`: the latency step against the real PostgreSQL, beside the simulation of
//! the same shape (docs/overload.md, "Live").
//!
//! The database is made to serve `CAPACITY` queries at once by itself: each query is a
//! PL/pgSQL function that takes one of `CAPACITY` transaction-scoped advisory locks, dealt
//! round robin (waiting inside the server, in order, while its lock is held), and then
//! sleeps the latency a one-row table says (±20 %). The step raises that latency ten-fold for `STEP` seconds. The pools are the
//! simulation's modes, through pooler-postgres, whose latency signal is the server's own
//! time per request; the load is the same open Poisson arrivals with the same budget.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pooler_sim::Mode;
use tokio::time::Instant;

const CAPACITY: usize = 10;
const LATENCY: f64 = 0.010;
const RATE: f64 = 700.0;
const BUDGET: Duration = Duration::from_secs(1);
/// Seconds before the step, of the step, and after it.
const BEFORE: f64 = 10.0;
const STEP: f64 = 15.0;
const AFTER: f64 = 5.0;

const SETUP: &str = "
CREATE TABLE IF NOT EXISTS pooler_live (latency float8 NOT NULL);
DELETE FROM pooler_live;
INSERT INTO pooler_live VALUES (0.010);
CREATE SEQUENCE IF NOT EXISTS pooler_live_ticket;
CREATE OR REPLACE FUNCTION pooler_live_query(capacity int) RETURNS void AS $$
DECLARE
  lat float8;
BEGIN
  SELECT latency INTO lat FROM pooler_live;
  -- Round robin over the slots, each a lock whose waiters the server serves in order.
  PERFORM pg_advisory_xact_lock(7341, (nextval('pooler_live_ticket') % capacity)::int);
  PERFORM pg_sleep(lat * (0.8 + 0.4 * random()));
END $$ LANGUAGE plpgsql;
";

/// What [`SETUP`] made, dropped once a run is over.
const TEARDOWN: &str = "
DROP FUNCTION IF EXISTS pooler_live_query(int);
DROP SEQUENCE IF EXISTS pooler_live_ticket;
DROP TABLE IF EXISTS pooler_live;
";

/// How one request ended, and when (seconds from the start).
#[derive(Debug, Clone, Copy)]
struct Request {
    arrived: f64,
    /// From arrival to the query's end, when it got a member.
    admitted: Option<f64>,
    good: bool,
}

/// Goodput share of what the database could serve in the step, and the admitted p99 there.
fn score(requests: &[Request]) -> (f64, f64) {
    let (from, to) = (BEFORE, BEFORE + STEP);
    let inside: Vec<&Request> = requests
        .iter()
        .filter(|r| r.arrived >= from && r.arrived < to)
        .collect();
    let good = inside.iter().filter(|r| r.good).count() as f64 / STEP;
    let servable = RATE.min(CAPACITY as f64 / (LATENCY * 10.0));
    let mut admitted: Vec<f64> = inside.iter().filter_map(|r| r.admitted).collect();
    admitted.sort_by(f64::total_cmp);
    let p99 = admitted
        .get(((admitted.len().saturating_sub(1)) as f64 * 0.99).round() as usize)
        .copied()
        .unwrap_or(0.0);
    (good / servable, p99)
}

async fn one(pool: pooler_postgres::Pool, mode: Mode, begun: Instant) -> Request {
    let arrival = Instant::now();
    let deadline = arrival + BUDGET;
    let mut r = Request {
        arrived: (arrival - begun).as_secs_f64(),
        admitted: None,
        good: false,
    };
    let Ok(conn) = pool.take_member(BUDGET).await else {
        return r;
    };
    let query = conn.execute("SELECT pooler_live_query($1)", &[&(CAPACITY as i32)]);
    let done = if mode.cancels() {
        conn.until(deadline, query).await.is_ok()
    } else {
        query.await.is_ok()
    };
    let ended = Instant::now();
    r.admitted = Some((ended - arrival).as_secs_f64());
    r.good = done && ended <= deadline;
    r
}

/// One live run in `mode`: its goodput share and p99 through the step.
async fn live(mode: Mode) -> (f64, f64) {
    let url = crate::backends::postgres_url();
    let manager = pooler_postgres::PgManager::new(&url)
        .expect("a URL")
        .neutral_functions(["pooler_live_query"]);
    let config = mode.config(
        &format!("live-{}", mode.name()),
        CAPACITY,
        &toml::Table::new(),
    );
    // The set-up and the step go through a connection of their own, outside the pool.
    let (control, connection) =
        pooler_postgres::tokio_postgres::connect(&url, pooler_postgres::tokio_postgres::NoTls)
            .await
            .expect("a control connection");
    let driver = tokio::spawn(connection);
    control.batch_execute(SETUP).await.expect("the set-up runs");
    let pool = pooler::Pool::start(config, manager)
        .await
        .expect("the pool starts");
    let requests = Arc::new(Mutex::new(Vec::new()));
    let begun = Instant::now();
    let stepper = tokio::spawn(async move {
        for (at, latency) in [(BEFORE, LATENCY * 10.0), (BEFORE + STEP, LATENCY)] {
            tokio::time::sleep_until(begun + Duration::from_secs_f64(at)).await;
            control
                .execute("UPDATE pooler_live SET latency = $1", &[&latency])
                .await
                .expect("the latency is set");
        }
        control
    });
    let mut rng = fastrand::Rng::with_seed(42);
    let mut at = 0.0;
    let mut tasks = Vec::new();
    while at < BEFORE + STEP + AFTER {
        at += -rng.f64().max(1e-12).ln() / RATE;
        tokio::time::sleep_until(begun + Duration::from_secs_f64(at)).await;
        let (pool, requests) = (pool.clone(), requests.clone());
        tasks.push(tokio::spawn(async move {
            let r = one(pool, mode, begun).await;
            requests.lock().expect("requests").push(r);
        }));
    }
    for t in tasks {
        t.await.expect("a request's task");
    }
    let control = stepper.await.expect("the step");
    control
        .batch_execute(TEARDOWN)
        .await
        .expect("the tear-down runs");
    driver.abort();
    pool.close(pooler::Shutdown::Immediate).await;
    let requests = std::mem::take(&mut *requests.lock().expect("requests"));
    score(&requests)
}

/// The same step in the simulation, over `seeds` seeds: goodput share and p99, min and max.
fn simulated(mode: Mode, seeds: u64) -> ((f64, f64), (f64, f64)) {
    let text = format!(
        "about = \"the live step\"\nlength = \"{}s\"\nbudget = \"1s\"\nwindow = [\"{}s\", \"{}s\"]\n\
         modes = [\"{}\"]\n[database]\ncapacity = {CAPACITY}\nlatency = \"10ms\"\nconnect = \"5ms\"\n\
         [load]\nrate = {RATE}\n[[change]]\nat = \"{}s\"\nlatency = \"100ms\"\n[[change]]\nat = \"{}s\"\nlatency = \"10ms\"\n",
        BEFORE + STEP + AFTER,
        BEFORE,
        BEFORE + STEP,
        mode.name(),
        BEFORE,
        BEFORE + STEP,
    );
    let mut sc: pooler_sim::Scenario = toml::from_str(&text).expect("the live step reads");
    sc.name = "live-step".into();
    let scores: Vec<_> = (0..seeds)
        .map(|seed| pooler_sim::run_seeded(&sc, mode, seed))
        .map(|s| (s.goodput_share(), s.p99))
        .collect();
    let min = |f: fn(&(f64, f64)) -> f64| scores.iter().map(f).fold(f64::INFINITY, f64::min);
    let max = |f: fn(&(f64, f64)) -> f64| scores.iter().map(f).fold(0.0, f64::max);
    ((min(|s| s.0), max(|s| s.0)), (min(|s| s.1), max(|s| s.1)))
}

/// How far a live figure may stand from the simulation's range over seeds before `--check`
/// fails: goodput share points under its lowest, and the share over its highest p99. Wider
/// than the agreement docs/overload.md reports: the live run shares two cores with the
/// server, and its tail moves with the machine (p99 239–306 ms in five runs on one machine,
/// against the simulation's 218 at most), while its goodput holds (95–97 %). A check that
/// fails on a busy machine's noise proves nothing; this one is there to catch the two
/// parting ways (a database serving its waiting queries out of order once gave a p99 near
/// 800 ms).
const CHECK_SHARE_POINTS: f64 = 0.10;
const CHECK_P99_OVER: f64 = 1.0;

/// Runs the step live in `fixed` and `vegas`, prints each beside the simulation's range;
/// with `check`, fails when a live figure stands past the margins above. A mode whose live
/// run disagrees is run once more, and only a second disagreement fails: the two parting
/// ways disagree every time, where a moment of the machine's (a live p99 of 741 ms in one
/// CI run, 229 and 248 ms in the next two runs of the same build) does not.
pub(crate) async fn main(check: bool) {
    println!(
        "| mode | live goodput share | simulated (8 seeds) | live p99 | simulated (8 seeds) |\n|---|---|---|---|---|"
    );
    let mut disagreements = Vec::new();
    for mode in [Mode::Fixed, Mode::Vegas] {
        // The simulation builds its own paused runtime: on a thread of its own.
        let simulated = std::thread::spawn(move || simulated(mode, 8))
            .join()
            .expect("the simulation");
        let mut found = row(mode, live(mode).await, simulated);
        if check && !found.is_empty() {
            found = row(mode, live(mode).await, simulated);
        }
        disagreements.extend(found);
    }
    if check && !disagreements.is_empty() {
        eprintln!("the live step disagrees with the simulation (twice in a row):");
        for d in &disagreements {
            eprintln!("  {d}");
        }
        std::process::exit(1);
    }
}

/// Prints a live run of `mode` beside the simulation's range; how it stands past the
/// margins, if it does.
fn row(
    mode: Mode,
    (share, p99): (f64, f64),
    ((s_lo, s_hi), (p_lo, p_hi)): ((f64, f64), (f64, f64)),
) -> Vec<String> {
    println!(
        "| {} | {:.0} % | {:.0}–{:.0} % | {:.0} ms | {:.0}–{:.0} ms |",
        mode.name(),
        share * 100.0,
        s_lo * 100.0,
        s_hi * 100.0,
        p99 * 1e3,
        p_lo * 1e3,
        p_hi * 1e3,
    );
    let mut disagreements = Vec::new();
    if share < s_lo - CHECK_SHARE_POINTS {
        disagreements.push(format!(
            "{}: live goodput {:.0} % under the simulation's {:.0} % by more than {:.0} points",
            mode.name(),
            share * 100.0,
            s_lo * 100.0,
            CHECK_SHARE_POINTS * 100.0
        ));
    }
    if p99 > p_hi * (1.0 + CHECK_P99_OVER) {
        disagreements.push(format!(
            "{}: live p99 {:.0} ms over the simulation's {:.0} ms by more than {:.0} %",
            mode.name(),
            p99 * 1e3,
            p_hi * 1e3,
            CHECK_P99_OVER * 100.0
        ));
    }
    disagreements
}
