//! A take as one state machine (docs/design.md, "Taking"): a loop over attempts — a member
//! found, a member to check first, a place in the queue, a refusal, or an unusable member
//! replaced and another attempt — that owns the caller's location, the deadline and the
//! instant the wait began. The first attempt runs inline on the first poll, so a take that
//! finds a member builds no waiting future; one that queues with nothing else to watch waits
//! in place; one that must check, or watch a near deadline, shedding or admission's bound,
//! goes on in a boxed state machine.
//!
//! Each take runs in a `pooler.take` span at debug level (docs/design.md, "Tracing"), a child
//! of the caller's span: the pool, the outcome (`at_once`, `waited`, or the error's reason),
//! whether it queued, whether it started members, and how long it waited. With no subscriber
//! listening the span is never built: a check of the global level filter.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::checkout::{Attempt, Deadline};
use crate::clock::{TICK, TIMER_HORIZON};
use crate::error::TakeError;
use crate::features::Features;
use crate::health::{Hook, vet};
use crate::held::Held;
use crate::hot::{Found, Polled, wait};
use crate::leak::Caller;
use crate::manager::Manager;
use crate::member::{Member, Origin};
use crate::shared::Shared;
use crate::time::MAX_TIME;
use crate::waiters::{NO_END, WaitKey};

/// [`TIMER_HORIZON`] and a tick (the coarse time's lag), in clock-stamp nanoseconds: a
/// queued take arms its own timer only for a deadline this near the coarse time.
const HORIZON_AND_LAG: u64 = (TIMER_HORIZON.as_nanos() + TICK.as_nanos()) as u64;

mod waiting;

use waiting::Waiting;

type Waits<'a, M> = Pin<Box<dyn Future<Output = Result<Member<M>, TakeError>> + Send + 'a>>;

/// A take that may wait: `timeout` bounds the wait (`None`: no deadline; zero: never waits).
pub(crate) struct Take<'a, M: Manager> {
    shared: &'a Arc<Shared<M>>,
    caller: Caller,
    timeout: Option<Duration>,
    /// The timeout is zero: the take never waits. Decided where the take is made, where a
    /// constant timeout folds it away.
    at_once: bool,
    stage: Stage<'a, M>,
}

/// Where a take that its first poll did not decide goes on. An explicit tag: the first
/// poll's check is then one byte compared, not a niche decoded.
#[repr(u8)]
enum Stage<'a, M: Manager> {
    /// Not polled yet (or done: a take polled again after it completed takes anew).
    First,
    /// Waiting in the queue with nothing else to watch, in the take itself ([`Queued`]).
    Queued(Queued<'a, M>),
    /// Anything else — a check, a timer of its own, shedding, admission's bound on the wait,
    /// a span: the whole state machine ([`within`]), boxed.
    Within(Waits<'a, M>),
}

impl<'a, M: Manager> Take<'a, M> {
    /// Any timeout: one longer than any key accepts is bounded where a deadline is first
    /// computed, off the path that finds a member at once ([`bounded`]).
    pub(crate) fn new(
        shared: &'a Arc<Shared<M>>,
        caller: Caller,
        timeout: Option<Duration>,
    ) -> Self {
        Take {
            shared,
            caller,
            timeout,
            at_once: timeout.is_some_and(|t| t.is_zero()),
            stage: Stage::First,
        }
    }
}

impl<M: Manager> Future for Take<'_, M> {
    type Output = Result<Member<M>, TakeError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.stage {
            Stage::First => {}
            Stage::Queued(_) => return this.poll_queued(cx),
            Stage::Within(waits) => return waits.as_mut().poll(cx),
        }
        let (shared, caller, timeout) = (this.shared, this.caller, this.timeout);
        if this.at_once {
            return Poll::Ready(at_once(shared, caller));
        }
        let waits = if traced() {
            match begin_traced(shared, caller, timeout) {
                Ok(decided) => return Poll::Ready(decided),
                Err(waits) => waits,
            }
        } else {
            // The first attempt ([`first`]'s, written out here: through the function, its
            // nested result cost every take 24 instructions more). A member found at once,
            // even with a feature's look at it, builds no waiting future.
            let attempt = match shared.first(wait::Queue, timeout) {
                Ok(ready) => return Poll::Ready(Ok(shared.guard(ready))),
                Err(Attempt::Failed(e)) => return Poll::Ready(Err(e)),
                Err(Attempt::Member(member)) => {
                    shared.note_taken(&member, caller);
                    return Poll::Ready(Ok(member));
                }
                Err(Attempt::Queued(key, grew)) => return this.queue(cx, key, grew),
                Err(attempt) => attempt,
            };
            Box::pin(within(shared, caller, timeout, attempt, None, false))
        };
        this.go_on(cx, waits)
    }
}

