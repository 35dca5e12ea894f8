//! pooler's benchmarks, side by side with deadpool, bb8, qp, mobc, fastpool and r2d2.
//!
//! `cargo run --release -p pooler-bench` runs every suite (a few minutes) and writes
//! `docs/benchmarks.md` with two SVG charts beside it. `--smoke` runs each suite for a moment
//! and writes nothing (CI uses it to prove the suite runs) unless `--out DIR` is given;
//! `--out DIR` writes the report there instead of `docs/`. `--save-baseline NAME` saves every
//! figure of the run as `docs/baselines/NAME.toml`; `--baseline NAME` compares the run with a
//! saved one, figure by figure, and puts the comparison in the report.
//! `backends` runs PostgreSQL and Redis through pooler's, deadpool's and bb8's adapters (and
//! MariaDB through pooler-mysql and mysql_async's pool) and writes
//! `docs/benchmarks-backends.md` (see `backends.rs`); `--rounds N` sets the rounds (3), and
//! `--only postgresql|redis|mariadb` runs one backend and prints its table instead.
//! `postgres-paired [--pairs N]` opens pooler-postgres's and deadpool-postgres's default pools
//! side by side and measures them in alternating 1 s runs, N pairs (20) per pool size, and
//! prints the spread of the pairs' ratios (`--smoke`: one short pair). `pgbouncer-paired`
//! does the same through a PgBouncer of its own in transaction mode (Debian's `pgbouncer`).
//! `handoff-fixed pooler|pooler-member|deadpool N` does a fixed amount of contended work
//! for counting instructions under callgrind: 256 tasks over a pool of 8 on one thread, each
//! taking (`pooler-member`: through `take_member`), yielding once and returning N times
//! (every take after the first few queues and is handed its member by a return; two
//! counts' difference over the takes between them is the cost of one queued take and its
//! return).
//! `driver-cost` compares a supervised member driver with a plain spawn; `driver-fixed
//! plain|supervised` and `postgres-fixed pooler|pooler-nothing|deadpool [armed] [--tasks N]
//! [--queries N]` do a fixed amount of work for counting instructions under callgrind
//! (`armed`: with a timer pending; `--tasks N`: from N tasks over a pool of 8; `--queries N`:
//! N `SELECT 1` in all, 20 000 unless given; two counts' difference divided by theirs is
//! the cost of one query, start-up cancelled out).
//! `overload [--only SCENARIO] [--write] [--check]` runs the overload simulation
//! (the `pooler-sim` crate, docs/overload.md): prints the scores (`--seeds N`: each score's
//! min / median / max over seeds 0..N instead, and with `--goals` the goals judged over
//! them), `--write` rewrites the report, its chart and its baseline (the worst of eight
//! seeds), `--check` fails when a score's worst of eight seeds falls below the baseline.
//! `overload-live [--check]` runs the latency step against the real PostgreSQL in `fixed` and
//! `vegas` and prints each beside the simulation's range over eight seeds (docs/overload.md,
//! "Live"); `--check` fails when a live figure stands past the stated margin from that range.
//! `instructions` alone counts instructions per take+return with callgrind (see
//! `instructions.rs`).
//! `lifetime` alone measures the cost of `max_lifetime` and of `leak_detection_threshold`;
//! `churn-memory` prints the resident memory while a million members are replaced under
//! `max_lifetime`; `fairness [--rounds N]`
//! (pooler's `take` and `take_member` and deadpool, in turned orders, each on a runtime of its
//! own: the spread of each one's p50 and p99 over the rounds), `grid-sample` and
//! `uncontended` run a quick pooler-versus-deadpool subset; `metrics-share` counts the
//! instructions pooler's metrics take; `fixed-plain` and `fixed-lifetime` do a fixed amount
//! of work for instruction counting under `valgrind --tool=callgrind`.
//!
//! A count flag (`--rounds`, `--seeds`, `--pairs`, `--tasks`, `--queries`) takes a whole
//! number of at least one; anything else ends the run at once, naming the flag and the value
//! (exit status 2), rather than running with a default or a round count of zero.
#![allow(clippy::disallowed_methods)] // benchmarks spawn their own load

mod backends;
mod baseline;
mod cli;
mod driver;
mod instructions;
mod overload_live;
mod overload_report;
mod peers;
mod report;
mod suites;

use std::time::{Duration, Instant};

use suites::Effort;

