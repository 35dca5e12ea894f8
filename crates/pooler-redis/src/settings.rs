//! Connection settings from any serde format (feature `serde`), the way a pools file names
//! them, besides URLs.

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, ProtocolVersion, RedisResult};

/// Connection settings, read with serde: every field is optional.
///
/// ```toml
/// host = "cache.internal"
/// port = 6379
/// db = 2
/// username = "app"
/// password = "secret"
/// protocol = "resp3"
/// client_name = "orders"
/// ```
///
/// `url` (`redis://…`, `redis+unix://…`) may stand in for the other fields, or give a base
/// they override; `socket` connects over a Unix socket instead of TCP.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RedisSettings {
    /// An address to start from.
    pub url: Option<String>,
    /// A host name or an IP address (default `127.0.0.1`).
    pub host: Option<String>,
    /// The port (default 6379).
    pub port: Option<u16>,
    /// A Unix socket path, in place of `host` and `port`.
    pub socket: Option<String>,
    /// The database number (default 0).
    pub db: Option<i64>,
    /// The ACL user.
    pub username: Option<String>,
    /// The password.
    pub password: Option<String>,
    /// `resp2` (the default) or `resp3`.
    pub protocol: Option<ProtocolName>,
    /// Each connection's name (`CLIENT SETNAME`).
    pub client_name: Option<String>,
}

/// The `protocol` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ProtocolName {
    /// RESP2.
    Resp2,
    /// RESP3.
    Resp3,
}

impl RedisSettings {
    /// The redis-rs connection info these settings describe.
    ///
    /// # Errors
    ///
    /// When `url` cannot be parsed.
    pub fn to_info(&self) -> RedisResult<ConnectionInfo> {
        let base = self.url.as_deref().unwrap_or("redis://127.0.0.1:6379");
        let mut info = base.into_connection_info()?;
        if let Some(socket) = &self.socket {
            info = info.set_addr(ConnectionAddr::Unix(socket.into()));
        } else if self.host.is_some() || self.port.is_some() {
            let (host, port) = match info.addr() {
                ConnectionAddr::Tcp(host, port) => (host.clone(), *port),
                _ => ("127.0.0.1".to_owned(), 6379),
            };
            let host = self.host.clone().unwrap_or(host);
            info = info.set_addr(ConnectionAddr::Tcp(host, self.port.unwrap_or(port)));
        }
        let mut redis = info.redis_settings().clone();
        if let Some(db) = self.db {
            redis = redis.set_db(db);
        }
        if let Some(username) = &self.username {
            redis = redis.set_username(username);
        }
        if let Some(password) = &self.password {
            redis = redis.set_password(password);
        }
        if let Some(protocol) = self.protocol {
            redis = redis.set_protocol(match protocol {
                ProtocolName::Resp2 => ProtocolVersion::RESP2,
                ProtocolName::Resp3 => ProtocolVersion::RESP3,
            });
        }
        Ok(info.set_redis_settings(redis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_override_the_url() {
        let settings: RedisSettings = toml::from_str(
            r#"
            url = "redis://10.0.0.1:6380/1"
            host = "cache.internal"
            db = 2
            username = "app"
            password = "secret"
            protocol = "resp3"
            "#,
        )
        .unwrap();
        let info = settings.to_info().unwrap();
        assert_eq!(
            info.addr(),
            &ConnectionAddr::Tcp("cache.internal".into(), 6380),
            "the URL's port stays"
        );
        let redis = info.redis_settings();
        assert_eq!(redis.db(), 2);
        assert_eq!(redis.username(), Some("app"));
        assert_eq!(redis.password(), Some("secret"));
        assert_eq!(redis.protocol(), ProtocolVersion::RESP3);
    }

    #[test]
    fn nothing_set_is_the_local_default_and_bad_keys_are_named() {
        let info = RedisSettings::default().to_info().unwrap();
        assert_eq!(info.addr(), &ConnectionAddr::Tcp("127.0.0.1".into(), 6379));
        let e = toml::from_str::<RedisSettings>("protocol = \"resp4\"").unwrap_err();
        assert!(e.to_string().contains("resp4"), "{e}");
        let e = toml::from_str::<RedisSettings>("hots = \"x\"").unwrap_err();
        assert!(e.to_string().contains("hots"), "{e}");
    }
}
