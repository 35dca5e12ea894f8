//! A fault-injection manager: start, initialize, check and stop can each be made to succeed,
//! fail, run slowly or never finish; members can be crashed (their driver task ends) or
//! marked broken; and every member value alive is counted, so a leak shows.
#![allow(dead_code, unreachable_pub, clippy::disallowed_methods)]

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pooler::{Manager, MemberContext, Pool, PoolConfig};
use tokio::sync::oneshot;

/// A proptest config of `cases` cases that keeps a failing case's seed beside the test's
/// source (`<test>.proptest-regressions`, to commit with the fix) and tries it first on
/// later runs.
pub fn keeping_failures(cases: u32) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..proptest::test_runner::Config::default()
    }
}

/// What one hook does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Ok,
    Err,
    Slow(Duration),
    Never,
    Panic,
    /// Fails after this long (a connect that times out on the backend's side).
    FailAfter(Duration),
}

impl Step {
    async fn run(self, what: &str) -> Result<(), FakeError> {
        match self {
            Step::Ok => Ok(()),
            Step::Err => Err(FakeError(format!("{what} refused"))),
            Step::Slow(d) => {
                tokio::time::sleep(d).await;
                Ok(())
            }
            Step::Never => std::future::pending().await,
            Step::Panic => panic!("planned panic in {what}"),
            Step::FailAfter(d) => {
                tokio::time::sleep(d).await;
                Err(FakeError(format!("{what} refused late")))
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeError(pub String);

impl std::fmt::Display for FakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FakeError {}

#[derive(Debug)]
pub struct Plan {
    pub start: Step,
    pub init: Step,
    pub check: Step,
    pub stop: Step,
    pub recycle: Step,
}

/// [`Probe::latency_us`] for a use cut at its deadline ([`pooler::Latency::Late`]).
#[allow(dead_code)] // not every test crate uses it
pub const LATE_US: u64 = u64::MAX - 1;

/// Counters and switches shared by the manager, its members and the test.
#[derive(Debug)]
pub struct Probe {
    pub plan: Mutex<Plan>,
    pub attempts: AtomicUsize,
    pub started: AtomicUsize,
    pub stops: AtomicUsize,
    pub checks: AtomicUsize,
    /// Member values alive right now (created and not yet dropped).
    pub alive: AtomicUsize,
    /// Whether returned members need recycling, and how many recycles ran.
    pub recycle_on: AtomicBool,
    pub recycles: AtomicUsize,
    /// What `latency` says of each use, in microseconds: 0 for the hold (the default),
    /// `u64::MAX` for nothing measured, [`LATE_US`] for a use cut at its deadline.
    pub latency_us: AtomicU64,
    /// How many times `latency` was asked.
    pub latency_asked: AtomicUsize,
    /// Steps for the next start attempts, in order, before `plan.start` applies again.
    script: Mutex<VecDeque<Step>>,
    /// `is_broken` / `needs_recycle` panic while set.
    pub panic_is_broken: AtomicBool,
    pub panic_needs_recycle: AtomicBool,
    /// Members are born broken while set.
    pub born_broken: AtomicBool,
    /// What `idle_check_threshold` says, in milliseconds (`u64::MAX`: none, the default).
    pub idle_check_ms: AtomicU64,
    /// Chaos: every hook call panics with this chance, in thousandths.
    pub chaos_permille: AtomicU64,
    /// Hook calls that panicked by chaos.
    pub chaos_panics: AtomicU64,
    chaos_seed: AtomicU64,
    drivers: Mutex<HashMap<u64, oneshot::Sender<Driver>>>,
    broken: Mutex<HashMap<u64, Arc<AtomicBool>>>,
}

/// How a member's driver task ends when told to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Driver {
    Return,
    Panic,
}

impl Probe {
    pub fn set_start(&self, s: Step) {
        self.plan.lock().unwrap().start = s;
    }
    pub fn set_init(&self, s: Step) {
        self.plan.lock().unwrap().init = s;
    }
    pub fn set_check(&self, s: Step) {
        self.plan.lock().unwrap().check = s;
    }
    pub fn set_stop(&self, s: Step) {
        self.plan.lock().unwrap().stop = s;
    }
    pub fn set_recycle(&self, s: Step) {
        self.plan.lock().unwrap().recycle = s;
    }
    /// Panics in `what` with the chaos chance (a cheap shared xorshift; the order of calls
    /// across threads makes it random enough).
    fn chaos(&self, what: &str) {
        let p = self.chaos_permille.load(SeqCst);
        if p == 0 {
            return;
        }
        let mut x = self.chaos_seed.load(SeqCst);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.chaos_seed.store(x, SeqCst);
        if x % 1000 < p {
            self.chaos_panics.fetch_add(1, SeqCst);
            panic!("planned panic in {what} (chaos)");
        }
    }
    /// The next start attempts follow `steps`, one each, then `plan.start` again.
    pub fn script_starts(&self, steps: impl IntoIterator<Item = Step>) {
        self.script.lock().unwrap().extend(steps);
    }
    /// Drops the scripted start steps still to come: starts follow `plan.start` again.
    pub fn clear_script(&self) {
        self.script.lock().unwrap().clear();
    }
    /// How many scripted start steps are still to come.
    pub fn scripted(&self) -> usize {
        self.script.lock().unwrap().len()
    }
    pub fn attempts(&self) -> usize {
        self.attempts.load(SeqCst)
    }
    pub fn stops(&self) -> usize {
        self.stops.load(SeqCst)
    }
    pub fn alive(&self) -> usize {
        self.alive.load(SeqCst)
    }
    /// Ends member `id`'s driver task, as a dropped connection would.
    pub fn crash(&self, id: u64) {
        assert!(
            self.send_driver(id, Driver::Return),
            "no such member driver"
        );
    }
    /// Makes member `id`'s driver task panic.
    pub fn panic_driver(&self, id: u64) {
        assert!(self.send_driver(id, Driver::Panic), "no such member driver");
    }
    /// Ends member `id`'s driver task if it is still running; `false` if it is not.
    pub fn try_crash(&self, id: u64) -> bool {
        self.send_driver(id, Driver::Return)
    }
    /// Makes member `id`'s driver task panic if it is still running; `false` if it is not.
    pub fn try_panic_driver(&self, id: u64) -> bool {
        self.send_driver(id, Driver::Panic)
    }
    /// Tells member `id`'s driver task how to end; `false` if it is no longer running.
    fn send_driver(&self, id: u64, how: Driver) -> bool {
        let tx = self.drivers.lock().unwrap().remove(&id);
        tx.is_some_and(|tx| tx.send(how).is_ok())
    }
    /// Makes `is_broken` say yes for member `id`.
    pub fn break_member(&self, id: u64) {
        self.broken.lock().unwrap()[&id].store(true, SeqCst);
    }
    /// Whether member `id` was made broken (or born so).
    pub fn is_broken(&self, id: u64) -> bool {
        self.broken.lock().unwrap()[&id].load(SeqCst)
    }
    /// Member ids whose driver task is still running.
    pub fn drivers(&self) -> usize {
        self.drivers.lock().unwrap().len()
    }
}

/// Removes a driver from the probe's list however its task ends.
struct Registered {
    probe: Arc<Probe>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.probe.drivers.lock().unwrap().remove(&self.id);
    }
}

#[derive(Debug, Clone)]
pub struct Fake {
    pub probe: Arc<Probe>,
}

impl Default for Fake {
    fn default() -> Self {
        Fake {
            probe: Arc::new(Probe {
                plan: Mutex::new(Plan {
                    start: Step::Ok,
                    init: Step::Ok,
                    check: Step::Ok,
                    stop: Step::Ok,
                    recycle: Step::Ok,
                }),
                recycle_on: AtomicBool::new(false),
                recycles: AtomicUsize::new(0),
                latency_us: AtomicU64::new(0),
                latency_asked: AtomicUsize::new(0),
                script: Mutex::new(VecDeque::new()),
                panic_is_broken: AtomicBool::new(false),
                panic_needs_recycle: AtomicBool::new(false),
                born_broken: AtomicBool::new(false),
                idle_check_ms: AtomicU64::new(u64::MAX),
                chaos_permille: AtomicU64::new(0),
                chaos_panics: AtomicU64::new(0),
                chaos_seed: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
                attempts: AtomicUsize::new(0),
                started: AtomicUsize::new(0),
                stops: AtomicUsize::new(0),
                checks: AtomicUsize::new(0),
                alive: AtomicUsize::new(0),
                drivers: Mutex::new(HashMap::new()),
                broken: Mutex::new(HashMap::new()),
            }),
        }
    }
}

/// A pooled value. `holder` lets tests check exclusivity: a consumer stores its own id there
/// while it uses the member.
#[derive(Debug)]
pub struct FakeMember {
    pub id: u64,
    pub uses: u64,
    pub holder: AtomicU64,
    broken: Arc<AtomicBool>,
    probe: Arc<Probe>,
}

impl Drop for FakeMember {
    fn drop(&mut self) {
        self.probe.alive.fetch_sub(1, SeqCst);
    }
}

impl Manager for Fake {
    type Member = FakeMember;
    type Error = FakeError;

    fn idle_check_threshold(&self) -> Option<Duration> {
        match self.probe.idle_check_ms.load(SeqCst) {
            u64::MAX => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    async fn start(&self, ctx: &MemberContext) -> Result<FakeMember, FakeError> {
        self.probe.attempts.fetch_add(1, SeqCst);
        self.probe.chaos("start");
        let scripted = self.probe.script.lock().unwrap().pop_front();
        let step = scripted.unwrap_or_else(|| self.probe.plan.lock().unwrap().start);
        step.run("start").await?;
        let (tx, rx) = oneshot::channel::<Driver>();
        self.probe
            .drivers
            .lock()
            .unwrap()
            .insert(ctx.member_id(), tx);
        let probe = self.probe.clone();
        let id = ctx.member_id();
        ctx.spawn(async move {
            // Ends when crashed (a value arrives) or is dropped when the pool cancels it;
            // either way the guard takes it off the list.
            let _registered = Registered { probe, id };
            if rx.await == Ok(Driver::Panic) {
                panic!("planned panic in a driver task");
            }
        });
        let broken = Arc::new(AtomicBool::new(self.probe.born_broken.load(SeqCst)));
        self.probe.broken.lock().unwrap().insert(id, broken.clone());
        self.probe.alive.fetch_add(1, SeqCst);
        self.probe.started.fetch_add(1, SeqCst);
        Ok(FakeMember {
            id,
            uses: 0,
            holder: AtomicU64::new(0),
            broken,
            probe: self.probe.clone(),
        })
    }

    async fn initialize(&self, _m: &mut FakeMember) -> Result<(), FakeError> {
        self.probe.chaos("initialize");
        let step = self.probe.plan.lock().unwrap().init;
        step.run("initialize").await
    }

    async fn check(&self, _m: &mut FakeMember) -> Result<(), FakeError> {
        self.probe.checks.fetch_add(1, SeqCst);
        self.probe.chaos("check");
        let step = self.probe.plan.lock().unwrap().check;
        step.run("check").await
    }

    async fn stop(&self, m: FakeMember) {
        self.probe.stops.fetch_add(1, SeqCst);
        self.probe.chaos("stop");
        let step = self.probe.plan.lock().unwrap().stop;
        let _ = step.run("stop").await;
        drop(m);
    }

    fn is_broken(&self, m: &FakeMember) -> bool {
        assert!(
            !self.probe.panic_is_broken.load(SeqCst),
            "planned panic in is_broken"
        );
        self.probe.chaos("is_broken");
        m.broken.load(SeqCst)
    }

    fn needs_recycle(&self, _m: &FakeMember) -> bool {
        assert!(
            !self.probe.panic_needs_recycle.load(SeqCst),
            "planned panic in needs_recycle"
        );
        self.probe.chaos("needs_recycle");
        self.probe.recycle_on.load(SeqCst)
    }

    fn latency(&self, _m: &FakeMember) -> pooler::Latency {
        self.probe.latency_asked.fetch_add(1, SeqCst);
        self.probe.chaos("latency");
        match self.probe.latency_us.load(SeqCst) {
            0 => pooler::Latency::Hold,
            u64::MAX => pooler::Latency::Unmeasured,
            LATE_US => pooler::Latency::Late,
            us => pooler::Latency::Measured(Duration::from_micros(us)),
        }
    }

    async fn recycle(&self, m: &mut FakeMember) -> Result<(), FakeError> {
        self.probe.recycles.fetch_add(1, SeqCst);
        self.probe.chaos("recycle");
        let step = self.probe.plan.lock().unwrap().recycle;
        step.run("recycle").await?;
        m.uses = 0; // the next holder gets it clean
        Ok(())
    }
}

/// A pool of fakes with `init`/`max` and the defaults otherwise.
pub async fn pool(init: usize, max: usize) -> (Pool<Fake>, Arc<Probe>) {
    pool_with(PoolConfig::new("test", init, max), Fake::default()).await
}

pub async fn pool_with(config: PoolConfig, fake: Fake) -> (Pool<Fake>, Arc<Probe>) {
    let probe = fake.probe.clone();
    let pool = Pool::start(config, fake).await.expect("valid config");
    (pool, probe)
}

/// Lets every task that can run, run (the paused clock does not move).
pub async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// Lets pending work run (so it can arm its timers), moves the paused clock by `d`, and lets
/// tasks run again.
pub async fn advance(d: Duration) {
    settle().await;
    tokio::time::advance(d).await;
    settle().await;
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The counts of a utilization, as (in_use, free, starting, stopping, queued).
pub fn counts(pool: &Pool<Fake>) -> (usize, usize, usize, usize, usize) {
    let u = pool.utilization();
    (
        u.in_use_count,
        u.free_count,
        u.starting_count,
        u.stopping_count,
        u.queued_count,
    )
}

/// A consumer task that takes a member (and keeps it in its result).
pub fn spawn_take(
    pool: &Pool<Fake>,
    timeout: Duration,
) -> tokio::task::JoinHandle<Result<pooler::Member<Fake>, pooler::TakeError>> {
    let pool = pool.clone();
    tokio::spawn(async move { pool.take_member(timeout).await })
}

/// For `queue_target` tests: a take waits 200 ms for `held` (a member whose pool has no other
/// free), which is then given back to it — the interval now has a 200 ms wait as its
/// shortest. Returns the member that take got.
pub async fn wait_200ms_for(pool: &Pool<Fake>, held: pooler::Member<Fake>) -> pooler::Member<Fake> {
    let waiter = spawn_take(pool, Duration::from_secs(5));
    settle().await;
    advance(ms(200)).await;
    drop(held);
    waiter
        .await
        .unwrap()
        .expect("served after 200 ms in the queue")
}

/// The holder of `member` panics with it ("consumer crashed"), as a consumer that crashes
/// mid-use does: the member is dropped during the unwind.
pub fn crash_holding(member: pooler::Member<Fake>) {
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _held = member;
        panic!("consumer crashed");
    }));
    assert!(unwound.is_err());
}

/// Captures `tracing` output on this thread (the paused-clock runtime runs every task here).
///
/// One global subscriber writes into a per-thread buffer: a thread-scoped subscriber would let
/// a parallel test thread without one decide tracing's cached callsite interest.
pub struct Logs(());

thread_local! {
    static CAPTURED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Logs {
    pub fn capture() -> Logs {
        static INSTALL: std::sync::Once = std::sync::Once::new();
        INSTALL.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_writer(|| LogWriter)
                .with_ansi(false)
                .with_max_level(tracing::Level::DEBUG)
                .finish();
            tracing::subscriber::set_global_default(subscriber)
                .expect("the only global subscriber");
        });
        CAPTURED.with(|c| c.borrow_mut().clear());
        Logs(())
    }

    pub fn text(&self) -> String {
        CAPTURED.with(|c| String::from_utf8_lossy(&c.borrow()).into_owned())
    }

    pub fn count(&self, needle: &str) -> usize {
        self.text().matches(needle).count()
    }
}

struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        CAPTURED.with(|c| c.borrow_mut().extend_from_slice(b));
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Keeps planned panics (from `Step::Panic`, driver tasks and the sync hooks) out of the test
/// output; any other panic is still printed.
pub fn quiet_planned_panics() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.to_string().contains("planned panic") {
                default(info);
            }
        }));
    });
}
