//! Errors, one enum per operation.
//!
//! Every message is lowercase and names the pool; the manager's own error is kept whole in
//! [`StartError`] and reachable through [`std::error::Error::source`], never swallowed.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

mod config;

pub use config::ConfigError;

/// Why a take found no member (and could not simply queue): the cold engine's verdict, which
/// the checkout turns into a [`TakeError`] without reaching the cold engine itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Empty {
    /// No room to start more.
    AtCapacity,
    /// No member is free, there is room, and a start is under way that may serve the taker.
    AllInUse,
    /// Starts are failing and nothing can reach the taker before its deadline: no member in
    /// use, no start in flight that attempts by then (docs/design.md, "Failing starts").
    Unavailable,
    /// The pool is closed.
    Closed,
}

/// Why a member could not be started.
///
/// Carried by [`TakeError::Unavailable`] and [`TakeError::Timeout`] so that an outage shows its
/// cause (for example the connect error) instead of a bare "timed out".
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum StartError {
    /// `Manager::start` or `Manager::initialize` returned an error.
    Manager(Arc<dyn StdError + Send + Sync + 'static>),
    /// Start and initialize together ran longer than `member_start_timeout`.
    TimedOut(Duration),
    /// The member's driver task ended before it was handed out.
    Died,
    /// `Manager::start` or `Manager::initialize` panicked.
    Panicked,
    /// `Manager::is_broken` rejected the member as soon as it had started.
    Broken,
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Manager(e) => write!(f, "starting a member failed: {e}"),
            Self::TimedOut(t) => write!(
                f,
                "starting a member timed out after {}",
                crate::time::Human(*t)
            ),
            Self::Died => f.write_str("a member died while starting"),
            Self::Panicked => f.write_str("starting a member panicked"),
            Self::Broken => f.write_str("a member was broken as soon as it started"),
        }
    }
}

impl StdError for StartError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Self::Manager(e) => Some(&**e),
            _ => None,
        }
    }
}

/// Why a take did not produce a member.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum TakeError {
    /// No member is free and the pool is at `max_count` (pooler's `error_no_members`,
    /// reason `at_capacity`).
    AtCapacity {
        /// The pool's name.
        pool: Arc<str>,
    },
    /// No member is free; the take started new ones but does not wait for them (reason
    /// `all_in_use`). `take_member` with a timeout would have queued.
    AllInUse {
        /// The pool's name.
        pool: Arc<str>,
    },
    /// The queue of waiting takers already holds `queue_max` waiters (reason `queue_full`).
    QueueFull {
        /// The pool's name.
        pool: Arc<str>,
        /// The limit in force.
        queue_max: usize,
    },
    /// The taker waited in the queue for its whole timeout (reason `timeout`).
    Timeout {
        /// The pool's name.
        pool: Arc<str>,
        /// How long the taker waited.
        waited: Duration,
        /// The most recent start failure, if starts have been failing since the last success.
        last_start_error: Option<StartError>,
    },
    /// The pool is closed or closing.
    Closed {
        /// The pool's name.
        pool: Arc<str>,
    },
    /// No member is free or in use and starting new ones keeps failing, so waiting would not
    /// help: the pool is backing off and fails fast until a start succeeds.
    Unavailable {
        /// The pool's name.
        pool: Arc<str>,
        /// The most recent start failure.
        source: StartError,
    },
    /// No pool of the member type asked for belongs to that group.
    NoSuchGroup {
        /// The group asked for.
        group: Arc<str>,
    },
    /// The tokio runtime the pool was started on has shut down, so the pool can run no task
    /// (no start, stop or timer): it is closed. A pool lives on the runtime that started it.
    RuntimeGone {
        /// The pool's name.
        pool: Arc<str>,
    },
    /// The pool is overloaded (`queue_target`): a take that would have queued was refused at
    /// once (reason `shed`).
    Shed {
        /// The pool's name.
        pool: Arc<str>,
        /// The pool's `queue_target`.
        target: Duration,
        /// The shortest wait in the queue over the interval that judged the pool overloaded.
        delay: Duration,
    },
    /// The take waited more than twice `queue_target`: refused when its turn came while the
    /// pool is overloaded, or, with admission on, as soon as it had waited that long — its
    /// caller having likely given up — or, with a budget shorter than that, half its budget
    /// and at least the target, leaving its caller the rest (reason `shed`; docs/design.md,
    /// "Shedding" and "Admission").
    Stale {
        /// The pool's name.
        pool: Arc<str>,
        /// The pool's `queue_target`.
        target: Duration,
        /// How long the take waited.
        waited: Duration,
    },
    /// The pool's admission limit (`admission`) is reached and the take could not wait
    /// (`try_take_member`, or a timeout of zero): reason `over_limit`.
    OverLimit {
        /// The pool's name.
        pool: Arc<str>,
        /// The admission limit when the take was refused.
        limit: usize,
    },
    /// The waiter was dropped from the queue because `reconfigure` lowered `queue_max`.
    QueueShrunk {
        /// The pool's name.
        pool: Arc<str>,
        /// The new limit.
        queue_max: usize,
    },
}

