//! The connection kinds a pool holds (`PooledConnection`, for PostgreSQL and MySQL): what a
//! reset runs, how a cancelled query is seen, the session check that finds what a reset
//! leaves (MySQL), and the dead-link bounds added to a URL that names none.

use std::future::Future;

#[cfg(any(feature = "postgres", feature = "mysql"))]
use diesel::ConnectionError;
use diesel::ConnectionResult;
use diesel_async::pooled_connection::PoolableConnection;
use pooler::MemberContext;
#[cfg(feature = "mysql")]
use pooler::links::{LinkBounds, Opening};

/// How a return tells that a user left session state no statement of the reset clears
/// (MySQL: docs/design.md, "diesel-async"): the session is recorded as the pool leaves it,
/// and a user who left something is seen at the return, and the connection replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionCheck {
    /// Records the session as the pool leaves it: run once the connection is set up, and
    /// after each reset.
    pub snapshot: &'static str,
    /// An SQL expression, true while nothing that leaves state has run since the snapshot.
    pub unchanged: &'static str,
}

/// A diesel-async connection a pool can hold: diesel-async's check of a returned connection
/// (its transaction state; for PostgreSQL, whether it closed), and whether a cancelled query
/// can leave its answer for the next one.
///
/// Implemented for `AsyncPgConnection` (feature `postgres`) and `AsyncMysqlConnection`
/// (feature `mysql`).
pub trait PooledConnection: PoolableConnection + 'static {
    /// Whether a query cancelled part-way (its future dropped: a timeout, a `select!`) can
    /// leave its answer on the connection for the next query to read as its own. When it
    /// can, every returned connection is verified with a round trip before it is handed on:
    /// a `SELECT` of a number that changes each time, whose answer must be that number.
    const CANCEL_LEAVES_ANSWER: bool;
    /// What every return runs, in one round trip, unless
    /// [`on_return`](crate::DieselManager::on_return) names another statement: the server's own
    /// transaction ended (one diesel's transaction manager does not know of, such as
    /// `sql_query("BEGIN")`, is still the server's) and the session state a user may leave
    /// put back as far as a statement can (docs/design.md, "diesel-async").
    const RESET: &'static str;

    /// The `idle_check_threshold` the pool uses when its configuration sets none
    /// ([`pooler::Manager::idle_check_threshold`]), for a connection whose dead links nothing
    /// else finds in time; the check before a take then also gives up after
    /// [`CHECK_TIMEOUT`](crate::CHECK_TIMEOUT). MySQL: 500 ms (the link's bounds find a
    /// connection idle on a link that died within 30 s, and until then it would be handed out
    /// and its first query wait out the user timeout); PostgreSQL: none (its URL's bounds find
    /// a dead link within about 30 s). Default: none.
    const IDLE_CHECK: Option<std::time::Duration> = None;

    /// How a return tells whether a user left session state the reset does not clear, for a
    /// server whose `VERSION()` is `version`; `None` when the reset clears everything a
    /// statement can leave (PostgreSQL's does). Default: `None`.
    #[must_use]
    fn session_check(_version: &str) -> Option<SessionCheck> {
        None
    }

    /// The URL [`DieselManager::new`](crate::DieselManager::new)'s own way of connecting opens: `url` with the
    /// dead-link bounds added where it sets none (PostgreSQL: a user timeout and keepalives;
    /// MySQL: the keepalive's idle time, the rest set on the socket once it is open;
    /// docs/faults.md). Default: `url` as it is.
    #[must_use]
    fn live_url(url: &str) -> String {
        url.to_owned()
    }

    /// Opens a connection to `url` for the pool, as [`DieselManager::new`](crate::DieselManager::new)
    /// does: to [`live_url`](PooledConnection::live_url)`(url)`, with the connection's I/O, where
    /// the driver lets the pool run it, in a task of the member's (`ctx`), so that a connection
    /// that ends — the server closed it, a dead link found by the keepalives — leaves the pool
    /// at once, free or starting, and is never handed out (PostgreSQL). Default:
    /// `AsyncConnection::establish`.
    fn open(url: &str, ctx: &MemberContext) -> impl Future<Output = ConnectionResult<Self>> + Send {
        let _ = ctx;
        let url = Self::live_url(url);
        async move { Self::establish(&url).await }
    }
}

/// The dead-link bounds a PostgreSQL URL gets where it names none, as pooler-postgres sets
/// them on its sockets: unacknowledged data for 30 s ends the connection, and an idle one
/// is probed after 10 s, every 5 s, 4 lost (so a connection on a link that died without a
/// word is found within about 30 s, not the kernel's ~15 minutes, or never when idle).
#[cfg(feature = "postgres")]
const PG_LIVENESS: [(&str, &str); 4] = [
    ("tcp_user_timeout", "30"),
    ("keepalives_idle", "10"),
    ("keepalives_interval", "5"),
    ("keepalives_retries", "4"),
];

