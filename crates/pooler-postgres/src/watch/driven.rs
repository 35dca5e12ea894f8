//! The driver of a connection, polled inside a wrapper that tells [`Seen`] when it is quiet
//! (see the parent module's docs).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

use super::Seen;

/// Drives a connection's future and tells [`Seen`] when it is quiet (see the module's docs).
/// It is the driver task's whole future: what the task does when the connection ends is
/// done here too, so each poll goes through one layer less.
pub(crate) struct Driven<F> {
    inner: F,
    seen: Arc<Seen>,
    wake: Arc<Wakeup>,
    pub(super) waker: Waker,
    end: End,
}

/// What the driver task does once its connection has ended: logs why, and tells the member.
pub(crate) struct End {
    pub(crate) pool: String,
    pub(crate) member: u64,
    /// Dropped unsent, it tells the member all the same (the task was aborted).
    pub(crate) done: Option<tokio::sync::oneshot::Sender<()>>,
}

/// The waker handed to the connection's future: it notes the wake-up, then wakes the task.
struct Wakeup {
    /// Held strongly (a waker outliving the connection keeps a few bytes alive, nothing
    /// else): a wake-up is then one store, not an upgrade and a release.
    seen: Arc<Seen>,
    /// The driver task's waker, kept from its first poll: a task's waker stays the same, so
    /// a wake-up wakes it by reference, with no waker taken, cloned and put back per poll.
    task: std::sync::OnceLock<Waker>,
    /// Should the driver ever be polled with another waker: that one, and `moved` set.
    other: AtomicWaker,
    moved: AtomicBool,
}

impl Wake for Wakeup {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.seen.woken.store(true, Ordering::SeqCst);
        if self.moved.load(Ordering::Acquire) {
            self.other.wake();
        } else if let Some(task) = self.task.get() {
            task.wake_by_ref();
        }
    }
}

impl<F> Driven<F> {
    pub(crate) fn new(inner: F, seen: Arc<Seen>, end: End) -> Self {
        let wake = Arc::new(Wakeup {
            seen: seen.clone(),
            task: std::sync::OnceLock::new(),
            other: AtomicWaker::new(),
            moved: AtomicBool::new(false),
        });
        let waker = Waker::from(wake.clone());
        // Not polled yet: whatever was queued since the connection was opened is still to be
        // written, and nothing has registered this waker with the request channel.
        seen.woken.store(true, Ordering::SeqCst);
        Driven {
            inner,
            seen,
            wake,
            waker,
            end,
        }
    }
}

impl<F, E> Future for Driven<F>
where
    F: Future<Output = Result<(), E>> + Unpin,
    E: std::fmt::Display,
{
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        match this.wake.task.get() {
            Some(task) if task.will_wake(cx.waker()) => {}
            Some(_) => {
                this.wake.other.register(cx.waker());
                this.wake.moved.store(true, Ordering::Release);
            }
            None => drop(this.wake.task.set(cx.waker().clone())),
        }
        this.seen.busy.store(true, Ordering::SeqCst);
        this.seen.woken.store(false, Ordering::SeqCst);
        let polled = Pin::new(&mut this.inner).poll(&mut Context::from_waker(&this.waker));
        this.seen.busy.store(false, Ordering::SeqCst);
        if let Poll::Ready(ended) = &polled {
            this.seen.ended.store(true, Ordering::Release);
            if let Err(e) = ended {
                let End { pool, member, .. } = &this.end;
                tracing::debug!(pool = %pool, member, error = %e, "postgres connection ended");
            }
            if let Some(done) = this.end.done.take() {
                let _ = done.send(());
            }
        }
        if this.seen.watchers.load(Ordering::SeqCst) > 0 {
            this.seen.changed.notify_waiters();
        }
        polled.map(drop)
    }
}

impl<F> Drop for Driven<F> {
    /// The driver's task ended or was aborted: no answer comes any more, and whoever waits
    /// for one hears so.
    fn drop(&mut self) {
        self.seen.ended.store(true, Ordering::Release);
        self.seen.changed.notify_waiters();
    }
}
