//! The socket options that find a dead link (docs/design.md, "Real networks").

use std::time::Duration;

/// How a dead link is found on a connection's socket (docs/design.md, "Real networks"): the
/// config's own `tcp_user_timeout` and keepalive settings where it sets them, and otherwise
/// defaults that bound detection to about 30 s — where tokio-postgres's would leave the
/// kernel's (keepalives after 2 hours idle, no user timeout: ~15 minutes of retransmissions
/// for a request sent into a silent blackhole).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Liveness {
    /// Data written and unacknowledged this long ends the connection (Linux).
    pub(crate) user_timeout: Duration,
    /// Keepalives: idle time before the first, the time between them, and how many go
    /// unanswered before the connection ends; `None` with `keepalives=0`.
    pub(crate) keepalive: Option<(Duration, Duration, u32)>,
}

/// tokio-postgres's default `keepalives_idle`: a config that reads this did not set it.
const KERNEL_IDLE: Duration = Duration::from_secs(2 * 60 * 60);

impl Liveness {
    /// The defaults: a user timeout of 30 s; keepalives after 10 s idle, every 5 s, 4 lost
    /// (an idle link found dead within 10 + 4 × 5 = 30 s).
    pub(crate) const USER_TIMEOUT: Duration = Duration::from_secs(30);
    pub(crate) const IDLE: Duration = Duration::from_secs(10);
    pub(crate) const INTERVAL: Duration = Duration::from_secs(5);
    pub(crate) const RETRIES: u32 = 4;

    pub(crate) fn of(config: &tokio_postgres::Config) -> Self {
        let idle = match config.get_keepalives_idle() {
            KERNEL_IDLE => Self::IDLE,
            idle => idle,
        };
        Liveness {
            user_timeout: config
                .get_tcp_user_timeout()
                .copied()
                .unwrap_or(Self::USER_TIMEOUT),
            keepalive: config.get_keepalives().then(|| {
                (
                    idle,
                    config.get_keepalives_interval().unwrap_or(Self::INTERVAL),
                    config.get_keepalives_retries().unwrap_or(Self::RETRIES),
                )
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_link_is_found_within_30_s_by_default_and_the_config_is_kept_where_it_speaks() {
        let plain: tokio_postgres::Config = "postgres://u@h/db".parse().unwrap();
        let live = Liveness::of(&plain);
        assert_eq!(
            live,
            Liveness {
                user_timeout: Duration::from_secs(30),
                keepalive: Some((Duration::from_secs(10), Duration::from_secs(5), 4)),
            }
        );
        let (idle, interval, retries) = live.keepalive.unwrap();
        assert!(idle + interval * retries <= Duration::from_secs(30));
        let set: tokio_postgres::Config = "postgres://u@h/db?tcp_user_timeout=5\
            &keepalives_idle=60&keepalives_interval=2&keepalives_retries=9"
            .parse()
            .unwrap();
        assert_eq!(
            Liveness::of(&set),
            Liveness {
                user_timeout: Duration::from_secs(5),
                keepalive: Some((Duration::from_secs(60), Duration::from_secs(2), 9)),
            }
        );
        let off: tokio_postgres::Config = "postgres://u@h/db?keepalives=0".parse().unwrap();
        assert_eq!(Liveness::of(&off).keepalive, None);
        assert_eq!(Liveness::of(&off).user_timeout, Duration::from_secs(30));
    }
}
