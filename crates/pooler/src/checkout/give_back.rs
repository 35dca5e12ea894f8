//! The return: a member given back (`Member`'s drop, `fail`, `detach`) goes to a waiter
//! or the free list by the fast path when it is fit, its hold untimed and no feature needs
//! a look at it; otherwise by the slow path, which times the hold for the histogram and
//! the admission limiter, checks leaks and lifetimes, and replaces or recycles it.

use std::time::Duration;

use tokio::time::Instant;

use crate::admission::Heard;
use crate::features::Features;
use crate::health::{Hook, vet};
use crate::held::{Held, Meta};
use crate::hot::Judged;
use crate::manager::{self, Latency, Manager, Returned};
use crate::member::{Fate, Member, Origin};
use crate::metrics::Reason;
use crate::shared::Shared;
use crate::step::Why;

#[derive(Debug, Clone, Copy)]
struct Ending {
    fate: Fate,
    origin: Origin,
    /// What the manager said of the member.
    returned: Returned,
    /// The hold is timed for the use histogram, standing for this many (0: not timed).
    timed: u32,
}

impl<M: Manager> Shared<M> {
    /// [`give_back`](Self::give_back), when a feature or the member's state needs more than
    /// the fast path does.
    #[cold]
    #[inline(never)]
    fn give_back_slow(&self, held: Held<M::Member>, end: Ending) {
        self.give_back_at(held, end, self.clock.read(), None);
    }

    /// [`give_back_slow`](Self::give_back_slow) at `stamp` (an exact read), with the latency
    /// `measured` for the admission limiter (heard while the member still counts in use).
    fn give_back_at(
        &self,
        held: Held<M::Member>,
        end: Ending,
        stamp: u64,
        measured: Option<Heard>,
    ) {
        let Ending {
            fate,
            origin,
            returned,
            timed,
        } = end;
        if timed > 0 && origin == Origin::Taken {
            // A timed hold was stamped exactly when it was taken.
            let (since, now) = (held.meta.since(), stamp);
            self.metrics
                .used(self.clock.instant(since), self.clock.instant(now), timed);
        }
        if self.features.flags() & Features::LEAKS != 0 && origin == Origin::Taken {
            self.leak_came_back(held.meta.id);
        }
        let reason = match fate {
            Fate::Failed => Some(Reason::Failed),
            Fate::Crashed => Some(Reason::Crashed),
            Fate::Ok if returned == Returned::Broken || held.meta.is_dead() => {
                Some(Reason::Crashed)
            }
            Fate::Ok if held.meta.expired(stamp) => Some(Reason::MaxLifetime),
            Fate::Ok => None,
        };
        match reason {
            Some(reason) => {
                self.hear(measured, stamp);
                self.replace(held, reason, origin != Origin::Checked);
            }
            None if returned == Returned::Recycle => {
                self.hear(measured, stamp);
                self.spawn_recycle(held);
            }
            None => {
                held.meta.set_since(stamp);
                let (given, judged) = self.hot.give_measured(held, stamp, measured);
                self.judged(judged);
                if let Err(held) = given {
                    self.stop_after_close(held);
                }
            }
        }
    }

    /// The admission limiter hears a latency measured by a use that ended at `stamp`.
    fn hear(&self, measured: Option<Heard>, stamp: u64) {
        let Some(measured) = measured else {
            return;
        };
        let mut judged = self.hot.lock().measured(measured, stamp);
        judged.wakers.drain(..).for_each(std::task::Waker::wake);
        self.judged(judged);
    }

    /// What follows a judged batch outside the hot core (its wakers woken): the count by
    /// what the limit did, members started for the waiters a raised limit lets through when
    /// none is free for them, and a new derived queue target for the shedder.
    fn judged(&self, judged: Judged) {
        debug_assert!(judged.wakers.is_empty(), "woken first");
        if let Some(moved) = judged.moved {
            self.metrics.limit_judged(moved);
        }
        // Raised: the free members went to the waiters it lets through under the hot lock;
        // the rest wait for members that may not exist yet, which the cold engine starts as
        // for any waiter (docs/design.md, "Admission").
        if judged.raised && self.hot.wanting() > 0 {
            self.step(|s| s.refill());
        }
        if let Some(target) = judged.target {
            self.shedder.retarget(target);
        }
    }

