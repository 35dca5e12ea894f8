//! `docs/benchmarks.md` and its charts.

mod charts;
mod goals;

use std::fmt::Write as _;
use std::path::Path;

use crate::Results;
use crate::instructions::Op;
use crate::peers::NAMES;
use crate::suites::percentile;

use charts::{fairness_chart, grid_chart};
use goals::goals_section;

const PERCENTILES: [(&str, f64); 5] = [
    ("p50", 0.5),
    ("p90", 0.9),
    ("p99", 0.99),
    ("p99.9", 0.999),
    ("max", 1.0),
];

/// The version of `package` in the workspace's Cargo.lock.
fn version(package: &str) -> String {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock"))
        .unwrap_or_default();
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line == format!("name = \"{package}\"")
            && let Some(v) = lines.next().and_then(|l| l.strip_prefix("version = "))
        {
            return v.trim_matches('"').to_owned();
        }
    }
    "?".into()
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let rustc = std::process::Command::new("rustc")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    format!("{cpu}, {cores} cores; {rustc}; tokio multi-thread runtime with 2 workers")
}

fn cell(results: &Results, name: &str, size: usize, tasks: usize) -> Option<f64> {
    results
        .grid
        .iter()
        .find(|g| g.0 == name && g.1 == size && g.2 == tasks)
        .and_then(|g| g.3)
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "hung".into(), |v| format!("{v:.digits$}"))
}

pub(crate) fn write(r: &Results, dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    grid_chart(r, &dir.join("benchmarks-grid.svg"))?;
    fairness_chart(r, &dir.join("benchmarks-fairness.svg"))?;
    let mut md = String::new();
    header(&mut md, r)?;
    grid_section(&mut md, r)?;
    uncontended_section(&mut md, r)?;
    instructions_section(&mut md, r)?;
    fairness_section(&mut md, r)?;
    alone_section(&mut md, r)?;
    goals_section(&mut md, r)?;
    baseline_section(&mut md, r)?;
    std::fs::write(dir.join("benchmarks.md"), md)?;
    Ok(())
}

/// The uncontended take+return of `who`, in ns (none: it hung).
fn uncontended_ns(r: &Results, who: &str) -> Option<f64> {
    r.uncontended.iter().find(|u| u.0 == who).and_then(|u| u.1)
}

/// The slowest pool size's uncontended cost ÷ the fastest's.
fn size_spread(r: &Results) -> f64 {
    r.sizes.iter().map(|s| s.1).fold(f64::MIN, f64::max)
        / r.sizes.iter().map(|s| s.1).fold(f64::MAX, f64::min)
}

/// The title, how the report was made, the machine and the versions.
fn header(md: &mut String, r: &Results) -> std::fmt::Result {
    writeln!(md, "# Benchmarks\n")?;
    writeln!(
        md,
        "Written by `cargo run --release -p pooler-bench` ({:.0} s). Do not edit by hand.\n",
        r.seconds
    )?;
    writeln!(md, "- Machine: {}", machine())?;
    let versions: Vec<String> = NAMES
        .iter()
        .map(|n| format!("{n} {}", version(n)))
        .collect();
    writeln!(md, "- Versions: {}", versions.join(", "))?;
    writeln!(
        md,
        "- Every pool holds no-op members; every run of a peer has a 10 s hang guard (`hung` below)."
    )?;
    writeln!(
        md,
        "- Real backends (PostgreSQL, Redis, MariaDB) through pooler's adapters and deadpool's, bb8's and mysql_async's pools: \
         [benchmarks-backends.md](benchmarks-backends.md), written by `pooler-bench backends`.\n"
    )?;
    Ok(())
}

