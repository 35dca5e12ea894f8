//! [`PgConnection`]'s statement methods: tokio-postgres's own, except that behind a
//! transaction pooler a query *string* run outside a transaction goes on the unnamed
//! statement in one round trip (docs/design.md, "Behind PgBouncer").
//!
//! They have the names and signatures of [`Client`]'s, which they shadow: a call through a
//! pooled connection (`conn.query(…)`) finds them before the client's. Through the client
//! itself (`Client::query(&conn, …)`) tokio-postgres's run, with their named statements.
//!
//! Why the unnamed statement: tokio-postgres prepares a query string as a named statement in
//! one round trip and binds it in a second. A transaction pooler may hand the second to
//! another server connection, where the statement does not exist; and a statement left on a
//! server connection collides with another client's of the same name. The unnamed statement
//! is parsed, bound and executed in one message group, and the server forgets it at the next
//! Parse. Its parameters' types must be given with it: they are described once per query and
//! connection, inside a transaction of their own — the pooler keeps one server connection for
//! a transaction, so the statement prepared to describe is closed where it was prepared — and
//! kept in the connection's statement cache.

use std::sync::Arc;

use tokio_postgres::types::{BorrowToSql, ToSql, Type};
use tokio_postgres::{Error, Row, RowStream, Statement, ToStatement};

use crate::connection::PgConnection;
use crate::watch::TxStatus;

mod sealed {
    pub trait Sealed {}
    impl Sealed for str {}
    impl Sealed for String {}
    impl Sealed for tokio_postgres::Statement {}
}

/// What [`PgConnection`]'s statement methods take: a query string (`str`, `String`) or a
/// prepared [`Statement`], as tokio-postgres's [`ToStatement`]. Sealed.
pub trait Query: ToStatement + Sync + sealed::Sealed {
    /// The query's text, when it is one and not a prepared statement.
    #[doc(hidden)]
    fn text(&self) -> Option<&str>;
}

impl Query for str {
    fn text(&self) -> Option<&str> {
        Some(self)
    }
}

impl Query for String {
    fn text(&self) -> Option<&str> {
        Some(self)
    }
}

impl Query for Statement {
    fn text(&self) -> Option<&str> {
        None
    }
}

/// The body of a statement method taking a slice of parameters: `$named` (tokio-postgres's
/// method) runs it as tokio-postgres does, or `$typed` (its `*_typed` twin) on the unnamed
/// statement with the types described, as [`PgConnection::unnamed`] decides.
macro_rules! named_or_unnamed {
    ($conn:ident, $statement:ident, $params:ident, $named:ident, $typed:ident) => {
        match $conn.unnamed($statement, $params.len()).await? {
            None => $conn.parts.client.$named($statement, $params).await,
            Some(types) => {
                let query = query_of($statement);
                let ran = $conn
                    .parts
                    .client
                    .$typed(query, &typed($params, &types))
                    .await;
                $conn.ran(query, ran)
            }
        }
    };
}

/// A parameter as tokio-postgres's `*_typed` methods take it: with its type.
type Typed<'a> = (&'a (dyn ToSql + Sync), Type);

impl PgConnection {
    /// The parameter types with which `statement` runs on the unnamed statement, described
    /// now if need be; `None` when it runs as tokio-postgres runs it: not behind a
    /// transaction pooler, a prepared statement, inside a transaction (the server connection
    /// stays the same there), or `count` parameters where the query has another number
    /// (tokio-postgres's path says so with its own error).
    async fn unnamed<T: Query + ?Sized>(
        &self,
        statement: &T,
        count: usize,
    ) -> Result<Option<Arc<[Type]>>, Error> {
        let statements = &self.parts.statements;
        let Some(query) = statement.text() else {
            return Ok(None);
        };
        if statements.kept() || self.settled().await != TxStatus::Idle {
            return Ok(None);
        }
        let types = match statements.description(query) {
            Some(types) => types,
            None => {
                let types = self.describe(query).await?;
                statements.described(query, types.clone());
                types
            }
        };
        Ok((types.len() == count).then_some(types))
    }

    /// The parameter types of `query`, from a statement prepared and closed inside a
    /// transaction of its own (`BEGIN` and the Parse go out together).
    async fn describe(&self, query: &str) -> Result<Arc<[Type]>, Error> {
        let client = &self.parts.client;
        let (begun, prepared) =
            futures_util::future::join(client.batch_execute("BEGIN"), client.prepare(query)).await;
        // The statement dropped here is closed before the COMMIT, on the same server
        // connection. A COMMIT whatever happened: it ends a failed transaction too.
        let types = prepared.map(|statement| Arc::<[Type]>::from(statement.params()));
        let committed = client.batch_execute("COMMIT").await;
        begun?;
        let types = types?;
        committed?;
        Ok(types)
    }

    /// What running `query` on the unnamed statement returned; an error of any kind forgets
    /// its description, so the next run describes it again: the server refused it as
    /// described, or a parameter did not fit the type described (the schema may have changed
    /// under it, and the application with it).
    fn ran<R>(&self, query: &str, ran: Result<R, Error>) -> Result<R, Error> {
        if ran.is_err() {
            self.parts.statements.forget(query);
        }
        ran
    }

