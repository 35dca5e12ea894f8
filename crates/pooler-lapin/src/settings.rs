//! Connection settings from any serde format (feature `serde`), the way a pools file names
//! them, besides URIs.

use std::time::Duration;

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

/// Connection settings, read with serde: every field is optional.
///
/// ```toml
/// host = "mq.internal"
/// port = 5672
/// vhost = "/orders"
/// user = "app"
/// password = "secret"
/// heartbeat = "30s"
/// connection_timeout = "5s"
/// connection_name = "orders"
/// tls = true
/// ```
///
/// `url` (`amqp://user:password@host:port/vhost`) may stand in for the other fields; given
/// with them, it is an error to name what the URL already holds differently (the fields
/// build the URI lapin reads, so use one or the other).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct AmqpSettings {
    /// A URI to use as it is (no other address field may be given with it).
    pub url: Option<String>,
    /// A host name or an IP address (default `127.0.0.1`).
    pub host: Option<String>,
    /// The port (default 5672, or 5671 with `tls`).
    pub port: Option<u16>,
    /// Whether to connect with TLS (`amqps://`; default false). The broker's certificate is
    /// verified against the system's roots, or those given to
    /// [`AmqpManager::tls`](crate::AmqpManager::tls); a TLS library must be on (this crate's
    /// `rustls` feature).
    pub tls: Option<bool>,
    /// The virtual host (default `/`).
    pub vhost: Option<String>,
    /// The user (default `guest`).
    pub user: Option<String>,
    /// The password (default `guest`).
    pub password: Option<String>,
    /// The heartbeat the client asks for, in pooler's time forms (whole seconds on the
    /// wire, at most 65 535).
    #[serde(default, deserialize_with = "pooler::time::option::deserialize")]
    pub heartbeat: Option<Duration>,
    /// How long connecting may take, in pooler's time forms (whole milliseconds on the
    /// wire, rounded up; zero is none).
    #[serde(default, deserialize_with = "pooler::time::option::deserialize")]
    pub connection_timeout: Option<Duration>,
    /// The most channels the connection may open.
    pub channel_max: Option<u16>,
    /// The largest frame, in bytes: 0 (no limit) or at least 4 096.
    pub frame_max: Option<u32>,
    /// The connection's name, as the broker's management UI shows it.
    pub connection_name: Option<String>,
}

/// Settings that cannot make a URI: the key at fault and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsError {
    /// The field at fault.
    pub key: &'static str,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl std::fmt::Display for SettingsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AMQP settings: `{}` {}", self.key, self.reason)
    }
}

impl std::error::Error for SettingsError {}

