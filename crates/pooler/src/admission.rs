//! Adaptive admission (docs/design.md, "Admission"): with `admission = "vegas"` (or
//! `"gradient"`), at most `limit` members are in use at a time, `limit` moving between 1 and
//! `max_count` with the latency the pool observes — how long each member is held, or what
//! the manager measures of the server. The limit is one more bound in the hot core, beside
//! the free list: a take over it waits in the pool's one queue, as a take that finds nothing
//! free does, so every promise of that queue holds for it (`hot.rs`). With a
//! `queue_target`, a queue that has stayed non-empty longer than the target is served newest
//! first (adaptive LIFO: the oldest waiters' callers have likely given up), and a take that
//! has waited twice the target — or half a budget shorter than that, once past the target —
//! is refused (`Stale`), so none waits out its budget behind newer ones. Lowering the limit closes nothing: it hands out fewer. This module holds the
//! public names and the limiters (`limiters.rs`); the hot core holds the limiter in use.
//!
//! Which holds are timed for the limiter is the hot core's sampling rule (`hot/limit.rs`): every
//! hold begun with at least half the limit in use, one a housekeeping tick otherwise. A
//! timed hold's return tells the limiter what it [`Heard`].
//!
//! # Invariants
//!
//! 1. A limiter's limit is within `1..=max` after every call (`limiters.rs`).

use std::time::Duration;

mod limiters;

pub(crate) use limiters::Limiter;

/// What the limiter hears of one timed hold's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Heard {
    /// A latency: the hold's, or what the manager measured of the server.
    Took(Duration),
    /// A hold this long, cut at a request's deadline ([`Latency::Late`](crate::Latency::Late)):
    /// no latency, a sign of overload.
    Late(Duration),
}

impl Heard {
    /// How long the hold took or lasted: whether it began before the limit last moved.
    pub(crate) fn length(self) -> Duration {
        match self {
            Heard::Took(d) | Heard::Late(d) => d,
        }
    }
}

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

/// What the admission limiter says of itself ([`Pool::admission`](crate::Pool::admission)).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct AdmissionStatus {
    /// Takes that may hold a member at once now.
    pub limit: usize,
    /// Members in use now: the limit bounds them.
    pub admitted: usize,
    /// The latency of the last batch of holds: the mean of its middle half.
    pub latency: Duration,
    /// What that latency is compared with: the database's latency unloaded (`vegas`), or
    /// the long-term average hold (`gradient`).
    pub baseline: Duration,
    /// Why the limit last moved.
    pub last_move: LimitMove,
    /// The queue target in force: `queue_target` when set, else half the `baseline` once
    /// there is one (at least a millisecond; [`PoolConfig::ADMISSION_QUEUE_TARGET`] until
    /// then).
    ///
    /// [`PoolConfig::ADMISSION_QUEUE_TARGET`]: crate::PoolConfig::ADMISSION_QUEUE_TARGET
    pub queue_target: Duration,
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
    /// It is halved for two batches to measure the database's latency unloaded, then put
    /// back (`vegas`).
    Probed,
    /// It halved: more than a quarter of the last holds were cut at their deadline
    /// ([`Latency::Late`](crate::Latency::Late)) — a database too slow for the callers'
    /// budgets, whatever the holds that did end measured.
    Late,
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
            LimitMove::Late => "late",
        }
    }
}

impl Limiter {
    /// The limiter for `mode` with at most `max`: `current` kept (its `max` updated) when it
    /// is of that kind; another kind starts from `max`; none for `Off`.
    pub(crate) fn for_mode(
        mode: AdmissionMode,
        max: usize,
        current: Option<Limiter>,
    ) -> Option<Self> {
        let mut limiter = match (mode, current) {
            (AdmissionMode::Off, _) => return None,
            (AdmissionMode::Vegas, Some(l @ Limiter::Vegas(_)))
            | (AdmissionMode::Gradient, Some(l @ Limiter::Gradient(_))) => l,
            (AdmissionMode::Vegas, _) => Limiter::vegas(max),
            (AdmissionMode::Gradient, _) => Limiter::gradient(max),
        };
        limiter.set_max(max);
        Some(limiter)
    }

    /// What the limiter says of itself, with `admitted` members in use.
    pub(crate) fn status(&self, admitted: usize, queue_target: Duration) -> AdmissionStatus {
        let (latency, baseline, last_move) = self.signal();
        AdmissionStatus {
            limit: self.limit(),
            admitted,
            latency,
            baseline,
            last_move,
            queue_target,
        }
    }

    /// The queue target derived from the latency the limiter measured: half its baseline
    /// (the database's latency unloaded, or the long-term average hold), at least a
    /// millisecond; `None` before a first batch (docs/design.md, "Admission").
    pub(crate) fn derived_target(&self) -> Option<Duration> {
        let (_, baseline, last_move) = self.signal();
        (last_move != LimitMove::Starting && !baseline.is_zero())
            .then(|| (baseline / 2).max(Duration::from_millis(1)))
    }
}
