#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use track::Track;

use pooler::{Hooks, Manager, MemberContext};
use redis::{
    ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo, RedisError, RedisResult,
};

pub use pooler;
pub use redis;
#[cfg(feature = "rustls")]
#[cfg_attr(docsrs, doc(cfg(feature = "rustls")))]
pub use rustls;

#[cfg(feature = "cluster")]
mod cluster;
mod connection;
mod sentinel;
#[cfg(feature = "serde")]
mod settings;
mod socket;
mod track;
#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub use cluster::{ClusterManager, ClusterPool, RedisClusterConnection};
pub use connection::RedisConnection;
pub use sentinel::{SENTINEL_WATCH, SentinelRole};
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use settings::{ProtocolName, RedisSettings};
pub use socket::TCP_USER_TIMEOUT;
use socket::{Ended, live, over};

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
    /// `RedisManager::with_rustls` (feature `rustls`): refused here, not at the first take.
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
    /// database, user, password and protocol; its host and port are not used. A Sentinel's
    /// own URL gives the user and password it wants (`redis://:secret@sentinel:26379`).
    ///
    /// Each start asks the Sentinels (the one that answered last first) and checks with
    /// `ROLE` that the server has the role. A failover is followed while it happens: the
    /// pool asks the Sentinels every [`SENTINEL_WATCH`], and a member whose server no longer
    /// serves the role is replaced when next given back or taken; so is one whose server
    /// answers `READONLY` (a master demoted), and a health check (`idle_check_threshold`)
    /// asks `ROLE` instead of `PING`. docs/design.md, "Redis Sentinel".
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
                ConnectionAddr::Tcp(host, port) => addrs.push(sentinel::Sentinel {
                    host: host.clone(),
                    port: *port,
                    settings: info.redis_settings().clone(),
                }),
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

impl Manager for RedisManager {
    type Member = RedisConnection;
    type Error = RedisError;

    async fn start(&self, ctx: &MemberContext) -> Result<RedisConnection, RedisError> {
        let settings = self.info.redis_settings();
        let ended = Arc::new(AtomicBool::new(false));
        let mut placed = None;
        let (conn, driver) = match (&self.sentinels, self.info.addr()) {
            (Some(sentinels), _) => {
                let found = sentinels.find().await?;
                let socket = tokio::net::TcpStream::connect(found.addr()).await?;
                live(&socket)?;
                placed = Some(found);
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
        let watch = self.sentinels.as_ref().map(sentinel::Sentinels::stand_by);
        ctx.spawn(async move {
            let _flag = flag;
            match watch {
                // The pool's Sentinel watch, or this member's readiness to run it, rides with
                // its driver (it never ends by itself): the member's life is still its
                // driver's.
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
            base_name: self.client_name.clone(),
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
        // The database the hook selected, and the name it gave, are where every user
        // starts. The name is asked for (once, at the connect) rather than read from the
        // hook's commands: it may have been given in any of them.
        if conn.track.renamed {
            conn.base_name = redis::cmd("CLIENT")
                .arg("GETNAME")
                .query_async(&mut conn.conn)
                .await?;
        }
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
                    .arg(conn.base_name.as_deref().unwrap_or(""))
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

/// How long a returned connection waits for the answers its last user left on their way.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// A hook's failure, as a redis-rs error (the manager's error type).
fn hook_failed(e: Box<dyn std::error::Error + Send + Sync>) -> RedisError {
    RedisError::from((ErrorKind::Client, "a hook failed", e.to_string()))
}
