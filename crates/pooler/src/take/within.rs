//! The rest of a take that its first poll did not decide, as one boxed state machine: a loop
//! over attempts — a member to check, a place in the queue with a deadline or a bound of its
//! own to watch, an unusable member replaced and another attempt — and the two steps a take
//! that waited in place shares with it: what its turn brought ([`served`]) and the member
//! handed out ([`handed`]), with the bounds both read a deadline by.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Span;

use super::place::Waiting;
use crate::checkout::{Attempt, Deadline};
use crate::clock::{TICK, TIMER_HORIZON};
use crate::error::TakeError;
use crate::features::Features;
use crate::health::{Hook, vet};
use crate::held::Held;
use crate::hot::{Polled, wait};
use crate::leak::Caller;
use crate::manager::Manager;
use crate::member::{Member, Origin};
use crate::shared::Shared;
use crate::time::MAX_TIME;
use crate::waiters::NO_END;

/// [`TIMER_HORIZON`] and a tick (the coarse time's lag), in clock-stamp nanoseconds: a
/// queued take arms its own timer only for a deadline this near the coarse time.
pub(super) const HORIZON_AND_LAG: u64 = (TIMER_HORIZON.as_nanos() + TICK.as_nanos()) as u64;

/// A timeout longer than any key accepts ([`MAX_TIME`], a year) is a wait without a
/// deadline: a deadline that far could overflow `Instant`, and is never reached
/// (docs/design.md, "Taking"). Applied where a take first computes a deadline.
pub(super) fn bounded(timeout: Option<Duration>) -> Option<Duration> {
    timeout.filter(|t| *t <= MAX_TIME)
}

/// Whether a subscriber has ever been set in the process: until one is, a take builds no
/// span (one relaxed load).
#[inline(always)]
pub(super) fn traced() -> bool {
    tracing::dispatcher::has_been_set()
}

/// A member handed to its taker after a wait that began at `started` (if it was read).
#[inline]
pub(super) fn handed<M: Manager>(
    shared: &Shared<M>,
    member: Member<M>,
    caller: Caller,
    started: Option<Instant>,
) -> Member<M> {
    if let Some(s) = started {
        shared.metrics.waited(s);
    }
    shared.note_taken(&member, caller);
    member
}

/// What a take that the queue served (`served`: a member or a refusal) goes on with, its
/// wait begun at `started` (if read). With shedding on, the wait, however it ended, is the
/// shedder's to see, and a member served too late the shedder's to refuse: the member then
/// goes on to the next waiter, returned as the pool's own (no user had it, and its return
/// measures nothing), and the refusal comes with the wait.
pub(super) fn served<M: Manager>(
    shared: &Arc<Shared<M>>,
    served: Result<Held<M::Member>, TakeError>,
    started: Option<Instant>,
) -> Result<Attempt<M>, (TakeError, Option<Duration>)> {
    let shedding = started.filter(|_| shared.shedder.is_on());
    if let Some(s) = shedding {
        shared.shedder.waited(s);
    }
    let stale = |s: Instant| {
        let now = Instant::now();
        shared.shedder.stale(now - s, now)
    };
    let held = served.map_err(|e| (e, None))?;
    match shedding.and_then(stale) {
        Some((target, waited)) => {
            if let Attempt::Member(mut m) | Attempt::Check(mut m) = shared.collected(held) {
                m.set_origin(Origin::Checked);
                drop(m);
            }
            Err((shared.stale_error(target, waited), Some(waited)))
        }
        None => Ok(shared.collected(held)),
    }
}

/// How a take that waited or checked ended, and how long it waited (for its span).
type Taken<M> = Result<(Member<M>, Option<Duration>), (TakeError, Option<Duration>)>;

