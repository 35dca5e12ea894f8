//! Connection settings from any serde format (feature `serde`), the way a pools file names
//! them, besides URLs.

use std::time::Duration;

use tokio_postgres::Config;
use tokio_postgres::config::{Host, SslMode};

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
/// `url` may stand in for the other fields, or give a base they override (`host` and `port`
/// replace the URL's hosts and ports; its other settings stay).
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
        let base: Config = match &self.url {
            Some(url) => url.parse()?,
            None => Config::new(),
        };
        // tokio-postgres only adds to a config's hosts and ports: to replace the URL's, start
        // again from its other settings.
        let mut config = if self.host.is_none() && self.port.is_none() {
            base
        } else {
            let mut config = without_addresses(&base);
            match &self.host {
                Some(host) => {
                    config.host(host);
                }
                None => {
                    for host in base.get_hosts() {
                        match host {
                            Host::Tcp(name) => config.host(name),
                            #[cfg(unix)]
                            Host::Unix(dir) => config.host_path(dir),
                        };
                    }
                    for &addr in base.get_hostaddrs() {
                        config.hostaddr(addr);
                    }
                }
            }
            match self.port {
                Some(port) => {
                    config.port(port);
                }
                None => {
                    for &port in base.get_ports() {
                        config.port(port);
                    }
                }
            }
            config
        };
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

/// Every setting of `base` but its hosts, host addresses and ports.
fn without_addresses(base: &Config) -> Config {
    let mut config = Config::new();
    if let Some(user) = base.get_user() {
        config.user(user);
    }
    if let Some(password) = base.get_password() {
        config.password(password);
    }
    if let Some(dbname) = base.get_dbname() {
        config.dbname(dbname);
    }
    if let Some(options) = base.get_options() {
        config.options(options);
    }
    if let Some(name) = base.get_application_name() {
        config.application_name(name);
    }
    if let Some(&timeout) = base.get_connect_timeout() {
        config.connect_timeout(timeout);
    }
    if let Some(&timeout) = base.get_tcp_user_timeout() {
        config.tcp_user_timeout(timeout);
    }
    if let Some(interval) = base.get_keepalives_interval() {
        config.keepalives_interval(interval);
    }
    if let Some(retries) = base.get_keepalives_retries() {
        config.keepalives_retries(retries);
    }
    config
        .ssl_mode(base.get_ssl_mode())
        .ssl_negotiation(base.get_ssl_negotiation())
        .keepalives(base.get_keepalives())
        .keepalives_idle(base.get_keepalives_idle())
        .target_session_attrs(base.get_target_session_attrs())
        .channel_binding(base.get_channel_binding())
        .load_balance_hosts(base.get_load_balance_hosts());
    config
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
    fn host_and_port_replace_the_urls_and_keep_its_other_settings() {
        let url = "postgres://a:pw@h1:5433/x?application_name=z&sslmode=require\
                   &connect_timeout=3&keepalives_idle=30&target_session_attrs=read-write\
                   &options=-c%20search_path%3Ds";
        let read = |extra: &str| {
            toml::from_str::<PgSettings>(&format!("url = \"{url}\"\n{extra}"))
                .unwrap()
                .to_config()
                .unwrap()
        };
        let base: Config = url.parse().unwrap();
        // The same host and port given again: nothing else may change or be lost.
        assert_eq!(
            format!("{:?}", read("host = \"h1\"\nport = 5433")),
            format!("{base:?}")
        );
        let host = read("host = \"h2\"");
        assert_eq!(host.get_hosts(), [Host::Tcp("h2".into())]);
        assert_eq!(host.get_ports(), [5433]);
        assert_eq!(host.get_application_name(), Some("z"));
        let port = read("port = 6000");
        assert_eq!(port.get_hosts(), [Host::Tcp("h1".into())]);
        assert_eq!(port.get_ports(), [6000]);
        assert_eq!(port.get_user(), Some("a"));
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
