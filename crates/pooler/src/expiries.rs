//! The members' lifetime ends, soonest first (docs/design.md, "Lifetimes"): what the cold
//! engine keeps so the housekeeping task can sleep until the next one.
//!
//! # Invariants
//!
//! 1. Each entry is one member's (its slot key and id, so a reused key is never confused
//!    with an earlier member), at most once.

use std::collections::BTreeSet;

use tokio::time::Instant;

/// A slot's key.
type Key = usize;

#[derive(Debug, Default)]
pub(crate) struct Expiries {
    set: BTreeSet<(Instant, Key, u64)>,
}

impl Expiries {
    pub(crate) fn len(&self) -> usize {
        self.set.len()
    }

    /// Member `id` in slot `key` expires `at`.
    pub(crate) fn insert(&mut self, at: Instant, key: Key, id: u64) {
        let new = self.set.insert((at, key, id));
        debug_assert!(new, "invariant #1: one expiry per member");
    }

    /// Member `id` in slot `key` no longer expires `at` (it left `Live`).
    pub(crate) fn remove(&mut self, at: Instant, key: Key, id: u64) {
        self.set.remove(&(at, key, id));
    }

    /// The soonest expiry.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.set.first().map(|&(at, _, _)| at)
    }

    /// The members whose lifetime has ended by `now`, taken out of the set.
    pub(crate) fn due(&mut self, now: Instant) -> Vec<(Key, u64)> {
        let mut due = Vec::new();
        while let Some(&(at, key, id)) = self.set.first() {
            if at > now {
                break;
            }
            self.set.pop_first();
            due.push((key, id));
        }
        due
    }

    pub(crate) fn clear(&mut self) {
        self.set.clear();
    }
}
