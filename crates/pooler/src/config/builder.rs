//! The builder of a [`PoolConfig`]: the key setters the `keys!` table generates
//! (`keys.rs`), a few that are not keys, and `build`, which validates.

use super::PoolConfig;
use crate::error::ConfigError;

/// A [`PoolConfig`] being built: every key at its default until set; [`build`] validates.
///
/// [`build`]: PoolConfigBuilder::build
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct PoolConfigBuilder {
    pub(super) config: PoolConfig,
    /// Which required counts were set.
    pub(super) init_set: bool,
    pub(super) max_set: bool,
}

impl PoolConfigBuilder {
    /// Sets the pool's `name`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.config.name = name.into();
        self
    }

    /// Sets the `group` the pool joins (see [`PoolConfig::group`]).
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.config.group = Some(group.into());
        self
    }

    /// Leaves no group.
    pub fn no_group(mut self) -> Self {
        self.config.group = None;
        self
    }

    /// Turns the full jitter of failed-start backoff steps off (or on again): for tests that
    /// need exact steps. Not a key.
    #[doc(hidden)]
    pub fn backoff_jitter(mut self, on: bool) -> Self {
        self.config.backoff_jitter = on;
        self
    }

    /// The config, validated.
    ///
    /// # Errors
    ///
    /// [`ConfigError::MissingKey`] when `init_count` or `max_count` was never set; otherwise
    /// what [`PoolConfig::validate`] reports.
    pub fn build(self) -> Result<PoolConfig, ConfigError> {
        let pool = || self.config.name.clone();
        let mut problems = Vec::new();
        if !self.init_set {
            problems.push(ConfigError::MissingKey {
                pool: pool(),
                key: "init_count",
            });
        }
        if !self.max_set {
            problems.push(ConfigError::MissingKey {
                pool: pool(),
                key: "max_count",
            });
        }
        if let Err(e) = self.config.validate() {
            problems.extend(e.problems().into_iter().cloned());
        }
        ConfigError::from_list(problems)?;
        Ok(self.config)
    }
}
