//! How the lexer starts each message's text: reset whole after a text it lexed, or only
//! restarted after one the scan compared and never lexed (the parent module's invariant 3).

use super::{Lexer, Pending, Prefix, Qualifier, State, TAG, WORD};
use crate::session::words::Kw;

impl Lexer {
    /// What [`Lexer::reset`] must read as.
    #[cfg(test)]
    pub(in crate::session) fn new(parse: bool, backslash: bool) -> Self {
        Lexer {
            state: if parse { State::Name } else { State::Code },
            backslash,
            ..Lexer::default()
        }
    }

    /// As [`Lexer::new`], in place: what [`begin`](Lexer::begin) does after a text that was
    /// lexed. A lexer built anew and the old one dropped cost each query a few dozen
    /// instructions more (and a reset by struct update over the default a hundred more).
    /// The whole struct is taken apart with no `..`, so a field added later does not compile
    /// until it is reset here: no statement's state can reach the next scan by being
    /// forgotten.
    pub(super) fn reset(&mut self, parse: bool, backslash: bool) {
        let Lexer {
            state,
            word,
            len,
            long,
            prefix,
            tag,
            tag_len,
            matched,
            depth,
            nth,
            first,
            prev,
            object,
            pending,
            before_names,
            names,
            qualifier,
            foreign,
            into,
            unicode,
            backslash: backslash_strings,
            scoped,
            customs,
            calls,
            dirt,
            read,
        } = self;
        *state = if parse { State::Name } else { State::Code };
        *word = [0; WORD];
        *len = 0;
        *long = false;
        *prefix = Prefix::None;
        *tag = [0; TAG];
        *tag_len = 0;
        *matched = 0;
        *depth = 0;
        *nth = 0;
        *first = Kw::default();
        *prev = Kw::default();
        *object = false;
        *pending = Pending::Nothing;
        *before_names = false;
        *names = false;
        *qualifier = Qualifier::None;
        *foreign = false;
        *into = false;
        *unicode = false;
        *backslash_strings = backslash;
        *scoped = false;
        customs.clear();
        calls.clear();
        *dirt = 0;
        *read = false;
    }

    /// A new message's text: [`reset`](Lexer::reset) if the lexer has read since its last
    /// one, else only what the reset sets from its arguments, and the state the scan's
    /// comparison left (the text before was the last clean one again, never lexed). A
    /// statement sent again costs its scan this instead of the whole reset.
    pub(in crate::session) fn begin(&mut self, parse: bool, backslash: bool) {
        if self.read {
            self.reset(parse, backslash);
        } else {
            self.restart(parse, backslash);
        }
    }

    /// [`begin`](Lexer::begin) of a lexer that has read nothing since its last reset.
    fn restart(&mut self, parse: bool, backslash: bool) {
        self.state = if parse { State::Name } else { State::Code };
        self.backslash = backslash;
        debug_assert!(
            *self == {
                let mut reset = Lexer::default();
                reset.reset(parse, backslash);
                reset
            },
            "restarted a lexer that read since its reset"
        );
    }
}
