//! What the commands sent through a connection left on it (docs/design.md, "Recycling on
//! return").
//!
//! A command is seen when it is *issued*, but redis-rs sends it only if its future is still
//! alive when the connection's driver takes it: one dropped before that (a deadline already
//! spent, a `select!`) never reaches the server. So a command whose answer was not read may
//! or may not have been sent, and the tracking fails safe: what a command leaves (`MULTI`,
//! `WATCH`, `SELECT n`, `CLIENT SETNAME`, the modes no command undoes) counts from the moment
//! it is issued, and what it cleans (`EXEC`, `DISCARD`, `UNWATCH`, a `SELECT` back) only once
//! its answer has been read. The restore on return may then send a cleaning command the
//! server did not need (`DISCARD` with no `MULTI`): its error is ignored.
//!
//! # Invariants
//!
//! 1. `blocking ≤ outstanding`: a blocking request is counted in both until answered.
//! 2. `db` is the database the server is known to be in only while `!db_pending`.

/// What the commands sent through a connection left on it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Track {
    /// Requests issued whose answer has not been read (their future was dropped).
    pub(crate) outstanding: u32,
    /// Of those, requests that may block on the server (`BLPOP`, `XREAD … BLOCK`, `WAIT`).
    pub(crate) blocking: u32,
    /// Maybe inside `MULTI`.
    pub(crate) multi: bool,
    /// Keys may be watched.
    pub(crate) watching: bool,
    /// The database selected now (invariant 2), and the one the connection started with.
    pub(crate) db: i64,
    pub(crate) base_db: i64,
    /// A `SELECT` was issued whose answer has not been read: the database is not known.
    pub(crate) db_pending: bool,
    /// `CLIENT SETNAME` was sent.
    pub(crate) renamed: bool,
    /// A mode no command undoes was entered: the connection is replaced.
    pub(crate) lasting: bool,
}

