//! The lexer of one message's SQL text: the byte-by-byte state machine that follows quotes,
//! comments and words (see the parent module's docs). What a word or a call means is judged
//! in `rules.rs`.

use super::Dirt;
use super::custom::Customs;
use super::words::Kw;

mod reset;

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
pub(super) enum State {
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

/// The lexer of one message's SQL text.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Lexer {
    pub(super) state: State,
    pub(super) word: [u8; WORD],
    pub(super) len: usize,
    /// The word overflowed `WORD`: no keyword.
    pub(super) long: bool,
    /// What the word just ended, right before this byte, makes of a quote after it.
    pub(super) prefix: Prefix,
    pub(super) tag: [u8; TAG],
    pub(super) tag_len: usize,
    pub(super) matched: usize,
    pub(super) depth: u32,
    /// Words seen in the current statement, its first, and the one before this.
    pub(super) nth: u32,
    pub(super) first: Kw,
    pub(super) prev: Kw,
    /// The statement has named the kind of its object (`CREATE … TABLE`).
    pub(super) object: bool,
    /// A name (a word, or a quoted identifier) has just ended: a `(` after it (blanks
    /// between) is a call.
    pub(super) pending: Pending,
    /// The name before the current one named an object (`INTO t`): a `(` after the current
    /// name opens a list. `names`: the current one does.
    pub(super) before_names: bool,
    pub(super) names: bool,
    /// A `.` came right after a name: the next name is qualified (`s.f`), and keeps what the
    /// name before the qualifier said.
    pub(super) qualifier: Qualifier,
    /// The name just ended was qualified by a schema other than `pg_catalog`: a built-in's
    /// name there is a function of the application's (`app.now()`).
    pub(super) foreign: bool,
    /// An `INTO`, then maybe `LOCAL`, `GLOBAL` or `UNLOGGED`: a `TEMP` now makes a table.
    pub(super) into: bool,
    /// The quoted identifier being read is spelled with Unicode escapes (`U&"…"`).
    pub(super) unicode: bool,
    /// A `'…'` string takes backslash escapes (`standard_conforming_strings = off`).
    pub(super) backslash: bool,
    /// The statement's `SET` named a scope (`LOCAL`, `SESSION`) before its setting.
    pub(super) scoped: bool,
    /// The custom settings the statements set.
    pub(super) customs: Customs,
    /// Functions called that are not known to leave nothing (at most `CALLS`; past that,
    /// `Dirt::ALL`).
    pub(super) calls: Vec<Vec<u8>>,
    pub(super) dirt: super::Bits,
    /// [`feed`](Lexer::feed) has run since the last [`reset`](Lexer::reset): only then does
    /// the next [`begin`](Lexer::begin) reset the whole lexer.
    read: bool,
}

/// The most calls of unknown functions a message's text is followed for.
pub(super) const CALLS: usize = 16;

/// A quote's prefix: the word right before it, with nothing between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Prefix {
    #[default]
    None,
    /// `E`: a `'…'` after it takes backslash escapes.
    E,
    /// `U`: with a `&` next, a quote after that is spelled with Unicode escapes.
    U,
    /// `U&`: a `"…"` after it is a name the scan cannot read (`U&"pg\005ftemp"`).
    UAmp,
}

/// What qualified the name being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Qualifier {
    #[default]
    None,
    /// `pg_catalog.`: a built-in's name is the built-in.
    Catalog,
    /// Any other name (`app.`, `t.`).
    Schema,
}

/// What a `(` would call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Pending {
    #[default]
    Nothing,
    /// The word in `word`.
    Word,
    /// A quoted identifier.
    Quoted,
}

impl Lexer {
    /// Lexes the next piece of the message's payload.
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        self.read = true;
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
                        self.prefix = Prefix::None;
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

    pub(super) fn step(&mut self, b: u8) {
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
                    self.customs.string_byte(b);
                    self.state = State::Quote;
                } else {
                    self.customs.string_end();
                    self.state = State::Code;
                    self.code(b);
                }
            }
            State::EQuote => match b {
                b'\\' => {
                    self.customs.string_escape();
                    self.state = State::EQuoteEscape;
                }
                b'\'' => self.state = State::EQuoteEnd,
                _ => self.customs.string_byte(b),
            },
            State::EQuoteEscape => self.state = State::EQuote,
            State::EQuoteEnd => {
                if b == b'\'' {
                    self.customs.string_byte(b);
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
                    self.ident_byte(b);
                }
            }
            State::IdentEnd => {
                if b == b'"' {
                    self.ident_byte(b);
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

    /// A byte of a quoted identifier (a `"` of a doubled one too): kept in `word` as it is,
    /// for [`quoted_done`](Lexer::quoted_done), and given to the custom settings' reader.
    fn ident_byte(&mut self, b: u8) {
        if let Some(slot) = self.word.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        } else {
            self.long = true;
        }
        self.customs.ident_byte(b);
    }

    /// A byte of code (outside quotes and comments).
    fn code(&mut self, b: u8) {
        let prefix = std::mem::take(&mut self.prefix);
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
            // The name before it is in `word` (a quoted one as written).
            b'.' if pending != Pending::Nothing => {
                self.qualifier = if !self.long && &self.word[..self.len] == b"pg_catalog" {
                    Qualifier::Catalog
                } else {
                    Qualifier::Schema
                };
            }
            // A name begins: it is the one a `.` qualified, if any.
            b'"' | b'a'..=b'z' | b'A'..=b'Z' | b'_' | 0x80..=0xff => {}
            _ => self.qualifier = Qualifier::None,
        }
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'_' | 0x80..=0xff => {
                self.word[0] = b.to_ascii_lowercase();
                self.len = 1;
                self.long = false;
                self.state = State::Word;
            }
            b'\'' => {
                self.state = if prefix == Prefix::E || self.backslash {
                    State::EQuote
                } else {
                    State::Quote
                };
            }
            b'"' => {
                // Its bytes go into `word`, as they are (quoted, a name keeps its case).
                self.len = 0;
                self.long = false;
                self.unicode = prefix == Prefix::UAmp;
                self.state = State::Ident;
            }
            b'$' => {
                self.tag_len = 0;
                self.state = State::DollarOpen;
            }
            b'-' => self.state = State::Dash,
            b'/' => self.state = State::Slash,
            b';' => self.next_statement(),
            b'&' if prefix == Prefix::U => self.prefix = Prefix::UAmp,
            _ => {}
        }
    }
}
