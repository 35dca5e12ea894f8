use super::*;
use crate::config::MemberOrder;

type C = Cold<()>;

fn limits(init: usize, max: usize) -> Limits {
    Limits {
        init_count: init,
        max_count: max,
        queue_max: 2,
        order: MemberOrder::Lifo,
        auto_grow_threshold: None,
        max_starts: usize::MAX,
        start_spacing: None,
        overlap: None,
        backoff_jitter: false,
    }
}

fn view(in_use: usize, free: usize, queued: usize) -> View {
    View {
        in_use,
        free,
        queued,
        limit: usize::MAX,
    }
}

/// Starts `n` members and brings them up (as free members of the view).
fn fill(c: &mut C, n: usize) -> Vec<Key> {
    let free = c.live;
    let starts = c.grow(n, Instant::now(), view(0, free, 0));
    let keys: Vec<Key> = starts.slots.iter().map(|s| s.0).collect();
    for &k in &keys {
        assert!(c.started(k, Instant::now(), None, ()));
    }
    keys
}

#[test]
fn an_empty_take_starts_a_batch_of_init_count_within_room() {
    let mut c = C::new(limits(3, 4));
    let t = Instant::now();
    let (why, starts) = c.take(t, t, view(0, 0, 0));
    assert_eq!((why, starts.slots.len()), (Empty::AllInUse, 3));
    // init − starting = 0, so the next take starts max(0, 1) = 1 within the slot left.
    let (_, starts) = c.take(t, t, view(0, 0, 0));
    assert_eq!(starts.slots.len(), 1);
    let (why, starts) = c.take(t, t, view(0, 0, 0));
    assert_eq!(
        (why, starts.slots.len()),
        (Empty::AtCapacity, 0),
        "full with starts in flight, and this take started none (docs/design.md, \"Failing starts\")"
    );
    assert!(!c.saturated(view(0, 0, 0)) || c.starting == 4);
    c.check_all(view(0, 0, 0));
}

#[test]
fn saturated_means_no_room_not_failing_not_closed() {
    let mut c = C::new(limits(1, 1));
    fill(&mut c, 1);
    assert!(c.saturated(view(1, 0, 0)));
    let mut c = C::new(limits(0, 1));
    let (k, _) = c.grow(1, Instant::now(), view(0, 0, 0)).slots[0];
    c.start_failed(k, StartError::Died, true, Instant::now());
    assert!(
        !c.saturated(view(0, 0, 0)),
        "failing: the take decides with the policy"
    );
    c.stop_done(k);
    let mut c = C::new(limits(1, 1));
    fill(&mut c, 1);
    c.close();
    assert!(
        !c.saturated(view(1, 0, 0)),
        "a closed pool refuses through the cold engine"
    );
}

#[test]
fn stopping_members_hold_their_slot_until_the_stop_ends() {
    let mut c = C::new(limits(1, 1));
    let keys = fill(&mut c, 1);
    c.begin_stop(keys[0]);
    c.owe_replacement();
    assert!(
        c.refill(Instant::now(), view(0, 0, 0)).is_empty(),
        "no room while stopping"
    );
    c.stop_done(keys[0]);
    assert_eq!(c.refill(Instant::now(), view(0, 0, 0)).slots.len(), 1);
    c.check_all(view(0, 0, 0));
}

