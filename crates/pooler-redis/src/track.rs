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
    /// Requests issued whose answer has not been read (their future was dropped, or ended
    /// without it: a response timeout, a dead link).
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
    /// The server answered `READONLY`: it is a replica now (a failover demoted it), and the
    /// connection is replaced.
    pub(crate) demoted: bool,
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

    /// Notes a command on its way: what it may leave counts from now. What it cleans, and
    /// whether it may block, is handed back, for [`Track::answered`].
    pub(crate) fn issue(&mut self, cmd: &redis::Cmd) -> Issued {
        self.outstanding += 1;
        let mut issued = Issued {
            blocking: false,
            cleans: Cleans::Nothing,
        };
        let Some((name, mut args)) = words(cmd) else {
            return issued;
        };
        let is = |word: &str| name.eq_ignore_ascii_case(word.as_bytes());
        if is("MULTI") {
            self.multi = true;
        } else if is("EXEC") || is("DISCARD") {
            issued.cleans = Cleans::Transaction;
        } else if is("WATCH") {
            self.watching = true;
        } else if is("UNWATCH") {
            issued.cleans = Cleans::Watch;
        } else if is("SELECT") {
            self.db_pending = true;
            issued.cleans = Cleans::Select(
                args.next()
                    .and_then(|db| std::str::from_utf8(db).ok()?.parse().ok()),
            );
        } else if is("CLIENT") {
            // Known by what it leaves, each subcommand: one not known here (`KILL`, which
            // may match this connection, `REPLY`, `TRACKING`, a newer one) may change it.
            let sub = args.next().unwrap_or_default();
            let sub_is = |word: &str| sub.eq_ignore_ascii_case(word.as_bytes());
            if sub_is("SETNAME") {
                self.renamed = true;
            } else if ![
                "GETNAME",
                "ID",
                "INFO",
                "LIST",
                "GETREDIR",
                "TRACKINGINFO",
                "PAUSE",
                "UNPAUSE",
                "UNBLOCK",
                "HELP",
            ]
            .iter()
            .any(|w| sub_is(w))
            {
                self.lasting = true;
            }
        } else if is("SCRIPT") {
            // `SCRIPT DEBUG` puts this connection's next script under the debugger.
            self.lasting |= args
                .next()
                .is_none_or(|sub| sub.eq_ignore_ascii_case(b"DEBUG"));
        } else if [
            "SUBSCRIBE",
            "PSUBSCRIBE",
            "SSUBSCRIBE",
            "MONITOR",
            "HELLO",
            "AUTH",
            "RESET",
            "READONLY",
            "READWRITE",
            "QUIT",
            "ASKING",
            "SYNC",
            "PSYNC",
            "REPLCONF",
            "SHUTDOWN",
            "DEBUG",
        ]
        .iter()
        .any(|w| is(w))
        {
            self.lasting = true;
        } else if blocks(cmd) {
            issued.blocking = true;
            self.blocking += 1;
        }
        debug_assert!(self.blocking <= self.outstanding, "invariant 1");
        issued
    }

    /// The future of a command [`Track::issue`] saw ended: `read` if its answer was read (a
    /// value, or the server's error). Otherwise — the request failed on its way, or its
    /// answer did not come in time (redis-rs's response timeout, a dead link) — the server
    /// may have it still and answer it later, ahead of the next user's requests: it stays
    /// outstanding (and blocking), so the connection is restored or replaced before anyone
    /// else gets it. What it cleans counts only once read.
    pub(crate) fn answered(&mut self, issued: Issued, read: bool) {
        if !read {
            return;
        }
        self.outstanding -= 1;
        if issued.blocking {
            self.blocking -= 1;
        }
        debug_assert!(self.blocking <= self.outstanding, "invariant 1");
        match issued.cleans {
            Cleans::Nothing => {}
            Cleans::Transaction => {
                self.multi = false;
                self.watching = false;
            }
            Cleans::Watch => self.watching = false,
            // Inside a `MULTI` the answer is `QUEUED`: the database changes only if the
            // transaction is executed, so it is not known (the restore selects the starting
            // one).
            Cleans::Select(Some(_)) if self.multi => self.db_pending = true,
            // Commands go out in the order they are issued, and one issued later whose
            // answer was not read set `db_pending` again when it was issued.
            Cleans::Select(Some(db)) => {
                self.db = db;
                self.db_pending = false;
            }
            Cleans::Select(None) => self.lasting = true,
        }
    }
}

impl Track {
    /// Runs one command through `send`, noted as issued before `send` is called (so before
    /// anything can reach the server) and as seen when its answer came or its future ended
    /// without one.
    pub(crate) fn command<'a, Fut>(
        &'a mut self,
        cmd: &'a redis::Cmd,
        send: impl FnOnce() -> Fut + Send + 'a,
    ) -> redis::RedisFuture<'a, redis::Value>
    where
        Fut: std::future::Future<Output = redis::RedisResult<redis::Value>> + Send + 'a,
    {
        Box::pin(async move {
            let issued = self.issue(cmd);
            let answer = send().await;
            self.answered(issued, read(&answer));
            self.demoted |= demoted(&answer);
            answer
        })
    }

    /// [`command`](Self::command) for a pipeline: every command in it is issued first.
    pub(crate) fn pipeline<'a, Fut>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        send: impl FnOnce() -> Fut + Send + 'a,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>>
    where
        Fut: std::future::Future<Output = redis::RedisResult<Vec<redis::Value>>> + Send + 'a,
    {
        Box::pin(async move {
            let issued: Vec<_> = pipeline.cmd_iter().map(|cmd| self.issue(cmd)).collect();
            let answers = send().await;
            let read = read(&answers);
            for issued in issued {
                self.answered(issued, read);
            }
            self.demoted |= demoted(&answers);
            answers
        })
    }
}

