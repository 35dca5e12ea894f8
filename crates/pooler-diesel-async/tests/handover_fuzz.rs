//! The differential hand-over fuzzers for diesel-async, one per backend (each module says
//! what it draws): user A runs a random sequence and gives the connection back; user B's view
//! of the session must equal a new connection's, and B's write must be durable. Live.
//!
//! CI runs `POOLER_FUZZ_CASES` sequences (default 64); the documented long run is 10 000.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

#[cfg(feature = "mysql")]
#[path = "handover_fuzz/mysql.rs"]
mod mysql;
#[cfg(feature = "postgres")]
#[path = "handover_fuzz/postgres.rs"]
mod postgres;
