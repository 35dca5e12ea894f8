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
    /// A custom setting (`app.tenant`) the pool was not told of, or one whose name could
    /// not be read: no reset undefines it (`session/custom.rs`). The connection is replaced.
    pub(crate) const CUSTOM: u8 = 128;
    /// Whatever a statement the scan cannot account for may have left: everything a reset
    /// restores.
    pub(crate) const ALL: u8 =
        Self::SETTING | Self::PREPARED | Self::LISTEN | Self::TEMP | Self::HOLD | Self::ADVISORY;

    pub(crate) fn is_clean(self) -> bool {
        self.0 == 0
    }

    pub(crate) fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }
}

mod custom;
mod words;

use custom::Customs;

/// Byte classes, looked up rather than computed on the hot loops. `BLANK`: white space and
/// digits, which neither end a call's name nor begin a word.
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
        if c.is_ascii_digit() || matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
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
    Explain,
    Select,
}

fn keyword(word: &[u8]) -> Kw {
    // Most words are no keyword: a length and a first letter rule them out before any
    // comparison.
    if !(3..=27).contains(&word.len())
        || !matches!(
            word[0],
            b's' | b'r' | b'l' | b't' | b'c' | b'p' | b'i' | b'd' | b'h' | b'v' | b'e'
        )
    {
        return Kw::Other;
    }
    match word {
        b"set" => Kw::Set,
        b"select" => Kw::Select,
        b"explain" => Kw::Explain,
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
    /// A name (a word, or a quoted identifier) has just ended: a `(` after it (blanks
    /// between) is a call.
    pending: Pending,
    /// The name before the current one named an object (`INTO t`): a `(` after the current
    /// name opens a list. `names`: the current one does.
    before_names: bool,
    names: bool,
    /// A `.` came right after a name: the next name is qualified (`s.f`), and keeps what the
    /// name before the qualifier said.
    qualified: bool,
    /// An `INTO`, then maybe `LOCAL`, `GLOBAL` or `UNLOGGED`: a `TEMP` now makes a table.
    into: bool,
    /// A `'…'` string takes backslash escapes (`standard_conforming_strings = off`).
    backslash: bool,
    /// The statement's `SET` named a scope (`LOCAL`, `SESSION`) before its setting.
    scoped: bool,
    /// The custom settings the statements set.
    customs: Customs,
    /// Functions called that are not known to leave nothing (at most `CALLS`; past that,
    /// `Dirt::ALL`).
    calls: Vec<Vec<u8>>,
    dirt: u8,
}

/// The most calls of unknown functions a message's text is followed for.
const CALLS: usize = 16;

/// What a `(` would call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Pending {
    #[default]
    Nothing,
    /// The word in `word`.
    Word,
    /// A quoted identifier.
    Quoted,
}

