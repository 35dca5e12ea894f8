//! What a connection hears of its server's role, at no round trip: the reading side of the
//! stream layer ([`crate::watch`]) passes the start of every ParameterStatus (`S`) and
//! ErrorResponse (`E`) through [`Listen`], which notes in [`Heard`]:
//!
//! - `in_hot_standby` (reported by PostgreSQL 14 and later at the startup and whenever it
//!   changes: a standby's sessions hear `off` when it is promoted);
//! - `default_transaction_read_only` (reported likewise; a primary made read-only by its
//!   operator reports `on` to every session);
//! - an error with SQLSTATE 25006 (`read_only_sql_transaction`): a write refused because the
//!   session is read-only.
//!
//! # Invariants
//!
//! 1. A flag is only ever set from a message the server sent on this connection; nothing is
//!    guessed.
//! 2. [`Listen`] keeps at most [`KEEP`] bytes of a message, whatever its size.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// The bytes of a message's start kept: enough for the parameters' names and values, and for
/// an error's severity fields and SQLSTATE, which come first.
const KEEP: usize = 64;

/// SQLSTATE `read_only_sql_transaction`.
const READ_ONLY_SQL_TRANSACTION: &[u8] = b"25006";

/// A reported boolean parameter: not heard, off, on.
const UNKNOWN: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;

/// What the server said of its role on one connection.
#[derive(Debug, Default)]
pub(crate) struct Heard {
    hot_standby: AtomicU8,
    read_only_default: AtomicU8,
    /// `standard_conforming_strings` (reported at the startup and on change).
    standard_strings: AtomicU8,
    refused_write: AtomicBool,
}

impl Heard {
    /// Whether the server is a standby in recovery (`in_hot_standby`), if it said.
    pub(crate) fn hot_standby(&self) -> Option<bool> {
        flag(&self.hot_standby)
    }

    /// Whether new transactions are read-only by default, if the server said.
    pub(crate) fn read_only_default(&self) -> Option<bool> {
        flag(&self.read_only_default)
    }

    /// Whether the server reads a backslash in `'…'` as an escape: it said
    /// `standard_conforming_strings = off` (the default, `on`, when it has not said).
    pub(crate) fn backslash_quotes(&self) -> bool {
        flag(&self.standard_strings) == Some(false)
    }

    /// Whether a write was refused because the session is read-only.
    pub(crate) fn refused_write(&self) -> bool {
        self.refused_write.load(Ordering::Acquire)
    }

    fn parameter(&self, name: &[u8], value: &[u8]) {
        let to = match name {
            b"in_hot_standby" => &self.hot_standby,
            b"default_transaction_read_only" => &self.read_only_default,
            b"standard_conforming_strings" => &self.standard_strings,
            _ => return,
        };
        to.store(if value == b"on" { ON } else { OFF }, Ordering::Release);
    }
}

fn flag(f: &AtomicU8) -> Option<bool> {
    match f.load(Ordering::Acquire) {
        UNKNOWN => None,
        v => Some(v == ON),
    }
}

/// The start of the server message being read, when it is one [`Heard`] listens to.
#[derive(Debug)]
pub(crate) struct Listen {
    /// `S` or `E` while listening to the current message; 0 otherwise.
    kind: u8,
    len: usize,
    kept: [u8; KEEP],
}

impl Default for Listen {
    fn default() -> Self {
        Listen {
            kind: 0,
            len: 0,
            kept: [0; KEEP],
        }
    }
}

impl Listen {
    /// Whether a server message of `kind` is one this listens to: the reading side passes
    /// only those on, so the other messages of every answer cost it one comparison.
    #[inline(always)]
    pub(crate) const fn hears(kind: u8) -> bool {
        kind == b'S' || kind == b'E'
    }

    /// A server message of `kind` begins.
    #[inline]
    pub(crate) fn begin(&mut self, kind: u8) {
        self.kind = if Self::hears(kind) { kind } else { 0 };
        self.len = 0;
    }

    /// The next piece of the current message's payload.
    #[inline]
    pub(crate) fn feed(&mut self, payload: &[u8], heard: &Heard) {
        if self.kind == 0 {
            return;
        }
        let take = payload.len().min(KEEP - self.len);
        self.kept[self.len..self.len + take].copy_from_slice(&payload[..take]);
        self.len += take;
        let full = self.len == KEEP;
        let kept = &self.kept[..self.len];
        let done = if self.kind == b'S' {
            parameter(kept, heard)
        } else {
            error(kept, heard)
        };
        debug_assert!(self.len <= KEEP, "invariant 2: at most KEEP bytes kept");
        if done || full {
            self.kind = 0;
        }
    }
}

/// A ParameterStatus: `name\0value\0`. `true` once read whole.
fn parameter(kept: &[u8], heard: &Heard) -> bool {
    let mut parts = kept.split(|&b| b == 0);
    match (parts.next(), parts.next(), parts.next()) {
        (Some(name), Some(value), Some(_)) => {
            heard.parameter(name, value);
            true
        }
        _ => false,
    }
}

/// An ErrorResponse: fields `code text\0`, ended by a 0 code. `true` once its SQLSTATE (or its
/// end) is read.
fn error(kept: &[u8], heard: &Heard) -> bool {
    let mut at = 0;
    while let Some(&code) = kept.get(at) {
        if code == 0 {
            return true;
        }
        let Some(end) = kept[at + 1..].iter().position(|&b| b == 0) else {
            return false;
        };
        let text = &kept[at + 1..at + 1 + end];
        if code == b'C' {
            if text == READ_ONLY_SQL_TRANSACTION {
                heard.refused_write.store(true, Ordering::Release);
            }
            return true;
        }
        at += end + 2;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hear(kind: u8, payload: &[u8], step: usize) -> Heard {
        let heard = Heard::default();
        let mut listen = Listen::default();
        listen.begin(kind);
        for piece in payload.chunks(step) {
            listen.feed(piece, &heard);
        }
        heard
    }

    #[test]
    fn parameters_and_errors_are_heard_in_any_split() {
        let error =
            b"SERROR\0VERROR\0C25006\0Mcannot execute INSERT in a read-only transaction\0\0";
        for step in 1..=error.len() {
            assert!(hear(b'E', error, step).refused_write(), "step {step}");
            let standby = hear(b'S', b"in_hot_standby\0on\0", step);
            assert_eq!(standby.hot_standby(), Some(true));
            assert_eq!(standby.read_only_default(), None);
            let promoted = hear(b'S', b"in_hot_standby\0off\0", step);
            assert_eq!(promoted.hot_standby(), Some(false));
            let read_only = hear(b'S', b"default_transaction_read_only\0on\0", step);
            assert_eq!(read_only.read_only_default(), Some(true));
        }
    }

    #[test]
    fn other_messages_say_nothing() {
        let other = b"SERROR\0VERROR\0C42P01\0Mrelation does not exist\0\0";
        assert!(!hear(b'E', other, 3).refused_write());
        // A DataRow holding the same bytes is not an error.
        assert!(!hear(b'D', b"SERROR\0C25006\0\0", 4).refused_write());
        let heard = hear(b'S', b"TimeZone\0on\0", 2);
        assert_eq!(
            (heard.hot_standby(), heard.read_only_default()),
            (None, None)
        );
        // An error whose first fields fill what is kept is given up on, not misread.
        let mut long = b"M".to_vec();
        long.extend([b'x'; 100]);
        long.extend(b"\0C25006\0\0");
        assert!(!hear(b'E', &long, 7).refused_write());
    }
}
