//! What a statement may leave on the session: a scan of the SQL text of every Query and Parse
//! the client writes, cheap enough to run on each (a small state machine, one step a byte, fed
//! in whatever pieces the writes come in).
//!
//! The scan follows the lexical structure that can hide a `;` or a keyword — string literals
//! (`'…'`, `E'…'` with backslash escapes, and `'…'` with them too while the server reports
//! `standard_conforming_strings = off`), quoted identifiers, dollar quotes and both kinds of
//! comment — and looks at the words that open each statement, and at every call. It marks
//! the session [`Dirt`]: state that outlives the transaction and would reach the connection's
//! next user.
//!
//! It fails safe: a statement is clean only when the scan can account for all of it. A
//! statement of a kind it does not know, one it cannot see into (`CALL`, `DO`, SQL `EXECUTE`),
//! and a call of a function not known to leave nothing (any function of the application's,
//! however quoted or qualified) mark the session with every resettable kind of [`Dirt`]
//! ([`Dirt::ALL`]); the word lists are in `words.rs` (docs/design.md, "Recycling on
//! return").
//!
//! # Invariants
//!
//! 1. `len ≤ WORD` and `tag_len ≤ TAG`: longer words are no keyword; a longer dollar-quote
//!    tag marks the session dirty (its quote cannot be followed), never a missed statement.
//! 2. After a `\0` the scan is `Done` until the next [`Scan::begin`].
//! 3. A lexer that has not lexed since its last reset is as that reset left it but for its
//!    state: a Parse's statement name, the only other thing that steps it, moves only that
//!    (`Lexer::begin` asserts it before it skips the reset).

/// The bits of a [`Dirt`].
pub(crate) type Bits = u16;

/// Session state a statement may have left, as bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Dirt(pub(crate) Bits);

impl Dirt {
    /// A setting: `SET` (not `LOCAL`), `RESET`, `SET ROLE`, `SET SESSION AUTHORIZATION`,
    /// `SET SESSION CHARACTERISTICS`, `set_config`, or a reported parameter that changed.
    pub(crate) const SETTING: Bits = 1;
    /// A statement prepared in SQL (`PREPARE`).
    pub(crate) const PREPARED: Bits = 2;
    /// `LISTEN`.
    pub(crate) const LISTEN: Bits = 4;
    /// A temporary table, view or sequence.
    pub(crate) const TEMP: Bits = 8;
    /// A cursor `WITH HOLD`.
    pub(crate) const HOLD: Bits = 16;
    /// A session-level advisory lock.
    pub(crate) const ADVISORY: Bits = 32;
    /// State no statement resets: a library `LOAD`ed, or the statements tokio-postgres
    /// prepared for itself dropped (`DISCARD ALL`, `DEALLOCATE`). The connection is replaced.
    pub(crate) const LASTING: Bits = 64;
    /// A custom setting (`app.tenant`) the pool was not told of, or one whose name could
    /// not be read: no reset undefines it (`session/custom.rs`). The connection is replaced.
    pub(crate) const CUSTOM: Bits = 128;
    /// Whatever a statement the scan cannot account for may have left: everything a reset
    /// restores.
    pub(crate) const ALL: Bits =
        Self::SETTING | Self::PREPARED | Self::LISTEN | Self::TEMP | Self::HOLD | Self::ADVISORY;
    /// A statement that may change an object of what the manager's `after_connect` hook
    /// set up as well as one of the user's or the database's, and the scan cannot tell
    /// which: `CLOSE`, `FETCH` or `MOVE` (a cursor `WITH HOLD` of the hook's), `CREATE`
    /// (an index or trigger on its temporary table), `ALTER`, `DROP`, `CLUSTER`, `COMMENT`,
    /// `GRANT`, `REVOKE`, `SECURITY LABEL` (its temporary table, view or sequence). Rows are data,
    /// not set-up: what a user writes to a hook's table is not followed. Dirty only on a
    /// session a hook set up ([`for_session`](Self::for_session)); there, the whole session
    /// is reset and the hook runs again.
    pub(crate) const SET_UP: Bits = 256;

    pub(crate) fn is_clean(self) -> bool {
        self.0 == 0
    }

    pub(crate) fn has(self, bit: Bits) -> bool {
        self.0 & bit != 0
    }

    /// The dirt of a session an `after_connect` hook set up (`set_up`) or not: without a
    /// hook there is no set-up to undo, and [`SET_UP`](Self::SET_UP) is clean.
    pub(crate) fn for_session(self, set_up: bool) -> Dirt {
        if set_up {
            self
        } else {
            Dirt(self.0 & !Self::SET_UP)
        }
    }
}