impl<'a, M: Manager> Take<'a, M> {
    /// The take's first attempt queued it at `key`: it waits in place when it has nothing
    /// to watch but its slot (no admission, no shedding, and a deadline, if any, past the
    /// timer horizon, left to the housekeeping tick), else in [`within`]. A wait in place
    /// allocates nothing and copies no state machine into a box (docs/design.md, "Taking").
    #[inline(never)]
    fn queue(
        &mut self,
        cx: &mut Context<'_>,
        key: WaitKey,
        grew: bool,
    ) -> Poll<Result<Member<M>, TakeError>> {
        let shared = self.shared;
        let timeout = bounded(self.timeout);
        // Read when something needs it, as `within` reads it.
        let started = (timeout.is_some() || shared.metrics.wait_live()).then(|| shared.clock.now());
        let until = match (timeout, started) {
            (Some(t), Some(s)) => s
                .checked_add(t)
                .map(|end| shared.clock.stamp(end))
                .filter(|at| *at > shared.clock.coarse().saturating_add(HORIZON_AND_LAG)),
            _ => Some(NO_END),
        };
        let in_place = shared.features.flags() & Features::ADMIT == 0 && !shared.shedder.is_on();
        match until.filter(|_| in_place) {
            Some(until) => {
                let waiting = Waiting {
                    shared,
                    key,
                    until,
                    done: false,
                };
                self.stage = Stage::Queued(Queued { waiting, started });
                self.poll_queued(cx)
            }
            None => {
                let attempt = Attempt::Queued(key, grew);
                let waits = within(shared, self.caller, self.timeout, attempt, started, false);
                self.go_on(cx, Box::pin(waits))
            }
        }
    }

    /// Polls a take waiting in place; goes on in [`within`] from what its turn brought
    /// when that is not a member to hand out, or when the rules its wait was bounded by
    /// changed (the queue says `Rearm`).
    fn poll_queued(&mut self, cx: &mut Context<'_>) -> Poll<Result<Member<M>, TakeError>> {
        let Stage::Queued(queued) = &mut self.stage else {
            return Poll::Pending;
        };
        let shared = self.shared;
        let started = queued.started;
        let (attempt, rearmed) = match std::task::ready!(Pin::new(&mut queued.waiting).poll(cx)) {
            Polled::Rearm => {
                // Its place goes on to `within`, which bounds the wait anew.
                queued.waiting.done = true;
                (Attempt::Queued(queued.waiting.key, false), true)
            }
            Polled::Served(outcome) => match served(shared, outcome, started) {
                Ok(Attempt::Member(member)) => {
                    self.stage = Stage::First;
                    return Poll::Ready(Ok(handed(shared, member, self.caller, started)));
                }
                Ok(attempt) => (attempt, false),
                Err((e, _)) => {
                    self.stage = Stage::First;
                    return Poll::Ready(Err(e));
                }
            },
        };
        let waits = within(shared, self.caller, self.timeout, attempt, started, rearmed);
        self.go_on(cx, Box::pin(waits))
    }

    /// The rest of the take in `waits`, polled now.
    fn go_on(
        &mut self,
        cx: &mut Context<'_>,
        waits: Waits<'a, M>,
    ) -> Poll<Result<Member<M>, TakeError>> {
        self.stage = Stage::Within(waits);
        match &mut self.stage {
            Stage::Within(waits) => waits.as_mut().poll(cx),
            Stage::First | Stage::Queued(_) => Poll::Pending,
        }
    }
}

/// A take waiting in the queue in place ([`Stage::Queued`]): its place, and when its wait
/// began if something needs that (a deadline, the wait histogram).
struct Queued<'a, M: Manager> {
    waiting: Waiting<'a, M>,
    started: Option<Instant>,
}

/// A member handed to its taker after a wait that began at `started` (if it was read).
#[inline]
fn handed<M: Manager>(
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
fn served<M: Manager>(
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

/// A take's first poll when a subscriber may listen: the same first attempt ([`first`]), in
/// the take's span, and the rest of the take instrumented with it.
#[cold]
fn begin_traced<'a, M: Manager>(
    shared: &'a Arc<Shared<M>>,
    caller: Caller,
    timeout: Option<Duration>,
) -> Result<Result<Member<M>, TakeError>, Waits<'a, M>> {
    let span = span(shared);
    let entered = span.enter();
    match first(shared, caller, timeout) {
        Ok(decided) => {
            let outcome = decided
                .as_ref()
                .map_or_else(TakeError::reason, |_| "at_once");
            span.record("outcome", outcome);
            Ok(decided)
        }
        Err(attempt) => {
            drop(entered);
            let waits = within(shared, caller, timeout, attempt, None, false);
            Err(Box::pin(waits.instrument(span)))
        }
    }
}

/// The first attempt of a take that may wait: the member or the refusal if it was decided,
/// else the attempt the rest of the take goes on from (a place in the queue, a member to
/// check, an unusable member being replaced). [`Take::poll`] runs the same inline.
fn first<M: Manager>(
    shared: &Arc<Shared<M>>,
    caller: Caller,
    timeout: Option<Duration>,
) -> Result<Result<Member<M>, TakeError>, Attempt<M>> {
    match shared.first(wait::Queue, timeout) {
        Ok(ready) => Ok(Ok(shared.guard(ready))),
        Err(Attempt::Failed(e)) => Ok(Err(e)),
        Err(Attempt::Member(member)) => {
            shared.note_taken(&member, caller);
            Ok(Ok(member))
        }
        Err(attempt) => Err(attempt),
    }
}

