use super::*;
use crate::admission::AdmissionMode;
use crate::waiters::NO_END;

type H = Hot<u32, &'static str>;

fn with_free(order: MemberOrder, members: &[u32]) -> H {
    let hot = H::new(order, 2, false);
    let mut h = hot.lock();
    for m in members {
        assert!(matches!(h.admit(*m), Ok(None)));
    }
    drop(h);
    hot
}

#[test]
fn lifo_and_fifo_hand_out_by_order() {
    let hot = with_free(MemberOrder::Lifo, &[1, 2, 3]);
    assert!(matches!(
        hot.take(wait::No, true, false),
        Found::Member(3, 0)
    ));
    let hot = with_free(MemberOrder::Fifo, &[1, 2, 3]);
    assert!(matches!(
        hot.take(wait::No, true, false),
        Found::Member(1, 0)
    ));
    assert_eq!(
        hot.lock().view(),
        View {
            in_use: 1,
            free: 2,
            queued: 0,
            limit: usize::MAX,
        }
    );
}

#[test]
fn nothing_free_asks_the_cold_engine_unless_saturated() {
    let hot = with_free(MemberOrder::Lifo, &[]);
    assert_eq!(hot.take(wait::Queue, true, false), Found::Cold);
    hot.lock().set_saturated(true);
    assert_eq!(hot.take(wait::No, true, false), Found::Full);
    assert!(matches!(
        hot.take(wait::Queue, true, false),
        Found::Queued(_)
    ));
    assert!(matches!(
        hot.take(wait::Queue, true, false),
        Found::Queued(_)
    ));
    assert_eq!(hot.take(wait::Queue, true, false), Found::QueueFull(2));
    assert_eq!(hot.lock().take_counts(), (5, 0));
}

#[test]
fn a_return_goes_to_the_oldest_waiter_and_wakes_it() {
    let hot = with_free(MemberOrder::Lifo, &[7]);
    assert!(matches!(
        hot.take(wait::Queue, true, true),
        Found::Member(7, 0)
    ));
    hot.lock().set_saturated(true);
    let Found::Queued(first) = hot.take(wait::Queue, true, false) else {
        panic!()
    };
    let Found::Queued(second) = hot.take(wait::Queue, true, false) else {
        panic!()
    };
    assert!(hot.give(7, 1).is_ok());
    assert_eq!(hot.leave(second), None);
    let waker = Waker::noop();
    assert_eq!(
        hot.poll(first, &mut Context::from_waker(waker), NO_END),
        Poll::Ready(Polled::Served(Ok(7)))
    );
    let h = hot.lock();
    assert_eq!(
        h.view(),
        View {
            in_use: 1,
            free: 0,
            queued: 0,
            limit: usize::MAX,
        }
    );
}

#[test]
fn one_hold_per_clock_stamp_is_timed_and_stands_for_those_since() {
    let hot = H::new(MemberOrder::Lifo, 2, true);
    assert!(matches!(hot.lock().admit(1), Ok(None)));
    let mut weights = Vec::new();
    for ticked in [true, false, false, true, false, true] {
        if ticked {
            let _ = hot.lock().ticked();
        }
        let Found::Member(m, timed) = hot.take(wait::No, true, false) else {
            panic!()
        };
        weights.push(timed);
        hot.give(m, 0).unwrap();
    }
    assert_eq!(weights, [1, 0, 0, 3, 0, 2], "every hold counted once");
}

