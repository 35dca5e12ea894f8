//! A member's driver task as the pool runs it: the user's future, stopped when the member's
//! token is cancelled, with a panic caught and reported as the task's end.
//!
//! A driver (a database connection's I/O future) is polled on every message in either
//! direction, so what the wrapper adds per poll is paid per query. Polling a
//! token's future on every poll would take the token's waiter lock each time.
//! Instead the cancellation future is polled once to register, with a waker of our own that
//! raises a flag and wakes the task's waker; later polls read the flag (one atomic swap) and
//! compare the task's waker with the one the alarm holds (it is replaced only if it changed).
//!
//! # Invariants
//!
//! 1. The cancellation future is polled on the first poll and on every poll after our waker
//!    fired, so a cancellation is never missed: it either happened before the first poll, or
//!    it fires our waker, which wakes the task's current waker.
//! 2. The user's future is never polled again after it returned, panicked, or the token was
//!    seen cancelled.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use crate::cancel::Token;

/// How a driver task ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The user's future returned.
    Returned,
    /// The user's future panicked.
    Panicked,
    /// The token was cancelled (the pool ended it).
    Cancelled,
}

/// Raised by the cancellation future's waker; wakes the task. Its lock is taken only when
/// the task's waker changes (rarely) and when the alarm rings (once).
#[derive(Default)]
struct Alarm {
    rang: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Alarm {
    fn register(&self, waker: &Waker) {
        *self.task.lock().unwrap_or_else(PoisonError::into_inner) = Some(waker.clone());
    }
}

impl Wake for Alarm {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.rang.store(true, Ordering::Release);
        let task = self
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(task) = task {
            task.wake();
        }
    }
}

/// The user's future under a token.
pub(crate) struct Driver<F> {
    task: Option<Pin<Box<F>>>,
    cancelled: Pin<Box<dyn Future<Output = ()> + Send>>,
    alarm: Arc<Alarm>,
    alarm_waker: Waker,
    /// The task waker the alarm wakes (kept to compare: a task's waker rarely changes).
    last: Option<Waker>,
    registered: bool,
}

impl<F: Future<Output = ()>> Driver<F> {
    pub(crate) fn new(task: F, token: Token) -> Self {
        let alarm = Arc::new(Alarm::default());
        Driver {
            task: Some(Box::pin(task)),
            cancelled: Box::pin(token.cancelled_owned()),
            alarm_waker: Waker::from(alarm.clone()),
            alarm,
            last: None,
            registered: false,
        }
    }
}

impl<F: Future<Output = ()>> Future for Driver<F> {
    type Output = Ended;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Ended> {
        let this = &mut *self;
        if !this.last.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            this.alarm.register(cx.waker());
            this.last = Some(cx.waker().clone());
        }
        if !this.registered
            || (this.alarm.rang.load(Ordering::Acquire)
                && this.alarm.rang.swap(false, Ordering::AcqRel))
        {
            this.registered = true;
            let mut alarm_cx = Context::from_waker(&this.alarm_waker);
            if this.cancelled.as_mut().poll(&mut alarm_cx).is_ready() {
                this.task = None;
                return Poll::Ready(Ended::Cancelled);
            }
        }
        let Some(task) = this.task.as_mut() else {
            debug_assert!(false, "a driver polled after it ended");
            return Poll::Pending;
        };
        match catch_unwind(AssertUnwindSafe(|| task.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(())) => {
                this.task = None;
                Poll::Ready(Ended::Returned)
            }
            Err(_) => {
                this.task = None;
                Poll::Ready(Ended::Panicked)
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests run drivers as plain tasks
mod tests {
    use super::*;

    /// The driver's end, or a failure (not a hang) if it never ends: the paused clock jumps
    /// to the deadline as soon as every task is idle.
    async fn ends<F: Future<Output = ()> + Send + 'static>(driver: Driver<F>) -> Ended {
        tokio::time::timeout(std::time::Duration::from_secs(1), driver)
            .await
            .expect("the driver ended")
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancellation_ends_a_driver_that_waits_forever() {
        let token = Token::new();
        let driver = tokio::spawn(ends(Driver::new(std::future::pending(), token.clone())));
        tokio::task::yield_now().await;
        token.cancel();
        assert_eq!(driver.await.unwrap(), Ended::Cancelled);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancellation_before_the_first_poll_is_seen() {
        let token = Token::new();
        token.cancel();
        assert_eq!(
            ends(Driver::new(std::future::pending(), token)).await,
            Ended::Cancelled
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_driver_that_keeps_working_still_sees_a_cancellation() {
        // The driver is woken by its own work often; the cancellation must still land.
        let token = Token::new();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let driver = tokio::spawn(ends(Driver::new(
            async move { while rx.recv().await.is_some() {} },
            token.clone(),
        )));
        for _ in 0..100 {
            tx.send(()).unwrap();
            tokio::task::yield_now().await;
        }
        token.cancel();
        assert_eq!(driver.await.unwrap(), Ended::Cancelled);
    }

    #[tokio::test(start_paused = true)]
    async fn a_return_and_a_panic_are_told_apart() {
        let token = Token::new();
        assert_eq!(
            ends(Driver::new(async {}, token.clone())).await,
            Ended::Returned
        );
        let panicking = Driver::new(async { panic!("planned") }, token);
        assert_eq!(ends(panicking).await, Ended::Panicked);
    }
}
