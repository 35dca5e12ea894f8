//! What a prepared statement leaves on the session, kept per statement and applied on each
//! execution (docs/design.md, "Recycling on return").
//!
//! A statement prepared once (a cached one above all) is parsed once and then only bound and
//! executed: its SQL text goes by in one Parse message, never again. So the scan's verdict on
//! that text is kept under the statement's name, and every Bind of that name marks the session
//! with it again — `SELECT set_config('app.tenant', $1, false)` run from the statement cache
//! dirties the session on each use, as on its first. A Close of the statement forgets it.
//!
//! Only statements whose text left something are kept, so an application whose statements
//! are all neutral pays one emptiness test per Bind, and nothing per Parse. A Bind whose name
//! is longer than any statement name the server keeps (63 bytes) cannot be matched and is
//! taken to leave everything any kept statement leaves: what cannot be accounted for is
//! dirty.
//!
//! # Invariants
//!
//! 1. `kept` holds a name only with a non-zero verdict.
//! 2. `name.len() <= NAME`; `long` says a name went past it.

use std::collections::HashMap;

use crate::session::Bits;

/// The longest statement name matched (the server keeps 63 bytes of a name).
const NAME: usize = 64;

/// The part of a message being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Reading {
    /// Nothing to read in this message.
    #[default]
    Nothing,
    /// A Bind's portal name, then its statement name.
    BindPortal,
    BindName,
    /// A Close's kind byte (`S` statement, `P` portal), then its name.
    CloseKind,
    CloseName,
}

/// The verdicts of the connection's prepared statements (see the module's docs).
#[derive(Debug, Default)]
pub(crate) struct Verdicts {
    kept: HashMap<Box<[u8]>, Bits>,
    reading: Reading,
    name: Vec<u8>,
    long: bool,
}

impl Verdicts {
    /// A client message of `kind` begins.
    #[inline]
    pub(crate) fn begin(&mut self, kind: u8) {
        self.reading = match kind {
            b'B' if !self.kept.is_empty() => Reading::BindPortal,
            b'C' if !self.kept.is_empty() => Reading::CloseKind,
            _ => return self.reading = Reading::Nothing,
        };
        self.name.clear();
        self.long = false;
    }

    /// The next piece of the message's payload; the dirt a Bind of a kept statement leaves
    /// (0 for none), once its name is whole.
    #[inline]
    pub(crate) fn feed(&mut self, mut bytes: &[u8]) -> Bits {
        let mut dirt = 0;
        while let Some((&b, rest)) = bytes.split_first() {
            bytes = rest;
            match self.reading {
                Reading::Nothing => break,
                Reading::BindPortal => {
                    if b == 0 {
                        self.reading = Reading::BindName;
                    }
                }
                Reading::CloseKind => {
                    self.reading = if b == b'S' {
                        Reading::CloseName
                    } else {
                        Reading::Nothing
                    };
                }
                Reading::BindName | Reading::CloseName if b != 0 => {
                    if self.name.len() < NAME {
                        self.name.push(b);
                    } else {
                        self.long = true;
                    }
                }
                Reading::BindName => {
                    dirt = self.bound();
                    self.reading = Reading::Nothing;
                }
                Reading::CloseName => {
                    if !self.long {
                        self.kept.remove(self.name.as_slice());
                    }
                    self.reading = Reading::Nothing;
                }
            }
        }
        debug_assert!(self.name.len() <= NAME, "invariant 2");
        dirt
    }

    /// The Parse of the statement `name` (`None`: a name longer than any matched) was found
    /// to leave `dirt` (non-zero): kept under its name. The scan reads the name (it comes
    /// before the text), so it is walked once.
    pub(crate) fn parsed(&mut self, name: Option<&[u8]>, dirt: Bits) {
        debug_assert!(
            dirt != 0,
            "invariant 1: only a verdict that leaves something"
        );
        // Never matched by name, a long one is kept apart: every Bind of a name past the
        // limit takes the union of all kept.
        let key = name.unwrap_or(b"\0long");
        *self.kept.entry(Box::from(key)).or_default() |= dirt;
    }

    /// What the statement a Bind names leaves.
    fn bound(&self) -> Bits {
        if self.long {
            return self.kept.values().fold(0, |all, d| all | d);
        }
        self.kept.get(self.name.as_slice()).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `payload` in pieces of `step` bytes; the dirt it left.
    fn feed(v: &mut Verdicts, kind: u8, payload: &[u8], step: usize) -> Bits {
        v.begin(kind);
        payload.chunks(step).fold(0, |d, piece| d | v.feed(piece))
    }

    #[test]
    fn a_bind_of_a_dirty_statement_dirties_again_and_a_close_forgets_it() {
        for step in [1, 2, 100] {
            let mut v = Verdicts::default();
            // Nothing kept: a Bind is not even read.
            assert_eq!(feed(&mut v, b'B', b"\0s2\0\0\0\0\0", step), 0);
            v.parsed(Some(b"s2"), 1);
            assert_eq!(feed(&mut v, b'B', b"\0s1\0\0\0\0\0", step), 0);
            assert_eq!(feed(&mut v, b'B', b"\0s2\0\0\0\0\0", step), 1);
            assert_eq!(
                feed(&mut v, b'B', b"portal\0s2\0\0\0", step),
                1,
                "a named portal"
            );
            // Closing a portal named like it forgets nothing; closing the statement does.
            feed(&mut v, b'C', b"Ps2\0", step);
            assert_eq!(feed(&mut v, b'B', b"\0s2\0\0\0", step), 1);
            feed(&mut v, b'C', b"Ss2\0", step);
            assert_eq!(feed(&mut v, b'B', b"\0s2\0\0\0", step), 0);
            assert!(v.kept.is_empty());
        }
    }

    #[test]
    fn the_unnamed_statement_and_a_name_too_long_to_match() {
        let mut v = Verdicts::default();
        v.parsed(Some(b""), 4);
        assert_eq!(
            feed(&mut v, b'B', b"\0\0\0\0", 3),
            4,
            "the unnamed statement"
        );
        let long = [b'n'; 80];
        // Two statements with long names: both kept (a union, not the last one).
        v.parsed(None, 1);
        v.parsed(None, 8);
        let mut bind = vec![0];
        bind.extend_from_slice(&long);
        bind.extend_from_slice(b"\0\0\0");
        assert_eq!(feed(&mut v, b'B', &bind, 5), 1 | 4 | 8, "all that is kept");
    }
}
