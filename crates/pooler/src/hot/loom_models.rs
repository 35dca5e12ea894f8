//! Loom models of the hot core, the real code through the `sync` shim: every interleaving of
//! takes, returns, waiters that give up and a close must end with each member held by exactly
//! one party, free, or handed back by the close — never lost, never doubled — and no waiter
//! left in the queue.
//!
//! `RUSTFLAGS="--cfg pooler_loom" cargo test -p pooler --lib --release loom`

use super::*;
use crate::waiters::NO_END;
use loom::sync::Arc;
use loom::thread;

type H = Arc<Hot<u32, &'static str>>;

/// Runs a model and says how many interleavings it explored.
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    RUNS.store(0, std::sync::atomic::Ordering::SeqCst);
    loom::model(move || {
        RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        f();
    });
    eprintln!(
        "loom model {name}: {} interleavings",
        RUNS.load(std::sync::atomic::Ordering::SeqCst)
    );
}

/// `n` members (1..=n), `setup` run on the core, then `taken` of them taken by the caller.
fn built(
    n: u32,
    taken: usize,
    setup: impl FnOnce(&mut Locked<'_, u32, &'static str>),
) -> (H, Vec<u32>) {
    let hot = Hot::new(MemberOrder::Lifo, 4, false);
    {
        let mut h = hot.lock();
        for m in 1..=n {
            assert!(matches!(h.admit(m), Ok(None)));
        }
        setup(&mut h);
    }
    let held = (0..taken)
        .map(|_| match hot.take(wait::No, true, false) {
            Found::Member(m, _) => m,
            other => panic!("{other:?}"),
        })
        .collect();
    (Arc::new(hot), held)
}

/// A saturated pool of `n` members (1..=n), all taken by the caller.
fn pool(n: u32) -> (H, Vec<u32>) {
    built(n, n as usize, |h| h.set_saturated(true))
}

/// Gives a member back; a closed core hands it back, and it leaves use to be stopped (as
/// `Shared::stop_after_close` does).
fn give(hot: &H, m: u32, stopped: &mut Vec<u32>) {
    if let Err(m) = hot.give(m, 0) {
        hot.lock().release(0);
        stopped.push(m);
    }
}

/// A thread giving `m` back (as [`give`]): what a closed core handed back to be stopped.
fn returning(hot: H, m: u32) -> thread::JoinHandle<Vec<u32>> {
    thread::spawn(move || {
        let mut stopped = Vec::new();
        give(&hot, m, &mut stopped);
        stopped
    })
}

/// A taker that queues if it must, then gives up (its future dropped, `Hot::give_up` as
/// the take's `Waiting` calls it). What it ends up holding, and what a closed core handed
/// back.
fn take_then_give_up(hot: &H) -> (Option<u32>, Vec<u32>) {
    let mut stopped = Vec::new();
    let held = match hot.take(wait::Queue, true, false) {
        Found::Member(m, _) => Some(m),
        Found::Queued(key) => {
            thread::yield_now();
            if let Some(m) = hot.give_up(key, 0) {
                hot.lock().release(0);
                stopped.push(m);
            }
            None
        }
        _ => None,
    };
    (held, stopped)
}

/// A taker that queues if it must and waits until served (or refused by a close).
fn take_and_wait(hot: &H) -> Option<u32> {
    match hot.take(wait::Queue, true, false) {
        Found::Member(m, _) => Some(m),
        Found::Queued(key) => {
            match loom::future::block_on(std::future::poll_fn(|cx| hot.poll(key, cx, NO_END))) {
                Polled::Served(outcome) => outcome.ok(),
                Polled::Rearm => unreachable!("no model changes the admission rules"),
            }
        }
        _ => None,
    }
}

fn settle(hot: &H, held: &[u32], stopped: &[u32], total: usize) {
    let h = hot.lock();
    let v = h.view();
    let mut all: Vec<u32> = held.iter().chain(stopped).copied().collect();
    all.extend(h.free().copied());
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(
        all.len(),
        n,
        "a member is in two places: {held:?} {stopped:?} {v:?}"
    );
    assert_eq!(n, total, "a member was lost: {held:?} {stopped:?} {v:?}");
    assert_eq!(v.in_use, held.len(), "in use ≠ held: {held:?} {v:?}");
    assert_eq!(v.queued, 0, "a waiter was left queued");
}

#[test]
fn loom_take_races_return_races_a_waiter_giving_up() {
    model("take, return, waiter giving up", || {
        let (hot, mut held) = pool(1);
        let m = held.pop().unwrap();
        let (a, b) = (hot.clone(), hot.clone());
        let waiter = thread::spawn(move || take_then_give_up(&a));
        let taker = thread::spawn(move || match b.take(wait::No, true, false) {
            Found::Member(m, _) => Some(m),
            _ => None,
        });
        let mut stopped = Vec::new();
        give(&hot, m, &mut stopped);
        let (w, s) = waiter.join().unwrap();
        stopped.extend(s);
        held.extend(w);
        held.extend(taker.join().unwrap());
        settle(&hot, &held, &stopped, 1);
    });
}

