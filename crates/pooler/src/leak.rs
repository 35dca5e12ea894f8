//! Leak detection: where and when each member in use was taken, kept only while a
//! `leak_detection_threshold` is set, so that one held past it is reported once (with where
//! it was taken) and again when it comes back.
//!
//! The records have their own lock, taken on take and return only when the feature is on.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::panic::Location;

use tokio::time::Instant;

use crate::sync::{Mutex, lock};

/// Where a take was made.
pub(crate) type Caller = &'static Location<'static>;

#[derive(Debug)]
struct Record {
    taken_at: Instant,
    caller: Caller,
    reported: bool,
}

/// A member held past the threshold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Leak {
    pub(crate) id: u64,
    pub(crate) taken_at: Instant,
    pub(crate) caller: Caller,
}

/// The records of the members in use, by member id.
#[derive(Debug, Default)]
pub(crate) struct Leaks {
    records: Mutex<HashMap<u64, Record, BuildHasherDefault<IdHash>>>,
}

/// A member id's hash: the pool hands out the ids, one after another, so no caller chooses
/// them and a keyed hash (std's SipHash, about a tenth of a take and return with leak
/// detection on) buys nothing. A multiply by the golden ratio spreads consecutive ids over
/// the high bits the table probes by.
#[derive(Debug, Default)]
struct IdHash(u64);

impl Hasher for IdHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed here; any other write is folded in all the same.
        for &b in bytes {
            self.write_u64(self.0 ^ u64::from(b));
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

impl Leaks {
    /// Member `id` was taken at `taken_at` by `caller`.
    pub(crate) fn taken(&self, id: u64, taken_at: Instant, caller: Caller) {
        lock(&self.records).insert(
            id,
            Record {
                taken_at,
                caller,
                reported: false,
            },
        );
    }

    /// Member `id` came back: when it was taken, if it had been reported.
    pub(crate) fn returned(&self, id: u64) -> Option<Instant> {
        lock(&self.records)
            .remove(&id)
            .filter(|r| r.reported)
            .map(|r| r.taken_at)
    }

    /// The members taken before `held_before` and not reported yet; each is reported once per
    /// holder.
    pub(crate) fn overdue(&self, held_before: Instant) -> Vec<Leak> {
        let mut out = Vec::new();
        for (&id, r) in lock(&self.records).iter_mut() {
            if !r.reported && r.taken_at <= held_before {
                r.reported = true;
                out.push(Leak {
                    id,
                    taken_at: r.taken_at,
                    caller: r.caller,
                });
            }
        }
        out.sort_by_key(|l| l.id);
        out
    }

    /// Forgets every record (the feature was switched off).
    pub(crate) fn clear(&self) {
        lock(&self.records).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leak_is_reported_once_and_known_when_it_comes_back() {
        let leaks = Leaks::default();
        let t0 = Instant::now();
        leaks.taken(1, t0, Location::caller());
        leaks.taken(
            2,
            t0 + std::time::Duration::from_secs(5),
            Location::caller(),
        );
        let overdue = leaks.overdue(t0 + std::time::Duration::from_secs(1));
        assert_eq!(overdue.iter().map(|l| l.id).collect::<Vec<_>>(), [1]);
        assert!(
            leaks
                .overdue(t0 + std::time::Duration::from_secs(1))
                .is_empty()
        );
        assert_eq!(leaks.returned(1), Some(t0));
        assert_eq!(leaks.returned(2), None, "not reported");
    }
}
