//! The checkout path: one take attempt, a hand-off through the queue, a return. A take that
//! finds a member and a return that finds no member needing care take the hot lock alone
//! and read nothing else but relaxed atomics ([`Features`](crate::features)); everything
//! else goes through a [`step`](crate::step). The loop around attempts — retries, waiting,
//! idle checks, deadlines — is the take's own (`take.rs`); the return is `give_back.rs`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Empty, StartError, TakeError};
use crate::features::Features;
use crate::held::Held;
use crate::hot::{Found, Refused, Wait, wait};
use crate::leak::Caller;
use crate::manager::{self, Manager};
use crate::member::{Member, Origin};
use crate::metrics::Reason;
use crate::shared::Shared;
use crate::waiters::WaitKey;

mod give_back;
mod refusals;

/// When a take stops waiting, for the fail-fast rule (docs/design.md, "Failing starts").
#[derive(Debug, Clone, Copy)]
pub(crate) enum Deadline {
    /// This long after the attempt.
    In(Duration),
    /// At this instant (a later attempt of the same take).
    At(Instant),
    /// Never (a take with no timeout).
    Never,
}

impl Deadline {
    /// A take's first deadline: `timeout` after its first attempt, or none.
    pub(crate) fn after(timeout: Option<Duration>) -> Self {
        timeout.map_or(Deadline::Never, Deadline::In)
    }

    fn at(self, now: Instant) -> Instant {
        match self {
            // Past the longest key, a deadline is never reached: no deadline (and no
            // `Instant` overflow).
            Deadline::In(d) if d <= crate::time::MAX_TIME => now + d,
            Deadline::At(at) => at,
            Deadline::In(_) | Deadline::Never => now + crate::time::MAX_TIME,
        }
    }
}

/// One take attempt's outcome; `K` is what a queued take holds ([`Wait::Key`]: nothing that
/// exists for a take that never waits).
pub(crate) enum Attempt<M: Manager, K = WaitKey> {
    /// A member, ready for its taker.
    Member(Member<M>),
    /// A member idle past `idle_check_threshold`: check it first.
    Check(Member<M>),
    /// A place in the queue; whether this attempt started members (it grew the pool).
    Queued(K, bool),
    Failed(TakeError),
    /// The member found was unusable and is being replaced: attempt again.
    Again,
}

/// What a take that found nothing free decided under both locks.
enum Decided<T, K> {
    /// A member came back meanwhile.
    Found(Held<T>, u32),
    Closed,
    /// The admission limit's members (this many) are in use meanwhile: the queue's answer if
    /// the take may wait (no start would help), and `queue_max`.
    OverLimit {
        limit: usize,
        queued: Option<Result<K, Refused>>,
        queue_max: usize,
    },
    /// Why no member, and the queue's answer if the take may wait.
    Empty {
        why: Empty,
        queued: Option<Result<K, Refused>>,
        grew: bool,
        last_error: Option<StartError>,
        queue_max: usize,
    },
}

/// A member the fast path found fit for its taker, its hand-over stamped: its guard is built
/// only where the take returns it ([`Shared::guard`]), so the guard is written once, in place,
/// instead of built and then moved through each caller's result.
#[must_use = "a ready member not guarded is never given back"]
pub(crate) struct Ready<T>(Held<T>);

impl<M: Manager> Shared<M> {
    /// A take's first attempt (`counted`): the member if the fast path found one, else what
    /// the attempt came to. Its deadline, `timeout` from now, is built only off the fast path.
    #[inline(always)]
    pub(crate) fn first<W: Wait>(
        self: &Arc<Self>,
        wait: W,
        timeout: Option<Duration>,
    ) -> Result<Ready<M::Member>, Attempt<M, W::Key>> {
        let flags = self.features.flags();
        let zero_wait = W::QUEUES && flags & Features::ZERO_WAITS != 0;
        match self.hot.take(wait, true, zero_wait) {
            Found::Member(held, timed) => match self.fast_member(held, false, timed) {
                Ok(member) => Ok(member),
                Err(held) => Err(self.taken_with_features(held, wait, false, timed)),
            },
            Found::Full => Err(Attempt::Failed(self.at_capacity())),
            found => Err(self.found(found, wait, Deadline::after(timeout))),
        }
    }