/// The kinds, as the statements that leave them: `SET, LISTEN` (`clean` for none).
impl std::fmt::Display for Dirt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_clean() {
            return f.write_str("clean");
        }
        let kinds = [
            (Self::SETTING, "SET"),
            (Self::PREPARED, "PREPARE"),
            (Self::LISTEN, "LISTEN"),
            (Self::TEMP, "TEMP"),
            (Self::HOLD, "WITH HOLD"),
            (Self::ADVISORY, "advisory lock"),
            (Self::LASTING, "LOAD or DISCARD"),
            (Self::CUSTOM, "custom setting"),
            (Self::SET_UP, "a change to an object the set-up may own"),
        ];
        let mut first = true;
        for (bit, name) in kinds {
            if self.has(bit) {
                if !first {
                    f.write_str(", ")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

mod custom;
mod lexer;
mod rules;
mod words;

use lexer::{Lexer, State};

/// What the application declared to the scan (`PgManager::custom_settings`,
/// `PgManager::neutral_functions`), lower case. Nothing declared, nothing is excused.
#[derive(Debug, Default, Clone)]
pub(crate) struct Declared {
    /// Custom settings every connection defines, so a reset restores them.
    pub(crate) custom: Vec<Vec<u8>>,
    /// Functions that leave no session state.
    pub(crate) neutral: Vec<Vec<u8>>,
}

impl Declared {
    /// Nothing declared.
    pub(crate) fn nothing() -> &'static Declared {
        static NOTHING: Declared = Declared {
            custom: Vec::new(),
            neutral: Vec::new(),
        };
        &NOTHING
    }
}

/// The longest text remembered as the last clean one.
const REMEMBERED: usize = 1024;

/// The scan of the SQL text of one message after another. Applications send the same few
/// texts again and again, so the last text found clean is remembered, and a text equal to it
/// is only compared, not lexed (most often a few bytes against the same few).
#[derive(Debug, Default)]
pub(crate) struct Scan {
    lex: Lexer,
    /// The last text found clean, with its `\0`; empty if none.
    last: Vec<u8>,
    /// The text lexed so far (up to `REMEMBERED` bytes), to remember if it is clean.
    text: Vec<u8>,
    /// While the text matches `last`: how much of it has matched.
    repeat: Option<usize>,
    /// `'…'` takes backslash escapes (what `last` was found clean under).
    backslash: bool,
    /// A Parse's statement name (its first `STATEMENT` bytes), and whether it was longer.
    statement: Vec<u8>,
    statement_long: bool,
}

/// The longest statement name kept (the server keeps 63 bytes of a name).
const STATEMENT: usize = 64;

impl Scan {
    /// A new message: `parse` for a Parse (statement name, then the query), else a Query;
    /// `backslash`: the server reads a backslash in `'…'` as an escape
    /// (`standard_conforming_strings = off`).
    pub(crate) fn begin(&mut self, parse: bool, backslash: bool) {
        if backslash != self.backslash {
            // A text clean under one reading of strings may not be under the other.
            self.last.clear();
            self.backslash = backslash;
        }
        self.lex.begin(parse, backslash);
        self.text.clear();
        self.statement.clear();
        self.statement_long = false;
        self.repeat = (!self.last.is_empty()).then_some(0);
    }

    /// The functions the text calls that are not known to leave nothing.
    #[cfg(test)]
    pub(crate) fn calls(&self) -> &[Vec<u8>] {
        &self.lex.calls
    }

    /// What the lexer alone found the text scanned since [`begin`](Scan::begin) leaves
    /// (without the declared names: [`Scan::verdict`]).
    #[cfg(test)]
    pub(crate) fn dirt(&self) -> Dirt {
        Dirt(self.lex.dirt)
    }

    /// What the text scanned since [`begin`](Scan::begin) may have left, judged with what
    /// the application declared: a call of a function it did not declare neutral leaves
    /// anything a reset restores, a custom setting it did not declare (or one whose name
    /// could not be read) what no reset restores. `declared` is asked only when the text
    /// called a function or set a custom setting: a text that did neither (every text sent
    /// again, the last clean one) is judged here, inlined into the writing side.
    #[inline]
    pub(crate) fn verdict<'d>(&self, declared: impl FnOnce() -> &'d Declared) -> Dirt {
        let lex = &self.lex;
        if lex.calls.is_empty() && !lex.customs.unknown && lex.customs.names.is_empty() {
            // Whatever was declared: a rule added to `judged` that reads something else must
            // be added to this condition, or the fast path would miss it.
            debug_assert_eq!(self.judged(Declared::nothing()), Dirt(lex.dirt));
            return Dirt(lex.dirt);
        }
        self.judged(declared())
    }

    /// [`verdict`](Scan::verdict) of a text that called a function or set a custom setting.
    fn judged(&self, declared: &Declared) -> Dirt {
        let lex = &self.lex;
        let mut dirt = lex.dirt;
        if !lex.calls.iter().all(|c| declared.neutral.contains(c)) {
            dirt |= Dirt::ALL;
        }
        if lex.customs.unknown
            || !lex
                .customs
                .names
                .iter()
                .all(|n| declared.custom.contains(n))
        {
            dirt |= Dirt::CUSTOM;
        }
        Dirt(dirt)
    }

    /// The name of the statement the Parse being scanned prepares (`""`: the unnamed one);
    /// `None` if it is longer than any name matched.
    pub(crate) fn statement(&self) -> Option<&[u8]> {
        (!self.statement_long).then_some(self.statement.as_slice())
    }

    /// Scans the next piece of the message's payload.
    #[inline]
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        // The commonest piece of all, inlined into the writing side: a Query's whole text,
        // the last clean one again (what the rest of `feed` finds too, one call sooner).
        if self.repeat == Some(0) && self.lex.state != State::Name && bytes.starts_with(&self.last)
        {
            self.lex.state = State::Done;
            self.repeat = None;
            return;
        }
        self.feed_piece(bytes);
    }

    /// [`feed`](Scan::feed), for any piece.
    fn feed_piece(&mut self, mut bytes: &[u8]) {
        // A Parse's statement name comes first: kept for its verdict, never compared, never
        // remembered.
        while self.lex.state == State::Name
            && let Some((&b, rest)) = bytes.split_first()
        {
            if b != 0 {
                if self.statement.len() < STATEMENT {
                    self.statement.push(b);
                } else {
                    self.statement_long = true;
                }
            }
            self.lex.step(b);
            bytes = rest;
        }
        if let Some(at) = self.repeat {
            let rest = &self.last[at..];
            // The whole of the rest at once (one comparison of slices) in the common case,
            // the statement sent again in one piece; byte by byte only where it differs.
            let same = if bytes.starts_with(rest) {
                rest.len()
            } else {
                rest.iter().zip(bytes).take_while(|(a, b)| a == b).count()
            };
            if same == rest.len() {
                // The whole text, `\0` included: the last clean one again.
                self.lex.state = State::Done;
                self.repeat = None;
                return;
            }
            if same == bytes.len() {
                self.repeat = Some(at + same);
                return;
            }
            // A different text: lex what matched, then go on.
            self.repeat = None;
            let last = std::mem::take(&mut self.last);
            self.lex_and_keep(&last[..at + same]);
            self.last = last;
            bytes = &bytes[same..];
        }
        if self.lex.state != State::Done {
            self.lex_and_keep(bytes);
        }
    }

    fn lex_and_keep(&mut self, bytes: &[u8]) {
        self.lex.feed(bytes);
        if self.text.len() <= REMEMBERED {
            let end = bytes
                .iter()
                .position(|&b| b == 0)
                .map_or(bytes.len(), |nul| nul + 1);
            self.text.extend_from_slice(&bytes[..end]);
        }
        if self.lex.state == State::Done
            && self.lex.dirt == 0
            && self.lex.calls.is_empty()
            && self.text.last() == Some(&0)
            && self.text.len() <= REMEMBERED
        {
            std::mem::swap(&mut self.last, &mut self.text);
        }
    }
}

