//! The contenders: pooler and its peers, each pooling a member that costs nothing, so only the
//! pool is measured.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A pool under test.
pub(crate) trait Contender: Send + Sync + 'static {
    /// One take and return.
    fn take_return(&self) -> impl Future<Output = ()> + Send;
    /// One take, timed; then a yield while holding the member; then the return.
    fn timed_take(&self) -> impl Future<Output = Duration> + Send;
}

/// Implements [`Contender`] for an async pool given how to get a member from it.
macro_rules! async_contender {
    ($ty:ty, |$pool:ident| $get:expr) => {
        impl Contender for $ty {
            async fn take_return(&self) {
                let $pool = self;
                let m = $get.expect("a member");
                std::hint::black_box(&*m);
            }
            async fn timed_take(&self) -> Duration {
                let $pool = self;
                let t = Instant::now();
                let m = $get.expect("a member");
                let took = t.elapsed();
                tokio::task::yield_now().await;
                drop(m);
                took
            }
        }
    };
}

/// Every contender's name, in report order.
pub(crate) const NAMES: [&str; 7] = [
    "pooler", "deadpool", "bb8", "qp", "mobc", "fastpool", "r2d2",
];

// ---- pooler -----------------------------------------------------------------------------

pub(crate) struct Noop;

impl pooler::Manager for Noop {
    type Member = u64;
    type Error = std::io::Error;
    async fn start(&self, ctx: &pooler::MemberContext) -> Result<u64, Self::Error> {
        Ok(ctx.member_id())
    }
}

pub(crate) fn pooler_config(size: usize) -> pooler::PoolConfig {
    pooler::PoolConfig::new("bench", size, size)
        .to_builder()
        .cull_interval(Duration::ZERO)
        .queue_max(1_000_000)
        .build()
        .unwrap()
}

pub(crate) async fn pooler(size: usize) -> pooler::Pool<Noop> {
    pooler::Pool::start(pooler_config(size), Noop)
        .await
        .expect("valid config")
}

/// pooler with adaptive admission on (`vegas`).
pub(crate) async fn pooler_admitted(size: usize) -> pooler::Pool<Noop> {
    let config = pooler_config(size)
        .to_builder()
        .admission(pooler::AdmissionMode::Vegas)
        .build()
        .unwrap();
    pooler::Pool::start(config, Noop)
        .await
        .expect("valid config")
}

// `take` waits with no deadline, as deadpool's `get` with no timeout configured: no timer is
// armed for a queued take. (`take_member(timeout)` arms one when it queues.)
async_contender!(pooler::Pool<Noop>, |p| p.take().await);

/// pooler through `take_member` (a deadline, so a timer armed when the take queues): measured
/// for fairness beside `take`.
pub(crate) struct PoolerMember(pub(crate) pooler::Pool<Noop>);

async_contender!(PoolerMember, |p| p
    .0
    .take_member(Duration::from_secs(60))
    .await);

/// The contenders measured for fairness: every pool, and pooler through `take_member` too.
pub(crate) const FAIRNESS: [&str; 8] = [
    "pooler",
    "pooler-member",
    "deadpool",
    "bb8",
    "qp",
    "mobc",
    "fastpool",
    "r2d2",
];

// ---- deadpool ---------------------------------------------------------------------------

pub(crate) struct DeadpoolNoop;

impl deadpool::managed::Manager for DeadpoolNoop {
    type Type = u64;
    type Error = std::io::Error;
    async fn create(&self) -> Result<u64, Self::Error> {
        Ok(0)
    }
    async fn recycle(
        &self,
        _: &mut u64,
        _: &deadpool::managed::Metrics,
    ) -> deadpool::managed::RecycleResult<Self::Error> {
        Ok(())
    }
}

pub(crate) type Deadpool = deadpool::managed::Pool<DeadpoolNoop>;

pub(crate) fn deadpool(size: usize) -> Deadpool {
    deadpool::managed::Pool::builder(DeadpoolNoop)
        .max_size(size)
        .build()
        .expect("valid pool")
}

async_contender!(Deadpool, |p| p.get().await);

// ---- bb8 --------------------------------------------------------------------------------

pub(crate) struct Bb8Noop;

impl bb8::ManageConnection for Bb8Noop {
    type Connection = u64;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<u64, Self::Error> {
        Ok(0)
    }
    async fn is_valid(&self, _: &mut u64) -> Result<(), Self::Error> {
        Ok(())
    }
    fn has_broken(&self, _: &mut u64) -> bool {
        false
    }
}

