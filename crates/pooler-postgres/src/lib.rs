#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod connect;
mod hosts;
mod role;
mod session;
#[cfg(feature = "serde")]
mod settings;
mod statements;
mod verdicts;
mod watch;

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use pooler::{Hooks, Latency, Manager, MemberContext};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::types::Type;
use tokio_postgres::{CancelToken, Client, Config, NoTls, SimpleQueryMessage, Statement};

pub use crate::connect::{PgError, PgSocket, WatchTls, WatchedSocket};
pub use crate::hosts::{HOST_RECHECK, SessionTarget};
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use crate::settings::{ChannelBindingName, LoadBalanceName, PgSettings, SslModeName};
pub use crate::statements::CacheStats;
pub use crate::watch::{TxStatus, Watched};
pub use pooler;
#[cfg(feature = "rustls")]
#[cfg_attr(docsrs, doc(cfg(feature = "rustls")))]
pub use rustls;
pub use tokio_postgres;
#[cfg(feature = "rustls")]
#[cfg_attr(docsrs, doc(cfg(feature = "rustls")))]
pub use tokio_postgres_rustls;

/// A pool of PostgreSQL connections (through `T`, `NoTls` by default).
pub type Pool<T = NoTls> = pooler::Pool<PgManager<T>>;
/// A PostgreSQL connection taken from a [`Pool`]: dereferences to [`Client`].
pub type Member<T = NoTls> = pooler::Member<PgManager<T>>;

/// What happens to a connection when it is given back. The README's table says what each
/// mode clears.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Recycle {
    /// Clean at zero cost when clean: what the connection's stream layer saw decides, with
    /// no round trip when the last user left nothing. A transaction left open or failed is
    /// rolled back; session state a statement may have left (`SET` without `LOCAL`,
    /// `SET ROLE`, `set_config(…, false)`, `PREPARE`, `LISTEN`, temporary tables, cursors
    /// `WITH HOLD`, session advisory locks, or a parameter the server reports changed) is
    /// reset — both in one round trip. A request still on its way (a query future dropped
    /// a moment after it was first polled, a `Transaction` dropped uncommitted) is waited
    /// for, up to a second, then decided on; past that, the transaction is asked for as
    /// [`Recycle::Query`] does. A connection left in `COPY FROM STDIN`, or whose
    /// statements dropped what cannot be restored (`LOAD`, `DISCARD ALL`, `DEALLOCATE ALL`),
    /// is replaced. The default.
    #[default]
    Observed,
    /// As [`Recycle::Observed`] for transactions, but the session's state is left as the
    /// last user left it (for applications that set session state on purpose and share it).
    Transaction,
    /// The whole session reset on every return, in one round trip after a rollback if one is
    /// needed: cursors closed, session authorization and every setting reset, `UNLISTEN *`,
    /// advisory locks released, temporary tables and sequence state discarded, statements
    /// prepared in SQL deallocated (tokio-postgres's own are kept, and so is the statement
    /// cache).
    Always,
    /// This query on every return (after a rollback if one is needed), in place of
    /// [`Recycle::Always`]'s; made by [`Recycle::custom`].
    Custom(ResetQuery),
    /// One round trip on every return asks whether the last user left an explicit transaction
    /// open (`now() = statement_timestamp()` is false only inside one); if so it is rolled
    /// back; a connection whose transaction failed cannot answer and is replaced. The
    /// session's state is left as it is.
    Query,
    /// Nothing: the connection goes back as it is (for code that only uses
    /// `Client::transaction`, whose guard rolls back on drop, and never cancels a query).
    Nothing,
}

/// A reset query for [`Recycle::Custom`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResetQuery(Arc<str>);

impl ResetQuery {
    /// The query.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Recycle {
    /// [`Recycle::Custom`] with `query`, run on every return.
    ///
    /// # Errors
    ///
    /// [`PgError::ResetQuery`] for an empty query, and for one that drops the statements
    /// tokio-postgres prepared for itself (`DISCARD ALL`, `DEALLOCATE ALL`): the connection's
    /// next user would find them gone. [`Recycle::Always`] resets as much while keeping them.
    pub fn custom(query: impl Into<String>) -> Result<Recycle, PgError> {
        let query = query.into();
        let why = if query.trim().is_empty() {
            Some("it is empty")
        } else if session::scan(&query).has(session::Dirt::LASTING) {
            Some(
                "it drops the statements tokio-postgres prepared for itself (DISCARD ALL, DEALLOCATE ALL) or loads a library; Recycle::Always resets the session and keeps them",
            )
        } else {
            None
        };
        match why {
            Some(why) => Err(PgError::ResetQuery { query, why }),
            None => Ok(Recycle::Custom(ResetQuery(query.into()))),
        }
    }
}

