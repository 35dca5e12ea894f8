#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use pooler::links::Opening;
use pooler::{Hooks, Manager, MemberContext};

pub use mysql_async;
pub use pooler;
pub use pooler::links::LinkBounds;

mod reset;
#[cfg(feature = "serde")]
mod settings;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use settings::MysqlSettings;

/// A pool of MySQL or MariaDB connections.
pub type Pool = pooler::Pool<MysqlManager>;
/// A connection taken from a [`Pool`]: dereferences to [`Conn`].
pub type Member = pooler::Member<MysqlManager>;

/// What happens to a connection when it is given back. The README's table says what each
/// mode clears.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Recycle {
    /// One `COM_RESET_CONNECTION` on every return: the transaction rolled back, and the
    /// session as new — `autocommit` and every session variable back to their defaults, user
    /// variables, temporary tables, prepared statements, table locks (`LOCK TABLES`) and named
    /// locks (`GET_LOCK`) gone. One round trip, as a `ROLLBACK` costs. On servers too old for
    /// it (before MySQL 5.7.3, MariaDB 10.2.4), `COM_CHANGE_USER` does the same. The default.
    #[default]
    Reset,
    /// One `ROLLBACK` on every return: a transaction the last user left open ends there, and
    /// the session's state stays as the last user left it (settings, variables, temporary
    /// tables, locks).
    Rollback,
    /// Nothing: the connection goes back as it is.
    Nothing,
}

/// The TCP keepalive idle time a connection gets when its options set none (mysql_async
/// sets none by default, and the kernel's own waits two hours): after 10 s idle the kernel
/// probes the link. With the manager's [`LinkBounds`] (probes every 5 s, 4 lost), an idle
/// connection on a link that died is found dead within 30 s; a check before a take
/// ([`DEFAULT_IDLE_CHECK`]) finds it sooner (docs/faults.md).
pub const DEFAULT_TCP_KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a connection may sit idle before a take pings it first, when the pool's
/// configuration sets no `idle_check_threshold` ([`Manager::idle_check_threshold`]): nothing
/// else finds a link that died while a connection was idle before the keepalive probes do
/// (30 s), and a query sent into one waits until `TCP_USER_TIMEOUT` ends it (30 s with the
/// manager's [`LinkBounds`]). HikariCP's bypass window. A busy pool's
/// connections are rarely idle this long, so it rarely pings; change it, or turn it off,
/// with [`MysqlManager::idle_check_threshold`] (docs/faults.md).
pub const DEFAULT_IDLE_CHECK: std::time::Duration = std::time::Duration::from_millis(500);

/// How long the check before a take waits for the server's answer to its ping before the
/// link counts as dead and the connection is replaced ([`MysqlError::Unanswered`]): a ping
/// is answered without touching a table, so a server that takes longer is not one to hand a
/// request to. The pool's `member_start_timeout` bounds the check too.
pub const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Starts MySQL or MariaDB connections.
#[derive(Debug, Clone)]
pub struct MysqlManager {
    opts: Opts,
    recycle: Recycle,
    hooks: Hooks<Conn>,
    /// The statement that follows a reset (`reset.rs`), learned at the first connection.
    restore: std::sync::Arc<std::sync::OnceLock<String>>,
    /// The last number a returned connection was asked to echo.
    nonce: std::sync::Arc<std::sync::atomic::AtomicI32>,
    /// The pool's `idle_check_threshold` when its configuration sets none.
    idle_check: Option<std::time::Duration>,
    /// What each connection's TCP link gets after the connect; `None` leaves the kernel's.
    link_bounds: Option<LinkBounds>,
}

impl MysqlManager {
    /// A manager for a URL (`mysql://user:password@host:port/db?...`).
    ///
    /// # Errors
    ///
    /// When the URL cannot be parsed, or sets a `tcp_keepalive` the socket would refuse
    /// (under a second, or past the 32 767 s Linux takes: every connect would fail).
    pub fn new(url: &str) -> Result<Self, mysql_async::Error> {
        let opts = Opts::from_url(url)?;
        keepalive_taken(&opts)?;
        Ok(Self::from_opts(opts))
    }