    /// A later attempt of the same take (not counted as a new one).
    pub(crate) fn again<W: Wait>(
        self: &Arc<Self>,
        wait: W,
        deadline: Deadline,
    ) -> Attempt<M, W::Key> {
        match self.hot.take(wait, false, false) {
            Found::Member(held, timed) => self.taken(held, wait, false, timed),
            found => self.found(found, wait, deadline),
        }
    }

    /// What a take that found no member does next.
    #[cold]
    pub(crate) fn found<W: Wait>(
        self: &Arc<Self>,
        found: Found<Held<M::Member>, W::Key>,
        wait: W,
        deadline: Deadline,
    ) -> Attempt<M, W::Key> {
        match found {
            Found::Member(held, timed) => self.taken(held, wait, false, timed),
            Found::Queued(key) => Attempt::Queued(key, false),
            Found::Full => Attempt::Failed(self.at_capacity()),
            Found::QueueFull(queue_max) => Attempt::Failed(self.queue_full(queue_max)),
            Found::OverLimit(limit) => Attempt::Failed(self.over_limit(limit)),
            Found::Closed => Attempt::Failed(self.closed_error()),
            Found::Cold => self.attempt_cold(wait, deadline),
        }
    }

    /// A member out of the hot core, for its taker. `vetted`: it was handed over by a return
    /// or a start that already asked `is_broken`. `timed`: the hold is timed for the use
    /// histogram, standing for this many (0: not timed).
    #[inline]
    fn taken<W: Wait>(
        self: &Arc<Self>,
        held: Held<M::Member>,
        wait: W,
        vetted: bool,
        timed: u32,
    ) -> Attempt<M, W::Key> {
        match self.fast_member(held, vetted, timed) {
            Ok(ready) => Attempt::Member(self.guard(ready)),
            Err(held) => self.taken_with_features(held, wait, vetted, timed),
        }
    }

    /// A member handed over through the queue: its hold is timed for the use histogram and
    /// the admission limiter (queued takes are slow anyway, and each stands for itself).
    pub(crate) fn collected(self: &Arc<Self>, held: Held<M::Member>) -> Attempt<M> {
        let admits = self.features.flags() & Features::ADMIT != 0;
        let timed = u32::from(self.metrics.use_live() || admits);
        self.taken(held, wait::Queue, true, timed)
    }

    /// The member ready for its taker when no feature needs a look at it, its hold is not
    /// timed, and it is fit; otherwise it comes back for
    /// [`taken_with_features`](Self::taken_with_features).
    #[inline(always)]
    pub(crate) fn fast_member(
        self: &Arc<Self>,
        held: Held<M::Member>,
        vetted: bool,
        timed: u32,
    ) -> Result<Ready<M::Member>, Held<M::Member>> {
        // A member's death takes it off the free list, but a death that races its return can
        // still land it there (the return checked before the death marked it): look again.
        // One handed over through the queue was asked `is_broken` when it was handed over.
        if self.features.flags() & Features::SLOW | u64::from(timed) == 0
            && !held.meta.is_dead()
            && (vetted || !manager::is_broken(&self.manager, &held.value, &self.name))
        {
            held.meta.set_since(self.clock.coarse());
            Ok(Ready(held))
        } else {
            Err(held)
        }
    }

    /// The guard of a member [`fast_member`](Self::fast_member) made ready, built where it
    /// is returned (see [`Ready`]).
    #[inline(always)]
    pub(crate) fn guard(self: &Arc<Self>, ready: Ready<M::Member>) -> Member<M> {
        Member::new(Arc::clone(self), ready.0, Origin::Taken, 0)
    }

