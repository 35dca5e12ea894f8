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
fn action(statements: usize) -> impl Strategy<Value = (usize, Way)> {
    (
        0..statements,
        prop_oneof![
            3 => Just(Way::Query),
            3 => Just(Way::Batch),
            1 => Just(Way::Dropped),
            1 => Just(Way::Begin),
        ],
    )
}

/// Runs the cases: `case(actions, n)` has user A run `actions` and give the connection
/// back, then user B fingerprint the session and write `n`; it returns B's fingerprint and
/// how many writes of `n` are there afterwards, which must be `fresh` and `"1"`. `named(i)`
/// names statement `i` in a failure. Failures are kept in `proptest-regressions`.
fn sequences(
    statements: usize,
    named: impl Fn(usize) -> String,
    fresh: &str,
    case: impl Fn(&[(usize, Way)], i64) -> (String, String),
) -> Result<(), proptest::test_runner::TestError<Vec<(usize, Way)>>> {
    let mut runner = pooler_testkit::fuzz_runner!();
    let counter = std::sync::atomic::AtomicI64::new(0);
    runner.run(
        &proptest::collection::vec(action(statements), 1..8),
        |actions| {
            let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            let (seen, kept) = case(&actions, n);
            let actions: Vec<_> = actions
                .iter()
                .map(|(i, way)| format!("{way:?}: {}", named(*i)))
                .collect();
            prop_assert_eq!(
                seen.as_str(),
                fresh,
                "after {:#?} the next user's session differs from a new one's",
                actions
            );
            prop_assert_eq!(
                kept.as_str(),
                "1",
                "after {:#?} the next user's write was lost",
                actions
            );
            Ok(())
        },
    )
}

#[cfg(feature = "mysql")]
#[path = "handover_fuzz/mysql.rs"]
mod mysql;
#[cfg(feature = "postgres")]
#[path = "handover_fuzz/postgres.rs"]
mod postgres;
