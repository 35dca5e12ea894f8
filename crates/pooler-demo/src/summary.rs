//! What consumers saw, per pool or group, and the summary printed at the end.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pooler::TakeError;

use crate::events::EventLog;
use crate::sim::Sim;

/// What consumers saw, per pool (or group).
#[derive(Debug, Default)]
pub(crate) struct Tally {
    waits: Vec<Duration>,
    errors: BTreeMap<&'static str, u64>,
}

pub(crate) type Tallies = Arc<Mutex<BTreeMap<String, Tally>>>;

pub(crate) fn record(tallies: &Tallies, target: &str, outcome: Result<Duration, &TakeError>) {
    let mut t = tallies
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let tally = t.entry(target.to_owned()).or_default();
    match outcome {
        Ok(wait) => tally.waits.push(wait),
        Err(e) => *tally.errors.entry(e.reason()).or_default() += 1,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub(crate) fn summary(tallies: &Tallies, sims: &BTreeMap<String, Sim>, events: &EventLog) {
    use std::sync::atomic::Ordering::Relaxed;
    sayln!("\nsummary");
    sayln!(
        "{:<16} {:>7} {:>10} {:>10}  errors by reason",
        "taken from",
        "takes",
        "wait p50",
        "wait p99"
    );
    let tallies = tallies
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for (target, t) in tallies.iter() {
        let mut waits = t.waits.clone();
        waits.sort();
        let errors = if t.errors.is_empty() {
            "none".to_owned()
        } else {
            t.errors
                .iter()
                .map(|(r, n)| format!("{r}={n}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        sayln!(
            "{target:<16} {:>7} {:>10} {:>10}  {errors}",
            waits.len(),
            format!("{:.1?}", percentile(&waits, 0.5)),
            format!("{:.1?}", percentile(&waits, 0.99)),
        );
    }
    sayln!("\nwhat the pools did (pooler's events, by kind)");
    for (message, n) in events.counts() {
        sayln!("{n:>6}  {message}");
    }
    if sims.is_empty() {
        return;
    }
    sayln!(
        "\n{:<16} {:>8} {:>13} {:>8} {:>8}",
        "pool",
        "started",
        "failed starts",
        "crashed",
        "stopped"
    );
    for (name, sim) in sims {
        let c = &sim.counts;
        sayln!(
            "{name:<16} {:>8} {:>13} {:>8} {:>8}",
            c.started.load(Relaxed),
            c.failed_starts.load(Relaxed),
            c.crashed.load(Relaxed),
            c.stopped.load(Relaxed)
        );
    }
}
