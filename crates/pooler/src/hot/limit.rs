//! The admission limit in the hot core (docs/design.md, "Admission"): which holds are timed
//! for the limiter, the limiter fed the holds that end and the housekeeping tick, its
//! settings, and the hand-off of free members to waiters the limit lets through. Invariant 5
//! of the hot core (`hot.rs`) is kept here.

use std::task::Waker;
use std::time::Duration;

use tokio::time::Instant;

use super::{Hot, Locked};
use crate::admission::{AdmissionMode, AdmissionStatus, Heard, LimitMove, Limiter};
use crate::config::PoolConfig;

/// What a timed hold's end did to the admission limit.
#[derive(Debug, Default)]
pub(crate) struct Judged {
    /// How the limit moved, if the hold ended a batch.
    pub(crate) moved: Option<LimitMove>,
    /// The limit is higher than before the hold ended.
    pub(crate) raised: bool,
    /// Waiters a grown limit lets through, to wake after the lock.
    pub(crate) wakers: Vec<Waker>,
    /// A new derived queue target, for the holders outside the hot core (the shedder).
    pub(crate) target: Option<Duration>,
}

impl<T, E> Hot<T, E> {
    /// With the admission settings of a new pool.
    pub(crate) fn with_admission(
        self,
        mode: AdmissionMode,
        max: usize,
        queue_target: Option<Duration>,
    ) -> Self {
        let wakers = self.lock().set_admission(mode, max, queue_target);
        debug_assert!(wakers.is_empty(), "a new pool has no waiter");
        self
    }

    /// [`give`](Self::give), the admission limiter first hearing the latency the hold
    /// `measured` (while the member still counts in use), under one lock: what the limiter
    /// did with the limit and the queue target, if the hold ended a batch (its wakers
    /// woken).
    pub(crate) fn give_measured(
        &self,
        member: T,
        now: u64,
        measured: Option<Heard>,
    ) -> (Result<(), T>, Judged) {
        let mut h = self.lock();
        let mut judged = match measured {
            Some(measured) => h.measured(measured, now),
            None => Judged::default(),
        };
        let given = h.give(member, now).map(|waker| judged.wakers.extend(waker));
        drop(h);
        judged.wakers.drain(..).for_each(Waker::wake);
        (given, judged)
    }

    /// Waiters a new member could serve now ([`View::wanting`](super::View::wanting)).
    pub(crate) fn wanting(&self) -> usize {
        self.lock().view().wanting()
    }

    /// The queue target in force while admission is on.
    pub(crate) fn queue_target(&self) -> Option<Duration> {
        self.lock().queue_target()
    }
}