/// Scans `sql` whole, as a Query message's text.
pub(crate) fn scan(sql: &str) -> Dirt {
    let mut scan = Scan::default();
    scan.begin(false, false);
    scan.feed(sql.as_bytes());
    scan.feed(&[0]);
    scan.verdict(Declared::nothing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_like_the_last_clean_one_is_compared_and_any_change_lexed() {
        let mut s = Scan::default();
        let run = |s: &mut Scan, text: &[u8], step: usize| {
            s.begin(false, false);
            for piece in text.chunks(step) {
                s.feed(piece);
            }
            s.dirt()
        };
        for step in [1, 3, 100] {
            assert!(run(&mut s, b"SELECT 1\0", step).is_clean());
            assert!(
                run(&mut s, b"SELECT 1\0", step).is_clean(),
                "the same again"
            );
            assert!(run(&mut s, b"SELECT 1; LISTEN x\0", step).has(Dirt::LISTEN));
            assert!(run(&mut s, b"SELECT 1\0", step).is_clean());
            assert!(run(&mut s, b"SELECT\0", step).is_clean(), "a prefix");
            assert!(run(&mut s, b"SET ROLE x\0", step).has(Dirt::SETTING));
            assert!(run(&mut s, b"SELECT\0", step).is_clean());
            assert!(
                run(&mut s, b"SELECT; SET ROLE x\0", step).has(Dirt::SETTING),
                "a longer text"
            );
        }
        // A Parse: the name is skipped, the query compared.
        let parse = |s: &mut Scan, text: &[u8]| {
            s.begin(true, false);
            s.feed(text);
            s.dirt()
        };
        assert!(parse(&mut s, b"s1\0SELECT 2\0\0\0").is_clean());
        assert!(parse(&mut s, b"s2\0SELECT 2\0\0\0").is_clean());
        assert!(parse(&mut s, b"s3\0SET x = 1\0\0\0").has(Dirt::SETTING));
    }

    #[test]
    fn a_scan_begun_again_reads_as_a_new_one_whatever_the_last_text_left() {
        // Texts that leave every part of the lexer's state set at their end: a word cut off,
        // a dollar quote open, a custom setting's name half read, unknown calls, nested
        // comments, an `E''` string.
        let texts: [&[u8]; 6] = [
            b"SELECT f(1), g(2); SET app.tenant = 7; SELECT $tag$ x",
            b"SELECT set_config('app.t",
            b"SELECT 1 INTO LOCAL TEMP t; /* a /* b",
            b"SELECT E'\\' , \"q\".\"f\"(",
            b"CREATE TEMP TABLE averyveryveryverylongwordthatoverflows",
            b"s1\0SET SESSION x.y TO 1; CALL p(",
        ];
        for text in texts {
            for (parse, backslash) in [(false, false), (true, false), (false, true), (true, true)] {
                let mut s = Scan::default();
                s.begin(!parse, !backslash);
                s.feed(text);
                s.begin(parse, backslash);
                assert_eq!(
                    format!("{:?}", s.lex),
                    format!("{:?}", Lexer::new(parse, backslash)),
                    "after {:?}",
                    String::from_utf8_lossy(text)
                );
            }
        }
    }

    #[test]
    fn statements_that_leave_state_are_seen() {
        let dirty = [
            ("SET ROLE tenant", Dirt::SETTING),
            ("set search_path = a, b", Dirt::SETTING),
            ("SET statement_timeout TO 5", Dirt::SETTING),
            (
                "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
                Dirt::SETTING,
            ),
            ("SET SESSION AUTHORIZATION someone", Dirt::SETTING),
            ("RESET search_path", Dirt::SETTING),
            ("SELECT set_config('app.tenant', '7', false)", Dirt::SETTING),
            ("PREPARE p AS SELECT 1", Dirt::PREPARED),
            ("LISTEN jobs", Dirt::LISTEN),
            ("CREATE TEMP TABLE t (x int)", Dirt::TEMP),
            ("create temporary table t (x int)", Dirt::TEMP),
            ("CREATE OR REPLACE TEMP VIEW v AS SELECT 1", Dirt::TEMP),
            ("CREATE GLOBAL TEMPORARY TABLE t (x int)", Dirt::TEMP),
            ("CREATE TABLE pg_temp.t (x int)", Dirt::TEMP),
            ("SELECT 1 INTO TEMP t", Dirt::TEMP),
            // The temporary schema by any of its names: quoted, as the session's own
            // `pg_temp_N` (there once the session has made a temporary object, and kept
            // after a reset drops them), or spelled with Unicode escapes.
            ("CREATE TABLE \"pg_temp\".t (x int)", Dirt::TEMP),
            ("CREATE VIEW \"pg_temp\".v AS SELECT 1", Dirt::TEMP),
            ("SELECT 1 INTO \"pg_temp\".t", Dirt::TEMP),
            ("CREATE TABLE pg_temp_3.t (x int)", Dirt::TEMP),
            ("CREATE TABLE \"pg_temp_3\".t (x int)", Dirt::TEMP),
            ("CREATE TABLE U&\"pg\\005ftemp\".t (x int)", Dirt::TEMP),
            (
                "CREATE TABLE u&\"pg!005ftemp\" UESCAPE '!'.t (x int)",
                Dirt::TEMP,
            ),
            ("DECLARE c CURSOR WITH HOLD FOR SELECT 1", Dirt::HOLD),
            ("SELECT pg_advisory_lock(1)", Dirt::ADVISORY),
            ("SELECT pg_try_advisory_lock_shared(1, 2)", Dirt::ADVISORY),
            ("LOAD 'auto_explain'", Dirt::LASTING),
            ("DISCARD ALL", Dirt::LASTING),
            ("DEALLOCATE ALL", Dirt::LASTING),
            ("DEALLOCATE PREPARE ALL", Dirt::LASTING),
            ("SELECT 1; SET ROLE x", Dirt::SETTING),
            (
                "BEGIN; SELECT 'a;b'; SET search_path = x; COMMIT",
                Dirt::SETTING,
            ),
            ("/* a */ SET x.y = 1", Dirt::SETTING),
            ("-- a\nLISTEN x", Dirt::LISTEN),
            ("SELECT $$ ; $$; LISTEN x", Dirt::LISTEN),
            ("SELECT $q$ $$ ; $q$; LISTEN x", Dirt::LISTEN),
            ("SELECT E'\\' ; '; LISTEN x", Dirt::LISTEN),
            ("SELECT '' ; LISTEN x", Dirt::LISTEN),
            ("SELECT /* /* nested */ ; */ 1; LISTEN x", Dirt::LISTEN),
            ("select \"a\"\"b\" from t; listen x", Dirt::LISTEN),
        ];
        for (sql, bit) in dirty {
            let dirt = scan(sql);
            assert!(dirt.has(bit), "{sql}: {dirt:?}");
        }
    }

    #[test]
    fn statements_that_undo_state_of_a_kind_mark_that_kind() {
        // Nothing the user left, but maybe part of an `after_connect` hook's set-up, which
        // only the reset of the kind (and the hook run again) brings back.
        for (sql, bit) in [
            ("UNLISTEN *", Dirt::LISTEN),
            ("unlisten pooler_hooked", Dirt::LISTEN),
            ("DISCARD TEMP", Dirt::TEMP),
            ("DISCARD TEMPORARY", Dirt::TEMP),
            ("DEALLOCATE p", Dirt::PREPARED),
            ("DEALLOCATE PREPARE p", Dirt::PREPARED),
            // Calls of functions not known to leave nothing: every kind.
            ("SELECT pg_advisory_unlock_all()", Dirt::ADVISORY),
            ("SELECT pg_advisory_unlock(1)", Dirt::ADVISORY),
        ] {
            assert!(scan(sql).has(bit), "{sql}: {:?}", scan(sql));
        }
        // Of a kind the statement does not tell (the hook's cursor or the user's, its
        // temporary table or an ordinary one): dirty where a hook set the session up,
        // clean where none did.
        for sql in [
            "CLOSE c",
            "close all",
            "DROP TABLE t",
            "DROP TABLE IF EXISTS t, u CASCADE",
            "DROP VIEW v",
            "DROP SEQUENCE s",
            "ALTER TABLE t ADD COLUMN y int",
            "ALTER TABLE t RENAME TO u",
            "ALTER SEQUENCE s RESTART",
            "SELECT 1; CLOSE c",
            "FETCH c",
            "fetch forward 10 from c",
            "MOVE ABSOLUTE 0 IN c",
            "CREATE INDEX i ON t (x)",
            "CREATE TABLE t (temp int)",
            "COMMENT ON TABLE t IS 'x'",
            "GRANT SELECT ON t TO PUBLIC",
            "REVOKE ALL ON t FROM PUBLIC",
            "SECURITY LABEL ON TABLE t IS 'x'",
            "CLUSTER t USING i",
        ] {
            assert_eq!(scan(sql), Dirt(Dirt::SET_UP), "{sql}");
            assert!(scan(sql).for_session(true).has(Dirt::SET_UP), "{sql}");
            assert!(scan(sql).for_session(false).is_clean(), "{sql}");
        }
        // What else the statement leaves is kept either way.
        let both = scan("DROP TABLE t; LISTEN x").for_session(false);
        assert_eq!(both, Dirt(Dirt::LISTEN));
    }

    #[test]
    fn statements_that_leave_nothing_are_clean() {
        let clean = [
            "SELECT 1",
            "UPDATE t SET x = 1 WHERE y = 'SET ROLE x'",
            "SET LOCAL search_path = x",
            "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
            "SET CONSTRAINTS ALL DEFERRED",
            "BEGIN; INSERT INTO t VALUES ($1); COMMIT",
            "SELECT pg_advisory_xact_lock(1)",
            "PREPARE TRANSACTION 'x'",
            "SELECT temp FROM weather",
            "DECLARE c CURSOR FOR SELECT 1",
            "SELECT 'LISTEN x' -- ; LISTEN y",
            "SELECT $1::int + 1",
            "SELECT a$b FROM t",
            "DISCARD PLANS",
            "ALTER TABLE t ALTER COLUMN c SET DEFAULT 1",
            "SELECT $tag$ LISTEN x; SET ROLE y $tag$",
            "SELECT E'it\\'s; LISTEN x'",
            "SELECT 1 /* LISTEN x; */",
            "SELECT * FROM \"pg_temp_stats\"",
            "SELECT pg_temp_stats FROM t",
            "SELECT \"PG_TEMP\" FROM t",
            "SELECT u & 1, \"u\" FROM t",
        ];
        for sql in clean {
            // `ALTER` may undo a hook's set-up: clean on a session no hook set up.
            let dirt = scan(sql).for_session(false);
            assert!(dirt.is_clean(), "{sql}: {dirt:?}");
        }
    }

    #[test]
    fn any_split_scans_as_whole() {
        let texts = [
            "BEGIN; SELECT $q$ ; $q$, E'\\'', \"x\"\"y\" /* /* */ */ -- c\n; SET ROLE r",
            "SELECT 1; CREATE TEMP TABLE t(x int); LISTEN y; SELECT pg_advisory_lock(2)",
        ];
        for sql in texts {
            let whole = scan(sql);
            for step in 1..8 {
                let mut s = Scan::default();
                s.begin(false, false);
                for piece in sql.as_bytes().chunks(step) {
                    s.feed(piece);
                }
                s.feed(&[0]);
                assert_eq!(
                    s.verdict(Declared::nothing),
                    whole,
                    "{sql} in pieces of {step}"
                );
            }
        }
    }

    #[test]
    fn a_parse_message_skips_its_statement_name() {
        let mut s = Scan::default();
        s.begin(true, false);
        s.feed(b"listen\0SELECT 1\0\0\0");
        assert!(s.dirt().is_clean());
        s.begin(true, false);
        s.feed(b"s1\0SET ROLE x\0\0\0");
        assert!(s.dirt().has(Dirt::SETTING));
    }

    /// What the scan cannot account for is dirty: every way that read as clean from outside.
    #[test]
    fn what_the_scan_cannot_account_for_is_dirty() {
        let dirty = [
            ("SET \"search_path\" = pg_catalog", Dirt::SETTING),
            ("SET \"statement_timeout\" = 5", Dirt::SETTING),
            ("SELECT \"pg_advisory_lock\"(1)", Dirt::ADVISORY),
            (
                "SELECT pg_catalog.\"set_config\"('a.b', '1', false)",
                Dirt::SETTING,
            ),
            (
                "SELECT pg_catalog.set_config('a.b', '1', false)",
                Dirt::SETTING,
            ),
            ("SELECT pg_catalog.pg_advisory_lock (1)", Dirt::ADVISORY),
            ("SELECT * FROM set_config('a.b', '1', false)", Dirt::SETTING),
            ("SELECT 1 INTO LOCAL TEMP t", Dirt::TEMP),
            ("SELECT 1 INTO GLOBAL TEMPORARY t", Dirt::TEMP),
            ("SELECT 1 INTO TEMPORARY t", Dirt::TEMP),
            (
                "EXPLAIN ANALYZE CREATE TEMP TABLE t AS SELECT 1",
                Dirt::TEMP,
            ),
            (
                "UPDATE pg_settings SET setting = 'x' WHERE name = 'search_path'",
                Dirt::SETTING,
            ),
            ("SELECT my_function(1)", Dirt::ALL),
            ("SELECT \"MyFunction\"(1)", Dirt::ALL),
            ("SELECT app.audit($1)", Dirt::ALL),
            ("SELECT setseed(0.5)", Dirt::ALL),
            ("CALL my_procedure()", Dirt::ALL),
            ("DO $$BEGIN PERFORM 1; END$$", Dirt::ALL),
            ("EXECUTE p", Dirt::ALL),
            ("REASSIGN OWNED BY a TO b", Dirt::ALL),
            ("\"weird\"", Dirt::ALL),
            ("SELECT 1; CALL p()", Dirt::ALL),
        ];
        for (sql, bit) in dirty {
            let dirt = scan(sql);
            assert!(dirt.0 & bit == bit, "{sql}: {dirt:?}");
        }
    }

    /// With `standard_conforming_strings = off` a backslash escapes the quote in `'…'`: the
    /// text after it is still inside the string, and what follows the string's real end is
    /// code.
    #[test]
    fn strings_are_read_as_the_server_reads_them() {
        let hidden = "SELECT '\\'' ; LISTEN x; SELECT pg_advisory_lock(1) --'";
        let lex = |sql: &str, backslash: bool| {
            let mut s = Scan::default();
            s.begin(false, backslash);
            s.feed(sql.as_bytes());
            s.feed(&[0]);
            s.dirt()
        };
        assert!(
            lex(hidden, true).has(Dirt::LISTEN),
            "off: the quote was escaped"
        );
        assert!(lex(hidden, true).has(Dirt::ADVISORY));
        // Under the default reading that text is one string, then a comment.
        assert!(lex(hidden, false).is_clean());
        let trick = "SELECT 'a\\'; LISTEN x";
        assert!(
            lex(trick, false).has(Dirt::LISTEN),
            "on: the backslash is a character"
        );
        assert!(lex(trick, true).is_clean(), "off: still inside the string");
        // The remembered clean text is forgotten when the reading changes.
        let mut s = Scan::default();
        for backslash in [false, true] {
            s.begin(false, backslash);
            s.feed(trick.as_bytes());
            s.feed(&[0]);
        }
        assert!(s.dirt().is_clean());
        s.begin(false, false);
        s.feed(trick.as_bytes());
        s.feed(&[0]);
        assert!(
            s.dirt().has(Dirt::LISTEN),
            "re-read under the other reading"
        );
        for sql in [
            "SELECT U&'\\0041'; LISTEN x",
            "SELECT E'\\''; LISTEN x",
            "SELECT /* a /* b */ ; */ 1; LISTEN x",
            "SELECT $a$ $b$ ; $b$ $a$; LISTEN x",
        ] {
            assert!(lex(sql, false).has(Dirt::LISTEN), "{sql}");
        }
    }

    /// The statements real applications send stay clean, so their returns cost nothing:
    /// pgbench's built-in scripts, the CRUD diesel-async and sqlx emit, an ORM transaction,
    /// DDL of migrations.
    #[test]
    fn the_statements_of_real_workloads_are_clean() {
        let clean = [
            // pgbench (tpcb-like, simple-update, select-only), with parameters.
            "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2",
            "SELECT abalance FROM pgbench_accounts WHERE aid = $1",
            "UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2",
            "UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2",
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) \
             VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)",
            "BEGIN",
            "END",
            // diesel-async.
            "SELECT \"users\".\"id\", \"users\".\"name\" FROM \"users\" WHERE \"users\".\"id\" = $1",
            "INSERT INTO \"users\" (\"name\", \"email\") VALUES ($1, $2) RETURNING \"users\".\"id\"",
            "UPDATE \"users\" SET \"name\" = $1 WHERE (\"users\".\"id\" = $2) RETURNING \"users\".\"id\"",
            "DELETE FROM \"users\" WHERE (\"users\".\"id\" = $1)",
            "SELECT COUNT(*) FROM \"users\"",
            "SELECT EXISTS (SELECT \"users\".\"id\" FROM \"users\" WHERE \"users\".\"id\" = $1)",
            "INSERT INTO \"public\".\"users\" (\"name\") VALUES ($1)",
            "SAVEPOINT diesel_savepoint_1",
            "RELEASE SAVEPOINT diesel_savepoint_1",
            "ROLLBACK TO SAVEPOINT diesel_savepoint_1",
            // sqlx.
            "SELECT id, name FROM users WHERE id = ANY($1)",
            "INSERT INTO users (name) SELECT * FROM UNNEST($1::text[])",
            "SELECT coalesce(max(version), 0) FROM _sqlx_migrations",
            "INSERT INTO public.events (kind, at) VALUES ($1, now()) ON CONFLICT (kind) DO UPDATE SET at = EXCLUDED.at",
            "SELECT id FROM jobs WHERE state = 'new' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED",
            // An ORM transaction.
            "BEGIN ISOLATION LEVEL REPEATABLE READ",
            "SELECT t.id, lower(t.name), jsonb_build_object('a', t.a) FROM t WHERE t.id IN ($1, $2)",
            "WITH moved AS (DELETE FROM q WHERE id = $1 RETURNING *) INSERT INTO done SELECT * FROM moved",
            "SELECT count(*) OVER (PARTITION BY a ORDER BY b) FROM t",
            "SELECT CAST($1 AS numeric(10, 2)), $2::varchar(20)",
            "SELECT EXTRACT(EPOCH FROM now() - ts) FROM t",
            "COMMIT",
            // Migrations.
            "CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, user_id bigint \
             REFERENCES users (id), total numeric(12, 2) CHECK (total >= 0), \
             created timestamptz DEFAULT now(), UNIQUE (user_id, created))",
            "CREATE INDEX orders_user ON orders USING btree (user_id)",
            "ALTER TABLE orders ADD COLUMN note text",
            "SELECT * FROM pg_settings WHERE name = 'search_path'",
        ];
        for sql in clean {
            // A migration's `ALTER` or `DROP` costs a reset only where a hook set the
            // session up (`Dirt::SET_UP`).
            let dirt = scan(sql).for_session(false);
            assert!(dirt.is_clean(), "{sql}: {dirt:?}");
        }
    }

    /// A built-in's name is the built-in only unqualified or in `pg_catalog`: in another
    /// schema it is a function of the application's, which may leave anything.
    #[test]
    fn a_built_ins_name_in_another_schema_is_a_call_of_the_applications() {
        for sql in [
            "SELECT app.now()",
            "SELECT \"app\".lower('x')",
            "SELECT count(*), app.count(1) FROM t",
            "SELECT \"PG_CATALOG\".now()",
            "SELECT db.app.now()",
        ] {
            assert_eq!(scan(sql), Dirt(Dirt::ALL), "{sql}");
        }
        for sql in [
            "SELECT now()",
            "SELECT pg_catalog.now()",
            "SELECT PG_CATALOG.lower('x')",
            "SELECT \"pg_catalog\".lower('x')",
            "SELECT test.pg_catalog.now()",
        ] {
            assert!(scan(sql).is_clean(), "{sql}: {:?}", scan(sql));
        }
    }

    /// A text that calls an unknown function is never remembered as clean: sent again, its
    /// calls are read again (the writer decides whether the application declared them).
    #[test]
    fn a_text_with_a_call_is_read_again_each_time() {
        let mut s = Scan::default();
        for _ in 0..3 {
            s.begin(false, false);
            s.feed(b"SELECT app.audit(1), count(*) FROM t\0");
            assert_eq!(s.calls(), [b"audit".to_vec()]);
            assert!(s.dirt().is_clean(), "the call is the writer's to judge");
        }
    }

    /// The verdict asks what the application declared whenever the text called a function,
    /// set a custom setting, or may have set one it could not name — and only then; without
    /// a declaration each leaves what a reset cannot restore or everything it can.
    #[test]
    fn the_verdict_reads_the_declared_names_for_calls_and_custom_settings() {
        let declared = Declared {
            custom: vec![b"app.tenant".to_vec()],
            neutral: vec![b"audit".to_vec()],
        };
        let judge = |text: &[u8], declared: &Declared| {
            let mut s = Scan::default();
            s.begin(false, false);
            s.feed(text);
            let asked = std::cell::Cell::new(false);
            let dirt = s.verdict(|| {
                asked.set(true);
                declared
            });
            (dirt, asked.get())
        };
        let nothing = Declared::nothing();
        // `set_config` is a call the application may declare neutral, and sets a setting.
        let set_config = Dirt::ALL;
        for (text, undeclared, with_declared) in [
            (&b"SELECT app.audit(1)\0"[..], Dirt::ALL, 0),
            (
                b"SELECT set_config('app.tenant', $1, false)\0",
                set_config | Dirt::CUSTOM,
                set_config,
            ),
            (
                b"SET app.tenant = 7\0",
                Dirt::SETTING | Dirt::CUSTOM,
                Dirt::SETTING,
            ),
            // Its name an expression: whatever was declared, it may be any setting.
            (
                b"SELECT set_config($1, 'x', false)\0",
                set_config | Dirt::CUSTOM,
                set_config | Dirt::CUSTOM,
            ),
            // A declared name's literal that goes on (`||`, or a string continued on the
            // next line) names another setting.
            (
                b"SELECT set_config('app.tenant' || '_x', $1, false)\0",
                set_config | Dirt::CUSTOM,
                set_config | Dirt::CUSTOM,
            ),
            (
                b"SELECT set_config('app.tenant'\n'_x', $1, false)\0",
                set_config | Dirt::CUSTOM,
                set_config | Dirt::CUSTOM,
            ),
            // A name spelled with Unicode escapes cannot be read.
            (
                b"SET U&\"app\\002etenant\" = 7\0",
                Dirt::ALL | Dirt::CUSTOM,
                Dirt::ALL | Dirt::CUSTOM,
            ),
            (
                b"SET app.U&\"tenant\" = 7\0",
                Dirt::ALL | Dirt::CUSTOM,
                Dirt::ALL | Dirt::CUSTOM,
            ),
        ] {
            let shown = String::from_utf8_lossy(text);
            assert_eq!(judge(text, nothing), (Dirt(undeclared), true), "{shown}");
            assert_eq!(
                judge(text, &declared),
                (Dirt(with_declared), true),
                "{shown}"
            );
        }
        assert_eq!(judge(b"SELECT 1\0", nothing), (Dirt(0), false));
        assert_eq!(
            judge(b"SET search_path = x\0", nothing),
            (Dirt(Dirt::SETTING), false)
        );
    }

    /// With `standard_conforming_strings = off`, a backslash in a plain `'…'` is an escape,
    /// so a `set_config` name read through one may be any name, a declared one's neighbour
    /// too.
    #[test]
    fn a_set_config_name_with_an_escape_is_no_name_read() {
        let declared = Declared {
            custom: vec![b"app.tenant".to_vec(), b"app.x2etenant".to_vec()],
            neutral: Vec::new(),
        };
        for (text, backslash) in [
            (
                &b"SELECT set_config('app\\x2etenant', $1, false)\0"[..],
                true,
            ),
            (b"SELECT set_config(E'app\\x2etenant', $1, false)\0", false),
        ] {
            let mut s = Scan::default();
            s.begin(false, backslash);
            s.feed(text);
            let dirt = s.verdict(|| &declared);
            assert!(
                dirt.has(Dirt::CUSTOM),
                "{}: {dirt:?}",
                String::from_utf8_lossy(text)
            );
        }
    }

    /// A Parse's statement name is read once, by the scan, for the statement's verdict.
    #[test]
    fn a_parse_names_its_statement() {
        let mut s = Scan::default();
        for step in [1, 3, 100] {
            s.begin(true, false);
            for piece in b"s17\0SET ROLE x\0\0\0".chunks(step) {
                s.feed(piece);
            }
            assert_eq!(s.statement(), Some(&b"s17"[..]));
            assert!(s.dirt().has(Dirt::SETTING));
        }
        s.begin(true, false);
        let mut long = vec![b'n'; 70];
        long.extend_from_slice(b"\0SELECT 1\0\0\0");
        s.feed(&long);
        assert_eq!(s.statement(), None, "longer than any matched");
        s.begin(true, false);
        s.feed(b"\0SELECT 1\0\0\0");
        assert_eq!(s.statement(), Some(&b""[..]), "the unnamed statement");
    }
}
