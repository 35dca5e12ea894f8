#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod connect;
#[cfg(feature = "serde")]
mod settings;
mod statements;
mod watch;

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use pooler::{Manager, MemberContext};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, Config, NoTls, SimpleQueryMessage, Statement};

pub use crate::connect::{PgError, PgSocket, WatchTls, WatchedSocket};
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use crate::settings::{PgSettings, SslModeName};
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

/// What happens to a connection when it is given back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Recycle {
    /// The transaction status the server stated last decides, with no round trip: idle →
    /// offered again at once; inside a transaction, or in a failed one → `ROLLBACK` first.
    /// If an answer is still on its way (an extended query's future finishes a moment before
    /// its ReadyForQuery is read; a `Transaction` dropped uncommitted has its `ROLLBACK` in
    /// flight), the return waits for it, up to a second, then decides; past that it falls back
    /// to [`Recycle::Query`]. The default.
    #[default]
    Observed,
    /// One round trip on every return asks whether the last user left an explicit transaction
    /// open (`now() = statement_timestamp()` is false only inside one); if so it is rolled
    /// back. A connection whose transaction failed cannot answer and is replaced.
    Query,
    /// Nothing: the connection goes back as it is (for code that only uses
    /// `Client::transaction`, whose guard rolls back on drop).
    Nothing,
}

/// Starts PostgreSQL connections.
#[derive(Debug, Clone)]
pub struct PgManager<T = NoTls> {
    config: Config,
    tls: T,
    recycle: Recycle,
    statement_cache: usize,
}

/// How many prepared statements each connection keeps by default.
pub const STATEMENT_CACHE: usize = 256;

impl PgManager<NoTls> {
    /// A manager for a connection string (`postgres://user@host:port/db` or key=value form),
    /// without TLS.
    ///
    /// # Errors
    ///
    /// When the string cannot be parsed.
    pub fn new(url: &str) -> Result<Self, PgError> {
        Ok(Self::from_config(url.parse().map_err(PgError::Postgres)?))
    }

    /// A manager for settings read with serde (see [`PgSettings`]), without TLS.
    ///
    /// # Errors
    ///
    /// When the settings' `url` cannot be parsed.
    #[cfg(feature = "serde")]
    #[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
    pub fn from_settings(settings: &PgSettings) -> Result<Self, PgError> {
        Ok(Self::from_config(settings.to_config()?))
    }

    /// A manager for a parsed [`Config`], without TLS.
    #[must_use]
    pub fn from_config(config: Config) -> Self {
        PgManager {
            config,
            tls: NoTls,
            recycle: Recycle::default(),
            statement_cache: STATEMENT_CACHE,
        }
    }
}

impl<T> PgManager<T> {
    /// The same manager, connecting through `tls`.
    #[must_use]
    pub fn with_tls<U>(self, tls: U) -> PgManager<U> {
        PgManager {
            config: self.config,
            tls,
            recycle: self.recycle,
            statement_cache: self.statement_cache,
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

    /// What to do with connections given back (default: [`Recycle::Observed`]).
    #[must_use]
    pub fn recycle(mut self, recycle: Recycle) -> Self {
        self.recycle = recycle;
        self
    }

    /// How many prepared statements each connection keeps for
    /// [`PgConnection::prepare_cached`] (default [`STATEMENT_CACHE`]; 0 keeps none).
    #[must_use]
    pub fn statement_cache(mut self, capacity: usize) -> Self {
        self.statement_cache = capacity;
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
}

impl PgConnection {
    /// The session's transaction status as the server last stated it, read without a round
    /// trip; [`TxStatus::Unsettled`] while an answer is outstanding.
    #[must_use]
    pub fn tx_status(&self) -> TxStatus {
        self.parts.seen.status()
    }

    /// Prepares `query`, or returns the statement this connection prepared for it before.
    /// The cache is bounded (the oldest statement is dropped to make room) and belongs to the
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
            .prepare(&self.parts.client, query)
            .await
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
        } = connect::connect(&self.config, &self.tls).await?;
        let (done, ended) = tokio::sync::oneshot::channel();
        let (pool, id) = (ctx.pool_name().to_owned(), ctx.member_id());
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
            }),
        })
    }

    async fn check(&self, conn: &mut PgConnection) -> Result<(), PgError> {
        conn.parts.client.simple_query("").await?;
        Ok(())
    }

    fn is_broken(&self, conn: &PgConnection) -> bool {
        conn.parts.client.is_closed()
    }

    async fn stop(&self, conn: PgConnection) {
        let Parts { client, ended, .. } = *conn.parts;
        // Dropping the client makes the connection send Terminate and finish.
        drop(client);
        let _ = ended.await;
    }

    fn needs_recycle(&self, conn: &PgConnection) -> bool {
        match self.recycle {
            Recycle::Observed => conn.tx_status() != TxStatus::Idle,
            Recycle::Query => true,
            Recycle::Nothing => false,
        }
    }

    async fn recycle(&self, conn: &mut PgConnection) -> Result<(), PgError> {
        let status = match (self.recycle, conn.tx_status()) {
            (Recycle::Nothing, _) => return Ok(()),
            (Recycle::Query, _) => return rollback_if_open(conn).await,
            // An answer is still on its way (an extended query's future finishes at
            // CommandComplete, a moment before its ReadyForQuery is read; a dropped
            // Transaction's ROLLBACK is in flight): wait for it rather than ask.
            (Recycle::Observed, TxStatus::Unsettled) => {
                match tokio::time::timeout(SETTLE, conn.parts.seen.settled()).await {
                    Ok(status) => status,
                    Err(_) => return rollback_if_open(conn).await,
                }
            }
            (Recycle::Observed, status) => status,
        };
        match status {
            TxStatus::Idle => Ok(()),
            TxStatus::InTransaction | TxStatus::Failed => {
                conn.parts.client.batch_execute("ROLLBACK").await?;
                Ok(())
            }
            TxStatus::Unsettled => rollback_if_open(conn).await,
        }
    }
}

/// How long a returned connection waits for an outstanding answer before asking the server
/// with a query instead.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

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
    // Nobody else can use the connection now, and our answer came last: every request is
    // answered, whatever the layer counted (a protocol turn it does not follow is healed here).
    conn.parts.seen.resync();
    Ok(())
}
