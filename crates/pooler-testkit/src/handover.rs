//! The round every differential hand-over fuzzer runs, written once for every backend
//! (docs/design.md, "Recycling on return"): user A takes a member, acts on it and gives it
//! back; user B takes one, observes everything a user can see of its session and writes a
//! mark; a third take counts the mark. B must see what a new member shows, and the mark
//! must be there once. A backend says how to act, observe, write and count ([`Session`]).

use std::fmt::Debug;
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use pooler::{Manager, Member, Pool};

/// How one backend's fuzzer acts on a member and reads it back.
// Run with `block_on` on the fuzzer's own runtime: the futures are never sent.
#[allow(async_fn_in_trait)]
pub trait Session {
    /// The pool's manager.
    type Manager: Manager;
    /// One thing user A does (printed with a failing sequence).
    type Action: Debug;
    /// User A does `action`; its errors are the sequence's own business (a `COMMIT` outside
    /// a transaction, a statement refused in a failed one) and are ignored.
    async fn act(&self, member: &mut Member<Self::Manager>, action: &Self::Action);
    /// Everything the next user can observe of the session, as one text.
    async fn observe(&self, member: &mut Member<Self::Manager>) -> String;
    /// User B writes `mark`; whether every write succeeded.
    async fn write(&self, member: &mut Member<Self::Manager>, mark: i64) -> bool;
    /// How many writes of `mark` are there.
    async fn count(&self, member: &mut Member<Self::Manager>, mark: i64) -> i64;
}

/// What a new member shows: one taken from `pool` before any sequence ran.
///
/// # Panics
///
/// When no member comes within 10 s.
///
/// # Cancel safety
///
/// Cancel safe: a member taken is given back when the future is dropped.
pub async fn fresh<S: Session>(pool: &Pool<S::Manager>, session: &S) -> String {
    let mut member = take(pool, "the first").await;
    session.observe(&mut member).await
}

/// One round: A runs `actions` and gives the member back, B observes and writes, a third
/// take counts. `Err` says what differed, with the sequence. A member B found dirty, or
/// could not write through, is failed, so the next round (a shrink's included) starts from a
/// clean one.
///
/// # Panics
///
/// When a take gets no member within 10 s.
///
/// # Cancel safety
///
/// Cancel safe as far as the pool goes (a member taken is given back when the future is
/// dropped); the round's verdict is lost.
pub async fn round<S: Session>(
    pool: &Pool<S::Manager>,
    session: &S,
    actions: &[S::Action],
    fresh: &str,
) -> Result<(), String> {
    static MARKS: AtomicI64 = AtomicI64::new(0);
    let mark = MARKS.fetch_add(1, Ordering::Relaxed) + 1;
    let mut a = take(pool, "user A's").await;
    for action in actions {
        session.act(&mut a, action).await;
    }
    drop(a);
    let mut b = take(pool, "user B's").await;
    let seen = session.observe(&mut b).await;
    let wrote = session.write(&mut b, mark).await;
    if seen == fresh && wrote {
        drop(b);
    } else {
        Member::fail(b);
    }
    // Through the pool again: B's member came back (and was maybe reset) in between.
    let mut reader = take(pool, "the reader's").await;
    let kept = session.count(&mut reader, mark).await;
    drop(reader);
    if seen != fresh {
        return Err(format!(
            "after {actions:#?} the next user's session differs from a new one's:\n  \
             new:  {fresh}\n  seen: {seen}"
        ));
    }
    if !wrote {
        return Err(format!("after {actions:#?} the next user's write failed"));
    }
    if kept != 1 {
        return Err(format!(
            "after {actions:#?} the next user's write was lost ({kept} found, not 1)"
        ));
    }
    Ok(())
}

/// Polls `future` exactly once and drops it: a call cancelled at its first await, which may
/// or may not have reached the server.
///
/// # Cancel safety
///
/// Cancel safe: `future` is dropped either way.
pub async fn poll_once_and_drop<F: Future>(future: F) {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        let _ = future.as_mut().poll(cx);
        std::task::Poll::Ready(())
    })
    .await;
}

async fn take<M: Manager>(pool: &Pool<M>, whose: &str) -> Member<M> {
    pool.take_member(Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{whose} take: {e}"))
}