/// Starts PostgreSQL connections.
#[derive(Debug, Clone)]
pub struct PgManager<T = NoTls> {
    config: Config,
    target: SessionTarget,
    hosts: Arc<hosts::Hosts>,
    tls: T,
    recycle: Recycle,
    statement_cache: usize,
    hooks: Hooks<PgConnection>,
    /// Custom settings every connection defines (`custom_settings`), lower case.
    custom: Arc<[Box<[u8]>]>,
    /// Functions the application declared neutral (`neutral_functions`), lower case.
    neutral: Arc<[Box<[u8]>]>,
}

/// How many prepared statements each connection keeps by default.
pub const STATEMENT_CACHE: usize = 256;

impl PgManager<NoTls> {
    /// A manager for a connection string (`postgres://user@host:port/db` or key=value form),
    /// without TLS. Its `target_session_attrs` may be any of libpq's ([`SessionTarget`]).
    ///
    /// # Errors
    ///
    /// When the string cannot be parsed.
    pub fn new(url: &str) -> Result<Self, PgError> {
        let (url, target) = hosts::split_target(url);
        let manager = Self::from_config(url.parse().map_err(PgError::Postgres)?);
        Ok(match target {
            Some(target) => manager.target_session_attrs(target),
            None => manager,
        })
    }

    /// A manager for settings read with serde (see [`PgSettings`]), without TLS.
    ///
    /// # Errors
    ///
    /// When the settings' `url` cannot be parsed.
    #[cfg(feature = "serde")]
    #[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
    pub fn from_settings(settings: &PgSettings) -> Result<Self, PgError> {
        let manager = Self::from_config(settings.to_config()?);
        let in_url = settings
            .url
            .as_deref()
            .and_then(|url| hosts::split_target(url).1);
        Ok(match settings.target_session_attrs.or(in_url) {
            Some(target) => manager.target_session_attrs(target),
            None => manager,
        })
    }

    /// A manager for a parsed [`Config`], without TLS.
    #[must_use]
    pub fn from_config(config: Config) -> Self {
        let target = match config.get_target_session_attrs() {
            tokio_postgres::config::TargetSessionAttrs::ReadWrite => SessionTarget::ReadWrite,
            tokio_postgres::config::TargetSessionAttrs::ReadOnly => SessionTarget::ReadOnly,
            _ => SessionTarget::Any,
        };
        PgManager {
            config,
            target,
            hosts: Arc::new(hosts::Hosts::new(HOST_RECHECK)),
            tls: NoTls,
            recycle: Recycle::default(),
            statement_cache: STATEMENT_CACHE,
            hooks: Hooks::default(),
            custom: Arc::from(Vec::new()),
            neutral: Arc::from(Vec::new()),
        }
    }
}

impl<T> PgManager<T> {
    /// The same manager, connecting through `tls`.
    #[must_use]
    pub fn with_tls<U>(self, tls: U) -> PgManager<U> {
        PgManager {
            config: self.config,
            target: self.target,
            hosts: self.hosts,
            tls,
            recycle: self.recycle,
            statement_cache: self.statement_cache,
            hooks: self.hooks,
            custom: self.custom,
            neutral: self.neutral,
        }
    }

    /// The same manager, connecting with TLS through rustls as `config` says (its crypto
    /// provider, its roots, its verifier). The connection's `sslmode` still decides whether
    /// TLS is required (`require`) or only preferred (the default).
    #[cfg(feature = "rustls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "rustls")))]
    #[must_use]
    pub fn with_rustls(
        self,
        config: rustls::ClientConfig,
    ) -> PgManager<tokio_postgres_rustls::MakeRustlsConnect> {
        self.with_tls(tokio_postgres_rustls::MakeRustlsConnect::new(config))
    }

    /// Which kind of server the connections must be on, among the config's hosts (libpq's
    /// `target_session_attrs`; default: the config's, else [`SessionTarget::Any`]). A
    /// connection that learns its server is no longer of that kind — a standby promoted, a
    /// primary in recovery or made read-only, a write refused as read-only (SQLSTATE 25006) —
    /// is replaced when it is next given back or taken, and its host is tried last until its
    /// recheck (see [`PgManager::host_recheck`]).
    #[must_use]
    pub fn target_session_attrs(mut self, target: SessionTarget) -> Self {
        self.target = target;
        self
    }