    /// A timed hold ends in a pool with admission on (docs/design.md, "Admission"): the
    /// limiter hears the latency its use measured — the manager's measure, or the hold (a use
    /// that ended in failure measures nothing) — while the member still counts in use, then
    /// it is returned as any other.
    #[cold]
    #[inline(never)]
    fn give_back_admitted(&self, held: Held<M::Member>, fate: Fate, timed: u32) {
        let returned = match fate {
            Fate::Ok => manager::returned(&self.manager, &held.value, &self.name, true),
            Fate::Failed | Fate::Crashed => Returned::Fit,
        };
        let latency = if fate == Fate::Ok && returned != Returned::Broken {
            manager::latency(&self.manager, &held.value, &self.name)
        } else {
            Latency::Unmeasured
        };
        let now = self.clock.read();
        let hold = Duration::from_nanos(now.saturating_sub(held.meta.since()));
        let measured = match latency {
            Latency::Hold => Some(Heard::Took(hold)),
            Latency::Measured(took) => Some(Heard::Took(took)),
            Latency::Late => Some(Heard::Late(hold)),
            Latency::Unmeasured => None,
        };
        let end = Ending {
            fate,
            origin: Origin::Taken,
            returned,
            timed,
        };
        self.give_back_at(held, end, now, measured);
    }

    /// An untimed use taken under admission ends in good order: the manager is asked what it
    /// measured all the same, and the answer dropped, so a measure never carries over to a
    /// later, timed use (docs/design.md, "Admission").
    #[inline]
    fn unheard(&self, held: &Held<M::Member>, origin: Origin, returned: Returned) {
        if origin == Origin::Taken && returned != Returned::Broken {
            let _ = manager::latency(&self.manager, &held.value, &self.name);
        }
    }

    /// [`give_back`](Self::give_back) off its fast path: a member failed, crashed or dead, a
    /// hold timed, or a feature that needs a look at it. Out of line (as the slow paths it calls
    /// are), so the fast path keeps a small frame: 12 instructions fewer per return.
    #[cold]
    #[inline(never)]
    fn give_back_other(&self, held: Held<M::Member>, fate: Fate, origin: Origin, timed: u32) {
        let flags = self.features.flags();
        if flags & Features::ADMIT != 0 && origin == Origin::Taken && timed > 0 {
            return self.give_back_admitted(held, fate, timed);
        }
        let returned = match fate {
            Fate::Ok => manager::returned(
                &self.manager,
                &held.value,
                &self.name,
                origin == Origin::Taken,
            ),
            Fate::Failed | Fate::Crashed => Returned::Fit,
        };
        if flags & Features::ADMIT != 0 && fate == Fate::Ok {
            self.unheard(&held, origin, returned);
        }
        if fate == Fate::Ok
            && returned == Returned::Fit
            && timed == 0
            && !held.meta.is_dead()
            && (flags & Features::LIFETIMES == 0 || !held.meta.near_expiry(self.clock.coarse()))
        {
            // What needs a look is a leak record or a lifetime far from its end: neither
            // needs the exact time, unless the member was reported as a leak.
            if flags & Features::LEAKS != 0 && origin == Origin::Taken {
                self.leak_came_back(held.meta.id);
            }
            return self.put_back(held);
        }
        let end = Ending {
            fate,
            origin,
            returned,
            timed,
        };
        self.give_back_slow(held, end);
    }

    /// Member `id` came back from its holder: its leak record ends, and one reported as a
    /// possible leak is logged with how long it was held (the one return that reads the
    /// clock for it).
    fn leak_came_back(&self, id: u64) {
        if let Some(taken_at) = self.leaks.returned(id) {
            tracing::warn!(
                pool = %self.name,
                member = id,
                held_for = %crate::time::Human(self.clock.now().saturating_duration_since(taken_at)),
                "member reported as a possible leak came back"
            );
        }
    }

    /// A fit member goes back free, stamped with the coarse time (or is stopped, the pool
    /// closed).
    #[inline(always)]
    fn put_back(&self, held: Held<M::Member>) {
        let stamp = self.clock.coarse();
        held.meta.set_since(stamp);
        if let Err(held) = self.hot.give(held, stamp) {
            self.stop_after_close(held);
        }
    }

