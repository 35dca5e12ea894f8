// The README's example needs the `postgres` feature (docs.rs builds with every feature).
#![cfg_attr(feature = "postgres", doc = include_str!("../README.md"))]
#![cfg_attr(
    not(feature = "postgres"),
    doc = "diesel-async connections as pooler members: see the README (feature `postgres` or `mysql`)."
)]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use diesel::ConnectionResult;
use diesel::IntoSql;
use diesel::dsl::sql;
use diesel::dsl::{AsExprOf, select};
use diesel::expression::SqlLiteral;
use diesel::sql_types::{Bool, Integer, Text};
use diesel_async::RunQueryDsl;
use diesel_async::methods::LoadQuery;
use pooler::{Hooks, Manager, MemberContext};

mod connection;

pub use connection::{PooledConnection, SessionCheck};

/// How long the check before a take waits for its answer, for a connection whose dead links
/// nothing else finds ([`PooledConnection::IDLE_CHECK`]) — past it the link counts as dead
/// and the connection is replaced ([`DieselError::Unanswered`]). The pool's
/// `member_start_timeout` bounds the check too.
pub const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

pub use diesel;
pub use diesel_async;
pub use pooler;

/// A pool of diesel-async connections of type `C`.
pub type Pool<C> = pooler::Pool<DieselManager<C>>;
/// A connection taken from a [`Pool`]: dereferences to `C`, so `&mut *conn` is what
/// diesel-async's `RunQueryDsl` methods take.
pub type Member<C> = pooler::Member<DieselManager<C>>;

/// A pool of PostgreSQL connections.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub type PgPool = Pool<diesel_async::AsyncPgConnection>;

/// A pool of MySQL or MariaDB connections.
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub type MysqlPool = Pool<diesel_async::AsyncMysqlConnection>;

/// How a connection is opened: from the URL, to a connection or diesel's connection error.
type Establish<C> =
    Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = ConnectionResult<C>> + Send>> + Send + Sync>;

/// Opens diesel-async connections of type `C` for a pool, and gives them back clean.
///
/// What a returned connection is checked for, before anyone else gets it (in a task of the
/// pool's, while the connection still counts as in use):
///
/// - a transaction left open (a user returned between `begin` and `commit`, or dropped a
///   `transaction` future part-way), or diesel-async's transaction manager in an error state
///   (a failed `COMMIT` or `ROLLBACK`), or a PostgreSQL connection that has closed: the
///   connection is replaced, as diesel-async's own pool adapters do;
/// - MySQL: the answer of a query the user cancelled, left for the next query to read
///   ([`PooledConnection::CANCEL_LEAVES_ANSWER`]): a round trip verifies the connection, and
///   a connection that answers out of turn is replaced;
/// - the server's transaction and the session: [`PooledConnection::RESET`] (or the
///   statement set with [`on_return`](DieselManager::on_return)) runs in one round trip, and
///   the connection is replaced when it fails; the `after_connect` hook runs again after it,
///   since the reset takes the session back to its start;
/// - the `after_return` hook, if any ([`hooks`](DieselManager::hooks)).
///
/// A free connection's health check (the pool's `health_interval`) is `SELECT 1`.
pub struct DieselManager<C> {
    url: String,
    /// The user's way of opening a connection (`establish_with`); `None`: `C::open`.
    establish: Option<Establish<C>>,
    on_return: Option<Cow<'static, str>>,
    hooks: Hooks<C>,
    /// The last number a returned connection was asked to echo.
    nonce: Arc<AtomicI32>,
    /// Behind a transaction pooler: no statement kept (`transaction_pooling`).
    transaction_pooling: bool,
    /// The session check for the server, settled by the first connection (its `VERSION()`).
    session: Arc<std::sync::OnceLock<Option<SessionCheck>>>,
    /// The pool's `idle_check_threshold` when its configuration sets none.
    idle_check: Option<std::time::Duration>,
}

