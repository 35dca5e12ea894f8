//! Pool configuration: every key of pooler's pool map, with its default, and its validation.
//!
//! One table — the `keys!` invocation below — lists every key with its kind. It generates the
//! builder's setters, the list of keys and their kinds that a pools file is checked against,
//! the change detection behind `reconfigure`, and the range checks of `validate`; and a field
//! of [`PoolConfig`] missing from it does not compile. So adding a key is one field and one
//! line of the table.

use std::time::Duration;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

use crate::admission::AdmissionMode;
use crate::error::ConfigError;
use crate::time::MAX_TIME;

/// Which free member a take hands out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum MemberOrder {
    /// The member returned most recently goes out first (a stack). A small working set stays
    /// warm and idle members collect at the back, where culling finds them. The default.
    #[default]
    Lifo,
    /// The member idle longest goes out first (a queue): round robin over the whole pool.
    Fifo,
}

/// The shortest `max_lifetime` accepted: below it a pool would do little but reconnect.
pub const MIN_LIFETIME: Duration = Duration::from_millis(100);

/// The largest count any key accepts (`init_count`, `max_count`, `queue_max`,
/// `auto_grow_threshold`): a million members or waiters, far above any real pool and far
/// below what would exhaust memory.
pub const MAX_COUNT: usize = 1_000_000;

