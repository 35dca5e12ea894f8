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
use crate::error::TakeError;
use crate::features::Features;
use crate::hot::{Found, Polled, wait};
use crate::leak::Caller;
use crate::manager::Manager;
use crate::member::Member;
use crate::shared::Shared;
use crate::waiters::{NO_END, WaitKey};

mod place;
mod within;

use place::Waiting;
use within::{HORIZON_AND_LAG, bounded, handed, served, traced, within};

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
    /// Not polled yet, or done (a take polled again after it completed takes anew).
    First,
    /// Waiting in the queue with nothing else to watch, in the take itself ([`Queued`]).
    Queued(Queued<'a, M>),
    /// Anything else — a check, a timer of its own, shedding, admission's bound on the wait,
    /// a span: the whole state machine ([`within()`]), boxed.
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
        if matches!(this.stage, Stage::First) && !this.at_once && !traced() {
            // The first attempt ([`first`]'s, written out here: through the function, its
            // nested result cost every take 24 instructions more). A member found at once
            // builds no waiting future; anything else goes on out of line, so this frame
            // stays small.
            return match this.shared.first(wait::Queue, this.timeout) {
                Ok(ready) => Poll::Ready(Ok(this.shared.guard(ready))),
                Err(attempt) => this.after_first(cx, attempt),
            };
        }
        this.poll_other(cx)
    }
}

impl<M: Manager> Take<'_, M> {
    /// What follows a first attempt that found no member ready as it is.
    #[inline(never)]
    fn after_first(
        &mut self,
        cx: &mut Context<'_>,
        attempt: Attempt<M>,
    ) -> Poll<Result<Member<M>, TakeError>> {
        let shared = self.shared;
        let attempt = match attempt {
            Attempt::Failed(e) => return Poll::Ready(Err(e)),
            Attempt::Member(member) => {
                shared.note_taken(&member, self.caller);
                return Poll::Ready(Ok(member));
            }
            Attempt::Queued(key, grew) => return self.queue(cx, key, grew),
            attempt => attempt,
        };
        let (caller, timeout) = (self.caller, self.timeout);
        let waits = Box::pin(within(shared, caller, timeout, attempt, None, false));
        self.go_on(cx, waits)
    }

    /// A poll other than a first attempt's on the untraced path: a take waiting, a take that
    /// never waits, or a traced one.
    #[inline(never)]
    fn poll_other(&mut self, cx: &mut Context<'_>) -> Poll<Result<Member<M>, TakeError>> {
        match &mut self.stage {
            Stage::First => {}
            Stage::Queued(queued) => {
                let next = std::task::ready!(queued.poll(cx, self.shared, self.caller));
                return self.after_queued(cx, next);
            }
            Stage::Within(waits) => {
                let polled = waits.as_mut().poll(cx);
                if polled.is_ready() {
                    self.stage = Stage::First;
                }
                return polled;
            }
        }
        let shared = self.shared;
        if self.at_once {
            return Poll::Ready(at_once(shared, self.caller));
        }
        match begin_traced(shared, self.caller, self.timeout) {
            Ok(decided) => Poll::Ready(decided),
            Err(waits) => self.go_on(cx, waits),
        }
    }
}

