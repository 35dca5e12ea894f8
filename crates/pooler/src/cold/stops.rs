//! The cold engine's stops, deaths and close: a member's status moves to `Stopping` and its
//! slot ends once stopped; a death is marked once; a replacement owed is counted for the
//! refill. The invariants are the engine's (`cold.rs`).

use super::{Cold, Death, Status};
use crate::held::Key;
use crate::hot::View;

impl<P> Cold<P> {
    pub(super) fn set_status(&mut self, key: Key, to: Status) {
        let slot = &mut self.slots[key];
        let from = std::mem::replace(&mut slot.status, to);
        if from == Status::Live
            && let Some(at) = slot.expires_at
        {
            self.expiries.remove(at, key, slot.id);
            if let Some(overlap) = self.limits.overlap {
                self.early
                    .remove(at.checked_sub(overlap).unwrap_or(at), key, slot.id);
            }
        }
        for (status, up) in [(from, false), (to, true)] {
            let count = match status {
                Status::Starting => &mut self.starting,
                Status::Live => &mut self.live,
                Status::Stopping => &mut self.stopping,
            };
            if up {
                *count += 1;
            } else {
                *count -= 1;
            }
        }
    }

    /// A live member (the caller took it out of the hot core) is to be stopped. Returns its
    /// payload.
    pub(crate) fn begin_stop(&mut self, key: Key) -> Option<P> {
        debug_assert_eq!(self.slots[key].status, Status::Live);
        self.set_status(key, Status::Stopping);
        debug_assert!(self.holds());
        self.slots[key].payload.take()
    }

    /// A stop ended (or gave up at `member_shutdown`): the slot is free.
    pub(crate) fn stop_done(&mut self, key: Key) {
        debug_assert_eq!(self.slots[key].status, Status::Stopping);
        self.slots.remove(key);
        self.stopping -= 1;
        self.excess = self.excess.saturating_sub(1);
        debug_assert!(self.holds());
    }

    /// A destroyed member is to be replaced once there is room.
    pub(crate) fn owe_replacement(&mut self) {
        self.owed = (self.owed + 1).min(self.limits.max_count);
    }

    /// A member's death signal. `id` guards against key reuse.
    pub(crate) fn mark_dead(&mut self, key: Key, id: u64) -> Death {
        let Some(slot) = self.slots.get_mut(key).filter(|s| s.id == id) else {
            return Death::Ignored;
        };
        match slot.status {
            Status::Stopping => Death::Ignored,
            Status::Starting => {
                slot.dead = true;
                Death::Starting
            }
            Status::Live => Death::Live,
        }
    }

    /// Closes the engine: no more starts.
    pub(crate) fn close(&mut self) {
        self.closed = true;
    }

    /// Whether nothing is starting or stopping (and, if `with_in_use`, nothing is in use).
    pub(crate) fn is_drained(&self, view: View, with_in_use: bool) -> bool {
        self.starting == 0 && self.stopping == 0 && (!with_in_use || view.in_use == 0)
    }
}
