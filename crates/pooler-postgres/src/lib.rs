#![doc = include_str!("../README.md")]

mod connect;
mod watch;

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use pooler::{Manager, MemberContext};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, Config, NoTls, SimpleQueryMessage};

pub use crate::connect::{PgError, PgSocket, WatchTls, WatchedSocket};
pub use crate::watch::{TxStatus, Watched};
pub use pooler;
pub use tokio_postgres;

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
    /// If an answer is still outstanding (a query whose future was dropped, a
    /// `Transaction` dropped uncommitted, whose `ROLLBACK` is in flight), it falls back to
    /// [`Recycle::Query`]. The default.
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
}

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

    /// A manager for a parsed [`Config`], without TLS.
    #[must_use]
    pub fn from_config(config: Config) -> Self {
        PgManager {
            config,
            tls: NoTls,
            recycle: Recycle::default(),
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
        }
    }

    /// What to do with connections given back (default: [`Recycle::Observed`]).
    #[must_use]
    pub fn recycle(mut self, recycle: Recycle) -> Self {
        self.recycle = recycle;
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
    client: Client,
    /// What the connection's stream layer saw go by.
    seen: Arc<watch::Seen>,
    /// Resolves when the connection's driver task has ended.
    ended: tokio::sync::oneshot::Receiver<()>,
}

impl PgConnection {
    /// The session's transaction status as the server last stated it, read without a round
    /// trip; [`TxStatus::Unsettled`] while an answer is outstanding.
    #[must_use]
    pub fn tx_status(&self) -> TxStatus {
        self.seen.status()
    }
}

impl Deref for PgConnection {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl DerefMut for PgConnection {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
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
        let mut tls = self.tls.clone();
        let (client, connection, seen) = connect::connect(&self.config, &mut tls).await?;
        let (done, ended) = tokio::sync::oneshot::channel();
        let (pool, id) = (ctx.pool_name().to_owned(), ctx.member_id());
        ctx.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(pool = %pool, member = id, error = %e, "postgres connection ended");
            }
            let _ = done.send(());
        });
        Ok(PgConnection {
            client,
            seen,
            ended,
        })
    }

    async fn check(&self, conn: &mut PgConnection) -> Result<(), PgError> {
        conn.client.simple_query("").await?;
        Ok(())
    }

    fn is_broken(&self, conn: &PgConnection) -> bool {
        conn.client.is_closed()
    }

    async fn stop(&self, conn: PgConnection) {
        let PgConnection { client, ended, .. } = conn;
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
        match (self.recycle, conn.tx_status()) {
            (Recycle::Observed, TxStatus::Idle) | (Recycle::Nothing, _) => Ok(()),
            (Recycle::Observed, TxStatus::InTransaction | TxStatus::Failed) => {
                conn.client.batch_execute("ROLLBACK").await?;
                Ok(())
            }
            _ => rollback_if_open(conn).await,
        }
    }
}

/// One round trip asks whether a transaction is open, and a second rolls it back if so.
async fn rollback_if_open(conn: &mut PgConnection) -> Result<(), PgError> {
    let messages = conn
        .client
        .simple_query("SELECT now() = statement_timestamp()")
        .await?;
    let outside = messages
        .iter()
        .any(|m| matches!(m, SimpleQueryMessage::Row(row) if row.get(0) == Some("t")));
    if !outside {
        conn.client.batch_execute("ROLLBACK").await?;
    }
    // Nobody else can use the connection now, and our answer came last: every request is
    // answered, whatever the layer counted (a protocol turn it does not follow is healed here).
    conn.seen.resync();
    Ok(())
}
