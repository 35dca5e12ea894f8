//! A model-based property test: random sequences of takes, returns, fails, panics, cancelled
//! waiters, member crashes, start failures and slowness, clock advances, culls and
//! reconfigures run against the real pool on a paused clock. After every step the pool is
//! checked against what the test itself holds and has queued:
//!
//! - in_use + free + starting + stopping ≤ max_count;
//! - in use = the members the test holds; queued = its waiters still waiting;
//! - no member held twice; no member lost (every live member value is free, in use or
//!   stopping);
//! - a waiter is queued only while no member is free.
//!
//! `POOLER_MODEL_CASES` sets the number of sequences (default 500 × 200 steps = 100 000
//! steps); proptest shrinks a failure to a minimal sequence.
#![allow(clippy::disallowed_methods)] // tests spawn their own consumers

#[path = "../common/mod.rs"]
mod common;
mod features;
mod reference;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use pooler::{Member, Pool, PoolConfig};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    TryTake,
    Take(u64),
    Return(usize),
    Fail(usize),
    PanicDrop(usize),
    CancelWaiter(usize),
    Crash(usize),
    Starts(Step),
    Advance(u64),
    Cull,
    Reconfigure(usize, usize, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::TryTake),
        4 => (1u64..200).prop_map(Op::Take),
        4 => any::<usize>().prop_map(Op::Return),
        1 => any::<usize>().prop_map(Op::Fail),
        1 => any::<usize>().prop_map(Op::PanicDrop),
        1 => any::<usize>().prop_map(Op::CancelWaiter),
        1 => any::<usize>().prop_map(Op::Crash),
        1 => prop_oneof![Just(Step::Ok), Just(Step::Err), (1u64..100).prop_map(|ms| Step::Slow(Duration::from_millis(ms)))]
            .prop_map(Op::Starts),
        2 => (0u64..300).prop_map(Op::Advance),
        1 => Just(Op::Cull),
        1 => (0usize..4, 1usize..6, 0usize..4).prop_map(|(i, m, q)| Op::Reconfigure(i, m, q)),
    ]
}

/// What the test holds: members, and waiter tasks (with whether they are done).
struct Model {
    held: Arc<Mutex<Vec<Member<Fake>>>>,
    waiters: Vec<tokio::task::JoinHandle<()>>,
    steps: Arc<AtomicUsize>,
}

fn check(pool: &Pool<Fake>, probe: &Probe, model: &mut Model, step: &Op) {
    let u = pool.utilization();
    let total = u.in_use_count + u.free_count + u.starting_count + u.stopping_count;
    assert!(
        total <= u.max_count,
        "after {step:?}: {total} members > max_count {}: {u:?}",
        u.max_count
    );
    let held = model.held.lock().unwrap();
    assert_eq!(
        u.in_use_count,
        held.len(),
        "after {step:?}: in use ≠ members held: {u:?}"
    );
    let mut ids: Vec<u64> = held.iter().map(Member::id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        ids.len(),
        held.len(),
        "after {step:?}: a member is held twice"
    );
    drop(held);
    model.waiters.retain(|w| !w.is_finished());
    assert_eq!(
        u.queued_count,
        model.waiters.len(),
        "after {step:?}: queued ≠ waiters still waiting: {u:?}"
    );
    assert!(
        u.queued_count == 0 || u.free_count == 0,
        "after {step:?}: a waiter beside a free member: {u:?}"
    );
    assert_eq!(
        probe.alive(),
        u.in_use_count + u.free_count + u.stopping_count,
        "after {step:?}: a member was lost: {u:?}"
    );
    model.steps.fetch_add(1, SeqCst);
}

