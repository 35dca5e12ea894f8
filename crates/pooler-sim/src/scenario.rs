//! The scenarios: what a scenario file says (the database, the load, the pool keys every
//! mode gets, the changes in time), and the files that come with the simulation.

use std::time::Duration;

use serde::Deserialize;

/// One scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// The file's name without `.toml`.
    #[serde(skip)]
    pub name: String,
    /// One line saying what it stages.
    pub about: String,
    /// How long it runs.
    #[serde(with = "pooler::time")]
    pub(crate) length: Duration,
    /// Each request's deadline, from its arrival.
    #[serde(with = "pooler::time")]
    pub(crate) budget: Duration,
    /// The part of the run the scores are about: [from, to).
    #[serde(default, with = "window")]
    pub(crate) window: Option<(Duration, Duration)>,
    /// The modes compared (names of [`Mode`](crate::Mode)).
    pub(crate) modes: Vec<String>,
    /// Pools side by side over the one database, each taking an equal share of the load
    /// (a fleet of services).
    #[serde(default = "one")]
    pub(crate) pools: usize,
    pub(crate) database: DbParams,
    pub(crate) load: Load,
    /// Pool keys every mode gets (a pools-file table: `max_lifetime = "60s"`, …).
    #[serde(default)]
    pub(crate) pool: toml::Table,
    #[serde(default)]
    pub(crate) change: Vec<Change>,
}

impl Scenario {
    /// The most connects at once its pools allow (`max_concurrent_starts`), if it sets one.
    #[must_use]
    pub fn start_cap(&self) -> Option<usize> {
        self.pool
            .get("max_concurrent_starts")
            .and_then(toml::Value::as_integer)
            .and_then(|n| usize::try_from(n).ok())
    }
}

pub(crate) fn one() -> usize {
    1
}

mod window {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<(Duration, Duration)>, D::Error> {
        let pair: Option<[toml::Value; 2]> = Option::deserialize(d)?;
        pair.map(|[a, b]| {
            let time =
                |v: toml::Value| pooler::time::deserialize(v).map_err(serde::de::Error::custom);
            Ok((time(a)?, time(b)?))
        })
        .transpose()
    }
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DbParams {
    pub(crate) capacity: usize,
    #[serde(with = "pooler::time")]
    pub(crate) latency: Duration,
    #[serde(with = "pooler::time")]
    pub(crate) connect: Duration,
    /// Each query's latency is drawn uniformly within this share either way of `latency`.
    #[serde(default = "DbParams::default_jitter")]
    pub(crate) jitter: f64,
    /// This share of the queries costs `slow_factor` times as much (a bimodal cost).
    #[serde(default)]
    pub(crate) slow_share: f64,
    #[serde(default = "DbParams::one")]
    pub(crate) slow_factor: f64,
}

impl DbParams {
    pub(crate) fn default_jitter() -> f64 {
        0.2
    }

    pub(crate) fn one() -> f64 {
        1.0
    }
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Load {
    /// Requests a second.
    pub(crate) rate: f64,
}

/// A change at `at`: any of the database's latency or capacity, the arrival rate, or an
/// outage of `down`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Change {
    #[serde(with = "pooler::time")]
    pub(crate) at: Duration,
    #[serde(default, with = "pooler::time::option")]
    pub(crate) latency: Option<Duration>,
    pub(crate) capacity: Option<usize>,
    pub(crate) rate: Option<f64>,
    #[serde(default, with = "pooler::time::option")]
    pub(crate) down: Option<Duration>,
}

/// The scenarios that come with the simulation (this crate's `scenarios/`), by name.
pub const SCENARIOS: &[(&str, &str)] = &[
    ("bimodal", include_str!("../scenarios/bimodal.toml")),
    ("burst", include_str!("../scenarios/burst.toml")),
    (
        "capacity-halved",
        include_str!("../scenarios/capacity-halved.toml"),
    ),
    ("deadline", include_str!("../scenarios/deadline.toml")),
    ("failover", include_str!("../scenarios/failover.toml")),
    ("fleet", include_str!("../scenarios/fleet.toml")),
    (
        "fleet-jitter",
        include_str!("../scenarios/fleet-jitter.toml"),
    ),
    (
        "fleet-slowdown",
        include_str!("../scenarios/fleet-slowdown.toml"),
    ),
    ("jitter", include_str!("../scenarios/jitter.toml")),
    (
        "latency-step",
        include_str!("../scenarios/latency-step.toml"),
    ),
    (
        "latency-step-32",
        include_str!("../scenarios/latency-step-32.toml"),
    ),
    (
        "latency-step-8",
        include_str!("../scenarios/latency-step-8.toml"),
    ),
    ("lifetimes", include_str!("../scenarios/lifetimes.toml")),
    (
        "lifetimes-overlap",
        include_str!("../scenarios/lifetimes-overlap.toml"),
    ),
    ("outage", include_str!("../scenarios/outage.toml")),
    ("steady", include_str!("../scenarios/steady.toml")),
];

/// The scenario named `name`, read from [`SCENARIOS`].
///
/// # Errors
///
/// When there is no such scenario, or its file does not read.
pub fn scenario(name: &str) -> Result<Scenario, String> {
    let (_, text) = SCENARIOS.iter().find(|(n, _)| *n == name).ok_or_else(|| {
        let known: Vec<_> = SCENARIOS.iter().map(|(n, _)| *n).collect();
        format!("no scenario `{name}` (there are: {})", known.join(", "))
    })?;
    let mut scenario: Scenario = toml::from_str(text).map_err(|e| format!("{name}: {e}"))?;
    scenario.name = name.to_owned();
    Ok(scenario)
}
