//! Connection settings from any serde format (feature `serde`), the way a pools file names
//! them, besides URLs.

use std::time::Duration;

use mysql_async::{Opts, OptsBuilder};

/// Connection settings, read with serde: every field is optional.
///
/// ```toml
/// host = "db.internal"
/// port = 3306
/// user = "app"
/// password = "secret"
/// database = "orders"
/// tcp_keepalive = "30s"
/// setup = ["SET SESSION sql_mode = 'STRICT_ALL_TABLES'"]
/// stmt_cache_size = 64
/// ```
///
/// `url` (`mysql://user:password@host:port/database?…`, as mysql_async reads it) may stand
/// in for the other fields, or give a base they override.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct MysqlSettings {
    /// A connection URL to start from.
    pub url: Option<String>,
    /// A host name or an IP address (default `127.0.0.1`).
    pub host: Option<String>,
    /// The port (default 3306).
    pub port: Option<u16>,
    /// The user.
    pub user: Option<String>,
    /// The password.
    pub password: Option<String>,
    /// The database.
    pub database: Option<String>,
    /// A Unix socket path, used in place of TCP.
    pub socket: Option<String>,
    /// Whether to switch to the server's Unix socket once connected over TCP to a local
    /// server (mysql_async's default: yes).
    pub prefer_socket: Option<bool>,
    /// TCP keepalive time, in pooler's time forms (`"30s"`, `30000`, `[30, "sec"]`).
    #[serde(default, deserialize_with = "pooler::time::option::deserialize")]
    pub tcp_keepalive: Option<Duration>,
    /// `TCP_NODELAY` on the socket (default on).
    pub tcp_nodelay: Option<bool>,
    /// Statements run on every new connection and again after each session reset (the
    /// default recycling), so every user starts from them (mysql_async's `setup`; each must
    /// stand on its own: their order is not promised).
    pub setup: Option<Vec<String>>,
    /// How many prepared statements each connection keeps.
    pub stmt_cache_size: Option<usize>,
    /// The largest packet the client sends, in bytes (by default the server's
    /// `max_allowed_packet`, read at connect).
    pub max_allowed_packet: Option<usize>,
}

impl MysqlSettings {
    /// The mysql_async options these settings describe.
    ///
    /// # Errors
    ///
    /// When `url` cannot be parsed.
    pub fn to_opts(&self) -> Result<Opts, mysql_async::Error> {
        let mut b = match &self.url {
            Some(url) => OptsBuilder::from_opts(Opts::from_url(url)?),
            None => OptsBuilder::default(),
        };
        if let Some(host) = &self.host {
            b = b.ip_or_hostname(host.clone());
        }
        if let Some(port) = self.port {
            b = b.tcp_port(port);
        }
        if self.user.is_some() {
            b = b.user(self.user.clone());
        }
        if self.password.is_some() {
            b = b.pass(self.password.clone());
        }
        if self.database.is_some() {
            b = b.db_name(self.database.clone());
        }
        if self.socket.is_some() {
            b = b.socket(self.socket.clone());
        }
        if let Some(prefer) = self.prefer_socket {
            b = b.prefer_socket(prefer);
        }
        if self.tcp_keepalive.is_some() {
            b = b.tcp_keepalive(self.tcp_keepalive);
        }
        if let Some(nodelay) = self.tcp_nodelay {
            b = b.tcp_nodelay(nodelay);
        }
        if let Some(setup) = &self.setup {
            b = b.setup(setup.clone());
        }
        if let Some(size) = self.stmt_cache_size {
            b = b.stmt_cache_size(size);
        }
        if self.max_allowed_packet.is_some() {
            b = b.max_allowed_packet(self.max_allowed_packet);
        }
        Ok(b.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_override_the_url_and_name_what_mysql_async_reads() {
        let settings: MysqlSettings = toml::from_str(
            r#"
            url = "mysql://root@10.0.0.1:3307/base"
            host = "db.internal"
            user = "app"
            password = "secret"
            database = "orders"
            tcp_keepalive = "30s"
            tcp_nodelay = false
            setup = ["SET SESSION sql_mode = 'STRICT_ALL_TABLES'"]
            stmt_cache_size = 64
            max_allowed_packet = 1048576
            "#,
        )
        .unwrap();
        let opts = settings.to_opts().unwrap();
        assert_eq!(opts.ip_or_hostname(), "db.internal");
        assert_eq!(opts.tcp_port(), 3307, "the URL's port stays");
        assert_eq!(opts.user(), Some("app"));
        assert_eq!(opts.pass(), Some("secret"));
        assert_eq!(opts.db_name(), Some("orders"));
        assert_eq!(opts.tcp_keepalive(), Some(Duration::from_secs(30)));
        assert!(!opts.tcp_nodelay());
        assert_eq!(opts.setup(), ["SET SESSION sql_mode = 'STRICT_ALL_TABLES'"]);
        assert!(
            opts.init().is_empty(),
            "init runs once a connection: not after a reset"
        );
        assert_eq!(opts.stmt_cache_size(), 64);
        assert_eq!(opts.max_allowed_packet(), Some(1_048_576));
    }

    #[test]
    fn an_unknown_key_or_a_bad_value_is_named() {
        let unknown = toml::from_str::<MysqlSettings>("hots = \"x\"").unwrap_err();
        assert!(unknown.to_string().contains("hots"), "{unknown}");
        let bad = toml::from_str::<MysqlSettings>("tcp_keepalive = \"soon\"").unwrap_err();
        assert!(bad.to_string().contains("tcp_keepalive"), "{bad}");
    }
}