/// `url` (a `postgres://` URL or a `key=value` string) with each of [`PG_LIVENESS`] it does
/// not name.
#[cfg(feature = "postgres")]
fn with_pg_liveness(url: &str) -> String {
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    with_params(url, &PG_LIVENESS, is_url)
}

/// The dead-link bound a MySQL URL gets where it names none, as pooler-mysql sets it
/// (`DEFAULT_TCP_KEEPALIVE`): keepalive probes after 10 s idle. mysql_async offers only the
/// idle time; the probes' interval and count and `TCP_USER_TIMEOUT` are set on the socket
/// once the connection is open ([`LinkBounds::DEFAULT`]), so a connection on a link that
/// died is found within 30 s, idle or with a query on it (docs/faults.md).
#[cfg(feature = "mysql")]
const MYSQL_LIVENESS: [(&str, &str); 1] = [("tcp_keepalive", "10000")];

/// MariaDB's per-session counts of the statements that can leave state no statement clears,
/// as one text.
#[cfg(feature = "mysql")]
macro_rules! mariadb_counts {
    () => {
        "(SELECT GROUP_CONCAT(VARIABLE_VALUE ORDER BY VARIABLE_NAME) \
         FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME IN ('COM_SET_OPTION', \
         'COM_CREATE_TABLE', 'COM_CREATE_TEMPORARY_TABLE', 'COM_CREATE_SEQUENCE', \
         'COM_CHANGE_DB', 'COM_PREPARE_SQL', 'COM_CALL_PROCEDURE', 'COM_HA_OPEN', \
         'COM_XA_START'))"
    };
}

/// MySQL's, from `performance_schema` (it has no separate count of temporary tables).
#[cfg(feature = "mysql")]
macro_rules! mysql_counts {
    () => {
        "(SELECT GROUP_CONCAT(VARIABLE_VALUE ORDER BY VARIABLE_NAME) \
         FROM performance_schema.session_status WHERE VARIABLE_NAME IN ('Com_set_option', \
         'Com_create_table', 'Com_change_db', 'Com_prepare_sql', 'Com_call_procedure', \
         'Com_ha_open', 'Com_xa_start'))"
    };
}

/// MariaDB's session check: its counts of the statements that leave state, and its user
/// variables (the pool's own, `@pooler_session`, aside).
#[cfg(feature = "mysql")]
const MARIADB_SESSION: SessionCheck = SessionCheck {
    snapshot: concat!("SET @pooler_session = ", mariadb_counts!()),
    unchanged: concat!(
        mariadb_counts!(),
        " <=> @pooler_session AND (SELECT COUNT(*) FROM information_schema.USER_VARIABLES \
         WHERE VARIABLE_NAME <> 'pooler_session') = 0"
    ),
};

/// MySQL's: the same from `performance_schema` (8.0.16 and later, `performance_schema` on).
#[cfg(feature = "mysql")]
const MYSQL_SESSION: SessionCheck = SessionCheck {
    snapshot: concat!("SET @pooler_session = ", mysql_counts!()),
    unchanged: concat!(
        mysql_counts!(),
        " <=> @pooler_session AND (SELECT COUNT(*) FROM performance_schema.user_variables_by_thread \
         WHERE THREAD_ID = PS_CURRENT_THREAD_ID() AND VARIABLE_NAME <> 'pooler_session') = 0"
    ),
};