    /// How long a host that could not be connected to, or was of the wrong kind, is tried
    /// after the others (default [`HOST_RECHECK`]; a host that keeps failing waits up to
    /// eight times as long). Every connect still tries every host: this only orders them.
    #[must_use]
    pub fn host_recheck(mut self, recheck: std::time::Duration) -> Self {
        self.hosts = Arc::new(hosts::Hosts::new(recheck));
        self
    }

    /// The kind of server the connections must be on.
    #[must_use]
    pub fn session_target(&self) -> SessionTarget {
        self.target
    }

    /// What to do with connections given back (default: [`Recycle::Observed`]).
    #[must_use]
    pub fn recycle(mut self, recycle: Recycle) -> Self {
        self.recycle = recycle;
        self
    }

    /// Custom settings (`app.tenant`) the application sets, for row-level security or the
    /// like. Every connection defines each (as `''`) when it opens, so a connection whose
    /// user set one is reset to what a new connection reads, `''`, and kept. A custom setting
    /// set that this list does not name has the connection replaced instead: once set, a
    /// custom setting stays defined on the session (`''` after `RESET ALL`, where a new
    /// connection reads `NULL`), so no reset can hand the next user a session like a new
    /// one (docs/design.md, "Recycling on return").
    #[must_use]
    pub fn custom_settings<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.custom = names
            .into_iter()
            .map(|n| {
                n.as_ref()
                    .to_ascii_lowercase()
                    .into_bytes()
                    .into_boxed_slice()
            })
            .collect();
        self
    }

    /// Functions of the application's own that leave no session state: a call of one is
    /// not read as dirty. The session scan cannot see into a function body, so by default a
    /// call of any function not known to leave nothing (a built-in such as `count` or
    /// `jsonb_build_object`) costs a full reset on return; a function declared here does not.
    /// Names match the function's own name, without its schema (`app.audit(…)` matches
    /// `audit`), case-insensitively; a call by a quoted name is never matched. Declaring a
    /// function that does leave state (a `set_config`, a temporary table, a lock) hands that
    /// state to the next user (docs/design.md, "Recycling on return").
    #[must_use]
    pub fn neutral_functions<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.neutral = names
            .into_iter()
            .map(|n| {
                n.as_ref()
                    .to_ascii_lowercase()
                    .into_bytes()
                    .into_boxed_slice()
            })
            .collect();
        self
    }

    /// How many prepared statements each connection keeps for
    /// [`PgConnection::prepare_cached`] (default [`STATEMENT_CACHE`]; 0 keeps none).
    #[must_use]
    pub fn statement_cache(mut self, capacity: usize) -> Self {
        self.statement_cache = capacity;
        self
    }

    /// Runs `hooks` on every connection: `after_connect` once it is open, `after_return`
    /// once a returned connection is clean (see [`Hooks`]). Add per-connection setup here
    /// rather than by wrapping the manager: a wrapper must forward every hook of
    /// [`Manager`], and one that forgets `needs_recycle` or `recycle` hands the next user
    /// the last user's transaction.
    #[must_use]
    pub fn hooks(mut self, hooks: Hooks<PgConnection>) -> Self {
        self.hooks = hooks;
        self
    }

    /// The connection settings.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }
}

/// A pooled connection: dereferences to [`Client`].
#[derive(Debug)]
pub struct PgConnection {
    /// Boxed: the pool moves a member by value on every take and return, and a pointer moves
    /// for less than the ~300 bytes of a client and its cache.
    parts: Box<Parts>,
}

/// A connection's state.
#[derive(Debug)]
struct Parts {
    client: Client,
    /// What the connection's stream layer saw go by.
    seen: Arc<watch::Seen>,
    statements: statements::Statements,
    /// Resolves when the connection's driver task has ended.
    ended: tokio::sync::oneshot::Receiver<()>,
    /// Cancels the running query.
    cancel: connect::Cancel,
    /// A cancel request was sent and not seen to land (its query ended otherwise): it may
    /// still cancel whatever the connection runs next, so the connection serves nobody else.
    stray_cancel: std::sync::atomic::AtomicBool,
    /// The index of its host in the config's list.
    host: usize,
}

