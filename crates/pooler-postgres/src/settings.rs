//! Connection settings from any serde format (feature `serde`), the way a pools file names
//! them, besides URLs.

use std::time::Duration;

use tokio_postgres::Config;
use tokio_postgres::config::SslMode;

/// Connection settings, read with serde: every field is optional, as in a connection string.
///
/// ```toml
/// host = "db.internal"
/// port = 5432
/// dbname = "app"
/// user = "app"
/// password = "secret"
/// sslmode = "require"
/// application_name = "orders"
/// connect_timeout = "5s"
/// ```
///
/// `url` may stand in for the other fields, or give a base they override.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PgSettings {
    /// A connection string to start from (`postgres://…` or `key=value …`).
    pub url: Option<String>,
    /// A host name, an IP address, or a Unix socket directory (a path starting with `/`).
    pub host: Option<String>,
    /// The port (default 5432).
    pub port: Option<u16>,
    /// The database.
    pub dbname: Option<String>,
    /// The user.
    pub user: Option<String>,
    /// The password.
    pub password: Option<String>,
    /// `disable`, `prefer` (the default) or `require`.
    pub sslmode: Option<SslModeName>,
    /// Shown in `pg_stat_activity`.
    pub application_name: Option<String>,
    /// How long opening the socket may take, in pooler's time forms (`"5s"`, `5000`, `[5, "sec"]`).
    #[serde(default, deserialize_with = "pooler::time::option::deserialize")]
    pub connect_timeout: Option<Duration>,
}

/// The `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum SslModeName {
    /// Never TLS.
    Disable,
    /// TLS if the server and the connector can (the default).
    Prefer,
    /// TLS or no connection.
    Require,
}

impl PgSettings {
    /// The tokio-postgres config these settings describe.
    ///
    /// # Errors
    ///
    /// When `url` cannot be parsed.
    pub fn to_config(&self) -> Result<Config, tokio_postgres::Error> {
        let mut config = match &self.url {
            Some(url) => url.parse()?,
            None => Config::new(),
        };
        if let Some(host) = &self.host {
            config.host(host);
        }
        if let Some(port) = self.port {
            config.port(port);
        }
        if let Some(dbname) = &self.dbname {
            config.dbname(dbname);
        }
        if let Some(user) = &self.user {
            config.user(user);
        }
        if let Some(password) = &self.password {
            config.password(password);
        }
        if let Some(mode) = self.sslmode {
            config.ssl_mode(match mode {
                SslModeName::Disable => SslMode::Disable,
                SslModeName::Prefer => SslMode::Prefer,
                SslModeName::Require => SslMode::Require,
            });
        }
        if let Some(name) = &self.application_name {
            config.application_name(name);
        }
        if let Some(timeout) = self.connect_timeout {
            config.connect_timeout(timeout);
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_reaches_the_config() {
        let settings: PgSettings = toml::from_str(
            r#"
            host = "db.internal"
            port = 6543
            dbname = "app"
            user = "me"
            password = "secret"
            sslmode = "require"
            application_name = "orders"
            connect_timeout = [5, "sec"]
            "#,
        )
        .unwrap();
        let config = settings.to_config().unwrap();
        assert_eq!(
            config.get_hosts(),
            [tokio_postgres::config::Host::Tcp("db.internal".into())]
        );
        assert_eq!(config.get_ports(), [6543]);
        assert_eq!(config.get_dbname(), Some("app"));
        assert_eq!(config.get_user(), Some("me"));
        assert_eq!(config.get_password(), Some(&b"secret"[..]));
        assert_eq!(config.get_ssl_mode(), SslMode::Require);
        assert_eq!(config.get_application_name(), Some("orders"));
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(5)));
    }

    #[test]
    fn a_url_is_a_base_the_fields_override() {
        let settings: PgSettings =
            toml::from_str("url = \"postgres://a@h1:5433/x\"\ndbname = \"y\"").unwrap();
        let config = settings.to_config().unwrap();
        assert_eq!(
            (config.get_user(), config.get_dbname(), config.get_ports()),
            (Some("a"), Some("y"), &[5433][..])
        );
    }

    #[test]
    fn an_unknown_key_or_a_bad_value_is_named() {
        let e = toml::from_str::<PgSettings>("hostname = \"x\"").unwrap_err();
        assert!(e.to_string().contains("hostname"), "{e}");
        let e = toml::from_str::<PgSettings>("sslmode = \"maybe\"").unwrap_err();
        assert!(e.to_string().contains("maybe"), "{e}");
        let e = toml::from_str::<PgSettings>("connect_timeout = \"soon\"").unwrap_err();
        assert!(e.to_string().contains("soon"), "{e}");
    }
}
