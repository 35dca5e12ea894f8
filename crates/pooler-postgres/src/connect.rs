//! Opening a connection with the [`Watched`] layer in place: the socket is opened here (TCP or
//! Unix, each host and port of the config in turn, with the socket options and session check
//! tokio-postgres's own `connect` applies), watched, and handed to tokio-postgres's
//! `connect_raw`; if TLS is negotiated, the layer moves above it. tokio-postgres records the
//! server's address for `CancelToken::cancel_query` only when it opens the socket itself, so
//! cancelling goes through [`Cancel`], made here.

use std::any::TypeId;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
#[cfg(unix)]
use tokio::net::UnixStream;
use tokio_postgres::config::{Host, LoadBalanceHosts};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{CancelToken, Client, Config, NoTls};

use crate::hosts::{Hosts, SessionTarget};
use crate::watch::{Seen, Watched};

mod error;
mod liveness;

pub use error::PgError;
use liveness::Liveness;

/// The socket under a pooled connection.
#[derive(Debug)]
pub enum PgSocket {
    /// A TCP connection.
    Tcp(TcpStream),
    /// A Unix-domain socket connection.
    #[cfg(unix)]
    Unix(UnixStream),
}

/// The socket as tokio-postgres sees it: watched.
pub type WatchedSocket = Watched<PgSocket>;

macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            PgSocket::Tcp($s) => $e,
            #[cfg(unix)]
            PgSocket::Unix($s) => $e,
        }
    };
}

impl AsyncRead for PgSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        each!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for PgSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        each!(self, s => Pin::new(s).poll_write(cx, buf))
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, s => Pin::new(s).poll_flush(cx))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}

/// A TLS connector whose streams are watched above TLS.
pub struct WatchTls<T>(T);

impl<T> TlsConnect<WatchedSocket> for WatchTls<T>
where
    T: TlsConnect<WatchedSocket> + Send + 'static,
    T::Future: Send + 'static,
    T::Stream: Send + Unpin,
{
    type Stream = Watched<T::Stream>;
    type Error = T::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Stream, T::Error>> + Send>>;

    fn connect(self, mut stream: WatchedSocket) -> Self::Future {
        // What passes below from now on is ciphertext; the layer above TLS takes over.
        stream.below_tls();
        let seen = stream.seen();
        let tls = self.0.connect(stream);
        Box::pin(async move { Ok(Watched::new(tls.await?, seen)) })
    }
}

/// Sends a cancel request for a connection's running query, over a new socket to the same
/// server, through the same TLS connector.
pub(crate) struct Cancel {
    send: Box<dyn Fn(CancelToken) -> Sent + Send + Sync>,
    route: Arc<Route>,
}

/// A cancel request on its way.
type Sent = Pin<Box<dyn Future<Output = Result<(), PgError>> + Send>>;

impl Cancel {
    /// Cancels what the connection `token` belongs to is running.
    pub(crate) fn send(&self, token: CancelToken) -> Sent {
        (self.send)(token)
    }

    /// Where the connection was made, for a cancel request through another connector.
    pub(crate) fn route(&self) -> Arc<Route> {
        self.route.clone()
    }
}

/// Where a connection was made: enough to open another socket to the same server.
#[derive(Clone)]
pub(crate) struct Route {
    config: Config,
    target: Target,
}

impl Route {
    /// Sends `token`'s cancel request over a new socket to this server, through `tls`.
    pub(crate) async fn cancel<T>(&self, token: &CancelToken, mut tls: T) -> Result<(), PgError>
    where
        T: MakeTlsConnect<WatchedSocket>,
        T::TlsConnect: Send,
    {
        let live = Liveness::of(&self.config)?;
        let socket = Watched::new(
            open(&self.config, live, &self.target).await?,
            Arc::default(),
        );
        let connector = tls
            .make_tls_connect(self.target.tls_name())
            .map_err(|e| PgError::Tls(e.into()))?;
        token.cancel_query_raw(socket, connector).await?;
        Ok(())
    }
}

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cancel")
    }
}

/// A started connection: the client, the connection's driver, what its layers see, and how
/// to cancel its running query.
pub(crate) struct Opened {
    pub(crate) client: Client,
    pub(crate) connection: Driver,
    pub(crate) seen: Arc<Seen>,
    pub(crate) cancel: Cancel,
    /// The index of its host in the config's list.
    pub(crate) host: usize,
}

/// A connection's driver future.
pub(crate) type Driver = Pin<Box<dyn Future<Output = Result<(), tokio_postgres::Error>> + Send>>;

/// Where one attempt connects.
#[derive(Clone)]
struct Target {
    /// The host as configured, if any (an IP address may stand alone).
    host: Option<Host>,
    /// The address to use instead of resolving the host.
    addr: Option<IpAddr>,
    port: u16,
}

