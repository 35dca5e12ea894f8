//! The overload simulation (docs/overload.md): a simulated database in front of real pooler
//! pools, on tokio's paused clock, so a run of minutes of simulated time takes seconds and
//! gives the same figures every time.
//!
//! The database serves `capacity` queries at once at its `latency` (±20 %, drawn per query);
//! a query that starts with more running takes proportionally longer (the database shares
//! itself), so past `capacity` concurrency adds latency and no throughput. Connecting takes
//! `connect`. A failover (`down`) ends every connection and refuses connects for a while.
//!
//! Load is open: requests arrive as a Poisson process at `rate` a second, each with a
//! `budget` (its deadline covers the wait for a member and the query). A request is *good*
//! when its query finished within its budget. Scenarios are the TOML files in `scenarios/`:
//! the database, the load, the pool keys every mode gets, and changes at given times. Each
//! scenario runs once per mode (the pool configurations compared: see [`Mode`]).
//!
//! `pooler-bench overload` scores every scenario (docs/overload.md); `pooler-demo --scenario`
//! runs one live, in real time.
#![allow(clippy::disallowed_methods)] // the simulation spawns its own load, not a pool's tasks

use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pooler::{Latency, Pool, PoolConfig, TakeError};

mod db;
mod scenario;
mod score;

use db::{Db, DbState, Outcome, Request, SimManager};
pub use scenario::{SCENARIOS, Scenario, scenario};
pub use score::Score;
use score::score;
use tokio::time::Instant;

/// The pool configurations compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `max_count` = the database's capacity; takes wait up to the budget; a query runs to
    /// its end even past its request's deadline.
    Fixed,
    /// The same, four times larger.
    Fixed4x,
    /// 4×, queue-delay shedding (50 ms over 200 ms), and each query cancelled at its
    /// request's deadline (the deadline handed to the database).
    Shed,
    /// `Shed` and `admission = "vegas"`.
    Vegas,
    /// `Shed` and `admission = "gradient"`.
    Gradient,
    /// 4× with `admission = "vegas"` and nothing else: the one switch a user turns on (no
    /// `queue_target` of its own, queries run to their end).
    VegasAlone,
}

impl Mode {
    /// The mode a scenario file names.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Mode> {
        [
            Mode::Fixed,
            Mode::Fixed4x,
            Mode::Shed,
            Mode::Vegas,
            Mode::Gradient,
            Mode::VegasAlone,
        ]
        .into_iter()
        .find(|m| m.name() == name)
    }

    /// Its name in scenario files and reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Mode::Fixed => "fixed",
            Mode::Fixed4x => "fixed-4x",
            Mode::Shed => "shed",
            Mode::Vegas => "vegas",
            Mode::Gradient => "gradient",
            Mode::VegasAlone => "vegas-alone",
        }
    }

    /// Whether a query is cancelled when its request's deadline passes.
    #[must_use]
    pub fn cancels(self) -> bool {
        !matches!(self, Mode::Fixed | Mode::Fixed4x | Mode::VegasAlone)
    }

    /// The pool configuration of this mode, named `name`, for a database serving `capacity`
    /// at once, with the scenario's pool keys `extra` on top.
    ///
    /// # Panics
    ///
    /// When `extra` holds a key or value a pools file refuses.
    #[must_use]
    pub fn config(self, name: &str, capacity: usize, extra: &toml::Table) -> PoolConfig {
        let max = if self == Mode::Fixed {
            capacity
        } else {
            capacity * 4
        };
        let mut table = toml::Table::new();
        table.insert("name".into(), name.into());
        table.insert("init_count".into(), (capacity as i64).into());
        table.insert("max_count".into(), (max as i64).into());
        table.insert("queue_max".into(), 100_000.into());
        if self.cancels() {
            table.insert("queue_target".into(), "50ms".into());
            table.insert("queue_interval".into(), "100ms".into());
        }
        match self {
            Mode::Vegas | Mode::VegasAlone => {
                drop(table.insert("admission".into(), "vegas".into()));
            }
            Mode::Gradient => drop(table.insert("admission".into(), "gradient".into())),
            _ => {}
        }
        for (k, v) in extra {
            table.insert(k.clone(), v.clone());
        }
        PoolConfig::from_toml_str(&toml::to_string(&table).expect("a table"))
            .unwrap_or_else(|e| panic!("scenario pool keys: {e}"))
    }
}

/// Runs every scenario (or the one named `only`) in each of its modes, on a paused clock:
/// (scenario, mode, score).
///
/// # Panics
///
/// When a scenario file does not read or names a mode that does not exist.
#[must_use]
pub fn run_all(only: Option<&str>) -> Vec<(Scenario, Mode, Score)> {
    run_all_seeded(only, 0)
}