    /// A manager for settings read from a pools file or any serde format.
    ///
    /// # Errors
    ///
    /// When the settings' `url` cannot be parsed.
    #[cfg(feature = "serde")]
    #[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
    pub fn from_settings(settings: &MysqlSettings) -> Result<Self, mysql_async::Error> {
        let opts = settings.to_opts()?;
        keepalive_taken(&opts)?;
        Ok(Self::from_opts(opts))
    }

    /// A manager for parsed [`Opts`] (build them with `mysql_async::OptsBuilder`). Options
    /// that set no TCP keepalive get [`DEFAULT_TCP_KEEPALIVE`].
    #[must_use]
    pub fn from_opts(opts: Opts) -> Self {
        let opts = if opts.tcp_keepalive().is_none() {
            Opts::from(
                mysql_async::OptsBuilder::from_opts(opts)
                    .tcp_keepalive(Some(DEFAULT_TCP_KEEPALIVE)),
            )
        } else {
            opts
        };
        MysqlManager {
            opts,
            recycle: Recycle::default(),
            hooks: Hooks::default(),
            restore: std::sync::Arc::default(),
            nonce: std::sync::Arc::default(),
            idle_check: Some(DEFAULT_IDLE_CHECK),
            link_bounds: Some(LinkBounds::DEFAULT),
        }
    }

    /// The bounds each connection's TCP link gets once it is open (default:
    /// [`LinkBounds::DEFAULT`], on Linux): `TCP_USER_TIMEOUT`, so that a query sent into a
    /// link that died without a word fails with an I/O error after `user_timeout` instead of
    /// the kernel's ~15 minutes of retransmissions, and the keepalive probes' interval and
    /// count. mysql_async sets neither and offers no way to: the manager finds the socket its
    /// connect opened (`pooler::links`). `None` leaves the kernel's defaults. A connection over
    /// a Unix socket (mysql_async's `prefer_socket`, for a server on this host) has no link to
    /// bound.
    #[must_use]
    pub fn link_bounds(mut self, bounds: Option<LinkBounds>) -> Self {
        self.link_bounds = bounds;
        self
    }

    /// How long a connection may sit idle before a take pings it first, in a pool whose
    /// configuration sets no `idle_check_threshold` (which wins when set). Default:
    /// [`DEFAULT_IDLE_CHECK`]; `None` hands idle connections out unchecked — then a
    /// connection on a link that died while it was idle is handed out, and its first query
    /// waits for the kernel.
    #[must_use]
    pub fn idle_check_threshold(mut self, threshold: Option<std::time::Duration>) -> Self {
        self.idle_check = threshold;
        self
    }

    /// What to do with connections given back (default: [`Recycle::Reset`]).
    #[must_use]
    pub fn recycle(mut self, recycle: Recycle) -> Self {
        self.recycle = recycle;
        self
    }

    /// Runs `hooks` on every connection: `after_connect` once it is open (and again after each
    /// reset, which takes the session back to its start), `after_return` once a returned
    /// connection is clean (see [`Hooks`]). Add per-connection setup here rather than by
    /// wrapping the manager: a wrapper must forward every hook of [`Manager`], and one that
    /// forgets `is_broken` or `recycle` hands the next user the last user's session.
    #[must_use]
    pub fn hooks(mut self, hooks: Hooks<Conn>) -> Self {
        self.hooks = hooks;
        self
    }

    /// The connection options.
    #[must_use]
    pub fn opts(&self) -> &Opts {
        &self.opts
    }

    /// Sends `SELECT <n>; then` in one query and checks that the first answer read is `n`:
    /// a connection whose answers are out of step is unclean (replaced).
    async fn in_step(&self, conn: &mut Conn, then: &str) -> Result<(), MysqlError> {
        let n = self
            .nonce
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let sql = if then.is_empty() {
            format!("SELECT {n}")
        } else {
            format!("SELECT {n}; {then}")
        };
        let echoed: Vec<i64> = conn.query(sql).await?;
        if echoed != [i64::from(n)] {
            return Err(MysqlError::Unclean(
                "its answers were out of step (a command cancelled after it was written)",
            ));
        }
        Ok(())
    }
}

