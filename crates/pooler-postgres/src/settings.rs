//! Connection settings from any serde format (feature `serde`), the way a pools file names
//! them, besides URLs.

use std::time::Duration;

use tokio_postgres::Config;

use crate::hosts::SessionTarget;
use tokio_postgres::config::{ChannelBinding, Host, LoadBalanceHosts, SslMode, TargetSessionAttrs};

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
/// `url` may stand in for the other fields, or give a base they override (`host`, `port` and
/// `ports` replace the URL's hosts and ports; its other settings stay). As in libpq, `host`
/// may list several hosts, comma-separated, tried in turn (`load_balance_hosts = "random"`
/// shuffles them); `ports` gives one port a host, `port` one for all.
///
/// ```toml
/// host = "pg-a.internal,pg-b.internal"
/// ports = [5432, 5433]
/// target_session_attrs = "read-write"
/// load_balance_hosts = "random"
/// options = "-c statement_timeout=5000"
/// keepalives_idle = "30s"
/// channel_binding = "require"
/// ```
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
    /// One port a host, in the order of `host` (in place of `port`).
    pub ports: Option<Vec<u16>>,
    /// Command-line options sent to the server at startup (`-c name=value …`).
    pub options: Option<String>,
    /// Which kind of server to accept among the hosts: `any` (the default), `read-write`,
    /// `read-only`, `primary`, `standby` or `prefer-standby` (see [`SessionTarget`]).
    pub target_session_attrs: Option<SessionTarget>,
    /// The order hosts are tried in: `disable` (as listed, the default) or `random`.
    pub load_balance_hosts: Option<LoadBalanceName>,
    /// SCRAM channel binding: `disable`, `prefer` (the default) or `require`.
    pub channel_binding: Option<ChannelBindingName>,
    /// TCP keepalives on the connection's socket (default on: after 10 s idle, every 5 s, 4
    /// unanswered end the connection, so an idle dead link is found within 30 s).
    pub keepalives: Option<bool>,
    /// Idle time before the first keepalive (default 10 s), in pooler's time forms.
    #[serde(default, deserialize_with = "pooler::time::option::deserialize")]
    pub keepalives_idle: Option<Duration>,
    /// Time between keepalives (default 5 s), in pooler's time forms.
    #[serde(default, deserialize_with = "pooler::time::option::deserialize")]
    pub keepalives_interval: Option<Duration>,
    /// Keepalives unanswered before the connection is dropped (default 4).
    pub keepalives_retries: Option<u32>,
    /// How long sent data may stay unacknowledged before the connection is dropped (Linux's
    /// `TCP_USER_TIMEOUT`; default 30 s), in pooler's time forms.
    #[serde(default, deserialize_with = "pooler::time::option::deserialize")]
    pub tcp_user_timeout: Option<Duration>,
}

/// The `load_balance_hosts` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum LoadBalanceName {
    /// The hosts in the order listed.
    Disable,
    /// The hosts in a random order, for each connection.
    Random,
}

