//! The overload simulation's report (docs/overload.md, a chart beside it), its baseline
//! (docs/baselines/overload.toml) and the check CI runs against it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use pooler_sim::{Mode, Scenario, Score};

mod goals;

pub(crate) use goals::goals;

type Runs = [(Scenario, Mode, Score)];

fn ms(s: f64) -> String {
    if s >= 1.0 {
        format!("{:.2} s", s)
    } else {
        format!("{:.0} ms", s * 1e3)
    }
}

/// How many seeds the report's spread and the baseline run over.
pub(crate) const SEEDS: u64 = 8;

/// Every scenario (or `only` one) in every mode, over seeds `0..seeds`: one list per seed.
pub(crate) fn run_seeds(only: Option<&str>, seeds: u64) -> Vec<Vec<(Scenario, Mode, Score)>> {
    (0..seeds.max(1))
        .map(|seed| pooler_sim::run_all_seeded(only, seed))
        .collect()
}

/// The scores that vary with the draws, as min / median / max over the seeds of `seeded`.
pub(crate) fn spread(seeded: &[Vec<(Scenario, Mode, Score)>]) -> String {
    let mut all: Vec<(String, &'static str, Vec<Score>)> = Vec::new();
    for runs in seeded {
        for (sc, mode, score) in runs {
            match all
                .iter_mut()
                .find(|(n, m, _)| *n == sc.name && *m == mode.name())
            {
                Some((.., scores)) => scores.push(score.clone()),
                None => all.push((sc.name.clone(), mode.name(), vec![score.clone()])),
            }
        }
    }
    let mmm = |mut v: Vec<f64>, fmt: &dyn Fn(f64) -> String| {
        v.sort_by(f64::total_cmp);
        format!(
            "{} / {} / {}",
            fmt(v[0]),
            fmt(v[v.len() / 2]),
            fmt(v[v.len() - 1])
        )
    };
    let mut t = String::from(
        "| scenario | mode | goodput share | admitted p99 | timed out | back in |\n|---|---|---|---|---|---|\n",
    );
    for (name, mode, scores) in all {
        let of = |f: fn(&Score) -> f64| scores.iter().map(f).collect::<Vec<f64>>();
        let back = if scores.iter().all(|s| s.recovery.is_none()) {
            "—".to_owned()
        } else {
            mmm(of(|s| s.recovery.unwrap_or(f64::INFINITY)), &|v| {
                format!("{v:.0} s")
            })
        };
        let _ = writeln!(
            t,
            "| {name} | {mode} | {} | {} | {} | {back} |",
            mmm(of(Score::goodput_share), &|v| format!("{:.0} %", v * 100.0)),
            mmm(of(|s| s.p99), &|v| format!("{:.0} ms", v * 1e3)),
            mmm(of(|s| s.timed_out as f64), &|v| format!("{v:.0}")),
        );
    }
    t
}

/// The score table, one row per scenario and mode.
pub(crate) fn table(runs: &Runs) -> String {
    let mut t = String::from(
        "| scenario | mode | goodput /s (of servable) | admitted p50 / p99 (db latency) | timed out | shed | late | waited ≥ ½ connect | back in | connects (peak /s, mean /s) | connecting at once |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (sc, mode, s) in runs {
        let _ = writeln!(
            t,
            "| {} | {} | {:.0} ({:.0} %) | {} / {} ({}) | {} | {} | {} | {} | {} | {} ({:.0}, {:.1}) | {} |",
            sc.name,
            mode.name(),
            s.goodput,
            s.goodput_share() * 100.0,
            ms(s.p50),
            ms(s.p99),
            ms(s.db_latency),
            s.timed_out,
            s.shed,
            s.late,
            s.waited,
            s.recovery.map_or("—".into(), |r| {
                if r.is_finite() {
                    format!("{r:.0} s")
                } else {
                    "never".into()
                }
            }),
            s.connects,
            s.connects_peak,
            s.connects_mean,
            s.peak_connecting,
        );
    }
    t
}

/// The figures a baseline holds, each the worst over the seeds of `seeded` (the lowest
/// goodput share, the highest of the others): `scenario.mode` → figure → value.
fn figures(
    seeded: &[Vec<(Scenario, Mode, Score)>],
) -> BTreeMap<String, BTreeMap<&'static str, f64>> {
    let mut worst: BTreeMap<String, BTreeMap<&'static str, f64>> = BTreeMap::new();
    for runs in seeded {
        for (sc, mode, s) in runs {
            let entry = worst
                .entry(format!("{}.{}", sc.name, mode.name()))
                .or_default();
            for (name, v) in s.figures() {
                let w = entry.entry(name).or_insert(v);
                *w = if name == "goodput share" {
                    w.min(v)
                } else {
                    w.max(v)
                };
            }
        }
    }
    worst
}

