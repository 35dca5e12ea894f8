//! Opening a connection with the [`Watched`] layer in place: the socket is opened here (TCP or
//! Unix, each host and port of the config in turn, as tokio-postgres does), watched, and
//! handed to tokio-postgres's `connect_raw`; if TLS is negotiated, the layer moves above it.

use std::any::TypeId;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
#[cfg(unix)]
use tokio::net::UnixStream;
use tokio_postgres::config::Host;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, Config, NoTls};

use crate::watch::{Seen, Watched};

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

/// A started connection: the client, the connection's driver, and what its layers see.
pub(crate) type Opened = (
    Client,
    Pin<Box<dyn Future<Output = Result<(), tokio_postgres::Error>> + Send>>,
    Arc<Seen>,
);

/// Connects as `config` says, through `tls`, with the transaction status watched.
pub(crate) async fn connect<T>(config: &Config, tls: &mut T) -> Result<Opened, PgError>
where
    T: MakeTlsConnect<WatchedSocket> + 'static,
    T::TlsConnect: Send + 'static,
    <T::TlsConnect as TlsConnect<WatchedSocket>>::Future: Send + 'static,
    <T::TlsConnect as TlsConnect<WatchedSocket>>::Stream: Send + Unpin + 'static,
{
    let mut last = None;
    let hosts = config.get_hosts();
    let ports = config.get_ports();
    for (i, host) in hosts.iter().enumerate() {
        let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
        let addr = config.get_hostaddrs().get(i).copied();
        let socket = match open(config, host, addr, port).await {
            Ok(socket) => socket,
            Err(source) => {
                last = Some(PgError::Connect {
                    host: match host {
                        Host::Tcp(name) => name.clone(),
                        #[cfg(unix)]
                        Host::Unix(dir) => dir.display().to_string(),
                    },
                    port,
                    source,
                });
                continue;
            }
        };
        let seen = Arc::new(Seen::default());
        let watched = Watched::new(socket, seen.clone());
        // tokio-postgres asks a connector whether it can do TLS at all through a hook that
        // cannot be forwarded; `NoTls` says no, so it is passed as it is.
        if TypeId::of::<T>() == TypeId::of::<NoTls>() {
            let (client, connection) = config.connect_raw(watched, NoTls).await?;
            return Ok((client, Box::pin(connection), seen));
        }
        let name = match host {
            Host::Tcp(name) => name.as_str(),
            #[cfg(unix)]
            Host::Unix(_) => "",
        };
        let tls = tls
            .make_tls_connect(name)
            .map_err(|e| PgError::Tls(e.into()))?;
        let (client, connection) = config.connect_raw(watched, WatchTls(tls)).await?;
        return Ok((client, Box::pin(connection), seen));
    }
    Err(last.unwrap_or(PgError::NoHost))
}

/// Why a connection could not be made.
#[derive(Debug)]
#[non_exhaustive]
pub enum PgError {
    /// The socket to a host could not be opened (the last host tried, if there are several).
    Connect {
        /// The host (a name, an address, or a socket directory).
        host: String,
        /// The port.
        port: u16,
        /// What the system said.
        source: io::Error,
    },
    /// The config names no host.
    NoHost,
    /// The TLS connector could not be set up for the host.
    Tls(Box<dyn std::error::Error + Send + Sync>),
    /// The server or the protocol refused (authentication, a query, a closed connection).
    Postgres(tokio_postgres::Error),
}

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PgError::Connect { host, port, source } => {
                write!(f, "cannot connect to {host}:{port}: {source}")
            }
            PgError::NoHost => f.write_str("the connection config names no host"),
            PgError::Tls(e) => write!(f, "cannot set up TLS: {e}"),
            PgError::Postgres(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PgError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PgError::Connect { source, .. } => Some(source),
            PgError::NoHost => None,
            PgError::Tls(e) => Some(&**e),
            PgError::Postgres(e) => Some(e),
        }
    }
}

impl From<tokio_postgres::Error> for PgError {
    fn from(e: tokio_postgres::Error) -> Self {
        PgError::Postgres(e)
    }
}

/// Opens the socket to one host.
async fn open(
    config: &Config,
    host: &Host,
    addr: Option<std::net::IpAddr>,
    port: u16,
) -> io::Result<PgSocket> {
    let connect = async {
        match host {
            Host::Tcp(name) => {
                let stream = match addr {
                    Some(ip) => TcpStream::connect((ip, port)).await?,
                    None => TcpStream::connect((name.as_str(), port)).await?,
                };
                stream.set_nodelay(true)?;
                if config.get_keepalives() {
                    let keepalive =
                        socket2::TcpKeepalive::new().with_time(config.get_keepalives_idle());
                    socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive)?;
                }
                Ok(PgSocket::Tcp(stream))
            }
            #[cfg(unix)]
            Host::Unix(dir) => {
                let path = dir.join(format!(".s.PGSQL.{port}"));
                Ok(PgSocket::Unix(UnixStream::connect(path).await?))
            }
        }
    };
    match config.get_connect_timeout() {
        None => connect.await,
        Some(&limit) => tokio::time::timeout(limit.max(Duration::from_millis(1)), connect)
            .await
            .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))),
    }
}