/// `url` with each of `params` it does not name: as query parameters of a URL (`is_url`), or
/// as `key=value` words.
#[cfg(any(feature = "postgres", feature = "mysql"))]
/// Refuses, as a URL error naming its key (`key` of each), a link setting the socket would
/// refuse: the connect would fail with "Invalid argument", naming no setting.
fn link_taken(
    settings: pooler::links::LinkSettings,
    key: impl Fn(pooler::links::Refused) -> &'static str,
) -> ConnectionResult<()> {
    match settings.refused() {
        Some(refused) => Err(ConnectionError::InvalidConnectionUrl(format!(
            "the setting `{}` {}",
            key(refused),
            refused.must()
        ))),
        None => Ok(()),
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
fn with_params(url: &str, params: &[(&str, &str)], is_url: bool) -> String {
    let mut out = url.to_owned();
    for (key, value) in params {
        if url.contains(key) {
            continue;
        }
        let sep = match (is_url, out.contains('?')) {
            (false, _) => " ",
            (true, true) => "&",
            (true, false) => "?",
        };
        out.push_str(sep);
        out.push_str(key);
        out.push('=');
        out.push_str(value);
    }
    out
}

/// tokio-postgres matches each answer to its request and drops those of requests given up.
#[cfg(feature = "postgres")]
impl PooledConnection for diesel_async::AsyncPgConnection {
    const CANCEL_LEAVES_ANSWER: bool = false;
    /// What `DISCARD ALL` does, but keeping the statements diesel-async prepared (it caches
    /// them per connection): settings and role, cursors, `LISTEN`, session advisory locks,
    /// temporary tables, sequence state, and the statements a user prepared with SQL's
    /// `PREPARE` (`from_sql` in `pg_prepared_statements`; diesel-async's are the protocol's).
    const RESET: &'static str = "ROLLBACK; CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; \
        RESET ALL; UNLISTEN *; SELECT pg_advisory_unlock_all(); DISCARD TEMP; \
        DISCARD SEQUENCES; DO $$DECLARE s text; BEGIN FOR s IN SELECT name FROM \
        pg_prepared_statements WHERE from_sql LOOP EXECUTE format('DEALLOCATE %I', s); \
        END LOOP; END$$";

    fn live_url(url: &str) -> String {
        with_pg_liveness(url)
    }

    /// As diesel-async's own `establish` (tokio-postgres without TLS: `sslmode=prefer` goes
    /// plain, `require` fails), except that the connection's I/O runs in the member's driver
    /// task rather than in one diesel-async spawns outside the pool: the pool sees the
    /// connection end (docs/design.md, "diesel-async"). diesel-async's `notifications_stream`
    /// is fed by its own task only, so it yields nothing on these connections. diesel-async's
    /// setup sends its two `SET`s at once; here they run in a transaction, which a
    /// transaction pooler keeps on one server (docs/design.md, "diesel-async").
    fn open(url: &str, ctx: &MemberContext) -> impl Future<Output = ConnectionResult<Self>> + Send {
        let url = Self::live_url(url);
        async move {
            let config: tokio_postgres::Config =
                url.parse().map_err(|e: tokio_postgres::Error| {
                    ConnectionError::InvalidConnectionUrl(e.to_string())
                })?;
            let keepalives = config.get_keepalives();
            let settings = pooler::links::LinkSettings {
                keepalive_idle: keepalives.then(|| config.get_keepalives_idle()),
                keepalive_interval: config.get_keepalives_interval().filter(|_| keepalives),
                keepalive_probes: config.get_keepalives_retries().filter(|_| keepalives),
                user_timeout: config.get_tcp_user_timeout().copied(),
            };
            link_taken(settings, |refused| match refused {
                pooler::links::Refused::KeepaliveIdle => "keepalives_idle",
                pooler::links::Refused::KeepaliveInterval => "keepalives_interval",
                pooler::links::Refused::KeepaliveProbes => "keepalives_retries",
                _ => "tcp_user_timeout",
            })?;
            let (client, connection) = config
                .connect(tokio_postgres::NoTls)
                .await
                .map_err(|e| ConnectionError::BadConnection(e.to_string()))?;
            // Its end — an I/O error, the server's close, or the client dropped — is the
            // member's death; the error itself reaches the user's query through the client.
            ctx.spawn(async move {
                let _ = connection.await;
            });
            client
                .batch_execute("BEGIN")
                .await
                .map_err(|e| ConnectionError::BadConnection(e.to_string()))?;
            let mut conn = Self::try_from(client).await?;
            diesel_async::SimpleAsyncConnection::batch_execute(&mut conn, "COMMIT")
                .await
                .map_err(ConnectionError::CouldntSetupConfiguration)?;
            Ok(conn)
        }
    }
}

/// mysql_async reads a cancelled command's answer as the next command's (it marks such a
/// connection, but diesel-async does not show the mark).
#[cfg(feature = "mysql")]
impl PooledConnection for diesel_async::AsyncMysqlConnection {
    const CANCEL_LEAVES_ANSWER: bool = true;
    /// MySQL has no statement that resets a session (`COM_RESET_CONNECTION` is a command
    /// diesel-async does not send): the transaction, `autocommit` (off, it loses the next
    /// user's writes), table locks and named locks are put back; what no statement clears —
    /// user and session variables, temporary tables, the database switched to, statements
    /// prepared in SQL — is seen by the [`session_check`](PooledConnection::session_check),
    /// and the connection is replaced.
    const RESET: &'static str =
        "ROLLBACK; SET SESSION autocommit = 1; UNLOCK TABLES; DO RELEASE_ALL_LOCKS()";
    const IDLE_CHECK: Option<std::time::Duration> = Some(std::time::Duration::from_millis(500));

    /// The server's own per-session counts of the statements that leave state (`SET`,
    /// `CREATE [TEMPORARY] TABLE`/`SEQUENCE`, `USE`, `PREPARE`, `CALL`, `HANDLER … OPEN`,
    /// `XA START`) and its list of user variables: MariaDB's `information_schema`, MySQL's
    /// `performance_schema` (which must be on).
    fn session_check(version: &str) -> Option<SessionCheck> {
        Some(if version.contains("MariaDB") {
            MARIADB_SESSION
        } else {
            MYSQL_SESSION
        })
    }

    fn live_url(url: &str) -> String {
        with_params(url, &MYSQL_LIVENESS, true)
    }

    /// `establish`, then the link's bounds set on the socket it opened
    /// (`pooler::links`), where the system lets them be.
    fn open(url: &str, ctx: &MemberContext) -> impl Future<Output = ConnectionResult<Self>> + Send {
        let _ = ctx;
        let url = Self::live_url(url);
        async move {
            // mysql_async reads `tcp_keepalive` in milliseconds.
            let keepalive = url
                .split_once('?')
                .and_then(|(_, query)| {
                    query
                        .split('&')
                        .find_map(|pair| pair.strip_prefix("tcp_keepalive="))
                })
                .and_then(|ms| ms.parse().ok())
                .map(std::time::Duration::from_millis);
            let settings = pooler::links::LinkSettings {
                keepalive_idle: keepalive,
                ..Default::default()
            };
            link_taken(settings, |_| "tcp_keepalive")?;
            let opening = Opening::before(mysql_port(&url));
            let conn = <Self as diesel_async::AsyncConnection>::establish(&url).await?;
            opening.bound(&LinkBounds::DEFAULT);
            Ok(conn)
        }
    }
}

/// The port a `mysql://` URL names, or MySQL's own (3306).
#[cfg(feature = "mysql")]
fn mysql_port(url: &str) -> u16 {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let port = match host.rsplit_once(']') {
        Some((_, after)) => after.strip_prefix(':'),
        None => host.rsplit_once(':').map(|(_, port)| port),
    };
    port.and_then(|port| port.parse().ok()).unwrap_or(3306)
}

#[cfg(all(test, feature = "postgres"))]
mod liveness_tests {
    use super::*;

    /// Each bound is added in the URL's own form where it names none; one it names is kept.
    #[test]
    fn a_postgres_url_gets_the_dead_link_bounds_it_does_not_name() {
        assert_eq!(
            with_pg_liveness("postgres://u@h/db"),
            "postgres://u@h/db?tcp_user_timeout=30&keepalives_idle=10&keepalives_interval=5\
             &keepalives_retries=4"
        );
        assert_eq!(
            with_pg_liveness("postgresql://u@h/db?sslmode=disable&keepalives_idle=60"),
            "postgresql://u@h/db?sslmode=disable&keepalives_idle=60&tcp_user_timeout=30\
             &keepalives_interval=5&keepalives_retries=4"
        );
        assert_eq!(
            with_pg_liveness("host=h tcp_user_timeout=5"),
            "host=h tcp_user_timeout=5 keepalives_idle=10 keepalives_interval=5 \
             keepalives_retries=4"
        );
        let all = "postgres://u@h/db?tcp_user_timeout=30&keepalives_idle=10\
                   &keepalives_interval=5&keepalives_retries=4";
        assert_eq!(with_pg_liveness(all), all);
    }
}

#[cfg(all(test, feature = "mysql"))]
mod mysql_tests {
    use super::PooledConnection;
    use diesel_async::AsyncMysqlConnection;

    /// The port the link's bounds look for: the URL's, or 3306.
    #[test]
    fn a_mysql_url_names_its_port_or_gets_the_default() {
        assert_eq!(super::mysql_port("mysql://root@db/test"), 3306);
        assert_eq!(
            super::mysql_port("mysql://root:p@ss@db:3307/test?x=1"),
            3307
        );
        assert_eq!(super::mysql_port("mysql://10.0.0.1:33060"), 33060);
        assert_eq!(super::mysql_port("mysql://u@[::1]:3308/db"), 3308);
        assert_eq!(super::mysql_port("mysql://u@[::1]/db"), 3306);
        assert_eq!(
            super::mysql_port("mysql://db?socket=/run/mysqld.sock"),
            3306
        );
    }

    #[test]
    fn a_mysql_url_gets_a_keepalive_unless_it_names_one() {
        assert_eq!(
            AsyncMysqlConnection::live_url("mysql://root@db/test"),
            "mysql://root@db/test?tcp_keepalive=10000"
        );
        assert_eq!(
            AsyncMysqlConnection::live_url("mysql://root@db/test?prefer_socket=false"),
            "mysql://root@db/test?prefer_socket=false&tcp_keepalive=10000"
        );
        assert_eq!(
            AsyncMysqlConnection::live_url("mysql://root@db/test?tcp_keepalive=0"),
            "mysql://root@db/test?tcp_keepalive=0"
        );
    }
}