impl Target {
    /// The host name TLS verifies ("" for a socket directory or a bare address).
    fn tls_name(&self) -> &str {
        match &self.host {
            Some(Host::Tcp(name)) => name,
            _ => "",
        }
    }

    /// The host as errors name it.
    fn shown(&self) -> String {
        match (&self.host, self.addr) {
            (_, Some(ip)) => ip.to_string(),
            (Some(Host::Tcp(name)), None) => name.clone(),
            #[cfg(unix)]
            (Some(Host::Unix(dir)), None) => dir.display().to_string(),
            (None, None) => String::new(),
        }
    }
}

/// Whether `config`'s socket settings are ones the system takes ([`PgError::Setting`]
/// names the first that is not): a manager checks when it is made, so a bad value is an
/// error there rather than every connect failing.
pub(crate) fn check(config: &Config) -> Result<(), PgError> {
    Liveness::of(config).map(drop)
}

/// Connects as `config` says, through `tls`, with the transaction status watched: each host
/// in turn (shuffled when `load_balance_hosts=random`, then ordered by what `hosts` remembers),
/// the first that connects and serves `want` wins; with `prefer-standby`, a standby first,
/// else the first server that answered.
pub(crate) async fn connect<T>(
    config: &Config,
    tls: &T,
    want: SessionTarget,
    hosts: &Hosts,
) -> Result<Opened, PgError>
where
    T: MakeTlsConnect<WatchedSocket> + Clone + Send + Sync + 'static,
    T::TlsConnect: Send + 'static,
    <T::TlsConnect as TlsConnect<WatchedSocket>>::Future: Send + 'static,
    <T::TlsConnect as TlsConnect<WatchedSocket>>::Stream: Send + Unpin + 'static,
{
    // A setting the socket would refuse fails every host alike: named, before any is tried.
    let live = Liveness::of(config)?;
    let (names, addrs) = (config.get_hosts(), config.get_hostaddrs());
    let count = names.len().max(addrs.len());
    let mut listed: Vec<usize> = (0..count).collect();
    if config.get_load_balance_hosts() == LoadBalanceHosts::Random {
        fastrand::shuffle(&mut listed);
    }
    let first = if want == SessionTarget::PreferStandby {
        SessionTarget::Standby
    } else {
        want
    };
    // The error to give when no host serves: a host of the wrong kind says more than one
    // that could not be reached.
    let (mut last, mut wrong, mut fallback) = (None, None, None);
    for i in hosts.order(listed) {
        let ports = config.get_ports();
        let target = Target {
            host: names.get(i).cloned(),
            addr: addrs.get(i).copied(),
            port: ports.get(i).or(ports.first()).copied().unwrap_or(5432),
        };
        let mut opened = match connect_to(config, live, tls, target.clone()).await {
            Ok(opened) => opened,
            Err(e) => {
                hosts.unreachable(i, count);
                last = Some(e);
                continue;
            }
        };
        let (standby, read_only) = match kind(&mut opened, &target).await {
            Ok(kind) => kind,
            Err(e) => {
                hosts.unreachable(i, count);
                last = Some(e);
                continue;
            }
        };
        if first.accepts(standby, read_only) {
            hosts.served(i, count);
            opened.host = i;
            return Ok(opened);
        }
        hosts.wrong_kind(i, count);
        if want.accepts(standby, read_only) && fallback.is_none() {
            opened.host = i;
            fallback = Some(opened);
        }
        wrong = Some(PgError::WrongSession {
            host: target.shown(),
            port: target.port,
            want,
            standby,
            read_only,
        });
    }
    fallback.ok_or_else(|| wrong.or(last).unwrap_or(PgError::NoHost))
}

/// One attempt, at `target`.
async fn connect_to<T>(
    config: &Config,
    live: Liveness,
    tls: &T,
    target: Target,
) -> Result<Opened, PgError>
where
    T: MakeTlsConnect<WatchedSocket> + Clone + Send + Sync + 'static,
    T::TlsConnect: Send + 'static,
    <T::TlsConnect as TlsConnect<WatchedSocket>>::Future: Send + 'static,
    <T::TlsConnect as TlsConnect<WatchedSocket>>::Stream: Send + Unpin + 'static,
{
    let socket = open(config, live, &target).await?;
    let seen = Arc::new(Seen::default());
    let watched = Watched::new(socket, seen.clone());
    // tokio-postgres asks a connector whether it can do TLS at all through a hook that
    // cannot be forwarded; `NoTls` says no, so it is passed as it is.
    let (client, connection): (Client, Driver) = if TypeId::of::<T>() == TypeId::of::<NoTls>() {
        let (client, connection) = config.connect_raw(watched, NoTls).await?;
        (client, Box::pin(connection))
    } else {
        let connector = tls
            .clone()
            .make_tls_connect(target.tls_name())
            .map_err(|e| PgError::Tls(e.into()))?;
        let (client, connection) = config.connect_raw(watched, WatchTls(connector)).await?;
        (client, Box::pin(connection))
    };
    Ok(Opened {
        client,
        connection,
        seen,
        cancel: canceller(config.clone(), tls.clone(), target),
        host: 0,
    })
}

