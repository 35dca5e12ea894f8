//! What the words of a statement say: which kind of statement it is, what it leaves on the
//! session, which `(` is a call (see the parent module's docs; the word lists are in
//! `words.rs`).

use super::Dirt;
use super::lexer::{CALLS, Lexer, Pending, Prefix, Qualifier};
use super::words::{self, Kw, keyword};

impl Lexer {
    /// Whether the next name is a `SET`'s (or `RESET`'s) setting.
    pub(super) fn at_setting_name(&self) -> bool {
        match self.first {
            Kw::Set => self.nth == 1 || (self.nth == 2 && self.scoped),
            Kw::Reset => self.nth == 1,
            _ => false,
        }
    }

    /// A `;`: the next statement begins.
    pub(super) fn next_statement(&mut self) {
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
    pub(super) fn name_done(&mut self, word: bool) {
        let qualifier = std::mem::take(&mut self.qualifier);
        self.foreign = qualifier == Qualifier::Schema;
        if qualifier != Qualifier::None {
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
    /// object being defined or referenced, or a built-in known to leave nothing (unqualified,
    /// or in `pg_catalog`: `app.now()` is the application's).
    pub(super) fn call(&mut self, pending: Pending) {
        if self.before_names {
            return;
        }
        let known = match pending {
            Pending::Word if !self.long && !self.foreign => {
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
    pub(super) fn word_done(&mut self) {
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
        self.prefix = match word {
            b"e" => Prefix::E,
            b"u" => Prefix::U,
            _ => Prefix::None,
        };
        let mut dirt = 0;
        if self.nth == 0 && self.qualifier == Qualifier::None {
            match if self.long {
                words::First::Unknown
            } else {
                words::first(word)
            } {
                words::First::Known => {}
                words::First::Unknown => dirt |= Dirt::ALL,
                words::First::Undoes(kind) => dirt |= kind,
            }
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
            // What undoes part of an `after_connect` hook's set-up (see `First::Undoes`):
            // `DISCARD TEMP`, `DEALLOCATE [PREPARE] name`.
            (1, Kw::Discard, Kw::Temp) => dirt |= Dirt::TEMP,
            (1, Kw::Deallocate, kw) if kw != Kw::Prepare => dirt |= Dirt::PREPARED,
            (2, Kw::Deallocate, _) => dirt |= Dirt::PREPARED,
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
    /// `SET`; a statement cannot begin with one), but the temporary schema's names
    /// (`"pg_temp"`, `"pg_temp_3"`) as written. One spelled with Unicode escapes
    /// (`U&"pg\005ftemp"`) may be any name: the scan cannot read it, so it may have left
    /// anything, in a `SET` a custom setting of any name too.
    pub(super) fn quoted_done(&mut self) {
        match (self.nth, self.first) {
            (0, _) => self.dirt |= Dirt::ALL,
            (1, Kw::Set) => self.dirt |= Dirt::SETTING,
            _ => {}
        }
        if std::mem::take(&mut self.unicode) {
            self.dirt |= Dirt::ALL;
            // In a `SET` or `RESET`, it may name a custom setting.
            self.customs.unknown |= matches!(self.first, Kw::Set | Kw::Reset);
        } else if !self.long && words::temp_schema(&self.word[..self.len]) {
            self.dirt |= Dirt::TEMP;
        }
        self.prev = Kw::Other;
        self.into = false;
        self.nth = self.nth.saturating_add(1);
        self.name_done(false);
        self.pending = Pending::Quoted;
    }
}
