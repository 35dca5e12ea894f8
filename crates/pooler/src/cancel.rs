//! Cancellation tokens: a flag a pool raises once, and the tasks that wait for it.
//!
//! A token is cancelled once and stays cancelled. A child token (a member's, under the
//! pool's `kill`) reads as cancelled when it or its parent is; waiting on it wakes for
//! either. Only a root token has children: the pool needs one level. Why this is not
//! tokio-util's token: docs/design.md, "Features, dependencies and the supported Rust
//! version".
//!
//! # Invariants
//!
//! 1. A waiter registers with a token's `Notify` before it reads the flag, and `cancel`
//!    raises the flag before it wakes the registered waiters: a cancel is never missed.
//! 2. The flag is never lowered.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use tokio::sync::Notify;

#[derive(Debug, Default)]
struct Flag {
    raised: AtomicBool,
    waiters: Notify,
}

impl Flag {
    fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Acquire)
    }
}

/// A cancellation token (cheap to clone; clones share the flag).
#[derive(Debug, Clone, Default)]
pub(crate) struct Token {
    own: Arc<Flag>,
    parent: Option<Arc<Flag>>,
}

impl Token {
    /// A new root token, not cancelled.
    pub(crate) fn new() -> Self {
        Token::default()
    }

    /// A token cancelled by its own `cancel` or by this one's.
    pub(crate) fn child(&self) -> Token {
        debug_assert!(self.parent.is_none(), "only a root token has children");
        Token {
            own: Arc::default(),
            parent: Some(self.own.clone()),
        }
    }

    /// Cancels this token (and so its children); wakes everyone waiting on them.
    pub(crate) fn cancel(&self) {
        self.own.raised.store(true, Ordering::Release);
        self.own.waiters.notify_waiters();
    }

    /// Whether this token or its parent has been cancelled.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.own.is_raised() || self.parent.as_ref().is_some_and(|p| p.is_raised())
    }

    /// Resolves once this token (or its parent) is cancelled.
    pub(crate) async fn cancelled(&self) {
        loop {
            // Registered before the flags are read (invariant #1): `notify_waiters` reaches
            // a `Notified` from its creation on.
            let mut own = pin!(self.own.waiters.notified());
            let mut parent = pin!(self.parent.as_ref().map(|p| p.waiters.notified()));
            if self.is_cancelled() {
                return;
            }
            poll_fn(|cx| {
                let parent_rang = match parent.as_mut().as_pin_mut() {
                    Some(p) => p.poll(cx).is_ready(),
                    None => false,
                };
                if own.as_mut().poll(cx).is_ready() || parent_rang {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
        }
    }

    /// [`cancelled`](Self::cancelled) owning its token, for a future kept in a struct.
    pub(crate) async fn cancelled_owned(self) {
        self.cancelled().await;
    }

    /// Runs `task` until it ends (`Some` of its output) or the token is cancelled (`None`;
    /// `task` is dropped). A cancellation seen at the same poll as the end wins.
    pub(crate) async fn run_until_cancelled<F: Future>(&self, task: F) -> Option<F::Output> {
        let mut cancelled = pin!(self.cancelled());
        let mut task = pin!(task);
        poll_fn(|cx| {
            if cancelled.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            task.as_mut().poll(cx).map(Some)
        })
        .await
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests wait on tokens from plain tasks
mod tests {
    use std::time::Duration;

    use super::*;

    async fn within_a_second<F: Future>(f: F) -> F::Output {
        tokio::time::timeout(Duration::from_secs(1), f)
            .await
            .expect("ended within a second")
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_wakes_on_cancel_and_late_waiters_return_at_once() {
        let token = Token::new();
        let waiter = tokio::spawn(token.clone().cancelled_owned());
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        token.cancel();
        within_a_second(waiter).await.unwrap();
        within_a_second(token.cancelled()).await;
        assert!(token.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn a_child_is_cancelled_by_its_parent_but_not_the_other_way() {
        let root = Token::new();
        let (a, b) = (root.child(), root.child());
        a.cancel();
        assert!(a.is_cancelled() && !b.is_cancelled() && !root.is_cancelled());
        let waiter = tokio::spawn(b.clone().cancelled_owned());
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        root.cancel();
        within_a_second(waiter).await.unwrap();
        assert!(b.is_cancelled());
        // A child made after its parent was cancelled is born cancelled.
        assert!(root.child().is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn run_until_cancelled_returns_the_output_or_none() {
        let token = Token::new();
        assert_eq!(token.run_until_cancelled(async { 7 }).await, Some(7));
        let t = token.clone();
        let run =
            tokio::spawn(async move { t.run_until_cancelled(std::future::pending::<()>()).await });
        tokio::task::yield_now().await;
        token.cancel();
        assert_eq!(within_a_second(run).await.unwrap(), None);
        assert_eq!(token.run_until_cancelled(async { 7 }).await, None);
    }
}
