//! A bounded cache of prepared statements, one per connection: it lives in the member, so a
//! replaced connection takes its cache with it.
//!
//! # Invariants
//!
//! 1. `order` holds exactly the keys of `map`, oldest insertion first; `map.len() ≤ capacity`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use tokio_postgres::{Client, Statement};

/// What a connection's statement cache holds and how it has served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Statements cached now.
    pub size: usize,
    /// The most it keeps (the oldest is dropped to make room).
    pub capacity: usize,
    /// `prepare_cached` calls answered from the cache.
    pub hits: u64,
    /// `prepare_cached` calls that prepared on the server.
    pub misses: u64,
}

#[derive(Debug, Default)]
struct Cache {
    map: HashMap<String, Statement>,
    order: VecDeque<String>,
    hits: u64,
    misses: u64,
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

    pub(crate) async fn prepare(
        &self,
        client: &Client,
        query: &str,
    ) -> Result<Statement, tokio_postgres::Error> {
        {
            let mut cache = self.lock();
            if let Some(statement) = cache.map.get(query).cloned() {
                cache.hits += 1;
                return Ok(statement);
            }
            cache.misses += 1;
        }
        let statement = client.prepare(query).await?;
        if self.capacity > 0 {
            let mut cache = self.lock();
            if !cache.map.contains_key(query) {
                if cache.map.len() == self.capacity
                    && let Some(oldest) = cache.order.pop_front()
                {
                    cache.map.remove(&oldest);
                }
                cache.order.push_back(query.to_owned());
                cache.map.insert(query.to_owned(), statement.clone());
            }
            debug_assert_eq!(cache.map.len(), cache.order.len());
            debug_assert!(cache.map.len() <= self.capacity);
        }
        Ok(statement)
    }

    pub(crate) fn stats(&self) -> CacheStats {
        let cache = self.lock();
        CacheStats {
            size: cache.map.len(),
            capacity: self.capacity,
            hits: cache.hits,
            misses: cache.misses,
        }
    }

    pub(crate) fn clear(&self) {
        let mut cache = self.lock();
        cache.map.clear();
        cache.order.clear();
    }
}
