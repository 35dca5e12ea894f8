//! The socket options that find a dead link (docs/design.md, "Real networks").

use std::time::Duration;

use crate::PgError;

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

    /// What `config` asks for, or the key of a value the socket would refuse
    /// (`pooler::links::LinkSettings`), which would fail every connect with "Invalid
    /// argument".
    pub(crate) fn of(config: &tokio_postgres::Config) -> Result<Self, PgError> {
        let idle = match config.get_keepalives_idle() {
            KERNEL_IDLE => Self::IDLE,
            idle => idle,
        };
        let live = Liveness {
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
        };
        let settings = pooler::links::LinkSettings {
            keepalive_idle: live.keepalive.map(|(idle, ..)| idle),
            keepalive_interval: live.keepalive.map(|(_, interval, _)| interval),
            keepalive_probes: live.keepalive.map(|(.., retries)| retries),
            user_timeout: Some(live.user_timeout),
        };
        if let Some(refused) = settings.refused() {
            use pooler::links::Refused;
            let key = match refused {
                Refused::KeepaliveIdle => "keepalives_idle",
                Refused::KeepaliveInterval => "keepalives_interval",
                Refused::KeepaliveProbes => "keepalives_retries",
                _ => "tcp_user_timeout",
            };
            return Err(PgError::Setting {
                key,
                reason: refused.must(),
            });
        }
        Ok(live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_link_is_found_within_30_s_by_default_and_the_config_is_kept_where_it_speaks() {
        let plain: tokio_postgres::Config = "postgres://u@h/db".parse().unwrap();
        let live = Liveness::of(&plain).unwrap();
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
            Liveness::of(&set).unwrap(),
            Liveness {
                user_timeout: Duration::from_secs(5),
                keepalive: Some((Duration::from_secs(60), Duration::from_secs(2), 9)),
            }
        );
        let off: tokio_postgres::Config = "postgres://u@h/db?keepalives=0".parse().unwrap();
        assert_eq!(Liveness::of(&off).unwrap().keepalive, None);
        assert_eq!(
            Liveness::of(&off).unwrap().user_timeout,
            Duration::from_secs(30)
        );
    }

    /// A value the socket would refuse — every connect then failing with "Invalid argument"
    /// and no key named — is refused by its key (in a URL, tokio-postgres reads times in
    /// seconds); the edges the socket takes are kept. The bounds themselves are
    /// `pooler::links`'s, tested there.
    #[test]
    fn a_value_the_socket_refuses_is_named_by_its_key() {
        let of = |query: &str| {
            let config: tokio_postgres::Config =
                format!("postgres://u@h/db?{query}").parse().unwrap();
            Liveness::of(&config)
        };
        for (query, key) in [
            ("keepalives_idle=32768", "keepalives_idle"),
            ("keepalives_interval=40000", "keepalives_interval"),
            ("keepalives_retries=128", "keepalives_retries"),
            ("tcp_user_timeout=2147484", "tcp_user_timeout"),
        ] {
            match of(query) {
                Err(PgError::Setting { key: named, .. }) => assert_eq!(named, key),
                other => panic!("{query}: {other:?}"),
            }
        }
        let edges = "keepalives_idle=32767&keepalives_interval=1&keepalives_retries=127\
                     &tcp_user_timeout=2147483";
        assert!(of(edges).is_ok());
        assert!(
            of("keepalives=0&keepalives_idle=40000").is_ok(),
            "keepalives off: their values are never used"
        );
    }
}
