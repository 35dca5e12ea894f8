//! Simulated members: configurable start latency, start failures and crashes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use pooler::{Manager, MemberContext};
use rand::Rng;
use tokio::time::Instant;

/// What happened to a pool's simulated members.
#[derive(Debug, Default)]
pub(crate) struct SimCounts {
    pub(crate) started: AtomicU64,
    pub(crate) failed_starts: AtomicU64,
    pub(crate) crashed: AtomicU64,
    pub(crate) stopped: AtomicU64,
}

/// Starts simulated members.
#[derive(Debug, Clone)]
pub(crate) struct Sim {
    start_latency: Duration,
    failure_rate: f64,
    crash_rate: f64,
    outage: Option<Outage>,
    pub(crate) counts: Arc<SimCounts>,
}

/// A time the simulated server is down: every member's connection dies as it begins, and
/// every start until it ends fails.
#[derive(Debug, Clone, Copy)]
struct Outage {
    from: Instant,
    until: Instant,
}

impl Outage {
    fn covers(&self, at: Instant) -> bool {
        self.from <= at && at < self.until
    }
}

/// A simulated connection.
#[derive(Debug)]
pub(crate) struct SimConn {
    pub(crate) queries: u64,
}

#[derive(Debug)]
pub(crate) struct SimError(&'static str);

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for SimError {}

/// What a `sim` pool's `member` table holds.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SimMember {
    /// How long a start takes, as `"100ms"`. Default: 100 ms.
    #[serde(default)]
    start_latency: Option<String>,
    /// The chance a start fails, from 0.0 to 1.0. Default: 0.
    #[serde(default)]
    failure_rate: f64,
    /// The chance, each second, that a member's connection dies. Default: 0.
    #[serde(default)]
    crash_rate: f64,
    /// When the simulated server goes down, counted from the demo's start, as `"6s"`.
    /// Default: never.
    #[serde(default)]
    outage_at: Option<String>,
    /// How long it stays down, as `"2s"`. Default: 1 s.
    #[serde(default)]
    outage_for: Option<String>,
}

fn rate(key: &str, r: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&r) {
        Ok(r)
    } else {
        Err(format!(
            "`{key}` must be a number from 0.0 to 1.0, found {r}"
        ))
    }
}

impl Sim {
    /// Builds the manager from a pool's `member` table.
    pub(crate) fn new(member: SimMember) -> Result<Sim, String> {
        let start_latency = match member.start_latency {
            None => Duration::from_millis(100),
            Some(text) => {
                humantime::parse_duration(&text).map_err(|e| format!("`start_latency`: {e}"))?
            }
        };
        let time = |key: &str, text: &str| {
            humantime::parse_duration(text).map_err(|e| format!("`{key}`: {e}"))
        };
        let outage = match (member.outage_at, member.outage_for) {
            (None, None) => None,
            (None, Some(_)) => return Err("`outage_for` needs `outage_at`".to_owned()),
            (Some(at), lasting) => {
                let from = Instant::now() + time("outage_at", &at)?;
                let lasting = match lasting {
                    Some(text) => time("outage_for", &text)?,
                    None => Duration::from_secs(1),
                };
                Some(Outage {
                    from,
                    until: from + lasting,
                })
            }
        };
        Ok(Sim {
            start_latency,
            failure_rate: rate("failure_rate", member.failure_rate)?,
            crash_rate: rate("crash_rate", member.crash_rate)?,
            outage,
            counts: Arc::default(),
        })
    }
}

impl Manager for Sim {
    type Member = SimConn;
    type Error = SimError;

    async fn start(&self, ctx: &MemberContext) -> Result<SimConn, SimError> {
        tokio::time::sleep(self.start_latency).await;
        let down = self.outage.is_some_and(|o| o.covers(Instant::now()));
        if down {
            self.counts.failed_starts.fetch_add(1, Ordering::Relaxed);
            return Err(SimError("connection refused (simulated outage)"));
        }
        if rand::rng().random_bool(self.failure_rate) {
            self.counts.failed_starts.fetch_add(1, Ordering::Relaxed);
            return Err(SimError("connection refused (simulated)"));
        }
        self.counts.started.fetch_add(1, Ordering::Relaxed);
        let (crash_rate, outage, counts) = (self.crash_rate, self.outage, self.counts.clone());
        // The connection's driver: once a second it may lose the server, and the member dies;
        // an outage ends it as it begins.
        ctx.spawn(async move {
            let mut tick = Instant::now();
            loop {
                tick += Duration::from_secs(1);
                let ahead = outage.map(|o| o.from).filter(|from| *from > Instant::now());
                let wake = ahead.map_or(tick, |from| from.min(tick));
                tokio::time::sleep_until(wake).await;
                let dies = outage.is_some_and(|o| o.covers(Instant::now()))
                    || (wake == tick && rand::rng().random_bool(crash_rate));
                if dies {
                    counts.crashed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        });
        Ok(SimConn { queries: 0 })
    }

    async fn stop(&self, _conn: SimConn) {
        self.counts.stopped.fetch_add(1, Ordering::Relaxed);
    }
}
