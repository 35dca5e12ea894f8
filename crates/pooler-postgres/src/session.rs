//! What a statement may leave on the session: a scan of the SQL text of every Query and Parse
//! the client writes, cheap enough to run on each (a small state machine, one step a byte, fed
//! in whatever pieces the writes come in).
//!
//! The scan follows the lexical structure that can hide a `;` or a keyword — string literals
//! (`'…'`, `E'…'` with backslash escapes), quoted identifiers, dollar quotes and both kinds of
//! comment — and looks at the words that open each statement, plus a few function names
//! anywhere. It marks the session [`Dirt`]: state that outlives the transaction and would
//! reach the connection's next user. What it cannot see is state changed inside a function
//! body or a `DO` block; the reported parameters (`ParameterStatus`) cover part of that, the
//! reader's side (docs/design.md, "Recycling on return").
//!
//! # Invariants
//!
//! 1. `len ≤ WORD` and `tag_len ≤ TAG`: longer words are no keyword; a longer dollar-quote
//!    tag marks the session dirty (its quote cannot be followed), never a missed statement.
//! 2. After a `\0` the scan is `Done` until the next [`Scan::begin`].

/// Session state a statement may have left, as bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Dirt(pub(crate) u8);

impl Dirt {
    /// A setting: `SET` (not `LOCAL`), `RESET`, `SET ROLE`, `SET SESSION AUTHORIZATION`,
    /// `SET SESSION CHARACTERISTICS`, `set_config`, or a reported parameter that changed.
    pub(crate) const SETTING: u8 = 1;
    /// A statement prepared in SQL (`PREPARE`).
    pub(crate) const PREPARED: u8 = 2;
    /// `LISTEN`.
    pub(crate) const LISTEN: u8 = 4;
    /// A temporary table, view or sequence.
    pub(crate) const TEMP: u8 = 8;
    /// A cursor `WITH HOLD`.
    pub(crate) const HOLD: u8 = 16;
    /// A session-level advisory lock.
    pub(crate) const ADVISORY: u8 = 32;
    /// State no statement resets: a library `LOAD`ed, or the statements tokio-postgres
    /// prepared for itself dropped (`DISCARD ALL`, `DEALLOCATE`). The connection is replaced.
    pub(crate) const LASTING: u8 = 64;

    pub(crate) fn is_clean(self) -> bool {
        self.0 == 0
    }

    pub(crate) fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }
}

/// Byte classes, looked up rather than computed on the hot loops.
const IDENT: u8 = 1;
const BLANK: u8 = 2;

const CLASS: [u8; 256] = {
    let mut class = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        if c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80 {
            class[b] = IDENT;
        }
        if c.is_ascii_digit()
            || matches!(
                c,
                b' ' | b'\t'
                    | b'\n'
                    | b'\r'
                    | b'('
                    | b')'
                    | b','
                    | b'='
                    | b'.'
                    | b'*'
                    | b'+'
                    | b'<'
                    | b'>'
            )
        {
            class[b] |= BLANK;
        }
        b += 1;
    }
    class
};

/// The longest word compared with a keyword (`pg_try_advisory_lock_shared` is 27).
const WORD: usize = 28;
/// The longest dollar-quote tag followed.
const TAG: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    /// A Parse message's statement name, before its query.
    Name,
    #[default]
    Code,
    Word,
    Quote,
    /// A `'` inside a quote: `''` goes on, anything else ends it.
    QuoteEnd,
    EQuote,
    EQuoteEscape,
    EQuoteEnd,
    Ident,
    IdentEnd,
    /// After `$` in code: a tag, or a positional parameter.
    DollarOpen,
    DollarBody,
    /// A `$` in the body: maybe the closing tag.
    DollarClose,
    Dash,
    LineComment,
    Slash,
    Block,
    BlockStar,
    BlockSlash,
    Done,
}

/// Keywords the scan acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Kw {
    #[default]
    Other,
    Set,
    Reset,
    Local,
    Transaction,
    Constraints,
    Prepare,
    Listen,
    Create,
    Temp,
    Into,
    Declare,
    Hold,
    Load,
    Discard,
    Deallocate,
    /// `TABLE`, `VIEW`, `SEQUENCE`: after it, a `CREATE` names its object.
    Object,
    PgTemp,
    SetConfig,
    Advisory,
}

