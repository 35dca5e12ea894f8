//! What the cold engine and its callers say to each other: the limits it enforces, a slot's
//! status, the starts it decides, what a death signal found, and a slot's row for stats
//! (a slot's key is a member's: `held.rs`; why a take found no member is a refusal's:
//! `error.rs`).

use std::time::Duration;

use tokio::time::Instant;

use crate::config::{MemberOrder, PoolConfig};
use crate::held::Key;

/// The limits the pool enforces, taken from its config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) init_count: usize,
    pub(crate) max_count: usize,
    pub(crate) queue_max: usize,
    pub(crate) order: MemberOrder,
    pub(crate) auto_grow_threshold: Option<usize>,
    /// The most starts in progress at once (`usize::MAX`: no limit).
    pub(crate) max_starts: usize,
    /// The least time between two starts (`max_start_rate`), if any.
    pub(crate) start_spacing: Option<Duration>,
    /// How long before a member's lifetime ends its replacement starts (make before break).
    pub(crate) overlap: Option<Duration>,
    /// Backoff steps get full jitter.
    pub(crate) backoff_jitter: bool,
}

impl Limits {
    /// The limits `config` sets.
    pub(crate) fn of(config: &PoolConfig) -> Self {
        Limits {
            init_count: config.init_count,
            max_count: config.max_count,
            queue_max: config.queue_max,
            order: config.member_order,
            auto_grow_threshold: config.auto_grow_threshold,
            max_starts: config.max_concurrent_starts.unwrap_or(usize::MAX),
            start_spacing: config
                .max_start_rate
                .filter(|&r| r > 0)
                .map(|r| Duration::from_secs(1) / u32::try_from(r).unwrap_or(u32::MAX)),
            overlap: config.max_lifetime_overlap,
            backoff_jitter: config.backoff_jitter,
        }
    }
}

/// Where a member is in its life, as the cold engine sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Starting,
    Live,
    Stopping,
}

/// Starts decided: the caller spawns one start task per slot, the first sleeping `delay`
/// (non-zero while backing off, or paced by `max_start_rate`), each next one `spacing`
/// longer.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Starts {
    pub(crate) slots: Vec<(Key, u64)>,
    pub(crate) delay: Duration,
    pub(crate) spacing: Duration,
}

impl Starts {
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

/// What a member's death signal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Death {
    /// Unknown or already stopping: nothing to do.
    Ignored,
    /// Starting: it will be stopped when its start ends.
    Starting,
    /// Live: free (the caller claims and stops it) or in use (replaced when returned).
    Live,
}

/// A slot's row, for `Pool::stats`.
#[derive(Debug)]
pub(crate) struct Row<'a, P> {
    pub(crate) key: Key,
    pub(crate) id: u64,
    pub(crate) status: Status,
    pub(crate) expires_at: Option<Instant>,
    pub(crate) payload: Option<&'a P>,
}