fn baseline_path(docs: &Path) -> std::path::PathBuf {
    docs.join("baselines/overload.toml")
}

/// Writes docs/overload.md (seed 0's scores, and the spread over `seeded`), its chart and
/// the baseline (the worst seed of `seeded`).
pub(crate) fn write(
    seeded: &[Vec<(Scenario, Mode, Score)>],
    docs: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let runs: &Runs = &seeded[0];
    let mut base = toml::Table::new();
    for (key, figs) in figures(seeded) {
        let mut t = toml::Table::new();
        for (name, v) in figs {
            t.insert(name.into(), ((v * 1000.0).round() / 1000.0).into());
        }
        base.insert(key, t.into());
    }
    std::fs::write(baseline_path(docs), toml::to_string(&base)?)?;
    chart(
        runs,
        "latency-step",
        &docs.join("overload-latency-step.svg"),
    )?;
    let template = include_str!("overload_report.md");
    let mut scenarios = String::new();
    let mut seen = Vec::new();
    for (sc, _, _) in runs {
        if !seen.contains(&sc.name) {
            seen.push(sc.name.clone());
            let _ = writeln!(scenarios, "- `{}`: {}", sc.name, sc.about);
        }
    }
    let text = template
        .replace("{scenarios}", &scenarios)
        .replace("{goals}", &goals(seeded))
        .replace("{table}", &table(runs))
        .replace("{spread}", spread(seeded).trim_end());
    std::fs::write(docs.join("overload.md"), text)?;
    Ok(())
}

/// Every score whose worst over the seeds of `seeded` is worse than the committed baseline
/// (itself the worst seed) allows: goodput share more than 3 points lower, p99 more than
/// 25 % higher, more timeouts (beyond 5 % and 5), more connects at once, a slower recovery
/// (beyond a second). The simulation is deterministic; the slack is for changes of pooler's
/// own timing that move a figure a little.
pub(crate) fn check(seeded: &[Vec<(Scenario, Mode, Score)>], docs: &Path) -> Vec<String> {
    let text = match std::fs::read_to_string(baseline_path(docs)) {
        Ok(text) => text,
        Err(e) => return vec![format!("no baseline: {e}")],
    };
    let base: toml::Table = match text.parse() {
        Ok(t) => t,
        Err(e) => return vec![format!("the baseline does not parse: {e}")],
    };
    let mut failures = Vec::new();
    for (key, now) in figures(seeded) {
        let Some(before) = base.get(&key).and_then(toml::Value::as_table) else {
            failures.push(format!("{key}: not in the baseline"));
            continue;
        };
        for (name, v) in now {
            let Some(b) = before
                .get(name)
                .and_then(|b| b.as_float().or(b.as_integer().map(|i| i as f64)))
            else {
                continue;
            };
            let worse = match name {
                "goodput share" => v < b - 0.03,
                "p99 ms" => v > b * 1.25 + 1.0,
                "timed out" => v > b * 1.05 + 5.0,
                "peak connecting" => v > b,
                "recovery s" => v > b + 1.0,
                _ => false,
            };
            if worse {
                failures.push(format!("{key}: {name} {v:.3} (baseline {b:.3})"));
            }
        }
    }
    failures
}

/// Good requests a second over time, one line per mode, for `scenario`.
fn chart(runs: &Runs, scenario: &str, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let lines: Vec<_> = runs
        .iter()
        .filter(|(sc, _, _)| sc.name == scenario)
        .collect();
    let Some((sc, _, _)) = lines.first() else {
        return Ok(());
    };
    let length = lines.iter().map(|l| l.2.timeline.len()).max().unwrap_or(1) as f64;
    let top = lines
        .iter()
        .flat_map(|l| l.2.timeline.iter().copied())
        .fold(1.0, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut c = ChartBuilder::on(&root)
        .caption(
            format!(
                "{}: requests served within their budget, per second",
                sc.name
            ),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..length, 0f64..top)?;
    c.configure_mesh().x_desc("seconds").draw()?;
    for (i, (_, mode, s)) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points: Vec<(f64, f64)> = s
            .timeline
            .iter()
            .enumerate()
            .map(|(x, y)| (x as f64 + 0.5, *y))
            .collect();
        c.draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(mode.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;
    root.present()?;
    Ok(())
}