fn keyword(word: &[u8]) -> Kw {
    // Most words are no keyword: a length and a first letter rule them out before any
    // comparison.
    if !(3..=27).contains(&word.len())
        || !matches!(
            word[0],
            b's' | b'r' | b'l' | b't' | b'c' | b'p' | b'i' | b'd' | b'h' | b'v'
        )
    {
        return Kw::Other;
    }
    match word {
        b"set" => Kw::Set,
        b"reset" => Kw::Reset,
        b"local" => Kw::Local,
        b"transaction" => Kw::Transaction,
        b"constraints" => Kw::Constraints,
        b"prepare" => Kw::Prepare,
        b"listen" => Kw::Listen,
        b"create" => Kw::Create,
        b"temp" | b"temporary" => Kw::Temp,
        b"into" => Kw::Into,
        b"declare" => Kw::Declare,
        b"hold" => Kw::Hold,
        b"load" => Kw::Load,
        b"discard" => Kw::Discard,
        b"deallocate" => Kw::Deallocate,
        b"table" | b"view" | b"sequence" => Kw::Object,
        b"pg_temp" => Kw::PgTemp,
        b"set_config" => Kw::SetConfig,
        b"pg_advisory_lock"
        | b"pg_advisory_lock_shared"
        | b"pg_try_advisory_lock"
        | b"pg_try_advisory_lock_shared" => Kw::Advisory,
        _ => Kw::Other,
    }
}

/// The lexer of one message's SQL text.
#[derive(Debug, Default)]
struct Lexer {
    state: State,
    word: [u8; WORD],
    len: usize,
    /// The word overflowed `WORD`: no keyword.
    long: bool,
    /// The word just ended was `E` (or `e`), right before this byte.
    e_prefix: bool,
    tag: [u8; TAG],
    tag_len: usize,
    matched: usize,
    depth: u32,
    /// Words seen in the current statement, its first, and the one before this.
    nth: u32,
    first: Kw,
    prev: Kw,
    /// The statement has named the kind of its object (`CREATE … TABLE`).
    object: bool,
    dirt: u8,
}

impl Lexer {
    fn new(parse: bool) -> Self {
        Lexer {
            state: if parse { State::Name } else { State::Code },
            ..Lexer::default()
        }
    }

    /// Lexes the next piece of the message's payload.
    fn feed(&mut self, bytes: &[u8]) {
        let mut i = 0;
        while i < bytes.len() {
            // The two states almost every byte of a statement is read in, in tight loops: the
            // rest of a word, and the blanks, digits and operators between words.
            match self.state {
                State::Done => return,
                State::Word => {
                    while let Some(&b) = bytes.get(i)
                        && CLASS[usize::from(b)] & IDENT != 0
                    {
                        if let Some(slot) = self.word.get_mut(self.len) {
                            *slot = b.to_ascii_lowercase();
                            self.len += 1;
                        } else {
                            self.long = true;
                        }
                        i += 1;
                    }
                }
                State::Code => {
                    let start = i;
                    while let Some(&b) = bytes.get(i)
                        && CLASS[usize::from(b)] & BLANK != 0
                    {
                        i += 1;
                    }
                    if i > start {
                        self.e_prefix = false;
                    }
                }
                _ => {}
            }
            if let Some(&b) = bytes.get(i) {
                self.step(b);
                i += 1;
            }
        }
    }

