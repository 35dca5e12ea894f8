#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use pooler::{Manager, MemberContext};

pub use mysql_async;
pub use pooler;

/// A pool of MySQL or MariaDB connections.
pub type Pool = pooler::Pool<MysqlManager>;
/// A connection taken from a [`Pool`]: dereferences to [`Conn`].
pub type Member = pooler::Member<MysqlManager>;

/// What happens to a connection when it is given back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Recycle {
    /// One `ROLLBACK` on every return: a transaction the last user left open ends there. The
    /// default.
    #[default]
    Rollback,
    /// One `COM_RESET_CONNECTION` on every return: ends a transaction and clears the session
    /// (variables, temporary tables, prepared statements).
    Reset,
    /// Nothing: the connection goes back as it is.
    Nothing,
}

/// Starts MySQL or MariaDB connections.
#[derive(Debug, Clone)]
pub struct MysqlManager {
    opts: Opts,
    recycle: Recycle,
}

impl MysqlManager {
    /// A manager for a URL (`mysql://user:password@host:port/db?...`).
    ///
    /// # Errors
    ///
    /// When the URL cannot be parsed.
    pub fn new(url: &str) -> Result<Self, mysql_async::Error> {
        Ok(Self::from_opts(Opts::from_url(url)?))
    }

    /// A manager for parsed [`Opts`] (build them with `mysql_async::OptsBuilder`).
    #[must_use]
    pub fn from_opts(opts: Opts) -> Self {
        MysqlManager {
            opts,
            recycle: Recycle::default(),
        }
    }

    /// What to do with connections given back (default: [`Recycle::Rollback`]).
    #[must_use]
    pub fn recycle(mut self, recycle: Recycle) -> Self {
        self.recycle = recycle;
        self
    }

    /// The connection options.
    #[must_use]
    pub fn opts(&self) -> &Opts {
        &self.opts
    }
}

impl Manager for MysqlManager {
    type Member = Conn;
    type Error = mysql_async::Error;

    async fn start(&self, _ctx: &MemberContext) -> Result<Conn, Self::Error> {
        Conn::new(self.opts.clone()).await
    }

    async fn check(&self, conn: &mut Conn) -> Result<(), Self::Error> {
        conn.ping().await
    }

    async fn stop(&self, conn: Conn) {
        // COM_QUIT; a connection that is already gone has nothing to say.
        let _ = conn.disconnect().await;
    }

    fn needs_recycle(&self, _conn: &Conn) -> bool {
        self.recycle != Recycle::Nothing
    }

    async fn recycle(&self, conn: &mut Conn) -> Result<(), Self::Error> {
        match self.recycle {
            Recycle::Rollback => conn.query_drop("ROLLBACK").await,
            Recycle::Reset => conn.reset().await.map(drop),
            Recycle::Nothing => Ok(()),
        }
    }
}
