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
//! # Invariants
//!
//! 1. `answered ≤ expected` at every moment a reader can see (a request is counted when it is
//!    written, before the server can answer it).
//! 2. The status is only read as the session's status when `answered == expected`.
//! 3. A layer below TLS stops looking at bytes once TLS begins ([`Watched::below_tls`]): what
//!    it would see is ciphertext.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, TlsStream};

/// The code of SSLRequest (and GSSENCRequest one above it): the server answers it with a
/// single unframed byte.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;

/// A session's transaction status, as the server last stated it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxStatus {
    /// Not in a transaction block.
    Idle,
    /// In a transaction block.
    InTransaction,
    /// In a failed transaction block (statements are refused until it ends).
    Failed,
    /// Requests are in flight, or the server has not stated a status yet.
    Unsettled,
}

/// What the connection's layers saw, shared with the pooled connection.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// Notified at every ReadyForQuery read (a permit when nobody waits: a few atomics).
    answers: tokio::sync::Notify,
    /// The last ReadyForQuery status byte.
    status: AtomicU8,
    /// Requests written that the server answers with ReadyForQuery (the startup counts one).
    expected: AtomicU64,
    /// ReadyForQuery messages read.
    answered: AtomicU64,
}

impl Seen {
    /// Marks every request written as answered. Only for a moment when that is known: after a
    /// query of the pool's own has been answered while nobody else could use the connection
    /// (answers come in order, so everything before it was answered too).
    pub(crate) fn resync(&self) {
        let answered = self.answered.load(Ordering::Acquire);
        self.expected.store(answered, Ordering::Release);
    }

    /// Waits until no answer is outstanding and returns the status then. An outstanding
    /// answer always comes (the request was written), unless the connection dies: callers
    /// bound the wait.
    pub(crate) async fn settled(&self) -> TxStatus {
        loop {
            let mut answered = std::pin::pin!(self.answers.notified());
            answered.as_mut().enable();
            let status = self.status();
            if status != TxStatus::Unsettled || self.expected.load(Ordering::Acquire) == 0 {
                return status;
            }
            answered.await;
        }
    }

    /// The session's transaction status now, if no answer is outstanding.
    pub(crate) fn status(&self) -> TxStatus {
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
}

/// Follows one direction's framing: a type byte (none for the untyped messages the client
/// sends first), a big-endian length that counts itself, the payload.
#[derive(Debug, Default)]
struct Framing {
    /// Header bytes gathered so far.
    header: [u8; 8],
    have: usize,
    /// Payload bytes of the current message still to come.
    rest: u64,
    /// The current message's type (0 while untyped).
    kind: u8,
}

/// What a finished header says.
enum Header {
    /// A typed message of this kind; its first payload byte is wanted for `Z`.
    Typed(u8),
    /// An untyped message with this code (startup version, SSLRequest...).
    Untyped(u32),
}

impl Framing {
    /// Feeds `bytes`; `untyped` says whether the next message has no type byte. Calls
    /// `header` when a message's header is complete and `first` with a `Z` payload's byte.
    fn feed(
        &mut self,
        mut bytes: &[u8],
        untyped: &mut u8,
        mut header: impl FnMut(Header) -> bool,
        mut first: impl FnMut(u8),
    ) {
        while !bytes.is_empty() {
            if self.rest > 0 {
                if self.kind == b'Z' && self.have == 5 {
                    first(bytes[0]);
                    self.have = 0;
                }
                let skip = usize::try_from(self.rest)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                self.rest -= skip as u64;
                bytes = &bytes[skip..];
                continue;
            }
            if *untyped == 0 && self.have == 0 && bytes.len() >= 5 {
                // The common case: a typed header whole in this read, parsed where it lies,
                // and most often its whole message too, skipped at once.
                let kind = bytes[0];
                let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
                let whole = usize::try_from(len).map_or(usize::MAX, |len| len.saturating_add(1));
                if len >= 4 && bytes.len() >= whole {
                    header(Header::Typed(kind));
                    if kind == b'Z' && len > 4 {
                        first(bytes[5]);
                    }
                    bytes = &bytes[whole..];
                } else {
                    self.typed(kind, len, &mut header);
                    bytes = &bytes[5..];
                }
                continue;
            }
            let size = if *untyped > 0 { 8 } else { 5 };
            let take = (size - self.have).min(bytes.len());
            self.header[self.have..self.have + take].copy_from_slice(&bytes[..take]);
            self.have += take;
            bytes = &bytes[take..];
            if self.have < size {
                continue;
            }
            let h = self.header;
            if size == 8 {
                *untyped -= 1;
                let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
                let code = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
                self.kind = 0;
                self.rest = u64::from(len.saturating_sub(8));
                self.have = 0;
                if header(Header::Untyped(code)) {
                    *untyped += 1;
                }
            } else {
                let len = u32::from_be_bytes([h[1], h[2], h[3], h[4]]);
                self.typed(h[0], len, &mut header);
            }
        }
    }

