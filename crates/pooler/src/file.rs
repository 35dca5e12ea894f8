//! Pools from a TOML file: the analogue of pooler's application environment `pools`.
//!
//! ```toml
//! [[pools]]
//! name = "pg_db1"
//! kind = "postgres"          # which registered Kinds entry builds the manager
//! init_count = 2
//! max_count = 10
//! max_lifetime = "1h"        # any PoolConfig key
//! [pools.member]             # read into the kind's own member type with serde
//! url = "postgres://127.0.0.1/test"
//! ```
//!
//! The whole file is checked before any pool starts: every unknown key, bad value, duplicate
//! name, unknown kind and member table that its kind cannot read comes back in one
//! [`ConfigError`], each naming its pool and key.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::config::{KEYS, Kind, PoolConfig, REQUIRED_KEYS};
use crate::error::ConfigError;
use crate::manager::Manager;
use crate::pool::{Pool, Shutdown};
use crate::registry::{AnyPool, Pooler, any_pool};
use crate::time;

type Start = Pin<Box<dyn Future<Output = Result<Arc<dyn AnyPool>, ConfigError>> + Send>>;
type Build = Box<dyn Fn(PoolConfig, toml::Table) -> Result<Start, String> + Send + Sync>;
type Check = Box<dyn Fn(&PoolConfig, toml::Table) -> Result<(), String> + Send + Sync>;

/// The member kinds a pools file may name, each with how to build its manager from the
/// pool's config and its `[pools.member]` table, read into a type of the kind's own choosing
/// with serde.
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
/// /// What an `echo` pool's member table holds.
/// #[derive(serde::Deserialize)]
/// #[serde(deny_unknown_fields)]
/// struct EchoMember {
///     word: String,
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let kinds = Kinds::new().kind("echo", |_pool, member: EchoMember| Ok(Echo(member.word)));
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

/// Reads a member table into `T`, with serde's message if it cannot.
fn member<T: DeserializeOwned>(table: toml::Table) -> Result<T, String> {
    T::deserialize(toml::Value::Table(table)).map_err(|e| e.to_string())
}

impl Kinds {
    /// No kinds yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `name`: a pool of this kind gets its manager from `build`, given the pool's
    /// config and its `member` table read into `T` (from an empty table if absent). A table
    /// `T` cannot read, or an `Err` from `build`, is a problem of the file under the key
    /// `member`. `build` may also be called to check a file that is then rejected.
    #[must_use]
    pub fn kind<M, T, F>(mut self, name: &str, build: F) -> Self
    where
        M: Manager,
        T: DeserializeOwned,
        F: Fn(&PoolConfig, T) -> Result<M, String> + Send + Sync + 'static,
    {
        let build = Arc::new(build);
        let check = build.clone();
        let start: Build = Box::new(move |config, table| {
            let manager = build(&config, member(table)?)?;
            Ok(Box::pin(async move {
                Pool::start(config, manager).await.map(any_pool)
            }))
        });
        let check: Check = Box::new(move |config, table| check(config, member(table)?).map(drop));
        self.builders.insert(name.to_owned(), (start, check));
        self
    }

    fn known(&self) -> String {
        self.builders.keys().cloned().collect::<Vec<_>>().join(", ")
    }
}

impl PoolConfig {
    /// Reads and validates one pool from TOML text (the keys of one `[[pools]]` table).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Syntax`] for text that is not TOML; otherwise every problem found, each
    /// naming the key: unknown keys, missing keys, bad time values, values of the wrong type
    /// or range, and what [`validate`](Self::validate) rejects — all at once.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let table: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| ConfigError::Syntax {
                    message: e.to_string(),
                })?;
        pool_from_table(&table)
    }
}

/// Reads and validates one pool from a TOML table, reporting every problem at once: each key
/// is checked against its kind in the key table; the keys of the right form are then read
/// and validated together, so an unknown key or a bad value never hides the others.
pub(crate) fn pool_from_table(table: &toml::Table) -> Result<PoolConfig, ConfigError> {
    let pool = table
        .get("name")
        .and_then(toml::Value::as_str)
        .unwrap_or("?")
        .to_owned();
    let mut problems = Vec::new();
    let mut good = toml::Table::new();
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
        let kind = KEYS.iter().find(|(k, _)| k == key).map(|(_, kind)| *kind);
        let problem = match kind {
            None => Some(ConfigError::UnknownKey {
                pool: pool.clone(),
                key: key.clone(),
            }),
            Some(Kind::Time { .. }) => {
                time::parse_value(value.clone())
                    .err()
                    .map(|reason| ConfigError::BadTime {
                        pool: pool.clone(),
                        key: key.clone(),
                        reason,
                    })
            }
            Some(Kind::Count) => match value.as_integer() {
                Some(n) if n >= 0 => None,
                Some(n) => Some(invalid(format!("{n} is negative"))),
                None => Some(invalid(format!(
                    "expected a whole number, found {}",
                    value.type_str()
                ))),
            },
            Some(Kind::Text) => (!value.is_str())
                .then(|| invalid(format!("expected a string, found {}", value.type_str()))),
            Some(Kind::Order) => (!matches!(value.as_str(), Some("lifo" | "fifo")))
                .then(|| invalid(format!("expected \"lifo\" or \"fifo\", found {value}"))),
            Some(Kind::Admission) => {
                (!matches!(value.as_str(), Some("off" | "vegas" | "gradient"))).then(|| {
                    invalid(format!(
                        "expected \"off\", \"vegas\" or \"gradient\", found {value}"
                    ))
                })
            }
        };
        match problem {
            Some(problem) => problems.push(problem),
            None => {
                good.insert(key.clone(), value.clone());
            }
        }
    }
    let mut read = None;
    if REQUIRED_KEYS.iter().all(|k| good.contains_key(*k)) {
        match PoolConfig::deserialize(toml::Value::Table(good)) {
            Ok(config) => {
                if let Err(e) = config.validate() {
                    problems.extend(e.problems().into_iter().cloned());
                }
                read = Some(config);
            }
            Err(e) => problems.push(ConfigError::InvalidValue {
                pool: pool.clone(),
                key: "?".into(),
                reason: e.to_string(),
            }),
        }
    }
    ConfigError::from_list(problems)?;
    // Unreadable means a required key was missing or bad, itself a problem above.
    read.ok_or(ConfigError::MissingKey { pool, key: "name" })
}