    /// [`taken`](Self::taken) when a feature needs more than the fast path does.
    #[cold]
    pub(crate) fn taken_with_features<W: Wait>(
        self: &Arc<Self>,
        held: Held<M::Member>,
        _: W,
        vetted: bool,
        timed: u32,
    ) -> Attempt<M, W::Key> {
        let flags = self.features.flags();
        let exact =
            timed > 0 || flags & (Features::LIFETIMES | Features::LEAKS | Features::IDLE) != 0;
        let stamp = if exact {
            self.clock.read()
        } else {
            self.clock.coarse()
        };
        if held.meta.is_dead()
            || (!vetted && manager::is_broken(&self.manager, &held.value, &self.name))
        {
            tracing::debug!(pool = %self.name, member = held.meta.id, "member found broken or dead at take");
            // Found unusable before anyone used it: a free member's removal.
            self.replace(held, Reason::Crashed, false);
            return Attempt::Again;
        }
        if flags & Features::LIFETIMES != 0 && held.meta.expired(stamp) {
            // The lifetime timer was late: retire it here and take again.
            self.replace(held, Reason::MaxLifetime, false);
            return Attempt::Again;
        }
        if flags & Features::GROW != 0 {
            self.auto_grow();
        }
        let idle_for = Duration::from_nanos(stamp.saturating_sub(held.meta.since()));
        let check = W::QUEUES
            && self
                .features
                .idle_check()
                .is_some_and(|threshold| idle_for >= threshold);
        held.meta.set_since(stamp);
        let member = Member::new(Arc::clone(self), held, Origin::Taken, timed);
        if check {
            Attempt::Check(member)
        } else {
            Attempt::Member(member)
        }
    }

    /// Records a member handed to `caller` for leak detection, when that is on.
    #[inline]
    pub(crate) fn note_taken(&self, member: &Member<M>, caller: Caller) {
        if self.features.flags() & Features::LEAKS != 0 {
            self.leaks
                .taken(Member::id(member), Member::taken_at(member), caller);
        }
    }

    /// A take that found nothing free while a start could follow: the cold engine decides.
    #[cold]
    fn attempt_cold<W: Wait>(self: &Arc<Self>, wait: W, deadline: Deadline) -> Attempt<M, W::Key> {
        let decided = self.step(|s| {
            // A member may have come back meanwhile, or the limit's members be in use.
            match s.hot.take(wait::No, false, false) {
                Found::Member(held, timed) => return Decided::Found(held, timed),
                Found::Closed => return Decided::Closed,
                Found::OverLimit(limit) => {
                    let queued = W::QUEUES.then(|| W::join(&mut s.hot));
                    let queue_max = s.hot.queue_max();
                    return Decided::OverLimit {
                        limit,
                        queued,
                        queue_max,
                    };
                }
                _ => {}
            }
            let deadline = if W::QUEUES { deadline.at(s.now) } else { s.now };
            let (why, starts) = s.cold.engine.take(s.now, deadline, s.hot.view());
            let grew = !starts.is_empty();
            s.effects.starts.push(starts);
            let queued = match why {
                Empty::Closed | Empty::Unavailable => None,
                _ => W::QUEUES.then(|| W::join(&mut s.hot)),
            };
            Decided::Empty {
                why,
                queued,
                grew,
                last_error: s.cold.engine.last_error().cloned(),
                queue_max: s.hot.queue_max(),
            }
        });
        match decided {
            Decided::Found(held, timed) => self.taken(held, wait, false, timed),
            Decided::Closed => Attempt::Failed(self.closed_error()),
            Decided::OverLimit {
                limit,
                queued,
                queue_max,
            } => match queued {
                None | Some(Err(Refused::NoQueue)) => Attempt::Failed(self.over_limit(limit)),
                Some(Ok(key)) => Attempt::Queued(key, false),
                Some(Err(Refused::QueueFull)) => Attempt::Failed(self.queue_full(queue_max)),
                Some(Err(Refused::Closed)) => Attempt::Failed(self.closed_error()),
            },
            Decided::Empty {
                why,
                queued,
                grew,
                last_error,
                queue_max,
            } => match queued {
                None | Some(Err(Refused::NoQueue)) => {
                    Attempt::Failed(self.refused(why, last_error))
                }
                Some(Ok(key)) => Attempt::Queued(key, grew),
                Some(Err(Refused::QueueFull)) => Attempt::Failed(self.queue_full(queue_max)),
                Some(Err(Refused::Closed)) => Attempt::Failed(self.closed_error()),
            },
        }
    }

    /// Starts more members if `auto_grow_threshold` says so.
    fn auto_grow(&self) {
        self.step(|s| {
            let starts = s.cold.engine.auto_grow(s.now, s.hot.view());
            s.effects.starts.push(starts);
        });
    }

    /// A queued taker gives up ([`Hot::give_up`](crate::hot::Hot::give_up)); a member
    /// handed to it that a closed pool refuses is stopped.
    pub(crate) fn give_up(&self, key: WaitKey) {
        if let Some(held) = self.hot.give_up(key, self.clock.coarse()) {
            self.stop_after_close(held);
        }
    }
}