impl PgConnection {
    /// The session's transaction status as the server last stated it, read without a round
    /// trip; [`TxStatus::Unsettled`] while an answer is outstanding, or while the connection's
    /// driver may hold a request not yet written (it has been woken and has not run since) —
    /// which is most often so for a moment right after an extended-protocol statement
    /// (`execute`, `query`) returns, and rarely after a simple one (`batch_execute`); in a
    /// loop of 2 000 `SELECT 1` on a two-worker runtime, 1 999 and 6. Use
    /// [`settled`](PgConnection::settled) for the status once the driver has caught up.
    #[must_use]
    pub fn tx_status(&self) -> TxStatus {
        self.parts.seen.status()
    }

    /// Waits until the connection's driver has written every request made so far and every
    /// answer is read, then returns the transaction status. Bound it with a timeout: a
    /// request that never ends (a query running for ever, a `COPY` whose sink is kept)
    /// keeps it waiting.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    pub async fn settled(&self) -> TxStatus {
        self.parts.seen.settled().await
    }

    /// Prepares `query`, or returns the statement this connection prepared for it before.
    /// The cache is bounded (the statement used least recently makes room) and belongs to the
    /// connection: a replaced connection starts with an empty one.
    ///
    /// # Errors
    ///
    /// What preparing on the server returns.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a statement whose preparation was cancelled is not cached.
    pub async fn prepare_cached(&self, query: &str) -> Result<Statement, tokio_postgres::Error> {
        self.parts
            .statements
            .prepare(&self.parts.client, query, &[])
            .await
    }

    /// [`prepare_cached`](PgConnection::prepare_cached) with the parameters' types given
    /// (as `Client::prepare_typed`); cached by query and types together.
    ///
    /// # Errors
    ///
    /// What preparing on the server returns.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a statement whose preparation was cancelled is not cached.
    pub async fn prepare_typed_cached(
        &self,
        query: &str,
        types: &[Type],
    ) -> Result<Statement, tokio_postgres::Error> {
        self.parts
            .statements
            .prepare(&self.parts.client, query, types)
            .await
    }

    /// Begins a transaction, as `Client::transaction` does, on a guard that also reaches
    /// this connection's statement cache ([`PgTransaction::prepare_cached`]). Dropped
    /// uncommitted, it rolls back (and a connection given back meanwhile waits for that).
    ///
    /// # Errors
    ///
    /// What `BEGIN` returns.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a `BEGIN` dropped before its answer may still run; the connection's
    /// return then sees the transaction open and rolls it back (with [`Recycle::Observed`],
    /// [`Recycle::Transaction`], [`Recycle::Always`] and [`Recycle::Query`]).
    pub async fn transaction(&mut self) -> Result<PgTransaction<'_>, tokio_postgres::Error> {
        let Parts {
            client, statements, ..
        } = &mut *self.parts;
        Ok(PgTransaction {
            inner: client.transaction().await?,
            statements,
        })
    }

    /// A token that cancels the query this connection is running, from anywhere (another
    /// task, a timeout): `conn.cancel_token().cancel_query(NoTls)` as with tokio-postgres.
    /// It stands in for `Client::cancel_token`, whose `cancel_query` cannot reach the server
    /// of a socket pooler-postgres opened.
    #[must_use]
    pub fn cancel_token(&self) -> PgCancelToken {
        PgCancelToken {
            token: self.parts.client.cancel_token(),
            route: self.parts.cancel.route(),
        }
    }

    /// Asks the server to cancel the query this connection is running, if any: its caller
    /// gets an error (SQLSTATE 57014, `query_canceled`). The request goes over a new socket
    /// to the same server, through the manager's TLS connector.
    ///
    /// Use this rather than `Client::cancel_token().cancel_query(..)`: that one needs the
    /// server's address, which tokio-postgres records only for sockets it opens itself (this
    /// connection's socket is opened by pooler-postgres, to watch the transaction status).
    /// A token's `cancel_query_raw` works as it is.
    ///
    /// # Errors
    ///
    /// When the server cannot be reached, or TLS cannot be set up.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before the request is written, nothing is cancelled; after, the
    /// server cancels the query all the same.
    pub async fn cancel_query(&self) -> Result<(), PgError> {
        self.parts
            .cancel
            .send(self.parts.client.cancel_token())
            .await
    }

    /// Runs `query` — a request on this connection — until `deadline`; past it the server is
    /// asked to cancel the request ([`cancel_query`](Self::cancel_query)), which then ends
    /// with SQLSTATE 57014 (`query_canceled`). So one deadline covers a whole request: take
    /// the connection with the budget, hand the database what is left of it.
    ///
    /// ```no_run
    /// # async fn f(pool: pooler_postgres::Pool) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// let budget = Duration::from_secs(1);
    /// let deadline = tokio::time::Instant::now() + budget;
    /// let conn = pool.take_member(budget).await?;
    /// let rows = conn.until(deadline, conn.query("SELECT 1", &[])).await?;
    /// # drop(rows); Ok(()) }
    /// ```
    ///
    /// A query that ends otherwise once the cancel request is on its way (done in time after
    /// all, or failed) may leave that request to cancel whatever the connection runs next:
    /// such a connection is replaced when it is given back, never handed to another user.
    ///
    /// # Errors
    ///
    /// The query's own: `query_canceled` when it was cancelled at the deadline. A cancel
    /// request that cannot be sent (the server unreachable) leaves the query running to its
    /// end.
    ///
    /// # Cancel safety
    ///
    /// As the query's own: dropped, its request is abandoned as any dropped query is, and the
    /// connection is made clean when it is given back.
    pub async fn until<F, T>(
        &self,
        deadline: tokio::time::Instant,
        query: F,
    ) -> Result<T, tokio_postgres::Error>
    where
        F: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let mut query = std::pin::pin!(query);
        if let Ok(done) = tokio::time::timeout_at(deadline, query.as_mut()).await {
            return done;
        }
        // Marked before the request may leave, cleared once it is seen to land: so a `until`
        // dropped meanwhile leaves the connection marked too.
        let stray = &self.parts.stray_cancel;
        stray.store(true, std::sync::atomic::Ordering::Release);
        let mut cancel = std::pin::pin!(self.cancel_query());
        let mut sent = false;
        let done = std::future::poll_fn(|cx| {
            // The query first: once it has ended, the cancel request is not waited for.
            if let std::task::Poll::Ready(done) = query.as_mut().poll(cx) {
                return std::task::Poll::Ready(done);
            }
            if !sent && cancel.as_mut().poll(cx).is_ready() {
                sent = true;
            }
            std::task::Poll::Pending
        })
        .await;
        let landed = matches!(&done, Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED));
        if landed {
            stray.store(false, std::sync::atomic::Ordering::Release);
        }
        done
    }

    /// The statement cache's size, capacity, hits and misses.
    #[must_use]
    pub fn statement_cache(&self) -> CacheStats {
        self.parts.statements.stats()
    }

    /// Forgets every cached statement (after `DISCARD ALL`, or a schema change that
    /// invalidates them).
    pub fn clear_statement_cache(&self) {
        self.parts.statements.clear();
    }
}

