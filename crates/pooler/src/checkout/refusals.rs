//! The errors a take gets, each counted where it is made.

use std::time::Duration;

use crate::error::{Empty, StartError, TakeError};
use crate::manager::Manager;
use crate::shared::Shared;

impl<M: Manager> Shared<M> {
    /// `error`, counted under its reason.
    fn counted(&self, error: TakeError) -> TakeError {
        self.metrics.no_member(&error);
        error
    }

    /// The error of a take that found the pool full, counted (the common refusal, kept small).
    pub(crate) fn at_capacity(&self) -> TakeError {
        self.metrics.at_capacity();
        TakeError::AtCapacity {
            pool: self.name.clone(),
        }
    }

    /// The error of a take that found no member, counted.
    pub(super) fn refused(&self, why: Empty, last_error: Option<StartError>) -> TakeError {
        let pool = self.name.clone();
        self.counted(match why {
            Empty::AtCapacity => TakeError::AtCapacity { pool },
            Empty::AllInUse => TakeError::AllInUse { pool },
            Empty::Closed => return self.closed_error(),
            Empty::Unavailable => match last_error {
                Some(source) => TakeError::Unavailable { pool, source },
                None => TakeError::AllInUse { pool },
            },
        })
    }

    pub(crate) fn queue_full(&self, queue_max: usize) -> TakeError {
        tracing::debug!(pool = %self.name, queue_max, "queue full; take refused");
        self.counted(TakeError::QueueFull {
            pool: self.name.clone(),
            queue_max,
        })
    }

    /// The error of a take an overloaded pool shed, counted.
    pub(crate) fn shed_error(&self, target: Duration, delay: Duration) -> TakeError {
        tracing::debug!(pool = %self.name, "overloaded (queue_target); take shed");
        self.counted(TakeError::Shed {
            pool: self.name.clone(),
            target,
            delay,
        })
    }

    /// A take refused when it had waited too long while the pool is overloaded
    /// (`queue_target`; docs/design.md, "Shedding").
    pub(crate) fn stale_error(&self, target: Duration, waited: Duration) -> TakeError {
        tracing::debug!(pool = %self.name, waited = ?waited, "overloaded (queue_target); take shed after waiting");
        self.counted(TakeError::Stale {
            pool: self.name.clone(),
            target,
            waited,
        })
    }

    /// The error a take that cannot wait gets over the admission limit: `limit`, as the hot
    /// core refused it (no second look under its lock).
    pub(crate) fn over_limit(&self, limit: usize) -> TakeError {
        self.counted(TakeError::OverLimit {
            pool: self.name.clone(),
            limit,
        })
    }

    /// The error a take gets from a closed pool.
    pub(crate) fn closed_error(&self) -> TakeError {
        let pool = self.name.clone();
        if self.features.is_gone() {
            TakeError::RuntimeGone { pool }
        } else {
            TakeError::Closed { pool }
        }
    }

    /// The error of a take that waited `waited` in vain, counted.
    pub(crate) fn timed_out(&self, waited: Duration) -> TakeError {
        let last_start_error = self.cold.read(|c| c.engine.last_error().cloned());
        self.counted(TakeError::Timeout {
            pool: self.name.clone(),
            waited,
            last_start_error,
        })
    }
}
