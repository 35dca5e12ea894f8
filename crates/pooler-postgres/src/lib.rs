#![doc = include_str!("../README.md")]

use std::ops::{Deref, DerefMut};

use pooler::{Manager, MemberContext};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, Config, NoTls, SimpleQueryMessage, Socket};

pub use pooler;
pub use tokio_postgres;

/// A pool of PostgreSQL connections (through `T`, `NoTls` by default).
pub type Pool<T = NoTls> = pooler::Pool<PgManager<T>>;
/// A PostgreSQL connection taken from a [`Pool`]: dereferences to [`Client`].
pub type Member<T = NoTls> = pooler::Member<PgManager<T>>;

/// What happens to a connection when it is given back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Recycle {
    /// Before the connection is offered again, one round trip asks whether its last user
    /// left an explicit transaction open (`now() = statement_timestamp()` is false only
    /// inside one); if so it is rolled back. A connection whose transaction failed cannot
    /// answer and is replaced. Never sends a needless `ROLLBACK`, so the server logs no
    /// "no transaction in progress" warnings. The default.
    #[default]
    RollbackOpenTransaction,
    /// Nothing: the connection goes back as it is (fastest; for code that only uses
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
    pub fn new(url: &str) -> Result<Self, tokio_postgres::Error> {
        Ok(Self::from_config(url.parse()?))
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

    /// What to do with connections given back (default: roll back an open transaction).
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
    /// Resolves when the connection's driver task has ended.
    ended: tokio::sync::oneshot::Receiver<()>,
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
    T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    type Member = PgConnection;
    type Error = tokio_postgres::Error;

    async fn start(&self, ctx: &MemberContext) -> Result<PgConnection, Self::Error> {
        let (client, connection) = self.config.connect(self.tls.clone()).await?;
        let (done, ended) = tokio::sync::oneshot::channel();
        let (pool, id) = (ctx.pool_name().to_owned(), ctx.member_id());
        ctx.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(pool = %pool, member = id, error = %e, "postgres connection ended");
            }
            let _ = done.send(());
        });
        Ok(PgConnection { client, ended })
    }

    async fn check(&self, conn: &mut PgConnection) -> Result<(), Self::Error> {
        conn.client.simple_query("").await.map(drop)
    }

    fn is_broken(&self, conn: &PgConnection) -> bool {
        conn.client.is_closed()
    }

    async fn stop(&self, conn: PgConnection) {
        let PgConnection { client, ended } = conn;
        // Dropping the client makes the connection send Terminate and finish.
        drop(client);
        let _ = ended.await;
    }

    fn needs_recycle(&self, _conn: &PgConnection) -> bool {
        self.recycle == Recycle::RollbackOpenTransaction
    }

    async fn recycle(&self, conn: &mut PgConnection) -> Result<(), Self::Error> {
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
        Ok(())
    }
}