/// A transaction on a pooled connection: dereferences to tokio-postgres's
/// [`Transaction`](tokio_postgres::Transaction), and reaches the connection's statement cache.
pub struct PgTransaction<'a> {
    inner: tokio_postgres::Transaction<'a>,
    statements: &'a statements::Statements,
}

impl std::fmt::Debug for PgTransaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTransaction").finish_non_exhaustive()
    }
}

impl<'a> PgTransaction<'a> {
    /// [`PgConnection::prepare_cached`], inside the transaction: the cache is the
    /// connection's, and a statement prepared here serves after the transaction too.
    ///
    /// # Errors
    ///
    /// What preparing on the server returns.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a statement whose preparation was cancelled is not cached.
    pub async fn prepare_cached(&self, query: &str) -> Result<Statement, tokio_postgres::Error> {
        self.statements.prepare(&self.inner, query, &[]).await
    }

    /// [`PgConnection::prepare_typed_cached`], inside the transaction.
    ///
    /// # Errors
    ///
    /// What preparing on the server returns.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a statement whose preparation was cancelled is not cached.
    pub async fn prepare_typed_cached(
        &self,
        query: &str,
        types: &[Type],
    ) -> Result<Statement, tokio_postgres::Error> {
        self.statements.prepare(&self.inner, query, types).await
    }

    /// Commits the transaction.
    ///
    /// # Errors
    ///
    /// What `COMMIT` returns.
    ///
    /// # Cancel safety
    ///
    /// As `Transaction::commit`: dropped, the transaction is rolled back unless the `COMMIT`
    /// was already on its way.
    pub async fn commit(self) -> Result<(), tokio_postgres::Error> {
        self.inner.commit().await
    }

