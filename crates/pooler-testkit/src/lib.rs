//! Test support for pooler's backend crates.
//!
//! - [`service`] and [`Server`]: the address of a server a live test needs, from an
//!   environment variable with a default; unreachable, the test is skipped with a notice,
//!   unless `POOLER_REQUIRE_SERVICES=1` (as CI sets it), when it fails.
//! - [`eventually`]: a bounded wait for something a server does in its own time.
//! - [`scenarios`]: live scenarios every backend crate runs the same way.
//! - [`handover`]: the round every differential hand-over fuzzer runs.
//! - [`tls`]: a throwaway CA and server certificate for a live TLS test.
//! - [`Proxy`]: a TCP proxy in front of a server, which a test opens, closes (refusing new
//!   connections), cuts (dropping live ones), slows or stalls, to stage outages and frozen
//!   or slow servers.
//! - [`blackhole`]: a server reached through a network namespace whose link a test takes
//!   down silently (no FIN, no RST).
//! - [`pgbouncer`]: a PgBouncer of the test's own in front of a PostgreSQL server.
//! - [`pgwire`]: a watch on the PostgreSQL protocol for what a transaction pooler cannot
//!   serve (a message sent behind an unanswered sync point outside a transaction).
//! - [`redis`]: `redis-server`s of the test's own: a server, a replica, a Sentinel.
//! - [`mariadb`] and [`rabbitmq`]: a MariaDB server and a RabbitMQ broker of the test's
//!   own, to kill and start again on the same port.
#![allow(clippy::disallowed_methods)] // test support spawns its own tasks

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub mod blackhole;
pub mod handover;
pub mod mariadb;
pub mod pgbouncer;
pub mod pgwire;
pub mod rabbitmq;
pub mod redis;
pub mod scenarios;
pub mod tls;

/// Sends process `pid` a signal with `kill`: `"-STOP"` freezes it, `"-CONT"` thaws it. A
/// stop is waited for until every thread of the process is stopped (`/proc`): `kill` returns
/// once the signal is sent, and a thread woken by a request in that instant could still
/// answer it.
///
/// # Panics
///
/// When `kill` fails, or a stop has not taken effect within 2 s.
pub fn signal(pid: u32, which: &str) {
    let sent = std::process::Command::new("kill")
        .args([which, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success(), "kill {which} {pid}");
    if which != "-STOP" {
        return;
    }
    let stopped = || {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return true; // not on Linux, or gone: nothing to wait for
        };
        tasks.flatten().all(|task| {
            // `pid (name) S …`: the state follows the last parenthesis.
            std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.trim_start().chars().next())
                    .is_some_and(|state| matches!(state, 'T' | 't'))
            })
        })
    };
    let began = std::time::Instant::now();
    while !stopped() {
        assert!(
            began.elapsed() < Duration::from_secs(2),
            "process {pid} did not stop"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A test cannot run here for want of `what`: says so and returns `false` (the test
/// skips) — or fails under `POOLER_REQUIRE_SERVICES=1`, where nothing may be skipped.
pub(crate) fn cannot_run(what: &str) -> bool {
    assert!(
        std::env::var("POOLER_REQUIRE_SERVICES").as_deref() != Ok("1"),
        "{what} is needed and POOLER_REQUIRE_SERVICES=1"
    );
    eprintln!("skipping: {what} is needed");
    false
}

/// A server the live tests reach: each machine this project runs on has one of each on
/// 127.0.0.1, and a variable names another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// PostgreSQL: `POOLER_POSTGRES_URL`.
    Postgres,
    /// MySQL or MariaDB: `POOLER_MYSQL_URL`.
    Mysql,
    /// Redis: `POOLER_REDIS_URL`.
    Redis,
    /// RabbitMQ: `POOLER_AMQP_URL`.
    Amqp,
}

impl Server {
    /// The variable that names this server's URL.
    #[must_use]
    pub const fn var(self) -> &'static str {
        match self {
            Server::Postgres => "POOLER_POSTGRES_URL",
            Server::Mysql => "POOLER_MYSQL_URL",
            Server::Redis => "POOLER_REDIS_URL",
            Server::Amqp => "POOLER_AMQP_URL",
        }
    }

    /// The URL without the variable: the machine's own server.
    #[must_use]
    pub const fn default_url(self) -> &'static str {
        match self {
            Server::Postgres => "postgres://postgres@127.0.0.1:5432/test",
            Server::Mysql => "mysql://root@127.0.0.1:3306/test",
            Server::Redis => "redis://127.0.0.1:6379",
            Server::Amqp => "amqp://guest:guest@127.0.0.1:5672/%2f",
        }
    }

    /// [`service`] for this server: its URL if it answers, `None` (the test skipped) if not.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only connects once and drops the connection.
    pub async fn url(self) -> Option<String> {
        service(self.var(), self.default_url(), host_port).await
    }
}

