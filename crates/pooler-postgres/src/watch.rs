//! Transaction status at zero round trips: a stream layer between the connection's socket (or
//! its TLS stream) and tokio-postgres that follows the protocol's message framing in both
//! directions.
//!
//! The server ends every response with ReadyForQuery (`Z`), whose one byte of payload is the
//! session's transaction status: `I` idle, `T` in a transaction, `E` in a failed one. Every
//! simple Query (`Q`), Sync (`S`) and FunctionCall (`F`) the client writes is answered by
//! exactly one ReadyForQuery, and so is the startup. So the layer counts the requests that
//! will be answered and the answers read; when the two are equal the last status read is the
//! session's status now, and a connection given back idle needs no query at all.
//!
//! A request is counted when it is *written*; one that tokio-postgres has queued but its driver
//! has not yet written (a query future dropped a moment after it was first polled) is not. So
//! the driver runs inside [`Driven`], which says when it is *quiet*: not being polled, not
//! woken since its last poll, and with no write left waiting on the socket. tokio-postgres's
//! driver takes every queued request and writes it in each poll until the socket pushes back,
//! and a request queued while the driver sleeps wakes it; so a quiet driver has written
//! everything queued before the check, and only then are the counts the whole story.
//!
//! The writing side also scans the SQL of every Query and Parse for statements that leave
//! state on the session ([`crate::session`]); the reading side marks the session dirty when the
//! server reports a changed parameter after the startup.
//!
//! The same counts time the server: a *busy* period runs from a request written while none
//! was outstanding to the answer that leaves none outstanding. Its length, divided among the
//! answers read in it, is the server's time per request (one request at a time: its round
//! trip), which the admission limit follows ([`Seen::served`]). The startup is not counted,
//! nor a period in which the server answered with an error: a request cancelled at its
//! deadline or by `statement_timeout` was cut short, and its time is not a latency. Periods
//! are timed only once someone has asked for the server's time (an admission limiter does,
//! at each return): a pool without one reads no clock for it.
//!
//! # Invariants
//!
//! 1. `answered ≤ expected` at every moment a reader can see (a request is counted when it is
//!    written, before the server can answer it).
//! 2. The status is only read as the session's status when `answered == expected` and the
//!    driver is quiet.
//! 3. A layer below TLS stops looking at bytes once TLS begins ([`Watched::below_tls`]): what
//!    it would see is ciphertext.
//! 4. `in_copy` is set only between a CopyInResponse read and the CopyDone or CopyFail written.
//! 5. `ended` is set once the driver's future has returned or its wrapper was dropped, and
//!    never cleared: no answer can come after it.
//! 6. `busy_since` is 0 exactly when the busy period under way began before the timing was
//!    asked for (`timed` unset): such a period is never counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU16, AtomicU64, AtomicUsize, Ordering};

use crate::role::Heard;
use crate::session::{Declared, Dirt};

mod driven;
mod framing;
mod sides;
mod stream;

pub(crate) use driven::{Driven, End};
pub use stream::Watched;

/// The clock the busy periods are read on: nanoseconds since the first reading, plus one —
/// never 0, which marks a period begun untimed (a reading made 0 and raised to 1 would make
/// a period that began at the first reading a nanosecond short).
fn now_nanos() -> u64 {
    static EPOCH: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(tokio::time::Instant::now);
    u64::try_from(epoch.elapsed().as_nanos())
        .unwrap_or(u64::MAX)
        .saturating_add(1)
}

/// How often [`Seen::quiet`] looks again at a driver being polled before saying "not quiet".
const BUSY_SPINS: u32 = 256;

/// A session's transaction status, as the server last stated it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxStatus {
    /// Not in a transaction block.
    Idle,
    /// In a transaction block.
    InTransaction,
    /// In a failed transaction block (statements are refused until it ends).
    Failed,
    /// Not known now: requests are in flight, the server has not stated a status yet, the
    /// connection's driver has been woken and not yet run (it may hold a request not yet
    /// written), or the connection is closed. tokio-postgres ends a statement's future at its
    /// CommandComplete, which wakes the driver (the answer's channel freed) before its
    /// ReadyForQuery is read or the driver runs again: [`PgConnection`](crate::PgConnection)'s
    /// statement methods wait that out before they return, and
    /// [`PgConnection::settled`](crate::PgConnection::settled) waits for it (no round trip).
    Unsettled,
}

