//! A bounded cache of prepared statements, one per connection: it lives in the member, so a
//! replaced connection takes its cache with it. When full, the statement used least recently
//! makes room.
//!
//! # Invariants
//!
//! 1. `map.len() ≤ capacity`, and every entry's `used` is a distinct tick below `tick`.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio_postgres::types::Type;
use tokio_postgres::{Client, Statement};

/// What a connection's statement cache holds and how it has served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Statements cached now.
    pub size: usize,
    /// The most it keeps (the one used least recently is dropped to make room).
    pub capacity: usize,
    /// `prepare_cached` calls answered from the cache.
    pub hits: u64,
    /// `prepare_cached` calls that prepared on the server.
    pub misses: u64,
}

/// A cached statement: its query and parameter types.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    query: String,
    types: Vec<Type>,
}

#[derive(Debug)]
struct Entry {
    statement: Statement,
    used: u64,
}

#[derive(Debug, Default)]
struct Cache {
    /// Untyped statements by query (looked up without building a key).
    plain: HashMap<String, Entry>,
    /// Statements prepared with parameter types.
    typed: HashMap<Key, Entry>,
    tick: u64,
    hits: u64,
    misses: u64,
}

impl Cache {
    fn len(&self) -> usize {
        self.plain.len() + self.typed.len()
    }

    fn holds(&self, capacity: usize) -> bool {
        self.len() <= capacity
            && self
                .plain
                .values()
                .chain(self.typed.values())
                .all(|e| e.used < self.tick)
    }

    /// Drops the statement used least recently (a scan: only on a miss with the cache full).
    fn evict(&mut self) {
        let plain = self
            .plain
            .iter()
            .min_by_key(|(_, e)| e.used)
            .map(|(k, e)| (e.used, k.clone()));
        let typed = self
            .typed
            .iter()
            .min_by_key(|(_, e)| e.used)
            .map(|(k, e)| (e.used, k.clone()));
        match (plain, typed) {
            (Some((p, query)), Some((t, _))) if p <= t => drop(self.plain.remove(&query)),
            (Some((_, query)), None) => drop(self.plain.remove(&query)),
            (_, Some((_, key))) => drop(self.typed.remove(&key)),
            (None, None) => {}
        }
    }

    fn next_tick(&mut self) -> u64 {
        let tick = self.tick;
        self.tick += 1;
        tick
    }
}

/// The cache of one connection.
#[derive(Debug)]
pub(crate) struct Statements {
    capacity: usize,
    cache: Mutex<Cache>,
}

impl Statements {
    pub(crate) fn new(capacity: usize) -> Self {
        Statements {
            capacity,
            cache: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cached statement for `query` with `types` (none: the server infers them), or one
    /// prepared now through `client` (a connection's client, or a transaction on it).
    pub(crate) async fn prepare<C: GenericPrepare>(
        &self,
        client: &C,
        query: &str,
        types: &[Type],
    ) -> Result<Statement, tokio_postgres::Error> {
        {
            let mut cache = self.lock();
            let tick = cache.next_tick();
            let found = if types.is_empty() {
                cache.plain.get_mut(query)
            } else {
                cache.typed.get_mut(&Key {
                    query: query.to_owned(),
                    types: types.to_vec(),
                })
            };
            if let Some(entry) = found {
                entry.used = tick;
                let statement = entry.statement.clone();
                cache.hits += 1;
                return Ok(statement);
            }
            cache.misses += 1;
        }
        let statement = client.prepare_typed(query, types).await?;
        if self.capacity > 0 {
            let mut cache = self.lock();
            let present = if types.is_empty() {
                cache.plain.contains_key(query)
            } else {
                cache.typed.contains_key(&Key {
                    query: query.to_owned(),
                    types: types.to_vec(),
                })
            };
            if !present {
                if cache.len() >= self.capacity {
                    cache.evict();
                }
                let entry = Entry {
                    statement: statement.clone(),
                    used: cache.next_tick(),
                };
                if types.is_empty() {
                    cache.plain.insert(query.to_owned(), entry);
                } else {
                    let key = Key {
                        query: query.to_owned(),
                        types: types.to_vec(),
                    };
                    cache.typed.insert(key, entry);
                }
            }
            debug_assert!(cache.holds(self.capacity));
        }
        Ok(statement)
    }

    pub(crate) fn stats(&self) -> CacheStats {
        let cache = self.lock();
        CacheStats {
            size: cache.len(),
            capacity: self.capacity,
            hits: cache.hits,
            misses: cache.misses,
        }
    }

    pub(crate) fn clear(&self) {
        let mut cache = self.lock();
        cache.plain.clear();
        cache.typed.clear();
    }
}

/// What can prepare a statement on the connection: its client, or a transaction on it.
pub(crate) trait GenericPrepare: Sync {
    fn prepare_typed(
        &self,
        query: &str,
        types: &[Type],
    ) -> impl Future<Output = Result<Statement, tokio_postgres::Error>> + Send;
}

impl GenericPrepare for Client {
    fn prepare_typed(
        &self,
        query: &str,
        types: &[Type],
    ) -> impl Future<Output = Result<Statement, tokio_postgres::Error>> + Send {
        Client::prepare_typed(self, query, types)
    }
}

impl GenericPrepare for tokio_postgres::Transaction<'_> {
    fn prepare_typed(
        &self,
        query: &str,
        types: &[Type],
    ) -> impl Future<Output = Result<Statement, tokio_postgres::Error>> + Send {
        tokio_postgres::Transaction::prepare_typed(self, query, types)
    }
}