/// The URL in `var`, or `default`, if its host:port answers. `None` means skip the test: it
/// prints why. Panics instead when `POOLER_REQUIRE_SERVICES=1`.
///
/// # Cancel safety
///
/// Cancel safe: it only connects once and drops the connection.
pub async fn service(
    var: &str,
    default: &str,
    host_port: impl Fn(&str) -> String,
) -> Option<String> {
    let url = std::env::var(var).unwrap_or_else(|_| default.to_owned());
    let addr = host_port(&url);
    let reachable = tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(&addr)).await;
    if matches!(reachable, Ok(Ok(_))) {
        return Some(url);
    }
    if std::env::var("POOLER_REQUIRE_SERVICES").is_ok_and(|v| v == "1") {
        panic!("{addr} ({var}) is unreachable and POOLER_REQUIRE_SERVICES=1");
    }
    eprintln!("skipping: {addr} ({var}) is unreachable");
    None
}

/// How many sequences a hand-over fuzzer runs: `POOLER_FUZZ_CASES`, 64 by default (CI's size;
/// a long run sets 10 000).
#[must_use]
pub fn fuzz_cases() -> u32 {
    std::env::var("POOLER_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64)
}

/// A runtime for a test that blocks on it between steps (a fuzzer, a proptest): two worker
/// threads, I/O and time drivers on.
///
/// # Panics
///
/// When the runtime cannot be built.
#[must_use]
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// The runner of a hand-over fuzzer, built in the fuzzer's own crate (which depends on
/// `proptest`; this one does not): [`fuzz_cases`] sequences, and each failing one kept in a
/// corpus beside the test's source (`<test>.proptest-regressions`, to commit), tried before
/// any new one on later runs.
#[macro_export]
macro_rules! fuzz_runner {
    () => {
        ::proptest::test_runner::TestRunner::new(::proptest::test_runner::Config {
            cases: $crate::fuzz_cases(),
            // Without it the corpus has no place: proptest warns and keeps nothing.
            source_file: ::core::option::Option::Some(::core::file!()),
            failure_persistence: ::core::option::Option::Some(::std::boxed::Box::new(
                ::proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
            )),
            ..::proptest::test_runner::Config::default()
        })
    };
}

/// Runs a differential hand-over fuzzer: the view of a new member is taken first
/// ([`handover::fresh`]), then [`fuzz_runner!`]'s runner draws sequences from `$sequences`,
/// and each is one [`handover::round`] of `$session` on `$pool`, blocked on `$rt`; the
/// runner's outcome is returned.
#[macro_export]
macro_rules! fuzz_handover {
    ($rt:expr, $pool:expr, $session:expr, $sequences:expr $(,)?) => {{
        // Each argument evaluated once, whatever expression it is.
        let (rt, pool, session) = (&$rt, $pool, $session);
        let fresh = rt.block_on($crate::handover::fresh(pool, session));
        $crate::fuzz_runner!().run(&$sequences, |actions| {
            rt.block_on($crate::handover::round(pool, session, &actions, &fresh))
                .map_err(::proptest::test_runner::TestCaseError::fail)
        })
    }};
}

/// Waits in real time, bounded by 15 s, until `done` holds; panics naming `what` otherwise.
///
/// # Cancel safety
///
/// Cancel safe: it only polls `done`.
pub async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !done().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A pool of `config` over `manager`, started: a test's set-up, where a pool that does not
/// start is the test's failure.
///
/// # Panics
///
/// When `config` is refused or there is no runtime ([`pooler::Pool::start`]'s errors).
///
/// # Cancel safety
///
/// As [`pooler::Pool::start`]: dropping it closes the half-started pool.
pub async fn started<M: pooler::Manager>(
    config: pooler::PoolConfig,
    manager: M,
) -> pooler::Pool<M> {
    pooler::Pool::start(config, manager)
        .await
        .unwrap_or_else(|e| panic!("the pool starts: {e}"))
}

/// `host:port` of a `scheme://[user@]host:port[/…]` URL.
#[must_use]
pub fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap_or(rest).to_owned()
}

