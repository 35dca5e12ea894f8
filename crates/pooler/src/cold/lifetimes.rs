//! The cold engine's side of lifetimes: the soonest expiry, the members due, make before
//! break (`max_lifetime_overlap`) and its prepaid replacements, and recomputing expiries
//! after a reconfigure (invariant #5 of `cold.rs`).

use std::time::Duration;

use tokio::time::Instant;

use super::{Cold, Starts, Status};
use crate::held::Key;
use crate::hot::View;

impl<P> Cold<P> {
    /// A member retired at its `max_lifetime` is to be replaced, unless its replacement was
    /// started ahead (`max_lifetime_overlap`).
    pub(crate) fn owe_after_lifetime(&mut self) {
        if self.prepaid > 0 {
            self.prepaid -= 1;
        } else {
            self.owe_replacement();
        }
    }

    /// When the next lifetime of a live member ends.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        match (self.expiries.next(), self.early.next()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Starts, within room, a replacement for each live member whose lifetime ends within
    /// `max_lifetime_overlap` of `now` (make before break); each one started is prepaid.
    pub(crate) fn start_early(&mut self, now: Instant, view: View) -> Starts {
        let due = self.early.due(now).len();
        if due == 0 || self.closed || self.policy.failing() {
            return Starts::default();
        }
        let starts = self.reserve(due.min(self.room(view)), Duration::ZERO, now);
        self.prepaid += starts.slots.len();
        starts
    }

    /// The live members whose lifetime has ended by `now`; they leave the expiry set (a free
    /// one is then stopped by the caller, one in use is retired when it comes back).
    pub(crate) fn due(&mut self, now: Instant) -> Vec<(Key, u64)> {
        self.expiries.due(now)
    }

    /// Gives every live member a new expiry computed from its birth (`reconfigure` changed
    /// the lifetime); `expiry` also hands it to the member's payload.
    pub(crate) fn reschedule(&mut self, mut expiry: impl FnMut(Instant, &P) -> Option<Instant>) {
        self.expiries.clear();
        self.early.clear();
        for (key, slot) in &mut self.slots {
            if let (Status::Live, Some(payload)) = (slot.status, &slot.payload) {
                slot.expires_at = expiry(slot.born, payload);
                if let Some(at) = slot.expires_at {
                    self.expiries.insert(at, key, slot.id);
                    if let Some(overlap) = self.limits.overlap {
                        self.early
                            .insert(at.checked_sub(overlap).unwrap_or(at), key, slot.id);
                    }
                }
            }
        }
    }
}