    /// A member in use comes back to a closed pool: it is stopped (or dropped in place once
    /// the close has finished).
    #[cold]
    #[inline(never)]
    pub(super) fn stop_after_close(&self, held: Held<M::Member>) {
        self.step(|s| s.stop_in_use(held, Why::Quiet));
    }

    /// Replaces a member in use (or claimed for a check): stops it, owes its replacement and
    /// starts it if there is room. `after_use` says which removal counter it goes to.
    pub(super) fn replace(&self, held: Held<M::Member>, reason: Reason, after_use: bool) {
        self.step(|s| s.stop_in_use(held, Why::Replaced { reason, after_use }));
    }

    /// Recycles a returned member in a supervised task; it stays in use meanwhile, held by a
    /// guard marked mid-use, so a panic, a close (which cancels the recycle) or a task that
    /// never runs destroys it rather than handing it out unrecycled.
    fn spawn_recycle(&self, held: Held<M::Member>) {
        let shared = self.arc();
        let mut member: Member<M> = Member::new(shared.clone(), held, Origin::Recycled, 0);
        member.set_mid_use(true);
        let closing = self.supervisor.closing.clone();
        let spawned = self.supervisor.spawn(async move {
            // Passed: dropping the guard gives it back (not recycled again).
            let recycle = vet(&shared, member, Hook::Recycle, None);
            drop(closing.run_until_cancelled(recycle).await);
        });
        self.spawned(spawned);
    }
}

/// The way a guard goes home ([`Member`]'s drop, `fail`, `detach`): methods of the pool's
/// state itself, not of a trait object, so the return's fast path is inlined into the
/// guard's drop (17 instructions fewer per take+return than through a `dyn` call).
impl<M: Manager> Shared<M> {
    /// The member comes back. `timed`: how many holds this one stands for in the use
    /// histogram (0: not timed).
    #[inline]
    pub(crate) fn give_back(&self, held: Held<M::Member>, fate: Fate, origin: Origin, timed: u32) {
        // The fast path: a member in good order, its hold not timed (admission's limiter
        // hears timed holds only), no feature that needs a look at it (`give_back_other`
        // ends a leak record, or passes a lifetime far from its end, with no clock read).
        let flags = self.features.flags();
        if fate == Fate::Ok
            && flags & Features::SLOW_RETURN | u64::from(timed) == 0
            && !held.meta.is_dead()
        {
            // The manager's hooks run before any lock; a panic in one means broken.
            let returned = manager::returned(
                &self.manager,
                &held.value,
                &self.name,
                origin == Origin::Taken,
            );
            if flags & Features::ADMIT != 0 {
                self.unheard(&held, origin, returned);
            }
            if returned == Returned::Fit {
                return self.put_back(held);
            }
            let end = Ending {
                fate,
                origin,
                returned,
                timed,
            };
            return self.give_back_slow(held, end);
        }
        self.give_back_other(held, fate, origin, timed);
    }

    /// The member leaves the pool for good ([`Member::detach`]): its slot ends and a
    /// replacement is owed. Its driver tasks are not ended.
    pub(crate) fn detach(&self, meta: &Meta, origin: Origin) {
        let flags = self.features.flags();
        if flags & Features::LEAKS != 0 && origin.taken() {
            self.leaks.returned(meta.id);
        }
        let key = meta.key;
        self.step(|s| {
            // The member leaves use and its slot ends with no stop to run; its place under
            // the admission limit goes to a waiter.
            let stamp = s.stamp();
            s.effects.wake.extend(s.hot.release(stamp));
            s.cold.engine.begin_stop(key);
            s.cold.engine.stop_done(key);
            if !s.cold.engine.is_closed() {
                s.cold.engine.owe_replacement();
                s.refill();
            }
            s.effects.drained = true;
        });
        tracing::debug!(pool = %self.name, member = meta.id, "member detached from the pool");
    }

    /// The pool's name.
    pub(crate) fn pool_name(&self) -> &str {
        &self.name
    }

    /// A clock stamp of the pool as an instant.
    pub(crate) fn instant(&self, stamp: u64) -> Instant {
        self.clock.instant(stamp)
    }
}
