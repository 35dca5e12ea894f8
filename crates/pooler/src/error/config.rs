//! Why a configuration was rejected: one variant per problem, naming the pool and the
//! offending key or value; several problems come back together.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

/// A configuration was rejected. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `init_count` is larger than `max_count`.
    InitExceedsMax {
        /// The pool's name.
        pool: String,
        /// The rejected `init_count`.
        init_count: usize,
        /// The rejected `max_count`.
        max_count: usize,
    },
    /// `max_count` is zero.
    ZeroMaxCount {
        /// The pool's name.
        pool: String,
    },
    /// `max_lifetime_jitter` is not strictly less than `max_lifetime`
    /// (pooler's `jitter_must_be_less_than_max_lifetime`).
    JitterNotBelowLifetime {
        /// The pool's name.
        pool: String,
        /// The rejected jitter.
        jitter: Duration,
        /// The lifetime it must stay below.
        max_lifetime: Duration,
    },
    /// A key the configuration does not know.
    UnknownKey {
        /// The pool's name, or `?` when the name itself is missing.
        pool: String,
        /// The unknown key.
        key: String,
    },
    /// A required key is absent.
    MissingKey {
        /// The pool's name, or `?` when the name itself is missing.
        pool: String,
        /// The missing key.
        key: &'static str,
    },
    /// A time value could not be read (see [`time`](crate::time) for the accepted forms).
    BadTime {
        /// The pool's name.
        pool: String,
        /// The key whose value is bad.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Any other value that is out of range or of the wrong type.
    InvalidValue {
        /// The pool's name.
        pool: String,
        /// The key whose value is bad.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The input is not valid TOML at all.
    Syntax {
        /// The parser's message, with line and column.
        message: String,
    },
    /// `reconfigure` was given a config with another name.
    NameChanged {
        /// The pool's name.
        pool: String,
        /// The name in the rejected config.
        new_name: String,
    },
    /// `reconfigure` lowered `max_count` below what the pool holds and not enough free
    /// members could be stopped to make up the difference.
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
    Closed {
        /// The pool's name.
        pool: String,
    },
    /// A pool of that name already exists in the [`Pooler`](crate::Pooler) (or twice in a
    /// pools file).
    DuplicateName {
        /// The name.
        pool: String,
    },
    /// A pools-file entry names a member kind nobody registered.
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
    NoRuntime {
        /// The pool's name.
        pool: String,
    },
    /// Several problems at once, each naming its pool and key.
    Multiple(Vec<ConfigError>),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::time::Human;
        match self {
            Self::InitExceedsMax {
                pool,
                init_count,
                max_count,
            } => write!(
                f,
                "pool `{pool}`: init_count ({init_count}) exceeds max_count ({max_count})"
            ),
            Self::ZeroMaxCount { pool } => write!(f, "pool `{pool}`: max_count must be at least 1"),
            Self::JitterNotBelowLifetime {
                pool,
                jitter,
                max_lifetime,
            } => write!(
                f,
                "pool `{pool}`: max_lifetime_jitter ({}) must be less than max_lifetime ({})",
                Human(*jitter),
                Human(*max_lifetime)
            ),
            Self::UnknownKey { pool, key } => write!(f, "pool `{pool}`: unknown key `{key}`"),
            Self::MissingKey { pool, key } => write!(f, "pool `{pool}`: missing key `{key}`"),
            Self::BadTime { pool, key, reason } => {
                write!(f, "pool `{pool}`: bad time value for `{key}`: {reason}")
            }
            Self::InvalidValue { pool, key, reason } => {
                write!(f, "pool `{pool}`: bad value for `{key}`: {reason}")
            }
            Self::Syntax { message } => write!(f, "invalid toml: {message}"),
            Self::NameChanged { pool, new_name } => write!(
                f,
                "pool `{pool}`: reconfigure cannot rename the pool (to `{new_name}`)"
            ),
            Self::NotEnoughFree {
                pool,
                max_count,
                needed,
                free,
            } => write!(
                f,
                "pool `{pool}`: cannot lower max_count to {max_count}: {needed} members would have to stop but only {free} are free"
            ),
            Self::Closed { pool } => write!(f, "pool `{pool}`: closed"),
            Self::DuplicateName { pool } => {
                write!(f, "pool `{pool}`: a pool of that name already exists")
            }
            Self::UnknownKind { pool, kind, known } => {
                write!(f, "pool `{pool}`: unknown kind `{kind}` (known: {known})")
            }
            Self::NoRuntime { pool } => write!(
                f,
                "pool `{pool}`: no tokio runtime here; start the pool from inside one (`#[tokio::main]`, `Runtime::block_on`, or a task)"
            ),
            Self::Multiple(problems) => {
                write!(f, "{} problems: ", problems.len())?;
                for (i, problem) in problems.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "; " };
                    write!(f, "{sep}{problem}")?;
                }
                Ok(())
            }
        }
    }
}

impl StdError for ConfigError {}

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
