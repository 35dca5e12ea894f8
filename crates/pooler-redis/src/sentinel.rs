//! Servers found through Redis Sentinel (docs/design.md, "Redis Sentinel"): each start asks
//! the Sentinels, in turn, which server serves the service now — its master, or one of its
//! replicas in rotation — and the connection made to it checks with `ROLE` that the server
//! is what the Sentinel said (a demoted master may not know it yet).
//!
//! A Sentinel is asked over a connection of its own, opened for the question and closed
//! after it, and driven inside the asking future: nothing of a lookup outlives it.
//!
//! A failover is followed while it happens, not only at the next start: one *watch* per
//! pool asks the Sentinels every [`SENTINEL_WATCH`] which servers serve the role, and a member
//! on a server no longer among them is broken (replaced when next given back or taken). A
//! forced failover leaves the old master up and accepting writes until the Sentinel
//! reconfigures it, up to ten seconds later; the watch moves the pool within half a second.
//! The watch runs inside one member's supervised driver task; every member's task stands by
//! to take it over when the one running it ends: closing the pool ends it with the members.
//!
//! # Invariants
//!
//! 1. `sentinels` is not empty.
//! 2. `epoch` changes whenever `serving` does (a member that saw the same epoch at its start
//!    is on a server that still serves).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use redis::{ErrorKind, RedisError, RedisResult};

/// Which server of a service the connections go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SentinelRole {
    /// The master (writes and reads).
    Master,
    /// A replica, a different one for each connection in turn (reads only).
    Replica,
}

/// Where a Sentinel listens, and how to log in to it (its URL's user and password).
#[derive(Debug, Clone)]
pub(crate) struct Sentinel {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) settings: redis::RedisConnectionInfo,
}

/// The Sentinels of one service, and which of its servers to serve.
#[derive(Debug)]
pub(crate) struct Sentinels {
    sentinels: Vec<Sentinel>,
    service: String,
    role: SentinelRole,
    /// The Sentinel that answered last (asked first next time).
    answered: AtomicUsize,
    /// The next replica in the rotation.
    rotation: AtomicUsize,
    /// The servers that serve the role, as the watch last heard (empty: not heard yet).
    serving: Mutex<Vec<(String, u16)>>,
    /// Bumped whenever `serving` changes (invariant 2).
    epoch: AtomicU64,
    /// A watch is running.
    watching: AtomicBool,
}

/// How often the watch asks the Sentinels which servers serve the role.
pub const SENTINEL_WATCH: std::time::Duration = std::time::Duration::from_millis(500);

/// How long a Sentinel has to answer before the next is asked: one frozen, or behind a dead
/// link, must not hold a start or the watch.
const ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Where a member's connection went, and the watch's epoch when it was found.
#[derive(Debug, Clone)]
pub(crate) struct Placed {
    addr: (String, u16),
    epoch: u64,
}

impl Placed {
    /// The server's host and port.
    pub(crate) fn addr(&self) -> (&str, u16) {
        (&self.addr.0, self.addr.1)
    }
}

