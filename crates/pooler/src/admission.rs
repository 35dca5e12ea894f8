//! Adaptive admission (docs/design.md, "Admission"): with `admission = "vegas"` (or
//! `"gradient"`), at most `limit` takes hold a member at a time, `limit` moving between 1 and
//! `max_count` with the latency the pool observes — how long each member is held, which is
//! the database's latency for a pool whose users take, query and give back. A take over the
//! limit waits in this gate's own queue (first come, first served, under the take's
//! deadline, and refused at once while the pool sheds) before it takes a member as usual.
//! Lowering the limit closes nothing: it admits fewer. The limiters are in `limiters.rs`.
//!
//! Whether takes go through the gate is [`Features::ADMIT`](crate::features::Features::ADMIT);
//! the gate is on when its limiter is there.
//!
//! # Invariants
//!
//! 1. While on: `available permits + admitted + handed == limit + owed`, where `handed` are
//!    permits the semaphore has handed to a waiter that has not yet counted itself admitted
//!    (so `available + admitted <= limit + owed` is what can be checked); `1 <= limit <= max`;
//!    and `owed > 0` only while `admitted + handed > limit`.

use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::sync::{Mutex, lock};

mod limiters;

use limiters::Limiter;

/// How the admission limit is set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum AdmissionMode {
    /// No admission limit: every take may hold a member, up to `max_count` (the default).
    #[default]
    Off,
    /// The limit keeps a few queries queued inside the database, judged from how much
    /// slower holds are than the database's latency unloaded (TCP Vegas).
    Vegas,
    /// The limit shrinks when holds get slower than their long-term average (Gradient2).
    Gradient,
}

/// What the admission gate says of itself ([`Pool::admission`](crate::Pool::admission)).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct AdmissionStatus {
    /// Takes that may hold a member at once now.
    pub limit: usize,
    /// Takes holding a member through the gate now.
    pub admitted: usize,
    /// The mean hold of the last batch of holds.
    pub latency: Duration,
    /// What that latency is compared with: the database's latency unloaded (`vegas`), or
    /// the long-term average hold (`gradient`).
    pub baseline: Duration,
    /// Why the limit last moved.
    pub last_move: LimitMove,
}

/// Why the admission limit last moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimitMove {
    /// Not yet: too few holds measured.
    Starting,
    /// It grew: latency held at its long-term level.
    Grew,
    /// It shrank: the last holds took longer than the long-term latency allows.
    Shrank,
    /// It stayed: the latency is where the limiter wants it.
    Held,
    /// It stayed: the pool used less than half of it.
    Idle,
    /// It was halved for two batches to measure the database's latency unloaded, and is
    /// back (`vegas`).
    Probed,
}

impl LimitMove {
    /// The reason as metrics and logs name it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            LimitMove::Starting => "starting",
            LimitMove::Grew => "grew",
            LimitMove::Shrank => "shrank",
            LimitMove::Held => "held",
            LimitMove::Idle => "idle",
            LimitMove::Probed => "probed",
        }
    }
}

/// The gate (see the module's docs).
#[derive(Debug)]
pub(crate) struct Admission {
    permits: Semaphore,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    limiter: Option<Limiter>,
    limit: usize,
    admitted: usize,
    owed: usize,
}

impl Admission {
    pub(crate) fn new(mode: AdmissionMode, max: usize) -> Self {
        let gate = Admission {
            permits: Semaphore::new(0),
            state: Mutex::new(State {
                limiter: None,
                limit: 0,
                admitted: 0,
                owed: 0,
            }),
        };
        gate.set(mode, max);
        gate
    }

    /// New settings (a pool's start or a reconfigure). Turned on, the limit starts at
    /// `max` and counts the takes admitted from then on; turned off, takes waiting at the
    /// gate go through.
    pub(crate) fn set(&self, mode: AdmissionMode, max: usize) {
        let mut s = lock(&self.state);
        let max = max.max(1);
        let fresh = match mode {
            AdmissionMode::Off => None,
            AdmissionMode::Vegas => Some(Limiter::vegas(max)),
            AdmissionMode::Gradient => Some(Limiter::gradient(max)),
        };
        let same_kind = matches!(
            (&fresh, &s.limiter),
            (Some(Limiter::Vegas(_)), Some(Limiter::Vegas(_)))
                | (Some(Limiter::Gradient(_)), Some(Limiter::Gradient(_)))
        );
        match (fresh, s.limiter.as_mut()) {
            (None, None) => {}
            (None, Some(_)) => {
                s.limiter = None;
                // Whoever waits at the gate goes through.
                self.permits.add_permits(Semaphore::MAX_PERMITS / 2);
            }
            (Some(_), Some(limiter)) if same_kind => {
                limiter.set_max(max);
                let limit = limiter.limit();
                self.move_limit(&mut s, limit);
            }
            (Some(fresh), Some(_)) => {
                // Another limiter: it starts from the limit in force.
                let mut fresh = fresh;
                fresh.set_max(max);
                s.limiter = Some(fresh);
                let limit = s.limiter.as_ref().map_or(max, Limiter::limit);
                self.move_limit(&mut s, limit);
            }
            (Some(fresh), None) => {
                self.permits.forget_permits(usize::MAX);
                *s = State {
                    limiter: Some(fresh),
                    limit: max,
                    admitted: 0,
                    owed: 0,
                };
                self.permits.add_permits(max);
            }
        }
        self.check(&s);
    }