/// Whether a command's answer was read: a value, or an error the server sent (it has a
/// code). Any other error — I/O, a response timeout, one of redis-rs's own — leaves it owed.
pub(crate) fn read<T>(answer: &redis::RedisResult<T>) -> bool {
    answer
        .as_ref()
        .map_or_else(|e| e.code().is_some(), |_| true)
}

/// Whether an answer says the server is a replica that refuses writes (`READONLY`), as a
/// master demoted by a failover answers: the error itself, or one inside a pipeline's
/// answers.
pub(crate) fn demoted<T: Demoting>(answer: &redis::RedisResult<T>) -> bool {
    match answer {
        Err(e) => e.code() == Some("READONLY"),
        Ok(value) => value.demoting(),
    }
}

/// An answer that may hold a server's errors inside it.
pub(crate) trait Demoting {
    fn demoting(&self) -> bool;
}

impl Demoting for redis::Value {
    fn demoting(&self) -> bool {
        matches!(self, redis::Value::ServerError(e) if e.code() == "READONLY")
    }
}

impl Demoting for Vec<redis::Value> {
    fn demoting(&self) -> bool {
        self.iter().any(Demoting::demoting)
    }
}

/// What [`Track::issue`] decided of a command, carried to its answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Issued {
    blocking: bool,
    cleans: Cleans,
}

/// What a command cleans once its answer is read.
#[derive(Debug, Clone, Copy)]
enum Cleans {
    Nothing,
    /// `EXEC` or `DISCARD`: the transaction and the watched keys.
    Transaction,
    /// `UNWATCH`.
    Watch,
    /// `SELECT n` (`None`: a database that is no number).
    Select(Option<i64>),
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
            let i = t.issue(&leave);
            t.answered(i, true);
            assert!(!t.clean(), "{dirty}: left");
            // Issued, never sent (dropped): nothing cleaned, and the answer never comes.
            t.issue(&clean);
            assert!(
                !t.clean(),
                "{dirty}: a clean not yet answered cleans nothing"
            );
            // Issued again and answered: clean.
            t.outstanding = 0;
            let i = t.issue(&clean);
            t.answered(i, true);
            assert!(t.clean(), "{dirty}: cleaned once answered: {t:?}");
            // A request that failed on its way, or whose answer did not come in time,
            // cleans nothing either, and its answer is still owed.
            let i = t.issue(&leave);
            t.answered(i, true);
            let i = t.issue(&clean);
            t.answered(i, false);
            assert!(!t.clean(), "{dirty}: a failed clean");
            assert_eq!(t.outstanding, 1, "{dirty}: its answer still owed");
        }
        // A SELECT issued and not answered leaves the database unknown.
        let mut t = Track::default();
        t.issue(&cmd(&["SELECT", "0"]));
        assert!(t.db_moved());
    }

    /// What ends a connection or changes what it is, no command undoes: the connection is
    /// replaced. A `CLIENT` subcommand counts as such unless it is known to leave nothing.
    #[test]
    fn what_ends_or_changes_the_connection_lasts() {
        for words in [
            &["QUIT"][..],
            &["quit"],
            &["CLIENT", "KILL", "ID", "7"],
            &["CLIENT", "REPLY", "OFF"],
            &["CLIENT", "TRACKING", "ON"],
            &["CLIENT", "NO-EVICT", "ON"],
            &["CLIENT", "SOMETHING-NEW"],
            &["CLIENT"],
            &["SCRIPT", "DEBUG", "YES"],
            &["ASKING"],
            &["REPLCONF", "listening-port", "1"],
            &["PSYNC", "?", "-1"],
            &["HELLO", "3"],
            &["SUBSCRIBE", "c"],
        ] {
            let mut t = Track::default();
            let i = t.issue(&cmd(words));
            t.answered(i, true);
            assert!(t.lasting, "{words:?}");
        }
        for words in [
            &["CLIENT", "ID"][..],
            &["client", "getname"],
            &["CLIENT", "INFO"],
            &["SCRIPT", "EXISTS", "abc"],
            &["SCRIPT", "LOAD", "return 1"],
            &["GET", "k"],
            &["PING"],
        ] {
            let mut t = Track::default();
            let i = t.issue(&cmd(words));
            t.answered(i, true);
            assert!(t.clean(), "{words:?}: {t:?}");
        }
    }

    /// An answer is read when it is a value or the server's own error; a failure of the
    /// link or a response timeout leaves it owed.
    #[test]
    fn only_a_value_or_the_servers_error_is_an_answer_read() {
        use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind};
        let value: RedisResult<()> = Ok(());
        let server: RedisResult<()> = Err(RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "WRONGTYPE",
        )));
        let io: RedisResult<()> = Err(RedisError::from(std::io::Error::from(
            std::io::ErrorKind::TimedOut,
        )));
        assert!(read(&value) && read(&server));
        assert!(!read(&io));
    }

    /// Found by the hand-over fuzzer: `SELECT 3`, `MULTI`, `SELECT 0` (answered `QUEUED`),
    /// then the return's `DISCARD` leaves the server in database 3; the queued `SELECT`
    /// must not count as done.
    #[test]
    fn a_select_queued_in_a_transaction_leaves_the_database_unknown() {
        let mut t = Track::default();
        for words in [&["SELECT", "3"][..], &["MULTI"][..], &["SELECT", "0"][..]] {
            let i = t.issue(&cmd(words));
            t.answered(i, true);
        }
        assert!(
            t.db_moved(),
            "the restore must select the starting database"
        );
    }
}
