#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use track::Track;

use pooler::{Hooks, Manager, MemberContext};
use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo,
    RedisError, RedisResult,
};

pub use pooler;
pub use redis;
#[cfg(feature = "rustls")]
#[cfg_attr(docsrs, doc(cfg(feature = "rustls")))]
pub use rustls;

#[cfg(feature = "cluster")]
mod cluster;
mod sentinel;
#[cfg(feature = "serde")]
mod settings;
mod track;
#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub use cluster::{ClusterManager, ClusterPool, RedisClusterConnection};
pub use sentinel::{SENTINEL_WATCH, SentinelRole};
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use settings::{ProtocolName, RedisSettings};

/// A pool of Redis connections.
pub type Pool = pooler::Pool<RedisManager>;
/// A Redis connection taken from a [`Pool`]: dereferences to [`RedisConnection`], and sends
/// commands itself (`query_async(&mut conn)`, [`AsyncCommands`](redis::AsyncCommands)).
pub type Member = pooler::Member<RedisManager>;

/// Starts Redis connections.
#[derive(Debug, Clone)]
pub struct RedisManager {
    info: ConnectionInfo,
    /// Where the server is asked for, when the Sentinels say (`via_sentinels`).
    sentinels: Option<Arc<sentinel::Sentinels>>,
    client_name: Option<String>,
    hooks: Hooks<RedisConnection>,
    #[cfg(feature = "rustls")]
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

impl RedisManager {
    /// A manager for `redis://host:port/db`, `redis+unix:///path/to/socket` or
    /// `unix:///path/to/socket` (or any other form of those addresses redis-rs accepts).
    ///
    /// # Errors
    ///
    /// When the address cannot be parsed, and for TLS addresses (`rediss://`), which need
    /// [`with_rustls`](RedisManager::with_rustls) (feature `rustls`): refused here, not at the
    /// first take.
    pub fn new(url: impl IntoConnectionInfo) -> RedisResult<Self> {
        let info = url.into_connection_info()?;
        match info.addr() {
            ConnectionAddr::Tcp(..) => {}
            #[cfg(unix)]
            ConnectionAddr::Unix(_) => {}
            other => {
                return Err(RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "pooler-redis connects over TCP (redis://) and Unix sockets (redis+unix://, unix://); TLS (rediss://) needs RedisManager::with_rustls (feature rustls)",
                    format!("{other:?}"),
                )));
            }
        }
        Ok(RedisManager {
            info,
            sentinels: None,
            client_name: None,
            hooks: Hooks::default(),
            #[cfg(feature = "rustls")]
            tls: None,
        })
    }

    /// A manager for a TLS address (`rediss://host:port/db`), connecting through rustls as
    /// `config` says (its roots, client certificates and crypto provider). The server's name
    /// checked against its certificate is the address's host; a `#insecure` address is
    /// refused (say what to trust in `config` instead).
    ///
    /// # Errors
    ///
    /// When the address cannot be parsed, is not a `rediss://` one, or asks for no
    /// verification.
    #[cfg(feature = "rustls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "rustls")))]
    pub fn with_rustls(url: &str, config: rustls::ClientConfig) -> RedisResult<Self> {
        let refuse = |why: &'static str| {
            RedisError::from((ErrorKind::InvalidClientConfig, why, url.to_owned()))
        };
        let rest = url
            .strip_prefix("rediss://")
            .ok_or_else(|| refuse("RedisManager::with_rustls takes a rediss:// address"))?;
        if url.contains("#insecure") {
            return Err(refuse(
                "RedisManager::with_rustls verifies the server: say what to trust in the rustls config, not #insecure",
            ));
        }
        // redis-rs reads a TLS address only with its own TLS features: read it as the plain
        // address it names, then mark it TLS.
        let plain = format!("redis://{rest}").into_connection_info()?;
        let ConnectionAddr::Tcp(host, port) = plain.addr().clone() else {
            return Err(refuse("a rediss:// address names a host and a port"));
        };
        let info = plain.set_addr(ConnectionAddr::TcpTls {
            host,
            port,
            insecure: false,
            tls_params: None,
        });
        Ok(RedisManager {
            info,
            sentinels: None,
            client_name: None,
            hooks: Hooks::default(),
            tls: Some(std::sync::Arc::new(config)),
        })
    }

    /// A manager for settings read from a pools file or any serde format.
    ///
    /// # Errors
    ///
    /// As [`RedisManager::new`].
    #[cfg(feature = "serde")]
    #[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
    pub fn from_settings(settings: &RedisSettings) -> RedisResult<Self> {
        let manager = Self::new(settings.to_info()?)?;
        Ok(match &settings.client_name {
            Some(name) => manager.client_name(name.clone()),
            None => manager,
        })
    }

    /// The same manager, connecting to the server the Sentinels name for `service`: its
    /// master, or its replicas in turn ([`SentinelRole`]). The manager's address gives the
    /// database, user, password and protocol; its host and port are not used. Each start asks
    /// the Sentinels (the one that answered last first) and checks with `ROLE` that the
    /// server has the role; a connection whose server answers `READONLY` (a master demoted
    /// by a failover) is replaced when given back, and a health check
    /// (`idle_check_threshold`) asks `ROLE` instead of `PING`. docs/design.md,
    /// "Redis Sentinel".
    ///
    /// # Errors
    ///
    /// When a Sentinel's address cannot be parsed or is not TCP, when none is given, and for
    /// a TLS or Unix-socket manager.
    pub fn via_sentinels<I, A>(
        mut self,
        sentinels: I,
        service: impl Into<String>,
        role: SentinelRole,
    ) -> RedisResult<Self>
    where
        I: IntoIterator<Item = A>,
        A: IntoConnectionInfo,
    {
        if !matches!(self.info.addr(), ConnectionAddr::Tcp(..)) {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "RedisManager::via_sentinels connects over plain TCP (redis://)",
            )));
        }
        let mut addrs = Vec::new();
        for sentinel in sentinels {
            let info = sentinel.into_connection_info()?;
            match info.addr() {
                ConnectionAddr::Tcp(host, port) => addrs.push((host.clone(), *port)),
                other => {
                    return Err(RedisError::from((
                        ErrorKind::InvalidClientConfig,
                        "a Sentinel is reached over plain TCP (redis://host:port)",
                        format!("{other:?}"),
                    )));
                }
            }
        }
        self.sentinels = Some(Arc::new(sentinel::Sentinels::new(
            addrs,
            service.into(),
            role,
        )?));
        Ok(self)
    }

    /// Names every connection with `CLIENT SETNAME` (it shows in `CLIENT LIST`).
    #[must_use]
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = Some(name.into());
        self
    }

    /// One multiplexed connection to the same server, shared by every caller: clone it into
    /// each task and send commands on it concurrently; it reconnects by itself when the
    /// connection is lost (redis-rs's `ConnectionManager`). For commands that need no
    /// connection of their own it is faster than any pool, pooler's included: no take, no
    /// return, every caller's commands pipelined on one socket. Take an exclusive member
    /// from the pool instead for what holds a connection: `MULTI`/`EXEC`, `WATCH`, blocking
    /// commands (`BLPOP`), `SELECT`, pub/sub.
    ///
    /// # Errors
    ///
    /// When the first connection cannot be made.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped, no connection is kept.
    #[cfg(feature = "shared")]
    #[cfg_attr(docsrs, doc(cfg(feature = "shared")))]
    pub async fn shared(&self) -> RedisResult<redis::aio::ConnectionManager> {
        redis::Client::open(self.info.clone())?
            .get_connection_manager()
            .await
    }

    /// Runs `hooks` on every connection: `after_connect` once it is open, `after_return`
    /// once a returned connection is clean (see [`Hooks`]). Add per-connection setup here
    /// rather than by wrapping the manager: a wrapper must forward every hook of
    /// [`Manager`], and one that forgets `is_broken`, `needs_recycle` or `recycle` hands the
    /// next user an open `MULTI` or a blocked connection.
    #[must_use]
    pub fn hooks(mut self, hooks: Hooks<RedisConnection>) -> Self {
        self.hooks = hooks;
        self
    }
}

