//! Supervision: every task a pool runs — member starts and stops, timers, members' driver
//! tasks — is spawned here, so closing the pool can end and await all of them.
//!
//! Two tokens order the shutdown: `closing` ends starts and timers as soon as a close
//! begins; `kill` ends members' driver tasks last, after the stops that may still need them
//! (a polite database logout runs over the connection its driver task polls).
//!
//! # Invariants
//!
//! 1. The tracker's count is the number of its tasks whose future has not been dropped yet:
//!    raised before a task is spawned, lowered when its future is dropped (ended, or
//!    dropped unpolled by a runtime that has shut down).
//! 2. Once the tracker is closed and its count is zero, `join` returns: the task that lowers
//!    the count to zero wakes it, and `join` reads both after registering to be woken.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

use tokio::runtime::Handle;
use tokio::sync::Notify;

use crate::cancel::Token;

/// One pool's task tracker and cancellation tokens.
#[derive(Debug, Clone)]
pub(crate) struct Supervisor {
    tracker: Arc<Tracker>,
    runtime: Handle,
    /// Cancelled when a close begins: starts and timers stop.
    pub(crate) closing: Token,
    /// Cancelled when a close ends: members' driver tasks stop. Members' own tokens are
    /// children of it.
    pub(crate) kill: Token,
}

/// Counts a pool's live tasks and wakes `join` when the last ends after the close.
#[derive(Debug, Default)]
struct Tracker {
    live: AtomicUsize,
    closed: AtomicBool,
    idle: Notify,
}

impl Tracker {
    fn is_done(&self) -> bool {
        self.closed.load(Ordering::SeqCst) && self.live.load(Ordering::SeqCst) == 0
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if self.is_done() {
            self.idle.notify_waiters();
        }
    }

    async fn wait(&self) {
        loop {
            let notified = pin!(self.idle.notified());
            if self.is_done() {
                return;
            }
            notified.await;
        }
    }
}

/// Held by a tracked task's future: its drop lowers the count (invariant #1).
struct Tracked(Arc<Tracker>);

/// A tracked task's future, written out ([`Supervisor::spawn_unpin`]).
struct Supervised<F> {
    task: F,
    _tracked: Tracked,
}

impl<F: Future<Output = ()> + Unpin> Future for Supervised<F> {
    type Output = ();

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.task).poll(cx)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if self.0.live.fetch_sub(1, Ordering::SeqCst) == 1 && self.0.closed.load(Ordering::SeqCst) {
            self.0.idle.notify_waiters();
        }
    }
}

impl Supervisor {
    /// A supervisor whose tasks run on `runtime`, wherever they are spawned from.
    pub(crate) fn new(runtime: Handle) -> Self {
        Supervisor {
            tracker: Arc::default(),
            runtime,
            closing: Token::new(),
            kill: Token::new(),
        }
    }

    /// Runs `task` under this supervisor.
    ///
    /// # Errors
    ///
    /// [`RuntimeGone`] when the pool's runtime has shut down: tokio then drops the task
    /// unpolled, inside this call, so whatever guard the task owned has already run.
    pub(crate) fn spawn<F>(&self, task: F) -> Result<(), RuntimeGone>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let tracked = self.track();
        self.launch(async move {
            let _tracked = tracked;
            task.await;
        })
    }

    /// [`spawn`](Self::spawn) for a future that need not be pinned in place (a member's
    /// driver, polled on every message it passes): it runs inside a plain wrapper instead of
    /// an `async` block, one state machine less at each poll.
    pub(crate) fn spawn_unpin<F>(&self, task: F) -> Result<(), RuntimeGone>
    where
        F: Future<Output = ()> + Unpin + Send + 'static,
    {
        let tracked = self.track();
        self.launch(Supervised {
            task,
            _tracked: tracked,
        })
    }

    /// Counts a task about to be spawned (invariant #1).
    fn track(&self) -> Tracked {
        self.tracker.live.fetch_add(1, Ordering::SeqCst);
        Tracked(self.tracker.clone())
    }

    /// Spawns a future that holds its [`Tracked`].
    fn launch<F>(&self, task: F) -> Result<(), RuntimeGone>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut handle = self.runtime.spawn(task);
        // A task is only ever cancelled by its runtime shutting down (the pool aborts none),
        // and a runtime that has shut down cancels a new task before this call returns.
        if handle.is_finished()
            && let Poll::Ready(Err(e)) =
                Pin::new(&mut handle).poll(&mut Context::from_waker(Waker::noop()))
            && e.is_cancelled()
        {
            return Err(RuntimeGone);
        }
        Ok(())
    }

    /// Runs `task` until it ends or the pool starts closing.
    pub(crate) fn spawn_until_closing<F>(&self, task: F) -> Result<(), RuntimeGone>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let closing = self.closing.clone();
        self.spawn(async move {
            closing.run_until_cancelled(task).await;
        })
    }

    /// How many of this pool's tasks are alive.
    pub(crate) fn live_tasks(&self) -> usize {
        self.tracker.live.load(Ordering::SeqCst)
    }

    /// Waits until every task has ended; no new task may be spawned after this is called.
    pub(crate) async fn join(&self) {
        self.tracker.close();
        self.tracker.wait().await;
    }

    /// Marks the tracker closed without waiting (the last handle was dropped).
    pub(crate) fn close_tracker(&self) {
        self.tracker.close();
    }
}

/// The runtime a pool was started on has shut down; no task of the pool can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RuntimeGone;