/// A TCP proxy to one upstream address, with faults a test switches on: refuse new
/// connections, cut the live ones, delay what goes by, or stall one direction or both.
pub struct Proxy {
    addr: SocketAddr,
    open: Arc<AtomicBool>,
    attempts: Arc<AtomicUsize>,
    faults: Arc<Faults>,
    links: Arc<Mutex<Vec<JoinHandle<()>>>>,
    listener: JoinHandle<()>,
}

/// A direction through a [`Proxy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the client to the server.
    ToServer,
    /// From the server to the client.
    ToClient,
}

/// The faults a proxy's links apply, read as they pump.
#[derive(Debug, Default)]
struct Faults {
    /// Microseconds each chunk waits before it is passed on.
    delay_us: std::sync::atomic::AtomicU64,
    /// Nothing is read from the client (to the server) or the server (to the client): the
    /// peer's kernel still acknowledges what fits in the buffers, so no TCP timeout fires —
    /// a frozen process, seen from the wire.
    stall_to_server: AtomicBool,
    stall_to_client: AtomicBool,
}

impl Faults {
    fn stalled(&self, direction: Direction) -> bool {
        match direction {
            Direction::ToServer => self.stall_to_server.load(Ordering::SeqCst),
            Direction::ToClient => self.stall_to_client.load(Ordering::SeqCst),
        }
    }
}

/// Copies `from` to `to` as `faults` say, until either side ends.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    faults: Arc<Faults>,
    direction: Direction,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0_u8; 16 * 1024];
    loop {
        while faults.stalled(direction) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let delay = faults.delay_us.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_micros(delay)).await;
        }
        while faults.stalled(direction) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

impl Proxy {
    /// A proxy on a free local port, open, with no fault.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it returns, it leaves no listener behind.
    pub async fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a local port");
        let addr = listener.local_addr().expect("bound");
        let open = Arc::new(AtomicBool::new(true));
        let attempts = Arc::new(AtomicUsize::new(0));
        let faults = Arc::new(Faults::default());
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let upstream = upstream.to_owned();
        let (o, a, f, l) = (
            open.clone(),
            attempts.clone(),
            faults.clone(),
            links.clone(),
        );
        let listener = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                if !o.load(Ordering::SeqCst) {
                    drop(client); // refused: closed at once
                    continue;
                }
                let upstream = upstream.clone();
                let faults = f.clone();
                let link = tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        let _ = client.set_nodelay(true);
                        let _ = server.set_nodelay(true);
                        let (client_read, client_write) = client.into_split();
                        let (server_read, server_write) = server.into_split();
                        tokio::join!(
                            pump(
                                client_read,
                                server_write,
                                faults.clone(),
                                Direction::ToServer
                            ),
                            pump(server_read, client_write, faults, Direction::ToClient),
                        );
                    }
                });
                l.lock().expect("links").push(link);
            }
        });
        Proxy {
            addr,
            open,
            attempts,
            faults,
            links,
            listener,
        }
    }

    /// Where clients connect.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Accept (true) or refuse (false) new connections.
    pub fn set_open(&self, open: bool) {
        self.open.store(open, Ordering::SeqCst);
    }

    /// Drops every live connection, as a crashed server or a partition would.
    pub fn cut(&self) {
        for link in self.links.lock().expect("links").drain(..) {
            link.abort();
        }
    }

    /// Makes every chunk wait `delay` in each direction before it is passed on (a slow
    /// link; zero for none).
    pub fn set_delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.faults.delay_us.store(us, Ordering::SeqCst);
    }

    /// Stalls (true) or resumes (false) `direction`: a stalled direction passes nothing on,
    /// and the sender's kernel still acknowledges what fits in the buffers — a frozen peer,
    /// seen from the wire (no TCP timeout fires).
    pub fn stall(&self, direction: Direction, stalled: bool) {
        let flag = match direction {
            Direction::ToServer => &self.faults.stall_to_server,
            Direction::ToClient => &self.faults.stall_to_client,
        };
        flag.store(stalled, Ordering::SeqCst);
    }

    /// Connections attempted so far (accepted or refused).
    #[must_use]
    pub fn attempts(&self) -> usize {
        self.attempts.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.listener.abort();
        self.cut();
    }
}

