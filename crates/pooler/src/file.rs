//! Pools from a TOML file: the analogue of pooler's application environment `pools`.
//!
//! ```toml
//! [[pools]]
//! name = "pg_db1"
//! kind = "postgres"          # which registered Kinds entry builds the manager
//! init_count = 2
//! max_count = 10
//! max_lifetime = "1h"        # any PoolConfig key
//! [pools.member]             # handed as is to the kind's builder
//! url = "postgres://127.0.0.1/test"
//! ```
//!
//! The whole file is checked before any pool starts: every unknown key, bad value, duplicate
//! name, unknown kind and builder error comes back in one [`ConfigError`], each naming its pool
//! and key.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;

use crate::config::PoolConfig;
use crate::error::ConfigError;
use crate::manager::Manager;
use crate::registry::{Pooler, PoolerError};

type Start = Pin<Box<dyn Future<Output = Result<(), PoolerError>> + Send>>;
type Build = Box<dyn Fn(&Pooler, PoolConfig, &toml::Table) -> Result<Start, String> + Send + Sync>;
type Check = Box<dyn Fn(&PoolConfig, &toml::Table) -> Result<(), String> + Send + Sync>;

/// The member kinds a pools file may name, each with how to build its manager from the
/// pool's config and its `[pools.member]` table.
///
/// ```
/// use pooler::{Kinds, Manager, MemberContext, Pooler};
///
/// struct Echo(String);
/// impl Manager for Echo {
///     type Member = String;
///     type Error = std::io::Error;
///     async fn start(&self, _: &MemberContext) -> Result<String, Self::Error> {
///         Ok(self.0.clone())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let kinds = Kinds::new().kind("echo", |_pool, member: &pooler::toml::Table| {
///     let word = member.get("word").and_then(|w| w.as_str()).ok_or("`word` is required")?;
///     Ok(Echo(word.to_owned()))
/// });
/// let pooler = Pooler::from_config(
///     r#"
///     [[pools]]
///     name = "hello"
///     kind = "echo"
///     init_count = 1
///     max_count = 2
///     member = { word = "hi" }
///     "#,
///     &kinds,
/// )
/// .await
/// .unwrap();
/// let pool = pooler.pool::<Echo>("hello").unwrap();
/// assert_eq!(*pool.try_take_member().unwrap(), "hi");
/// # }
/// ```
#[derive(Default)]
pub struct Kinds {
    builders: BTreeMap<String, (Build, Check)>,
}