#[test]
fn failing_starts_back_off_one_at_a_time_and_fail_fast_by_deadline() {
    let mut c = C::new(limits(3, 10));
    let t0 = Instant::now();
    let v = view(0, 0, 0);
    let starts = c.refill(t0, v);
    assert_eq!(starts.slots.len(), 3);
    for (k, _) in starts.slots {
        c.start_failed(k, StartError::Died, false, t0);
    }
    let retry = c.refill(t0, v);
    assert_eq!(retry.slots.len(), 1, "one probe while backing off");
    assert_eq!(
        retry.delay,
        crate::backoff::backoff(1),
        "three failures, one step"
    );
    assert!(c.refill(t0, v).is_empty(), "never a second probe in flight");
    let (why, starts) = c.take(t0, t0, v);
    assert_eq!((why, starts.is_empty()), (Empty::Unavailable, true));
    let (why, _) = c.take(t0, t0 + Duration::from_secs(1), v);
    assert_eq!(
        why,
        Empty::AllInUse,
        "the probe attempts before this deadline"
    );
    let (k, _) = retry.slots[0];
    assert!(c.started(k, t0, None, ()));
    assert_eq!(c.refill(t0, view(0, 1, 0)).slots.len(), 2);
    assert!(c.last_error().is_none());
    c.check_all(view(0, 1, 0));
}

/// Regression: the failure count was reset only by a success and no retry was scheduled
/// when no member was needed, so one old failure refused every later take.
#[test]
fn a_take_after_the_backoff_step_starts_an_attempt_and_waits_for_it() {
    let mut c = C::new(limits(0, 1));
    let t0 = Instant::now();
    let (k, _) = c.grow(1, t0, view(0, 0, 0)).slots[0];
    c.start_failed(k, StartError::Died, false, t0);
    assert!(c.refill(t0, view(0, 0, 0)).is_empty(), "nothing is needed");
    let later = t0 + Duration::from_secs(2);
    let (why, starts) = c.take(later, later + Duration::from_secs(2), view(0, 0, 0));
    assert_eq!(
        (why, starts.slots.len(), starts.delay),
        (Empty::AllInUse, 1, Duration::ZERO)
    );
}

/// Regression: a member dying as it started counted as a successful start.
#[test]
fn a_member_dying_as_it_starts_counts_as_a_failed_start() {
    let mut c = C::new(limits(1, 2));
    let t0 = Instant::now();
    let (k, id) = c.refill(t0, view(0, 0, 0)).slots[0];
    assert_eq!(c.mark_dead(k, id), Death::Starting);
    assert!(!c.started(k, t0, None, ()));
    assert!(matches!(c.last_error(), Some(StartError::Died)));
    c.stop_done(k);
    let retry = c.refill(t0, view(0, 0, 0));
    assert_eq!(
        (retry.slots.len(), retry.delay),
        (1, crate::backoff::backoff(1))
    );
}

#[test]
fn deaths_of_unknown_or_reused_keys_are_ignored() {
    let mut c = C::new(limits(0, 2));
    let keys = fill(&mut c, 1);
    let id = c.slots[keys[0]].id;
    assert_eq!(c.mark_dead(keys[0], id + 100), Death::Ignored);
    assert_eq!(c.mark_dead(keys[0], id), Death::Live);
    c.begin_stop(keys[0]);
    assert_eq!(c.mark_dead(keys[0], id), Death::Ignored);
}

#[test]
fn refill_serves_the_floor_the_waiters_and_the_debts_within_room() {
    let mut c = C::new(limits(2, 5));
    let t = Instant::now();
    assert_eq!(
        c.refill(t, view(0, 0, 0)).slots.len(),
        2,
        "up to init_count"
    );
    assert!(c.refill(t, view(0, 0, 0)).is_empty(), "already starting");
    assert!(
        c.refill(t, view(0, 0, 2)).is_empty(),
        "two starting serve two waiters"
    );
    for _ in 0..3 {
        c.owe_replacement();
    }
    assert_eq!(
        c.refill(t, view(0, 0, 2)).slots.len(),
        1,
        "three owed, two starting"
    );
}

/// Regression: the expiry heap kept an entry per replaced member until it surfaced, so one
/// long-lived member pinned the rest and memory grew with churn.
#[test]
fn expiries_never_outgrow_the_pool_under_churn() {
    let mut c = C::new(limits(0, 2));
    let t0 = Instant::now();
    let year = t0 + Duration::from_secs(365 * 24 * 3600);
    let (old, _) = c.grow(1, t0, view(0, 0, 0)).slots[0];
    assert!(c.started(old, t0, Some(year), ()));
    for i in 0..10_000u64 {
        let (k, _) = c.grow(1, t0, view(0, 1, 0)).slots[0];
        assert!(c.started(k, t0, Some(t0 + Duration::from_secs(3600 + i)), ()));
        c.begin_stop(k);
        c.stop_done(k);
        assert!(c.expiries.len() <= 2, "after {i} replacements");
    }
    assert_eq!(c.expiries.len(), 1);
    c.check_all(view(0, 1, 0));
}

