//! A bounded cache of prepared statements, one per connection: it lives in the member, so a
//! replaced connection takes its cache with it. When full, the statement used least recently
//! makes room.
//!
//! Beside them, the parameter types of the query strings run on the unnamed statement
//! (docs/design.md, "Statements"), described once each, in a bound of their own: an
//! application that runs many different query strings does not push out the statements it
//! prepared. Behind a transaction pooler (`PgManager::transaction_pooling`) a statement
//! prepared on the server lasts only as long as the transaction it was prepared in, so none
//! is kept there; the descriptions are.
//!
//! # Invariants
//!
//! 1. `plain` and `typed` hold at most `capacity` statements together, `described` at most
//!    `capacity` descriptions, and every entry's `used` is a distinct tick below `tick`.
//! 2. When statements are not kept, `plain` and `typed` are empty.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio_postgres::types::Type;
use tokio_postgres::{Client, Statement};

/// What a connection's statement cache holds and how it has served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Statements and query strings' parameter types cached now.
    pub size: usize,
    /// The most statements it keeps, and the most descriptions (the one used least recently
    /// is dropped to make room).
    pub capacity: usize,
    /// `prepare_cached` calls answered from the cache, and query strings whose parameter
    /// types were known.
    pub hits: u64,
    /// `prepare_cached` calls that prepared on the server, and query strings described.
    pub misses: u64,
}

/// A cached statement: its query and parameter types.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    query: String,
    types: Vec<Type>,
}

#[derive(Debug)]
struct Entry<V> {
    value: V,
    used: u64,
}

/// The key of the entry used least recently in `map`, with its tick.
fn oldest<K: Clone, V>(map: &HashMap<K, Entry<V>>) -> Option<(u64, K)> {
    map.iter()
        .min_by_key(|(_, e)| e.used)
        .map(|(k, e)| (e.used, k.clone()))
}

#[derive(Debug, Default)]
struct Cache {
    /// Untyped statements by query (looked up without building a key).
    plain: HashMap<String, Entry<Statement>>,
    /// Statements prepared with parameter types.
    typed: HashMap<Key, Entry<Statement>>,
    /// Parameter types by query string.
    described: HashMap<String, Entry<Arc<[Type]>>>,
    tick: u64,
    hits: u64,
    misses: u64,
}

impl Cache {
    fn len(&self) -> usize {
        self.statements() + self.described.len()
    }

    fn statements(&self) -> usize {
        self.plain.len() + self.typed.len()
    }

    fn holds(&self, capacity: usize, kept: bool) -> bool {
        self.statements() <= capacity
            && self.described.len() <= capacity
            && (kept || self.plain.is_empty() && self.typed.is_empty())
            && self
                .plain
                .values()
                .map(|e| e.used)
                .chain(self.typed.values().map(|e| e.used))
                .chain(self.described.values().map(|e| e.used))
                .all(|used| used < self.tick)
    }

    /// Drops the statement used least recently (a scan: only on a miss with the cache full).
    fn evict_statement(&mut self) {
        let plain = oldest(&self.plain);
        let typed = oldest(&self.typed);
        match (plain, typed) {
            (Some((p, query)), Some((t, _))) if p < t => drop(self.plain.remove(&query)),
            (_, Some((_, key))) => drop(self.typed.remove(&key)),
            (Some((_, query)), None) => drop(self.plain.remove(&query)),
            (None, None) => {}
        }
    }

    /// Drops the description used least recently.
    fn evict_description(&mut self) {
        if let Some((_, query)) = oldest(&self.described) {
            self.described.remove(&query);
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
    /// Statements prepared on the server are kept (not behind a transaction pooler).
    kept: bool,
    cache: Mutex<Cache>,
}

impl Statements {
    /// A cache of `capacity` statements (none unless `kept`) and as many descriptions.
    pub(crate) fn new(capacity: usize, kept: bool) -> Self {
        Statements {
            capacity,
            kept,
            cache: Mutex::default(),
        }
    }

    /// Whether statements prepared on the server are kept (none is behind a transaction
    /// pooler).
    pub(crate) fn kept(&self) -> bool {
        self.kept
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
                let statement = entry.value.clone();
                cache.hits += 1;
                return Ok(statement);
            }
            cache.misses += 1;
        }
        let statement = client.prepare_typed(query, types).await?;
        if self.capacity > 0 && self.kept {
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
                if cache.statements() >= self.capacity {
                    cache.evict_statement();
                }
                let entry = Entry {
                    value: statement.clone(),
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
            debug_assert!(cache.holds(self.capacity, self.kept));
        }
        Ok(statement)
    }

    /// The parameter types of `query` described before, counted as a hit; `None`, counted as
    /// a miss, when the query must be described ([`Statements::described`]).
    pub(crate) fn description(&self, query: &str) -> Option<Arc<[Type]>> {
        let mut cache = self.lock();
        let tick = cache.next_tick();
        if let Some(entry) = cache.described.get_mut(query) {
            entry.used = tick;
            let types = entry.value.clone();
            cache.hits += 1;
            return Some(types);
        }
        cache.misses += 1;
        None
    }

    /// Keeps the parameter types `types` of `query`, described on the server.
    pub(crate) fn described(&self, query: &str, types: Arc<[Type]>) {
        if self.capacity == 0 {
            return;
        }
        let mut cache = self.lock();
        if !cache.described.contains_key(query) {
            if cache.described.len() >= self.capacity {
                cache.evict_description();
            }
            let used = cache.next_tick();
            cache
                .described
                .insert(query.to_owned(), Entry { value: types, used });
        }
        debug_assert!(cache.holds(self.capacity, self.kept));
    }

    /// Forgets the parameter types of `query` (the server refused it as described: the schema
    /// may have changed).
    pub(crate) fn forget(&self, query: &str) {
        self.lock().described.remove(query);
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
        cache.described.clear();
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