/// Everything one run measured.
pub(crate) struct Results {
    pub(crate) grid: Vec<(&'static str, usize, usize, Option<f64>)>,
    pub(crate) uncontended: Vec<(&'static str, Option<f64>)>,
    pub(crate) fairness: Vec<(&'static str, Option<Vec<f64>>)>,
    pub(crate) sizes: Vec<(usize, f64)>,
    pub(crate) rejection: f64,
    pub(crate) churn: (Duration, Duration),
    pub(crate) parallel_start: Duration,
    /// (takers, ms to queue them all, ms from the last deadline until the last timed out).
    pub(crate) mass_timeout: Vec<(usize, f64, f64)>,
    pub(crate) metrics: (f64, f64),
    pub(crate) metrics_share: Option<f64>,
    pub(crate) lifetime: (f64, f64),
    pub(crate) instructions: Vec<(&'static str, instructions::Op, Option<instructions::PerOp>)>,
    /// A comparison with a saved baseline: its name and, per figure, (before, now, change).
    pub(crate) against: Option<(String, Vec<baseline::Change>)>,
    pub(crate) seconds: f64,
}

impl Results {
    /// Every figure of the run by a stable name, for baselines.
    pub(crate) fn figures(&self) -> std::collections::BTreeMap<String, f64> {
        let mut f = std::collections::BTreeMap::new();
        for (name, size, tasks, cell) in &self.grid {
            if let Some(v) = cell {
                f.insert(format!("grid.{size}.{tasks}.{name} µs"), *v);
            }
        }
        for (name, ns) in &self.uncontended {
            if let Some(v) = ns {
                f.insert(format!("uncontended.{name} ns"), *v);
            }
        }
        for (name, lat) in &self.fairness {
            if let Some(lat) = lat {
                f.insert(
                    format!("fairness.{name}.p50 ns"),
                    suites::percentile(lat, 0.5),
                );
                f.insert(
                    format!("fairness.{name}.p99 ns"),
                    suites::percentile(lat, 0.99),
                );
            }
        }
        for (who, op, per_op) in &self.instructions {
            if let Some(v) = per_op {
                f.insert(format!("instructions.{who}.{}", op.name()), v.instructions);
                f.insert(format!("atomics.{who}.{}", op.name()), v.atomics);
            }
        }
        f.insert("rejection ns".into(), self.rejection);
        f.insert("metrics.none ns".into(), self.metrics.0);
        f.insert("metrics.prometheus ns".into(), self.metrics.1);
        f.insert(
            "parallel_start ms".into(),
            self.parallel_start.as_secs_f64() * 1e3,
        );
        f
    }
}

async fn take_return_pooler(config: pooler::PoolConfig, ops: u32) -> f64 {
    take_return_recorded(config, ops, None).await
}

/// Nanoseconds per uncontended `try_take_member`+return (median of 11 runs), with the pool's
/// metrics registered with `recorder` if one is given (a thread-local recorder, so runs with
/// and without one can be interleaved in one process).
async fn take_return_recorded(
    config: pooler::PoolConfig,
    ops: u32,
    recorder: Option<&metrics_exporter_prometheus::PrometheusRecorder>,
) -> f64 {
    let local = recorder.map(|r| metrics::set_default_local_recorder(r));
    let pool = pooler::Pool::start(config, peers::Noop)
        .await
        .expect("valid config");
    drop(local);
    let mut samples = Vec::new();
    for _ in 0..11 {
        let t = Instant::now();
        for _ in 0..ops {
            let m = pool.try_take_member().expect("a free member");
            std::hint::black_box(&*m);
        }
        samples.push(t.elapsed().as_nanos() as f64 / f64::from(ops));
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// The cost of a take+return with no recorder and with a Prometheus recorder: medians of 7
/// interleaved runs each.
async fn metrics_cost(ops: u32) -> (f64, f64) {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let base = peers::pooler_config(8);
    let (mut none, mut prometheus) = (Vec::new(), Vec::new());
    for round in 0..7 {
        let with = round % 2 == 1;
        for recorded in [with, !with] {
            let run = take_return_recorded(base.clone(), ops, recorded.then_some(&recorder)).await;
            if recorded {
                prometheus.push(run)
            } else {
                none.push(run)
            }
        }
    }
    none.sort_by(f64::total_cmp);
    prometheus.sort_by(f64::total_cmp);
    (none[3], prometheus[3])
}

/// Median of interleaved runs of two configs, to spread machine noise over both.
async fn paired(a: pooler::PoolConfig, b: pooler::PoolConfig, ops: u32) -> (f64, f64) {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for round in 0..7 {
        if round % 2 == 0 {
            x.push(take_return_pooler(a.clone(), ops).await);
            y.push(take_return_pooler(b.clone(), ops).await);
        } else {
            y.push(take_return_pooler(b.clone(), ops).await);
            x.push(take_return_pooler(a.clone(), ops).await);
        }
    }
    x.sort_by(f64::total_cmp);
    y.sort_by(f64::total_cmp);
    (x[3], y[3])
}

/// Share of instructions spent in pooler's metrics code per take+return with no recorder,
/// counted by callgrind running this binary's `fixed-plain` mode. `None` without valgrind.
fn metrics_share() -> Option<f64> {
    let exe = std::env::current_exe().ok()?;
    let out = std::env::temp_dir().join(format!("pooler-bench-cg-{}", std::process::id()));
    let status = std::process::Command::new("valgrind")
        .args(["--tool=callgrind", "-q"])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(&exe)
        .arg("fixed-plain")
        .status()
        .ok()?;
    if !status.success() {
        return None;
    }
    let annotated = std::process::Command::new("callgrind_annotate")
        .arg("--inclusive=no")
        .arg(&out)
        .output()
        .ok()?;
    let _ = std::fs::remove_file(&out);
    let text = String::from_utf8_lossy(&annotated.stdout);
    let number = |line: &str| -> Option<f64> {
        line.split_whitespace()
            .next()?
            .replace(',', "")
            .parse()
            .ok()
    };
    let total = text
        .lines()
        .find(|l| l.contains("PROGRAM TOTALS"))
        .and_then(number)?;
    // Inlined code is attributed to its source file (release builds keep line tables):
    // pooler's metrics module and the `metrics` facade itself. Only per-line rows count:
    // call rows ("<count> (<share>)  => callee") are already counted where they land.
    let is_call = |line: &str| {
        line.split_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with("=>"))
    };
    let metrics: f64 = text
        .lines()
        .filter(|l| !is_call(l))
        .filter(|l| l.contains("/pooler/src/metrics.rs:") || l.contains("/metrics-0."))
        .filter_map(number)
        .sum();
    Some(metrics / total)
}

/// Runs `work` on a fresh 2-worker runtime and shuts it down after, so nothing a contender
/// leaves running (reapers, cleaners, blocking threads, tasks of a hung run) disturbs the next
/// measurement.
fn fresh<F: std::future::Future>(work: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let out = runtime.block_on(work);
    runtime.shutdown_background();
    out
}

/// `fairness [--rounds N]`: pooler's `take`, its `take_member` and deadpool, each round in
/// a turned order (the first of a round is the next one's last) and each on a runtime of
/// its own, so no contender always runs first or after the same one; the spread of each
/// one's p50 and p99 over the rounds.
fn fairness_rounds(rounds: usize) {
    const WHO: [&str; 3] = ["pooler", "pooler-member", "deadpool"];
    let mut seen: [Vec<(f64, f64)>; 3] = Default::default();
    for round in 0..rounds {
        for turn in 0..WHO.len() {
            let i = (round + turn) % WHO.len();
            let lat = fresh(suites::fairness(WHO[i], Effort::FULL)).expect("no hang");
            seen[i].push((
                suites::percentile(&lat, 0.5) / 1e3,
                suites::percentile(&lat, 0.99) / 1e3,
            ));
        }
    }
    let spread = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        format!(
            "{:.0} / {:.0} / {:.0}",
            v[0],
            v[v.len() / 2],
            v[v.len() - 1]
        )
    };
    println!("{rounds} rounds, min / median / max µs");
    for (name, figures) in WHO.iter().zip(&seen) {
        println!(
            "{name:<13} p50 {}   p99 {}",
            spread(figures.iter().map(|f| f.0).collect()),
            spread(figures.iter().map(|f| f.1).collect())
        );
    }
}

fn run_all(effort: Effort) -> Results {
    let started = Instant::now();
    let mut r = Results {
        grid: Vec::new(),
        uncontended: Vec::new(),
        fairness: Vec::new(),
        sizes: Vec::new(),
        rejection: 0.0,
        churn: (Duration::ZERO, Duration::ZERO),
        parallel_start: Duration::ZERO,
        mass_timeout: Vec::new(),
        metrics: (0.0, 0.0),
        metrics_share: None,
        lifetime: (0.0, 0.0),
        instructions: Vec::new(),
        against: None,
        seconds: 0.0,
    };
    if instructions::available() {
        eprintln!("instructions per operation (callgrind)");
        r.instructions = if effort.grid_iterations > Effort::SMOKE.grid_iterations {
            instructions::measure(&instructions::MEASURED, 100_000)
        } else {
            instructions::measure(&instructions::MEASURED[..1], 100)
        };
    }
    eprintln!("grid: pool size × tasks × 10 take/returns each");
    for size in [4, 8, 16] {
        for tasks in [4, 16, 64, 256] {
            for name in peers::NAMES {
                let cell = fresh(suites::grid_cell(name, size, tasks, effort));
                eprintln!(
                    "  {name:<9} size {size:>2} tasks {tasks:>3}: {}",
                    cell.map_or("hung".into(), |c| format!("{c:.1} µs"))
                );
                r.grid.push((name, size, tasks, cell));
            }
        }
    }
    eprintln!("uncontended");
    for name in peers::NAMES {
        let ns = fresh(suites::uncontended(name, 8, effort));
        eprintln!(
            "  {name:<9} {}",
            ns.map_or("hung".into(), |n| format!("{n:.0} ns"))
        );
        r.uncontended.push((name, ns));
    }
    eprintln!("fairness");
    for name in peers::FAIRNESS {
        let lat = fresh(suites::fairness(name, effort));
        eprintln!(
            "  {name:<9} {}",
            lat.as_ref().map_or("hung".into(), |l| format!(
                "p50 {:.0} ns, p99 {:.0} ns",
                suites::percentile(l, 0.5),
                suites::percentile(l, 0.99)
            ))
        );
        r.fairness.push((name, lat));
    }
    eprintln!("pool size, rejection, churn, parallel start, lifetime");
    for size in [5, 1_000, 100_000] {
        r.sizes.push((
            size,
            fresh(take_return_pooler(
                peers::pooler_config(size),
                effort.uncontended_ops,
            )),
        ));
    }
    r.rejection = fresh(suites::rejection(effort));
    r.churn = fresh(suites::churn());
    r.parallel_start = fresh(suites::parallel_start());
    let counts: &[usize] = if effort.grid_iterations > Effort::SMOKE.grid_iterations {
        &[25_000, 50_000, 100_000]
    } else {
        &[1_000]
    };
    for &n in counts {
        let (filled, lag) = suites::mass_timeout(n);
        r.mass_timeout.push((n, filled, lag));
    }
    let base = peers::pooler_config(8);
    let lifetime = base
        .to_builder()
        .max_lifetime(Duration::from_secs(3600))
        .max_lifetime_jitter(Duration::from_secs(60))
        .build()
        .unwrap();
    r.lifetime = fresh(paired(base.clone(), lifetime, effort.uncontended_ops));
    eprintln!("metrics: no recorder and a Prometheus recorder, interleaved");
    r.metrics = fresh(metrics_cost(effort.uncontended_ops));
    drop(base);
    if effort.grid_iterations > Effort::SMOKE.grid_iterations {
        r.metrics_share = metrics_share();
    }
    r.seconds = started.elapsed().as_secs_f64();
    r
}

/// Resident memory of this process, in KiB (Linux `/proc/self/statm`).
fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4
}

/// Member churn under `max_lifetime`: one member stays for the whole run (its expiry a year
/// away), while another is failed and replaced `replacements` times. Prints the resident
/// memory every tenth of the run: flat means nothing is kept per replaced member.
async fn churn_memory(replacements: u64) {
    let config = peers::pooler_config(2)
        .to_builder()
        .max_lifetime(Duration::from_secs(365 * 24 * 3600 - 60))
        .max_lifetime_jitter(Duration::from_secs(30))
        .build()
        .unwrap();
    let pool = pooler::Pool::start(config, peers::Noop)
        .await
        .expect("valid config");
    let _long_lived = pool.try_take_member().expect("a free member");
    let step = (replacements / 10).max(1);
    let started = Instant::now();
    println!("replacements  rss KiB");
    for n in 0..=replacements {
        if n % step == 0 {
            println!("{n:>12}  {}", rss_kib());
        }
        let member = pool
            .take_member(Duration::from_secs(5))
            .await
            .expect("the replacement");
        pooler::Member::fail(member);
    }
    println!(
        "{replacements} replacements in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// A fixed amount of work for instruction counting: 100 000 take+return pairs.
async fn fixed_work(lifetime: bool) {
    let mut config = peers::pooler_config(8);
    if lifetime {
        config.max_lifetime = Some(Duration::from_secs(3600));
        config.max_lifetime_jitter = Duration::from_secs(60);
    }
    std::hint::black_box(take_return_pooler(config, 10_000).await);
}

fn main() {
    cli::run(&cli::Args::from_env());
}