    fn check(&self, s: &State) {
        if s.limiter.is_some() {
            debug_assert!(
                self.permits.available_permits() + s.admitted <= s.limit + s.owed,
                "invariant 1"
            );
            debug_assert!(s.limit >= 1, "invariant 1: a limit of at least one");
        }
    }

    /// Moves the limit to `limit`: permits added (the ones owed paid first) or taken away
    /// (those not available owed, taken when they come back).
    fn move_limit(&self, s: &mut State, limit: usize) {
        if limit > s.limit {
            let more = limit - s.limit;
            let paid = more.min(s.owed);
            s.owed -= paid;
            self.permits.add_permits(more - paid);
        } else if limit < s.limit {
            let fewer = s.limit - limit;
            let taken = self.permits.forget_permits(fewer);
            s.owed += fewer - taken;
        }
        s.limit = limit;
    }

    /// Waits for admission until `deadline` (none: no deadline). `false` when the deadline
    /// passed first.
    ///
    /// Cancel safe: a permit is counted only once acquired, and acquiring is the last step.
    pub(crate) async fn admit(&self, deadline: Option<Instant>) -> bool {
        let acquired = match deadline {
            None => self.permits.acquire().await,
            Some(at) => match tokio::time::timeout_at(at, self.permits.acquire()).await {
                Ok(acquired) => acquired,
                Err(_) => return false,
            },
        };
        // The semaphore is never closed.
        if let Ok(permit) = acquired {
            self.admitted(permit);
        }
        true
    }

    /// Admission without waiting.
    pub(crate) fn try_admit(&self) -> bool {
        match self.permits.try_acquire() {
            Ok(permit) => {
                self.admitted(permit);
                true
            }
            Err(_) => false,
        }
    }

    fn admitted(&self, permit: tokio::sync::SemaphorePermit<'_>) {
        let mut s = lock(&self.state);
        permit.forget();
        if s.limiter.is_some() {
            s.admitted += 1;
        }
        self.check(&s);
    }

    /// An admitted take ends: with the hold it measured, if it held a member.
    pub(crate) fn release(&self, held: Option<Duration>) {
        let mut s = lock(&self.state);
        if s.limiter.is_none() || s.admitted == 0 {
            // Admitted before the gate was (re)built: it counts for nothing.
            return;
        }
        let in_use = s.admitted;
        s.admitted -= 1;
        if s.owed > 0 {
            s.owed -= 1;
        } else {
            self.permits.add_permits(1);
        }
        if let (Some(held), Some(limiter)) = (held, s.limiter.as_mut()) {
            limiter.sample(held, in_use);
            let limit = limiter.limit();
            self.move_limit(&mut s, limit);
        }
        self.check(&s);
    }

    pub(crate) fn status(&self) -> Option<AdmissionStatus> {
        let s = lock(&self.state);
        let (latency, baseline, last_move) = s.limiter.as_ref()?.signal();
        Some(AdmissionStatus {
            limit: s.limit,
            admitted: s.admitted,
            latency,
            baseline,
            last_move,
        })
    }
}

#[cfg(all(test, not(pooler_loom)))]
mod tests {
    use super::*;

    #[tokio::test]
    #[allow(clippy::disallowed_methods)] // a plain task waits at the gate
    async fn lowering_the_limit_closes_nothing_and_admits_fewer() {
        let gate = Admission::new(AdmissionMode::Vegas, 4);
        for _ in 0..4 {
            assert!(gate.try_admit());
        }
        assert!(!gate.try_admit(), "four admitted: the limit");
        {
            let mut s = lock(&gate.state);
            gate.move_limit(&mut s, 2);
        }
        // Two of the four must come back before another is admitted.
        gate.release(None);
        assert!(!gate.try_admit());
        gate.release(None);
        assert!(!gate.try_admit());
        gate.release(None);
        assert!(gate.try_admit());
        assert!(!gate.try_admit());
        let status = gate.status().unwrap();
        assert_eq!((status.limit, status.admitted), (2, 2));
        // Turned off, a take waiting at the gate goes through.
        let gate = std::sync::Arc::new(gate);
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.admit(None).await }
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished(), "over the limit, a take waits");
        gate.set(AdmissionMode::Off, 4);
        assert!(waiting.await.unwrap());
        assert!(gate.status().is_none());
    }
}
