use super::*;

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
        hot.take(Wait::No, true, false),
        Found::Member(3, 0)
    ));
    let hot = with_free(MemberOrder::Fifo, &[1, 2, 3]);
    assert!(matches!(
        hot.take(Wait::No, true, false),
        Found::Member(1, 0)
    ));
    assert_eq!(
        hot.lock().view(),
        View {
            in_use: 1,
            free: 2,
            queued: 0
        }
    );
}

#[test]
fn nothing_free_asks_the_cold_engine_unless_saturated() {
    let hot = with_free(MemberOrder::Lifo, &[]);
    assert_eq!(hot.take(Wait::Queue, true, false), Found::Cold);
    hot.lock().set_saturated(true);
    assert_eq!(hot.take(Wait::No, true, false), Found::Full);
    assert!(matches!(
        hot.take(Wait::Queue, true, false),
        Found::Queued(_)
    ));
    assert!(matches!(
        hot.take(Wait::Queue, true, false),
        Found::Queued(_)
    ));
    assert_eq!(hot.take(Wait::Queue, true, false), Found::QueueFull(2));
    assert_eq!(hot.lock().take_counts(), (5, 0));
}

#[test]
fn a_return_goes_to_the_oldest_waiter_and_wakes_it() {
    let hot = with_free(MemberOrder::Lifo, &[7]);
    assert!(matches!(
        hot.take(Wait::Queue, true, true),
        Found::Member(7, 0)
    ));
    hot.lock().set_saturated(true);
    let Found::Queued(first) = hot.take(Wait::Queue, true, false) else {
        panic!()
    };
    let Found::Queued(second) = hot.take(Wait::Queue, true, false) else {
        panic!()
    };
    assert!(hot.give(7, 1).is_ok());
    assert_eq!(hot.leave(second), None);
    let waker = Waker::noop();
    assert_eq!(
        hot.poll(first, &mut Context::from_waker(waker)),
        Poll::Ready(Ok(7))
    );
    let h = hot.lock();
    assert_eq!(
        h.view(),
        View {
            in_use: 1,
            free: 0,
            queued: 0
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
            hot.lock().ticked();
        }
        let Found::Member(m, timed) = hot.take(Wait::No, true, false) else {
            panic!()
        };
        weights.push(timed);
        hot.give(m, 0).unwrap();
    }
    assert_eq!(weights, [1, 0, 0, 3, 0, 2], "every hold counted once");
}

#[test]
fn the_peak_remembers_when_it_was_last_seen() {
    let hot = with_free(MemberOrder::Lifo, &[1, 2]);
    let (a, b) = (
        hot.take(Wait::No, true, false),
        hot.take(Wait::No, true, false),
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
    let Found::Queued(key) = hot.take(Wait::Queue, true, false) else {
        panic!()
    };
    let (free, wakers) = hot.lock().close(|| "closed");
    assert_eq!(
        (free.len(), wakers.len()),
        (0, 0),
        "a waiter with no waker yet"
    );
    assert_eq!(hot.leave(key), Some(Err("closed")));
    assert_eq!(hot.take(Wait::Queue, true, false), Found::Closed);
    assert_eq!(hot.give(3, 0), Err(3));
}