    /// `Client::query`: the rows `statement` returns with `params`; behind a transaction
    /// pooler, a query string outside a transaction runs on the unnamed statement
    /// ([`PgManager::transaction_pooling`](crate::PgManager::transaction_pooling)).
    ///
    /// # Errors
    ///
    /// What `Client::query` returns.
    ///
    /// # Cancel safety
    ///
    /// As `Client::query`'s: a statement dropped after it was sent may still run. Dropped
    /// while its parameters are being described, the connection may be left in the describing
    /// transaction; the pool's return rolls it back (every [`Recycle`](crate::Recycle) but
    /// `Nothing`).
    pub async fn query<T>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Error>
    where
        T: Query + ?Sized,
    {
        named_or_unnamed!(self, statement, params, query, query_typed)
    }

    /// `Client::query_one`: the one row `statement` returns (an error for none or several);
    /// behind a transaction pooler as [`query`](PgConnection::query).
    ///
    /// # Errors
    ///
    /// What `Client::query_one` returns.
    ///
    /// # Cancel safety
    ///
    /// As [`query`](PgConnection::query)'s.
    pub async fn query_one<T>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, Error>
    where
        T: Query + ?Sized,
    {
        named_or_unnamed!(self, statement, params, query_one, query_typed_one)
    }

    /// `Client::query_opt`: the row `statement` returns, if any (an error for several);
    /// behind a transaction pooler as [`query`](PgConnection::query).
    ///
    /// # Errors
    ///
    /// What `Client::query_opt` returns.
    ///
    /// # Cancel safety
    ///
    /// As [`query`](PgConnection::query)'s.
    pub async fn query_opt<T>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Error>
    where
        T: Query + ?Sized,
    {
        named_or_unnamed!(self, statement, params, query_opt, query_typed_opt)
    }

    /// `Client::query_raw`: the rows `statement` returns, as a stream; behind a transaction
    /// pooler as [`query`](PgConnection::query).
    ///
    /// # Errors
    ///
    /// What `Client::query_raw` returns.
    ///
    /// # Cancel safety
    ///
    /// As [`query`](PgConnection::query)'s.
    pub async fn query_raw<T, P, I>(&self, statement: &T, params: I) -> Result<RowStream, Error>
    where
        T: Query + ?Sized,
        P: BorrowToSql,
        I: IntoIterator<Item = P>,
        I::IntoIter: ExactSizeIterator,
    {
        let params = params.into_iter();
        match self.unnamed(statement, params.len()).await? {
            None => self.parts.client.query_raw(statement, params).await,
            Some(types) => {
                let params = params.zip(types.iter().cloned());
                let rows = self
                    .parts
                    .client
                    .query_typed_raw(query_of(statement), params);
                self.ran(query_of(statement), rows.await)
            }
        }
    }

    /// `Client::execute`: the number of rows `statement` changed; behind a transaction pooler
    /// as [`query`](PgConnection::query).
    ///
    /// # Errors
    ///
    /// What `Client::execute` returns.
    ///
    /// # Cancel safety
    ///
    /// As [`query`](PgConnection::query)'s.
    pub async fn execute<T>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, Error>
    where
        T: Query + ?Sized,
    {
        named_or_unnamed!(self, statement, params, execute, execute_typed)
    }

    /// `Client::execute_raw`: [`execute`](PgConnection::execute) with the parameters as an
    /// iterator.
    ///
    /// # Errors
    ///
    /// What `Client::execute_raw` returns.
    ///
    /// # Cancel safety
    ///
    /// As [`query`](PgConnection::query)'s.
    pub async fn execute_raw<T, P, I>(&self, statement: &T, params: I) -> Result<u64, Error>
    where
        T: Query + ?Sized,
        P: BorrowToSql,
        I: IntoIterator<Item = P>,
        I::IntoIter: ExactSizeIterator,
    {
        let params = params.into_iter();
        match self.unnamed(statement, params.len()).await? {
            None => self.parts.client.execute_raw(statement, params).await,
            Some(types) => {
                let params = params.zip(types.iter().cloned());
                let changed = async {
                    let rows = self
                        .parts
                        .client
                        .query_typed_raw(query_of(statement), params)
                        .await?;
                    let mut rows = std::pin::pin!(rows);
                    while futures_util::TryStreamExt::try_next(&mut rows)
                        .await?
                        .is_some()
                    {}
                    Ok(rows.rows_affected().unwrap_or(0))
                };
                self.ran(query_of(statement), changed.await)
            }
        }
    }
}

/// The text of a statement `unnamed` chose to run unnamed (only a query string is).
fn query_of<T: Query + ?Sized>(statement: &T) -> &str {
    statement.text().unwrap_or_default()
}

/// `params` with the types described.
fn typed<'a>(params: &[&'a (dyn ToSql + Sync)], types: &[Type]) -> Vec<Typed<'a>> {
    params.iter().copied().zip(types.iter().cloned()).collect()
}