impl fmt::Debug for Kinds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kinds")
            .field("kinds", &self.builders.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Kinds {
    /// No kinds yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `name`: a pool of this kind gets its manager from `build`, given the pool's
    /// config and its `member` table (empty if absent). An `Err` names what is wrong with the
    /// table. `build` may also be called to check a file that is then rejected.
    #[must_use]
    pub fn kind<M, F>(mut self, name: &str, build: F) -> Self
    where
        M: Manager,
        F: Fn(&PoolConfig, &toml::Table) -> Result<M, String> + Send + Sync + 'static,
    {
        let build = std::sync::Arc::new(build);
        let check = build.clone();
        let start: Build = Box::new(move |pooler, config, member| {
            let manager = build(&config, member)?;
            let pooler = pooler.clone();
            Ok(Box::pin(async move {
                pooler.new_pool(config, manager).await.map(drop)
            }))
        });
        let check: Check = Box::new(move |config, member| check(config, member).map(drop));
        self.builders.insert(name.to_owned(), (start, check));
        self
    }

    fn known(&self) -> String {
        self.builders.keys().cloned().collect::<Vec<_>>().join(", ")
    }
}

impl Pooler {
    /// A registry with the pools of a pools file (see [`Kinds`]), all started.
    ///
    /// # Errors
    ///
    /// Every problem in the file, at once; no pool is started unless the whole file is good.
    pub async fn from_config(text: &str, kinds: &Kinds) -> Result<Pooler, ConfigError> {
        let pooler = Pooler::new();
        pooler.load(text, kinds).await?;
        Ok(pooler)
    }

    /// Reads a pools file from `path` (see [`from_config`](Pooler::from_config)).
    ///
    /// # Errors
    ///
    /// As `from_config`, and [`ConfigError::Syntax`] if the file cannot be read.
    pub async fn from_config_file(
        path: impl AsRef<std::path::Path>,
        kinds: &Kinds,
    ) -> Result<Pooler, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Syntax {
            message: format!("cannot read {}: {e}", path.display()),
        })?;
        Pooler::from_config(&text, kinds).await
    }

    /// Starts the pools of a pools file in this registry.
    ///
    /// # Errors
    ///
    /// Every problem in the file at once, including names already registered; nothing is
    /// started unless the whole file is good.
    pub async fn load(&self, text: &str, kinds: &Kinds) -> Result<(), ConfigError> {
        let starts = self.check(text, kinds)?;
        let results = futures_util::future::join_all(starts).await;
        let problems: Vec<ConfigError> = results
            .into_iter()
            .filter_map(Result::err)
            .map(|e| match e {
                PoolerError::Config(c) => c,
                other => ConfigError::InvalidValue {
                    pool: "?".into(),
                    key: "name".into(),
                    reason: other.to_string(),
                },
            })
            .collect();
        ConfigError::from_list(problems)
    }

    fn check(&self, text: &str, kinds: &Kinds) -> Result<Vec<Start>, ConfigError> {
        let mut file: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| ConfigError::Syntax {
                    message: e.to_string(),
                })?;
        let mut problems = Vec::new();
        for key in file.keys().filter(|k| *k != "pools") {
            problems.push(ConfigError::UnknownKey {
                pool: "(file)".into(),
                key: key.clone(),
            });
        }
        let entries = match file.remove("pools") {
            Some(toml::Value::Array(entries)) => entries,
            Some(other) => {
                problems.push(ConfigError::InvalidValue {
                    pool: "(file)".into(),
                    key: "pools".into(),
                    reason: format!(
                        "expected an array of tables ([[pools]]), found {}",
                        other.type_str()
                    ),
                });
                Vec::new()
            }
            None => Vec::new(),
        };
        let taken: HashSet<String> = self.pool_names().into_iter().collect();
        let mut seen = HashSet::new();
        let mut starts = Vec::new();
        for (i, entry) in entries.into_iter().enumerate() {
            let toml::Value::Table(mut table) = entry else {
                problems.push(ConfigError::InvalidValue {
                    pool: format!("#{}", i + 1),
                    key: "pools".into(),
                    reason: "each entry must be a table".into(),
                });
                continue;
            };
            let name = table
                .get("name")
                .and_then(toml::Value::as_str)
                .unwrap_or("?")
                .to_owned();
            let kind = table.remove("kind");
            let member = match table.remove("member") {
                None => Some(toml::Table::new()),
                Some(toml::Value::Table(t)) => Some(t),
                Some(other) => {
                    problems.push(ConfigError::InvalidValue {
                        pool: name.clone(),
                        key: "member".into(),
                        reason: format!("expected a table, found {}", other.type_str()),
                    });
                    None
                }
            };
            let config = PoolConfig::from_table(&table)
                .map_err(|e| problems.extend(e.problems().into_iter().cloned()));
            if name != "?" && (taken.contains(&name) || !seen.insert(name.clone())) {
                problems.push(ConfigError::DuplicateName { pool: name.clone() });
            }
            let build = match kind {
                None => {
                    problems.push(ConfigError::MissingKey {
                        pool: name.clone(),
                        key: "kind",
                    });
                    None
                }
                Some(toml::Value::String(kind)) => match kinds.builders.get(&kind) {
                    Some(build) => Some(build),
                    None => {
                        problems.push(ConfigError::UnknownKind {
                            pool: name.clone(),
                            kind,
                            known: kinds.known(),
                        });
                        None
                    }
                },
                Some(other) => {
                    problems.push(ConfigError::InvalidValue {
                        pool: name.clone(),
                        key: "kind".into(),
                        reason: format!("expected a string, found {}", other.type_str()),
                    });
                    None
                }
            };
            let (Some((start, check)), Some(member)) = (build, member) else {
                continue;
            };
            let built = match config {
                Ok(config) => start(self, config, &member).map(|s| starts.push(s)),
                // Still check the member table, so its problems are reported with the rest.
                Err(()) => check(&PoolConfig::new(name.as_str(), 0, 1), &member),
            };
            if let Err(reason) = built {
                problems.push(ConfigError::InvalidValue {
                    pool: name,
                    key: "member".into(),
                    reason,
                });
            }
        }
        ConfigError::from_list(problems)?;
        Ok(starts)
    }
}
