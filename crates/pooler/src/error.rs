//! Errors, one enum per operation.
//!
//! Every message is lowercase and names the pool; the manager's own error is kept whole in
//! [`StartError`] and reachable through [`std::error::Error::source`], never swallowed.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

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
                humantime::format_duration(*t)
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
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TakeError {
    /// No member is free and the pool is at `max_count` (pooler's `error_no_members`,
    /// reason `at_capacity`).
    #[error("pool `{pool}`: no free member and the pool is at max_count")]
    AtCapacity {
        /// The pool's name.
        pool: Arc<str>,
    },
    /// No member is free; the take started new ones but does not wait for them (reason
    /// `all_in_use`). `take_member` with a timeout would have queued.
    #[error("pool `{pool}`: all members are in use; new ones are starting")]
    AllInUse {
        /// The pool's name.
        pool: Arc<str>,
    },
    /// The queue of waiting takers already holds `queue_max` waiters (reason `queue_full`).
    #[error("pool `{pool}`: the queue of waiting takers is full (queue_max = {queue_max})")]
    QueueFull {
        /// The pool's name.
        pool: Arc<str>,
        /// The limit in force.
        queue_max: usize,
    },
    /// The taker waited in the queue for its whole timeout (reason `timeout`).
    #[error("pool `{pool}`: no member became free within {}{}", humantime::format_duration(*.waited), cause(.last_start_error))]
    Timeout {
        /// The pool's name.
        pool: Arc<str>,
        /// How long the taker waited.
        waited: Duration,
        /// The most recent start failure, if starts have been failing since the last success.
        #[source]
        last_start_error: Option<StartError>,
    },
    /// The pool is closed or closing.
    #[error("pool `{pool}`: closed")]
    Closed {
        /// The pool's name.
        pool: Arc<str>,
    },
    /// No member is free or in use and starting new ones keeps failing, so waiting would not
    /// help: the pool is backing off and fails fast until a start succeeds.
    #[error("pool `{pool}`: no member available, starts are failing: {source}")]
    Unavailable {
        /// The pool's name.
        pool: Arc<str>,
        /// The most recent start failure.
        source: StartError,
    },
    /// No pool of the member type asked for belongs to that group.
    #[error("group `{group}`: no such group, or no pool in it")]
    NoSuchGroup {
        /// The group asked for.
        group: Arc<str>,
    },
    /// The tokio runtime the pool was started on has shut down, so the pool can run no task
    /// (no start, stop or timer): it is closed. A pool lives on the runtime that started it.
    #[error("pool `{pool}`: the runtime it was started on has shut down")]
    RuntimeGone {
        /// The pool's name.
        pool: Arc<str>,
    },
    /// The pool is overloaded (`queue_target`): a take that would have queued was refused at
    /// once.
    #[error("pool `{pool}`: overloaded, take shed at once (the shortest wait in the queue was {} over the last interval, above queue_target = {})", humantime::format_duration(*.delay), humantime::format_duration(*.target))]
    Shed {
        /// The pool's name.
        pool: Arc<str>,
        /// The pool's `queue_target`.
        target: Duration,
        /// The shortest wait in the queue over the interval that judged the pool overloaded.
        delay: Duration,
    },
    /// The pool's admission limit (`admission`) is reached and the take could not wait
    /// (`try_take_member`, or a timeout of zero): reason `over_limit`.
    #[error("pool `{pool}`: {limit} takes hold members, the admission limit now")]
    OverLimit {
        /// The pool's name.
        pool: Arc<str>,
        /// The admission limit when the take was refused.
        limit: usize,
    },
    /// The waiter was dropped from the queue because `reconfigure` lowered `queue_max`.
    #[error("pool `{pool}`: removed from the queue when queue_max was lowered to {queue_max}")]
    QueueShrunk {
        /// The pool's name.
        pool: Arc<str>,
        /// The new limit.
        queue_max: usize,
    },
}

fn cause(e: &Option<StartError>) -> String {
    e.as_ref()
        .map(|e| format!(" (starts are failing: {e})"))
        .unwrap_or_default()
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
            | Self::Shed { pool, .. } => pool,
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
            Self::Shed { .. } => "shed",
            Self::OverLimit { .. } => "over_limit",
        }
    }
}

