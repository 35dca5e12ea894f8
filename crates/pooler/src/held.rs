//! A member as the pool keeps it, and what travels with it: the value and a small record of
//! metadata the member carries from holder to holder, so that neither a take nor a return
//! writes to any state shared with other members.

use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::cancel::Token;

/// What the pool knows of one member, shared by its holder of the moment and its slot in the
/// cold engine.
#[derive(Debug)]
pub(crate) struct Meta {
    pub(crate) key: Key,
    /// The member's id (never reused, unlike its key).
    pub(crate) id: u64,
    /// Cancels the member's driver tasks.
    pub(crate) token: Token,
    /// When it last changed hands (a clock stamp; coarse unless a feature needs it exact).
    since: AtomicU64,
    /// When its lifetime ends (a stamp), or `NEVER`.
    expires_at: AtomicU64,
    /// Its death signal was seen while it was in use: replace it when it comes back.
    dead: AtomicBool,
}

/// Identifies a slot while it exists; reused after the slot is removed (pair it with the
/// member id to detect reuse).
pub(crate) type Key = usize;

const NEVER: u64 = u64::MAX;

/// A return checks a member's expiry against an exact clock read only when the coarse time
/// is within this of it (ten housekeeping ticks); further off, the member has not expired
/// unless the coarse time lags that far, and should it have, the next take's exact check
/// retires it (docs/design.md, "Lifetimes").
const EXACT_WITHIN: u64 = 10 * crate::clock::TICK.as_nanos() as u64;

impl Meta {
    pub(crate) fn new(key: Key, id: u64, token: Token, since: u64) -> Self {
        Meta {
            key,
            id,
            token,
            since: AtomicU64::new(since),
            expires_at: AtomicU64::new(NEVER),
            dead: AtomicBool::new(false),
        }
    }

    #[inline]
    pub(crate) fn since(&self) -> u64 {
        self.since.load(Relaxed)
    }

    #[inline]
    pub(crate) fn set_since(&self, stamp: u64) {
        self.since.store(stamp, Relaxed);
    }

    pub(crate) fn set_expires_at(&self, stamp: Option<u64>) {
        self.expires_at.store(stamp.unwrap_or(NEVER), Relaxed);
    }

    /// Whether its lifetime has ended by `now` (a stamp).
    #[inline]
    pub(crate) fn expired(&self, now: u64) -> bool {
        self.expires_at.load(Relaxed) <= now
    }

    /// Whether its lifetime ends within [`EXACT_WITHIN`] of `coarse` (the coarse time), or
    /// has ended: only then is its expiry worth an exact clock read at its return.
    #[inline]
    pub(crate) fn near_expiry(&self, coarse: u64) -> bool {
        self.expires_at.load(Relaxed) <= coarse.saturating_add(EXACT_WITHIN)
    }

    #[inline]
    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Relaxed)
    }

    pub(crate) fn mark_dead(&self) {
        self.dead.store(true, Relaxed);
    }
}

/// A member value, with its metadata.
#[derive(Debug)]
pub(crate) struct Held<T> {
    pub(crate) value: T,
    pub(crate) meta: Arc<Meta>,
}