impl<T, E> Locked<'_, T, E> {
    /// Whether this hold is timed, and for how many holds it stands (0: not timed). With
    /// the use histogram live, the first hold after a new housekeeping tick is timed,
    /// standing for itself and the holds since the last timed one; ticks come every 100 ms,
    /// so a busy pool times about ten holds a second and a quiet one every hold. With
    /// admission on, the same, and every hold while the limit is pressed (`pressed`: more
    /// than half of it was in use in this tick or the last), for the limiter. Below half,
    /// the limit does not bind and the tick brings it down ([`ticked`](Self::ticked)), so a
    /// tick's sample keeps the base latency fresh and the uncontended take costs no clock
    /// read (docs/design.md, "Admission"). Whole ticks are timed, not the holds begun with
    /// more in use, which would see the database busier than it is.
    #[inline(always)]
    pub(super) fn sample(&mut self) -> u32 {
        if !self.0.timing {
            return 0;
        }
        self.sample_on()
    }

    /// [`sample`](Self::sample) with sampling on: kept out of the take's fast path.
    #[inline(never)]
    fn sample_on(&mut self) -> u32 {
        let s = &mut *self.0;
        if s.limiter.is_some() && (s.pressed || s.in_use.saturating_mul(2) > s.limit) {
            s.pressed = true;
            s.sampled_at = s.tick;
            return std::mem::take(&mut s.unsampled).saturating_add(1);
        }
        if s.tick == s.sampled_at {
            s.unsampled = s.unsampled.saturating_add(1);
            return 0;
        }
        s.sampled_at = s.tick;
        std::mem::take(&mut s.unsampled).saturating_add(1)
    }

    /// The housekeeping tick came: the next hold is timed, and the limiter judges whether
    /// the tick used its limit (see [`Limiter::idle`]); what it did with the limit, if it
    /// moved. Lowering the limit lets no waiter through: nothing to wake. Called right
    /// after the tick's look at the peak ([`take_peak`](Self::take_peak)), so that `peak`
    /// holds only this tick's.
    pub(crate) fn ticked(&mut self) -> Option<LimitMove> {
        let s = &mut *self.0;
        s.tick += 1;
        let peak = std::mem::replace(&mut s.tick_peak, s.in_use).max(s.peak);
        let moved = s.limiter.as_mut()?.idle(peak);
        if moved.is_some() {
            s.limit = s.limiter.as_ref().map_or(usize::MAX, Limiter::limit);
        }
        s.pressed = peak.saturating_mul(2) > s.limit;
        debug_assert!(self.holds());
        moved
    }

    /// New admission settings (a pool's start or a reconfigure): the limiter for `mode`
    /// (kept when the mode stays, its `max` updated), and the `queue_target` key — none
    /// derives the target from the limiter's baseline (docs/design.md, "Admission"). Turned
    /// off, or raised, waiters get free members: their wakers.
    pub(crate) fn set_admission(
        &mut self,
        mode: AdmissionMode,
        max: usize,
        queue_target: Option<Duration>,
    ) -> Vec<Waker> {
        let s = &mut *self.0;
        let bound_by = s.lifo_after;
        s.limiter = Limiter::for_mode(mode, max, s.limiter.take());
        s.limit = s.limiter.as_ref().map_or(usize::MAX, Limiter::limit);
        s.pressed = false;
        s.timing = s.sample || s.limiter.is_some();
        s.derive_target = queue_target.is_none() && s.limiter.is_some();
        s.lifo_after = s.limiter.as_ref().map(|l| {
            queue_target
                .or_else(|| l.derived_target())
                .unwrap_or(PoolConfig::ADMISSION_QUEUE_TARGET)
        });
        s.queued_since = match (s.lifo_after, s.waiters.is_empty()) {
            (Some(_), false) => s.queued_since.or_else(|| Some(Instant::now())),
            _ => None,
        };
        let mut wakers = Vec::new();
        self.hand_free(&mut wakers);
        // Admission turned on or off, or its queue target changed: the takes still waiting
        // bound their waits anew (a take under admission waits twice the target at most;
        // docs/design.md, "Admission").
        let s = &mut *self.0;
        if s.lifo_after != bound_by {
            wakers.extend(s.waiters.rearm());
        }
        debug_assert!(self.holds());
        wakers
    }

    /// A timed hold is ending at `now` (a clock stamp; its member still counted in use):
    /// what the limiter did with the limit, if the hold ended a batch, and the wakers of
    /// waiters it let through.
    pub(crate) fn measured(&mut self, held: Heard, now: u64) -> Judged {
        let s = &mut *self.0;
        let mut judged = Judged::default();
        let Some(limiter) = s.limiter.as_mut() else {
            return judged;
        };
        // The limit moves only when a batch ends.
        judged.moved = limiter.sample(held, s.in_use, now);
        if judged.moved.is_some() {
            judged.raised = limiter.limit() > s.limit;
            s.limit = limiter.limit();
            if s.derive_target
                && let Some(target) = limiter.derived_target()
                && s.lifo_after != Some(target)
            {
                s.lifo_after = Some(target);
                judged.target = Some(target);
            }
            self.hand_free(&mut judged.wakers);
        }
        debug_assert!(self.holds());
        judged
    }

    /// The queue target in force while admission is on (see [`set_admission`](Self::set_admission)).
    pub(crate) fn queue_target(&self) -> Option<Duration> {
        self.0.lifo_after
    }

    /// What the admission limiter says of itself, while admission is on.
    pub(crate) fn admission(&self) -> Option<AdmissionStatus> {
        let s = &*self.0;
        s.limiter
            .as_ref()
            .map(|l| l.status(s.in_use, s.lifo_after.unwrap_or_default()))
    }

    /// The admission limit (`usize::MAX`: none).
    #[cfg(all(test, not(pooler_loom)))]
    pub(crate) fn limit(&self) -> usize {
        self.0.limit
    }

    /// Hands free members to waiters while the limit allows (after it rose, or a member in
    /// use left); their wakers.
    pub(super) fn hand_free(&mut self, wakers: &mut Vec<Waker>) {
        while self.0.in_use < self.0.limit && !self.0.waiters.is_empty() {
            let Some(member) = self.pop(false) else {
                break;
            };
            match self.serve(member) {
                Ok(waker) => wakers.extend(waker),
                Err(member) => {
                    // Nobody to serve after all: back where it was, not in use.
                    self.0.in_use -= 1;
                    self.0.free.push_back(member);
                    break;
                }
            }
        }
    }
}
