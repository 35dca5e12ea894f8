//! Pool configuration: every key of pooler's pool map, with its default, and its validation.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;
use crate::time::{self, MAX_TIME};

/// Which free member a take hands out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberOrder {
    /// The member returned most recently goes out first (a stack). A small working set stays
    /// warm and idle members collect at the back, where culling finds them. The default.
    #[default]
    Lifo,
    /// The member idle longest goes out first (a queue): round robin over the whole pool.
    Fifo,
}

/// The configuration of one pool.
///
/// Build one in code with [`PoolConfig::new`] and struct-update syntax, or read it with serde
/// (every time value accepts the forms listed in [`time`](crate::time)), or from TOML with
/// [`PoolConfig::from_toml_str`], which reports every problem with its key.
///
/// ```
/// use std::time::Duration;
/// use pooler::{MemberOrder, PoolConfig};
///
/// let config = PoolConfig {
///     queue_max: 100,
///     member_order: MemberOrder::Fifo,
///     max_lifetime: Some(Duration::from_secs(3600)),
///     ..PoolConfig::new("pg", 2, 10)
/// };
/// config.validate().unwrap();
///
/// let same = PoolConfig::from_toml_str(r#"
///     name = "pg"
///     init_count = 2
///     max_count = 10
///     queue_max = 100
///     member_order = "fifo"
///     max_lifetime = [1, "hour"]
/// "#).unwrap();
/// assert_eq!(config, same);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// The pool's name, unique within a `Pooler` registry. Required.
    pub name: String,
    /// The group the pool joins, for `take_group_member`. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Members started (in parallel) when the pool starts; also the growth batch and the size
    /// culling shrinks back to. Required.
    pub init_count: usize,
    /// The cap on members in use, free, starting and stopping together. Required, at least 1.
    pub max_count: usize,
    /// How often culling runs; zero disables it. Default: 15 s.
    #[serde(default = "defaults::cull_interval", with = "time")]
    pub cull_interval: Duration,
    /// The demand window: the pool keeps the peak in-use count seen over the last `max_age`
    /// (floored at `init_count`) and culls free members beyond it, oldest idle first.
    /// Default: 30 s.
    #[serde(default = "defaults::max_age", with = "time")]
    pub max_age: Duration,
    /// How long `Manager::start` and `Manager::initialize` may take together before the start
    /// is cancelled (and a member it produced is stopped). Default: 1 min.
    #[serde(default = "defaults::member_start_timeout", with = "time")]
    pub member_start_timeout: Duration,
    /// The most takers that may wait in the queue; zero means never queue. Default: 50.
    #[serde(default = "defaults::queue_max")]
    pub queue_max: usize,
    /// After a successful take, if at most this many members are free, start up to
    /// `init_count` more (within `max_count`). Default: none (grow only on demand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_grow_threshold: Option<usize>,
    /// Members are recycled at this age: by timer while free, at take if the timer is late, at
    /// return if they expired in use. Default: none (no lifetime tracking at all).
    #[serde(
        default,
        with = "time::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_lifetime: Option<Duration>,
    /// Each member's lifetime is moved by a uniform random offset in `[-jitter, +jitter]`;
    /// must be less than `max_lifetime`. Default: 0.
    #[serde(default, with = "time")]
    pub max_lifetime_jitter: Duration,
    /// Which free member goes out first. Default: lifo.
    #[serde(default)]
    pub member_order: MemberOrder,
    /// How long `Manager::stop` may run; past it the stop is dropped, logged and its slot
    /// freed. Default: 30 s.
    #[serde(default = "defaults::member_shutdown", with = "time")]
    pub member_shutdown: Duration,
    /// Free members are checked with `Manager::check` on this schedule. Default: none.
    #[serde(
        default,
        with = "time::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub health_check_interval: Option<Duration>,
    /// A member held longer than this is reported once, with where it was taken.
    /// Default: none.
    #[serde(
        default,
        with = "time::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub leak_detection_threshold: Option<Duration>,
    /// Before handing out a member that has been idle at least this long, `take_member` and
    /// `with_member` check it with `Manager::check` (a failure replaces it and the take goes
    /// on); members used more recently skip the check, so a busy pool does not ping on every
    /// take (HikariCP uses 500 ms). `try_take_member` never waits, so it never checks.
    /// Default: none.
    #[serde(
        default,
        with = "time::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub idle_check_threshold: Option<Duration>,
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
    pub(super) fn member_shutdown() -> Duration {
        Duration::from_secs(30)
    }
}