/// The contended grid: median µs per cell, and each peer ÷ pooler.
fn grid_section(md: &mut String, r: &Results) -> std::fmt::Result {
    writeln!(
        md,
        "## Contended take/return (the rust-pool-benchmark grid)\n"
    )?;
    writeln!(
        md,
        "Median µs for `tasks` tasks each doing 10 take+return, clock started before spawning; \
         each cell runs at least 150 times and for at least 300 ms."
    )?;
    writeln!(
        md,
        "Ratio columns: peer time ÷ pooler time (above 1 means pooler is faster).\n"
    )?;
    write!(md, "| size | tasks |")?;
    for n in NAMES {
        write!(md, " {n} |")?;
    }
    for n in &NAMES[1..] {
        write!(md, " ÷ {n} |")?;
    }
    writeln!(md)?;
    writeln!(md, "|{}", "---|".repeat(2 + NAMES.len() * 2 - 1))?;
    for size in [4, 8, 16] {
        for tasks in [4, 16, 64, 256] {
            write!(md, "| {size} | {tasks} |")?;
            for n in NAMES {
                write!(md, " {} |", fmt_opt(cell(r, n, size, tasks), 1))?;
            }
            let ours = cell(r, "pooler", size, tasks);
            for n in &NAMES[1..] {
                let ratio = cell(r, n, size, tasks).zip(ours).map(|(p, o)| p / o);
                write!(md, " {} |", fmt_opt(ratio, 2))?;
            }
            writeln!(md)?;
        }
    }
    writeln!(md, "\n![grid](benchmarks-grid.svg)\n")?;
    Ok(())
}

/// One task, pool of 8: ns per take+return.
fn uncontended_section(md: &mut String, r: &Results) -> std::fmt::Result {
    writeln!(md, "## Uncontended take+return (one task, pool of 8)\n")?;
    writeln!(md, "| pool | ns per pair | ÷ pooler |\n|---|---|---|")?;
    let ours = uncontended_ns(r, "pooler");
    for (name, ns) in &r.uncontended {
        writeln!(
            md,
            "| {name} | {} | {} |",
            fmt_opt(*ns, 0),
            fmt_opt(ns.zip(ours).map(|(p, o)| p / o), 2)
        )?;
    }
    Ok(())
}

/// Instructions per operation, counted by callgrind.
fn instructions_section(md: &mut String, r: &Results) -> std::fmt::Result {
    writeln!(md, "\n## Instructions per operation (callgrind, exact)\n")?;
    if r.instructions.is_empty() {
        writeln!(md, "valgrind was not found; no instruction counts.")?;
    } else {
        writeln!(
            md,
            "N operations minus none, divided by N (N = 100 000; a current-thread runtime, a pool \
             of 8): start-up and pool creation cancel out, and the count does not depend on the \
             machine's load. `take`: an awaited take and its return; `try`: a take that never \
             waits, and its return (deadpool: `timeout_get` with a zero wait); `fail`: a take \
             that never waits on a pool whose members are all held. `pooler-admit`: with \
             adaptive admission on (`vegas`).\n"
        )?;
        writeln!(
            md,
            "| pool | take+return | `take()`+return | try+return | failed try | take ÷ pooler's | atomic RMWs per take+return |\n|---|---|---|---|---|---|---|"
        )?;
        let get = |who: &str, op: Op| {
            r.instructions
                .iter()
                .find(|i| i.0 == who && i.1 == op)
                .and_then(|i| i.2)
        };
        let ours = get("pooler", Op::Take).map(|p| p.instructions);
        for who in ["pooler", "pooler-admit", "deadpool", "bb8", "qp"] {
            let cell = |op| {
                get(who, op).map_or_else(|| "—".to_owned(), |v| format!("{:.0}", v.instructions))
            };
            let default = if who == "pooler" {
                cell(Op::Default)
            } else {
                "—".to_owned()
            };
            writeln!(
                md,
                "| {who} | {} | {default} | {} | {} | {} | {} |",
                cell(Op::Take),
                cell(Op::Try),
                cell(Op::Fail),
                fmt_opt(
                    get(who, Op::Take)
                        .map(|p| p.instructions)
                        .zip(ours)
                        .map(|(t, o)| t / o),
                    2
                ),
                get(who, Op::Take).map_or_else(|| "—".to_owned(), |v| format!("{:.1}", v.atomics)),
            )?;
        }
    }
    Ok(())
}

