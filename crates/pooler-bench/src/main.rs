//! pooler's benchmarks. `cargo run --release -p pooler-bench -- [suite]`.
#![allow(clippy::disallowed_methods)] // benchmarks spawn their own load

use std::time::{Duration, Instant};

use pooler::{Manager, MemberContext, Pool, PoolConfig};

/// A member that costs nothing, so only the pool is measured.
struct Noop;

impl Manager for Noop {
    type Member = u64;
    type Error = std::io::Error;
    async fn start(&self, ctx: &MemberContext) -> Result<u64, Self::Error> {
        Ok(ctx.member_id())
    }
}

/// Median nanoseconds per take+return on one task, over `rounds` rounds of `n`.
async fn take_return(config: PoolConfig, n: u32, rounds: usize) -> f64 {
    let pool = Pool::start(config, Noop).await.expect("valid config");
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..n {
            let m = pool.try_take_member().expect("a free member");
            std::hint::black_box(&*m);
        }
        samples.push(t.elapsed().as_nanos() as f64 / f64::from(n));
    }
    samples.sort_by(f64::total_cmp);
    samples[rounds / 2]
}

async fn lifetime_cost() {
    let base = PoolConfig {
        cull_interval: Duration::ZERO,
        ..PoolConfig::new("bench", 8, 8)
    };
    let with = PoolConfig {
        max_lifetime: Some(Duration::from_secs(3600)),
        ..base.clone()
    };
    let jitter = PoolConfig {
        max_lifetime_jitter: Duration::from_secs(60),
        ..with.clone()
    };
    take_return(base.clone(), 200_000, 10).await; // warm up
    // Interleave, rotating the order, to spread machine noise over all three.
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..9 {
        for which in 0..3 {
            match (round + which) % 3 {
                0 => a.push(take_return(base.clone(), 200_000, 15).await),
                1 => b.push(take_return(with.clone(), 200_000, 15).await),
                _ => c.push(take_return(jitter.clone(), 200_000, 15).await),
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (a, b, c) = (median(&mut a), median(&mut b), median(&mut c));
    println!("uncontended take+return, one task, pool of 8 (median ns per pair):");
    println!("  no max_lifetime             {a:7.1}");
    println!(
        "  max_lifetime 1h             {b:7.1}  ({:+.1} %)",
        (b / a - 1.0) * 100.0
    );
    println!(
        "  max_lifetime 1h, jitter 60s {c:7.1}  ({:+.1} %)",
        (c / a - 1.0) * 100.0
    );
}

/// A fixed amount of work for instruction counting (`valgrind --tool=callgrind`): 100 000
/// take+return pairs with or without a lifetime.
async fn fixed_work(lifetime: bool) {
    let mut config = PoolConfig {
        cull_interval: Duration::ZERO,
        ..PoolConfig::new("bench", 8, 8)
    };
    if lifetime {
        config.max_lifetime = Some(Duration::from_secs(3600));
        config.max_lifetime_jitter = Duration::from_secs(60);
    }
    let median = take_return(config, 100_000, 1).await;
    std::hint::black_box(median);
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let suite = std::env::args().nth(1).unwrap_or_else(|| "lifetime".into());
    match suite.as_str() {
        "lifetime" => lifetime_cost().await,
        "fixed-plain" => fixed_work(false).await,
        "fixed-lifetime" => fixed_work(true).await,
        other => {
            eprintln!("unknown suite `{other}`; suites: lifetime, fixed-plain, fixed-lifetime");
            std::process::exit(2);
        }
    }
}