impl<C> Clone for DieselManager<C> {
    fn clone(&self) -> Self {
        DieselManager {
            url: self.url.clone(),
            establish: self.establish.clone(),
            on_return: self.on_return.clone(),
            hooks: self.hooks.clone(),
            nonce: self.nonce.clone(),
            transaction_pooling: self.transaction_pooling,
            session: self.session.clone(),
            idle_check: self.idle_check,
        }
    }
}

impl<C> std::fmt::Debug for DieselManager<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password: only what follows its `@` is shown.
        let shown = self
            .url
            .rsplit_once('@')
            .map_or(self.url.as_str(), |(_, h)| h);
        f.debug_struct("DieselManager")
            .field("connection", &std::any::type_name::<C>())
            .field("host", &shown)
            .field("on_return", &self.on_return)
            .finish_non_exhaustive()
    }
}

impl<C: PooledConnection> DieselManager<C> {
    /// A manager opening connections to `url` with [`PooledConnection::open`]: the dead-link
    /// bounds ([`PooledConnection::live_url`]) added where `url` sets none, and (PostgreSQL)
    /// the connection's I/O run in a task of the pool's, so that a connection that ends
    /// leaves the pool at once (diesel-async's `notifications_stream` then yields nothing:
    /// see [`establish_with`](DieselManager::establish_with)).
    #[must_use]
    pub fn new(url: impl Into<String>) -> Self {
        DieselManager {
            url: url.into(),
            establish: None,
            on_return: None,
            hooks: Hooks::default(),
            nonce: Arc::default(),
            transaction_pooling: false,
            session: Arc::default(),
            idle_check: C::IDLE_CHECK,
        }
    }

    /// How long a connection may sit idle before a take checks it first, in a pool whose
    /// configuration sets no `idle_check_threshold` (which wins when set). Default:
    /// [`PooledConnection::IDLE_CHECK`] (MySQL 500 ms, PostgreSQL none); `None` hands idle
    /// connections out unchecked.
    #[must_use]
    pub fn idle_check_threshold(mut self, threshold: Option<std::time::Duration>) -> Self {
        self.idle_check = threshold;
        self
    }

    /// The same manager, opening each connection with `establish` (given the URL) instead of
    /// [`PooledConnection::open`]: for TLS, a connection built by hand (`AsyncPgConnection::
    /// try_from_client_and_connection`), or diesel-async's own task driving it (its
    /// `notifications_stream`, for `LISTEN`). The URL is passed as given, without the
    /// dead-link bounds, and the pool learns that a free connection ended only when it is
    /// taken and fails.
    #[must_use]
    pub fn establish_with<F, Fut>(mut self, establish: F) -> Self
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ConnectionResult<C>> + Send + 'static,
    {
        self.establish = Some(Arc::new(move |url| Box::pin(establish(url))));
        self
    }

    /// The same manager for a server reached through a pooler that lends a server connection
    /// for one transaction at a time (PgBouncer's `pool_mode = transaction`): each
    /// connection's prepared-statement cache is turned off when it opens, since a statement
    /// kept from one transaction is missing on the next one's server connection ("prepared
    /// statement \"s3\" does not exist": 464–661 of 800 transactions failed behind
    /// PgBouncer with the cache on, 0 with it off). Run every use in a transaction
    /// (`conn.transaction(…)`): outside one, diesel-async's prepare and execute may meet two
    /// server connections. Session settings do not outlast a transaction there; the reset on
    /// return reaches whichever server connection the pooler lends it (docs/design.md,
    /// "Behind PgBouncer").
    #[must_use]
    pub fn transaction_pooling(mut self, on: bool) -> Self {
        self.transaction_pooling = on;
        self
    }