#[test]
fn due_expiries_leave_the_set_and_reschedule_recomputes_them() {
    let mut c = C::new(limits(0, 3));
    let t0 = Instant::now();
    fill(&mut c, 3);
    c.reschedule(|born, ()| Some(born + Duration::from_secs(10)));
    let first = c.next_expiry().unwrap();
    assert!(first >= t0 + Duration::from_secs(10));
    assert_eq!(c.due(first + Duration::from_secs(1)).len(), 3);
    assert_eq!(c.next_expiry(), None);
    c.reschedule(|_, ()| None);
    assert_eq!(c.next_expiry(), None);
}

#[test]
fn cull_stops_free_members_beyond_the_window_peak_and_init() {
    let mut c = C::new(limits(1, 10));
    fill(&mut c, 5);
    let t0 = Instant::now();
    let age = Duration::from_secs(10);
    assert_eq!(
        c.cull(t0, age, 4, t0, view(4, 1, 0)),
        1,
        "beyond the peak of 4: 1"
    );
    let at = |s| t0 + Duration::from_secs(s);
    assert_eq!(
        c.cull(at(5), age, 4, at(5), view(0, 4, 0)),
        0,
        "seen at 5 s"
    );
    assert_eq!(
        c.cull(at(11), age, 0, at(11), view(0, 4, 0)),
        0,
        "still in the window"
    );
    assert_eq!(
        c.cull(at(16), age, 0, at(16), view(0, 4, 0)),
        3,
        "down to init_count"
    );
}

/// Regression: lowering max_count below the members held broke invariant #1.
#[test]
fn lowering_max_count_keeps_the_excess_stopping_and_starts_nothing() {
    let mut c = C::new(limits(0, 4));
    let t0 = Instant::now();
    let keys = fill(&mut c, 4);
    c.begin_stop(keys[0]);
    c.begin_stop(keys[1]);
    c.set_limits(
        Limits {
            max_count: 2,
            ..c.limits
        },
        view(0, 2, 0),
    );
    c.owe_replacement();
    assert!(
        c.refill(t0, view(0, 2, 0)).is_empty(),
        "no room until the excess stopped"
    );
    let (why, starts) = c.take(t0, t0, view(2, 0, 0));
    assert_eq!((why, starts.is_empty()), (Empty::AtCapacity, true));
    c.stop_done(keys[0]);
    c.stop_done(keys[1]);
    c.check_all(view(2, 0, 0));
}

#[test]
fn no_more_starts_than_max_concurrent_starts_are_ever_in_progress() {
    let mut c: C = Cold::new(Limits {
        max_starts: 2,
        start_spacing: None,
        ..limits(6, 6)
    });
    let now = Instant::now();
    let first = c.grow(6, now, view(0, 0, 0));
    assert_eq!(
        first.slots.len(),
        2,
        "the pool's first starts, two at a time"
    );
    // A take finds nothing free: the starts under way will serve it, none is added.
    let (why, starts) = c.take(now, now, view(0, 0, 1));
    assert_eq!((why, starts.slots.len()), (Empty::AllInUse, 0));
    assert!(c.refill(now, view(0, 0, 1)).is_empty());
    // One start ends: one more may begin, and no more.
    let (key, _) = first.slots[0];
    assert!(c.started(key, now, None, ()));
    assert_eq!(c.refill(now, view(0, 1, 0)).slots.len(), 1);
    assert_eq!(c.starting(), 2);
    c.check_all(view(0, 1, 0));
}