/// The code links written ``[`Name`]`` in `readme` that have no link definition: crates.io
/// does not resolve rustdoc's paths, so a README must define each one to render there.
pub fn undefined_code_links(readme: &str) -> Vec<String> {
    let mut missing = Vec::new();
    let mut rest = readme;
    while let Some(at) = rest.find("[`") {
        let after = &rest[at + 2..];
        let Some(end) = after.find("`]") else { break };
        let name = &after[..end];
        let follows = after[end + 2..].chars().next();
        let inline = matches!(follows, Some('(' | '[' | ':'));
        let defined = readme.contains(&format!("\n[`{name}`]: "));
        if !inline && !defined && !name.contains('\n') {
            missing.push(name.to_owned());
        }
        rest = &after[end + 2..];
    }
    missing
}

#[cfg(test)]
mod tests {
    use proptest::prop_assert;
    use proptest::test_runner::TestRunner;

    /// [`fuzz_runner!`](crate::fuzz_runner)'s runner, its corpus beside `source` instead of
    /// this file.
    fn runner(source: &'static str) -> TestRunner {
        let mut config = crate::fuzz_runner!().config().clone();
        config.source_file = Some(source);
        TestRunner::new(config)
    }

    /// A failing sequence lands in the corpus beside the fuzzer's source, and the next run
    /// tries it first.
    #[test]
    fn a_fuzzer_keeps_its_failures_and_replays_them_first() {
        // The macro names the file it is written in: the corpus goes beside the fuzzer.
        let config = crate::fuzz_runner!().config().clone();
        assert_eq!(config.source_file, Some(file!()));
        assert!(config.failure_persistence.is_some());
        let dir = std::env::temp_dir().join(format!("pooler-fuzz-corpus-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("fuzz.rs");
        std::fs::write(&source, "").unwrap();
        let source: &'static str = Box::leak(source.to_str().unwrap().to_owned().into_boxed_str());
        let failed = std::cell::Cell::new(None);
        let outcome = runner(source).run(&(0..1_000_000_u32), |n| {
            if n >= 10 && failed.get().is_none() {
                failed.set(Some(n));
            }
            prop_assert!(n < 10);
            Ok(())
        });
        assert!(outcome.is_err(), "the property fails");
        let corpus = dir.join("fuzz.proptest-regressions");
        let kept = std::fs::read_to_string(&corpus).expect("the failure is kept in the corpus");
        assert!(kept.lines().any(|l| l.starts_with("cc ")), "{kept}");
        // Replayed first: the first case the next run tries is the kept failure.
        let first = std::cell::Cell::new(None);
        let _ = runner(source).run(&(0..1_000_000_u32), |n| {
            if first.get().is_none() {
                first.set(Some(n));
            }
            Ok(())
        });
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(first.get(), failed.get(), "the kept failure is tried first");
    }
}
