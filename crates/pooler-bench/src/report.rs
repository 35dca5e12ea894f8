//! `docs/benchmarks.md` and its charts.

use std::fmt::Write as _;
use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::Results;
use crate::instructions::Op;
use crate::peers::NAMES;
use crate::suites::percentile;

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

/// Each goal, its figure, and whether it is met.
fn goals_section(md: &mut String, r: &Results) -> std::fmt::Result {
    let ours = uncontended_ns(r, "pooler");
    let flat = size_spread(r);
    writeln!(md, "\n## Goals\n")?;
    writeln!(md, "| goal | measured | met |\n|---|---|---|")?;
    let mut worst_deadpool = f64::MAX;
    let mut vs_qp = Vec::new();
    for size in [4, 8, 16] {
        for tasks in [4, 16, 64, 256] {
            let ours = cell(r, "pooler", size, tasks);
            if let (Some(o), Some(d)) = (ours, cell(r, "deadpool", size, tasks)) {
                worst_deadpool = worst_deadpool.min(d / o);
            }
            if let (Some(o), Some(q)) = (ours, cell(r, "qp", size, tasks)) {
                vs_qp.push(q / o);
            }
        }
    }
    let hung = r.grid.iter().any(|g| g.0 == "pooler" && g.3.is_none());
    let qp_median = if vs_qp.is_empty() {
        f64::NAN
    } else {
        vs_qp.sort_by(f64::total_cmp);
        vs_qp[vs_qp.len() / 2]
    };
    let yes = |b: bool| if b { "yes" } else { "no" };
    writeln!(
        md,
        "| contended grid ≥ 1.5× deadpool in every cell | worst cell {worst_deadpool:.2}× | {} |",
        yes(worst_deadpool >= 1.5)
    )?;
    writeln!(
        md,
        "| at least qp's median, never hanging | median cell {qp_median:.2}× qp; pooler hung: {} | {} |",
        yes(hung),
        yes(qp_median >= 1.0 && !hung)
    )?;
    let dead_unc = r
        .uncontended
        .iter()
        .find(|u| u.0 == "deadpool")
        .and_then(|u| u.1);
    let unc = dead_unc.zip(ours).map(|(d, o)| d / o).unwrap_or(f64::NAN);
    writeln!(
        md,
        "| uncontended ≥ 4× deadpool | {unc:.2}× | {} |",
        yes(unc >= 4.0)
    )?;
    if let Some(Some(lat)) = r.fairness.iter().find(|f| f.0 == "pooler").map(|f| &f.1) {
        let p50 = percentile(lat, 0.5).max(1.0);
        let (p99, p999) = (percentile(lat, 0.99) / p50, percentile(lat, 0.999) / p50);
        writeln!(
            md,
            "| fairness p99 ≤ 2× p50 | {p99:.1}× | {} |",
            yes(p99 <= 2.0)
        )?;
        writeln!(
            md,
            "| fairness p99.9 ≤ 4× p50 | {p999:.1}× | {} |",
            yes(p999 <= 4.0)
        )?;
    }
    writeln!(
        md,
        "| pool-size cost flat within 1.2× | {flat:.2}× | {} |",
        yes(flat <= 1.2)
    )?;
    let instr = |who: &str, op: Op| {
        r.instructions
            .iter()
            .find(|i| i.0 == who && i.1 == op)
            .and_then(|i| i.2)
    };
    if let Some(default) = instr("pooler", Op::Default) {
        let v = default.instructions;
        writeln!(
            md,
            "| instructions per uncontended `take()`+return ≤ 200 | {v:.0} | {} |",
            yes(v <= 200.0)
        )?;
    }
    if let (Some(take), Some(dead)) = (instr("pooler", Op::Take), instr("deadpool", Op::Take)) {
        let (take, dead) = (take.instructions, dead.instructions);
        writeln!(
            md,
            "| instructions per take_member+return ≤ 250 and ≥ 4× fewer than deadpool | {take:.0} ({:.2}× fewer) | {} |",
            dead / take,
            yes(take <= 250.0 && dead / take >= 4.0)
        )?;
    }
    if let Some(try_) = instr("pooler", Op::Try) {
        let v = try_.instructions;
        writeln!(
            md,
            "| instructions per try_take_member+return ≤ 150 | {v:.0} | {} |",
            yes(v <= 150.0)
        )?;
    }
    if let (Some(take), Some(default)) = (instr("pooler", Op::Take), instr("pooler", Op::Default)) {
        let most = take.atomics.max(default.atomics);
        writeln!(
            md,
            "| atomic read-modify-writes per take+return ≤ 4 | take_member {:.1}, take() {:.1} | {} |",
            take.atomics,
            default.atomics,
            yes(most <= 4.0)
        )?;
    }
    if let (Some(fail), Some(dead)) = (instr("pooler", Op::Fail), instr("deadpool", Op::Fail)) {
        let (fail, dead) = (fail.instructions, dead.instructions);
        writeln!(
            md,
            "| instructions per failed try_take_member ≤ deadpool's | {fail:.0} (deadpool {dead:.0}) | {} |",
            yes(fail <= dead)
        )?;
    }
    let (none, prom) = r.metrics;
    writeln!(
        md,
        "| take+return with a Prometheus recorder ≤ 1.05× without | {:.2}× ({none:.0} → {prom:.0} ns) | {} |",
        prom / none,
        yes(prom / none <= 1.05)
    )?;
    let p50 = |who: &str| {
        r.fairness
            .iter()
            .find(|f| f.0 == who)
            .and_then(|f| f.1.as_ref())
            .map(|lat| percentile(lat, 0.5))
    };
    for (who, how) in [("pooler", "take"), ("pooler-member", "take_member")] {
        if let (Some(ours), Some(dead)) = (p50(who), p50("deadpool")) {
            writeln!(
                md,
                "| fairness p50 with `{how}` ≤ deadpool's | {:.1} µs (deadpool {:.1} µs) | {} |",
                ours / 1e3,
                dead / 1e3,
                yes(ours <= dead)
            )?;
        }
    }
    let ready = r.parallel_start.as_secs_f64() * 1e3;
    writeln!(
        md,
        "| 100 × 100 ms starts ready within 130 ms | {ready:.1} ms | {} |",
        yes(ready <= 130.0)
    )?;
    match r.metrics_share {
        Some(s) => writeln!(
            md,
            "| metrics cost ≤ 5 % with no recorder | {:.1} % | {} |",
            s * 100.0,
            yes(s <= 0.05)
        )?,
        None => writeln!(
            md,
            "| metrics cost ≤ 5 % with no recorder | not measured (no valgrind) | ? |"
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

fn grid_chart(r: &Results, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1200, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, 3));
    let max = r.grid.iter().filter_map(|g| g.3).fold(1.0, f64::max) * 1.5;
    let min = r
        .grid
        .iter()
        .filter_map(|g| g.3)
        .fold(f64::MAX, f64::min)
        .max(0.1)
        / 1.5;
    for (panel, size) in panels.iter().zip([4, 8, 16]) {
        let mut chart = ChartBuilder::on(panel)
            .caption(format!("pool of {size}: µs per run"), ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..3f64, (min..max).log_scale())?;
        chart
            .configure_mesh()
            .x_labels(4)
            .x_label_formatter(&|x| {
                format!("{} tasks", [4, 16, 64, 256][(x.round() as usize).min(3)])
            })
            .draw()?;
        let series = NAMES.iter().enumerate().map(|(i, name)| {
            let points = [4, 16, 64, 256]
                .iter()
                .enumerate()
                .filter_map(|(x, t)| cell(r, name, size, *t).map(|v| (x as f64, v)))
                .collect();
            (i, *name, points)
        });
        draw_lines(&mut chart, series)?;
    }
    root.present()?;
    Ok(())
}

fn fairness_chart(r: &Results, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (800, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let all: Vec<f64> = r
        .fairness
        .iter()
        .filter_map(|f| f.1.as_ref())
        .flat_map(|l| PERCENTILES.iter().map(|(_, p)| percentile(l, *p) / 1e3))
        .collect();
    let max = all.iter().copied().fold(1.0, f64::max) * 1.5;
    let min = all.iter().copied().fold(f64::MAX, f64::min).max(0.01) / 1.5;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "take latency, pool of 8, 256 tasks (µs)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..4f64, (min..max).log_scale())?;
    chart
        .configure_mesh()
        .x_labels(5)
        .x_label_formatter(&|x| PERCENTILES[(x.round() as usize).min(4)].0.to_owned())
        .draw()?;
    let series = r
        .fairness
        .iter()
        .enumerate()
        .filter_map(|(i, (name, lat))| {
            let lat = lat.as_ref()?;
            let points = PERCENTILES
                .iter()
                .enumerate()
                .map(|(x, (_, p))| (x as f64, percentile(lat, *p) / 1e3))
                .collect();
            Some((i, *name, points))
        });
    draw_lines(&mut chart, series)?;
    root.present()?;
    Ok(())
}

type LogChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, LogCoord<f64>>>;

/// One line per contender (its palette colour fixed by its index), and the legend.
fn draw_lines<'b>(
    chart: &mut LogChart<'b, 'b>,
    series: impl Iterator<Item = (usize, &'static str, Vec<(f64, f64)>)>,
) -> Result<(), Box<dyn std::error::Error>> {
    for (i, name, points) in series {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