impl Manager for MysqlManager {
    type Member = Conn;
    type Error = MysqlError;

    async fn start(&self, _ctx: &MemberContext) -> Result<Conn, MysqlError> {
        // Options handed over whole (`from_opts`) are checked here: named, not "Invalid
        // argument" from the socket.
        keepalive_taken(&self.opts)?;
        let opening = self
            .link_bounds
            .map(|_| Opening::before(self.opts.tcp_port()));
        let mut conn = Conn::new(self.opts.clone()).await?;
        if let (Some(opening), Some(bounds)) = (opening, &self.link_bounds) {
            opening.bound(bounds);
        }
        if self.recycle == Recycle::Reset && self.restore.get().is_none() {
            // Two first connections may both learn it: the same statement, set once.
            let learned = reset::learn(&mut conn, &self.opts).await?;
            let _ = self.restore.set(learned);
        }
        Ok(conn)
    }

    async fn initialize(&self, conn: &mut Conn) -> Result<(), MysqlError> {
        self.hooks
            .run_after_connect(conn)
            .await
            .map_err(MysqlError::Hook)
    }

    fn idle_check_threshold(&self) -> Option<std::time::Duration> {
        self.idle_check
    }

    // Bounded by its own timeout as well as the pool's `member_start_timeout` (a minute by
    // default): a ping into a dead link would otherwise wait for the kernel.
    async fn check(&self, conn: &mut Conn) -> Result<(), MysqlError> {
        match tokio::time::timeout(CHECK_TIMEOUT, conn.ping()).await {
            Ok(pinged) => Ok(pinged?),
            Err(_) => Err(MysqlError::Unanswered(CHECK_TIMEOUT)),
        }
    }

    fn is_broken(&self, conn: &Conn) -> bool {
        // mysql_async marks a connection while a command's exchange is under way and clears
        // the mark when the answer is read: still marked, a command was cancelled (a timeout,
        // a `select!`) with its answer unread, and the next command would read that answer
        // as its own. Its own pool discards such a connection; so does pooler, in every mode.
        // Nor is one `change_user`d to another login handed on (`reset.rs`).
        conn.is_disconnected() || !reset::same_login(conn, &self.opts)
    }

    async fn stop(&self, conn: Conn) {
        // COM_QUIT; a connection that is already gone has nothing to say.
        let _ = conn.disconnect().await;
    }

    fn needs_recycle(&self, _conn: &Conn) -> bool {
        self.recycle != Recycle::Nothing || self.hooks.has_after_return()
    }

    async fn recycle(&self, conn: &mut Conn) -> Result<(), MysqlError> {
        match self.recycle {
            Recycle::Reset => {
                if reset::client_in_transaction(conn) {
                    // A transaction guard forgotten: mysql_async would refuse every later
                    // transaction on this connection (`reset.rs`).
                    return Err(MysqlError::Unclean(
                        "a transaction guard was forgotten; mysql_async still believes it open",
                    ));
                }
                // A result set a user dropped half read is drained first (mysql_async does it
                // before any command). With no database configured, COM_CHANGE_USER also
                // takes the session back to none.
                if self.opts.db_name().is_none() || !conn.reset().await? {
                    conn.change_user(mysql_async::ChangeUserOpts::default())
                        .await?;
                }
                // What the reset leaves: the database and the role (`reset.rs`), behind a
                // number the server must echo first: a connection out of step (a command
                // cancelled after it was written but before mysql_async knew to wait for
                // its answer) reads an older answer instead, and is replaced.
                let restore = self.restore.get().map_or("", String::as_str);
                self.in_step(conn, restore).await?;
                // The session is back at its start, before `after_connect`.
                self.hooks
                    .run_after_connect(conn)
                    .await
                    .map_err(MysqlError::Hook)?;
            }
            Recycle::Rollback => self.in_step(conn, "ROLLBACK").await?,
            Recycle::Nothing => {}
        }
        self.hooks
            .run_after_return(conn)
            .await
            .map_err(MysqlError::Hook)
    }
}