/// A pooled connection. It implements redis-rs's
/// [`ConnectionLike`](redis::aio::ConnectionLike), so `query_async(&mut conn)` and
/// [`AsyncCommands`](redis::AsyncCommands) work on it (and on the pool's guard) directly.
///
/// It sees every command sent through it, so that what a user leaves on the connection
/// never reaches the next one: an open `MULTI` is discarded, keys watched are unwatched, a
/// database selected and a name set are put back — in one round trip, and only when the user
/// changed them; a request whose answer never came (a cancelled `BLPOP k 0`) or a mode no
/// command undoes (`SUBSCRIBE`, `MONITOR`, `CLIENT REPLY`, `HELLO`, `AUTH`) has the
/// connection replaced. [`untracked`](RedisConnection::untracked) reaches the multiplexed
/// connection underneath, and has the connection replaced when it comes back.
pub struct RedisConnection {
    conn: MultiplexedConnection,
    ended: Arc<AtomicBool>,
    track: Track,
    /// The server the Sentinels named, when they did.
    placed: Option<sentinel::Placed>,
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConnection")
            .field("ended", &self.ended.load(Ordering::Relaxed))
            .field("track", &self.track)
            .finish_non_exhaustive()
    }
}

impl RedisConnection {
    /// The multiplexed connection underneath. Commands sent through it (or through a clone
    /// of it) are not seen, so the connection is replaced when it comes back rather than
    /// handed on unseen.
    pub fn untracked(&mut self) -> &mut MultiplexedConnection {
        self.track.lasting = true;
        &mut self.conn
    }