/// The `channel_binding` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ChannelBindingName {
    /// Never bind.
    Disable,
    /// Bind when the server and TLS allow.
    Prefer,
    /// Bind or no connection.
    Require,
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
            Some(url) => crate::hosts::split_target(url).0.parse()?,
            None => Config::new(),
        };
        // tokio-postgres only adds to a config's hosts and ports: to replace the URL's, start
        // again from its other settings.
        let mut config = if self.host.is_none() && self.port.is_none() && self.ports.is_none() {
            base
        } else {
            let mut config = without_addresses(&base);
            match &self.host {
                Some(hosts) => {
                    for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
                        config.host(host);
                    }
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
            match (&self.ports, self.port) {
                (Some(ports), _) => {
                    for &port in ports {
                        config.port(port);
                    }
                }
                (None, Some(port)) => {
                    config.port(port);
                }
                (None, None) => {
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
        if let Some(options) = &self.options {
            config.options(options);
        }
        if let Some(target) = self.target_session_attrs {
            // tokio-postgres's config knows two of the kinds; the manager keeps the others
            // (`PgManager::from_settings`).
            config.target_session_attrs(match target {
                SessionTarget::ReadWrite => TargetSessionAttrs::ReadWrite,
                SessionTarget::ReadOnly => TargetSessionAttrs::ReadOnly,
                _ => TargetSessionAttrs::Any,
            });
        }
        if let Some(order) = self.load_balance_hosts {
            config.load_balance_hosts(match order {
                LoadBalanceName::Disable => LoadBalanceHosts::Disable,
                LoadBalanceName::Random => LoadBalanceHosts::Random,
            });
        }
        if let Some(binding) = self.channel_binding {
            config.channel_binding(match binding {
                ChannelBindingName::Disable => ChannelBinding::Disable,
                ChannelBindingName::Prefer => ChannelBinding::Prefer,
                ChannelBindingName::Require => ChannelBinding::Require,
            });
        }
        if let Some(on) = self.keepalives {
            config.keepalives(on);
        }
        if let Some(idle) = self.keepalives_idle {
            config.keepalives_idle(idle);
        }
        if let Some(interval) = self.keepalives_interval {
            config.keepalives_interval(interval);
        }
        if let Some(retries) = self.keepalives_retries {
            config.keepalives_retries(retries);
        }
        if let Some(timeout) = self.tcp_user_timeout {
            config.tcp_user_timeout(timeout);
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
    fn the_keys_a_deadpool_config_has_reach_the_config_too() {
        let settings: PgSettings = toml::from_str(
            r#"
            host = "pg-a, pg-b"
            ports = [5432, 5433]
            options = "-c statement_timeout=5000"
            target_session_attrs = "read-write"
            load_balance_hosts = "random"
            channel_binding = "require"
            keepalives = false
            keepalives_idle = "30s"
            keepalives_interval = "5s"
            keepalives_retries = 4
            tcp_user_timeout = "10s"
            "#,
        )
        .unwrap();
        let config = settings.to_config().unwrap();
        assert_eq!(
            config.get_hosts(),
            [Host::Tcp("pg-a".into()), Host::Tcp("pg-b".into())]
        );
        assert_eq!(config.get_ports(), [5432, 5433]);
        assert_eq!(config.get_options(), Some("-c statement_timeout=5000"));
        assert_eq!(
            config.get_target_session_attrs(),
            TargetSessionAttrs::ReadWrite
        );
        assert_eq!(config.get_load_balance_hosts(), LoadBalanceHosts::Random);
        assert_eq!(config.get_channel_binding(), ChannelBinding::Require);
        assert!(!config.get_keepalives());
        assert_eq!(config.get_keepalives_idle(), Duration::from_secs(30));
        assert_eq!(
            config.get_keepalives_interval(),
            Some(Duration::from_secs(5))
        );
        assert_eq!(config.get_keepalives_retries(), Some(4));
        assert_eq!(
            config.get_tcp_user_timeout(),
            Some(&Duration::from_secs(10))
        );
        let e = toml::from_str::<PgSettings>("target_session_attrs = \"primary-ish\"").unwrap_err();
        assert!(e.to_string().contains("primary-ish"), "{e}");
    }

    #[test]
    fn every_kind_of_session_reaches_the_manager() {
        use crate::PgManager;
        for (settings, target) in [
            (
                "target_session_attrs = \"prefer-standby\"",
                SessionTarget::PreferStandby,
            ),
            (
                "target_session_attrs = \"read-write\"",
                SessionTarget::ReadWrite,
            ),
            (
                "url = \"postgres://h/db?target_session_attrs=standby\"",
                SessionTarget::Standby,
            ),
            (
                "url = \"postgres://h/db?target_session_attrs=standby\"\ntarget_session_attrs = \"primary\"",
                SessionTarget::Primary,
            ),
            ("host = \"h\"", SessionTarget::Any),
        ] {
            let settings: PgSettings = toml::from_str(settings).unwrap();
            let manager = PgManager::from_settings(&settings).unwrap();
            assert_eq!(manager.session_target(), target, "{settings:?}");
        }
        let manager = PgManager::new("host=a,b target_session_attrs=standby").unwrap();
        assert_eq!(manager.session_target(), SessionTarget::Standby);
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