/// Whether `opts`' `tcp_keepalive` is one the socket takes
/// (`pooler::links::LinkSettings`), as a URL parameter error naming it if not.
fn keepalive_taken(opts: &Opts) -> Result<(), mysql_async::Error> {
    let Some(idle) = opts.tcp_keepalive() else {
        return Ok(());
    };
    let settings = pooler::links::LinkSettings {
        keepalive_idle: Some(idle),
        ..Default::default()
    };
    match settings.refused() {
        Some(refused) => Err(mysql_async::Error::Url(
            mysql_async::UrlError::InvalidParamValue {
                param: "tcp_keepalive".to_owned(),
                value: format!("{} ms: it {}", idle.as_millis(), refused.must()),
            },
        )),
        None => Ok(()),
    }
}

/// Why a connection could not be started, checked or made clean.
#[derive(Debug)]
#[non_exhaustive]
pub enum MysqlError {
    /// What `mysql_async` returned.
    Mysql(mysql_async::Error),
    /// A hook of the manager's ([`Hooks`]) failed.
    Hook(Box<dyn std::error::Error + Send + Sync>),
    /// A connection given back in a state no reset restores: it is replaced.
    Unclean(&'static str),
    /// The check before a take got no answer to its ping within this long
    /// ([`CHECK_TIMEOUT`]): the link counts as dead and the connection is replaced.
    Unanswered(std::time::Duration),
}

impl std::fmt::Display for MysqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MysqlError::Mysql(e) => write!(f, "{e}"),
            MysqlError::Hook(e) => write!(f, "a hook failed: {e}"),
            MysqlError::Unclean(why) => write!(f, "the connection cannot be made clean: {why}"),
            MysqlError::Unanswered(after) => write!(
                f,
                "the server did not answer a ping within {} ms: the link counts as dead",
                after.as_millis()
            ),
        }
    }
}

impl std::error::Error for MysqlError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MysqlError::Mysql(e) => Some(e),
            MysqlError::Hook(e) => Some(&**e),
            MysqlError::Unclean(_) | MysqlError::Unanswered(_) => None,
        }
    }
}

impl From<mysql_async::Error> for MysqlError {
    fn from(e: mysql_async::Error) -> Self {
        MysqlError::Mysql(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Options with no keepalive get the default; one of their own is kept.
    #[test]
    fn a_connection_gets_a_keepalive_unless_its_options_set_one() {
        let default = MysqlManager::new("mysql://root@db.invalid/test").unwrap();
        assert_eq!(default.opts().tcp_keepalive(), Some(DEFAULT_TCP_KEEPALIVE));
        let own = MysqlManager::new("mysql://root@db.invalid/test?tcp_keepalive=30000").unwrap();
        assert_eq!(
            own.opts().tcp_keepalive(),
            Some(std::time::Duration::from_secs(30))
        );
    }

    /// A keepalive time the socket refuses (under a second, or past Linux's 32 767 s) made
    /// every connect fail with "Invalid argument", naming no key: it is refused by its key
    /// when the manager is made, and the edges the socket takes are kept.
    #[test]
    fn a_keepalive_the_socket_refuses_is_named_by_its_key() {
        for ms in ["0", "500", "32768000", "4294967295"] {
            let url = format!("mysql://root@db.invalid/test?tcp_keepalive={ms}");
            let e = MysqlManager::new(&url).unwrap_err();
            assert!(e.to_string().contains("tcp_keepalive"), "{ms}: {e}");
        }
        for ms in ["1000", "32767000"] {
            let url = format!("mysql://root@db.invalid/test?tcp_keepalive={ms}");
            assert!(MysqlManager::new(&url).is_ok(), "{ms}");
        }
    }
}