    /// The same manager, running `statement` on every returned connection before it is
    /// handed on, instead of [`PooledConnection::RESET`] (a failure replaces the connection).
    /// Make it end the server's transaction too (`ROLLBACK; …`): a transaction opened with
    /// `sql_query("BEGIN")` is the server's, not diesel's. Not `DISCARD ALL`: it also drops
    /// the prepared statements diesel-async keeps per connection.
    #[must_use]
    pub fn on_return(mut self, statement: impl Into<Cow<'static, str>>) -> Self {
        self.on_return = Some(statement.into());
        self
    }

    /// Runs `hooks` on every connection: `after_connect` once it is open, `after_return`
    /// once a returned connection is clean (see [`Hooks`]).
    #[must_use]
    pub fn hooks(mut self, hooks: Hooks<C>) -> Self {
        self.hooks = hooks;
        self
    }
}

/// Why a connection could not be opened, or was not handed on.
#[derive(Debug)]
#[non_exhaustive]
pub enum DieselError {
    /// The connection could not be opened.
    Connection(diesel::result::ConnectionError),
    /// The health check or the [`on_return`](DieselManager::on_return) statement failed.
    Query(diesel::result::Error),
    /// The connection came back with a transaction open, its transaction manager broken,
    /// (PostgreSQL) closed, or (MySQL) answering out of turn.
    Broken,
    /// A hook of the manager's ([`Hooks`]) failed.
    Hook(Box<dyn std::error::Error + Send + Sync>),
    /// The connection came back with session state no statement clears (MySQL: a variable, a
    /// temporary table, another database, a statement prepared in SQL): it is replaced.
    Unclean(&'static str),
    /// The check before a take got no answer within this long ([`CHECK_TIMEOUT`]; only
    /// where [`PooledConnection::IDLE_CHECK`] is set): the link counts as dead and the
    /// connection is replaced.
    Unanswered(std::time::Duration),
}

impl std::fmt::Display for DieselError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DieselError::Connection(e) => write!(f, "connecting failed: {e}"),
            DieselError::Query(e) => write!(f, "{e}"),
            DieselError::Broken => {
                f.write_str("the connection came back with a transaction open or broken, or closed")
            }
            DieselError::Hook(e) => write!(f, "a hook failed: {e}"),
            DieselError::Unclean(why) => write!(f, "the connection was not handed on: {why}"),
            DieselError::Unanswered(after) => write!(
                f,
                "the server did not answer a check within {} ms: the link counts as dead",
                after.as_millis()
            ),
        }
    }
}

impl std::error::Error for DieselError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DieselError::Connection(e) => Some(e),
            DieselError::Query(e) => Some(e),
            DieselError::Broken | DieselError::Unclean(_) | DieselError::Unanswered(_) => None,
            DieselError::Hook(e) => Some(&**e),
        }
    }
}

impl<C> DieselManager<C>
where
    C: PooledConnection,
    for<'a> select<SqlLiteral<Text>>: LoadQuery<'a, C, String>,
{
    /// The session check for the server `conn` is on (asked once per manager: its
    /// `VERSION()`), if its kind of connection has one.
    async fn session_check(&self, conn: &mut C) -> Result<Option<SessionCheck>, DieselError> {
        if let Some(known) = self.session.get() {
            return Ok(*known);
        }
        if C::session_check("").is_none() {
            let _ = self.session.set(None);
            return Ok(None);
        }
        let version: String = select(sql::<Text>("VERSION()"))
            .get_result(conn)
            .await
            .map_err(DieselError::Query)?;
        Ok(*self.session.get_or_init(|| C::session_check(&version)))
    }
}

