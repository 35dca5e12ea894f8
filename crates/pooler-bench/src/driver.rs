//! What a member's supervised driver task costs next to a plain `tokio::spawn`, in isolation:
//! a member whose "connection" is a driver task answering requests over a channel (as a
//! database client's connection future does), one consumer doing take → request → answer →
//! return, the driver spawned either through `MemberContext::spawn` or with `tokio::spawn`.

use std::time::Instant;

use pooler::{Manager, MemberContext, Pool, PoolConfig, Shutdown};
use tokio::sync::{mpsc, oneshot};

/// A request to the driver: answer on this channel.
type Request = oneshot::Sender<()>;

/// Echo members, their driver supervised by the pool or plainly spawned.
struct Echo {
    supervised: bool,
}

impl Manager for Echo {
    type Member = mpsc::UnboundedSender<Request>;
    type Error = std::io::Error;

    async fn start(&self, ctx: &MemberContext) -> Result<Self::Member, Self::Error> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Request>();
        let driver = async move {
            while let Some(answer) = rx.recv().await {
                let _ = answer.send(());
            }
        };
        if self.supervised {
            ctx.spawn(driver);
        } else {
            tokio::spawn(driver);
        }
        Ok(tx)
    }
}

/// Nanoseconds per take → request → answer → return, over `ops` operations.
async fn per_op(supervised: bool, ops: u32) -> f64 {
    let config = PoolConfig::builder("driver")
        .init_count(1)
        .max_count(1)
        .build()
        .expect("a valid config");
    let pool = Pool::start(config, Echo { supervised })
        .await
        .expect("a pool");
    let started = Instant::now();
    for _ in 0..ops {
        let member = pool.try_take_member().expect("a free member");
        let (answer, answered) = oneshot::channel();
        member.send(answer).expect("the driver is alive");
        answered.await.expect("an answer");
    }
    let ns = started.elapsed().as_nanos() as f64 / f64::from(ops);
    pool.close(Shutdown::Immediate).await;
    ns
}

/// Interleaved rounds of both; prints the medians and the spread.
pub(crate) async fn compare(rounds: usize, ops: u32) {
    let (mut plain, mut supervised) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternate which goes first, so neither always runs on a warmer cache.
        if round % 2 == 0 {
            plain.push(per_op(false, ops).await);
            supervised.push(per_op(true, ops).await);
        } else {
            supervised.push(per_op(true, ops).await);
            plain.push(per_op(false, ops).await);
        }
    }
    for v in [&mut plain, &mut supervised] {
        v.sort_by(f64::total_cmp);
    }
    let line = |name: &str, v: &[f64]| {
        println!(
            "{name:<11} {:>7.0} ns per take → request → answer → return (median of {rounds}; {:.0}–{:.0})",
            v[v.len() / 2],
            v[0],
            v[v.len() - 1]
        );
    };
    line("plain spawn", &plain);
    line("supervised", &supervised);
    println!(
        "supervised ÷ plain: {:.3}",
        supervised[supervised.len() / 2] / plain[plain.len() / 2]
    );
}

/// A fixed amount of work for `valgrind --tool=callgrind` (instructions, exactly).
pub(crate) async fn fixed(supervised: bool, ops: u32) {
    let _ = per_op(supervised, ops).await;
}
