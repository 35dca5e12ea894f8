//! The overload report's goals table: each goal, judged on the worst of the seeds.

use std::fmt::Write as _;

use pooler_sim::{Mode, Scenario, Score};

use super::ms;

/// The scenarios where the database is the bottleneck (a slowdown, its capacity cut, a
/// burst of arrivals, a fleet sharing it), each with how the goals' table names it.
const BOTTLENECKS: [(&str, &str); 7] = [
    ("latency-step", "latency ×10 at 70 % load"),
    ("latency-step-8", "latency ×10, a database serving 8"),
    ("latency-step-32", "latency ×10, a database serving 32"),
    (
        "deadline",
        "latency ×5, queries cancelled at 100 ms deadlines",
    ),
    ("capacity-halved", "capacity halved at 70 % load"),
    ("burst", "ten times the arrivals for 5 s"),
    ("fleet-slowdown", "a fleet of 20 pools, latency ×5"),
];

/// The scores of `scenario` in `mode`, one a seed (none where the scenario does not run
/// that mode).
fn over_seeds<'a>(
    seeded: &'a [Vec<(Scenario, Mode, Score)>],
    sc: &str,
    mode: &str,
) -> Vec<&'a Score> {
    seeded
        .iter()
        .filter_map(|runs| {
            runs.iter()
                .find(|(s, m, _)| s.name == sc && m.name() == mode)
                .map(|r| &r.2)
        })
        .collect()
}

/// The lowest and highest of `values`.
fn bounds(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    values
        .into_iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        })
}

/// The lowest and highest of `f` over `scores`.
fn range(scores: &[&Score], f: impl Fn(&Score) -> f64) -> (f64, f64) {
    bounds(scores.iter().map(|s| f(s)))
}

/// The most connects at once `scenario`'s pools allow (0: it sets no cap, or is unknown).
fn start_cap(scenario: &str) -> usize {
    pooler_sim::scenario(scenario)
        .ok()
        .and_then(|sc| sc.start_cap())
        .unwrap_or(0)
}

/// `lo–hi`, or one figure when they are equal, each written by `fmt`.
fn span(lo: f64, hi: f64, fmt: impl Fn(f64) -> String) -> String {
    if fmt(lo) == fmt(hi) {
        fmt(hi)
    } else {
        format!("{}–{}", fmt(lo), fmt(hi))
    }
}