/// Whether the server is a standby, and whether its sessions are read-only: as it reported
/// at the startup (PostgreSQL 14 and later), else asked while driving the connection.
async fn kind(opened: &mut Opened, target: &Target) -> Result<(bool, bool), PgError> {
    let heard = &opened.seen.heard;
    if let (Some(standby), Some(read_only)) = (heard.hot_standby(), heard.read_only_default()) {
        return Ok((standby, standby || read_only));
    }
    let mut query = std::pin::pin!(
        opened
            .client
            .simple_query("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')")
    );
    let connection = &mut opened.connection;
    let mut ended = false;
    let answer = std::future::poll_fn(|cx| {
        if !ended && connection.as_mut().poll(cx).is_ready() {
            // The connection is gone: the query's answer can only be an error now.
            ended = true;
        }
        match query.as_mut().poll(cx) {
            Poll::Pending if ended => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
            Poll::Ready(answer) => Poll::Ready(Some(answer)),
        }
    })
    .await
    .ok_or_else(|| PgError::Connect {
        host: target.shown(),
        port: target.port,
        source: io::Error::new(io::ErrorKind::ConnectionAborted, "the connection ended"),
    })??;
    let row = answer.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(row) => Some((row.get(0), row.get(1))),
        _ => None,
    });
    let (standby, read_only) = row.unwrap_or_default();
    let standby = standby == Some("t");
    Ok((standby, standby || read_only == Some("on")))
}

/// How to cancel the running query of a connection made to `target`.
fn canceller<T>(config: Config, tls: T, target: Target) -> Cancel
where
    T: MakeTlsConnect<WatchedSocket> + Clone + Send + Sync + 'static,
    T::TlsConnect: Send + 'static,
    <T::TlsConnect as TlsConnect<WatchedSocket>>::Future: Send + 'static,
    <T::TlsConnect as TlsConnect<WatchedSocket>>::Stream: Send + Unpin + 'static,
{
    let route = Arc::new(Route { config, target });
    let to = route.clone();
    Cancel {
        send: Box::new(move |token: CancelToken| {
            let (route, tls) = (to.clone(), tls.clone());
            Box::pin(async move { route.cancel(&token, tls).await })
        }),
        route,
    }
}

/// Opens the socket to one host, with the socket options `live` says (from `config`).
async fn open(config: &Config, live: Liveness, target: &Target) -> Result<PgSocket, PgError> {
    let failed = |source| PgError::Connect {
        host: target.shown(),
        port: target.port,
        source,
    };
    let port = target.port;
    let connect = async {
        let stream = match (&target.host, target.addr) {
            (_, Some(ip)) => TcpStream::connect((ip, port)).await?,
            (Some(Host::Tcp(name)), None) => TcpStream::connect((name.as_str(), port)).await?,
            #[cfg(unix)]
            (Some(Host::Unix(dir)), None) => {
                let path = dir.join(format!(".s.PGSQL.{port}"));
                return Ok(PgSocket::Unix(UnixStream::connect(path).await?));
            }
            (None, None) => return Err(io::Error::other("no host")),
        };
        stream.set_nodelay(true)?;
        let socket = socket2::SockRef::from(&stream);
        #[cfg(target_os = "linux")]
        socket.set_tcp_user_timeout(Some(live.user_timeout))?;
        if let Some((idle, interval, retries)) = live.keepalive {
            let mut keepalive = socket2::TcpKeepalive::new().with_time(idle);
            #[cfg(not(any(
                target_os = "aix",
                target_os = "openbsd",
                target_os = "redox",
                target_os = "solaris"
            )))]
            {
                keepalive = keepalive.with_interval(interval);
            }
            #[cfg(not(any(
                target_os = "aix",
                target_os = "openbsd",
                target_os = "redox",
                target_os = "solaris",
                target_os = "windows"
            )))]
            {
                keepalive = keepalive.with_retries(retries);
            }
            #[cfg(any(
                target_os = "aix",
                target_os = "openbsd",
                target_os = "redox",
                target_os = "solaris"
            ))]
            let _ = (interval, retries);
            socket.set_tcp_keepalive(&keepalive)?;
        }
        Ok(PgSocket::Tcp(stream))
    };
    match config.get_connect_timeout() {
        None => connect.await,
        Some(&limit) => tokio::time::timeout(limit.max(Duration::from_millis(1)), connect)
            .await
            .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))),
    }
    .map_err(failed)
}