impl<C> Manager for DieselManager<C>
where
    C: PooledConnection,
    for<'a> select<AsExprOf<i32, Integer>>: LoadQuery<'a, C, i32>,
    for<'a> select<(AsExprOf<i32, Integer>, SqlLiteral<Bool>)>: LoadQuery<'a, C, (i32, bool)>,
    for<'a> select<SqlLiteral<Text>>: LoadQuery<'a, C, String>,
{
    type Member = C;
    type Error = DieselError;

    async fn start(&self, ctx: &MemberContext) -> Result<C, DieselError> {
        let opened = match &self.establish {
            Some(establish) => establish(self.url.clone()).await,
            None => C::open(&self.url, ctx).await,
        };
        let mut conn = opened.map_err(DieselError::Connection)?;
        if self.transaction_pooling {
            conn.set_prepared_statement_cache_size(diesel::connection::CacheSize::Disabled);
        }
        Ok(conn)
    }

    async fn initialize(&self, conn: &mut C) -> Result<(), DieselError> {
        self.hooks
            .run_after_connect(conn)
            .await
            .map_err(DieselError::Hook)?;
        if let Some(check) = self.session_check(conn).await? {
            // What the hook set is the session every user starts from.
            conn.batch_execute(check.snapshot)
                .await
                .map_err(DieselError::Query)?;
        }
        Ok(())
    }

    fn idle_check_threshold(&self) -> Option<std::time::Duration> {
        self.idle_check
    }

    // One simple query, one round trip: no statement prepared at one sync point and closed
    // at another, which a transaction pooler cannot serve. Where nothing else bounds a dead
    // link (`PooledConnection::IDLE_CHECK`), bounded by its own timeout as well as the
    // pool's `member_start_timeout` (a minute by default).
    async fn check(&self, conn: &mut C) -> Result<(), DieselError> {
        let check = conn.batch_execute("SELECT 1");
        let checked = if C::IDLE_CHECK.is_some() {
            tokio::time::timeout(CHECK_TIMEOUT, check)
                .await
                .map_err(|_| DieselError::Unanswered(CHECK_TIMEOUT))?
        } else {
            check.await
        };
        checked.map_err(DieselError::Query)
    }

    // diesel-async reads a connection's transaction state through `&mut` only, so the look
    // at a returned connection is a recycle, not `is_broken` (docs/design.md, "diesel-async").
    fn needs_recycle(&self, _conn: &C) -> bool {
        true
    }

    async fn recycle(&self, conn: &mut C) -> Result<(), DieselError> {
        if conn.is_broken() {
            return Err(DieselError::Broken);
        }
        let check = self.session.get().copied().flatten();
        if C::CANCEL_LEAVES_ANSWER {
            // One round trip verifies the connection answers in turn and, where the server
            // can tell, that the user left no session state the reset cannot clear.
            let asked = self.nonce.fetch_add(1, Ordering::Relaxed);
            let unchanged = check.map_or("TRUE", |check| check.unchanged);
            let (answer, unchanged) = select((asked.into_sql::<Integer>(), sql::<Bool>(unchanged)))
                .get_result::<(i32, bool)>(conn)
                .await
                .map_err(DieselError::Query)?;
            if answer != asked {
                return Err(DieselError::Broken);
            }
            if !unchanged {
                return Err(DieselError::Unclean(
                    "a user left session state no statement clears (a variable, a temporary table, another database, a statement prepared in SQL)",
                ));
            }
        }
        let reset = self.on_return.as_deref().unwrap_or(C::RESET);
        let hooked = self.hooks.has_after_connect() || self.hooks.has_after_return();
        match check {
            // The snapshot goes with the reset, in the same round trip.
            Some(check) if !hooked => {
                conn.batch_execute(&format!("{reset}; {}", check.snapshot))
                    .await
                    .map_err(DieselError::Query)?;
                return Ok(());
            }
            _ => conn
                .batch_execute(reset)
                .await
                .map_err(DieselError::Query)?,
        }
        // The reset took the session back to its start, before `after_connect`.
        self.hooks
            .run_after_connect(conn)
            .await
            .map_err(DieselError::Hook)?;
        self.hooks
            .run_after_return(conn)
            .await
            .map_err(DieselError::Hook)?;
        if let Some(check) = check {
            conn.batch_execute(check.snapshot)
                .await
                .map_err(DieselError::Query)?;
        }
        Ok(())
    }
}