/// The first word of a command, and its arguments after it.
fn words(cmd: &redis::Cmd) -> Option<(&[u8], impl Iterator<Item = &[u8]>)> {
    let mut args = cmd.args_iter().filter_map(|arg| match arg {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let name = args.next()?;
    Some((name, args))
}

/// Whether `cmd` may block on the server (`BLPOP`, `XREAD … BLOCK`, `WAIT`, …).
fn blocks(cmd: &redis::Cmd) -> bool {
    let Some((name, mut args)) = words(cmd) else {
        return false;
    };
    let is = |word: &str| name.eq_ignore_ascii_case(word.as_bytes());
    [
        "BLPOP",
        "BRPOP",
        "BRPOPLPUSH",
        "BLMOVE",
        "BLMPOP",
        "BZPOPMIN",
        "BZPOPMAX",
        "BZMPOP",
        "WAIT",
        "WAITAOF",
    ]
    .iter()
    .any(|w| is(w))
        || ((is("XREAD") || is("XREADGROUP")) && args.any(|arg| arg.eq_ignore_ascii_case(b"BLOCK")))
}

impl Track {
    pub(crate) fn clean(&self) -> bool {
        self.outstanding == 0
            && !self.multi
            && !self.watching
            && self.db == self.base_db
            && !self.db_pending
            && !self.renamed
            && !self.lasting
    }

    /// Whether the restore must select the starting database again.
    pub(crate) fn db_moved(&self) -> bool {
        self.db != self.base_db || self.db_pending
    }

    /// Notes a command on its way: what it may leave counts from now. `true` if it may block
    /// on the server.
    pub(crate) fn issue(&mut self, cmd: &redis::Cmd) -> bool {
        let Some((name, mut args)) = words(cmd) else {
            self.outstanding += 1;
            return false;
        };
        let is = |word: &str| name.eq_ignore_ascii_case(word.as_bytes());
        let mut blocking = false;
        if is("MULTI") {
            self.multi = true;
        } else if is("WATCH") {
            self.watching = true;
        } else if is("SELECT") {
            self.db_pending = true;
        } else if is("CLIENT") {
            let sub = args.next().unwrap_or_default();
            let sub_is = |word: &str| sub.eq_ignore_ascii_case(word.as_bytes());
            if sub_is("SETNAME") {
                self.renamed = true;
            } else if sub_is("REPLY")
                || sub_is("TRACKING")
                || sub_is("NO-EVICT")
                || sub_is("NO-TOUCH")
            {
                self.lasting = true;
            }
        } else if [
            "SUBSCRIBE",
            "PSUBSCRIBE",
            "SSUBSCRIBE",
            "MONITOR",
            "HELLO",
            "AUTH",
            "RESET",
        ]
        .iter()
        .any(|w| is(w))
        {
            self.lasting = true;
        } else if blocks(cmd) {
            blocking = true;
            self.blocking += 1;
        }
        self.outstanding += 1;
        debug_assert!(self.blocking <= self.outstanding, "invariant 1");
        blocking
    }

    /// The answer to `cmd` (issued with [`Track::issue`]) came back: `read` if it was read
    /// (an answer, or the server's error), not if the request failed on its way. What it
    /// cleans counts only then.
    pub(crate) fn answered(&mut self, cmd: &redis::Cmd, read: bool) {
        self.outstanding -= 1;
        if blocks(cmd) {
            self.blocking -= 1;
        }
        debug_assert!(self.blocking <= self.outstanding, "invariant 1");
        if !read {
            return;
        }
        let Some((name, mut args)) = words(cmd) else {
            return;
        };
        let is = |word: &str| name.eq_ignore_ascii_case(word.as_bytes());
        if is("EXEC") || is("DISCARD") {
            self.multi = false;
            self.watching = false;
        } else if is("UNWATCH") {
            self.watching = false;
        } else if is("SELECT") {
            match args
                .next()
                .and_then(|db| std::str::from_utf8(db).ok()?.parse().ok())
            {
                // Inside a `MULTI` the answer is `QUEUED`: the database changes only if the
                // transaction is executed, so it is not known (the restore selects the
                // starting one).
                Some(_) if self.multi => self.db_pending = true,
                // Commands go out in the order they are issued, and one issued later whose
                // answer was not read sets `db_pending` again when issued.
                Some(db) => {
                    self.db = db;
                    self.db_pending = false;
                }
                None => self.lasting = true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(words: &[&str]) -> redis::Cmd {
        let mut c = redis::cmd(words[0]);
        for w in &words[1..] {
            c.arg(*w);
        }
        c
    }

    /// Each cleaning command cleans only once its answer is read; each one that leaves
    /// something leaves it from the moment it is issued.
    #[test]
    fn what_a_command_cleans_counts_only_once_answered() {
        for (leave, clean, dirty) in [
            (&["MULTI"][..], &["EXEC"][..], "multi"),
            (&["MULTI"][..], &["DISCARD"][..], "multi"),
            (&["WATCH", "k"][..], &["UNWATCH"][..], "watching"),
            (&["SELECT", "3"][..], &["SELECT", "0"][..], "db"),
        ] {
            let mut t = Track::default();
            let (leave, clean) = (cmd(leave), cmd(clean));
            t.issue(&leave);
            t.answered(&leave, true);
            assert!(!t.clean(), "{dirty}: left");
            // Issued, never sent (dropped): nothing cleaned, and the answer never comes.
            t.issue(&clean);
            assert!(
                !t.clean(),
                "{dirty}: a clean not yet answered cleans nothing"
            );
            // Issued again and answered: clean.
            t.outstanding = 0;
            t.issue(&clean);
            t.answered(&clean, true);
            assert!(t.clean(), "{dirty}: cleaned once answered: {t:?}");
            // A request that failed on its way cleans nothing either.
            t.issue(&leave);
            t.answered(&leave, true);
            t.issue(&clean);
            t.answered(&clean, false);
            assert!(!t.clean(), "{dirty}: a failed clean");
        }
        // A SELECT issued and not answered leaves the database unknown.
        let mut t = Track::default();
        t.issue(&cmd(&["SELECT", "0"]));
        assert!(t.db_moved());
    }

    /// Found by the hand-over fuzzer: `SELECT 3`, `MULTI`, `SELECT 0` (answered `QUEUED`),
    /// then the return's `DISCARD` leaves the server in database 3; the queued `SELECT`
    /// must not count as done.
    #[test]
    fn a_select_queued_in_a_transaction_leaves_the_database_unknown() {
        let mut t = Track::default();
        for words in [&["SELECT", "3"][..], &["MULTI"][..], &["SELECT", "0"][..]] {
            let c = cmd(words);
            t.issue(&c);
            t.answered(&c, true);
        }
        assert!(
            t.db_moved(),
            "the restore must select the starting database"
        );
    }
}