    fn step(&mut self, b: u8) {
        if b == 0 {
            if self.state == State::Name {
                self.state = State::Code;
            } else {
                if self.state == State::Word {
                    self.word_done();
                }
                self.state = State::Done;
            }
            return;
        }
        match self.state {
            State::Name | State::Done => {}
            State::Code => self.code(b),
            State::Word => {
                if CLASS[usize::from(b)] & IDENT != 0 {
                    if self.len < WORD {
                        self.word[self.len] = b.to_ascii_lowercase();
                        self.len += 1;
                    } else {
                        self.long = true;
                    }
                } else {
                    self.word_done();
                    self.state = State::Code;
                    self.code(b);
                }
            }
            State::Quote => {
                if b == b'\'' {
                    self.state = State::QuoteEnd;
                }
            }
            State::QuoteEnd => {
                if b == b'\'' {
                    self.state = State::Quote;
                } else {
                    self.state = State::Code;
                    self.code(b);
                }
            }
            State::EQuote => match b {
                b'\\' => self.state = State::EQuoteEscape,
                b'\'' => self.state = State::EQuoteEnd,
                _ => {}
            },
            State::EQuoteEscape => self.state = State::EQuote,
            State::EQuoteEnd => {
                if b == b'\'' {
                    self.state = State::EQuote;
                } else {
                    self.state = State::Code;
                    self.code(b);
                }
            }
            State::Ident => {
                if b == b'"' {
                    self.state = State::IdentEnd;
                }
            }
            State::IdentEnd => {
                if b == b'"' {
                    self.state = State::Ident;
                } else {
                    self.state = State::Code;
                    self.code(b);
                }
            }
            State::DollarOpen => {
                if b == b'$' {
                    self.state = State::DollarBody;
                } else if (b.is_ascii_alphabetic() || b == b'_' || b >= 0x80)
                    || (self.tag_len > 0 && b.is_ascii_digit())
                {
                    if self.tag_len < TAG {
                        self.tag[self.tag_len] = b;
                        self.tag_len += 1;
                    } else {
                        // A tag this long is not followed: say dirty rather than guess.
                        self.dirt |= Dirt::SETTING;
                        self.state = State::Done;
                    }
                } else {
                    // `$1`, or an operator: code after all.
                    self.state = State::Code;
                    self.code(b);
                }
            }
            State::DollarBody => {
                if b == b'$' {
                    self.state = State::DollarClose;
                    self.matched = 0;
                }
            }
            State::DollarClose => {
                if self.matched == self.tag_len && b == b'$' {
                    self.state = State::Code;
                } else if self.matched < self.tag_len && self.tag[self.matched] == b {
                    self.matched += 1;
                } else if b == b'$' {
                    self.matched = 0;
                } else {
                    self.state = State::DollarBody;
                }
            }
            State::Dash => {
                if b == b'-' {
                    self.state = State::LineComment;
                } else {
                    self.state = State::Code;
                    self.code(b);
                }
            }
            State::LineComment => {
                if b == b'\n' {
                    self.state = State::Code;
                }
            }
            State::Slash => {
                if b == b'*' {
                    self.state = State::Block;
                    self.depth = 1;
                } else {
                    self.state = State::Code;
                    self.code(b);
                }
            }
            State::Block => match b {
                b'*' => self.state = State::BlockStar,
                b'/' => self.state = State::BlockSlash,
                _ => {}
            },
            State::BlockStar => match b {
                b'/' => {
                    self.depth -= 1;
                    self.state = if self.depth == 0 {
                        State::Code
                    } else {
                        State::Block
                    };
                }
                b'*' => {}
                _ => self.state = State::Block,
            },
            State::BlockSlash => {
                if b == b'*' {
                    self.depth += 1;
                    self.state = State::Block;
                } else {
                    self.state = State::Block;
                    self.step(b);
                }
            }
        }
    }

    /// A byte of code (outside quotes and comments).
    fn code(&mut self, b: u8) {
        let e_prefix = std::mem::take(&mut self.e_prefix);
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'_' | 0x80..=0xff => {
                self.word[0] = b.to_ascii_lowercase();
                self.len = 1;
                self.long = false;
                self.state = State::Word;
            }
            b'\'' => {
                self.state = if e_prefix {
                    State::EQuote
                } else {
                    State::Quote
                };
            }
            b'"' => self.state = State::Ident,
            b'$' => {
                self.tag_len = 0;
                self.state = State::DollarOpen;
            }
            b'-' => self.state = State::Dash,
            b'/' => self.state = State::Slash,
            b';' => {
                self.nth = 0;
                self.first = Kw::Other;
                self.prev = Kw::Other;
                self.object = false;
            }
            _ => {}
        }
    }

    /// A word of code has ended.
    fn word_done(&mut self) {
        let word = &self.word[..self.len];
        self.e_prefix = word == b"e";
        let kw = if self.long { Kw::Other } else { keyword(word) };
        let mut dirt = 0;
        match (self.nth, self.first, kw) {
            (0, _, Kw::Reset) => dirt |= Dirt::SETTING,
            (0, _, Kw::Listen) => dirt |= Dirt::LISTEN,
            (0, _, Kw::Load) => dirt |= Dirt::LASTING,
            // `DISCARD ALL` and `DEALLOCATE [PREPARE] ALL` drop the statements tokio-postgres
            // prepared for itself; `DISCARD TEMP` or `DEALLOCATE name` do not.
            (1, Kw::Discard | Kw::Deallocate, _) | (2, Kw::Deallocate, _) if word == b"all" => {
                dirt |= Dirt::LASTING;
            }
            (1, Kw::Set, Kw::Local | Kw::Transaction | Kw::Constraints) => {}
            (1, Kw::Set, _) => dirt |= Dirt::SETTING,
            (1, Kw::Prepare, Kw::Transaction) => {}
            (1, Kw::Prepare, _) => dirt |= Dirt::PREPARED,
            (1..=3, Kw::Create, Kw::Temp) if !self.object => dirt |= Dirt::TEMP,
            (_, Kw::Declare, Kw::Hold) => dirt |= Dirt::HOLD,
            _ => {}
        }
        match kw {
            Kw::Temp if self.prev == Kw::Into => dirt |= Dirt::TEMP,
            Kw::PgTemp => dirt |= Dirt::TEMP,
            Kw::SetConfig => dirt |= Dirt::SETTING,
            Kw::Advisory => dirt |= Dirt::ADVISORY,
            _ => {}
        }
        if self.nth == 0 {
            self.first = kw;
        }
        self.object |= kw == Kw::Object;
        self.dirt |= dirt;
        self.prev = kw;
        self.nth = self.nth.saturating_add(1);
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
}

