//! The stream layer itself (see the parent module's docs): each direction's bytes passed on
//! unchanged and followed through their framing, what they say noted in the shared [`Seen`].

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, TlsStream};

use super::Seen;
use super::framing::Framing;
use super::sides::{Reader, Writer};
use crate::role::Listen;
use crate::session::Scan;
use crate::verdicts::Verdicts;

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
    /// Syncs written since the last Execute or Query: if a copy-in began, the server ignores
    /// those it receives in copy-in mode, and they are answered by no ReadyForQuery.
    syncs_since_execute: u64,
    /// Syncs written between an Execute and a CopyDone or CopyFail written before the
    /// server's answer to the Execute was read: ignored if that answer is a CopyInResponse,
    /// answered if it is an error.
    doubtful_syncs: u64,
    /// The SQL of the Query or Parse being written.
    scan: Scan,
    /// What each prepared statement leaves, applied on each Bind of it.
    verdicts: Verdicts,
    /// The start of the server message being read, for what it says of the server's role.
    listen: Listen,
    /// The last write waited on the socket (mirrors `Seen::blocked`, stored only on change).
    blocked: bool,
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
            syncs_since_execute: 0,
            doubtful_syncs: 0,
            scan: Scan::default(),
            verdicts: Verdicts::default(),
            listen: Listen::default(),
            blocked: false,
        }
    }

    /// This layer carries TLS from now on: it stops looking (the layer above TLS looks).
    pub(crate) fn below_tls(&mut self) {
        self.off = true;
    }

    pub(crate) fn seen(&self) -> Arc<Seen> {
        self.seen.clone()
    }

    pub(super) fn wrote(&mut self, bytes: &[u8]) {
        if self.off {
            return;
        }
        let mut writer = Writer {
            seen: &self.seen,
            unframed: &mut self.unframed,
            syncs: &mut self.syncs_since_execute,
            doubtful: &mut self.doubtful_syncs,
            scan: &mut self.scan,
            verdicts: &mut self.verdicts,
        };
        self.writing.feed(bytes, &mut self.untyped, &mut writer);
    }

    /// Out of line: most reads find nothing yet (the driver polls until one does), and
    /// `poll_read`'s frame stays small for them without the framing inlined into it.
    #[inline(never)]
    pub(super) fn read(&mut self, mut bytes: &[u8]) {
        if self.off {
            return;
        }
        if self.unframed > 0 && !bytes.is_empty() {
            self.unframed -= 1;
            bytes = &bytes[1..];
        }
        let mut reader = Reader {
            seen: &self.seen,
            doubtful: &mut self.doubtful_syncs,
            listen: &mut self.listen,
        };
        self.reading.feed(bytes, &mut 0, &mut reader);
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
        match polled {
            Poll::Ready(Ok(n)) => {
                if self.blocked {
                    self.blocked = false;
                    self.seen.blocked.store(false, Ordering::SeqCst);
                }
                self.wrote(&buf[..n]);
            }
            Poll::Pending if !self.off && !self.blocked => {
                self.blocked = true;
                self.seen.blocked.store(true, Ordering::SeqCst);
            }
            _ => {}
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