    /// Rolls the transaction back.
    ///
    /// # Errors
    ///
    /// What `ROLLBACK` returns.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped, the transaction is rolled back all the same.
    pub async fn rollback(self) -> Result<(), tokio_postgres::Error> {
        self.inner.rollback().await
    }

    /// tokio-postgres's transaction itself.
    #[must_use]
    pub fn into_inner(self) -> tokio_postgres::Transaction<'a> {
        self.inner
    }
}

impl<'a> Deref for PgTransaction<'a> {
    type Target = tokio_postgres::Transaction<'a>;
    fn deref(&self) -> &tokio_postgres::Transaction<'a> {
        &self.inner
    }
}

impl DerefMut for PgTransaction<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.inner
    }
}

/// Cancels the query a pooled connection is running ([`PgConnection::cancel_token`]).
/// Cheap to clone, and `Send`: hand it to another task.
#[derive(Clone)]
pub struct PgCancelToken {
    token: CancelToken,
    route: Arc<connect::Route>,
}

impl std::fmt::Debug for PgCancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgCancelToken").finish_non_exhaustive()
    }
}

impl PgCancelToken {
    /// Asks the server to cancel the connection's running query, over a new socket to the
    /// same server through `tls` (`NoTls`, or a connector such as the one the manager uses).
    /// The query's caller gets SQLSTATE 57014 (`query_canceled`); a connection running
    /// nothing is not affected.
    ///
    /// # Errors
    ///
    /// When the server cannot be reached, or TLS cannot be set up.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before the request is written, nothing is cancelled; after, the
    /// server cancels the query all the same.
    pub async fn cancel_query<T>(&self, tls: T) -> Result<(), PgError>
    where
        T: MakeTlsConnect<WatchedSocket>,
        T::TlsConnect: Send,
    {
        self.route.cancel(&self.token, tls).await
    }

    /// tokio-postgres's token, for `cancel_query_raw` over a stream of your own.
    #[must_use]
    pub fn raw(&self) -> &CancelToken {
        &self.token
    }
}

impl Deref for PgConnection {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.parts.client
    }
}

impl DerefMut for PgConnection {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.parts.client
    }
}

