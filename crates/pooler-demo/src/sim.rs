//! Simulated members: configurable start latency, start failures and crashes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use pooler::{Manager, MemberContext};
use rand::Rng;

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
    pub(crate) counts: Arc<SimCounts>,
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
        Ok(Sim {
            start_latency,
            failure_rate: rate("failure_rate", member.failure_rate)?,
            crash_rate: rate("crash_rate", member.crash_rate)?,
            counts: Arc::default(),
        })
    }
}

impl Manager for Sim {
    type Member = SimConn;
    type Error = SimError;

    async fn start(&self, ctx: &MemberContext) -> Result<SimConn, SimError> {
        tokio::time::sleep(self.start_latency).await;
        if rand::rng().random_bool(self.failure_rate) {
            self.counts.failed_starts.fetch_add(1, Ordering::Relaxed);
            return Err(SimError("connection refused (simulated)"));
        }
        self.counts.started.fetch_add(1, Ordering::Relaxed);
        let (crash_rate, counts) = (self.crash_rate, self.counts.clone());
        // The connection's driver: once a second it may lose the server, and the member dies.
        ctx.spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if rand::rng().random_bool(crash_rate) {
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
