//! Supervision: every task a pool runs — member starts and stops, timers, members' driver
//! tasks — is spawned here, so closing the pool can end and await all of them.
//!
//! Two tokens order the shutdown: `closing` ends starts and timers as soon as a close
//! begins; `kill` ends members' driver tasks last, after the stops that may still need them
//! (a polite database logout runs over the connection its driver task polls).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// One pool's task tracker and cancellation tokens.
#[derive(Debug, Clone)]
pub(crate) struct Supervisor {
    tracker: TaskTracker,
    runtime: Handle,
    /// Cancelled when a close begins: starts and timers stop.
    pub(crate) closing: CancellationToken,
    /// Cancelled when a close ends: members' driver tasks stop. Members' own tokens are
    /// children of it.
    pub(crate) kill: CancellationToken,
}

impl Supervisor {
    /// A supervisor whose tasks run on `runtime`, wherever they are spawned from.
    pub(crate) fn new(runtime: Handle) -> Self {
        Supervisor {
            tracker: TaskTracker::new(),
            runtime,
            closing: CancellationToken::new(),
            kill: CancellationToken::new(),
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
        let mut handle = self.tracker.spawn_on(task, &self.runtime);
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
        self.tracker.len()
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