/// The rest of a take from `attempt`, until `timeout` after its first attempt that queued
/// or had to check its member (`None`: with no deadline). The deadline bounds an idle check
/// too. `started`: when the take's wait began, if a wait in place
/// ([`Take::queue`](super::Take::queue)) read it; `resumed`: `attempt` is that wait's place,
/// handed on because the rules it was bounded by changed.
///
/// One `async` block, not a function awaiting another: the future is boxed when a take
/// queues, and an `async fn` keeps its arguments twice (as captured and as locals), as does
/// one awaiting another: 552 bytes copied into each queued take's box, where one block
/// holds 368 (docs/design.md, "Taking").
///
/// The instant the wait began is read only when something needs it — a deadline, shedding,
/// admission's bound on a queued take, the wait histogram, a span — so a queued `take()`
/// with none of them reads no clock.
pub(super) fn within<'a, M: Manager>(
    shared: &'a Arc<Shared<M>>,
    caller: Caller,
    timeout: Option<Duration>,
    mut attempt: Attempt<M>,
    mut started: Option<Instant>,
    mut resumed: bool,
) -> impl Future<Output = Result<Member<M>, TakeError>> + Send + 'a {
    let timeout = bounded(timeout);
    async move {
        // How the take ended, and how long it waited (from its first attempt that queued
        // or checked), for the take's span (none with no subscriber).
        let taken: Taken<M> = 'taken: {
            let traced = traced();
            let waited = |started: Option<Instant>| started.filter(|_| traced).map(|s| s.elapsed());
            let admits = shared.features.flags() & Features::ADMIT != 0;
            let clocked = timeout.is_some()
                || traced
                || admits
                || shared.shedder.is_on()
                || shared.metrics.wait_live();
            let deadline = |started: Option<Instant>| match (timeout, started) {
                (Some(t), Some(s)) => Deadline::At(s + t),
                _ => Deadline::after(timeout),
            };
            loop {
                attempt = match attempt {
                    Attempt::Member(member) => {
                        let member = handed(shared, member, caller, started);
                        break 'taken Ok((member, waited(started)));
                    }
                    Attempt::Failed(e) => break 'taken Err((e, waited(started))),
                    Attempt::Again => shared.again(wait::Queue, deadline(started)),
                    Attempt::Check(member) => {
                        let s = *started.get_or_insert_with(|| Member::taken_at(&member));
                        // Boxed, with what it holds across its await: a check is the rare
                        // path, and its state would make every queued take's larger.
                        match Box::pin(checked(shared, member, timeout, s)).await {
                            Ok(attempt) => attempt,
                            Err(e) => break 'taken Err((e, waited(started))),
                        }
                    }
                    Attempt::Queued(key, grew) => {
                        if traced {
                            let span = Span::current();
                            span.record("queued", true);
                            if grew {
                                span.record("grew", true);
                            }
                        }
                        // Bounded anew when a reconfigure turns admission on or off, or moves its
                        // queue target, while the take waits (the queue then says `Rearm`): as
                        // for a take that waited in place until then (`resumed`), which read the
                        // clock when it queued if anything then needed it.
                        let mut rearmed = std::mem::take(&mut resumed);
                        if started.is_none() && clocked && !rearmed {
                            started = Some(shared.clock.now());
                        }
                        // An overloaded pool (`queue_target`) sheds the take instead of queueing
                        // it (a take already waiting is not queued anew); a member handed over in
                        // that instant is taken all the same.
                        if let Some((target, delay)) = started
                            .filter(|_| !rearmed)
                            .and_then(|s| shared.shedder.shed(s))
                        {
                            match shared.hot.leave(key) {
                                None => break 'taken Err((shared.shed_error(target, delay), None)),
                                Some(Ok(held)) => {
                                    attempt = shared.collected(held);
                                    continue;
                                }
                                Some(Err(e)) => break 'taken Err((e, None)),
                            }
                        }
                        let mut waiting = Waiting {
                            shared,
                            key,
                            until: NO_END,
                            done: false,
                        };
                        let served = loop {
                            // With admission on (a queue target is then in force), a take waits
                            // twice it at most, and no longer than half its own budget once it has
                            // waited the target (docs/design.md, "Admission"): past the target the
                            // queue is served newest first, so its turn would not come soon, and a
                            // refusal at its deadline would leave its caller nothing. (The target
                            // is the hot core's, and there only while admission is on; a take that
                            // read no clock when it queued counts from the reconfigure.)
                            let target = if admits || rearmed {
                                shared.hot.queue_target()
                            } else {
                                None
                            };
                            if target.is_some() && started.is_none() {
                                started = Some(shared.clock.now());
                            }
                            let stale = target.map(|target| {
                                let twice = target.saturating_mul(2);
                                let waited =
                                    timeout.map_or(twice, |t| twice.min(target.max(t / 2)));
                                (target, waited, started.and_then(|s| s.checked_add(waited)))
                            });
                            let ends = [
                                timeout.and_then(|t| started.and_then(|s| s.checked_add(t))),
                                stale.and_then(|(.., at)| at),
                            ];
                            let end = ends.into_iter().flatten().min();
                            // A deadline past the timer horizon (and a tick of the coarse time's
                            // lag) is left to the housekeeping tick, which wakes the take to arm a
                            // timer once it is near: most queued takes are served long before.
                            let watched = end.map(|at| shared.clock.stamp(at)).filter(|at| {
                                *at > shared.clock.coarse().saturating_add(HORIZON_AND_LAG)
                            });
                            let polled = match (end, watched) {
                                (None, _) => (&mut waiting).await,
                                (Some(_), Some(until)) => {
                                    waiting.until = until;
                                    (&mut waiting).await
                                }
                                (Some(at), None) => match tokio::time::timeout_at(at, &mut waiting)
                                    .await
                                {
                                    Ok(polled) => polled,
                                    Err(_) => {
                                        waiting.done = true;
                                        match shared.hot.leave(key) {
                                            None => {
                                                let s = started
                                                    .expect("a take with an end began its wait");
                                                shared.shedder.waited(s);
                                                let e = match (stale, timeout) {
                                                    (Some((target, limit, _)), t)
                                                        if t.is_none_or(|t| limit < t) =>
                                                    {
                                                        shared.stale_error(target, s.elapsed())
                                                    }
                                                    (_, t) => {
                                                        shared.timed_out(t.unwrap_or_default())
                                                    }
                                                };
                                                break 'taken Err((e, waited(started)));
                                            }
                                            // Served in the very instant the timer fired: take it.
                                            Some(served) => Polled::Served(served),
                                        }
                                    }
                                },
                            };
                            waiting.until = NO_END;
                            match polled {
                                Polled::Served(served) => break served,
                                Polled::Rearm => rearmed = true,
                            }
                        };
                        match self::served(shared, served, started) {
                            Ok(attempt) => attempt,
                            Err((e, w)) => break 'taken Err((e, w.or_else(|| waited(started)))),
                        }
                    }
                };
            }
        };
        if traced() {
            record(&taken);
        }
        taken.map(|(member, _)| member).map_err(|(e, _)| e)
    }
}

