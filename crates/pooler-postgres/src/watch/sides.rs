//! The two directions of the stream layer: the client's requests (counted, their SQL
//! scanned) and the server's answers (counted, copy modes and reported parameters noted).

use std::sync::atomic::Ordering;

use super::Seen;
use super::framing::{Header, Visit};
use crate::role::Listen;
use crate::session::{Dirt, Scan};
use crate::verdicts::Verdicts;

/// The code of SSLRequest (and GSSENCRequest one above it): the server answers it with a
/// single unframed byte.
pub(super) const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;

/// The client's side: requests counted, SQL scanned.
pub(super) struct Writer<'a> {
    pub(super) seen: &'a Seen,
    pub(super) unframed: &'a mut u8,
    pub(super) syncs: &'a mut u64,
    pub(super) doubtful: &'a mut u64,
    pub(super) scan: &'a mut Scan,
    pub(super) verdicts: &'a mut Verdicts,
}

impl Visit for Writer<'_> {
    #[inline(always)]
    fn header(&mut self, header: Header) -> bool {
        let seen = self.seen;
        match header {
            Header::Untyped(SSL_REQUEST | GSSENC_REQUEST) => {
                *self.unframed = 1;
                true // the startup follows, untyped
            }
            Header::Untyped(_) => {
                // The startup: answered by the first ReadyForQuery.
                seen.requested(true);
                false
            }
            Header::Typed(kind) => {
                match kind {
                    b'Q' | b'F' => {
                        *self.syncs = 0;
                        seen.requested(false);
                        if kind == b'Q' {
                            self.scan.begin(false, seen.heard.backslash_quotes());
                        }
                    }
                    b'P' => self.scan.begin(true, seen.heard.backslash_quotes()),
                    b'B' | b'C' => self.verdicts.begin(kind),
                    b'E' => *self.syncs = 0,
                    b'S' => {
                        *self.syncs += 1;
                        seen.requested(false);
                    }
                    // CopyDone or CopyFail: the Syncs sent while the server was in copy-in
                    // mode were ignored.
                    b'c' | b'f' if seen.in_copy.load(Ordering::Acquire) => {
                        seen.in_copy.store(false, Ordering::Release);
                        seen.expected.fetch_sub(*self.syncs, Ordering::AcqRel);
                        *self.syncs = 0;
                    }
                    // Ended before the server's answer to the Execute was read (a `copy_in`
                    // future dropped early): that answer decides.
                    b'c' | b'f' => *self.doubtful += std::mem::take(self.syncs),
                    _ => {}
                }
                false
            }
        }
    }

    #[inline(always)]
    fn body(&mut self, kind: u8, payload: &[u8]) {
        match kind {
            b'Q' | b'P' => {
                self.scan.feed(payload);
                let dirt = self.scan.verdict(|| self.seen.declared()).0;
                if dirt != 0 {
                    self.seen.dirt.fetch_or(dirt, Ordering::AcqRel);
                    if kind == b'P' {
                        self.verdicts.parsed(self.scan.statement(), dirt);
                    }
                }
            }
            // A Bind of a statement whose text left state leaves it again.
            b'B' | b'C' => {
                let dirt = self.verdicts.feed(payload);
                if dirt != 0 {
                    self.seen.dirt.fetch_or(dirt, Ordering::AcqRel);
                }
            }
            _ => {}
        }
    }
}

/// The server's side: answers counted, copy-in mode and reported parameters noted.
pub(super) struct Reader<'a> {
    pub(super) seen: &'a Seen,
    pub(super) doubtful: &'a mut u64,
    pub(super) listen: &'a mut Listen,
}

impl Visit for Reader<'_> {
    #[inline(always)]
    fn header(&mut self, header: Header) -> bool {
        let seen = self.seen;
        if let Header::Typed(kind) = header
            && Listen::hears(kind)
        {
            self.listen.begin(kind);
        }
        match header {
            Header::Typed(b'G') if *self.doubtful > 0 => {
                // The copy began, and the client has ended it already: the Syncs it sent in
                // between were ignored.
                seen.expected
                    .fetch_sub(std::mem::take(self.doubtful), Ordering::AcqRel);
            }
            Header::Typed(b'G') => seen.in_copy.store(true, Ordering::Release),
            // CopyOutResponse: the copy's rows follow until the server's CopyDone.
            // CopyBothResponse (`W`) too: rows may follow the same way.
            Header::Typed(b'H' | b'W') => seen.copy_out.store(true, Ordering::Release),
            Header::Typed(b'c') => seen.copy_out.store(false, Ordering::Release),
            // ErrorResponse: the busy period under way is not a latency.
            Header::Typed(b'E') => seen.errored(),
            // A parameter the server reports changed after the startup (the startup's own
            // reports come before its ReadyForQuery).
            Header::Typed(b'S') if seen.answered.load(Ordering::Relaxed) > 0 => {
                seen.dirt.fetch_or(Dirt::SETTING, Ordering::AcqRel);
            }
            _ => {}
        }
        false
    }

    #[inline(always)]
    fn body(&mut self, kind: u8, payload: &[u8]) {
        if Listen::hears(kind) {
            self.listen.feed(payload, &self.seen.heard);
        }
        if kind == b'Z'
            && let Some(&status) = payload.first()
        {
            // The answer to a COPY that failed before copy-in mode: its Syncs count.
            *self.doubtful = 0;
            self.seen.copy_out.store(false, Ordering::Release);
            self.seen.status.store(status, Ordering::Release);
            self.seen.answered();
        }
    }
}