impl fmt::Display for TakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::time::Human;
        match self {
            Self::AtCapacity { pool } => {
                write!(
                    f,
                    "pool `{pool}`: no free member and the pool is at max_count"
                )
            }
            Self::AllInUse { pool } => {
                write!(
                    f,
                    "pool `{pool}`: all members are in use; new ones are starting"
                )
            }
            Self::QueueFull { pool, queue_max } => write!(
                f,
                "pool `{pool}`: the queue of waiting takers is full (queue_max = {queue_max})"
            ),
            Self::Timeout {
                pool,
                waited,
                last_start_error,
            } => {
                write!(
                    f,
                    "pool `{pool}`: no member became free within {}",
                    Human(*waited)
                )?;
                match last_start_error {
                    Some(e) => write!(f, " (starts are failing: {e})"),
                    None => Ok(()),
                }
            }
            Self::Closed { pool } => write!(f, "pool `{pool}`: closed"),
            Self::Unavailable { pool, source } => write!(
                f,
                "pool `{pool}`: no member available, starts are failing: {source}"
            ),
            Self::NoSuchGroup { group } => {
                write!(f, "group `{group}`: no such group, or no pool in it")
            }
            Self::RuntimeGone { pool } => write!(
                f,
                "pool `{pool}`: the runtime it was started on has shut down"
            ),
            Self::Shed {
                pool,
                target,
                delay,
            } => write!(
                f,
                "pool `{pool}`: overloaded, take shed at once (the shortest wait in the queue was {} over the last interval, above queue_target = {})",
                Human(*delay),
                Human(*target)
            ),
            Self::Stale {
                pool,
                target,
                waited,
            } => write!(
                f,
                "pool `{pool}`: overloaded, take shed after waiting {} in a queue standing past queue_target = {}",
                Human(*waited),
                Human(*target)
            ),
            Self::OverLimit { pool, limit } => write!(
                f,
                "pool `{pool}`: {limit} takes hold members, the admission limit now"
            ),
            Self::QueueShrunk { pool, queue_max } => write!(
                f,
                "pool `{pool}`: removed from the queue when queue_max was lowered to {queue_max}"
            ),
        }
    }
}

impl StdError for TakeError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Self::Timeout {
                last_start_error: Some(e),
                ..
            }
            | Self::Unavailable { source: e, .. } => Some(e),
            _ => None,
        }
    }
}

impl TakeError {
    /// The name of the pool (or group) the error is about.
    #[must_use]
    pub fn pool(&self) -> &str {
        match self {
            Self::NoSuchGroup { group } => group,
            Self::AtCapacity { pool }
            | Self::AllInUse { pool }
            | Self::QueueFull { pool, .. }
            | Self::Timeout { pool, .. }
            | Self::Closed { pool }
            | Self::RuntimeGone { pool }
            | Self::Unavailable { pool, .. }
            | Self::OverLimit { pool, .. }
            | Self::QueueShrunk { pool, .. }
            | Self::Shed { pool, .. }
            | Self::Stale { pool, .. } => pool,
        }
    }

    /// The metrics `reason` label of pooler's `error_no_members` for this error.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::AtCapacity { .. } => "at_capacity",
            Self::AllInUse { .. } => "all_in_use",
            Self::QueueFull { .. } | Self::QueueShrunk { .. } => "queue_full",
            Self::Timeout { .. } => "timeout",
            Self::Closed { .. } | Self::RuntimeGone { .. } => "closed",
            Self::NoSuchGroup { .. } => "no_such_pool",
            Self::Unavailable { .. } => "failed",
            Self::Shed { .. } | Self::Stale { .. } => "shed",
            Self::OverLimit { .. } => "over_limit",
        }
    }
}

/// Why a registry operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoolerError {
    /// The pool's configuration was rejected, or its name is taken.
    Config(ConfigError),
    /// No pool of that name.
    NoSuchPool {
        /// The name asked for.
        pool: String,
    },
    /// The pool exists, with members of another type.
    WrongType {
        /// The pool's name.
        pool: String,
        /// The manager type asked for.
        requested: &'static str,
        /// The pool's manager type.
        actual: &'static str,
    },
    /// No pool belongs to that group.
    NoSuchGroup {
        /// The group asked for.
        group: String,
    },
}

impl From<ConfigError> for PoolerError {
    fn from(e: ConfigError) -> Self {
        PoolerError::Config(e)
    }
}

impl fmt::Display for PoolerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(e) => e.fmt(f),
            Self::NoSuchPool { pool } => write!(f, "pool `{pool}`: no such pool"),
            Self::WrongType {
                pool,
                requested,
                actual,
            } => write!(
                f,
                "pool `{pool}`: its manager is `{actual}`, not `{requested}`"
            ),
            Self::NoSuchGroup { group } => write!(f, "group `{group}`: no such group"),
        }
    }
}

impl StdError for PoolerError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            // Transparent: the configuration error speaks for itself.
            Self::Config(e) => e.source(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An awaited take returns `Result<Member, TakeError>` by value on its fast path: a
    /// `TakeError` that outgrows its niche layout (a field that takes the niche's place)
    /// costs every take the larger move, ~25 instructions of ~290 (docs/design.md,
    /// "Admission": the cost when off).
    #[test]
    fn take_error_keeps_its_size() {
        assert!(
            std::mem::size_of::<TakeError>() <= 56,
            "{}",
            std::mem::size_of::<TakeError>()
        );
    }
}