/// With admission on and no histogram: a hold begun with half the limit or less in use is
/// not timed (the first of a tick aside), so the uncontended take reads no clock; past half,
/// every hold of that tick and the next is, whatever is in use when it begins; a tick that
/// stays under half ends it (docs/design.md, "Admission").
#[test]
fn admission_times_every_hold_only_while_more_than_half_the_limit_is_in_use() {
    let hot = H::new(MemberOrder::Lifo, 8, false);
    // As the housekeeping tick does: the gauges' look at the peak, then the tick.
    let tick = |hot: &H| {
        let mut h = hot.lock();
        let _ = h.take_peak();
        let _ = h.ticked();
    };
    let _ = hot.lock().set_admission(AdmissionMode::Vegas, 4, None);
    for m in 1..=4 {
        assert!(matches!(hot.lock().admit(m), Ok(None)));
    }
    let timed = |hot: &H| match hot.take(wait::No, true, false) {
        Found::Member(m, timed) => (m, timed),
        _ => panic!("a member"),
    };
    // The tick's first hold stands for itself; the rest one at a time are not timed.
    tick(&hot);
    let (m, t) = timed(&hot);
    assert_eq!(t, 1);
    hot.give(m, 0).unwrap();
    for _ in 0..3 {
        let (m, t) = timed(&hot);
        assert_eq!(t, 0, "one in use of four: not timed");
        hot.give(m, 0).unwrap();
    }
    // Two in use of four: half, not more.
    let (a, ta) = timed(&hot);
    let (b, tb) = timed(&hot);
    assert_eq!((ta, tb), (0, 0));
    // Three: past half; it stands for the holds since the last timed one.
    let (c, tc) = timed(&hot);
    assert_eq!(tc, 6);
    for m in [a, b, c] {
        hot.give(m, 0).unwrap();
    }
    // The limit stays pressed for the rest of the tick and the next: one in use is timed.
    let (m, t) = timed(&hot);
    assert_eq!(t, 1);
    hot.give(m, 0).unwrap();
    tick(&hot);
    let (m, t) = timed(&hot);
    assert_eq!(t, 1, "the tick after one past half");
    hot.give(m, 0).unwrap();
    // A tick with no more than one in use ends it.
    tick(&hot);
    let (m, t) = timed(&hot);
    assert_eq!(t, 1, "the tick's first");
    hot.give(m, 0).unwrap();
    let (m, t) = timed(&hot);
    assert_eq!(t, 0);
    hot.give(m, 0).unwrap();
}

/// A tick that used less than half the limit brings it down, a step a tick, to twice what
/// it used; a tick with nothing in use leaves it.
#[test]
fn a_tick_that_used_little_of_the_limit_brings_it_down_and_an_idle_one_does_not() {
    let hot = H::new(MemberOrder::Lifo, 8, false);
    let _ = hot.lock().set_admission(AdmissionMode::Vegas, 20, None);
    assert!(matches!(hot.lock().admit(1), Ok(None)));
    for _ in 0..10 {
        assert_eq!(hot.lock().ticked(), None, "nothing used");
    }
    assert_eq!(hot.lock().view().limit, 20);
    let mut moves = 0;
    for _ in 0..40 {
        let Found::Member(m, _) = hot.take(wait::No, true, false) else {
            panic!()
        };
        hot.give(m, 0).unwrap();
        let mut h = hot.lock();
        let _ = h.take_peak();
        moves += usize::from(h.ticked().is_some());
    }
    assert_eq!(hot.lock().view().limit, 2, "twice the one in use");
    assert_eq!(moves, 17, "20 to 2 by log10(limit), at least 1, a tick");
}

#[test]
fn the_peak_remembers_when_it_was_last_seen() {
    let hot = with_free(MemberOrder::Lifo, &[1, 2]);
    let (a, b) = (
        hot.take(wait::No, true, false),
        hot.take(wait::No, true, false),
    );
    let (Found::Member(a, _), Found::Member(b, _)) = (a, b) else {
        panic!()
    };
    hot.give(a, 10).unwrap();
    hot.give(b, 20).unwrap();
    assert_eq!(hot.lock().take_peak(), (2, Some(10)));
    assert_eq!(hot.lock().take_peak(), (0, None));
}

#[test]
fn close_hands_back_the_free_and_refuses_the_waiters() {
    let hot = with_free(MemberOrder::Lifo, &[]);
    hot.lock().set_saturated(true);
    let Found::Queued(key) = hot.take(wait::Queue, true, false) else {
        panic!()
    };
    let (free, wakers) = hot.lock().close(|| "closed");
    assert_eq!(
        (free.len(), wakers.len()),
        (0, 0),
        "a waiter with no waker yet"
    );
    assert_eq!(hot.leave(key), Some(Err("closed")));
    assert_eq!(hot.take(wait::Queue, true, false), Found::Closed);
    assert_eq!(hot.give(3, 0), Err(3));
}

/// A hot core with admission on at `limit` (vegas, `max_count` = `limit`) and `members` free.
fn limited(limit: usize, members: &[u32], queue_target: Option<Duration>) -> H {
    let hot = with_free(MemberOrder::Fifo, members);
    let woken = hot
        .lock()
        .set_admission(AdmissionMode::Vegas, limit, queue_target);
    assert!(woken.is_empty());
    assert_eq!(hot.lock().limit(), limit);
    hot
}