/// The configuration of one pool.
///
/// Build one with [`PoolConfig::builder`], which validates, or [`PoolConfig::new`] (every
/// key but the required ones at its default); change one with
/// [`to_builder`](PoolConfig::to_builder). With the `serde` feature it reads and writes with
/// serde (every time value accepts the forms listed in [`time`](crate::time)); with the
/// `file` feature `PoolConfig::from_toml_str` reads TOML and reports every problem with
/// its key.
///
/// ```
/// use std::time::Duration;
/// use pooler::{MemberOrder, PoolConfig};
///
/// let config = PoolConfig::builder("pg")
///     .init_count(2)
///     .max_count(10)
///     .queue_max(100)
///     .member_order(MemberOrder::Fifo)
///     .max_lifetime(Duration::from_secs(3600))
///     .build()?;
/// assert_eq!(config.queue_max, 100);
/// # Ok::<(), pooler::ConfigError>(())
/// ```
///
/// The keys, their defaults and meaning, are the fields below (and pooler's pool map).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[non_exhaustive]
pub struct PoolConfig {
    /// The pool's name, unique within a `Pooler`. Required.
    pub name: String,
    /// The group the pool joins, for `take_group_member`. Default: none.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub group: Option<String>,
    /// Members started (in parallel) when the pool starts; also the growth batch and the size
    /// culling shrinks back to. Required.
    pub init_count: usize,
    /// The cap on members in use, free, starting and stopping together. Required, at least 1.
    pub max_count: usize,
    /// How often culling runs; zero disables it. Default: 15 s.
    #[cfg_attr(
        feature = "serde",
        serde(default = "defaults::cull_interval", with = "crate::time")
    )]
    pub cull_interval: Duration,
    /// The demand window: the pool keeps the peak in-use count seen over the last `max_age`
    /// (floored at `init_count`) and retires free members beyond it, oldest idle first.
    /// Default: 30 s.
    #[cfg_attr(
        feature = "serde",
        serde(default = "defaults::max_age", with = "crate::time")
    )]
    pub max_age: Duration,
    /// How long `Manager::start` and `Manager::initialize` may take together before the start
    /// is cancelled (and a member it produced is stopped); also bounds `check` and
    /// `recycle`. Default: 1 min.
    #[cfg_attr(
        feature = "serde",
        serde(default = "defaults::member_start_timeout", with = "crate::time")
    )]
    pub member_start_timeout: Duration,
    /// The most takers that may wait in the queue; zero means never queue. Default: 50.
    #[cfg_attr(feature = "serde", serde(default = "defaults::queue_max"))]
    pub queue_max: usize,
    /// Queue-delay shedding: when even the shortest wait in the queue over a whole
    /// `queue_interval` is longer than this, takes that would queue are refused at once with
    /// [`TakeError::Shed`](crate::TakeError::Shed) for the next interval (DBConnection's
    /// `queue_target`). Default: none (takes queue up to `queue_max`) — but with `admission`
    /// on, unless set, half the database's latency as the admission limiter measures it, at
    /// least 1 ms, and 50 ms until it has measured one ([`PoolConfig::ADMISSION_QUEUE_TARGET`];
    /// [`AdmissionStatus::queue_target`](crate::AdmissionStatus::queue_target) says the one
    /// in force).
    #[cfg_attr(
        feature = "serde",
        serde(
            default,
            with = "crate::time::option",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub queue_target: Option<Duration>,
    /// The interval `queue_target` is judged over. Default: 1 s.
    #[cfg_attr(
        feature = "serde",
        serde(default = "defaults::queue_interval", with = "crate::time")
    )]
    pub queue_interval: Duration,
    /// Adaptive admission: `vegas` or `gradient` let at most a limit of members be in use
    /// at once, the limit following the latency of holds between 1 and `max_count`; takes
    /// over it wait in the pool's queue (docs/design.md, "Admission"). Turned on, it brings
    /// queue-delay shedding with it: unless `queue_target` is set, half the latency the
    /// limiter measures (50 ms until it has measured one). Default: off.
    #[cfg_attr(feature = "serde", serde(default))]
    pub admission: AdmissionMode,
    /// After a successful take, if at most this many members are free, start up to
    /// `init_count` more (within `max_count`). Default: none (grow only on demand).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub auto_grow_threshold: Option<usize>,
    /// The most member starts in progress at once (a start waiting out a backoff step
    /// included): a pool filling up, replacing members whose lifetimes ended together, or
    /// growing for a burst of takes starts at most this many at a time, so it never opens a
    /// storm of connections. Takes that need more wait for the starts under way. Default:
    /// none (a batch starts at once, as pooler does).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub max_concurrent_starts: Option<usize>,
    /// The most member starts begun a second: starts beyond it wait their turn, spaced
    /// evenly (each counts as in progress meanwhile). With `max_concurrent_starts` it bounds
    /// the connects a pool makes whatever happens — a fill, a burst, lifetimes ending
    /// together. Default: none.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub max_start_rate: Option<usize>,
    /// Members are retired (and replaced) at this age: by timer while free, at take if the
    /// timer is late, at return if they expired in use. Default: none (no lifetime tracking at
    /// all).
    #[cfg_attr(
        feature = "serde",
        serde(
            default,
            with = "crate::time::option",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub max_lifetime: Option<Duration>,
    /// Make before break: this long before a member's lifetime ends, its replacement starts
    /// (within `max_count`), so that the member retires with its successor already free and
    /// no take waits for a connection because of lifetimes. Must be shorter than
    /// `max_lifetime`; longer than a start takes. Default: none (a member is replaced when it
    /// retires).
    #[cfg_attr(
        feature = "serde",
        serde(
            default,
            with = "crate::time::option",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub max_lifetime_overlap: Option<Duration>,
    /// Each member's lifetime is moved by a uniform random offset in `[-jitter, +jitter]`;
    /// must be less than `max_lifetime`. Default: 0.
    #[cfg_attr(feature = "serde", serde(default, with = "crate::time"))]
    pub max_lifetime_jitter: Duration,
    /// Which free member goes out first. Default: lifo.
    #[cfg_attr(feature = "serde", serde(default))]
    pub member_order: MemberOrder,
    /// How long `Manager::stop` may run; past it the stop is dropped, logged and its slot
    /// freed. Default: 30 s.
    #[cfg_attr(
        feature = "serde",
        serde(default = "defaults::member_shutdown", with = "crate::time")
    )]
    pub member_shutdown: Duration,
    /// Free members are checked with `Manager::check` on this schedule. Default: none.
    #[cfg_attr(
        feature = "serde",
        serde(
            default,
            with = "crate::time::option",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub health_check_interval: Option<Duration>,
    /// A member held longer than this is reported once, with where it was taken.
    /// Default: none.
    #[cfg_attr(
        feature = "serde",
        serde(
            default,
            with = "crate::time::option",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub leak_detection_threshold: Option<Duration>,
    /// Before handing out a member that has been idle at least this long, `take_member`,
    /// `take` and `with_member` check it with `Manager::check` (a failure replaces it and the
    /// take goes on); members used more recently skip the check, so a busy pool does not ping
    /// on every take (HikariCP uses 500 ms). `try_take_member` never waits, so it never
    /// checks. Default: none, or the manager's when it asks for one
    /// ([`Manager::idle_check_threshold`](crate::Manager::idle_check_threshold):
    /// pooler-mysql's 500 ms).
    #[cfg_attr(
        feature = "serde",
        serde(
            default,
            with = "crate::time::option",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub idle_check_threshold: Option<Duration>,
    /// How long [`Pool::take`](crate::Pool::take) waits for a member; zero never waits.
    /// Default: none (it waits until served, the pool closes, or the take is refused).
    /// `take_member` takes its timeout as an argument instead.
    #[cfg_attr(
        feature = "serde",
        serde(
            default,
            with = "crate::time::option",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub take_timeout: Option<Duration>,
    /// Whether failed-start backoff steps get full jitter (on unless a test turns it off for
    /// exact steps). Not a key.
    #[cfg_attr(feature = "serde", serde(skip, default = "defaults::yes"))]
    pub(crate) backoff_jitter: bool,
}

mod defaults {
    use std::time::Duration;

    pub(super) fn cull_interval() -> Duration {
        Duration::from_secs(15)
    }
    pub(super) fn max_age() -> Duration {
        Duration::from_secs(30)
    }
    pub(super) fn member_start_timeout() -> Duration {
        Duration::from_secs(60)
    }
    pub(super) fn queue_max() -> usize {
        50
    }
    pub(super) fn queue_interval() -> Duration {
        Duration::from_secs(1)
    }
    pub(super) fn member_shutdown() -> Duration {
        Duration::from_secs(30)
    }
    #[cfg(feature = "serde")]
    pub(super) fn yes() -> bool {
        true
    }
}

impl PoolConfig {
    /// The `queue_target` in force with `admission` on and none set, until the limiter has
    /// measured the database's latency (then half of it): DBConnection's default
    /// (docs/design.md, "Admission": a limit alone only moves the wait from the database to
    /// the queue).
    pub const ADMISSION_QUEUE_TARGET: Duration = Duration::from_millis(50);

    /// The `queue_target` a pool starts with: the one set, or with `admission` on,
    /// [`ADMISSION_QUEUE_TARGET`](Self::ADMISSION_QUEUE_TARGET) (which the latency the
    /// limiter measures then replaces).
    #[must_use]
    pub fn queue_target_in_force(&self) -> Option<Duration> {
        match (self.queue_target, self.admission) {
            (None, mode) if mode != AdmissionMode::Off => Some(Self::ADMISSION_QUEUE_TARGET),
            (target, _) => target,
        }
    }

    /// A config with the required keys and every other key at its default, not yet
    /// validated (a pool validates it when it starts).
    #[must_use]
    pub fn new(name: impl Into<String>, init_count: usize, max_count: usize) -> Self {
        PoolConfig {
            name: name.into(),
            group: None,
            init_count,
            max_count,
            cull_interval: defaults::cull_interval(),
            max_age: defaults::max_age(),
            member_start_timeout: defaults::member_start_timeout(),
            queue_max: defaults::queue_max(),
            queue_target: None,
            queue_interval: defaults::queue_interval(),
            admission: AdmissionMode::Off,
            auto_grow_threshold: None,
            max_start_rate: None,
            max_concurrent_starts: None,
            max_lifetime: None,
            max_lifetime_overlap: None,
            max_lifetime_jitter: Duration::ZERO,
            member_order: MemberOrder::Lifo,
            member_shutdown: defaults::member_shutdown(),
            health_check_interval: None,
            leak_detection_threshold: None,
            idle_check_threshold: None,
            take_timeout: None,
            backoff_jitter: true,
        }
    }

    /// A builder for a pool named `name`, every key at its default; `init_count` and
    /// `max_count` must be set.
    pub fn builder(name: impl Into<String>) -> PoolConfigBuilder {
        PoolConfigBuilder {
            config: PoolConfig::new(name, 0, 0),
            init_set: false,
            max_set: false,
        }
    }

    /// A builder starting from this config (to change some keys, as for `reconfigure`).
    pub fn to_builder(&self) -> PoolConfigBuilder {
        PoolConfigBuilder {
            config: self.clone(),
            init_set: true,
            max_set: true,
        }
    }

    /// Every key a pool table may hold.
    pub fn keys() -> impl Iterator<Item = &'static str> {
        KEYS.iter().map(|(key, _)| *key)
    }

    /// Checks the values against each other and their ranges.
    ///
    /// # Errors
    ///
    /// Every problem found, each naming the pool and the key; one problem is returned as
    /// itself, several as [`ConfigError::Multiple`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        let pool = || self.name.clone();
        let mut problems = Vec::new();
        if self.name.trim().is_empty() {
            problems.push(ConfigError::InvalidValue {
                pool: "?".into(),
                key: "name".into(),
                reason: "must not be empty".into(),
            });
        }
        for (key, kind, value) in self.values() {
            if let Some(Some(n)) = value.count().filter(|n| n.is_some_and(|n| n > MAX_COUNT)) {
                problems.push(ConfigError::InvalidValue {
                    pool: pool(),
                    key: key.into(),
                    reason: format!("{n} is above the limit of {MAX_COUNT}"),
                });
            }
            if let (Some(Some(time)), Kind::Time { zero_ok }) = (value.time(), kind) {
                let reason = if time > MAX_TIME {
                    "longer than the maximum of 365 days"
                } else if time.is_zero() && !zero_ok {
                    "must be greater than zero"
                } else {
                    continue;
                };
                problems.push(ConfigError::BadTime {
                    pool: pool(),
                    key: key.into(),
                    reason: reason.into(),
                });
            }
        }
        if self.max_count == 0 {
            problems.push(ConfigError::ZeroMaxCount { pool: pool() });
        }
        if self.max_start_rate == Some(0) {
            problems.push(ConfigError::InvalidValue {
                pool: pool(),
                key: "max_start_rate".into(),
                reason: "must be at least 1 (leave it out for no limit)".into(),
            });
        }
        if self.max_concurrent_starts == Some(0) {
            problems.push(ConfigError::InvalidValue {
                pool: pool(),
                key: "max_concurrent_starts".into(),
                reason: "must be at least 1 (leave it out for no limit)".into(),
            });
        }
        if self.init_count > self.max_count {
            problems.push(ConfigError::InitExceedsMax {
                pool: pool(),
                init_count: self.init_count,
                max_count: self.max_count,
            });
        }
        if let Some(lifetime) = self.max_lifetime
            && lifetime < MIN_LIFETIME
        {
            problems.push(ConfigError::InvalidValue {
                pool: pool(),
                key: "max_lifetime".into(),
                reason: format!(
                    "{} is shorter than {}: members would spend their lives reconnecting (a \
                     connection storm) instead of serving",
                    crate::time::Human(lifetime),
                    crate::time::Human(MIN_LIFETIME)
                ),
            });
        }
        match (self.max_lifetime_overlap, self.max_lifetime) {
            (Some(_), None) => problems.push(ConfigError::InvalidValue {
                pool: pool(),
                key: "max_lifetime_overlap".into(),
                reason: "needs a max_lifetime".into(),
            }),
            (Some(overlap), Some(lifetime)) if overlap >= lifetime => {
                problems.push(ConfigError::InvalidValue {
                    pool: pool(),
                    key: "max_lifetime_overlap".into(),
                    reason: "must be shorter than max_lifetime".into(),
                });
            }
            _ => {}
        }
        if let Some(lifetime) = self.max_lifetime
            && self.max_lifetime_jitter >= lifetime
        {
            problems.push(ConfigError::JitterNotBelowLifetime {
                pool: pool(),
                jitter: self.max_lifetime_jitter,
                max_lifetime: lifetime,
            });
        }
        ConfigError::from_list(problems)
    }
}

mod builder;
mod keys;
#[cfg(test)]
mod tests;

pub use builder::PoolConfigBuilder;

#[cfg(feature = "file")]
pub(crate) use keys::REQUIRED_KEYS;
pub(crate) use keys::{KEYS, Kind};
