//! The protocol's message framing, followed in one direction (see the parent module's docs).

/// Follows one direction's framing: a type byte (none for the untyped messages the client
/// sends first), a big-endian length that counts itself, the payload.
#[derive(Debug, Default)]
pub(super) struct Framing {
    /// Header bytes gathered so far.
    header: [u8; 8],
    have: usize,
    /// Payload bytes of the current message still to come.
    rest: u64,
    /// The current message's type (0 while untyped).
    kind: u8,
}

/// What a finished header says.
pub(super) enum Header {
    /// A typed message of this kind.
    Typed(u8),
    /// An untyped message with this code (startup version, SSLRequest...).
    Untyped(u32),
}

/// What a direction does with the messages going by.
pub(super) trait Visit {
    /// A message's header is complete; for an untyped one, `true` says another untyped
    /// message follows.
    fn header(&mut self, header: Header) -> bool;
    /// The next piece of a typed message's payload, in order.
    fn body(&mut self, kind: u8, payload: &[u8]);
}

impl Framing {
    /// Feeds `bytes`; `untyped` says whether the next message has no type byte. Tells `visit`
    /// of each header completed and each piece of payload.
    ///
    /// Always inlined, as are the visits it makes: run for every read and write, each
    /// message's calls cost a query about 260 instructions (docs/design.md, "Real
    /// backends").
    #[inline(always)]
    pub(super) fn feed(&mut self, mut bytes: &[u8], untyped: &mut u8, visit: &mut impl Visit) {
        while !bytes.is_empty() {
            if self.rest > 0 {
                let skip = usize::try_from(self.rest)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                if self.kind != 0 {
                    visit.body(self.kind, &bytes[..skip]);
                }
                self.rest -= skip as u64;
                bytes = &bytes[skip..];
                continue;
            }
            if *untyped == 0 && self.have == 0 && bytes.len() >= 5 {
                // The common case: a typed header whole in this read, parsed where it lies,
                // and most often its whole message too, passed on at once.
                let kind = bytes[0];
                let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
                let whole = usize::try_from(len).map_or(usize::MAX, |len| len.saturating_add(1));
                if len >= 4 && bytes.len() >= whole {
                    visit.header(Header::Typed(kind));
                    if whole > 5 {
                        visit.body(kind, &bytes[5..whole]);
                    }
                    bytes = &bytes[whole..];
                } else {
                    self.typed(kind, len, visit);
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
            self.have = 0;
            if size == 8 {
                *untyped -= 1;
                let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
                let code = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
                self.kind = 0;
                self.rest = u64::from(len.saturating_sub(8));
                if visit.header(Header::Untyped(code)) {
                    *untyped += 1;
                }
            } else {
                let len = u32::from_be_bytes([h[1], h[2], h[3], h[4]]);
                self.typed(h[0], len, visit);
            }
        }
    }

    /// A typed message's header is complete: its kind, and its length (which counts itself).
    #[inline]
    fn typed(&mut self, kind: u8, len: u32, visit: &mut impl Visit) {
        self.kind = kind;
        self.rest = u64::from(len.saturating_sub(4));
        visit.header(Header::Typed(kind));
    }
}