#[test]
fn loom_a_return_hands_off_to_a_waiter_being_dropped() {
    model("hand-off to a waiter being dropped", || {
        let (hot, mut held) = pool(1);
        let m = held.pop().unwrap();
        let a = hot.clone();
        let waiter = thread::spawn(move || take_then_give_up(&a));
        let mut stopped = Vec::new();
        give(&hot, m, &mut stopped);
        let (w, s) = waiter.join().unwrap();
        stopped.extend(s);
        held.extend(w);
        settle(&hot, &held, &stopped, 1);
    });
}

#[test]
fn loom_two_returns_and_a_waiter() {
    model("two returns and a waiter", || {
        let (hot, mut held) = pool(2);
        let (m1, m2) = (held.pop().unwrap(), held.pop().unwrap());
        let (a, b) = (hot.clone(), hot.clone());
        let waiter = thread::spawn(move || take_and_wait(&a));
        let returner = returning(b, m1);
        let mut stopped = Vec::new();
        give(&hot, m2, &mut stopped);
        stopped.extend(returner.join().unwrap());
        held.extend(waiter.join().unwrap());
        assert_eq!(held.len(), 1, "the waiter was served");
        settle(&hot, &held, &stopped, 2);
    });
}

#[test]
fn loom_close_races_a_return_and_a_waiter() {
    model("close, a return and a waiter", || {
        let (hot, mut held) = pool(1);
        let m = held.pop().unwrap();
        let (a, b) = (hot.clone(), hot.clone());
        let waiter = thread::spawn(move || take_and_wait(&a));
        let returner = returning(b, m);
        let (free, wakers) = hot.lock().close(|| "closed");
        // The members free at the close are stopped (they were not in use).
        wakers.into_iter().for_each(std::task::Waker::wake);
        let mut stopped = free;
        stopped.extend(returner.join().unwrap());
        // A waiter served before the close holds its member; it gives it back into a
        // closed core, which hands it back to be stopped.
        if let Some(m) = waiter.join().unwrap() {
            give(&hot, m, &mut stopped);
        }
        settle(&hot, &held, &stopped, 1);
        assert!(hot.lock().is_closed());
    });
}

/// `n` members (1..=n) with admission on at `limit`, `limit` of them taken by the caller.
fn limited(n: u32, limit: usize) -> (H, Vec<u32>) {
    built(n, limit, |h| {
        let woken = h.set_admission(crate::admission::AdmissionMode::Vegas, limit, None);
        assert!(woken.is_empty());
    })
}

/// A take over the admission limit waits beside a free member while a member in use leaves
/// use to be stopped: the stop hands its place on, with the free member, and wakes the
/// waiter (were it not handed on, the waiter would wait for ever: loom reports it); every
/// member is held, free or stopped, once.
#[test]
fn loom_a_waiter_over_the_limit_races_a_stop() {
    model("a waiter over the limit and a stop", || {
        let (hot, mut held) = limited(3, 2);
        let (m1, m2) = (held.pop().unwrap(), held.pop().unwrap());
        let a = hot.clone();
        let waiter = thread::spawn(move || take_and_wait(&a));
        if let Some(waker) = hot.lock().release(0) {
            waker.wake();
        }
        let mut stopped = vec![m2];
        held.extend(waiter.join().unwrap());
        assert_eq!(held.len(), 1, "the waiter was served");
        give(&hot, m1, &mut stopped);
        settle(&hot, &held, &stopped, 3);
    });
}

/// A take over the limit waits while the limit is lifted (admission turned off) and a member
/// comes back: it is served once, by either, and nothing is lost or doubled.
#[test]
fn loom_a_waiter_over_the_limit_races_the_limit_lifted_and_a_return() {
    model(
        "a waiter over the limit, the limit lifted and a return",
        || {
            let (hot, mut held) = limited(2, 1);
            let m = held.pop().unwrap();
            let (a, b) = (hot.clone(), hot.clone());
            let waiter = thread::spawn(move || take_and_wait(&a));
            let returner = returning(b, m);
            let wakers = hot
                .lock()
                .set_admission(crate::admission::AdmissionMode::Off, 2, None);
            wakers.into_iter().for_each(std::task::Waker::wake);
            let stopped = returner.join().unwrap();
            held.extend(waiter.join().unwrap());
            assert_eq!(held.len(), 1, "the waiter was served");
            settle(&hot, &held, &stopped, 2);
        },
    );
}