fn served(hot: &H, key: WaitKey) -> Option<u32> {
    match hot.poll(key, &mut Context::from_waker(Waker::noop()), NO_END) {
        Poll::Ready(Polled::Served(Ok(member))) => Some(member),
        Poll::Ready(Polled::Served(Err(e))) => panic!("refused: {e}"),
        Poll::Ready(Polled::Rearm) => panic!("rearmed: no rule changed"),
        Poll::Pending => None,
    }
}

#[test]
fn over_the_limit_a_take_waits_in_the_one_queue_beside_free_members() {
    let hot = limited(2, &[1, 2, 3], None);
    let a = hot.take(wait::Queue, true, false);
    let b = hot.take(wait::Queue, true, false);
    let (Found::Member(a, _), Found::Member(b, _)) = (a, b) else {
        panic!()
    };
    // A member is free and the pool not saturated, but two are in use: no start would help.
    assert_eq!(hot.take(wait::No, true, false), Found::OverLimit(2));
    let Found::Queued(first) = hot.take(wait::Queue, true, false) else {
        panic!()
    };
    let Found::Queued(second) = hot.take(wait::Queue, true, false) else {
        panic!()
    };
    assert_eq!(hot.take(wait::Queue, true, false), Found::QueueFull(2));
    let view = hot.lock().view();
    assert_eq!((view.free, view.queued, view.wanting()), (1, 2, 0));
    // A member given back goes to the oldest waiter, not to the free list.
    assert!(hot.give(a, 1).is_ok());
    assert_eq!(served(&hot, first), Some(a));
    assert_eq!(served(&hot, second), None);
    // A member in use that leaves to be stopped hands its place on, with a free member.
    assert!(hot.lock().release(2).is_some());
    assert_eq!(served(&hot, second), Some(3));
    assert_eq!(hot.lock().view().in_use, 2);
    assert_eq!(b, 2);
}

#[test]
fn raising_or_lifting_the_limit_hands_free_members_to_waiters_and_lowering_it_closes_nothing() {
    let hot = limited(1, &[1, 2, 3], None);
    let Found::Member(held, _) = hot.take(wait::Queue, true, false) else {
        panic!()
    };
    let keys: Vec<WaitKey> = (0..2)
        .map(|_| match hot.take(wait::Queue, true, false) {
            Found::Queued(key) => key,
            other => panic!("{other:?}"),
        })
        .collect();
    // Admission off: both waiters get a free member at once (their wakers come back to be
    // woken; these never polled, so none).
    let woken = hot.lock().set_admission(AdmissionMode::Off, 3, None);
    assert!(woken.is_empty());
    assert_eq!(served(&hot, keys[0]), Some(2));
    assert_eq!(served(&hot, keys[1]), Some(3));
    assert_eq!(hot.lock().limit(), usize::MAX);
    // On again at one while three are in use: nobody is closed, and members come back to
    // the free list, not to a waiter, until the count is under the limit again.
    let _ = hot.lock().set_admission(AdmissionMode::Vegas, 1, None);
    assert_eq!(hot.lock().view().in_use, 3);
    let Found::Queued(waiting) = hot.take(wait::Queue, true, false) else {
        panic!()
    };
    assert!(hot.give(held, 3).is_ok());
    assert!(hot.give(2, 3).is_ok());
    assert_eq!(served(&hot, waiting), None, "two still in use");
    assert_eq!(hot.lock().view().free, 2);
    assert!(hot.give(3, 3).is_ok());
    assert_eq!(
        served(&hot, waiting),
        Some(3),
        "the last one back goes to it"
    );
}

#[tokio::test(start_paused = true)]
async fn a_standing_queue_is_served_newest_first_past_the_target() {
    const MS: Duration = Duration::from_millis(1);
    // Two takes queue 10 ms apart over a limit of one; the member comes back at `after`.
    async fn first_served(after: Duration) -> usize {
        let hot = limited(1, &[1], Some(50 * MS));
        let Found::Member(held, _) = hot.take(wait::Queue, true, false) else {
            panic!()
        };
        let mut keys = Vec::new();
        for _ in 0..2 {
            let Found::Queued(key) = hot.take(wait::Queue, true, false) else {
                panic!()
            };
            keys.push(key);
            tokio::time::advance(10 * MS).await;
        }
        tokio::time::advance(after - 20 * MS).await;
        assert!(hot.give(held, 0).is_ok());
        let first = keys.iter().position(|k| served(&hot, *k).is_some());
        first.expect("one was served")
    }
    assert_eq!(
        first_served(40 * MS).await,
        0,
        "under the target: oldest first"
    );
    assert_eq!(first_served(60 * MS).await, 1, "past it: newest first");
}