/// A take's idle check of `member` (`started`: when the take's wait began, `timeout` after
/// which it ends): the member to hand out, another attempt once a failed member is
/// replaced, or the take's refusal when the check ran into its deadline.
async fn checked<M: Manager>(
    shared: &Arc<Shared<M>>,
    member: Member<M>,
    timeout: Option<Duration>,
    started: Instant,
) -> Result<Attempt<M>, TakeError> {
    let by = timeout.map(|t| started + t);
    match vet(shared, member, Hook::Check, by).await {
        Some(mut member) => {
            member.set_origin(Origin::Taken);
            Ok(Attempt::Member(member))
        }
        // Cut short by the deadline, or failed as it passed.
        None if by.is_some_and(|by| Instant::now() >= by) => {
            Err(shared.timed_out(timeout.unwrap_or_default()))
        }
        // Failed and replaced: take again.
        None => Ok(shared.again(
            wait::Queue,
            by.map_or(Deadline::after(timeout), Deadline::At),
        )),
    }
}

/// Records a take's outcome and wait in its span, if the span is enabled.
#[cold]
pub(super) fn record<M: Manager>(taken: &Taken<M>) {
    let span = Span::current();
    if span.is_disabled() {
        return;
    }
    let (outcome, waited) = match taken {
        Ok((_, waited)) => ("waited", *waited),
        Err((e, waited)) => (e.reason(), *waited),
    };
    span.record("outcome", outcome);
    if let Some(waited) = waited {
        span.record(
            "waited_us",
            u64::try_from(waited.as_micros()).unwrap_or(u64::MAX),
        );
    }
}