pub(crate) async fn bb8(size: usize) -> bb8::Pool<Bb8Noop> {
    bb8::Pool::builder()
        .max_size(size as u32)
        .test_on_check_out(false)
        .connection_timeout(Duration::from_secs(60))
        .build(Bb8Noop)
        .await
        .expect("valid pool")
}

async_contender!(bb8::Pool<Bb8Noop>, |p| p.get().await);

// ---- qp ---------------------------------------------------------------------------------

pub(crate) struct QpNoop;

#[qp::async_trait]
impl qp::resource::Manage for QpNoop {
    type Output = u64;
    type Error = std::io::Error;
    async fn try_create(&self) -> Result<u64, Self::Error> {
        Ok(0)
    }
}

pub(crate) fn qp(size: usize) -> qp::Pool<QpNoop> {
    qp::Pool::new(QpNoop, size)
}

async_contender!(qp::Pool<QpNoop>, |p| p.acquire_unchecked().await);

// ---- mobc -------------------------------------------------------------------------------

pub(crate) struct MobcNoop;

#[mobc::async_trait]
impl mobc::Manager for MobcNoop {
    type Connection = u64;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<u64, Self::Error> {
        Ok(0)
    }
    async fn check(&self, conn: u64) -> Result<u64, Self::Error> {
        Ok(conn)
    }
}

pub(crate) fn mobc(size: usize) -> mobc::Pool<MobcNoop> {
    mobc::Pool::builder()
        .max_open(size as u64)
        .max_idle(size as u64)
        .test_on_check_out(false)
        .get_timeout(Some(Duration::from_secs(60)))
        .build(MobcNoop)
}

async_contender!(mobc::Pool<MobcNoop>, |p| p.get().await);

// ---- fastpool ---------------------------------------------------------------------------
// Its last release marks it deprecated (unmaintained); it is still one of the pools people
// compare against, so it stays in the comparison.

pub(crate) use fastpool_peer::fastpool;

#[allow(deprecated)]
mod fastpool_peer {
    use super::*;

    pub(crate) struct FastpoolNoop;

    impl fastpool::ManageObject for FastpoolNoop {
        type Object = u64;
        type Error = std::io::Error;
        async fn create(&self) -> Result<u64, Self::Error> {
            Ok(0)
        }
        async fn is_recyclable(
            &self,
            _: &mut u64,
            _: &fastpool::ObjectStatus,
        ) -> Result<(), Self::Error> {
            Ok(())
        }
    }

    pub(crate) type Fastpool = Arc<fastpool::bounded::Pool<FastpoolNoop>>;

    pub(crate) fn fastpool(size: usize) -> Fastpool {
        fastpool::bounded::Pool::new(fastpool::bounded::PoolConfig::new(size), FastpoolNoop)
    }

    async_contender!(Fastpool, |p| p.get().await);
}

// ---- r2d2 (blocking) --------------------------------------------------------------------

pub(crate) struct R2d2Noop;

impl r2d2::ManageConnection for R2d2Noop {
    type Connection = u64;
    type Error = std::io::Error;
    fn connect(&self) -> Result<u64, Self::Error> {
        Ok(0)
    }
    fn is_valid(&self, _: &mut u64) -> Result<(), Self::Error> {
        Ok(())
    }
    fn has_broken(&self, _: &mut u64) -> bool {
        false
    }
}

/// r2d2 blocks its caller, so each task's take and return runs on tokio's blocking pool.
pub(crate) struct R2d2(pub(crate) r2d2::Pool<R2d2Noop>);

pub(crate) fn r2d2(size: usize) -> R2d2 {
    R2d2(
        r2d2::Pool::builder()
            .max_size(size as u32)
            .min_idle(Some(size as u32))
            .test_on_check_out(false)
            .connection_timeout(Duration::from_secs(60))
            .build(R2d2Noop)
            .expect("valid pool"),
    )
}

impl Contender for R2d2 {
    async fn take_return(&self) {
        let pool = self.0.clone();
        tokio::task::spawn_blocking(move || {
            let m = pool.get().expect("a member");
            std::hint::black_box(&*m);
        })
        .await
        .expect("no panic");
    }
    async fn timed_take(&self) -> Duration {
        let pool = self.0.clone();
        tokio::task::spawn_blocking(move || {
            let t = Instant::now();
            let m = pool.get().expect("a member");
            let took = t.elapsed();
            std::thread::yield_now();
            drop(m);
            took
        })
        .await
        .expect("no panic")
    }
}
