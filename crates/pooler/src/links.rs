//! Bounds on the TCP links a client library opens without letting its caller set them
//! (feature `links`, Linux): `TCP_USER_TIMEOUT` and the keepalive probes' interval and count,
//! so that a link that dies without a word — no FIN, no RST — fails a request within a stated
//! bound instead of the kernel's ~15 minutes of retransmissions (docs/faults.md).
//!
//! mysql_async, for one, opens its socket inside `Conn::new` and offers only the keepalive's
//! idle time. A manager notes the process's sockets before the connect ([`Opening::before`])
//! and bounds the ones the connect opened once it returns ([`Opening::bound`]): each socket
//! that was not there before, is connected to the server's port, and has no user timeout of
//! its own yet. The sockets are reached through duplicates of their descriptors
//! (`pidfd_getfd` on the process itself), so nothing here needs `unsafe` or can touch a
//! descriptor number that was closed and reused meanwhile: a duplicate is the socket it was
//! taken from.
//!
//! # Invariants
//!
//! 1. A socket is changed only if it appeared during the connect, is a TCP socket connected to
//!    the server's port, and had no user timeout: a socket someone set on purpose keeps its
//!    setting.
//! 2. Nothing fails the connect: where the bounds cannot be set (another system, descriptors
//!    the process may not duplicate), [`Opening::bound`] says so by bounding none, and the
//!    link keeps the kernel's defaults.
//!
//! A socket another library of the same process opens to the same server port during the
//! connect is bounded too: the bounds only make a dead link fail sooner.

use std::collections::HashSet;
use std::time::Duration;

/// How long a dead link may hold a request, and how the keepalive probes find an idle one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkBounds {
    /// `TCP_USER_TIMEOUT`: how long data may stay unacknowledged before the kernel ends the
    /// link (and the request on it fails).
    pub user_timeout: Duration,
    /// The time between keepalive probes (`TCP_KEEPINTVL`), where the socket has keepalives
    /// on (its idle time is the client library's own).
    pub keepalive_interval: Duration,
    /// How many unanswered probes end the link (`TCP_KEEPCNT`).
    pub keepalive_count: u32,
}

impl LinkBounds {
    /// 30 s of unacknowledged data, probes every 5 s, 4 lost: with a 10 s keepalive idle
    /// time, a dead link is found within 30 s whether a request is on it or not — the bounds
    /// pooler-postgres sets through tokio-postgres's own options.
    pub const DEFAULT: LinkBounds = LinkBounds {
        user_timeout: Duration::from_secs(30),
        keepalive_interval: Duration::from_secs(5),
        keepalive_count: 4,
    };
}

impl Default for LinkBounds {
    fn default() -> Self {
        LinkBounds::DEFAULT
    }
}

/// The process's sockets before a connect, to bound the ones the connect opens.
#[derive(Debug)]
pub struct Opening {
    /// The server's port: only sockets connected to it are bounded.
    port: u16,
    /// The inodes of the process's sockets before the connect.
    before: HashSet<u64>,
}

impl Opening {
    /// Notes the process's sockets before a connect to a server listening on `port`.
    #[must_use]
    pub fn before(port: u16) -> Opening {
        Opening {
            port,
            before: sockets().map(|(_, inode)| inode).collect(),
        }
    }

    /// Bounds the sockets the connect opened (see the module's invariants); returns how many.
    /// None on a system other than Linux, or where the process may not duplicate its own
    /// descriptors.
    pub fn bound(self, bounds: &LinkBounds) -> usize {
        let new = sockets()
            .filter(|(_, inode)| !self.before.contains(inode))
            .map(|(fd, _)| fd);
        os::bound(new, self.port, bounds)
    }
}

/// The process's open sockets: descriptor number and inode.
fn sockets() -> impl Iterator<Item = (i32, u64)> {
    std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let fd = entry.file_name().to_str()?.parse().ok()?;
            let target = std::fs::read_link(entry.path()).ok()?;
            let inode = target
                .to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()?;
            Some((fd, inode))
        })
}

#[cfg(target_os = "linux")]
mod os {
    use rustix::net::sockopt;
    use rustix::process::{PidfdFlags, PidfdGetfdFlags, getpid, pidfd_getfd, pidfd_open};

    use super::LinkBounds;

    /// Bounds each of descriptors `fds` whose socket is a TCP socket connected to `port` with
    /// no user timeout of its own; how many it did. The process's own descriptor is opened
    /// once for them all.
    pub(super) fn bound(fds: impl Iterator<Item = i32>, port: u16, bounds: &LinkBounds) -> usize {
        let Ok(me) = pidfd_open(getpid(), PidfdFlags::empty()) else {
            return 0;
        };
        let bounded = |fd: i32| -> rustix::io::Result<bool> {
            let socket = pidfd_getfd(&me, fd, PidfdGetfdFlags::empty())?;
            let peer = rustix::net::getpeername(&socket)?
                .and_then(|peer| std::net::SocketAddr::try_from(peer).ok());
            if peer.is_none_or(|peer| peer.port() != port)
                || sockopt::tcp_user_timeout(&socket)? != 0
            {
                return Ok(false);
            }
            let millis = u32::try_from(bounds.user_timeout.as_millis()).unwrap_or(u32::MAX);
            sockopt::set_tcp_user_timeout(&socket, millis.max(1))?;
            if sockopt::socket_keepalive(&socket)? {
                sockopt::set_tcp_keepintvl(&socket, bounds.keepalive_interval)?;
                sockopt::set_tcp_keepcnt(&socket, bounds.keepalive_count.max(1))?;
            }
            Ok(true)
        };
        fds.filter(|&fd| bounded(fd).unwrap_or(false)).count()
    }
}

#[cfg(not(target_os = "linux"))]
mod os {
    use super::LinkBounds;

    pub(super) fn bound(
        _fds: impl Iterator<Item = i32>,
        _port: u16,
        _bounds: &LinkBounds,
    ) -> usize {
        0
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// A socket opened after the snapshot and connected to the port gets the bounds; one
    /// opened before does not, nor one to another port, nor one whose user timeout was set.
    #[test]
    fn only_new_sockets_to_the_port_without_a_timeout_are_bounded() {
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = server.local_addr().unwrap().port();
        let old = TcpStream::connect(server.local_addr().unwrap()).unwrap();
        let opening = Opening::before(port);
        let new = TcpStream::connect(server.local_addr().unwrap()).unwrap();
        let elsewhere = TcpStream::connect(other.local_addr().unwrap()).unwrap();
        let own = TcpStream::connect(server.local_addr().unwrap()).unwrap();
        rustix::net::sockopt::set_tcp_user_timeout(&own, 1234).unwrap();
        rustix::net::sockopt::set_socket_keepalive(&new, true).unwrap();
        let bounds = LinkBounds {
            user_timeout: Duration::from_millis(2500),
            keepalive_interval: Duration::from_secs(3),
            keepalive_count: 2,
        };
        // The server's ends are never accepted, so they are no descriptors of the process.
        assert_eq!(opening.bound(&bounds), 1);
        let user_timeout = |s: &TcpStream| rustix::net::sockopt::tcp_user_timeout(s).unwrap();
        assert_eq!(user_timeout(&new), 2500);
        assert_eq!(
            rustix::net::sockopt::tcp_keepintvl(&new).unwrap(),
            Duration::from_secs(3)
        );
        assert_eq!(rustix::net::sockopt::tcp_keepcnt(&new).unwrap(), 2);
        assert_eq!(user_timeout(&old), 0);
        assert_eq!(user_timeout(&elsewhere), 0);
        assert_eq!(user_timeout(&own), 1234);
    }
}