/// The time-valued keys, read with [`time`](crate::time) so that a bad one is named.
const TIME_KEYS: &[&str] = &[
    "cull_interval",
    "max_age",
    "member_start_timeout",
    "max_lifetime",
    "max_lifetime_jitter",
    "member_shutdown",
    "health_check_interval",
    "leak_detection_threshold",
    "idle_check_threshold",
];
const COUNT_KEYS: &[&str] = &[
    "init_count",
    "max_count",
    "queue_max",
    "auto_grow_threshold",
];
const TEXT_KEYS: &[&str] = &["name", "group"];
const REQUIRED_KEYS: &[&str] = &["name", "init_count", "max_count"];

impl PoolConfig {
    /// A config with the required keys and every other key at its default.
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
            auto_grow_threshold: None,
            max_lifetime: None,
            max_lifetime_jitter: Duration::ZERO,
            member_order: MemberOrder::Lifo,
            member_shutdown: defaults::member_shutdown(),
            health_check_interval: None,
            leak_detection_threshold: None,
            idle_check_threshold: None,
        }
    }

    /// Every key a pool table may hold.
    pub fn keys() -> impl Iterator<Item = &'static str> {
        TEXT_KEYS
            .iter()
            .chain(COUNT_KEYS)
            .chain(TIME_KEYS)
            .chain(&["member_order"])
            .copied()
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
        if self.max_count == 0 {
            problems.push(ConfigError::ZeroMaxCount { pool: pool() });
        }
        if self.init_count > self.max_count {
            problems.push(ConfigError::InitExceedsMax {
                pool: pool(),
                init_count: self.init_count,
                max_count: self.max_count,
            });
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
        let times = [
            ("cull_interval", Some(self.cull_interval), true),
            ("max_age", Some(self.max_age), true),
            (
                "member_start_timeout",
                Some(self.member_start_timeout),
                false,
            ),
            ("max_lifetime", self.max_lifetime, false),
            ("max_lifetime_jitter", Some(self.max_lifetime_jitter), true),
            ("member_shutdown", Some(self.member_shutdown), false),
            ("health_check_interval", self.health_check_interval, false),
            (
                "leak_detection_threshold",
                self.leak_detection_threshold,
                false,
            ),
            ("idle_check_threshold", self.idle_check_threshold, true),
        ];
        for (key, value, zero_ok) in times {
            let Some(value) = value else { continue };
            let reason = if value > MAX_TIME {
                "longer than the maximum of 365 days"
            } else if value.is_zero() && !zero_ok {
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
        ConfigError::from_list(problems)
    }

    /// Reads and validates one pool from TOML text (the keys of one `[[pools]]` table).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Syntax`] for text that is not TOML; otherwise every problem found, each
    /// naming the key: unknown keys, missing keys, bad time values, values of the wrong type
    /// or range, and what [`validate`](Self::validate) rejects.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let table: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| ConfigError::Syntax {
                    message: e.to_string(),
                })?;
        Self::from_table(&table)
    }

    /// Reads and validates one pool from a TOML table.
    ///
    /// # Errors
    ///
    /// As [`from_toml_str`](Self::from_toml_str), less the syntax error.
    pub fn from_table(table: &toml::Table) -> Result<Self, ConfigError> {
        let pool = table
            .get("name")
            .and_then(toml::Value::as_str)
            .unwrap_or("?")
            .to_owned();
        let mut problems = Vec::new();
        for key in REQUIRED_KEYS {
            if !table.contains_key(*key) {
                problems.push(ConfigError::MissingKey {
                    pool: pool.clone(),
                    key,
                });
            }
        }
        for (key, value) in table {
            let invalid = |reason: String| ConfigError::InvalidValue {
                pool: pool.clone(),
                key: key.clone(),
                reason,
            };
            if TIME_KEYS.contains(&key.as_str()) {
                if let Err(reason) = time::parse_value(value.clone()) {
                    problems.push(ConfigError::BadTime {
                        pool: pool.clone(),
                        key: key.clone(),
                        reason,
                    });
                }
            } else if COUNT_KEYS.contains(&key.as_str()) {
                match value.as_integer() {
                    Some(n) if n >= 0 => {}
                    Some(n) => problems.push(invalid(format!("{n} is negative"))),
                    None => problems.push(invalid(format!(
                        "expected a whole number, found {}",
                        value.type_str()
                    ))),
                }
            } else if TEXT_KEYS.contains(&key.as_str()) {
                if !value.is_str() {
                    problems.push(invalid(format!(
                        "expected a string, found {}",
                        value.type_str()
                    )));
                }
            } else if key == "member_order" {
                if !matches!(value.as_str(), Some("lifo" | "fifo")) {
                    problems.push(invalid(format!(
                        "expected \"lifo\" or \"fifo\", found {value}"
                    )));
                }
            } else {
                problems.push(ConfigError::UnknownKey {
                    pool: pool.clone(),
                    key: key.clone(),
                });
            }
        }
        ConfigError::from_list(problems)?;
        let config = PoolConfig::deserialize(toml::Value::Table(table.clone())).map_err(|e| {
            ConfigError::InvalidValue {
                pool: pool.clone(),
                key: "?".into(),
                reason: e.to_string(),
            }
        })?;
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_ones() {
        let c = PoolConfig::from_toml_str("name = \"p\"\ninit_count = 1\nmax_count = 2").unwrap();
        assert_eq!(c, PoolConfig::new("p", 1, 2));
        assert_eq!(c.cull_interval, Duration::from_secs(15));
        assert_eq!(c.max_age, Duration::from_secs(30));
        assert_eq!(c.member_start_timeout, Duration::from_secs(60));
        assert_eq!(c.queue_max, 50);
        assert_eq!(c.member_shutdown, Duration::from_secs(30));
        assert_eq!(c.member_order, MemberOrder::Lifo);
        assert_eq!(c.max_lifetime, None);
    }

    #[test]
    fn every_problem_is_reported_with_its_key() {
        let err = PoolConfig::from_toml_str(
            r#"
            name = "p"
            init_count = -1
            max_count = "ten"
            cull_interval = "soon"
            member_order = "random"
            colour = "blue"
        "#,
        )
        .unwrap_err();
        let text = err.to_string();
        for needle in [
            "init_count",
            "max_count",
            "cull_interval",
            "member_order",
            "`colour`",
        ] {
            assert!(text.contains(needle), "{needle} missing from: {text}");
        }
        assert_eq!(err.problems().len(), 5);
        assert!(
            err.problems()
                .iter()
                .any(|p| matches!(p, ConfigError::UnknownKey { key, .. } if key == "colour"))
        );
        assert!(
            err.problems()
                .iter()
                .any(|p| matches!(p, ConfigError::BadTime { key, .. } if key == "cull_interval"))
        );
    }

    #[test]
    fn semantic_rules_are_typed() {
        let e = PoolConfig::new("p", 3, 2).validate().unwrap_err();
        assert_eq!(
            e,
            ConfigError::InitExceedsMax {
                pool: "p".into(),
                init_count: 3,
                max_count: 2
            }
        );
        assert_eq!(
            e.to_string(),
            "pool `p`: init_count (3) exceeds max_count (2)"
        );
        assert!(matches!(
            PoolConfig::new("p", 0, 0).validate(),
            Err(ConfigError::ZeroMaxCount { .. })
        ));
        let jitter = PoolConfig {
            max_lifetime: Some(Duration::from_secs(10)),
            max_lifetime_jitter: Duration::from_secs(10),
            ..PoolConfig::new("p", 1, 2)
        };
        assert!(matches!(
            jitter.validate(),
            Err(ConfigError::JitterNotBelowLifetime { .. })
        ));
        let zero_timeout = PoolConfig {
            member_start_timeout: Duration::ZERO,
            ..PoolConfig::new("p", 1, 2)
        };
        assert!(matches!(
            zero_timeout.validate(),
            Err(ConfigError::BadTime { key, .. }) if key == "member_start_timeout"
        ));
    }

    #[test]
    fn missing_keys_and_syntax_are_named() {
        let e = PoolConfig::from_toml_str("init_count = 1").unwrap_err();
        let missing: Vec<_> = e
            .problems()
            .into_iter()
            .filter_map(|p| match p {
                ConfigError::MissingKey { key, .. } => Some(*key),
                _ => None,
            })
            .collect();
        assert_eq!(missing, ["name", "max_count"]);
        assert!(matches!(
            PoolConfig::from_toml_str("name = "),
            Err(ConfigError::Syntax { .. })
        ));
    }

    #[test]
    fn serde_round_trip_keeps_every_value() {
        let c = PoolConfig {
            group: Some("g".into()),
            max_lifetime: Some(Duration::from_millis(1500)),
            max_lifetime_jitter: Duration::from_millis(250),
            health_check_interval: Some(Duration::from_secs(5)),
            auto_grow_threshold: Some(1),
            member_order: MemberOrder::Fifo,
            ..PoolConfig::new("p", 1, 4)
        };
        let text = toml::to_string(&c).unwrap();
        assert_eq!(PoolConfig::from_toml_str(&text).unwrap(), c);
    }
}
