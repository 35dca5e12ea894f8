//! The liveness settings of a TCP link: what a socket takes ([`LinkSettings`], checked
//! before a connect, so that a value it would refuse is named by its key rather than failing
//! every connect with "Invalid argument"), and the bounds ([`LinkBounds`]: `TCP_USER_TIMEOUT`
//! and the keepalive probes' interval and count) that `Opening` (feature `links`, Linux)
//! puts on the links a client library opens without letting its caller set them, so that a
//! link that dies without a word — no FIN, no RST — fails a request within a stated bound
//! instead of the kernel's ~15 minutes of retransmissions (docs/faults.md).

use std::time::Duration;

/// How long a dead link may hold a request, and how the keepalive probes find an idle one.
/// Each is set within what the socket takes: a value past it is set as the nearest one that
/// is (a user timeout of 1 ms to [`USER_TIMEOUT_MAX`], an interval of 1 s to
/// [`KEEPALIVE_MAX`], 1 to [`KEEPALIVE_PROBES_MAX`] probes).
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

/// The longest keepalive time — idle before the first probe, or between probes — a TCP
/// socket takes (Linux's bound, the strictest of the systems the family runs on); the
/// shortest is one second, and both are whole seconds. A backend refuses a setting outside
/// them by its key: the socket would refuse it, and every connect fail.
pub const KEEPALIVE_MAX: Duration = Duration::from_secs(32_767);

/// The most keepalive probes a TCP socket takes (Linux's bound); the fewest is one.
pub const KEEPALIVE_PROBES_MAX: u32 = 127;

/// The longest `TCP_USER_TIMEOUT` a socket takes: 2³¹ − 1 ms (about 24.8 days).
pub const USER_TIMEOUT_MAX: Duration = Duration::from_millis(i32::MAX as u64);

/// The liveness settings a client library puts on a link's socket, to check against what
/// the socket takes before a connect ([`LinkSettings::refused`]): a value outside it fails
/// every connect with "Invalid argument", naming no setting. `None`: not set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkSettings {
    /// Idle time before the first keepalive probe.
    pub keepalive_idle: Option<Duration>,
    /// Time between keepalive probes.
    pub keepalive_interval: Option<Duration>,
    /// Unanswered probes that end the link.
    pub keepalive_probes: Option<u32>,
    /// `TCP_USER_TIMEOUT` (zero: the kernel's own).
    pub user_timeout: Option<Duration>,
}

/// Which of a link's settings the socket would refuse, with what it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refused {
    /// [`LinkSettings::keepalive_idle`].
    KeepaliveIdle,
    /// [`LinkSettings::keepalive_interval`].
    KeepaliveInterval,
    /// [`LinkSettings::keepalive_probes`].
    KeepaliveProbes,
    /// [`LinkSettings::user_timeout`].
    UserTimeout,
}

impl Refused {
    /// What the setting must be, as a phrase (`"must be 1 to 32767 whole seconds"`).
    #[must_use]
    pub fn must(self) -> &'static str {
        match self {
            Refused::KeepaliveIdle | Refused::KeepaliveInterval => {
                "must be 1 to 32767 whole seconds"
            }
            Refused::KeepaliveProbes => "must be 1 to 127",
            Refused::UserTimeout => "must be under 2^31 ms (about 24.8 days)",
        }
    }
}

impl LinkSettings {
    /// The first setting the socket would refuse, if any.
    #[must_use]
    pub fn refused(&self) -> Option<Refused> {
        let seconds = |d: Duration| (1..=KEEPALIVE_MAX.as_secs()).contains(&d.as_secs());
        if self.keepalive_idle.is_some_and(|d| !seconds(d)) {
            Some(Refused::KeepaliveIdle)
        } else if self.keepalive_interval.is_some_and(|d| !seconds(d)) {
            Some(Refused::KeepaliveInterval)
        } else if self
            .keepalive_probes
            .is_some_and(|n| !(1..=KEEPALIVE_PROBES_MAX).contains(&n))
        {
            Some(Refused::KeepaliveProbes)
        } else if self.user_timeout.is_some_and(|d| d > USER_TIMEOUT_MAX) {
            Some(Refused::UserTimeout)
        } else {
            None
        }
    }
}

#[cfg(feature = "links")]
mod opening;
#[cfg(feature = "links")]
#[cfg_attr(docsrs, doc(cfg(feature = "links")))]
pub use opening::Opening;

#[cfg(test)]
mod tests {
    use super::*;

    /// Each setting is refused just past what the socket takes, and kept at its edges.
    #[test]
    fn settings_past_what_the_socket_takes_are_refused_by_name() {
        let one = |f: fn(&mut LinkSettings)| {
            let mut s = LinkSettings::default();
            f(&mut s);
            s.refused()
        };
        assert_eq!(LinkSettings::default().refused(), None);
        for (f, want) in [
            (
                (|s| s.keepalive_idle = Some(Duration::from_millis(999))) as fn(&mut LinkSettings),
                Some(Refused::KeepaliveIdle),
            ),
            (
                |s| s.keepalive_idle = Some(Duration::from_secs(32_768)),
                Some(Refused::KeepaliveIdle),
            ),
            (
                |s| s.keepalive_idle = Some(Duration::MAX),
                Some(Refused::KeepaliveIdle),
            ),
            (
                |s| s.keepalive_interval = Some(Duration::ZERO),
                Some(Refused::KeepaliveInterval),
            ),
            (
                |s| s.keepalive_probes = Some(0),
                Some(Refused::KeepaliveProbes),
            ),
            (
                |s| s.keepalive_probes = Some(128),
                Some(Refused::KeepaliveProbes),
            ),
            (
                |s| s.user_timeout = Some(Duration::MAX),
                Some(Refused::UserTimeout),
            ),
            (
                |s| s.user_timeout = Some(Duration::from_millis(1 << 31)),
                Some(Refused::UserTimeout),
            ),
            (|s| s.keepalive_idle = Some(Duration::from_secs(1)), None),
            (
                |s| s.keepalive_interval = Some(Duration::from_secs(32_767)),
                None,
            ),
            (|s| s.keepalive_probes = Some(127), None),
            (|s| s.user_timeout = Some(Duration::ZERO), None),
            (|s| s.user_timeout = Some(USER_TIMEOUT_MAX), None),
        ] {
            assert_eq!(one(f), want);
        }
    }
}