/// What the connection's layers saw, shared with the pooled connection.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// Notified after each poll of the driver while someone waits ([`Seen::settled`]).
    changed: tokio::sync::Notify,
    /// Tasks in [`Seen::settled`].
    watchers: AtomicUsize,
    /// The last ReadyForQuery status byte.
    status: AtomicU8,
    /// Requests written that the server answers with ReadyForQuery (the startup counts one).
    expected: AtomicU64,
    /// ReadyForQuery messages read.
    answered: AtomicU64,
    /// The driver is being polled.
    busy: AtomicBool,
    /// The driver was woken after its last poll began.
    woken: AtomicBool,
    /// A write is waiting on the socket (bytes tokio-postgres has framed but not yet handed
    /// down).
    blocked: AtomicBool,
    /// The server is in copy-in mode, and the client has not ended it.
    in_copy: AtomicBool,
    /// The server is sending a `COPY … TO STDOUT` whose end has not been read.
    copy_out: AtomicBool,
    /// The driver has ended (the connection is closed) or was dropped: no answer comes.
    ended: AtomicBool,
    /// Statements under way through [`Seen::settling`].
    statements: AtomicUsize,
    /// Session state left by the statements written, as [`Dirt`] bits.
    dirt: AtomicU16,
    /// Someone asked for the server's time ([`Seen::served`]: an admission limiter, at each
    /// return): from then on busy periods are timed. Until then no clock is read.
    timed: AtomicBool,
    /// When the busy period under way began ([`now_nanos`], never 0), or 0 when it began
    /// untimed (it is not counted). Only the driver task writes this and the three below
    /// (reading and writing are both its), so relaxed order does.
    busy_since: AtomicU64,
    /// Answers read in the busy period under way.
    busy_answers: AtomicU64,
    /// The server answered a request of the busy period under way with an error: the
    /// period was cut short and is not a latency.
    busy_cut: AtomicBool,
    /// The length of the busy periods ended, and the answers read in them, since
    /// [`Seen::served`] last took them.
    served_nanos: AtomicU64,
    served_answers: AtomicU64,
    /// What the server said of its role.
    pub(crate) heard: Heard,
    /// What the application declared to the scan, set once before any user's statement;
    /// until then nothing is excused.
    declared: std::sync::OnceLock<Arc<Declared>>,
}

impl Seen {
    /// Marks every request written as answered and the session clean. Only for a moment when
    /// both are known: after a query of the pool's own has been answered while nobody else
    /// could use the connection (answers come in order, so everything before it was answered
    /// too), and that query reset the session if it was dirty.
    pub(crate) fn resync(&self) {
        let answered = self.answered.load(Ordering::Acquire);
        self.expected.store(answered, Ordering::Release);
        self.dirt.store(0, Ordering::Release);
    }

    /// Whether the driver has written everything queued so far: not being polled, not woken
    /// since its last poll, nothing waiting on the socket.
    ///
    /// A poll in progress on another thread is most often finishing the poll that delivered
    /// the answer its caller has just read, a few microseconds from its end: a short, bounded
    /// spin waits it out rather than send the connection down the slow return path.
    #[inline]
    fn quiet(&self) -> bool {
        for _ in 0..BUSY_SPINS {
            if !self.busy.load(Ordering::SeqCst) {
                break;
            }
            std::hint::spin_loop();
        }
        !self.busy.load(Ordering::SeqCst)
            && !self.woken.load(Ordering::SeqCst)
            && !self.blocked.load(Ordering::SeqCst)
    }