/// Take latency percentiles at pool 8 × 256 tasks.
fn fairness_section(md: &mut String, r: &Results) -> std::fmt::Result {
    writeln!(
        md,
        "\n## Fairness (pool of 8, 256 tasks × {} rounds of take → yield → return)\n",
        crate::suites::Effort::FULL.fairness_rounds
    )?;
    writeln!(md, "Take latency in µs.\n")?;
    write!(md, "| pool |")?;
    for (label, _) in PERCENTILES {
        write!(md, " {label} |")?;
    }
    writeln!(
        md,
        " p99 ÷ p50 | p99.9 ÷ p50 |\n|---|---|---|---|---|---|---|---|"
    )?;
    for (name, lat) in &r.fairness {
        write!(md, "| {name} |")?;
        match lat {
            Some(lat) => {
                for (_, p) in PERCENTILES {
                    write!(md, " {:.1} |", percentile(lat, p) / 1e3)?;
                }
                let p50 = percentile(lat, 0.5).max(1.0);
                writeln!(
                    md,
                    " {:.1} | {:.1} |",
                    percentile(lat, 0.99) / p50,
                    percentile(lat, 0.999) / p50
                )?;
            }
            None => writeln!(md, " hung | | | | | | |")?,
        }
    }
    writeln!(md, "\n![fairness](benchmarks-fairness.svg)\n")?;
    Ok(())
}

/// pooler's own figures: pool sizes, rejection, churn, starts, timeouts, lifetimes, metrics.
fn alone_section(md: &mut String, r: &Results) -> std::fmt::Result {
    writeln!(md, "## pooler alone\n")?;
    writeln!(md, "| measurement | result |\n|---|---|")?;
    for (size, ns) in &r.sizes {
        writeln!(
            md,
            "| uncontended take+return, pool of {size} | {ns:.0} ns |"
        )?;
    }
    let flat = size_spread(r);
    writeln!(
        md,
        "| pool-size cost spread (slowest ÷ fastest) | {flat:.2}× |"
    )?;
    writeln!(
        md,
        "| rejection: try_take on an exhausted pool | {:.0} ns |",
        r.rejection
    )?;
    writeln!(
        md,
        "| churn: 500 takes on init 0 / max 500 (growth + queue) | {:.1} ms |",
        r.churn.0.as_secs_f64() * 1e3
    )?;
    writeln!(
        md,
        "| churn: cull back to 0 after returning them (cull_interval 10 ms) | {:.1} ms |",
        r.churn.1.as_secs_f64() * 1e3
    )?;
    writeln!(
        md,
        "| parallel start: 100 members × 100 ms start → ready | {:.1} ms |",
        r.parallel_start.as_secs_f64() * 1e3
    )?;
    for (n, filled, lag) in &r.mass_timeout {
        writeln!(
            md,
            "| {n} takers timing out one after another (queued in {filled:.0} ms): last deadline → last error | {lag:.1} ms |"
        )?;
    }
    writeln!(
        md,
        "| take+return without / with max_lifetime (+jitter) | {:.0} / {:.0} ns ({:+.1} %) |",
        r.lifetime.0,
        r.lifetime.1,
        (r.lifetime.1 / r.lifetime.0 - 1.0) * 100.0
    )?;
    writeln!(
        md,
        "| take+return, metrics recorder absent / installed (Prometheus) | {:.0} / {:.0} ns |",
        r.metrics.0, r.metrics.1
    )?;
    match r.metrics_share {
        Some(s) => writeln!(
            md,
            "| instructions in `pooler::metrics` per take+return, no recorder (callgrind) | {:.1} % |",
            s * 100.0
        )?,
        None => writeln!(
            md,
            "| instructions in `pooler::metrics`, no recorder | valgrind not found |"
        )?,
    }
    Ok(())
}

/// The comparison with a saved baseline, if one was asked for.
fn baseline_section(md: &mut String, r: &Results) -> std::fmt::Result {
    if let Some((name, rows)) = &r.against {
        writeln!(md, "\n## Against baseline `{name}`\n")?;
        writeln!(
            md,
            "`docs/baselines/{name}.toml`, saved by an earlier `pooler-bench --save-baseline {name}`. \
             Instruction counts compare exactly; wall-clock figures move with the machine.\n"
        )?;
        writeln!(
            md,
            "| figure | baseline | now | change |\n|---|---|---|---|"
        )?;
        for (figure, before, now, change) in rows {
            writeln!(
                md,
                "| {figure} | {before:.1} | {now:.1} | {:+.1} % |",
                change * 100.0
            )?;
        }
    }
    Ok(())
}