    /// A typed message's header is complete: its kind, and its length (which counts itself).
    #[inline]
    fn typed(&mut self, kind: u8, len: u32, header: &mut impl FnMut(Header) -> bool) {
        self.kind = kind;
        self.rest = u64::from(len.saturating_sub(4));
        // `have` is 5 for a `Z` until its first payload byte is seen, 0 otherwise.
        self.have = if kind == b'Z' && self.rest > 0 { 5 } else { 0 };
        header(Header::Typed(kind));
    }
}

/// A stream that watches the transaction status go by.
#[derive(Debug)]
pub struct Watched<S> {
    inner: S,
    seen: Arc<Seen>,
    reading: Framing,
    writing: Framing,
    /// Untyped messages the client still sends (the startup, after an SSLRequest).
    untyped: u8,
    /// Unframed bytes the server sends next (the answer to an SSLRequest).
    unframed: u8,
    /// Bytes below TLS are not looked at.
    off: bool,
    /// The server entered copy-in mode (CopyInResponse read) and it has not ended.
    copy_in: bool,
    /// Syncs written since the last Execute or Query: if a copy-in began, the server ignores
    /// those it receives in copy-in mode, and they are answered by no ReadyForQuery.
    syncs_since_execute: u64,
}

impl<S> Watched<S> {
    pub(crate) fn new(inner: S, seen: Arc<Seen>) -> Self {
        Watched {
            inner,
            seen,
            reading: Framing::default(),
            writing: Framing::default(),
            untyped: 1,
            unframed: 0,
            off: false,
            copy_in: false,
            syncs_since_execute: 0,
        }
    }

    /// This layer carries TLS from now on: it stops looking (the layer above TLS looks).
    pub(crate) fn below_tls(&mut self) {
        self.off = true;
    }

    pub(crate) fn seen(&self) -> Arc<Seen> {
        self.seen.clone()
    }

    fn wrote(&mut self, bytes: &[u8]) {
        if self.off {
            return;
        }
        let seen = &self.seen;
        let unframed = &mut self.unframed;
        let copy_in = &mut self.copy_in;
        let syncs = &mut self.syncs_since_execute;
        self.writing.feed(
            bytes,
            &mut self.untyped,
            |header| match header {
                Header::Untyped(SSL_REQUEST | GSSENC_REQUEST) => {
                    *unframed = 1;
                    true // the startup follows, untyped
                }
                Header::Untyped(_) => {
                    // The startup: answered by the first ReadyForQuery.
                    seen.expected.fetch_add(1, Ordering::AcqRel);
                    false
                }
                Header::Typed(kind) => {
                    match kind {
                        b'Q' | b'F' => {
                            *syncs = 0;
                            seen.expected.fetch_add(1, Ordering::AcqRel);
                        }
                        b'E' => *syncs = 0,
                        b'S' => {
                            *syncs += 1;
                            seen.expected.fetch_add(1, Ordering::AcqRel);
                        }
                        // CopyDone or CopyFail: the Syncs sent while the server was in
                        // copy-in mode were ignored.
                        b'c' | b'f' if *copy_in => {
                            *copy_in = false;
                            seen.expected.fetch_sub(*syncs, Ordering::AcqRel);
                            *syncs = 0;
                        }
                        _ => {}
                    }
                    false
                }
            },
            |_| {},
        );
    }

