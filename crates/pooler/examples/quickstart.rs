//! A pool of simulated members, in the spirit of pooler's `pooled_gs` demo: take, use,
//! return, exhaust the pool, queue, crash a member and watch it replaced.
//!
//! Run with `cargo run --example quickstart`. No server is needed.
#![allow(clippy::disallowed_methods)] // the spawn ban guards the library, not its users

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use pooler::{Manager, Member, MemberContext, Pool, PoolConfig, Shutdown, TakeError};
use tokio::sync::Notify;

/// A pretend client: its id, and a driver task that runs until the "server" hangs up.
#[derive(Debug)]
struct Client {
    id: u64,
    requests: u64,
    hang_up: Arc<Notify>,
}

/// Starts clients after a short simulated handshake.
struct Clients {
    served: AtomicU64,
}

impl Manager for Clients {
    type Member = Client;
    type Error = std::io::Error;

    async fn start(&self, ctx: &MemberContext) -> Result<Client, Self::Error> {
        tokio::time::sleep(Duration::from_millis(20)).await; // the handshake
        let hang_up = Arc::new(Notify::new());
        let signal = hang_up.clone();
        // The client's connection task: when it ends, the pool knows the member is dead.
        ctx.spawn(async move { signal.notified().await });
        println!("  [{}] started member {}", ctx.pool_name(), ctx.member_id());
        Ok(Client {
            id: ctx.member_id(),
            requests: 0,
            hang_up,
        })
    }

    async fn stop(&self, client: Client) {
        println!(
            "  stopped member {} after {} requests",
            client.id, client.requests
        );
    }
}

fn show(pool: &Pool<Clients>) {
    let u = pool.utilization();
    println!(
        "  in_use={} free={} starting={} stopping={} queued={} (max {})",
        u.in_use_count,
        u.free_count,
        u.starting_count,
        u.stopping_count,
        u.queued_count,
        u.max_count
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = PoolConfig::new("clients", 2, 3)
        .to_builder()
        .queue_max(4)
        .build()
        .unwrap();
    let pool = Pool::start(
        config,
        Clients {
            served: AtomicU64::new(0),
        },
    )
    .await?;
    println!("1. a pool of 2 (max 3) is up:");
    show(&pool);

    println!("2. take a member, use it, return it by dropping the guard:");
    {
        let mut client = pool.take_member(Duration::from_secs(1)).await?;
        client.requests += 1;
        pool.manager().served.fetch_add(1, Ordering::Relaxed);
        println!("  using member {}", client.id);
        show(&pool);
    }
    show(&pool);

    println!("3. exhaust it: take every member; the pool grows to max_count");
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(pool.take_member(Duration::from_secs(1)).await?);
    }
    show(&pool);
    match pool.try_take_member() {
        Err(e @ TakeError::AtCapacity { .. }) => println!("  try_take: {e}"),
        other => println!("  unexpected: {other:?}"),
    }

    println!("4. queue: a taker waits; a return serves it");
    let p = pool.clone();
    let waiter = tokio::task::spawn(async move {
        let m = p.take_member(Duration::from_secs(5)).await;
        m.map(|m| Member::id(&m))
    });
    tokio::task::yield_now().await;
    show(&pool);
    drop(held.pop());
    println!("  the waiter got member {}", waiter.await??);

    println!("5. a member crashes (its server hangs up) while free: it is replaced");
    drop(held);
    let victim = pool.try_take_member()?;
    let (victim_id, hang_up) = (victim.id, victim.hang_up.clone());
    drop(victim);
    hang_up.notify_one();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let ids: Vec<u64> = pool.stats().iter().map(|s| s.id).collect();
    println!("  member {victim_id} is gone; members now: {ids:?}");
    show(&pool);

    println!("6. a consumer fails its member: destroyed and replaced");
    let m = pool.try_take_member()?;
    println!("  failing member {}", m.id);
    Member::fail(m);
    tokio::time::sleep(Duration::from_millis(50)).await;
    show(&pool);

    println!("7. close gracefully: every member is stopped, no task is left");
    pool.close(Shutdown::Graceful).await;
    show(&pool);
    println!("  live tasks: {}", pool.live_tasks());
    Ok(())
}
