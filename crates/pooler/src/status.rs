//! What a pool says about itself: its counts ([`Utilization`]), its members
//! ([`MemberStats`]) and how it is doing ([`Health`]).

use std::time::Duration;

use tokio::time::Instant;

/// A snapshot of a pool's counts (pooler's `pool_utilization`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Utilization {
    /// The cap on members in use, free, starting and stopping together.
    pub max_count: usize,
    /// Members held by consumers (or on their way to a waiter).
    pub in_use_count: usize,
    /// Members ready to be taken.
    pub free_count: usize,
    /// Starts in progress (including one waiting out a backoff).
    pub starting_count: usize,
    /// Stops in progress; they count against `max_count` until they end.
    pub stopping_count: usize,
    /// Takers waiting in the queue.
    pub queued_count: usize,
    /// The queue's limit.
    pub queue_max: usize,
    /// The admission limit, when `admission` is on: takes that may hold a member at once.
    pub admission_limit: Option<usize>,
}

/// How a pool is doing, at a glance ([`Pool::health`](crate::Pool::health)): for a
/// readiness probe or a dashboard. Read without waiting for anything.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Health {
    /// Taking and handing out members normally.
    Serving,
    /// Overloaded (`queue_target`): takes that would queue are refused at once.
    Shedding {
        /// The pool's `queue_target`.
        target: Duration,
        /// The shortest queue wait of the interval that judged it overloaded.
        delay: Duration,
    },
    /// Starts are failing and the pool is backing off; `live` members still serve.
    Failing {
        /// Members that exist (free or in use).
        live: usize,
        /// The latest start error.
        last_error: crate::error::StartError,
    },
    /// Closed or closing.
    Closed,
}

/// Where a member is, in [`MemberStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MemberStatus {
    /// Ready to be taken.
    Free,
    /// Held by a consumer.
    InUse,
    /// Being stopped.
    Stopping,
}

/// One member, as [`Pool::stats`](crate::Pool::stats) sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct MemberStats {
    /// The member's id, unique within the pool.
    pub id: u64,
    /// Where it is.
    pub status: MemberStatus,
    /// When it entered that status.
    pub since: Instant,
    /// When its `max_lifetime` ends, if the pool has one.
    pub expires_at: Option<Instant>,
}
