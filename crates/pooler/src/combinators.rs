//! The three future combinators the pool needs — catch a panic, wait for all, take the first
//! success — on std's `poll_fn`, so the crate needs no futures library (docs/design.md,
//! "Features, dependencies and the supported Rust version").

use std::any::Any;
use std::future::{Future, poll_fn};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::{Pin, pin};
use std::task::Poll;

/// Runs `task`, turning a panic in any of its polls into `Err` with the panic's payload.
/// The caller vouches for unwind safety, as with `AssertUnwindSafe`: after a panic the task
/// is dropped, never polled again.
pub(crate) async fn caught<F: Future>(task: F) -> Result<F::Output, Box<dyn Any + Send>> {
    let mut task = pin!(task);
    poll_fn(
        |cx| match catch_unwind(AssertUnwindSafe(|| task.as_mut().poll(cx))) {
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => Poll::Ready(Err(panic)),
        },
    )
    .await
}

/// Runs every task at once; their outputs in the order given.
pub(crate) async fn join_all<F: Future>(tasks: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut running: Vec<Option<Pin<Box<F>>>> =
        tasks.into_iter().map(|t| Some(Box::pin(t))).collect();
    let mut outputs: Vec<Option<F::Output>> = running.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut pending = false;
        for (slot, out) in running.iter_mut().zip(outputs.iter_mut()) {
            if let Some(task) = slot {
                match task.as_mut().poll(cx) {
                    Poll::Ready(v) => {
                        *out = Some(v);
                        *slot = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// Runs every task at once until one succeeds (the others are dropped); when all fail, the
/// error of the last to fail. `tasks` must not be empty.
pub(crate) async fn first_ok<T, E, F>(tasks: impl IntoIterator<Item = F>) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
{
    let mut running: Vec<Pin<Box<F>>> = tasks.into_iter().map(Box::pin).collect();
    debug_assert!(!running.is_empty(), "first_ok of no task");
    poll_fn(|cx| {
        let mut i = 0;
        while i < running.len() {
            match running[i].as_mut().poll(cx) {
                Poll::Ready(Ok(v)) => return Poll::Ready(Ok(v)),
                Poll::Ready(Err(e)) => {
                    drop(running.swap_remove(i));
                    if running.is_empty() {
                        return Poll::Ready(Err(e));
                    }
                }
                Poll::Pending => i += 1,
            }
        }
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::sleep;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn caught_returns_the_output_or_the_panic() {
        assert_eq!(caught(async { 3 }).await.ok(), Some(3));
        let panicked = caught(async {
            sleep(Duration::from_millis(1)).await;
            panic!("boom")
        })
        .await;
        let payload = panicked.expect_err("the panic was caught");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom"));
    }

    #[tokio::test(start_paused = true)]
    async fn join_all_waits_for_every_task_and_keeps_their_order() {
        let started = tokio::time::Instant::now();
        let outs = join_all([30u64, 10, 20].map(|ms| async move {
            sleep(Duration::from_millis(ms)).await;
            ms
        }))
        .await;
        assert_eq!(outs, [30, 10, 20]);
        // At once, not one after another.
        assert_eq!(started.elapsed(), Duration::from_millis(30));
        assert!(
            join_all(Vec::<std::future::Ready<()>>::new())
                .await
                .is_empty()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn first_ok_takes_the_first_success_or_the_last_failure() {
        let task = |ms: u64, ok: bool| async move {
            sleep(Duration::from_millis(ms)).await;
            if ok { Ok(ms) } else { Err(ms) }
        };
        let started = tokio::time::Instant::now();
        assert_eq!(
            first_ok([task(5, false), task(20, true), task(30, true)]).await,
            Ok(20)
        );
        assert_eq!(started.elapsed(), Duration::from_millis(20));
        assert_eq!(first_ok([task(30, false), task(10, false)]).await, Err(30));
    }
}
