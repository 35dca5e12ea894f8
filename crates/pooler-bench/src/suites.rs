//! The measurements. Every run of a peer is wrapped in a hang guard: a run that does not
//! finish within [`Effort::hang`] is reported as hung and its tasks are aborted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::peers::{self, Contender};

/// How much work each suite does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Effort {
    /// A run that takes longer than this is a hang.
    pub(crate) hang: Duration,
    /// Each grid cell runs at least this many times, and for at least `grid_time`: cells
    /// of a few tasks take tens of microseconds, and a median of a few milliseconds of
    /// them swings with the scheduler.
    pub(crate) grid_iterations: usize,
    pub(crate) grid_time: Duration,
    pub(crate) fairness_rounds: usize,
    pub(crate) uncontended_ops: u32,
}

impl Effort {
    pub(crate) const FULL: Effort = Effort {
        hang: Duration::from_secs(10),
        grid_iterations: 150,
        grid_time: Duration::from_millis(300),
        fairness_rounds: 200,
        uncontended_ops: 200_000,
    };
    pub(crate) const SMOKE: Effort = Effort {
        hang: Duration::from_secs(1),
        grid_iterations: 2,
        grid_time: Duration::ZERO,
        fairness_rounds: 2,
        uncontended_ops: 1_000,
    };
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `f` against a freshly built pool of every contender, by name.
macro_rules! each_contender {
    ($name:expr, $size:expr, |$pool:ident| $body:expr) => {
        match $name {
            "pooler" => {
                let $pool = Arc::new(peers::pooler($size).await);
                $body
            }
            "pooler-member" => {
                let $pool = Arc::new(peers::PoolerMember(peers::pooler($size).await));
                $body
            }
            "deadpool" => {
                let $pool = Arc::new(peers::deadpool($size));
                $body
            }
            "bb8" => {
                let $pool = Arc::new(peers::bb8($size).await);
                $body
            }
            "qp" => {
                let $pool = Arc::new(peers::qp($size));
                $body
            }
            "mobc" => {
                let $pool = Arc::new(peers::mobc($size));
                $body
            }
            "fastpool" => {
                let $pool = Arc::new(peers::fastpool($size));
                $body
            }
            "r2d2" => {
                let $pool = Arc::new(peers::r2d2($size));
                $body
            }
            other => unreachable!("unknown contender {other}"),
        }
    };
}

/// One grid run: the clock starts before `tasks` tasks are spawned, each doing `ops` take and
/// returns; it stops when all are done. `None` if it hung.
async fn grid_run<C: Contender>(
    pool: &Arc<C>,
    tasks: usize,
    ops: usize,
    hang: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                for _ in 0..ops {
                    pool.take_return().await;
                }
            })
        })
        .collect();
    joined(handles, hang).await?;
    Some(start.elapsed())
}

/// What `tasks` returned, once all are done (a task that panicked returns nothing); `None`,
/// every task aborted, if they are not all done within `hang`.
async fn joined<T>(tasks: Vec<tokio::task::JoinHandle<T>>, hang: Duration) -> Option<Vec<T>> {
    let aborts: Vec<_> = tasks
        .iter()
        .map(tokio::task::JoinHandle::abort_handle)
        .collect();
    let all = async {
        let mut done = Vec::with_capacity(tasks.len());
        for task in tasks {
            done.extend(task.await.ok());
        }
        done
    };
    let done = tokio::time::timeout(hang, all).await;
    if done.is_err() {
        aborts.iter().for_each(tokio::task::AbortHandle::abort);
    }
    done.ok()
}

/// One grid cell: median microseconds per run, `None` if a run hung.
pub(crate) async fn grid_cell(
    name: &str,
    size: usize,
    tasks: usize,
    effort: Effort,
) -> Option<f64> {
    each_contender!(name, size, |pool| {
        grid_run(&pool, tasks, 10, effort.hang).await?; // warm-up
        let mut samples = Vec::with_capacity(effort.grid_iterations);
        let began = Instant::now();
        while samples.len() < effort.grid_iterations || began.elapsed() < effort.grid_time {
            samples.push(grid_run(&pool, tasks, 10, effort.hang).await?.as_secs_f64() * 1e6);
        }
        Some(median(samples))
    })
}

/// Median nanoseconds per take+return on one task.
pub(crate) async fn uncontended(name: &str, size: usize, effort: Effort) -> Option<f64> {
    each_contender!(name, size, |pool| {
        let run = async {
            let mut samples = Vec::new();
            for _ in 0..11 {
                let t = Instant::now();
                for _ in 0..effort.uncontended_ops {
                    pool.take_return().await;
                }
                samples.push(t.elapsed().as_nanos() as f64 / f64::from(effort.uncontended_ops));
            }
            median(samples)
        };
        tokio::time::timeout(effort.hang * 3, run).await.ok()
    })
}

/// Take latencies (ns) with a pool of 8 and 256 tasks, each doing `rounds` times: take, yield
/// once, return. Sorted. `None` if it hung. A quarter as many rounds run first on the same
/// pool and are not counted: the contender measured first in a run otherwise also pays the
/// runtime's and the allocator's warm-up, and its tail reads worse for it.
pub(crate) async fn fairness(name: &str, effort: Effort) -> Option<Vec<f64>> {
    each_contender!(name, 8, |pool| {
        fairness_rounds(&pool, (effort.fairness_rounds / 4).max(1), effort.hang).await?;
        fairness_rounds(&pool, effort.fairness_rounds, effort.hang).await
    })
}