    /// Runs a statement of the connection's own methods, and, when no other is under way
    /// through them, waits until the driver has caught up before it returns — so that
    /// [`status`](Seen::status) then reads the server's answer to it. The wait is for the
    /// driver to run once more (the statement's future ends at its CommandComplete and frees
    /// its answer's channel, which wakes the driver) and for what the driver may still hold,
    /// at most a ReadyForQuery in its buffer.
    ///
    /// The statement comes as the function that makes its future, called where it is
    /// awaited: the future is built in place there, not built by the caller and copied into
    /// this one's state and again into its await (two copies of a few hundred bytes a
    /// statement; docs/design.md, "Real backends").
    pub(crate) async fn settling<F: Future>(&self, statement: impl FnOnce() -> F) -> F::Output {
        struct UnderWay<'a>(&'a AtomicUsize);
        impl Drop for UnderWay<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.statements.fetch_add(1, Ordering::AcqRel);
        let under_way = UnderWay(&self.statements);
        let done = statement().await;
        // Another statement under way keeps its request outstanding: waiting for it would
        // hold this one's result back for as long as that one runs.
        if self.statements.load(Ordering::Acquire) == 1 && self.status() == TxStatus::Unsettled {
            self.settled().await;
        }
        drop(under_way);
        done
    }

    /// Waits until the driver is quiet and, unless the server is in copy-in mode (whose end
    /// only the client can send), no answer is outstanding; returns the status then. An
    /// outstanding answer always comes (the request was written) unless the connection dies,
    /// which ends the wait with [`TxStatus::Unsettled`]; a link that goes silent does not:
    /// callers bound the wait.
    pub(crate) async fn settled(&self) -> TxStatus {
        loop {
            let mut changed = std::pin::pin!(self.changed.notified());
            changed.as_mut().enable();
            // Counted after `enable`: a poll that ends after this count is seen notifies us.
            self.watchers.fetch_add(1, Ordering::SeqCst);
            let status = self.status();
            let done = status != TxStatus::Unsettled
                || (self.quiet() && self.in_copy.load(Ordering::Acquire))
                || self.expected.load(Ordering::Acquire) == 0
                || self.ended.load(Ordering::Acquire);
            if !done {
                changed.await;
            }
            self.watchers.fetch_sub(1, Ordering::SeqCst);
            if done {
                return status;
            }
        }
    }

    /// The session's transaction status now, if no answer is outstanding and the driver is
    /// quiet.
    #[inline]
    pub(crate) fn status(&self) -> TxStatus {
        if !self.quiet() {
            return TxStatus::Unsettled;
        }
        // `answered` first: a request written after this load only makes `expected` larger,
        // which reads as unsettled, never as a stale settled status.
        let answered = self.answered.load(Ordering::Acquire);
        let status = self.status.load(Ordering::Acquire);
        let expected = self.expected.load(Ordering::Acquire);
        if answered != expected {
            return TxStatus::Unsettled;
        }
        match status {
            b'I' => TxStatus::Idle,
            b'T' => TxStatus::InTransaction,
            b'E' => TxStatus::Failed,
            _ => TxStatus::Unsettled,
        }
    }

    /// The server's mean time per request over the busy periods ended since the last call,
    /// and starts the next measure; `None` if no request was answered meanwhile. The first
    /// call turns the timing on: until then nothing was measured, and it returns `None`.
    pub(crate) fn served(&self) -> Option<std::time::Duration> {
        if !self.timed.load(Ordering::Relaxed) {
            self.timed.store(true, Ordering::Relaxed);
        }
        self.take_served()
    }

    /// Drops what the busy periods ended so far measured: they were the pool's own
    /// statements (a reset, a check, the `after_connect` hook), not a user's.
    pub(crate) fn forget_served(&self) {
        let _ = self.take_served();
    }

    fn take_served(&self) -> Option<std::time::Duration> {
        let answers = self.served_answers.swap(0, Ordering::Relaxed);
        let nanos = self.served_nanos.swap(0, Ordering::Relaxed);
        (answers > 0).then(|| std::time::Duration::from_nanos(nanos / answers))
    }

    /// A request the server will answer with ReadyForQuery was written; `startup` for the
    /// connection's first.
    #[inline]
    fn requested(&self, startup: bool) {
        let before = self.expected.fetch_add(1, Ordering::AcqRel);
        if !startup && before == self.answered.load(Ordering::Acquire) {
            let since = if self.timed.load(Ordering::Relaxed) {
                now_nanos()
            } else {
                0
            };
            self.busy_since.store(since, Ordering::Relaxed);
        }
    }

    /// An ErrorResponse was read: the busy period under way was cut short (a cancel, a
    /// `statement_timeout`, a failure) and will not count.
    pub(super) fn errored(&self) {
        if self.answered.load(Ordering::Relaxed) > 0 {
            self.busy_cut.store(true, Ordering::Relaxed);
        }
    }

    /// A ReadyForQuery was read: the busy period ends when no request is left outstanding.
    #[inline]
    fn answered(&self) {
        let answered = self.answered.fetch_add(1, Ordering::AcqRel) + 1;
        if answered == 1 {
            return; // the startup's
        }
        let answers = self.busy_answers.fetch_add(1, Ordering::Relaxed) + 1;
        if answered >= self.expected.load(Ordering::Acquire) {
            // A period cut short (an error answered) or begun untimed measures nothing:
            // fail safe, a time the pool cannot account for is not a latency.
            let since = self.busy_since.load(Ordering::Relaxed);
            debug_assert!(
                since == 0 || self.timed.load(Ordering::Relaxed),
                "invariant 6: a timed period began after the timing was asked for"
            );
            if !self.busy_cut.swap(false, Ordering::Relaxed) && since != 0 {
                let took = now_nanos().saturating_sub(since);
                self.served_nanos.fetch_add(took, Ordering::Relaxed);
                self.served_answers.fetch_add(answers, Ordering::Relaxed);
            }
            self.busy_answers.store(0, Ordering::Relaxed);
        }
    }

    /// What the application declared to the scan (set once, before any user's statement).
    pub(crate) fn declare(&self, declared: Arc<Declared>) {
        let _ = self.declared.set(declared);
    }

    /// What the application declared, or nothing yet.
    fn declared(&self) -> &Declared {
        self.declared.get().map_or(Declared::nothing(), |d| d)
    }

    /// Session state the statements written so far may have left.
    pub(crate) fn dirt(&self) -> Dirt {
        Dirt(self.dirt.load(Ordering::Acquire))
    }

    /// Whether the server is still sending a `COPY … TO STDOUT` (its stream dropped midway:
    /// only the driver can read the rest).
    pub(crate) fn copy_out(&self) -> bool {
        self.copy_out.load(Ordering::Acquire)
    }

    /// Whether the server is in copy-in mode that the client has not ended (a `CopyInSink`
    /// still alive, or forgotten).
    pub(crate) fn in_copy(&self) -> bool {
        self.in_copy.load(Ordering::Acquire)
    }

    /// Whether a request written has not been answered yet.
    pub(crate) fn unanswered(&self) -> bool {
        self.answered.load(Ordering::Acquire) != self.expected.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Waker};

    use super::framing::{Framing, Header, Visit};
    use super::sides::SSL_REQUEST;
    use super::*;

    fn message(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&(payload.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(payload);
        m
    }

    fn untyped(code: u32, payload: &[u8]) -> Vec<u8> {
        let mut m = (payload.len() as u32 + 8).to_be_bytes().to_vec();
        m.extend_from_slice(&code.to_be_bytes());
        m.extend_from_slice(payload);
        m
    }

    /// Feeds `bytes` in pieces of `step` bytes.
    fn feed(w: &mut Watched<()>, write: bool, bytes: &[u8], step: usize) {
        for piece in bytes.chunks(step) {
            if write {
                w.wrote(piece);
            } else {
                w.read(piece);
            }
        }
    }

    #[test]
    fn the_status_follows_ready_for_query_whatever_the_read_sizes() {
        for step in [1, 2, 3, 7, 1000] {
            let mut w = Watched::new((), Arc::default());
            feed(&mut w, true, &untyped(196_608, b"user\0me\0\0"), step);
            assert_eq!(
                w.seen().status(),
                TxStatus::Unsettled,
                "before the startup's answer"
            );
            let mut startup = message(b'R', &[0, 0, 0, 0]);
            startup.extend(message(b'S', b"client_encoding\0UTF8\0"));
            startup.extend(message(b'Z', b"I"));
            feed(&mut w, false, &startup, step);
            assert_eq!(w.seen().status(), TxStatus::Idle);

            feed(&mut w, true, &message(b'Q', b"BEGIN\0"), step);
            assert_eq!(
                w.seen().status(),
                TxStatus::Unsettled,
                "a request in flight"
            );
            let mut answer = message(b'C', b"BEGIN\0");
            answer.extend(message(b'N', &[b'x'; 300]));
            answer.extend(message(b'Z', b"T"));
            feed(&mut w, false, &answer, step);
            assert_eq!(w.seen().status(), TxStatus::InTransaction);

            // Extended protocol: Parse/Bind/Execute/Sync, one answer for the Sync.
            let mut request = message(b'P', b"\0SELECT 1/0\0\0\0");
            request.extend(message(b'B', &[0; 10]));
            request.extend(message(b'E', &[0; 5]));
            request.extend(message(b'S', b""));
            feed(&mut w, true, &request, step);
            let mut answer = message(b'E', &[b'e'; 50]);
            assert_eq!(w.seen().status(), TxStatus::Unsettled);
            answer.extend(message(b'Z', b"E"));
            feed(&mut w, false, &answer, step);
            assert_eq!(w.seen().status(), TxStatus::Failed);

            // A large row split across reads, then back to idle.
            feed(&mut w, true, &message(b'Q', b"ROLLBACK\0"), step);
            let mut answer = message(b'D', &vec![b'r'; 70_000]);
            answer.extend(message(b'Z', b"I"));
            feed(&mut w, false, &answer, step);
            assert_eq!(w.seen().status(), TxStatus::Idle);
        }
    }

    /// The server's time per request: a busy period from the first request written while
    /// none was outstanding to the answer that leaves none, shared among its answers; the
    /// startup and the time between requests do not count.
    #[tokio::test(start_paused = true)]
    async fn busy_periods_time_the_server_per_request() {
        let ms = std::time::Duration::from_millis;
        let mut w = Watched::new((), Arc::default());
        feed(&mut w, true, &untyped(196_608, b"user\0me\0\0"), 1000);
        tokio::time::advance(ms(500)).await;
        feed(&mut w, false, &message(b'Z', b"I"), 1000);
        assert_eq!(w.seen().served(), None, "the startup is not a request");

        // One request at a time: its round trip. The pause between them is the user's.
        for took in [30, 10] {
            feed(&mut w, true, &message(b'Q', b"SELECT 1\0"), 1000);
            tokio::time::advance(ms(took)).await;
            feed(&mut w, false, &message(b'Z', b"I"), 1000);
            tokio::time::advance(ms(1000)).await;
        }
        assert_eq!(w.seen().served(), Some(ms(20)));
        assert_eq!(
            w.seen().served(),
            None,
            "taken: the next measure starts empty"
        );

        // Two requests in flight at once (a pipeline): 40 ms for both, 20 each.
        let mut two = message(b'Q', b"SELECT 1\0");
        two.extend(message(b'Q', b"SELECT 2\0"));
        feed(&mut w, true, &two, 1000);
        tokio::time::advance(ms(25)).await;
        feed(&mut w, false, &message(b'Z', b"I"), 1000);
        assert_eq!(w.seen().served(), None, "still busy: nothing ended yet");
        tokio::time::advance(ms(15)).await;
        feed(&mut w, false, &message(b'Z', b"I"), 1000);
        assert_eq!(w.seen().served(), Some(ms(20)));
    }

    /// Until someone asks for the server's time, busy periods are not timed: what ended
    /// before the first ask, and the period under way at it, measure nothing; the next
    /// periods do.
    #[tokio::test(start_paused = true)]
    async fn busy_periods_are_timed_once_asked_for() {
        let ms = std::time::Duration::from_millis;
        let mut w = Watched::new((), Arc::default());
        feed(&mut w, true, &untyped(196_608, b"user\0me\0\0"), 1000);
        feed(&mut w, false, &message(b'Z', b"I"), 1000);
        feed(&mut w, true, &message(b'Q', b"SELECT 1\0"), 1000);
        tokio::time::advance(ms(30)).await;
        feed(&mut w, false, &message(b'Z', b"I"), 1000);
        feed(&mut w, true, &message(b'Q', b"SELECT 1\0"), 1000);
        assert_eq!(
            w.seen().served(),
            None,
            "nothing timed before the first ask"
        );
        tokio::time::advance(ms(30)).await;
        feed(&mut w, false, &message(b'Z', b"I"), 1000);
        assert_eq!(w.seen().served(), None, "begun before the ask: not timed");
        feed(&mut w, true, &message(b'Q', b"SELECT 1\0"), 1000);
        tokio::time::advance(ms(10)).await;
        feed(&mut w, false, &message(b'Z', b"I"), 1000);
        assert_eq!(w.seen().served(), Some(ms(10)));
    }

    /// A request the server answered with an error — cancelled at a deadline
    /// (`PgConnection::until`), stopped by `statement_timeout`, or failed — was cut short:
    /// its busy period is not the server's latency and is not counted; the others of the
    /// use still are.
    #[tokio::test(start_paused = true)]
    async fn a_request_answered_with_an_error_is_not_a_latency() {
        let ms = std::time::Duration::from_millis;
        let mut w = Watched::new((), Arc::default());
        feed(&mut w, true, &untyped(196_608, b"user\0me\0\0"), 1000);
        feed(&mut w, false, &message(b'Z', b"I"), 1000);
        // Cancelled after 5 ms: ErrorResponse (57014), then ReadyForQuery.
        feed(&mut w, true, &message(b'Q', b"SELECT pg_sleep(1)\0"), 1000);
        tokio::time::advance(ms(5)).await;
        let mut answer = message(b'E', b"SERROR\0C57014\0Mcanceling statement\0\0");
        answer.extend(message(b'Z', b"I"));
        feed(&mut w, false, &answer, 1000);
        assert_eq!(
            w.seen().served(),
            None,
            "a cancelled request measures nothing"
        );
        // The same use goes on: a request answered in full counts, the cut one does not.
        for (took, error) in [(7, true), (40, false)] {
            feed(&mut w, true, &message(b'Q', b"SELECT 1\0"), 1000);
            tokio::time::advance(ms(took)).await;
            let mut answer = if error {
                message(b'E', b"SERROR\0C23505\0\0")
            } else {
                Vec::new()
            };
            answer.extend(message(b'Z', b"I"));
            feed(&mut w, false, &answer, 1000);
        }
        assert_eq!(w.seen().served(), Some(ms(40)));
    }

    /// What a framing reports for `bytes` fed in pieces of the sizes `sizes` yields, in turn:
    /// every header's kind and every `Z`'s status byte.
    fn framed(bytes: &[u8], mut sizes: impl FnMut() -> usize) -> Vec<(char, u8)> {
        let mut framing = Framing::default();
        let mut seen = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            let n = sizes().clamp(1, rest.len());
            let (piece, after) = rest.split_at(n);
            struct Got<'a>(&'a mut Vec<(char, u8)>);
            impl Visit for Got<'_> {
                fn header(&mut self, header: Header) -> bool {
                    if let Header::Typed(kind) = header {
                        self.0.push(('h', kind));
                    }
                    false
                }
                fn body(&mut self, kind: u8, payload: &[u8]) {
                    if kind == b'Z' {
                        self.0.extend(payload.iter().map(|&b| ('z', b)));
                    }
                }
            }
            framing.feed(piece, &mut 0, &mut Got(&mut seen));
            rest = after;
        }
        seen
    }

    #[test]
    fn any_split_of_a_stream_reads_as_byte_by_byte() {
        // A small xorshift: the same streams on every run.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200 {
            let mut stream = Vec::new();
            for _ in 0..(next() % 20) {
                let kind = [b'Z', b'D', b'C', b'T', b'N', b'Z'][(next() % 6) as usize];
                let payload: Vec<u8> = if kind == b'Z' {
                    vec![[b'I', b'T', b'E'][(next() % 3) as usize]]
                } else {
                    // Payloads that look like headers, to catch a parse out of step.
                    (0..next() % 40)
                        .map(|_| [b'Z', 0, 5, b'T'][(next() % 4) as usize])
                        .collect()
                };
                stream.extend(message(kind, &payload));
            }
            let one_by_one = framed(&stream, || 1);
            let whole = framed(&stream, || usize::MAX);
            assert_eq!(whole, one_by_one);
            for _ in 0..5 {
                let mut sizes = next();
                let pieces = framed(&stream, || {
                    sizes = sizes.rotate_left(5);
                    (sizes % 13) as usize
                });
                assert_eq!(pieces, one_by_one, "{stream:?}");
            }
        }
    }

    #[test]
    fn syncs_sent_while_the_server_is_in_copy_in_mode_are_not_answered() {
        let mut w = Watched::new((), Arc::default());
        w.wrote(&untyped(196_608, b""));
        w.read(&message(b'Z', b"I"));
        // Extended COPY FROM STDIN: Bind, Execute, Sync (ignored in copy-in mode)...
        let mut request = message(b'B', &[0; 10]);
        request.extend(message(b'E', &[0; 5]));
        request.extend(message(b'S', b""));
        w.wrote(&request);
        let mut answer = message(b'2', b"");
        answer.extend(message(b'G', &[0, 0, 0]));
        w.read(&answer);
        // ...data, CopyDone and a Sync: one ReadyForQuery.
        let mut rest = message(b'd', b"1\n");
        rest.extend(message(b'c', b""));
        rest.extend(message(b'S', b""));
        w.wrote(&rest);
        assert_eq!(w.seen().status(), TxStatus::Unsettled);
        let mut answer = message(b'C', b"COPY 1\0");
        answer.extend(message(b'Z', b"T"));
        w.read(&answer);
        assert_eq!(w.seen().status(), TxStatus::InTransaction);

        // A COPY refused before copy-in mode: both Syncs are answered.
        let mut request = message(b'B', &[0; 10]);
        request.extend(message(b'E', &[0; 5]));
        request.extend(message(b'S', b""));
        w.wrote(&request);
        w.read(&message(b'E', b"refused"));
        w.read(&message(b'Z', b"E"));
        let mut fail = message(b'f', b"\0");
        fail.extend(message(b'S', b""));
        w.wrote(&fail);
        w.read(&message(b'Z', b"E"));
        assert_eq!(w.seen().status(), TxStatus::Failed);
    }

    #[test]
    fn the_answer_to_an_ssl_request_is_one_unframed_byte() {
        let mut w = Watched::new((), Arc::default());
        w.wrote(&untyped(SSL_REQUEST, b""));
        w.read(b"N");
        w.wrote(&untyped(196_608, b"user\0me\0\0"));
        let mut startup = message(b'R', &[0, 0, 0, 0]);
        startup.extend(message(b'Z', b"T"));
        w.read(&startup);
        assert_eq!(w.seen().status(), TxStatus::InTransaction);
    }

    /// A request queued before the driver's first poll wakes no one (the request channel
    /// holds no waker of the driver's yet): until that poll, the driver is not quiet.
    #[test]
    fn a_driver_not_yet_polled_is_not_quiet_and_a_wake_unsettles_it() {
        let seen = Arc::new(Seen::default());
        seen.expected.store(1, Ordering::SeqCst);
        seen.answered.store(1, Ordering::SeqCst);
        seen.status.store(b'I', Ordering::SeqCst);
        assert_eq!(seen.status(), TxStatus::Idle);
        let end = End {
            pool: "p".to_owned(),
            member: 1,
            done: None,
        };
        let pending = std::future::pending::<Result<(), std::convert::Infallible>>();
        let mut driven = Driven::new(pending, seen.clone(), end);
        assert_eq!(seen.status(), TxStatus::Unsettled, "not polled yet");
        let mut cx = Context::from_waker(Waker::noop());
        assert!(Pin::new(&mut driven).poll(&mut cx).is_pending());
        assert_eq!(seen.status(), TxStatus::Idle, "polled, nothing pending");
        driven.waker.wake_by_ref();
        assert_eq!(
            seen.status(),
            TxStatus::Unsettled,
            "woken: a request may wait"
        );
        assert!(Pin::new(&mut driven).poll(&mut cx).is_pending());
        assert_eq!(seen.status(), TxStatus::Idle);
    }

    #[test]
    fn below_tls_nothing_is_looked_at() {
        let mut w = Watched::new((), Arc::default());
        w.wrote(&untyped(SSL_REQUEST, b""));
        w.read(b"S");
        w.below_tls();
        w.wrote(&[0x16, 0x03, 0x01, 0x02, 0x00, b'Q', 0, 0, 0, 4]);
        w.read(&[0x16, 0x03, 0x03, 0x00, 0x7a, b'Z', 0, 0, 0, 5, b'I']);
        assert_eq!(w.seen().expected.load(Ordering::Relaxed), 0);
        assert_eq!(w.seen().answered.load(Ordering::Relaxed), 0);
    }
}
