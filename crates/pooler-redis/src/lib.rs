#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use pooler::{Manager, MemberContext};
use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo,
    RedisError, RedisResult,
};

pub use pooler;
pub use redis;

/// A pool of Redis connections.
pub type Pool = pooler::Pool<RedisManager>;
/// A Redis connection taken from a [`Pool`]: dereferences to the connection.
pub type Member = pooler::Member<RedisManager>;

/// Starts Redis connections.
#[derive(Debug, Clone)]
pub struct RedisManager {
    info: ConnectionInfo,
    client_name: Option<String>,
}

impl RedisManager {
    /// A manager for `redis://host:port/db`, `redis+unix:///path/to/socket` or
    /// `unix:///path/to/socket` (or any other form of those addresses redis-rs accepts).
    ///
    /// # Errors
    ///
    /// When the address cannot be parsed, and for TLS addresses (`rediss://`), which
    /// pooler-redis does not support: refused here, not at the first take.
    pub fn new(url: impl IntoConnectionInfo) -> RedisResult<Self> {
        let info = url.into_connection_info()?;
        match info.addr() {
            ConnectionAddr::Tcp(..) => {}
            #[cfg(unix)]
            ConnectionAddr::Unix(_) => {}
            other => {
                return Err(RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "pooler-redis connects over TCP (redis://) and Unix sockets (redis+unix://, unix://) only; TLS (rediss://) is not supported",
                    format!("{other:?}"),
                )));
            }
        }
        Ok(RedisManager {
            info,
            client_name: None,
        })
    }

    /// Names every connection with `CLIENT SETNAME` (it shows in `CLIENT LIST`).
    #[must_use]
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = Some(name.into());
        self
    }
}

/// A pooled connection: dereferences to [`MultiplexedConnection`], so every redis-rs command
/// works on it.
pub struct RedisConnection {
    conn: MultiplexedConnection,
    ended: Arc<AtomicBool>,
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConnection")
            .field("ended", &self.ended.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Deref for RedisConnection {
    type Target = MultiplexedConnection;
    fn deref(&self) -> &MultiplexedConnection {
        &self.conn
    }
}

impl DerefMut for RedisConnection {
    fn deref_mut(&mut self) -> &mut MultiplexedConnection {
        &mut self.conn
    }
}

/// Commands run on the pooled connection itself, so `query_async(&mut *conn)` and
/// [`AsyncCommands`](redis::AsyncCommands) work on it directly.
impl redis::aio::ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        self.conn.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        self.conn.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
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
        let (conn, driver) = match self.info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                let socket = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                socket.set_nodelay(true)?;
                over(settings, socket).await?
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => {
                over(settings, tokio::net::UnixStream::connect(path).await?).await?
            }
            other => {
                // `new` refuses every other address.
                return Err(RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "pooler-redis connects over TCP and Unix sockets only",
                    format!("{other:?}"),
                )));
            }
        };
        let flag = Ended(ended.clone());
        ctx.spawn(async move {
            let _flag = flag;
            driver.await;
        });
        let mut conn = RedisConnection { conn, ended };
        if let Some(name) = &self.client_name {
            redis::cmd("CLIENT")
                .arg("SETNAME")
                .arg(name)
                .query_async::<()>(&mut conn.conn)
                .await?;
        }
        Ok(conn)
    }

    async fn check(&self, conn: &mut RedisConnection) -> Result<(), RedisError> {
        redis::cmd("PING")
            .query_async::<String>(&mut conn.conn)
            .await
            .map(drop)
    }

    fn is_broken(&self, conn: &RedisConnection) -> bool {
        conn.ended.load(Ordering::Acquire)
    }
}
