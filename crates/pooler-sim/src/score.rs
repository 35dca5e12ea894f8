//! A run's scores, from the requests' outcomes and what the database did.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::db::{DbState, Outcome, Request};
use crate::scenario::Scenario;

/// A run's scores (see docs/overload.md for what each means).
#[derive(Debug, Clone, Default)]
pub struct Score {
    /// Good requests a second over the window.
    pub goodput: f64,
    /// What the database could serve a second over the window (the lesser of the load and
    /// its throughput, second by second).
    pub servable: f64,
    /// Admitted requests' time from arrival to the end of the query, median (s).
    pub p50: f64,
    /// … and 99th percentile (s).
    pub p99: f64,
    /// The database's own latency in the middle of the window (s).
    pub db_latency: f64,
    /// Takes that waited their whole budget.
    pub timed_out: usize,
    /// Takes refused at once (`Shed`, `OverLimit`).
    pub shed: usize,
    /// Queries that ended past their deadline or were cancelled at it.
    pub late: usize,
    /// Takes that waited at least half a connect.
    pub waited: usize,
    /// Seconds after the window until a second's goodput is back to 90 % of what was
    /// servable (infinite: never); none without a window that ends before the run.
    pub recovery: Option<f64>,
    /// Connections made after the pools' first fill.
    pub connects: usize,
    /// Their peak rate a second, over 10 s buckets.
    pub connects_peak: f64,
    /// Their mean rate a second.
    pub connects_mean: f64,
    /// The most connects in progress together.
    pub peak_connecting: usize,
    /// Good requests per second, second by second.
    pub timeline: Vec<f64>,
}

impl Score {
    /// Goodput as a share of what the database could serve in the window.
    pub fn goodput_share(&self) -> f64 {
        if self.servable > 0.0 {
            self.goodput / self.servable
        } else {
            1.0
        }
    }

    /// The figures a baseline keeps, by name.
    pub fn figures(&self) -> BTreeMap<&'static str, f64> {
        let mut f = BTreeMap::new();
        f.insert("goodput share", self.goodput_share());
        f.insert("p99 ms", self.p99 * 1e3);
        f.insert("timed out", self.timed_out as f64);
        f.insert("peak connecting", self.peak_connecting as f64);
        if let Some(r) = self.recovery {
            f.insert("recovery s", r);
        }
        f
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// The database's own latency and what it can serve a second, at `t`.
fn db_at(sc: &Scenario, t: Duration) -> (Duration, f64) {
    let mut p = sc.database;
    for c in sc.change.iter().filter(|c| c.at <= t) {
        if let Some(l) = c.latency {
            p.latency = l;
        }
        if let Some(n) = c.capacity {
            p.capacity = n;
        }
    }
    let down = sc
        .change
        .iter()
        .any(|c| c.down.is_some_and(|d| c.at <= t && t < c.at + d));
    let serves = if down {
        0.0
    } else {
        p.capacity as f64 / p.latency.as_secs_f64()
    };
    (p.latency, serves)
}

fn rate_at(sc: &Scenario, t: Duration) -> f64 {
    sc.change
        .iter()
        .filter(|c| c.at <= t)
        .fold(sc.load.rate, |r, c| c.rate.unwrap_or(r))
}

pub(crate) fn score(sc: &Scenario, requests: &[Request], db: &DbState) -> Score {
    let (from, to) = sc.window.unwrap_or((Duration::ZERO, sc.length));
    let in_window: Vec<&Request> = requests
        .iter()
        .filter(|r| r.arrived >= from && r.arrived < to)
        .collect();
    let seconds = (to - from).as_secs_f64();
    let count = |o: Outcome| in_window.iter().filter(|r| r.outcome == o).count();
    let good = count(Outcome::Good);
    // What the database could serve in the window, second by second: the lesser of the
    // load and its throughput then.
    let whole = (to - from).as_secs() as usize;
    let servable: f64 = (0..whole.max(1))
        .map(|i| {
            let t = from + Duration::from_secs(i as u64);
            rate_at(sc, t).min(db_at(sc, t).1)
        })
        .sum::<f64>()
        / whole.max(1) as f64;
    let mut admitted: Vec<f64> = in_window
        .iter()
        .filter_map(|r| r.admitted.map(|d| d.as_secs_f64()))
        .collect();
    admitted.sort_by(f64::total_cmp);
    let mid = from + (to - from) / 2;
    let length = sc.length.as_secs() as usize;
    let mut timeline = vec![0.0; length.max(1)];
    for r in requests.iter().filter(|r| r.outcome == Outcome::Good) {
        let i = (r.arrived.as_secs() as usize).min(timeline.len() - 1);
        timeline[i] += 1.0;
    }
    // Back to full service: the first second after the window whose good requests reach
    // 90 % of what was servable then.
    let recovery = (sc.window.is_some() && to < sc.length).then(|| {
        let first = to.as_secs() as usize;
        (first..length)
            .find(|&i| {
                let t = Duration::from_secs(i as u64);
                timeline[i] >= 0.9 * rate_at(sc, t).min(db_at(sc, t).1)
            })
            .map_or(f64::INFINITY, |i| (i - first) as f64)
    });
    // Connects a second, counted over 10 s buckets (a storm shows; the Poisson noise of a
    // few connects a second does not).
    let buckets = length.div_ceil(10).max(1);
    let mut per_bucket = vec![0.0; buckets];
    for c in &db.connects {
        let i = (c.as_secs() as usize / 10).min(buckets - 1);
        per_bucket[i] += 0.1;
    }
    let connects_mean = per_bucket.iter().sum::<f64>() / buckets as f64;
    Score {
        goodput: good as f64 / seconds,
        servable,
        p50: percentile(&admitted, 0.5),
        p99: percentile(&admitted, 0.99),
        db_latency: db_at(sc, mid).0.as_secs_f64(),
        timed_out: count(Outcome::TimedOut),
        shed: count(Outcome::Shed),
        late: count(Outcome::Late) + count(Outcome::Cancelled),
        waited: in_window.iter().filter(|r| r.waited).count(),
        recovery,
        connects: db.connects.len(),
        connects_peak: per_bucket.iter().copied().fold(0.0, f64::max),
        connects_mean,
        peak_connecting: db.peak_connecting,
        timeline,
    }
}