    /// The database this connection's commands go to now.
    #[must_use]
    pub fn db(&self) -> i64 {
        self.track.db
    }
}

/// Commands run on the pooled connection itself, seen on their way.
impl redis::aio::ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        let RedisConnection { conn, track, .. } = self;
        Box::pin(async move {
            let issued = track.issue(cmd);
            // The inherent method: one boxed future per command (this one), not two.
            let answer = conn.send_packed_command(cmd).await;
            track.seen(issued, &answer);
            answer
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        let RedisConnection { conn, track, .. } = self;
        Box::pin(async move {
            let issued: Vec<_> = pipeline.cmd_iter().map(|cmd| track.issue(cmd)).collect();
            let answers = conn.send_packed_commands(pipeline, offset, count).await;
            track.seen_all(issued, &answers);
            answers
        })
    }

    fn get_db(&self) -> i64 {
        self.track.db
    }
}

/// Sets a flag when dropped: the driver has ended, however it ended.
struct Ended(Arc<AtomicBool>);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A connection's driver, boxed: its type depends on the socket's (one allocation per
/// connection).
type Driver = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// A multiplexed connection over an open socket, and its driver.
async fn over<S>(
    settings: &redis::RedisConnectionInfo,
    socket: S,
) -> RedisResult<(MultiplexedConnection, Driver)>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (conn, driver) =
        MultiplexedConnection::new_with_config(settings, socket, AsyncConnectionConfig::default())
            .await?;
    Ok((conn, Box::pin(driver)))
}

impl Manager for RedisManager {
    type Member = RedisConnection;
    type Error = RedisError;