/// The goals, each judged on the worst of the seeds of `seeded` (the figure: the
/// range over them).
pub(crate) fn goals(seeded: &[Vec<(Scenario, Mode, Score)>]) -> String {
    let seeds = seeded.len();
    let mut t = format!(
        "| goal (the worst of {seeds} seeds) | figure (lowest–highest) | met |\n|---|---|---|\n"
    );
    let mut row = |goal: &str, figure: String, met: bool| {
        let _ = writeln!(
            t,
            "| {goal} | {figure} | {} |",
            if met { "yes" } else { "no" }
        );
    };
    let pct = |v: f64| format!("{:.0} %", v * 100.0);
    let secs = |v: f64| {
        if v.is_finite() {
            format!("{v:.0} s")
        } else {
            "never".into()
        }
    };
    let (plain, overlap) = (
        over_seeds(seeded, "lifetimes", "fixed-4x"),
        over_seeds(seeded, "lifetimes-overlap", "fixed-4x"),
    );
    if !plain.is_empty() && !overlap.is_empty() {
        let waited = range(&overlap, |s| s.waited as f64).1;
        row(
            "lifetimes ending together: no take waits for a connect",
            format!(
                "{waited:.0} takes waited (without make before break: {:.0})",
                range(&plain, |s| s.waited as f64).1
            ),
            waited == 0.0,
        );
        let connecting = range(&overlap, |s| s.peak_connecting as f64).1;
        let cap = start_cap("lifetimes-overlap");
        row(
            &format!("lifetimes ending together: connects at once never exceed the cap ({cap})"),
            format!(
                "at most {connecting:.0} (without the cap: {:.0})",
                range(&plain, |s| s.peak_connecting as f64).1
            ),
            connecting <= cap as f64,
        );
    }
    // Where the database is the bottleneck: the one switch (`vegas-alone`), admission with
    // a queue target and cancelled queries (`vegas`), and, on the latency step, the others
    // for comparison.
    for (sc, what) in BOTTLENECKS {
        for mode in ["vegas-alone", "vegas", "gradient", "shed"] {
            if sc != "latency-step" && matches!(mode, "gradient" | "shed") {
                continue;
            }
            let scores = over_seeds(seeded, sc, mode);
            if scores.is_empty() {
                continue;
            }
            let share = range(&scores, Score::goodput_share);
            let p99 = range(&scores, |s| s.p99);
            let bound = 2.0 * range(&scores, |s| s.db_latency).1;
            let timed_out = range(&scores, |s| s.timed_out as f64).1;
            let back = range(&scores, |s| s.recovery.unwrap_or(0.0));
            row(
                &format!(
                    "{what}, `{mode}`: goodput ≥ 90 % of what the database serves, p99 ≤ 2 × \
                     its latency, none timed out, back ≤ 5 s after"
                ),
                format!(
                    "{}; p99 {} against {}; {timed_out:.0} timed out; back in {}",
                    span(share.0, share.1, pct),
                    span(p99.0, p99.1, ms),
                    ms(bound),
                    span(back.0, back.1, secs),
                ),
                share.0 >= 0.9 && p99.1 <= bound && timed_out == 0.0 && back.1 <= 5.0,
            );
        }
    }
    for sc in ["bimodal", "jitter", "steady"] {
        for mode in ["vegas-alone", "vegas"] {
            // Each seed against a fixed pool under the same draws.
            let pairs: Vec<(&Score, &Score)> = over_seeds(seeded, sc, "fixed")
                .into_iter()
                .zip(over_seeds(seeded, sc, mode))
                .collect();
            if pairs.is_empty() {
                continue;
            }
            let share = bounds(pairs.iter().map(|(f, s)| s.goodput / f.goodput.max(1e-9)));
            let p99 = bounds(pairs.iter().map(|(f, s)| s.p99 / f.p99.max(1e-9)));
            row(
                &format!(
                    "no overload (`{sc}`), `{mode}`: goodput ≥ 95 %, p99 ≤ 1.2 × a fixed pool's"
                ),
                format!(
                    "{} of its goodput; p99 {} its",
                    span(share.0, share.1, pct),
                    span(p99.0, p99.1, |v| format!("{v:.2} ×")),
                ),
                share.0 >= 0.95 && p99.1 <= 1.2,
            );
        }
    }
    let fixed = over_seeds(seeded, "latency-step", "fixed");
    if !fixed.is_empty() {
        let share = range(&fixed, Score::goodput_share);
        let timed_out = range(&fixed, |s| s.timed_out as f64);
        row(
            "(for comparison) a fixed FIFO pool the size of the database, latency ×10",
            format!(
                "goodput {}, {} timed out",
                span(share.0, share.1, pct),
                span(timed_out.0, timed_out.1, |v| format!("{v:.0}"))
            ),
            false,
        );
    }
    for mode in ["vegas-alone", "vegas", "shed", "fixed"] {
        let scores = over_seeds(seeded, "failover", mode);
        if scores.is_empty() {
            continue;
        }
        let back = range(&scores, |s| s.recovery.unwrap_or(f64::INFINITY));
        row(
            &format!(
                "failover, `{mode}`: serving again within 2 × the longest start backoff (20 s)"
            ),
            format!("{} after the new primary is up", span(back.0, back.1, secs)),
            back.1 <= 20.0,
        );
    }
    let cap = start_cap("outage");
    for mode in ["vegas-alone", "vegas", "shed", "fixed"] {
        let scores = over_seeds(seeded, "outage", mode);
        if scores.is_empty() {
            continue;
        }
        let back = range(&scores, |s| s.recovery.unwrap_or(f64::INFINITY));
        let within = scores
            .iter()
            .filter(|s| s.recovery.is_some_and(|r| r <= 5.0))
            .count();
        let connecting = range(&scores, |s| s.peak_connecting as f64).1;
        row(
            &format!(
                "outage of 10 s, `{mode}`: full throughput ≤ 5 s after the server is back in \
                 ≥ 95 % of runs, connects at once never above the cap ({cap})"
            ),
            format!(
                "back in {} ({within} of {} runs within 5 s); at most {connecting:.0} at once",
                span(back.0, back.1, secs),
                scores.len()
            ),
            within * 100 >= scores.len() * 95 && connecting <= cap as f64,
        );
    }
    let (plain, jitter) = (
        over_seeds(seeded, "fleet", "fixed"),
        over_seeds(seeded, "fleet-jitter", "fixed"),
    );
    if !plain.is_empty() && !jitter.is_empty() {
        let ratio = |s: &Score| s.connects_peak / s.connects_mean.max(1e-9);
        let with = range(&jitter, ratio);
        let without = range(&plain, ratio);
        row(
            "20 pools together: peak connects/s ≤ 2 × the mean (10 s buckets)",
            format!(
                "{} (without jitter {})",
                span(with.0, with.1, |v| format!("{v:.1} ×")),
                span(without.0, without.1, |v| format!("{v:.1} ×"))
            ),
            with.1 <= 2.0,
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn score(share: f64, p99_ms: f64) -> Score {
        Score {
            goodput: share * 100.0,
            servable: 100.0,
            p99: p99_ms / 1e3,
            db_latency: 0.010,
            ..Score::default()
        }
    }

    /// One run of `scenario` in `mode` a seed, each scored (goodput share, p99 in ms).
    fn seeds<const N: usize>(
        scenario: &str,
        mode: Mode,
        scores: [(f64, f64); N],
    ) -> Vec<Vec<(Scenario, Mode, Score)>> {
        let sc = pooler_sim::scenario(scenario).expect("a scenario");
        scores
            .into_iter()
            .map(|(share, p99)| vec![(sc.clone(), mode, score(share, p99))])
            .collect()
    }

    fn row<'a>(table: &'a str, starts: &str) -> &'a str {
        table
            .lines()
            .find(|l| l.starts_with(starts))
            .unwrap_or_else(|| panic!("no row `{starts}` in\n{table}"))
    }

    /// A goal met by the first seed and missed by another is missed, and its figure is the
    /// range over the seeds.
    #[test]
    fn a_goal_is_judged_on_its_worst_seed() {
        let seeded = seeds(
            "capacity-halved",
            Mode::VegasAlone,
            [(0.98, 15.0), (0.97, 30.0)],
        );
        let table = goals(&seeded);
        let missed = row(&table, "| capacity halved at 70 % load, `vegas-alone`");
        assert!(missed.ends_with("| no |"), "{missed}");
        assert!(missed.contains("p99 15 ms–30 ms against 20 ms"), "{missed}");
        assert!(missed.contains("97 %–98 %"), "{missed}");
        let met = goals(&seeded[..1]);
        assert!(row(&met, "| capacity halved").ends_with("| yes |"), "{met}");
    }

    /// Over the seeds, goodput counts by its lowest: one seed under 90 % misses the goal.
    #[test]
    fn goodput_is_judged_by_its_lowest_seed() {
        let seeded = seeds("burst", Mode::Vegas, [(0.99, 15.0), (0.85, 15.0)]);
        let table = goals(&seeded);
        assert!(
            row(&table, "| ten times the arrivals for 5 s, `vegas`").ends_with("| no |"),
            "{table}"
        );
    }
}