/// [`run_all`] with [`run_seeded`]'s `seed`.
///
/// # Panics
///
/// As [`run_all`].
#[must_use]
pub fn run_all_seeded(only: Option<&str>, seed: u64) -> Vec<(Scenario, Mode, Score)> {
    let mut out = Vec::new();
    for (name, _) in SCENARIOS
        .iter()
        .filter(|(n, _)| only.is_none_or(|o| o == *n))
    {
        let scenario = scenario(name).unwrap_or_else(|e| panic!("{e}"));
        for mode in &scenario.modes {
            let mode = Mode::from_name(mode)
                .unwrap_or_else(|| panic!("{}: no mode `{mode}`", scenario.name));
            let score = run_seeded(&scenario, mode, seed);
            out.push((scenario.clone(), mode, score));
        }
    }
    out
}

/// One scenario in one mode, on a paused clock: minutes of simulated time in seconds. The
/// baseline's run: [`run_seeded`] with seed 0.
#[must_use]
pub fn run(scenario: &Scenario, mode: Mode) -> Score {
    run_seeded(scenario, mode, 0)
}

/// [`run`] with every random draw — arrivals, query latencies, pooler's own jitter (start
/// backoff, lifetimes) — seeded from `seed`: the same seed gives the same figures every
/// time, and other seeds show the spread.
#[must_use]
pub fn run_seeded(scenario: &Scenario, mode: Mode, seed: u64) -> Score {
    // pooler's jitter draws from this thread's generator.
    fastrand::seed(1 + seed);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(simulate(scenario, mode, false, seed))
}

/// One scenario in one mode in real time, printing a line a second of what happened in it:
/// requests arrived, served within budget, shed, timed out, late; the members in use and
/// the admission limit.
#[must_use]
pub fn run_live(scenario: &Scenario, mode: Mode) -> Score {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    runtime.block_on(simulate(scenario, mode, true, 0))
}

