//! The names of custom settings (`app.tenant`) a statement sets, as the scan reads them
//! (docs/design.md, "Recycling on return").
//!
//! A custom setting set once stays defined on the session: after `RESET ALL` it reads `''`
//! where a new connection reads `NULL` (`current_setting('app.tenant', true)`), and `''::int`
//! then fails the next request. So the names are read where they can be — the setting of
//! `SET [SESSION|LOCAL] a.b`, `RESET a.b`, and a `set_config('a.b', …)` whose name is a plain
//! literal followed by its `,` — and a custom name the pool was not told of
//! (`PgManager::custom_settings`) has the connection replaced. A `set_config` whose name is
//! not such a literal (a parameter, an expression, `'a.' || 'b'`, a literal read through a
//! backslash escape), and a name spelled with Unicode escapes in a `SET`, cannot be read:
//! they count as an unknown custom setting (replaced).
//!
//! # Invariants
//!
//! 1. `building` is `Some` only while a `SET`'s setting name is being read.
//! 2. `literal` holds at most `LONGEST` bytes.

/// The longest name read (the server keeps 63 bytes of a name).
const LONGEST: usize = 64;

/// Where a `set_config` call is.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Call {
    #[default]
    None,
    /// `set_config` read; its `(` next.
    Name,
    /// `set_config(`; its first argument next.
    Open,
    /// Inside the first argument's `'…'`.
    Literal,
    /// The first argument's `'…'` ended: the name is read only if a `,` comes next
    /// (`'app.' || 'tenant'`, or a string continued on the next line, names another).
    Closed,
}

/// The custom setting names one message's statements set.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Customs {
    /// The names read (lower case, with their dot).
    pub(super) names: Vec<Vec<u8>>,
    /// A custom setting may have been set whose name could not be read.
    pub(super) unknown: bool,
    building: Option<Vec<u8>>,
    call: Call,
    literal: Vec<u8>,
    /// A quoted identifier's bytes go into `building`.
    ident: bool,
}

impl Customs {
    /// Back to nothing read, keeping what the vectors hold allocated. Taken apart with no
    /// `..`, as [`Lexer::reset`](super::lexer::Lexer::reset) does: a field added later does
    /// not compile until it is cleared here.
    pub(super) fn clear(&mut self) {
        let Customs {
            names,
            unknown,
            building,
            call,
            literal,
            ident,
        } = self;
        names.clear();
        *unknown = false;
        *building = None;
        *call = Call::None;
        literal.clear();
        *ident = false;
    }

    /// A `SET`'s (or `RESET`'s) setting name begins with `word`.
    pub(super) fn setting(&mut self, word: &[u8]) {
        self.end_name();
        self.building = Some(word.to_vec());
        debug_assert!(self.building.is_some(), "invariant 1");
    }

    /// A word after a `.`: the name being read goes on.
    pub(super) fn word(&mut self, word: &[u8]) -> bool {
        match &mut self.building {
            Some(name) if name.last() == Some(&b'.') => {
                name.extend_from_slice(word);
                true
            }
            _ => {
                self.end_name();
                false
            }
        }
    }

    /// `set_config` was read.
    pub(super) fn set_config(&mut self) {
        self.call = Call::Name;
    }

    /// A byte of code that is neither blank nor part of a word: `.` goes on with a name,
    /// `(` and `'` follow a `set_config`, anything else ends what was being read.
    pub(super) fn code(&mut self, b: u8) {
        match (b, self.call) {
            (b'(', Call::Name) => self.call = Call::Open,
            (b'\'', Call::Open) => {
                self.literal.clear();
                self.call = Call::Literal;
            }
            (b',', Call::Closed) => {
                self.call = Call::None;
                let name = std::mem::take(&mut self.literal);
                if name.contains(&b'.') {
                    self.names.push(name);
                }
            }
            (_, Call::Name | Call::Open | Call::Closed) => {
                // Not a plain literal: `$1`, an expression, `E'…'`.
                self.unknown = true;
                self.call = Call::None;
            }
            _ => {}
        }
        match (&mut self.building, b) {
            (Some(name), b'.') => name.push(b'.'),
            (Some(_), _) => self.end_name(),
            _ => {}
        }
    }

    /// A word began while a `set_config`'s first argument was awaited or read: not a
    /// literal.
    pub(super) fn word_start(&mut self) {
        if matches!(self.call, Call::Name | Call::Open | Call::Closed) {
            self.unknown = true;
            self.call = Call::None;
        }
    }

    /// A quoted identifier begins; `at_name`: where a `SET`'s setting name begins. Its
    /// bytes are part of the name when it begins one or follows its `.`.
    pub(super) fn ident_begin(&mut self, at_name: bool) {
        self.word_start();
        match &self.building {
            Some(name) if name.last() == Some(&b'.') => self.ident = true,
            _ if at_name => {
                self.setting(b"");
                self.ident = true;
            }
            _ => self.end_name(),
        }
    }

    /// A byte of a quoted identifier.
    pub(super) fn ident_byte(&mut self, b: u8) {
        if self.ident
            && let Some(name) = &mut self.building
            && name.len() < LONGEST
        {
            name.push(b.to_ascii_lowercase());
        }
    }

    /// The quoted identifier ended.
    pub(super) fn ident_end(&mut self) {
        self.ident = false;
    }

    /// A byte inside a `'…'` string.
    pub(super) fn string_byte(&mut self, b: u8) {
        if self.call == Call::Literal && self.literal.len() < LONGEST {
            self.literal.push(b.to_ascii_lowercase());
        }
        debug_assert!(self.literal.len() <= LONGEST, "invariant 2");
    }

    /// A backslash escape inside a `'…'` string: a `set_config` name read through it could
    /// be any name (`'app\x2etenant'` is `app.tenant`).
    pub(super) fn string_escape(&mut self) {
        if self.call == Call::Literal {
            self.unknown = true;
            self.call = Call::None;
        }
    }

    /// A `'…'` string ended.
    pub(super) fn string_end(&mut self) {
        if self.call == Call::Literal {
            self.call = Call::Closed;
        }
    }

    /// The statement ended.
    pub(super) fn end(&mut self) {
        self.end_name();
        if self.call != Call::None {
            self.unknown = true;
            self.call = Call::None;
        }
    }

    fn end_name(&mut self) {
        if let Some(name) = self.building.take()
            && name.contains(&b'.')
        {
            self.names.push(name);
        }
    }
}