impl Pooler {
    /// A registry with the pools of a pools file (see [`Kinds`]), all started.
    ///
    /// # Errors
    ///
    /// Every problem in the file, at once; no pool is started unless the whole file is good.
    ///
    /// # Cancel safety
    ///
    /// As [`load`](Pooler::load): dropping the future leaves nothing started.
    pub async fn from_config(text: &str, kinds: &Kinds) -> Result<Pooler, ConfigError> {
        let pooler = Pooler::new();
        pooler.load(text, kinds).await?;
        Ok(pooler)
    }

    /// Reads a pools file from `path` (see [`from_config`](Pooler::from_config)), with
    /// `tokio::fs`, so the read does not block the runtime.
    ///
    /// # Errors
    ///
    /// As `from_config`, and [`ConfigError::Syntax`] if the file cannot be read.
    ///
    /// # Cancel safety
    ///
    /// As [`load`](Pooler::load): dropping the future leaves nothing started.
    pub async fn from_config_file(
        path: impl AsRef<std::path::Path>,
        kinds: &Kinds,
    ) -> Result<Pooler, ConfigError> {
        let path = path.as_ref();
        let text = tokio::fs::read_to_string(path)
            .await
            .map_err(|e| ConfigError::Syntax {
                message: format!("cannot read {}: {e}", path.display()),
            })?;
        Pooler::from_config(&text, kinds).await
    }

    /// Starts the pools of a pools file in this registry.
    ///
    /// All or nothing: every name is reserved before any pool starts, and if any pool fails
    /// to start — or this future is dropped halfway — the pools already started are closed
    /// and every name is freed again.
    ///
    /// # Errors
    ///
    /// Every problem in the file at once, including names already registered; nothing is
    /// started unless the whole file is good.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the registry as it was: the names are freed and the pools
    /// started so far close in the background.
    pub async fn load(&self, text: &str, kinds: &Kinds) -> Result<(), ConfigError> {
        let starts = self.check(text, kinds)?;
        let names: Vec<String> = starts.iter().map(|(name, _)| name.clone()).collect();
        self.reserve(&names)?;
        let mut loading = Loading {
            pooler: self,
            names,
            started: Vec::new(),
        };
        let results =
            crate::combinators::join_all(starts.into_iter().map(|(_, start)| start)).await;
        let mut problems = Vec::new();
        for result in results {
            match result {
                Ok(pool) => loading.started.push(pool),
                Err(e) => problems.extend(e.problems().into_iter().cloned()),
            }
        }
        if !problems.is_empty() {
            for pool in std::mem::take(&mut loading.started) {
                pool.close(Shutdown::Immediate).await;
            }
            return ConfigError::from_list(problems);
        }
        loading.commit();
        Ok(())
    }

    fn check(&self, text: &str, kinds: &Kinds) -> Result<Vec<(String, Start)>, ConfigError> {
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
            let named = table
                .get("name")
                .and_then(toml::Value::as_str)
                .map(str::to_owned);
            // For messages only: a pool with no name is shown as `?`.
            let name = named.clone().unwrap_or_else(|| "?".to_owned());
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
            let config = pool_from_table(&table)
                .map_err(|e| problems.extend(e.problems().into_iter().cloned()));
            if let Some(named) = &named
                && (taken.contains(named) || !seen.insert(named.clone()))
            {
                problems.push(ConfigError::DuplicateName {
                    pool: named.clone(),
                });
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
                Ok(config) => start(config, member).map(|s| starts.push((name.clone(), s))),
                // Still check the member table, so its problems are reported with the rest.
                Err(()) => check(&PoolConfig::new(name.as_str(), 0, 1), member),
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

/// A load in progress: the names it reserved and the pools it started. Dropped before it is
/// committed (a failure, or the load's future dropped), it frees the names; the pools it
/// started close in the background as their last handle goes.
struct Loading<'a> {
    pooler: &'a Pooler,
    names: Vec<String>,
    started: Vec<Arc<dyn AnyPool>>,
}

impl Loading<'_> {
    fn commit(mut self) {
        let names = std::mem::take(&mut self.names);
        for (name, pool) in names.into_iter().zip(std::mem::take(&mut self.started)) {
            self.pooler.fill(name, pool);
        }
    }
}

impl Drop for Loading<'_> {
    fn drop(&mut self) {
        for name in &self.names {
            self.pooler.release(name);
        }
    }
}
