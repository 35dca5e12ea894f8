//! The sockets: the options that bound a dead link, on those pooler-redis opens and on
//! those redis-rs opens for a cluster (docs/faults.md), and a multiplexed connection over
//! an open one with the driver it runs on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisResult};

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
pub(crate) fn tcp_settings() -> redis::io::tcp::TcpSettings {
    let settings = redis::io::tcp::TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive());
    #[cfg(target_os = "linux")]
    let settings = settings.set_user_timeout(TCP_USER_TIMEOUT);
    settings
}

/// Sets a new TCP connection's options: no Nagle delay, and the dead-link bounds above.
pub(crate) fn live(socket: &tokio::net::TcpStream) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    let socket = socket2::SockRef::from(socket);
    #[cfg(target_os = "linux")]
    socket.set_tcp_user_timeout(Some(TCP_USER_TIMEOUT))?;
    socket.set_tcp_keepalive(&keepalive())
}

/// Sets a flag when dropped: the driver has ended, however it ended.
pub(crate) struct Ended(pub(crate) Arc<AtomicBool>);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A connection's driver, boxed: its type depends on the socket's (one allocation per
/// connection).
pub(crate) type Driver = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// A multiplexed connection over an open socket, and its driver.
pub(crate) async fn over<S>(
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