impl<T> Manager for PgManager<T>
where
    T: MakeTlsConnect<WatchedSocket> + Clone + Send + Sync + 'static,
    T::TlsConnect: Send + 'static,
    <T::TlsConnect as TlsConnect<WatchedSocket>>::Future: Send + 'static,
    <T::TlsConnect as TlsConnect<WatchedSocket>>::Stream: Send + Unpin + 'static,
{
    type Member = PgConnection;
    type Error = PgError;

    async fn start(&self, ctx: &MemberContext) -> Result<PgConnection, PgError> {
        let connect::Opened {
            client,
            connection,
            seen,
            cancel,
            host,
        } = connect::connect(&self.config, &self.tls, self.target, &self.hosts).await?;
        let (done, ended) = tokio::sync::oneshot::channel();
        let (pool, id) = (ctx.pool_name().to_owned(), ctx.member_id());
        let connection = watch::Driven::new(connection, seen.clone());
        ctx.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(pool = %pool, member = id, error = %e, "postgres connection ended");
            }
            let _ = done.send(());
        });
        Ok(PgConnection {
            parts: Box::new(Parts {
                client,
                seen,
                statements: statements::Statements::new(self.statement_cache),
                ended,
                cancel,
                stray_cancel: std::sync::atomic::AtomicBool::new(false),
                host,
            }),
        })
    }

    async fn initialize(&self, conn: &mut PgConnection) -> Result<(), PgError> {
        conn.parts
            .seen
            .declare(self.custom.clone(), self.neutral.clone());
        if !self.custom.is_empty() {
            conn.parts
                .client
                .batch_execute(&define(&self.custom))
                .await?;
        }
        self.hooks
            .run_after_connect(conn)
            .await
            .map_err(PgError::Hook)?;
        // What the hook set is the session every user starts from.
        let _ = tokio::time::timeout(SETTLE, conn.parts.seen.settled()).await;
        conn.parts.seen.resync();
        conn.parts.seen.forget_served();
        Ok(())
    }

    async fn check(&self, conn: &mut PgConnection) -> Result<(), PgError> {
        let checked = conn.parts.client.simple_query("").await;
        conn.parts.seen.forget_served();
        checked?;
        Ok(())
    }

    /// The server's own time per request during the use (docs/design.md, "Admission"), so
    /// an admission limit follows the database, not the work an application does between
    /// statements while it holds the connection.
    fn latency(&self, conn: &PgConnection) -> Latency {
        conn.parts
            .seen
            .served()
            .map_or(Latency::Unmeasured, Latency::Measured)
    }

    fn is_broken(&self, conn: &PgConnection) -> bool {
        // A connection whose server is in copy-in mode cannot serve anyone else: its COPY's
        // sink is still alive (or forgotten), and only the sink can end it. Nor one whose
        // server still sends a `COPY … TO STDOUT` (its stream dropped midway: draining it
        // could take minutes). Nor one a cancel request may still reach (`until`).
        if conn.parts.client.is_closed()
            || conn.parts.seen.in_copy()
            || conn.parts.seen.copy_out()
            || conn
                .parts
                .stray_cancel
                .load(std::sync::atomic::Ordering::Acquire)
        {
            return true;
        }
        // Its server changed role (a failover): retired, and its host tried last.
        let lost = self.target.lost(&conn.parts.seen);
        if lost {
            let count = self
                .config
                .get_hosts()
                .len()
                .max(self.config.get_hostaddrs().len());
            self.hosts.wrong_kind(conn.parts.host, count);
        }
        lost
    }

    async fn stop(&self, conn: PgConnection) {
        let Parts {
            client,
            ended,
            seen,
            ..
        } = *conn.parts;
        // Dropping the client makes the connection send Terminate and finish — unless its
        // driver waits on a COPY that will never end, or would read the rest of one sent:
        // then the pool ends the driver.
        drop(client);
        if !seen.in_copy() && !seen.copy_out() {
            let _ = ended.await;
        }
    }

    fn needs_recycle(&self, conn: &PgConnection) -> bool {
        let seen = &conn.parts.seen;
        let due = match self.recycle {
            Recycle::Observed => seen.status() != TxStatus::Idle || !seen.dirt().is_clean(),
            Recycle::Transaction => seen.status() != TxStatus::Idle,
            Recycle::Always | Recycle::Custom(_) | Recycle::Query => true,
            Recycle::Nothing => false,
        };
        due || self.hooks.has_after_return()
    }

    async fn recycle(&self, conn: &mut PgConnection) -> Result<(), PgError> {
        let recycled = self.reset(conn).await;
        conn.parts.seen.forget_served();
        recycled
    }
}

impl<T> PgManager<T> {
    /// [`Manager::recycle`]'s work: the session cleaned as `recycle` says, and the hooks run.
    async fn reset(&self, conn: &mut PgConnection) -> Result<(), PgError> {
        let reset = clean(&self.recycle, conn).await?;
        let hooked = (reset && self.hooks.has_after_connect()) || self.hooks.has_after_return();
        if !hooked {
            // `clean` left the counts settled: nothing more was sent.
            return Ok(());
        }
        if reset {
            // The reset took the session back to its start, before `after_connect`: a new
            // connection has been through the hook, so this one goes through it again.
            self.hooks
                .run_after_connect(conn)
                .await
                .map_err(PgError::Hook)?;
        }
        self.hooks
            .run_after_return(conn)
            .await
            .map_err(PgError::Hook)?;
        // The hooks' own statements are part of the clean session they leave; they were
        // answered, so past a short wait for the driver the counts can only be off by a
        // protocol turn the layer does not follow, which the resync heals.
        let _ = tokio::time::timeout(SETTLE, conn.parts.seen.settled()).await;
        conn.parts.seen.resync();
        Ok(())
    }
}

/// The statement that defines the custom settings `names` as `''`.
fn define(names: &[Box<[u8]>]) -> String {
    let mut sql = String::from("SELECT ");
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str("set_config('");
        sql.push_str(&String::from_utf8_lossy(name).replace('\'', "''"));
        sql.push_str("', '', false)");
    }
    sql
}

/// How long a returned connection waits for an outstanding answer before asking the server
/// with a query instead.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// What resets every piece of session state a statement can leave (as `DISCARD ALL` does,
/// except that the statements tokio-postgres prepared at the protocol level are kept:
/// tokio-postgres and the statement cache still hold them).
const RESET_ALL: &str = "CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; UNLISTEN *; \
SELECT pg_advisory_unlock_all(); DISCARD TEMP; DISCARD SEQUENCES; ";