impl<'a, M: Manager> Take<'a, M> {
    /// The take's first attempt queued it at `key`: it waits in place when it has nothing
    /// to watch but its slot (no admission, no shedding, and a deadline, if any, past the
    /// timer horizon, left to the housekeeping tick), else in [`within()`]. A wait in place
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
        let read =
            (timeout.is_some() || shared.metrics.wait_live()).then(|| shared.clock.now_stamped());
        // The deadline as a stamp, added in stamps: a bounded timeout (a year at most) cannot
        // overflow one, and the instant is not converted twice (docs/design.md, "Taking").
        let until = match (timeout, read) {
            (Some(t), Some((_, at))) => {
                Some(at.saturating_add(u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)))
                    .filter(|end| *end > shared.clock.coarse().saturating_add(HORIZON_AND_LAG))
            }
            _ => Some(NO_END),
        };
        let started = read.map(|(at, _)| at);
        let in_place = shared.features.flags() & Features::ADMIT == 0 && !shared.shedder.is_on();
        match until.filter(|_| in_place) {
            Some(until) => {
                let waiting = Waiting {
                    shared,
                    key,
                    until,
                    done: false,
                };
                let mut queued = Queued { waiting, started };
                match queued.poll(cx, shared, self.caller) {
                    Poll::Pending => {
                        self.stage = Stage::Queued(queued);
                        Poll::Pending
                    }
                    Poll::Ready(next) => self.after_queued(cx, next),
                }
            }
            None => {
                let attempt = Attempt::Queued(key, grew);
                let waits = within(shared, self.caller, self.timeout, attempt, started, false);
                self.go_on(cx, Box::pin(waits))
            }
        }
    }

    /// A take that waited in place: done, or on in [`within()`] from what its turn brought when
    /// that is not a member to hand out, or when the rules its wait was bounded by changed
    /// (the queue said `Rearm`).
    #[inline(always)]
    fn after_queued(
        &mut self,
        cx: &mut Context<'_>,
        next: AfterQueued<M>,
    ) -> Poll<Result<Member<M>, TakeError>> {
        match next {
            AfterQueued::Done(taken) => {
                self.stage = Stage::First;
                Poll::Ready(taken)
            }
            AfterQueued::GoOn {
                attempt,
                started,
                rearmed,
            } => {
                let waits = within(
                    self.shared,
                    self.caller,
                    self.timeout,
                    attempt,
                    started,
                    rearmed,
                );
                self.go_on(cx, Box::pin(waits))
            }
        }
    }

    /// The rest of the take in `waits`, polled now and kept if it is not done.
    fn go_on(
        &mut self,
        cx: &mut Context<'_>,
        mut waits: Waits<'a, M>,
    ) -> Poll<Result<Member<M>, TakeError>> {
        let polled = waits.as_mut().poll(cx);
        self.stage = if polled.is_pending() {
            Stage::Within(waits)
        } else {
            Stage::First
        };
        polled
    }
}

/// How a wait in place ended.
enum AfterQueued<M: Manager> {
    /// The take's outcome.
    Done(Result<Member<M>, TakeError>),
    /// The take goes on in [`within()`] from `attempt` (its wait began at `started`, if read;
    /// `rearmed`: `attempt` is its place, its rules changed).
    GoOn {
        attempt: Attempt<M>,
        started: Option<Instant>,
        rearmed: bool,
    },
}

/// A take waiting in the queue in place ([`Stage::Queued`]): its place, and when its wait
/// began if something needs that (a deadline, the wait histogram).
struct Queued<'a, M: Manager> {
    waiting: Waiting<'a, M>,
    started: Option<Instant>,
}

impl<M: Manager> Queued<'_, M> {
    /// Looks at the take's place: still waiting, or how the wait ended.
    #[inline(always)]
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        shared: &Arc<Shared<M>>,
        caller: Caller,
    ) -> Poll<AfterQueued<M>> {
        let started = self.started;
        Poll::Ready(
            match std::task::ready!(Pin::new(&mut self.waiting).poll(cx)) {
                Polled::Rearm => {
                    // Its place goes on to `within`, which bounds the wait anew.
                    self.waiting.done = true;
                    AfterQueued::GoOn {
                        attempt: Attempt::Queued(self.waiting.key, false),
                        started,
                        rearmed: true,
                    }
                }
                Polled::Served(outcome) => match served(shared, outcome, started) {
                    Ok(Attempt::Member(member)) => {
                        AfterQueued::Done(Ok(handed(shared, member, caller, started)))
                    }
                    Ok(attempt) => AfterQueued::GoOn {
                        attempt,
                        started,
                        rearmed: false,
                    },
                    Err((e, _)) => AfterQueued::Done(Err(e)),
                },
            },
        )
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

#[cfg(all(test, not(pooler_loom)))]
mod tests {
    /// What a take's future weighs in its caller's: with its place in the queue kept in place
    /// (docs/design.md, "Taking"), and nothing of the boxed loop.
    #[test]
    fn a_take_is_small() {
        struct Numbers;
        impl crate::manager::Manager for Numbers {
            type Member = u64;
            type Error = std::io::Error;
            async fn start(&self, ctx: &crate::manager::MemberContext) -> Result<u64, Self::Error> {
                Ok(ctx.member_id())
            }
        }
        let size = std::mem::size_of::<super::Take<'static, Numbers>>();
        assert!(size <= 104, "{size} bytes");
    }
}