/// A timeout longer than any key accepts ([`MAX_TIME`], a year) is a wait without a
/// deadline: a deadline that far could overflow `Instant`, and is never reached
/// (docs/design.md, "Taking"). Applied where a take first computes a deadline.
fn bounded(timeout: Option<Duration>) -> Option<Duration> {
    timeout.filter(|t| *t <= MAX_TIME)
}

/// Whether a subscriber has ever been set in the process: until one is, a take builds no
/// span (one relaxed load).
#[inline(always)]
fn traced() -> bool {
    tracing::dispatcher::has_been_set()
}

/// A take's span (see above).
fn span<M: Manager>(shared: &Shared<M>) -> Span {
    tracing::debug_span!(
        "pooler.take",
        pool = %shared.name,
        outcome = Empty,
        queued = Empty,
        grew = Empty,
        waited_us = Empty,
    )
}

/// A take that never waits, on behalf of `caller`.
#[inline]
pub(crate) fn at_once<M: Manager>(
    shared: &Arc<Shared<M>>,
    caller: Caller,
) -> Result<Member<M>, TakeError> {
    if traced() {
        return at_once_traced(shared, caller);
    }
    at_once_untraced(shared, caller)
}

/// [`at_once`] in the take's span.
#[cold]
fn at_once_traced<M: Manager>(
    shared: &Arc<Shared<M>>,
    caller: Caller,
) -> Result<Member<M>, TakeError> {
    let span = span(shared);
    let _entered = span.enter();
    let taken = at_once_untraced(shared, caller);
    span.record(
        "outcome",
        taken.as_ref().map_or_else(TakeError::reason, |_| "at_once"),
    );
    taken
}

#[inline(always)]
fn at_once_untraced<M: Manager>(
    shared: &Arc<Shared<M>>,
    caller: Caller,
) -> Result<Member<M>, TakeError> {
    match shared.hot.take(wait::No, true, false) {
        Found::Member(held, timed) => match shared.fast_member(held, false, timed) {
            Ok(ready) => Ok(shared.guard(ready)),
            Err(held) => at_once_slow(
                shared,
                caller,
                shared.taken_with_features(held, wait::No, false, timed),
            ),
        },
        // The common refusal, kept small.
        Found::Full => Err(shared.at_capacity()),
        found => at_once_slow(
            shared,
            caller,
            shared.found(found, wait::No, Deadline::In(Duration::ZERO)),
        ),
    }
}

#[cold]
fn at_once_slow<M: Manager>(
    shared: &Arc<Shared<M>>,
    caller: Caller,
    mut attempt: Attempt<M, Infallible>,
) -> Result<Member<M>, TakeError> {
    loop {
        attempt = match attempt {
            // A take that never waits is never asked to check its member.
            Attempt::Member(member) | Attempt::Check(member) => {
                shared.note_taken(&member, caller);
                return Ok(member);
            }
            Attempt::Failed(e) => return Err(e),
            Attempt::Again => shared.again(wait::No, Deadline::In(Duration::ZERO)),
            Attempt::Queued(never, _) => match never {},
        };
    }
}

/// How a take that waited or checked ended, and how long it waited (for its span).
type Taken<M> = Result<(Member<M>, Option<Duration>), (TakeError, Option<Duration>)>;

/// The rest of a take from `attempt`, until `timeout` after its first attempt that queued
/// or had to check its member (`None`: with no deadline). The deadline bounds an idle check
/// too. `started`: when the take's wait began, if a wait in place ([`Take::queue`]) read it;
/// `resumed`: `attempt` is that wait's place, handed on because the rules it was bounded by
/// changed.
///
/// One `async` block, not a function awaiting another: the future is boxed when a take
/// queues, and an `async fn` keeps its arguments twice (as captured and as locals), as does
/// one awaiting another: 552 bytes copied into each queued take's box, where one block
/// holds 368 (docs/design.md, "Taking").
///
/// The instant the wait began is read only when something needs it — a deadline, shedding,
/// admission's bound on a queued take, the wait histogram, a span — so a queued `take()`
/// with none of them reads no clock.
fn within<'a, M: Manager>(
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
fn record<M: Manager>(taken: &Taken<M>) {
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

#[cfg(all(test, not(pooler_loom)))]
mod tests {
    /// What a take's future weighs in its caller's: with its place in the queue kept in place
    /// (docs/design.md, "Taking"), and nothing of the boxed loop.
    #[test]
    fn a_take_is_small() {
        struct Numbers;
        impl crate::Manager for Numbers {
            type Member = u64;
            type Error = std::io::Error;
            async fn start(&self, ctx: &crate::MemberContext) -> Result<u64, Self::Error> {
                Ok(ctx.member_id())
            }
        }
        let size = std::mem::size_of::<super::Take<'static, Numbers>>();
        assert!(size <= 104, "{size} bytes");
    }
}