impl Lexer {
    fn new(parse: bool, backslash: bool) -> Self {
        Lexer {
            state: if parse { State::Name } else { State::Code },
            backslash,
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
                match self.state {
                    State::Word => self.word_done(),
                    State::IdentEnd => self.quoted_done(),
                    State::QuoteEnd | State::EQuoteEnd => self.customs.string_end(),
                    _ => {}
                }
                self.customs.end();
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
                } else {
                    self.customs.string_byte(b);
                }
            }
            State::QuoteEnd => {
                if b == b'\'' {
                    self.state = State::Quote;
                } else {
                    self.customs.string_end();
                    self.state = State::Code;
                    self.code(b);
                }
            }
            State::EQuote => match b {
                b'\\' => self.state = State::EQuoteEscape,
                b'\'' => self.state = State::EQuoteEnd,
                _ => self.customs.string_byte(b),
            },
            State::EQuoteEscape => self.state = State::EQuote,
            State::EQuoteEnd => {
                if b == b'\'' {
                    self.state = State::EQuote;
                } else {
                    self.customs.string_end();
                    self.state = State::Code;
                    self.code(b);
                }
            }
            State::Ident => {
                if b == b'"' {
                    self.state = State::IdentEnd;
                } else {
                    self.customs.ident_byte(b);
                }
            }
            State::IdentEnd => {
                if b == b'"' {
                    self.state = State::Ident;
                } else {
                    self.customs.ident_end();
                    self.quoted_done();
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
        if CLASS[usize::from(b)] & BLANK != 0 {
            return; // between a name and its `(`, or anywhere
        }
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'_' | 0x80..=0xff => self.customs.word_start(),
            b'"' => self.customs.ident_begin(self.at_setting_name()),
            b';' => self.customs.end(),
            _ => self.customs.code(b),
        }
        let pending = std::mem::take(&mut self.pending);
        match b {
            b'(' if pending != Pending::Nothing => self.call(pending),
            b'.' if pending != Pending::Nothing => self.qualified = true,
            // A name begins: it is the one a `.` qualified, if any.
            b'"' | b'a'..=b'z' | b'A'..=b'Z' | b'_' | 0x80..=0xff => {}
            _ => self.qualified = false,
        }
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'_' | 0x80..=0xff => {
                self.word[0] = b.to_ascii_lowercase();
                self.len = 1;
                self.long = false;
                self.state = State::Word;
            }
            b'\'' => {
                self.state = if e_prefix || self.backslash {
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
            b';' => self.next_statement(),
            _ => {}
        }
    }

    /// Whether the next name is a `SET`'s (or `RESET`'s) setting.
    fn at_setting_name(&self) -> bool {
        match self.first {
            Kw::Set => self.nth == 1 || (self.nth == 2 && self.scoped),
            Kw::Reset => self.nth == 1,
            _ => false,
        }
    }

    /// A `;`: the next statement begins.
    fn next_statement(&mut self) {
        self.scoped = false;
        self.nth = 0;
        self.first = Kw::Other;
        self.prev = Kw::Other;
        self.object = false;
        self.before_names = false;
        self.names = false;
        self.into = false;
    }

    /// A name ended (a word, or a quoted identifier when `word` is false): what it says of
    /// the `(` after the next name.
    fn name_done(&mut self, word: bool) {
        if std::mem::take(&mut self.qualified) {
            // `s.t`: `t` stands where `s` stood.
            self.names = false;
            return;
        }
        self.before_names = self.names;
        self.names = word
            && !self.long
            && words::names_object(&self.word[..self.len], self.first == Kw::Create);
    }

    /// A `(` right after a name: a call, unless the name is a keyword, a type, the name of an
    /// object being defined or referenced, or a function known to leave nothing.
    fn call(&mut self, pending: Pending) {
        if self.before_names {
            return;
        }
        let known = match pending {
            Pending::Word if !self.long => {
                let word = &self.word[..self.len];
                words::not_a_call(word) || words::neutral_call(word)
            }
            _ => false,
        };
        if known {
            return;
        }
        match pending {
            // A name the application may have declared neutral
            // (`PgManager::neutral_functions`): the writer decides (`Scan::calls`).
            Pending::Word if !self.long && self.calls.len() < CALLS => {
                self.calls.push(self.word[..self.len].to_vec());
            }
            _ => self.dirt |= Dirt::ALL,
        }
    }

    /// A word of code has ended.
    fn word_done(&mut self) {
        let kw = if self.long {
            Kw::Other
        } else {
            keyword(&self.word[..self.len])
        };
        if self.first == Kw::Explain && matches!(kw, Kw::Create | Kw::Declare) {
            // `EXPLAIN ANALYZE CREATE …` runs the statement it explains.
            self.next_statement();
        }
        let word = &self.word[..self.len];
        self.e_prefix = word == b"e";
        let mut dirt = 0;
        if self.nth == 0
            && (self.long || words::first(word) == words::First::Unknown)
            && !self.qualified
        {
            dirt |= Dirt::ALL;
        }
        if word == b"pg_settings" && !matches!(self.first, Kw::Select | Kw::Explain) {
            // `UPDATE pg_settings SET setting = …` is a `set_config`.
            dirt |= Dirt::SETTING;
        }
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
            Kw::Temp if self.into => dirt |= Dirt::TEMP,
            Kw::PgTemp => dirt |= Dirt::TEMP,
            Kw::SetConfig => dirt |= Dirt::SETTING,
            Kw::Advisory => dirt |= Dirt::ADVISORY,
            _ => {}
        }
        if self.nth == 0 {
            self.first = kw;
        }
        if !self.customs.word(&self.word[..self.len]) {
            if self.first == Kw::Set
                && self.nth == 1
                && (kw == Kw::Local || &self.word[..self.len] == b"session")
            {
                self.scoped = true;
            } else if self.nth > 0 && self.at_setting_name() {
                self.customs.setting(&self.word[..self.len]);
            }
        }
        if kw == Kw::SetConfig {
            self.customs.set_config();
        }
        self.into = kw == Kw::Into
            || (self.into && matches!(&self.word[..self.len], b"local" | b"global" | b"unlogged"));
        self.object |= kw == Kw::Object;
        self.dirt |= dirt;
        self.prev = kw;
        self.nth = self.nth.saturating_add(1);
        self.name_done(true);
        self.pending = Pending::Word;
    }

    /// A quoted identifier ended: a word no keyword matches (`SET "search_path" = …` is a
    /// `SET`; a statement cannot begin with one).
    fn quoted_done(&mut self) {
        match (self.nth, self.first) {
            (0, _) => self.dirt |= Dirt::ALL,
            (1, Kw::Set) => self.dirt |= Dirt::SETTING,
            _ => {}
        }
        self.prev = Kw::Other;
        self.into = false;
        self.nth = self.nth.saturating_add(1);
        self.name_done(false);
        self.pending = Pending::Quoted;
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
}

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
        self.lex = Lexer::new(parse, backslash);
        self.text.clear();
        self.repeat = (!self.last.is_empty()).then_some(0);
    }

    /// What the text scanned since [`begin`](Scan::begin) may have left on the session.
    pub(crate) fn dirt(&self) -> Dirt {
        Dirt(self.lex.dirt)
    }

    /// The functions the text calls that are not known to leave nothing, lower case, each
    /// by its name without its schema: [`Dirt::ALL`] unless the application declared every
    /// one neutral.
    pub(crate) fn calls(&self) -> &[Vec<u8>] {
        &self.lex.calls
    }

    /// The custom settings (`a.b`) the text sets, lower case, and whether it may set one
    /// whose name could not be read.
    pub(crate) fn customs(&self) -> (&[Vec<u8>], bool) {
        (&self.lex.customs.names, self.lex.customs.unknown)
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
    let calls = if scan.calls().is_empty() {
        0
    } else {
        Dirt::ALL
    };
    Dirt(scan.dirt().0 | calls)
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
                s.begin(false, false);
                for piece in sql.as_bytes().chunks(step) {
                    s.feed(piece);
                }
                s.feed(&[0]);
                let calls = if s.calls().is_empty() { 0 } else { Dirt::ALL };
                assert_eq!(Dirt(s.dirt().0 | calls), whole, "{sql} in pieces of {step}");
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
}