/// A configuration was rejected. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `init_count` is larger than `max_count`.
    #[error("pool `{pool}`: init_count ({init_count}) exceeds max_count ({max_count})")]
    InitExceedsMax {
        /// The pool's name.
        pool: String,
        /// The rejected `init_count`.
        init_count: usize,
        /// The rejected `max_count`.
        max_count: usize,
    },
    /// `max_count` is zero.
    #[error("pool `{pool}`: max_count must be at least 1")]
    ZeroMaxCount {
        /// The pool's name.
        pool: String,
    },
    /// `max_lifetime_jitter` is not strictly less than `max_lifetime`
    /// (pooler's `jitter_must_be_less_than_max_lifetime`).
    #[error(
        "pool `{pool}`: max_lifetime_jitter ({}) must be less than max_lifetime ({})",
        humantime::format_duration(*.jitter),
        humantime::format_duration(*.max_lifetime)
    )]
    JitterNotBelowLifetime {
        /// The pool's name.
        pool: String,
        /// The rejected jitter.
        jitter: Duration,
        /// The lifetime it must stay below.
        max_lifetime: Duration,
    },
    /// A key the configuration does not know.
    #[error("pool `{pool}`: unknown key `{key}`")]
    UnknownKey {
        /// The pool's name, or `?` when the name itself is missing.
        pool: String,
        /// The unknown key.
        key: String,
    },
    /// A required key is absent.
    #[error("pool `{pool}`: missing key `{key}`")]
    MissingKey {
        /// The pool's name, or `?` when the name itself is missing.
        pool: String,
        /// The missing key.
        key: &'static str,
    },
    /// A time value could not be read (see [`time`](crate::time) for the accepted forms).
    #[error("pool `{pool}`: bad time value for `{key}`: {reason}")]
    BadTime {
        /// The pool's name.
        pool: String,
        /// The key whose value is bad.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Any other value that is out of range or of the wrong type.
    #[error("pool `{pool}`: bad value for `{key}`: {reason}")]
    InvalidValue {
        /// The pool's name.
        pool: String,
        /// The key whose value is bad.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The input is not valid TOML at all.
    #[error("invalid toml: {message}")]
    Syntax {
        /// The parser's message, with line and column.
        message: String,
    },
    /// `reconfigure` was given a config with another name.
    #[error("pool `{pool}`: reconfigure cannot rename the pool (to `{new_name}`)")]
    NameChanged {
        /// The pool's name.
        pool: String,
        /// The name in the rejected config.
        new_name: String,
    },
    /// `reconfigure` lowered `max_count` below what the pool holds and not enough free
    /// members could be stopped to make up the difference.
    #[error(
        "pool `{pool}`: cannot lower max_count to {max_count}: {needed} members would have to stop but only {free} are free"
    )]
    NotEnoughFree {
        /// The pool's name.
        pool: String,
        /// The requested `max_count`.
        max_count: usize,
        /// How many members would have to stop.
        needed: usize,
        /// How many are free.
        free: usize,
    },
    /// The pool is closed; nothing can be reconfigured.
    #[error("pool `{pool}`: closed")]
    Closed {
        /// The pool's name.
        pool: String,
    },
    /// A pool of that name already exists in the [`Pooler`](crate::Pooler) (or twice in a
    /// pools file).
    #[error("pool `{pool}`: a pool of that name already exists")]
    DuplicateName {
        /// The name.
        pool: String,
    },
    /// A pools-file entry names a member kind nobody registered.
    #[error("pool `{pool}`: unknown kind `{kind}` (known: {known})")]
    UnknownKind {
        /// The pool's name.
        pool: String,
        /// The kind asked for.
        kind: String,
        /// The kinds registered, comma-separated.
        known: String,
    },
    /// `Pool::start` or `Pool::start_lazy` was called outside a tokio runtime: the pool's
    /// starts, stops and timers need one.
    #[error(
        "pool `{pool}`: no tokio runtime here; start the pool from inside one (`#[tokio::main]`, `Runtime::block_on`, or a task)"
    )]
    NoRuntime {
        /// The pool's name.
        pool: String,
    },
    /// Several problems at once, each naming its pool and key.
    #[error("{} problems: {}", .0.len(), join(.0))]
    Multiple(Vec<ConfigError>),
}

fn join(errors: &[ConfigError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl ConfigError {
    /// Folds a list of problems into one error: itself when there is one, `Multiple` otherwise.
    pub(crate) fn from_list(mut problems: Vec<ConfigError>) -> Result<(), ConfigError> {
        match problems.len() {
            0 => Ok(()),
            1 => Err(problems.remove(0)),
            _ => Err(ConfigError::Multiple(problems)),
        }
    }

    /// Every single problem this error holds (one, or each of `Multiple`).
    #[must_use]
    pub fn problems(&self) -> Vec<&ConfigError> {
        match self {
            Self::Multiple(list) => list.iter().flat_map(ConfigError::problems).collect(),
            other => vec![other],
        }
    }
}

/// Why a registry operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PoolerError {
    /// The pool's configuration was rejected, or its name is taken.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No pool of that name.
    #[error("pool `{pool}`: no such pool")]
    NoSuchPool {
        /// The name asked for.
        pool: String,
    },
    /// The pool exists, with members of another type.
    #[error("pool `{pool}`: its manager is `{actual}`, not `{requested}`")]
    WrongType {
        /// The pool's name.
        pool: String,
        /// The manager type asked for.
        requested: &'static str,
        /// The pool's manager type.
        actual: &'static str,
    },
    /// No pool belongs to that group.
    #[error("group `{group}`: no such group")]
    NoSuchGroup {
        /// The group asked for.
        group: String,
    },
}
