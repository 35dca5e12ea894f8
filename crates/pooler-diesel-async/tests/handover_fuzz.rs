//! The differential hand-over fuzzers for diesel-async, one per backend (each module says
//! what it draws): user A runs a random sequence and gives the connection back; user B's view
//! of the session must equal a new connection's, and B's write must be durable. Live.
//!
//! CI runs `POOLER_FUZZ_CASES` sequences (default 64); the documented long run is 10 000.
#![cfg(any(feature = "postgres", feature = "mysql"))]
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

use proptest::prelude::*;

/// How user A sends a statement.
#[derive(Debug, Clone, Copy)]
enum Way {
    /// `sql_query(..).execute`: one statement (MySQL: prepared, and some are refused there).
    Query,
    /// `batch_execute`: several statements allowed.
    Batch,
    /// `batch_execute` polled once and dropped.
    Dropped,
    /// diesel's transaction manager begins a transaction, left open (the statement is not
    /// sent).
    Begin,
}

/// One action of A's: a statement of the backend's list, and how it is sent.
fn action<T: Clone + std::fmt::Debug>(statements: &'static [T]) -> impl Strategy<Value = (T, Way)> {
    (
        proptest::sample::select(statements),
        prop_oneof![
            3 => Just(Way::Query),
            3 => Just(Way::Batch),
            1 => Just(Way::Dropped),
            1 => Just(Way::Begin),
        ],
    )
}

/// The sequences user A runs: one to seven actions.
fn sequence<T: Clone + std::fmt::Debug>(
    statements: &'static [T],
) -> impl Strategy<Value = Vec<(T, Way)>> {
    proptest::collection::vec(action(statements), 1..8)
}

#[cfg(feature = "mysql")]
#[path = "handover_fuzz/mysql.rs"]
mod mysql;
#[cfg(feature = "postgres")]
#[path = "handover_fuzz/postgres.rs"]
mod postgres;
