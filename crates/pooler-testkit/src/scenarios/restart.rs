//! The server killed and started again under writers (docs/faults.md).

use std::collections::HashSet;
use std::time::Duration;

use pooler::{Manager, Member, Pool};
use tokio::time::Instant;

use super::refused_while_down;

/// What [`restarted_under_writers`] saw.
#[derive(Debug, Clone, Copy)]
pub struct Restarted {
    /// Writes acknowledged, before, during and after.
    pub acknowledged: usize,
    /// How long a take while the server was down took to be refused.
    pub refused: Duration,
    /// From the server listening again to the first write acknowledged after.
    pub served_again: Duration,
}

/// A server killed and started again on its port while four writers run: `server(true)`
/// kills it (no goodbye to its clients), `server(false)` starts it again and returns once it
/// listens. Each writer takes a member of `pool` (deadline 500 ms) and `write`s a value of
/// its own, unique in the run; `stored` reads back every value the server has, after the
/// restart. Checks that a take while the server is down is refused by its deadline with no
/// member handed out, that the pool serves again by itself within 5 s of the server
/// listening (the start backoff's step is at most 4 s however long the outage, and a
/// server's boot makes it long: docs/design.md, "Failing starts"), and that every
/// acknowledged write is stored. The writers run for 3 s after the restart, and on until the
/// first write after it is acknowledged, or 6 s; a write unanswered for 30 s fails the check.
///
/// # Panics
///
/// When a check fails, or a writer panicked.
///
/// # Cancel safety
///
/// Not meant to be cancelled: dropped, it leaves its writers running until the pool closes.
pub async fn restarted_under_writers<M, W, Fut>(
    pool: &Pool<M>,
    write: W,
    mut server: impl FnMut(bool),
    stored: impl AsyncFnOnce() -> HashSet<i64>,
) -> Restarted
where
    M: Manager,
    W: Fn(Member<M>, i64) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send,
{
    use std::sync::atomic::{AtomicBool, Ordering};
    // A write on a killed server's connection fails when the connection does: a write
    // unanswered this long hangs, and fails the check rather than the run.
    const HUNG: Duration = Duration::from_secs(30);
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    // Raised once the server listens again; then, by the first write acknowledged after.
    let restarted = std::sync::Arc::new(AtomicBool::new(false));
    let served = std::sync::Arc::new(AtomicBool::new(false));
    let begun = Instant::now();
    let writers: Vec<_> = (0..4_i64)
        .map(|writer| {
            let (pool, stop, write) = (pool.clone(), stop.clone(), write.clone());
            let (restarted, served) = (restarted.clone(), served.clone());
            tokio::spawn(async move {
                // Each write: its value, when it ended, and whether it was acknowledged; and
                // the writes still unanswered after 30 s, given up on.
                let (mut writes, mut hung) = (Vec::new(), Vec::new());
                let mut n = 0_i64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let v = writer * 1_000_000 + n;
                    let acknowledged = match pool.take_member(Duration::from_millis(500)).await {
                        Ok(member) => {
                            let write = tokio::time::timeout(HUNG, write(member, v));
                            write.await.unwrap_or_else(|_| {
                                hung.push(v);
                                false
                            })
                        }
                        Err(_) => false,
                    };
                    if !acknowledged {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    } else if restarted.load(Ordering::Relaxed) {
                        served.store(true, Ordering::Relaxed);
                    }
                    writes.push((v, begun.elapsed(), acknowledged));
                }
                (writes, hung)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    server(true);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let refused = refused_while_down(pool, Duration::from_millis(500)).await;
    server(false);
    restarted.store(true, Ordering::Relaxed);
    let restarted = begun.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    while !served.load(Ordering::Relaxed) && begun.elapsed() - restarted < Duration::from_secs(6) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let (mut writes, mut hung) = (Vec::new(), Vec::new());
    for writer in writers {
        let (its, its_hung) = writer.await.expect("a writer");
        writes.extend(its);
        hung.extend(its_hung);
    }
    assert!(
        hung.is_empty(),
        "writes unanswered after {HUNG:?}: {hung:?}"
    );
    let served_again = writes
        .iter()
        .filter(|(_, ended, ok)| *ok && *ended > restarted)
        .map(|(_, ended, _)| *ended - restarted)
        .min()
        .expect("no write acknowledged within 6 s of the restart");
    let acknowledged: Vec<i64> = writes
        .iter()
        .filter(|(.., ok)| *ok)
        .map(|(v, ..)| *v)
        .collect();
    let stored = stored().await;
    let lost: Vec<_> = acknowledged
        .iter()
        .filter(|v| !stored.contains(v))
        .collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    assert!(
        served_again < Duration::from_secs(5),
        "served again only {served_again:?} after the restart"
    );
    Restarted {
        acknowledged: acknowledged.len(),
        refused,
        served_again,
    }
}