impl Sentinels {
    pub(crate) fn new(
        sentinels: Vec<Sentinel>,
        service: String,
        role: SentinelRole,
    ) -> RedisResult<Self> {
        if sentinels.is_empty() {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "RedisManager::via_sentinels needs at least one Sentinel",
            )));
        }
        Ok(Sentinels {
            sentinels,
            service,
            role,
            answered: AtomicUsize::new(0),
            rotation: AtomicUsize::new(0),
            serving: Mutex::default(),
            epoch: AtomicU64::new(0),
            watching: AtomicBool::new(false),
        })
    }

    /// A member is connected to `addr`, found when the watch's epoch was `epoch`.
    fn placed(addr: (String, u16), epoch: u64) -> Placed {
        Placed { addr, epoch }
    }

    /// Whether the server of a member placed at `placed` no longer serves the role, as the
    /// watch heard it since.
    pub(crate) fn left_behind(&self, placed: &Placed) -> bool {
        if self.epoch.load(Ordering::Acquire) == placed.epoch {
            return false;
        }
        let serving = self.serving.lock().unwrap_or_else(PoisonError::into_inner);
        !serving.is_empty() && !serving.contains(&placed.addr)
    }

    /// What a member's driver task runs beside the driver: the watch, as soon as no other
    /// member's task runs it (looked for every [`SENTINEL_WATCH`]), so that one runs while
    /// any member lives, whichever members come and go. Never ends by itself.
    pub(crate) fn stand_by(self: &Arc<Self>) -> impl Future<Output = ()> + Send + 'static {
        let sentinels = self.clone();
        async move {
            loop {
                if let Some(watch) = sentinels.watch() {
                    watch.await;
                }
                tokio::time::sleep(SENTINEL_WATCH).await;
            }
        }
    }

    /// The watch to run, if none is running: it runs until dropped.
    fn watch(self: &Arc<Self>) -> Option<impl Future<Output = ()> + Send + 'static> {
        if self.watching.swap(true, Ordering::AcqRel) {
            return None;
        }
        let sentinels = self.clone();
        Some(async move {
            // Lets another member's task take the watch over, however this one ends.
            struct Release(Arc<Sentinels>);
            impl Drop for Release {
                fn drop(&mut self) {
                    self.0.watching.store(false, Ordering::Release);
                }
            }
            let release = Release(sentinels);
            loop {
                if let Ok(serving) = release.0.serving_now().await {
                    release.0.heard(serving);
                }
                tokio::time::sleep(SENTINEL_WATCH).await;
            }
        })
    }

    /// Keeps what the watch heard; a change bumps the epoch.
    fn heard(&self, mut now: Vec<(String, u16)>) {
        now.sort();
        let mut serving = self.serving.lock().unwrap_or_else(PoisonError::into_inner);
        if *serving != now {
            *serving = now;
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Every server that serves the role now, as the first Sentinel that answers says.
    async fn serving_now(&self) -> RedisResult<Vec<(String, u16)>> {
        let mut last = None;
        for sentinel in &self.sentinels {
            match self.ask_all(sentinel).await {
                Ok(serving) => return Ok(serving),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("at least one Sentinel was asked"))
    }

    pub(crate) fn role(&self) -> SentinelRole {
        self.role
    }

    /// The address of the server to connect to now: the first Sentinel that answers says
    /// (the master, or the next of the healthy replicas in turn). The watch's epoch is read
    /// before the Sentinels are asked, so a change the watch hears meanwhile has the member
    /// checked against what serves, not taken as current.
    pub(crate) async fn find(&self) -> RedisResult<Placed> {
        debug_assert!(!self.sentinels.is_empty(), "invariant 1");
        let epoch = self.epoch.load(Ordering::Acquire);
        let first = self.answered.load(Ordering::Relaxed);
        let mut last = None;
        for i in 0..self.sentinels.len() {
            let at = (first + i) % self.sentinels.len();
            match self.ask_all(&self.sentinels[at]).await {
                Ok(serving) if !serving.is_empty() => {
                    self.answered.store(at, Ordering::Relaxed);
                    let turn = self.rotation.fetch_add(1, Ordering::Relaxed);
                    return Ok(Sentinels::placed(
                        serving[turn % serving.len()].clone(),
                        epoch,
                    ));
                }
                Ok(_) => {
                    last = Some(RedisError::from((
                        ErrorKind::Io,
                        "the Sentinel knows no server of that role for the service",
                        format!(
                            "{} at {}:{}",
                            self.service, self.sentinels[at].host, self.sentinels[at].port
                        ),
                    )));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("at least one Sentinel was asked"))
    }

    /// One Sentinel's answer: every server that serves the role (none when it knows none);
    /// an error when it does not answer within [`ASK_TIMEOUT`].
    async fn ask_all(&self, sentinel: &Sentinel) -> RedisResult<Vec<(String, u16)>> {
        tokio::time::timeout(ASK_TIMEOUT, self.ask(sentinel))
            .await
            .unwrap_or_else(|_| {
                Err(RedisError::from((
                    ErrorKind::Io,
                    "the Sentinel did not answer in time",
                    format!("{}:{}", sentinel.host, sentinel.port),
                )))
            })
    }

    async fn ask(&self, sentinel: &Sentinel) -> RedisResult<Vec<(String, u16)>> {
        let socket =
            tokio::net::TcpStream::connect((sentinel.host.as_str(), sentinel.port)).await?;
        socket.set_nodelay(true)?;
        let (mut conn, driver) = crate::socket::over(&sentinel.settings, socket).await?;
        let question = async {
            match self.role {
                SentinelRole::Master => redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&self.service)
                    .query_async::<Option<(String, u16)>>(&mut conn)
                    .await
                    .map(|master| master.into_iter().collect()),
                SentinelRole::Replica => {
                    let replicas: Vec<std::collections::HashMap<String, String>> =
                        redis::cmd("SENTINEL")
                            .arg("REPLICAS")
                            .arg(&self.service)
                            .query_async(&mut conn)
                            .await?;
                    Ok(healthy(&replicas))
                }
            }
        };
        // The connection's driver runs here, beside the question, and ends with it.
        let mut question = std::pin::pin!(question);
        let mut driver = driver;
        std::future::poll_fn(|cx| {
            if let std::task::Poll::Ready(answer) = question.as_mut().poll(cx) {
                return std::task::Poll::Ready(answer);
            }
            if driver.as_mut().poll(cx).is_ready() {
                return std::task::Poll::Ready(Err(RedisError::from((
                    ErrorKind::Io,
                    "the connection to the Sentinel ended before its answer",
                ))));
            }
            std::task::Poll::Pending
        })
        .await
    }
}

/// The healthy replicas of those a Sentinel listed: not down, not disconnected, their link
/// to the master up.
fn healthy(replicas: &[std::collections::HashMap<String, String>]) -> Vec<(String, u16)> {
    let mut healthy: Vec<(String, u16)> = replicas
        .iter()
        .filter(|r| {
            r.get("flags").is_some_and(|flags| {
                !flags
                    .split(',')
                    .any(|f| matches!(f, "s_down" | "o_down" | "disconnected"))
            }) && r.get("master-link-status").is_none_or(|s| s == "ok")
        })
        .filter_map(|r| Some((r.get("ip")?.clone(), r.get("port")?.parse().ok()?)))
        .collect();
    healthy.sort();
    healthy
}

/// Whether the server on `conn` has `role` now (`ROLE`'s first word: `master` or `slave`).
pub(crate) async fn has_role(
    conn: &mut redis::aio::MultiplexedConnection,
    role: SentinelRole,
) -> RedisResult<bool> {
    let answer: redis::Value = redis::cmd("ROLE").query_async(conn).await?;
    let first = match &answer {
        redis::Value::Array(items) => items.first(),
        _ => None,
    };
    let word = match first {
        Some(redis::Value::BulkString(bytes)) => bytes.as_slice(),
        Some(redis::Value::SimpleString(s)) => s.as_bytes(),
        _ => b"",
    };
    Ok(match role {
        SentinelRole::Master => word == b"master",
        SentinelRole::Replica => word == b"slave",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Sentinel on this host's `port`, with no login.
    fn at(port: u16) -> Sentinel {
        Sentinel {
            host: "127.0.0.1".to_owned(),
            port,
            settings: redis::RedisConnectionInfo::default(),
        }
    }

    /// The Sentinels at `ports`, serving the master of service `s`.
    fn masters_of(ports: &[u16]) -> Sentinels {
        Sentinels::new(
            ports.iter().copied().map(at).collect(),
            "s".to_owned(),
            SentinelRole::Master,
        )
        .unwrap()
    }

    fn replica(
        ip: &str,
        port: &str,
        flags: &str,
        link: &str,
    ) -> std::collections::HashMap<String, String> {
        [
            ("ip", ip),
            ("port", port),
            ("flags", flags),
            ("master-link-status", link),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    #[test]
    fn only_replicas_up_and_in_sync_serve() {
        let listed = [
            replica("10.0.0.3", "6379", "slave", "ok"),
            replica("10.0.0.1", "6379", "s_down,slave", "ok"),
            replica("10.0.0.2", "6379", "slave,disconnected", "ok"),
            replica("10.0.0.4", "6379", "slave", "err"),
            replica("10.0.0.5", "not a port", "slave", "ok"),
            replica("10.0.0.0", "6380", "slave", "ok"),
        ];
        assert_eq!(
            healthy(&listed),
            vec![("10.0.0.0".to_owned(), 6380), ("10.0.0.3".to_owned(), 6379)]
        );
    }

    #[test]
    fn a_member_is_left_behind_only_once_its_server_leaves_what_serves() {
        let sentinels = masters_of(&[26379]);
        let a = ("10.0.0.1".to_owned(), 6379);
        let placed = Sentinels::placed(a.clone(), sentinels.epoch.load(Ordering::Acquire));
        assert!(!sentinels.left_behind(&placed));
        sentinels.heard(vec![a.clone()]);
        assert!(
            !sentinels.left_behind(&placed),
            "the same server still serves"
        );
        sentinels.heard(vec![("10.0.0.2".to_owned(), 6379)]);
        assert!(sentinels.left_behind(&placed), "the master moved");
        assert!(
            !sentinels.left_behind(&Sentinels::placed(
                ("10.0.0.2".to_owned(), 6379),
                sentinels.epoch.load(Ordering::Acquire)
            )),
            "a member on the new master"
        );
        sentinels.heard(Vec::new());
        assert!(
            !sentinels.left_behind(&placed),
            "nothing heard: nothing concluded"
        );
    }

    /// A member found on the old master while the watch hears the switch is checked against
    /// what serves now (its epoch is the one read before the Sentinels were asked).
    #[test]
    fn a_member_found_while_the_master_moves_is_left_behind() {
        let sentinels = masters_of(&[26379]);
        let old = ("10.0.0.1".to_owned(), 6379);
        sentinels.heard(vec![old.clone()]);
        let asked_at = sentinels.epoch.load(Ordering::Acquire);
        // The Sentinel answered with the old master; the watch hears the switch before the
        // member is placed.
        sentinels.heard(vec![("10.0.0.2".to_owned(), 6379)]);
        assert!(sentinels.left_behind(&Sentinels::placed(old, asked_at)));
    }

    /// A Sentinel that takes connections and never answers (frozen) does not hold a lookup:
    /// the next Sentinel is asked after `ASK_TIMEOUT`.
    #[tokio::test(start_paused = true)]
    #[allow(clippy::disallowed_methods)] // the test plays a frozen Sentinel
    async fn a_frozen_sentinel_is_passed_over() {
        let frozen = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = frozen.local_addr().unwrap().port();
        let held = tokio::spawn(async move {
            let mut kept = Vec::new();
            while let Ok((socket, _)) = frozen.accept().await {
                kept.push(socket);
            }
        });
        let sentinels = masters_of(&[port, 1]);
        let began = tokio::time::Instant::now();
        let e = tokio::time::timeout(10 * ASK_TIMEOUT, sentinels.find())
            .await
            .expect("the lookup ended")
            .map(drop)
            .unwrap_err();
        assert!(began.elapsed() <= 2 * ASK_TIMEOUT, "{:?}", began.elapsed());
        // The last Sentinel asked (refused) says why.
        assert_eq!(e.kind(), ErrorKind::Io, "{e}");
        held.abort();
    }

    /// The watch runs in one member's task at a time, and another member's task takes it
    /// over when that one ends (its member replaced, culled or closed) — without a start.
    #[tokio::test(start_paused = true)]
    #[allow(clippy::disallowed_methods)] // the test plays two members' tasks
    async fn a_standing_by_member_takes_the_watch_over() {
        let sentinels = Arc::new(masters_of(&[1]));
        let first = tokio::spawn(sentinels.stand_by());
        tokio::time::sleep(SENTINEL_WATCH / 10).await;
        assert!(
            sentinels.watching.load(Ordering::Acquire),
            "the first runs it"
        );
        let second = tokio::spawn(sentinels.stand_by());
        tokio::time::sleep(SENTINEL_WATCH * 2).await;
        first.abort();
        let _ = first.await;
        tokio::time::sleep(SENTINEL_WATCH * 2).await;
        assert!(
            sentinels.watching.load(Ordering::Acquire),
            "the second took it over"
        );
        second.abort();
        let _ = second.await;
        assert!(!sentinels.watching.load(Ordering::Acquire), "none runs it");
    }

    #[test]
    fn no_sentinel_is_refused() {
        assert!(Sentinels::new(Vec::new(), "s".to_owned(), SentinelRole::Master).is_err());
    }
}