    fn read(&mut self, mut bytes: &[u8]) {
        if self.off {
            return;
        }
        if self.unframed > 0 && !bytes.is_empty() {
            self.unframed -= 1;
            bytes = &bytes[1..];
        }
        let seen = &self.seen;
        let copy_in = &mut self.copy_in;
        let mut no_untyped = 0;
        self.reading.feed(
            bytes,
            &mut no_untyped,
            |header| {
                if let Header::Typed(b'G') = header {
                    *copy_in = true;
                }
                false
            },
            |status| {
                seen.status.store(status, Ordering::Release);
                seen.answered.fetch_add(1, Ordering::AcqRel);
                seen.answers.notify_one();
            },
        );
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            self.read(&buf.filled()[before..]);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            self.wrote(&buf[..n]);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S: TlsStream + Unpin> TlsStream for Watched<S> {
    fn channel_binding(&self) -> ChannelBinding {
        self.inner.channel_binding()
    }
}

#[cfg(test)]
mod tests {
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
                w.seen.status(),
                TxStatus::Unsettled,
                "before the startup's answer"
            );
            let mut startup = message(b'R', &[0, 0, 0, 0]);
            startup.extend(message(b'S', b"client_encoding\0UTF8\0"));
            startup.extend(message(b'Z', b"I"));
            feed(&mut w, false, &startup, step);
            assert_eq!(w.seen.status(), TxStatus::Idle);

            feed(&mut w, true, &message(b'Q', b"BEGIN\0"), step);
            assert_eq!(w.seen.status(), TxStatus::Unsettled, "a request in flight");
            let mut answer = message(b'C', b"BEGIN\0");
            answer.extend(message(b'N', &[b'x'; 300]));
            answer.extend(message(b'Z', b"T"));
            feed(&mut w, false, &answer, step);
            assert_eq!(w.seen.status(), TxStatus::InTransaction);

            // Extended protocol: Parse/Bind/Execute/Sync, one answer for the Sync.
            let mut request = message(b'P', b"\0SELECT 1/0\0\0\0");
            request.extend(message(b'B', &[0; 10]));
            request.extend(message(b'E', &[0; 5]));
            request.extend(message(b'S', b""));
            feed(&mut w, true, &request, step);
            let mut answer = message(b'E', &[b'e'; 50]);
            assert_eq!(w.seen.status(), TxStatus::Unsettled);
            answer.extend(message(b'Z', b"E"));
            feed(&mut w, false, &answer, step);
            assert_eq!(w.seen.status(), TxStatus::Failed);

            // A large row split across reads, then back to idle.
            feed(&mut w, true, &message(b'Q', b"ROLLBACK\0"), step);
            let mut answer = message(b'D', &vec![b'r'; 70_000]);
            answer.extend(message(b'Z', b"I"));
            feed(&mut w, false, &answer, step);
            assert_eq!(w.seen.status(), TxStatus::Idle);
        }
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
            let got = std::cell::RefCell::new(&mut seen);
            framing.feed(
                piece,
                &mut 0,
                |header| {
                    if let Header::Typed(kind) = header {
                        got.borrow_mut().push(('h', kind));
                    }
                    false
                },
                |status| got.borrow_mut().push(('z', status)),
            );
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
        assert_eq!(w.seen.status(), TxStatus::Unsettled);
        let mut answer = message(b'C', b"COPY 1\0");
        answer.extend(message(b'Z', b"T"));
        w.read(&answer);
        assert_eq!(w.seen.status(), TxStatus::InTransaction);

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
        assert_eq!(w.seen.status(), TxStatus::Failed);
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
        assert_eq!(w.seen.status(), TxStatus::InTransaction);
    }

    #[test]
    fn below_tls_nothing_is_looked_at() {
        let mut w = Watched::new((), Arc::default());
        w.wrote(&untyped(SSL_REQUEST, b""));
        w.read(b"S");
        w.below_tls();
        w.wrote(&[0x16, 0x03, 0x01, 0x02, 0x00, b'Q', 0, 0, 0, 4]);
        w.read(&[0x16, 0x03, 0x03, 0x00, 0x7a, b'Z', 0, 0, 0, 5, b'I']);
        assert_eq!(w.seen.expected.load(Ordering::Relaxed), 0);
        assert_eq!(w.seen.answered.load(Ordering::Relaxed), 0);
    }
}
