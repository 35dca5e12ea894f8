//! pooler's benchmarks, side by side with deadpool, bb8, qp, mobc, fastpool and r2d2.
//!
//! `cargo run --release -p pooler-bench` runs every suite (a few minutes) and writes
//! `docs/benchmarks.md` with two SVG charts beside it. `--smoke` runs each suite for a moment
//! and writes nothing (CI uses it to prove the suite runs) unless `--out DIR` is given;
//! `--out DIR` writes the report there instead of `docs/`.
//! `lifetime` alone measures the cost of `max_lifetime`; `fairness` and `grid-sample` run a
//! quick pooler-versus-deadpool subset; `metrics-share` counts the instructions pooler's
//! metrics take; `fixed-plain` and `fixed-lifetime` do a fixed amount of work for instruction
//! counting under `valgrind --tool=callgrind`.
#![allow(clippy::disallowed_methods)] // benchmarks spawn their own load

mod peers;
mod report;
mod suites;

use std::path::PathBuf;
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
    pub(crate) metrics: (f64, f64),
    pub(crate) metrics_share: Option<f64>,
    pub(crate) lifetime: (f64, f64),
    pub(crate) seconds: f64,
}

async fn take_return_pooler(config: pooler::PoolConfig, ops: u32) -> f64 {
    let pool = pooler::Pool::start(config, peers::Noop)
        .await
        .expect("valid config");
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
        metrics: (0.0, 0.0),
        metrics_share: None,
        lifetime: (0.0, 0.0),
        seconds: 0.0,
    };
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
    for name in peers::NAMES {
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
    let base = peers::pooler_config(8);
    let lifetime = pooler::PoolConfig {
        max_lifetime: Some(Duration::from_secs(3600)),
        max_lifetime_jitter: Duration::from_secs(60),
        ..base.clone()
    };
    r.lifetime = fresh(paired(base.clone(), lifetime, effort.uncontended_ops));
    eprintln!("metrics: no recorder, then a Prometheus recorder");
    let none = fresh(take_return_pooler(base.clone(), effort.uncontended_ops));
    let _handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder();
    let installed = fresh(take_return_pooler(base, effort.uncontended_ops));
    r.metrics = (none, installed);
    if effort.grid_iterations > Effort::SMOKE.grid_iterations {
        r.metrics_share = metrics_share();
    }
    r.seconds = started.elapsed().as_secs_f64();
    r
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The mode is the first argument that is neither a flag nor the value of `--out`.
    let out_at = args.iter().position(|a| a == "--out").map(|i| i + 1);
    let mode = args
        .iter()
        .enumerate()
        .find(|(i, a)| !a.starts_with("--") && Some(*i) != out_at)
        .map(|(_, a)| a.clone())
        .unwrap_or_default();
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .map_or_else(
            || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs")),
            PathBuf::from,
        );
    let smoke = args.iter().any(|a| a == "--smoke");
    let out_given = args.iter().any(|a| a == "--out");
    if mode.is_empty() {
        let effort = if smoke { Effort::SMOKE } else { Effort::FULL };
        let results = run_all(effort);
        if smoke && !out_given {
            println!("smoke run: every suite ran in {:.1} s", results.seconds);
        } else {
            report::write(&results, &out).expect("the report is written");
            println!("wrote {}", out.join("benchmarks.md").display());
        }
        return;
    }
    fresh(async {
        match mode.as_str() {
            "fairness" => {
                for name in peers::NAMES.iter().take(2) {
                    let lat = suites::fairness(name, Effort::FULL).await.expect("no hang");
                    let p50 = suites::percentile(&lat, 0.5);
                    println!(
                        "{name:<9} p50 {:.0} µs  p99 {:.1}×  p99.9 {:.1}×",
                        p50 / 1e3,
                        suites::percentile(&lat, 0.99) / p50,
                        suites::percentile(&lat, 0.999) / p50
                    );
                }
            }
            "grid-sample" => {
                for (size, tasks) in [(4, 16), (8, 64), (16, 256)] {
                    for name in ["pooler", "deadpool"] {
                        let cell = suites::grid_cell(name, size, tasks, Effort::FULL).await;
                        println!(
                            "{name:<9} size {size:>2} tasks {tasks:>3}: {:.1} µs",
                            cell.unwrap_or(f64::NAN)
                        );
                    }
                }
            }
            "metrics-share" => println!("{:?}", metrics_share()),
            "fixed-plain" => fixed_work(false).await,
            "fixed-lifetime" => fixed_work(true).await,
            "lifetime" => {
                let base = peers::pooler_config(8);
                let with = pooler::PoolConfig {
                    max_lifetime: Some(Duration::from_secs(3600)),
                    ..base.clone()
                };
                let (a, b) = paired(base, with, 200_000).await;
                println!(
                    "take+return: {a:.1} ns without max_lifetime, {b:.1} ns with ({:+.1} %)",
                    (b / a - 1.0) * 100.0
                );
            }
            other => {
                eprintln!(
                    "unknown mode `{other}`: run with no mode (or --smoke), or lifetime, fairness, \
                     grid-sample, metrics-share, fixed-plain, fixed-lifetime"
                );
                std::process::exit(2);
            }
        }
    });
}