async fn simulate(sc: &Scenario, mode: Mode, live: bool, seed: u64) -> Score {
    let begun = Instant::now();
    let db = Arc::new(Db {
        state: Mutex::new(DbState {
            params: sc.database,
            running: 0,
            epoch: 0,
            down_until: None,
            connects: Vec::new(),
            connecting: 0,
            peak_connecting: 0,
            rng: fastrand::Rng::with_seed(7 + seed),
            begun,
        }),
    });
    let mut pools = Vec::new();
    for i in 0..sc.pools {
        let config = mode.config(&format!("{}-{i}", sc.name), sc.database.capacity, &sc.pool);
        let pool = Pool::start(config, SimManager(db.clone()))
            .await
            .expect("the pool starts");
        pools.push(pool);
    }
    // The run begins once the pools are up: their first connects are not counted.
    let begun = Instant::now();
    {
        let mut s = db.lock();
        s.begun = begun;
        s.connects.clear();
        s.peak_connecting = s.connecting;
    }
    let requests = Arc::new(Mutex::new(Vec::new()));
    // The changes, applied in time.
    let changes = {
        let (db, changes) = (db.clone(), sc.change.clone());
        tokio::spawn(async move {
            for c in changes {
                tokio::time::sleep_until(begun + c.at).await;
                let mut s = db.lock();
                if let Some(l) = c.latency {
                    s.params.latency = l;
                }
                if let Some(n) = c.capacity {
                    s.params.capacity = n;
                }
                if let Some(d) = c.down {
                    s.epoch += 1;
                    s.down_until = Some(Instant::now() + d);
                }
            }
        })
    };
    let arrived = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let reporter = live.then(|| {
        let (pool, requests, arrived, db) = (
            pools[0].clone(),
            requests.clone(),
            arrived.clone(),
            db.clone(),
        );
        tokio::spawn(report_live(pool, requests, arrived, db, begun))
    });
    let mut rng = fastrand::Rng::with_seed(42 + seed);
    let mut rate = sc.load.rate;
    let mut next_change = 0;
    let mut at = Duration::ZERO;
    let mut tasks = Vec::new();
    let mut n = 0usize;
    loop {
        at += Duration::from_secs_f64(-rng.f64().max(1e-12).ln() / rate.max(1e-9));
        if at >= sc.length {
            break;
        }
        while let Some(c) = sc.change.get(next_change).filter(|c| c.at <= at) {
            if let Some(r) = c.rate {
                rate = r;
            }
            next_change += 1;
        }
        tokio::time::sleep_until(begun + at).await;
        arrived.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pool = pools[n % pools.len()].clone();
        n += 1;
        let (db, requests, budget) = (db.clone(), requests.clone(), sc.budget);
        tasks.push(tokio::spawn(async move {
            let request = one_request(&pool, &db, mode, budget, begun).await;
            requests.lock().expect("requests").push(request);
        }));
        if tasks.len() > 4096 {
            tasks.retain(|t| !t.is_finished());
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    changes.abort();
    if let Some(reporter) = reporter {
        reporter.abort();
    }
    for pool in pools {
        pool.close(pooler::Shutdown::Immediate).await;
    }
    let requests = std::mem::take(&mut *requests.lock().expect("requests"));
    let s = db.lock();
    score(sc, &requests, &s)
}

/// Prints, each second, what the last second's requests came to.
async fn report_live(
    pool: Pool<SimManager>,
    requests: Arc<Mutex<Vec<Request>>>,
    arrived: Arc<std::sync::atomic::AtomicUsize>,
    db: Arc<Db>,
    begun: Instant,
) {
    let (mut seen, mut arrivals) = (0, 0);
    let mut tick = tokio::time::interval_at(begun + Duration::from_secs(1), Duration::from_secs(1));
    loop {
        tick.tick().await;
        let ended: Vec<Request> = {
            let requests = requests.lock().expect("requests");
            let new = requests[seen..].to_vec();
            seen = requests.len();
            new
        };
        let now = arrived.load(std::sync::atomic::Ordering::Relaxed);
        let count = |o: Outcome| ended.iter().filter(|r| r.outcome == o).count();
        let u = pool.utilization();
        let latency = db.lock().params.latency;
        let line = format!(
            "t={:>4}s  arrived {:>5}  good {:>5}  shed {:>5}  timed out {:>4}  late {:>4}  in use {:>3}  admits {:>4}  database latency {:?}",
            begun.elapsed().as_secs(),
            now - arrivals,
            count(Outcome::Good),
            count(Outcome::Shed),
            count(Outcome::TimedOut),
            count(Outcome::Late) + count(Outcome::Cancelled),
            u.in_use_count,
            u.admission_limit.map_or("-".into(), |l| l.to_string()),
            latency,
        );
        // A closed output (piped into `head`) ends the report quietly.
        if writeln!(std::io::stdout().lock(), "{line}").is_err() {
            return;
        }
        arrivals = now;
    }
}

async fn one_request(
    pool: &Pool<SimManager>,
    db: &Db,
    mode: Mode,
    budget: Duration,
    begun: Instant,
) -> Request {
    let connect = db.lock().params.connect;
    let arrival = Instant::now();
    let deadline = arrival + budget;
    let mut request = Request {
        arrived: arrival - begun,
        outcome: Outcome::Failed,
        admitted: None,
        waited: false,
    };
    let mut member = match pool.take_member(budget).await {
        Ok(m) => m,
        Err(e) => {
            request.outcome = match e {
                TakeError::Shed { .. } | TakeError::Stale { .. } | TakeError::OverLimit { .. } => {
                    Outcome::Shed
                }
                TakeError::Timeout { .. } => Outcome::TimedOut,
                _ => Outcome::Failed,
            };
            request.waited = Instant::now() - arrival >= connect / 2;
            return request;
        }
    };
    request.waited = Instant::now() - arrival >= connect / 2;
    let epoch = member.epoch;
    member.last = Latency::Unmeasured;
    let began = Instant::now();
    let ran = if mode.cancels() {
        tokio::time::timeout_at(deadline, db.query(epoch)).await
    } else {
        Ok(db.query(epoch).await)
    };
    let ended = Instant::now();
    member.last = match ran {
        Ok(Ok(())) => Latency::Measured(ended - began),
        Err(_) => Latency::Late,
        Ok(Err(())) => Latency::Unmeasured,
    };
    request.admitted = Some(ended - arrival);
    request.outcome = match ran {
        Err(_) => Outcome::Cancelled,
        Ok(Err(())) => {
            pooler::Member::fail(member);
            return Request {
                outcome: Outcome::Failed,
                ..request
            };
        }
        Ok(Ok(())) if ended <= deadline => Outcome::Good,
        Ok(Ok(())) => Outcome::Late,
    };
    drop(member);
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file in `scenarios/` is in [`SCENARIOS`] and reads, and every mode it names
    /// exists.
    #[test]
    fn every_scenario_file_is_listed_and_reads() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let path = e.ok()?.path();
                (path.extension()? == "toml")
                    .then(|| path.file_stem()?.to_str().map(str::to_owned))?
            })
            .collect();
        files.sort();
        let listed: Vec<String> = SCENARIOS.iter().map(|(n, _)| (*n).to_owned()).collect();
        assert_eq!(files, listed);
        for name in listed {
            let s = scenario(&name).unwrap();
            assert!(
                s.modes.iter().all(|m| Mode::from_name(m).is_some()),
                "{name}"
            );
        }
        assert!(scenario("nope").unwrap_err().contains("latency-step"));
    }
}