/// Deallocates the statements prepared with SQL `PREPARE` (and only those).
const DEALLOCATE_SQL: &str = "DO $pooler$DECLARE n text; BEGIN FOR n IN SELECT name FROM \
pg_prepared_statements WHERE from_sql LOOP EXECUTE 'DEALLOCATE ' || quote_ident(n); END LOOP; \
END$pooler$; ";

/// Makes a returned connection clean as `recycle` says; `true` if the session was reset to
/// its start (settings included).
async fn clean(recycle: &Recycle, conn: &mut PgConnection) -> Result<bool, PgError> {
    use session::Dirt;
    let status = match recycle {
        Recycle::Nothing => return Ok(false),
        Recycle::Query => {
            rollback_if_open(conn).await?;
            // Our answer came last: every request is answered, whatever the layer counted.
            conn.parts.seen.resync();
            return Ok(false);
        }
        _ => match tokio::time::timeout(SETTLE, conn.parts.seen.settled()).await {
            Ok(status) => status,
            Err(_) => TxStatus::Unsettled,
        },
    };
    if conn.parts.seen.in_copy() {
        return Err(PgError::Unclean("it was given back in COPY FROM STDIN"));
    }
    if status == TxStatus::Unsettled {
        // An answer still outstanding past the wait (a long query whose future was
        // dropped): ask, behind it.
        rollback_if_open(conn).await?;
    }
    let dirt = conn.parts.seen.dirt();
    if !matches!(recycle, Recycle::Transaction) && dirt.has(Dirt::LASTING) {
        return Err(PgError::Unclean(
            "a statement dropped what no reset restores (LOAD, DISCARD ALL, DEALLOCATE ALL)",
        ));
    }
    if !matches!(recycle, Recycle::Transaction) && dirt.has(Dirt::CUSTOM) {
        return Err(PgError::Unclean(
            "a custom setting was set that PgManager::custom_settings does not name (no reset undefines it)",
        ));
    }
    let mut sql = String::new();
    if matches!(status, TxStatus::InTransaction | TxStatus::Failed) {
        sql.push_str("ROLLBACK; ");
    }
    match recycle {
        Recycle::Observed => {
            for (bit, reset) in [
                (Dirt::HOLD, "CLOSE ALL; "),
                (
                    Dirt::SETTING,
                    "SET SESSION AUTHORIZATION DEFAULT; RESET ALL; ",
                ),
                (Dirt::LISTEN, "UNLISTEN *; "),
                (Dirt::ADVISORY, "SELECT pg_advisory_unlock_all(); "),
                (Dirt::TEMP, "DISCARD TEMP; "),
                (Dirt::PREPARED, DEALLOCATE_SQL),
            ] {
                if dirt.has(bit) {
                    sql.push_str(reset);
                }
            }
        }
        Recycle::Always => {
            sql.push_str(RESET_ALL);
            sql.push_str(DEALLOCATE_SQL);
        }
        Recycle::Custom(query) => {
            // Its own message: a custom query may hold a statement that refuses to run in
            // the implicit transaction of a multi-statement query. Both go out at once.
            let custom = conn.parts.client.batch_execute(query.as_str());
            if sql.is_empty() {
                custom.await?;
            } else {
                let rollback = conn.parts.client.batch_execute("ROLLBACK");
                let (rolled, reset) = futures_util::future::join(rollback, custom).await;
                rolled?;
                reset?;
            }
            conn.parts.seen.resync();
            return Ok(true);
        }
        Recycle::Transaction | Recycle::Query | Recycle::Nothing => {}
    }
    if !sql.is_empty() {
        conn.parts.client.batch_execute(&sql).await?;
    }
    // Nobody else can use the connection now, and the last answer was to the pool's own
    // query (or nothing was outstanding): every request is answered and the session clean.
    conn.parts.seen.resync();
    Ok(match recycle {
        Recycle::Observed => dirt.has(Dirt::SETTING),
        _ => matches!(recycle, Recycle::Always),
    })
}

/// One round trip asks whether a transaction is open, and a second rolls it back if so.
async fn rollback_if_open(conn: &mut PgConnection) -> Result<(), PgError> {
    let messages = conn
        .parts
        .client
        .simple_query("SELECT now() = statement_timestamp()")
        .await?;
    let outside = messages
        .iter()
        .any(|m| matches!(m, SimpleQueryMessage::Row(row) if row.get(0) == Some("t")));
    if !outside {
        conn.parts.client.batch_execute("ROLLBACK").await?;
    }
    Ok(())
}