fn run(ops: Vec<Op>, steps: Arc<AtomicUsize>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async move {
        let config = PoolConfig::new("model", 1, 3)
            .to_builder()
            .cull_interval(Duration::ZERO)
            .queue_max(3)
            .build()
            .unwrap();
        let (pool, probe) = pool_with(config.clone(), Fake::default()).await;
        let mut model = Model {
            held: Arc::default(),
            waiters: Vec::new(),
            steps,
        };
        let pick = |n: usize, i: usize| if n == 0 { None } else { Some(i % n) };
        for op in &ops {
            match op {
                Op::TryTake => {
                    if let Ok(m) = pool.try_take_member() {
                        model.held.lock().unwrap().push(m);
                    }
                }
                Op::Take(ms) => {
                    let (pool, held) = (pool.clone(), model.held.clone());
                    let timeout = Duration::from_millis(*ms);
                    model.waiters.push(tokio::spawn(async move {
                        if let Ok(m) = pool.take_member(timeout).await {
                            held.lock().unwrap().push(m);
                        }
                    }));
                }
                Op::Return(i) | Op::Fail(i) | Op::PanicDrop(i) => {
                    let taken = {
                        let mut held = model.held.lock().unwrap();
                        let n = held.len();
                        pick(n, *i).map(|at| held.swap_remove(at))
                    };
                    if let Some(m) = taken {
                        match op {
                            Op::Return(_) => drop(m),
                            Op::Fail(_) => Member::fail(m),
                            _ => crash_holding(m),
                        }
                    }
                }
                Op::CancelWaiter(i) => {
                    if let Some(at) = pick(model.waiters.len(), *i) {
                        model.waiters[at].abort();
                    }
                }
                Op::Crash(i) => {
                    let ids: Vec<u64> = pool.stats().iter().map(|s| s.id).collect();
                    if let Some(at) = pick(ids.len(), *i) {
                        probe.try_crash(ids[at]);
                    }
                }
                Op::Starts(step) => probe.set_start(*step),
                Op::Advance(ms) => tokio::time::advance(Duration::from_millis(*ms)).await,
                Op::Cull => pool.cull(),
                Op::Reconfigure(init, max, queue) => {
                    let init = (*init).min(*max);
                    let new = config
                        .to_builder()
                        .init_count(init)
                        .max_count(*max)
                        .queue_max(*queue)
                        .build()
                        .unwrap();
                    let before = (pool.config(), pool.utilization());
                    if pool.reconfigure(new).is_err() {
                        assert_eq!(
                            (pool.config(), pool.utilization()),
                            before,
                            "a rejected reconfigure changed the pool"
                        );
                    }
                }
            }
            settle().await;
            check(&pool, &probe, &mut model, op);
        }
        // The pool still serves, and closes with nothing left.
        probe.set_start(Step::Ok);
        for w in model.waiters.drain(..) {
            w.abort();
        }
        settle().await; // the aborts take effect
        let held = std::mem::take(&mut *model.held.lock().unwrap());
        drop(held);
        tokio::time::advance(Duration::from_secs(20)).await; // starts in flight finish
        settle().await;
        pool.reconfigure(config.to_builder().queue_max(3).build().unwrap())
            .unwrap();
        settle().await;
        assert!(
            pool.take_member(Duration::from_secs(30)).await.is_ok(),
            "the pool serves after the sequence"
        );
        tokio::time::timeout(
            Duration::from_secs(3600),
            pool.close(pooler::Shutdown::Graceful),
        )
        .await
        .unwrap_or_else(|_| panic!("the close never finished (a member was lost)"));
        assert_eq!((probe.alive(), pool.live_tasks()), (0, 0));
    });
}

#[test]
fn the_pool_agrees_with_the_model_after_every_step() {
    std::panic::set_hook(Box::new(|info| {
        if !info.to_string().contains("consumer crashed") {
            eprintln!("{info}");
        }
    }));
    let cases = std::env::var("POOLER_MODEL_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(500);
    let steps = Arc::new(AtomicUsize::new(0));
    let counted = steps.clone();
    proptest!(common::keeping_failures(cases), |(ops in proptest::collection::vec(op(), 200))| {
        run(ops, counted.clone());
    });
    let steps = steps.load(SeqCst);
    eprintln!("model: {steps} steps checked");
    assert!(steps >= cases as usize * 200, "{steps} steps");
}