/// [`fairness`]'s workload, `rounds` times per task.
async fn fairness_rounds<C: Contender>(
    pool: &Arc<C>,
    rounds: usize,
    hang: Duration,
) -> Option<Vec<f64>> {
    let handles: Vec<_> = (0..256)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(rounds);
                for _ in 0..rounds {
                    lat.push(pool.timed_take().await.as_nanos() as f64);
                }
                lat
            })
        })
        .collect();
    let mut lat: Vec<f64> = joined(handles, hang * 3).await?.concat();
    lat.sort_by(f64::total_cmp);
    Some(lat)
}

/// `handoff-fixed`: 256 tasks over a pool of 8, each taking, yielding once and returning
/// `rounds` times, so nearly every take queues and is served by a return (`pooler`:
/// through `take()`; `pooler-member`: through `take_member` with a deadline).
/// The two contenders' loops are written out: shared through a closure that builds each
/// take, they measured 59 (pooler) and 43 (deadpool) instructions more per take, the
/// closure's own clone of the pool.
pub(crate) async fn handoffs(who: &str, rounds: usize) {
    let mut tasks = Vec::new();
    // `pooler-member`: through `take_member` with a deadline far past the timer horizon,
    // which reads the clock when the take queues.
    let deadline = (who == "pooler-member").then_some(Duration::from_secs(60));
    if who == "pooler" || deadline.is_some() {
        let pool = peers::pooler(8).await;
        for _ in 0..256 {
            let pool = pool.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let member = match deadline {
                        Some(timeout) => pool.take_member(timeout).await,
                        None => pool.take().await,
                    }
                    .expect("a member");
                    tokio::task::yield_now().await;
                    drop(member);
                }
            }));
        }
    } else {
        let pool = peers::deadpool(8);
        for _ in 0..256 {
            let pool = pool.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let object = pool.get().await.expect("a member");
                    tokio::task::yield_now().await;
                    drop(object);
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("no panic");
    }
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Nanoseconds per `try_take_member` on an exhausted pool.
pub(crate) async fn rejection(effort: Effort) -> f64 {
    let pool = peers::pooler(4).await;
    let _held: Vec<_> = (0..4)
        .map(|_| pool.try_take_member().expect("free"))
        .collect();
    let t = Instant::now();
    for _ in 0..effort.uncontended_ops {
        std::hint::black_box(pool.try_take_member().is_err());
    }
    t.elapsed().as_nanos() as f64 / f64::from(effort.uncontended_ops)
}

/// Churn: a pool of init 0, max 500 is asked for 500 members at once (growth and queueing);
/// returns the time until all 500 are held, then the time to cull back to zero after they
/// are returned.
pub(crate) async fn churn() -> (Duration, Duration) {
    let config = pooler::PoolConfig::new("churn", 0, 500)
        .to_builder()
        .cull_interval(Duration::from_millis(10))
        .max_age(Duration::from_millis(10))
        .queue_max(1000)
        .build()
        .unwrap();
    let pool = pooler::Pool::start(config, peers::Noop)
        .await
        .expect("valid");
    let t = Instant::now();
    let takes: Vec<_> = (0..500)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { pool.take_member(Duration::from_secs(30)).await })
        })
        .collect();
    let mut held = Vec::new();
    for h in takes {
        held.push(h.await.expect("no panic").expect("a member"));
    }
    let grow = t.elapsed();
    drop(held);
    let t = Instant::now();
    while pool.utilization().free_count + pool.utilization().stopping_count > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let cull = t.elapsed();
    pool.close(pooler::Shutdown::Immediate).await;
    (grow, cull)
}

struct Slow;

impl pooler::Manager for Slow {
    type Member = ();
    type Error = std::io::Error;
    async fn start(&self, _: &pooler::MemberContext) -> Result<(), Self::Error> {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok(())
    }
}

/// Time for `Pool::start` with 100 members whose start takes 100 ms.
pub(crate) async fn parallel_start() -> Duration {
    let t = Instant::now();
    let pool = pooler::Pool::start(pooler::PoolConfig::new("slow", 100, 100), Slow)
        .await
        .expect("valid");
    let ready = t.elapsed();
    assert_eq!(pool.utilization().free_count, 100);
    pool.close(pooler::Shutdown::Immediate).await;
    ready
}

/// `n` takers queue on an exhausted pool, each with a 500 ms timeout, and time out one after
/// another in the order they queued, on one thread: (milliseconds the queue took to fill,
/// milliseconds from the last deadline until the last taker had its error). Leaving the queue
/// is O(1) per taker, so the timeouts keep pace with their deadlines and the lag stays small;
/// with an O(n) scan per leave they would fall further behind with every thousand takers.
pub(crate) fn mass_timeout(n: usize) -> (f64, f64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let config = peers::pooler_config(1)
            .to_builder()
            .queue_max(n)
            .build()
            .unwrap();
        let pool = Arc::new(
            pooler::Pool::start(config, peers::Noop)
                .await
                .expect("valid config"),
        );
        let held = pool.try_take_member().expect("the one member");
        let wait = Duration::from_millis(500);
        let started = Instant::now();
        let takers: Vec<_> = (0..n)
            .map(|_| {
                let pool = pool.clone();
                tokio::spawn(async move { pool.take_member(wait).await.map(drop) })
            })
            .collect();
        while pool.utilization().queued_count < n {
            tokio::task::yield_now().await;
        }
        let filled = started.elapsed();
        for taker in takers {
            assert!(taker.await.expect("no panic").is_err(), "timed out");
        }
        let lag = started.elapsed().saturating_sub(filled + wait);
        drop(held);
        (filled.as_secs_f64() * 1e3, lag.as_secs_f64() * 1e3)
    })
}