    async fn start(&self, ctx: &MemberContext) -> Result<RedisConnection, RedisError> {
        let settings = self.info.redis_settings();
        let ended = Arc::new(AtomicBool::new(false));
        let mut placed = None;
        let (conn, driver) = match (&self.sentinels, self.info.addr()) {
            (Some(sentinels), _) => {
                let (host, port) = sentinels.find().await?;
                let socket = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
                live(&socket)?;
                placed = Some(sentinels.placed((host, port)));
                over(settings, socket).await?
            }
            (None, ConnectionAddr::Tcp(host, port)) => {
                let socket = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                live(&socket)?;
                over(settings, socket).await?
            }
            #[cfg(unix)]
            (None, ConnectionAddr::Unix(path)) => {
                over(settings, tokio::net::UnixStream::connect(path).await?).await?
            }
            #[cfg(feature = "rustls")]
            (None, ConnectionAddr::TcpTls { host, port, .. }) if self.tls.is_some() => {
                let socket = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                live(&socket)?;
                let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| {
                    RedisError::from((
                        ErrorKind::InvalidClientConfig,
                        "the address's host is not a name a certificate can hold",
                        e.to_string(),
                    ))
                })?;
                let config = self.tls.clone().expect("checked by the pattern's guard");
                let stream = tokio_rustls::TlsConnector::from(config)
                    .connect(name, socket)
                    .await?;
                over(settings, stream).await?
            }
            (None, other) => {
                // `new` and `with_rustls` refuse every other address.
                return Err(RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "pooler-redis connects over TCP and Unix sockets only",
                    format!("{other:?}"),
                )));
            }
        };
        let flag = Ended(ended.clone());
        let watch = self.sentinels.as_ref().and_then(sentinel::Sentinels::watch);
        ctx.spawn(async move {
            let _flag = flag;
            match watch {
                // The pool's Sentinel watch rides with this member's driver (it never ends
                // by itself): the member's life is still its driver's.
                Some(watch) => {
                    let mut watch = std::pin::pin!(watch);
                    let mut driver = driver;
                    std::future::poll_fn(|cx| {
                        let _ = watch.as_mut().poll(cx);
                        driver.as_mut().poll(cx)
                    })
                    .await;
                }
                None => driver.await,
            }
        });
        let db = settings.db();
        let mut conn = RedisConnection {
            conn,
            ended,
            track: Track {
                db,
                base_db: db,
                ..Track::default()
            },
            placed,
        };
        if let Some(sentinels) = &self.sentinels
            && !sentinel::has_role(&mut conn.conn, sentinels.role()).await?
        {
            return Err(RedisError::from((
                ErrorKind::Io,
                "the server the Sentinel named does not have the role asked for (a failover under way)",
                format!("{:?}", sentinels.role()),
            )));
        }
        if let Some(name) = &self.client_name {
            redis::cmd("CLIENT")
                .arg("SETNAME")
                .arg(name)
                .query_async::<()>(&mut conn.conn)
                .await?;
        }
        Ok(conn)
    }

    async fn initialize(&self, conn: &mut RedisConnection) -> Result<(), RedisError> {
        self.hooks
            .run_after_connect(conn)
            .await
            .map_err(hook_failed)?;
        // The database the hook selected is where every user starts.
        let db = conn.track.db;
        conn.track = Track {
            db,
            base_db: db,
            lasting: conn.track.lasting,
            demoted: conn.track.demoted,
            ..Track::default()
        };
        Ok(())
    }

    async fn check(&self, conn: &mut RedisConnection) -> Result<(), RedisError> {
        if let Some(sentinels) = &self.sentinels {
            return if sentinel::has_role(&mut conn.conn, sentinels.role()).await? {
                Ok(())
            } else {
                Err(RedisError::from((
                    ErrorKind::Io,
                    "the server no longer has the role the Sentinels named it for (a failover)",
                )))
            };
        }
        redis::cmd("PING")
            .query_async::<String>(&mut conn.conn)
            .await
            .map(drop)
    }

    fn is_broken(&self, conn: &RedisConnection) -> bool {
        conn.ended.load(Ordering::Acquire)
            || conn.track.blocking > 0
            || conn.track.lasting
            || conn.track.demoted
            || conn
                .placed
                .as_ref()
                .zip(self.sentinels.as_ref())
                .is_some_and(|(placed, sentinels)| sentinels.left_behind(placed))
    }

    fn needs_recycle(&self, conn: &RedisConnection) -> bool {
        !conn.track.clean() || self.hooks.has_after_return()
    }

    async fn recycle(&self, conn: &mut RedisConnection) -> Result<(), RedisError> {
        let track = &conn.track;
        if !track.clean() {
            // One round trip puts back what was changed; the PING at its end comes after
            // every answer still on its way (answers come in order).
            let mut restore = redis::pipe();
            if track.multi {
                restore.cmd("DISCARD").ignore();
            }
            if track.watching {
                restore.cmd("UNWATCH").ignore();
            }
            if track.db_moved() {
                restore.cmd("SELECT").arg(track.base_db).ignore();
            }
            if track.renamed {
                restore
                    .cmd("CLIENT")
                    .arg("SETNAME")
                    .arg(self.client_name.as_deref().unwrap_or(""))
                    .ignore();
            }
            restore.cmd("PING").ignore();
            // A cleaning command the server did not need (`DISCARD` with no `MULTI`, after
            // an `EXEC` that may have been sent: `track.rs`) answers an error: ignored.
            restore.ignore_errors();
            tokio::time::timeout(SETTLE, restore.query_async::<()>(&mut conn.conn))
                .await
                .map_err(|_| {
                    RedisError::from((
                        ErrorKind::Io,
                        "a request left by the last user was not answered in time",
                    ))
                })??;
            conn.track = Track {
                db: conn.track.base_db,
                base_db: conn.track.base_db,
                ..Track::default()
            };
        }
        self.hooks.run_after_return(conn).await.map_err(hook_failed)
    }
}