impl Scan {
    /// A new message: `parse` for a Parse (statement name, then the query), else a Query.
    pub(crate) fn begin(&mut self, parse: bool) {
        self.lex = Lexer::new(parse);
        self.text.clear();
        self.repeat = (!self.last.is_empty()).then_some(0);
    }

    /// What the text scanned since [`begin`](Scan::begin) may have left on the session.
    pub(crate) fn dirt(&self) -> Dirt {
        Dirt(self.lex.dirt)
    }

    /// Scans the next piece of the message's payload.
    pub(crate) fn feed(&mut self, mut bytes: &[u8]) {
        // A Parse's statement name comes first: never compared, never remembered.
        while self.lex.state == State::Name
            && let Some((&b, rest)) = bytes.split_first()
        {
            self.lex.step(b);
            bytes = rest;
        }
        if let Some(at) = self.repeat {
            let rest = &self.last[at..];
            let same = rest.iter().zip(bytes).take_while(|(a, b)| a == b).count();
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
    scan.begin(false);
    scan.feed(sql.as_bytes());
    scan.feed(&[0]);
    scan.dirt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_like_the_last_clean_one_is_compared_and_any_change_lexed() {
        let mut s = Scan::default();
        let run = |s: &mut Scan, text: &[u8], step: usize| {
            s.begin(false);
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
            s.begin(true);
            s.feed(text);
            s.dirt()
        };
        assert!(parse(&mut s, b"s1\0SELECT 2\0\0\0").is_clean());
        assert!(parse(&mut s, b"s2\0SELECT 2\0\0\0").is_clean());
        assert!(parse(&mut s, b"s3\0SET x = 1\0\0\0").has(Dirt::SETTING));
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
            "CREATE TABLE t (temp int)",
            "DECLARE c CURSOR FOR SELECT 1",
            "SELECT 'LISTEN x' -- ; LISTEN y",
            "SELECT $1::int + 1",
            "SELECT a$b FROM t",
            "DISCARD TEMP",
            "DISCARD PLANS",
            "DEALLOCATE p",
            "DEALLOCATE PREPARE p",
            "ALTER TABLE t ALTER COLUMN c SET DEFAULT 1",
            "SELECT $tag$ LISTEN x; SET ROLE y $tag$",
            "SELECT E'it\\'s; LISTEN x'",
            "SELECT 1 /* LISTEN x; */",
        ];
        for sql in clean {
            assert!(scan(sql).is_clean(), "{sql}: {:?}", scan(sql));
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
                s.begin(false);
                for piece in sql.as_bytes().chunks(step) {
                    s.feed(piece);
                }
                s.feed(&[0]);
                assert_eq!(s.dirt(), whole, "{sql} in pieces of {step}");
            }
        }
    }

    #[test]
    fn a_parse_message_skips_its_statement_name() {
        let mut s = Scan::default();
        s.begin(true);
        s.feed(b"listen\0SELECT 1\0\0\0");
        assert!(s.dirt().is_clean());
        s.begin(true);
        s.feed(b"s1\0SET ROLE x\0\0\0");
        assert!(s.dirt().has(Dirt::SETTING));
    }
}
