//! Which sockets a connect opened, and their bounds set (feature `links`, Linux).
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

use super::LinkBounds;

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
    use crate::links::{KEEPALIVE_MAX, KEEPALIVE_PROBES_MAX, USER_TIMEOUT_MAX};

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
            // Each within what the kernel takes (past it, it refuses the option and the
            // socket kept none of the bounds): a user timeout of 1 ms to 2³¹ − 1, an
            // interval of 1 to 32 767 whole seconds, 1 to 127 probes.
            let millis = (bounds.user_timeout.as_millis()).clamp(1, USER_TIMEOUT_MAX.as_millis());
            sockopt::set_tcp_user_timeout(&socket, u32::try_from(millis).unwrap_or(u32::MAX))?;
            if sockopt::socket_keepalive(&socket)? {
                let secs = bounds
                    .keepalive_interval
                    .as_secs()
                    .clamp(1, KEEPALIVE_MAX.as_secs());
                sockopt::set_tcp_keepintvl(&socket, std::time::Duration::from_secs(secs))?;
                sockopt::set_tcp_keepcnt(
                    &socket,
                    bounds.keepalive_count.clamp(1, KEEPALIVE_PROBES_MAX),
                )?;
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
    use std::time::Duration;

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

    /// Bounds past what the kernel takes are the nearest it does, not refused whole (the
    /// socket was left with none of them): the longest user timeout (2³¹ − 1 ms), keepalive
    /// interval (32 767 s) and count (127); a zero interval or count is the shortest, one.
    #[test]
    fn bounds_past_the_kernels_range_are_the_nearest_it_takes() {
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = server.local_addr().unwrap().port();
        for (bounds, want) in [
            (
                LinkBounds {
                    user_timeout: Duration::MAX,
                    keepalive_interval: Duration::MAX,
                    keepalive_count: u32::MAX,
                },
                (i32::MAX as u32, Duration::from_secs(32_767), 127),
            ),
            (
                LinkBounds {
                    user_timeout: Duration::ZERO,
                    keepalive_interval: Duration::ZERO,
                    keepalive_count: 0,
                },
                (1, Duration::from_secs(1), 1),
            ),
        ] {
            let opening = Opening::before(port);
            let new = TcpStream::connect(server.local_addr().unwrap()).unwrap();
            rustix::net::sockopt::set_socket_keepalive(&new, true).unwrap();
            assert_eq!(opening.bound(&bounds), 1, "{bounds:?}");
            let got = (
                rustix::net::sockopt::tcp_user_timeout(&new).unwrap(),
                rustix::net::sockopt::tcp_keepintvl(&new).unwrap(),
                rustix::net::sockopt::tcp_keepcnt(&new).unwrap(),
            );
            assert_eq!(got, want, "{bounds:?}");
        }
    }
}