/// How long sent data may stay unacknowledged before the connection is dropped (Linux's
/// `TCP_USER_TIMEOUT`), and the keepalives that find an idle dead link: after 10 s idle,
/// every 5 s, 4 unanswered (docs/faults.md). A command sent into a dead link fails, and an
/// idle connection on one is found dead (its driver ends, the pool replaces it), within
/// about 30 s instead of the kernel's ~15 minutes or never.
pub const TCP_USER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The keepalives that find an idle dead link (with [`TCP_USER_TIMEOUT`]).
fn keepalive() -> socket2::TcpKeepalive {
    let keepalive = socket2::TcpKeepalive::new().with_time(std::time::Duration::from_secs(10));
    #[cfg(not(any(
        target_os = "aix",
        target_os = "openbsd",
        target_os = "redox",
        target_os = "solaris"
    )))]
    let keepalive = keepalive.with_interval(std::time::Duration::from_secs(5));
    #[cfg(not(any(
        target_os = "aix",
        target_os = "openbsd",
        target_os = "redox",
        target_os = "solaris",
        target_os = "windows"
    )))]
    let keepalive = keepalive.with_retries(4);
    keepalive
}

/// The same options for sockets redis-rs opens (a cluster's).
#[cfg(feature = "cluster")]
fn tcp_settings() -> redis::io::tcp::TcpSettings {
    let settings = redis::io::tcp::TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive());
    #[cfg(target_os = "linux")]
    let settings = settings.set_user_timeout(TCP_USER_TIMEOUT);
    settings
}

/// Sets a new TCP connection's options: no Nagle delay, and the dead-link bounds above.
fn live(socket: &tokio::net::TcpStream) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    let socket = socket2::SockRef::from(socket);
    #[cfg(target_os = "linux")]
    socket.set_tcp_user_timeout(Some(TCP_USER_TIMEOUT))?;
    socket.set_tcp_keepalive(&keepalive())
}

/// How long a returned connection waits for the answers its last user left on their way.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// A hook's failure, as a redis-rs error (the manager's error type).
fn hook_failed(e: Box<dyn std::error::Error + Send + Sync>) -> RedisError {
    RedisError::from((ErrorKind::Client, "a hook failed", e.to_string()))
}