impl AmqpSettings {
    /// The AMQP URI these settings describe.
    ///
    /// # Errors
    ///
    /// [`SettingsError`] when `url` is given with an address field, or `heartbeat` is not a
    /// whole number of seconds (the wire's unit: a heartbeat of 0 turns heartbeats off).
    pub fn to_uri(&self) -> Result<String, SettingsError> {
        let address = [
            ("host", self.host.is_some()),
            ("port", self.port.is_some()),
            ("tls", self.tls.is_some()),
            ("vhost", self.vhost.is_some()),
            ("user", self.user.is_some()),
            ("password", self.password.is_some()),
        ];
        let mut uri = match &self.url {
            Some(url) => {
                if let Some((key, _)) = address.iter().find(|(_, given)| *given) {
                    return Err(SettingsError {
                        key,
                        reason: "is given with `url`: name the address once",
                    });
                }
                if crate::frame_too_small(url) {
                    return Err(SettingsError {
                        key: "url",
                        reason: "asks for a frame_max under 4096 bytes, the protocol's \
                                 smallest frame (0 is no limit)",
                    });
                }
                url.clone()
            }
            None => {
                let enc = |s: &str| utf8_percent_encode(s, NON_ALPHANUMERIC).to_string();
                let tls = self.tls == Some(true);
                format!(
                    "{}://{}:{}@{}:{}/{}",
                    if tls { "amqps" } else { "amqp" },
                    enc(self.user.as_deref().unwrap_or("guest")),
                    enc(self.password.as_deref().unwrap_or("guest")),
                    self.host.as_deref().unwrap_or("127.0.0.1"),
                    self.port.unwrap_or(if tls { 5671 } else { 5672 }),
                    enc(self.vhost.as_deref().unwrap_or("/")),
                )
            }
        };
        let mut query = Vec::new();
        if let Some(h) = self.heartbeat {
            if h.subsec_nanos() != 0 {
                return Err(SettingsError {
                    key: "heartbeat",
                    reason: "must be whole seconds (\"30s\"; a bare number is milliseconds)",
                });
            }
            if h.as_secs() > u64::from(u16::MAX) {
                return Err(SettingsError {
                    key: "heartbeat",
                    reason: "must be at most 65535s (the protocol carries 16 bits of seconds)",
                });
            }
            query.push(format!("heartbeat={}", h.as_secs()));
        }
        // Milliseconds, rounded up (1 ns is 1 ms, not 0); past `u64` the longest the URI
        // carries; zero, which the socket refuses as a timeout, none.
        if let Some(t) = self.connection_timeout.filter(|t| !t.is_zero()) {
            let ms = u64::try_from(t.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
            query.push(format!("connection_timeout={ms}"));
        }
        if let Some(n) = self.channel_max {
            query.push(format!("channel_max={n}"));
        }
        if let Some(n) = self.frame_max {
            if (1..crate::FRAME_MIN).contains(&n) {
                return Err(SettingsError {
                    key: "frame_max",
                    reason: crate::FRAME_TOO_SMALL,
                });
            }
            query.push(format!("frame_max={n}"));
        }
        if !query.is_empty() {
            uri.push(if uri.contains('?') { '&' } else { '?' });
            uri.push_str(&query.join("&"));
        }
        Ok(uri)
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use lapin::uri::AMQPUri;

    use super::*;

    #[test]
    fn the_fields_make_the_uri_lapin_reads() {
        let settings: AmqpSettings = toml::from_str(
            r#"
            host = "mq.internal"
            port = 5673
            vhost = "/orders"
            user = "app"
            password = "p@ss:word"
            heartbeat = "30s"
            connection_timeout = "5s"
            channel_max = 64
            frame_max = 131072
            "#,
        )
        .unwrap();
        let uri = AMQPUri::from_str(&settings.to_uri().unwrap()).unwrap();
        assert_eq!(uri.authority.host, "mq.internal");
        assert_eq!(uri.authority.port, 5673);
        assert_eq!(uri.authority.userinfo.username, "app");
        assert_eq!(uri.authority.userinfo.password, "p@ss:word");
        assert_eq!(uri.vhost, "/orders");
        assert_eq!(uri.query.heartbeat, Some(30));
        assert_eq!(uri.query.connection_timeout, Some(5000));
        assert_eq!(uri.query.channel_max, Some(64));
        assert_eq!(uri.query.frame_max, Some(131_072));
    }

    #[test]
    fn tls_makes_an_amqps_uri_on_the_tls_port() {
        let settings: AmqpSettings = toml::from_str("tls = true\nhost = \"mq\"").unwrap();
        let uri = AMQPUri::from_str(&settings.to_uri().unwrap()).unwrap();
        assert_eq!(uri.scheme, lapin::uri::AMQPScheme::AMQPS);
        assert_eq!(uri.authority.port, 5671);
        let settings: AmqpSettings = toml::from_str("tls = true\nport = 5679").unwrap();
        assert!(settings.to_uri().unwrap().starts_with("amqps://"));
        assert!(settings.to_uri().unwrap().contains(":5679/"));
        let settings: AmqpSettings = toml::from_str("tls = false").unwrap();
        assert!(settings.to_uri().unwrap().starts_with("amqp://"));
        assert!(settings.to_uri().unwrap().contains(":5672/"));
        let settings: AmqpSettings =
            toml::from_str("url = \"amqp://localhost\"\ntls = true").unwrap();
        assert_eq!(settings.to_uri().unwrap_err().key, "tls");
    }

    #[test]
    fn a_url_with_an_address_field_is_refused_by_name() {
        let settings: AmqpSettings =
            toml::from_str("url = \"amqp://localhost\"\nhost = \"other\"").unwrap();
        assert_eq!(settings.to_uri().unwrap_err().key, "host");
        let settings: AmqpSettings =
            toml::from_str("url = \"amqp://localhost/%2f\"\nheartbeat = \"10s\"").unwrap();
        assert_eq!(
            settings.to_uri().unwrap(),
            "amqp://localhost/%2f?heartbeat=10"
        );
        // A bare number is milliseconds: 10 ms would be sent as 0, which turns heartbeats off.
        let settings: AmqpSettings = toml::from_str("heartbeat = 10").unwrap();
        assert_eq!(settings.to_uri().unwrap_err().key, "heartbeat");
    }

    /// Every duration makes a URI lapin reads, or an error naming its key: the protocol
    /// carries a heartbeat of at most 65 535 s; a connect timeout past what the URI can
    /// carry (`u64` milliseconds) is the longest it can, and zero, which the socket refuses,
    /// none.
    #[test]
    fn every_duration_makes_a_uri_lapin_reads_or_names_its_key() {
        let with = |heartbeat, connection_timeout| {
            let settings = AmqpSettings {
                heartbeat,
                connection_timeout,
                ..AmqpSettings::default()
            };
            settings.to_uri().map(|uri| AMQPUri::from_str(&uri))
        };
        let read = |h, t| with(h, t).unwrap().unwrap();
        let secs = Duration::from_secs;
        assert_eq!(read(Some(secs(65_535)), None).query.heartbeat, Some(65_535));
        assert_eq!(read(Some(Duration::ZERO), None).query.heartbeat, Some(0));
        for h in [secs(65_536), secs(u64::MAX)] {
            assert_eq!(with(Some(h), None).unwrap_err().key, "heartbeat", "{h:?}");
        }
        assert_eq!(
            read(None, Some(Duration::MAX)).query.connection_timeout,
            Some(u64::MAX)
        );
        assert_eq!(
            read(None, Some(Duration::from_nanos(1)))
                .query
                .connection_timeout,
            Some(1),
            "under a millisecond: one, not zero"
        );
        assert_eq!(
            read(None, Some(Duration::ZERO)).query.connection_timeout,
            None
        );
    }

    /// A frame under the protocol's minimum (4 096 bytes) fails every connect ("frame too
    /// large: 504 bytes", from the broker): refused by its key. Zero is "no limit".
    #[test]
    fn a_frame_under_the_protocols_minimum_is_refused_by_its_key() {
        let with = |frame_max| AmqpSettings {
            frame_max: Some(frame_max),
            ..AmqpSettings::default()
        };
        for small in [1, 100, 4095] {
            assert_eq!(
                with(small).to_uri().unwrap_err().key,
                "frame_max",
                "{small}"
            );
        }
        for taken in [0, 4096, u32::MAX] {
            let uri = AMQPUri::from_str(&with(taken).to_uri().unwrap()).unwrap();
            assert_eq!(uri.query.frame_max, Some(taken));
        }
        // The same in a `url` given whole.
        let url = |query: &str| AmqpSettings {
            url: Some(format!("amqp://h/%2f?{query}")),
            ..AmqpSettings::default()
        };
        for small in ["frame_max=1", "heartbeat=5&frame_max=4095"] {
            assert_eq!(url(small).to_uri().unwrap_err().key, "url", "{small}");
        }
        for taken in ["frame_max=0", "frame_max=4096", "channel_max=1"] {
            assert!(url(taken).to_uri().is_ok(), "{taken}");
        }
    }
}
