//! The simulated database and the pools' connections to it: queries share the database past
//! its capacity, connects take their time and fail while it is down; and how a request
//! ended, for the scores.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pooler::{Latency, Manager, MemberContext};
use tokio::time::Instant;

use crate::scenario::DbParams;

/// The database's state.
#[derive(Debug)]
pub(crate) struct Db {
    pub(crate) state: Mutex<DbState>,
}

#[derive(Debug)]
pub(crate) struct DbState {
    pub(crate) params: DbParams,
    pub(crate) running: usize,
    /// Connections made before the last outage are dead.
    pub(crate) epoch: u64,
    pub(crate) down_until: Option<Instant>,
    pub(crate) connects: Vec<Duration>,
    pub(crate) connecting: usize,
    pub(crate) peak_connecting: usize,
    pub(crate) rng: fastrand::Rng,
    pub(crate) begun: Instant,
}

impl Db {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, DbState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn is_down(s: &DbState) -> bool {
        s.down_until.is_some_and(|t| Instant::now() < t)
    }

    /// Runs one query on a connection of `epoch`; `Err` when the connection is dead.
    pub(crate) async fn query(&self, epoch: u64) -> Result<(), ()> {
        let took = {
            let mut s = self.lock();
            if s.epoch != epoch || Db::is_down(&s) {
                return Err(());
            }
            s.running += 1;
            let share = (s.running as f64 / s.params.capacity as f64).max(1.0);
            let jitter = 1.0 - s.params.jitter + 2.0 * s.params.jitter * s.rng.f64();
            // Drawn only where the scenario has slow queries, so the others' draws stay.
            let slow = if s.params.slow_share > 0.0 && s.rng.f64() < s.params.slow_share {
                s.params.slow_factor
            } else {
                1.0
            };
            s.params.latency.mul_f64(share * jitter * slow)
        };
        let _running = Running(self);
        tokio::time::sleep(took).await;
        Ok(())
    }
}

/// A running query: the database's count goes down however it ends (done or cancelled).
pub(crate) struct Running<'a>(&'a Db);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.lock().running -= 1;
    }
}

/// Connections to the simulated database.
#[derive(Debug, Clone)]
pub(crate) struct SimManager(pub(crate) Arc<Db>);

/// A connection: the database's epoch it was made in, and what the last use's query says
/// of the latency — the server's time, late when it was cancelled at its deadline, nothing
/// when it failed (or never ran). So the pools hear it as pooler-postgres reports it.
#[derive(Debug)]
pub(crate) struct SimConn {
    pub(crate) epoch: u64,
    pub(crate) last: Latency,
}

#[derive(Debug)]
pub(crate) struct Refused;

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the database refused the connection")
    }
}

impl std::error::Error for Refused {}

impl Manager for SimManager {
    type Member = SimConn;
    type Error = Refused;

    async fn start(&self, _: &MemberContext) -> Result<SimConn, Refused> {
        let connect = {
            let mut s = self.0.lock();
            s.connecting += 1;
            s.peak_connecting = s.peak_connecting.max(s.connecting);
            s.params.connect
        };
        tokio::time::sleep(connect).await;
        let mut s = self.0.lock();
        s.connecting -= 1;
        if Db::is_down(&s) {
            return Err(Refused);
        }
        let at = s.begun.elapsed();
        s.connects.push(at);
        Ok(SimConn {
            epoch: s.epoch,
            last: Latency::Unmeasured,
        })
    }

    fn is_broken(&self, conn: &SimConn) -> bool {
        conn.epoch != self.0.lock().epoch
    }

    fn latency(&self, conn: &SimConn) -> Latency {
        conn.last
    }
}

/// How one request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Its query finished within the budget.
    Good,
    /// Its query finished, past the budget.
    Late,
    /// Cancelled at the deadline while its query ran.
    Cancelled,
    /// Refused at once (shed, or over the admission limit).
    Shed,
    /// Waited its whole budget for a member.
    TimedOut,
    /// No member for another reason, or its connection was dead.
    Failed,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Request {
    pub(crate) arrived: Duration,
    pub(crate) outcome: Outcome,
    /// From arrival until the query ended, for requests that got a member.
    pub(crate) admitted: Option<Duration>,
    /// Whether its take waited at least half a connect (a wait for a new connection, not
    /// for a member on its way back).
    pub(crate) waited: bool,
}
