//! The statement methods of [`PgConnection`] and [`PgTransaction`]: tokio-postgres's, except
//! that a query *string* runs on the unnamed statement in one round trip, and that a statement
//! returns once the connection's transaction status reads the server's answer to it
//! (docs/design.md, "Statements").
//!
//! They have the names and signatures of [`Client`]'s, which they shadow: a call through a
//! pooled connection (`conn.query(…)`) finds them before the client's. Through the client
//! itself (`Client::query(&conn, …)`) tokio-postgres's run, with their named statements.
//!
//! Why the unnamed statement: tokio-postgres prepares a query string as a named statement in
//! one round trip, binds it in a second, and closes it after (a third request, whose answer
//! is still outstanding when the call returns). The unnamed statement is parsed, bound and
//! executed in one message group, and the server forgets it at the next Parse. Its parameters'
//! types must be given with it: they are described once per query and connection — behind a
//! transaction pooler, inside a transaction of their own (the pooler keeps one server
//! connection for a transaction, so the statement prepared to describe is closed where it was
//! prepared; a named statement run on its own could reach another server connection) — and
//! kept in the connection's statement cache. A query without parameters needs no description.

use std::future::Future;
use std::sync::{Arc, LazyLock};

use tokio_postgres::types::{BorrowToSql, ToSql, Type};
use tokio_postgres::{Client, Error, Row, RowStream, SimpleQueryMessage, Statement, ToStatement};

use crate::connection::{PgConnection, PgTransaction};
use crate::statements::Statements;
use crate::watch::{Seen, TxStatus};

mod sealed {
    pub trait Sealed {}
    impl Sealed for str {}
    impl Sealed for String {}
    impl Sealed for tokio_postgres::Statement {}
}

/// What the statement methods of [`PgConnection`] and [`PgTransaction`] take: a query string
/// (`str`, `String`) or a prepared [`Statement`], as tokio-postgres's [`ToStatement`]. Sealed.
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

/// A parameter as tokio-postgres's `*_typed` methods take it: with its type.
type Typed<'a> = (&'a (dyn ToSql + Sync), Type);

/// The parameter types of a query that has none.
static NO_TYPES: LazyLock<Arc<[Type]>> = LazyLock::new(|| Arc::from([]));

/// What a statement runs on: the connection's client (directly, or under a transaction), its
/// statement cache, and what its stream layer sees.
struct On<'a> {
    client: &'a Client,
    statements: &'a Statements,
    seen: &'a Seen,
}

/// The body of a statement method taking a slice of parameters: `$named` (tokio-postgres's
/// method) runs a prepared statement, `$typed` (its `*_typed` twin) a query string on the
/// unnamed statement with its types, as [`On::unnamed`] decides.
macro_rules! named_or_unnamed {
    ($on:ident, $statement:ident, $params:ident, $named:ident, $typed:ident) => {
        $on.seen
            .settling(|| async {
                match $on.unnamed($statement, $params.len()).await? {
                    None => $on.client.$named($statement, $params).await,
                    Some(types) => {
                        let query = query_of($statement);
                        let ran = $on.client.$typed(query, &typed($params, &types)).await;
                        $on.ran(query, ran)
                    }
                }
            })
            .await
    };
}

impl On<'_> {
    /// The parameter types with which `statement` runs on the unnamed statement, described
    /// now if need be; `None` when it runs as tokio-postgres runs it: a prepared statement,
    /// or `count` parameters where the query has another number (tokio-postgres's path says
    /// so with its own error).
    async fn unnamed<T: Query + ?Sized>(
        &self,
        statement: &T,
        count: usize,
    ) -> Result<Option<Arc<[Type]>>, Error> {
        let Some(query) = statement.text() else {
            return Ok(None);
        };
        if count == 0 {
            return Ok(Some(NO_TYPES.clone()));
        }
        let types = match self.statements.description(query) {
            Some(types) => types,
            None => {
                let types = self.describe(query).await?;
                self.statements.described(query, types.clone());
                types
            }
        };
        Ok((types.len() == count).then_some(types))
    }

    /// The parameter types of `query`, from a statement prepared and closed. Behind a
    /// transaction pooler and outside a transaction, inside one of its own (`BEGIN` and the
    /// Parse go out together).
    async fn describe(&self, query: &str) -> Result<Arc<[Type]>, Error> {
        let client = self.client;
        let params = |statement: Statement| Arc::<[Type]>::from(statement.params());
        if self.statements.kept() || self.seen.settled().await != TxStatus::Idle {
            return client.prepare(query).await.map(params);
        }
        let (begun, prepared) =
            futures_util::future::join(client.batch_execute("BEGIN"), client.prepare(query)).await;
        // The statement dropped here is closed before the COMMIT, on the same server
        // connection. A COMMIT whatever happened: it ends a failed transaction too.
        let types = prepared.map(params);
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
            self.statements.forget(query);
        }
        ran
    }

    pub(crate) async fn query<T: Query + ?Sized>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Error> {
        named_or_unnamed!(self, statement, params, query, query_typed)
    }

    pub(crate) async fn query_one<T: Query + ?Sized>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, Error> {
        named_or_unnamed!(self, statement, params, query_one, query_typed_one)
    }

    pub(crate) async fn query_opt<T: Query + ?Sized>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Error> {
        named_or_unnamed!(self, statement, params, query_opt, query_typed_opt)
    }

    pub(crate) async fn execute<T: Query + ?Sized>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, Error> {
        named_or_unnamed!(self, statement, params, execute, execute_typed)
    }

    /// Not settled: it returns with the statement under way, its rows still to come.
    pub(crate) async fn query_raw<T, P, I>(
        &self,
        statement: &T,
        params: I,
    ) -> Result<RowStream, Error>
    where
        T: Query + ?Sized,
        P: BorrowToSql,
        I: IntoIterator<Item = P>,
        I::IntoIter: ExactSizeIterator,
    {
        let params = params.into_iter();
        match self.unnamed(statement, params.len()).await? {
            None => self.client.query_raw(statement, params).await,
            Some(types) => {
                let query = query_of(statement);
                let params = params.zip(types.iter().cloned());
                self.ran(query, self.client.query_typed_raw(query, params).await)
            }
        }
    }

    pub(crate) async fn execute_raw<T, P, I>(&self, statement: &T, params: I) -> Result<u64, Error>
    where
        T: Query + ?Sized,
        P: BorrowToSql,
        I: IntoIterator<Item = P>,
        I::IntoIter: ExactSizeIterator,
    {
        self.seen
            .settling(|| async {
                let params = params.into_iter();
                match self.unnamed(statement, params.len()).await? {
                    None => self.client.execute_raw(statement, params).await,
                    Some(types) => {
                        let query = query_of(statement);
                        let params = params.zip(types.iter().cloned());
                        let changed = async {
                            let rows = self.client.query_typed_raw(query, params).await?;
                            let mut rows = std::pin::pin!(rows);
                            while futures_util::TryStreamExt::try_next(&mut rows)
                                .await?
                                .is_some()
                            {}
                            Ok(rows.rows_affected().unwrap_or(0))
                        };
                        self.ran(query, changed.await)
                    }
                }
            })
            .await
    }
}

/// The simple protocol's two statements: plain functions handing back the settling future
/// itself, not `async fn`s wrapping it in a state machine of their own (each layer copies the
/// future it awaits into its own: docs/design.md, "Real backends").
impl<'a> On<'a> {
    pub(crate) fn batch_execute(
        self,
        query: &'a str,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a {
        self.seen.settling(|| self.client.batch_execute(query))
    }

    pub(crate) fn simple_query(
        self,
        query: &'a str,
    ) -> impl Future<Output = Result<Vec<SimpleQueryMessage>, Error>> + Send + 'a {
        self.seen.settling(|| self.client.simple_query(query))
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

/// The public statement methods, the same on a connection and on a transaction: each runs on
/// what `self.on()` gives, built from the parts the type hands out (`statement_parts`).
macro_rules! statement_methods {
    () => {
        fn on(&self) -> On<'_> {
            let (client, statements, seen) = self.statement_parts();
            On {
                client,
                statements,
                seen,
            }
        }

        /// `Client::query`: the rows `statement` returns with `params`.
        ///
        /// A query string runs on the unnamed statement in one round trip (its parameters'
        /// types described once per connection and cached); a prepared
        /// [`Statement`](tokio_postgres::Statement) as tokio-postgres runs it. It returns once
        /// the transaction status reads the server's answer to it
        /// ([`tx_status`](PgConnection::tx_status)), unless another statement is under way
        /// through these methods at the same time (a statement sent through tokio-postgres's
        /// `Client` itself meanwhile is waited for).
        ///
        /// # Errors
        ///
        /// What `Client::query` returns.
        ///
        /// # Cancel safety
        ///
        /// As `Client::query`'s: a statement dropped after it was sent may still run. Dropped
        /// while its parameters are being described behind a transaction pooler, the
        /// connection may be left in the describing transaction; the pool's return rolls it
        /// back (every [`Recycle`](crate::Recycle) but `Nothing`).
        pub async fn query<T>(
            &self,
            statement: &T,
            params: &[&(dyn ToSql + Sync)],
        ) -> Result<Vec<Row>, Error>
        where
            T: Query + ?Sized,
        {
            self.on().query(statement, params).await
        }

        /// `Client::query_one`: the one row `statement` returns (an error for none or
        /// several); run as [`query`](Self::query).
        ///
        /// # Errors
        ///
        /// What `Client::query_one` returns.
        ///
        /// # Cancel safety
        ///
        /// As [`query`](Self::query)'s.
        pub async fn query_one<T>(
            &self,
            statement: &T,
            params: &[&(dyn ToSql + Sync)],
        ) -> Result<Row, Error>
        where
            T: Query + ?Sized,
        {
            self.on().query_one(statement, params).await
        }

        /// `Client::query_opt`: the row `statement` returns, if any (an error for several);
        /// run as [`query`](Self::query).
        ///
        /// # Errors
        ///
        /// What `Client::query_opt` returns.
        ///
        /// # Cancel safety
        ///
        /// As [`query`](Self::query)'s.
        pub async fn query_opt<T>(
            &self,
            statement: &T,
            params: &[&(dyn ToSql + Sync)],
        ) -> Result<Option<Row>, Error>
        where
            T: Query + ?Sized,
        {
            self.on().query_opt(statement, params).await
        }

        /// `Client::query_raw`: the rows `statement` returns, as a stream; run as
        /// [`query`](Self::query), except that it returns with the statement under way (the
        /// status settles once the stream has ended).
        ///
        /// # Errors
        ///
        /// What `Client::query_raw` returns.
        ///
        /// # Cancel safety
        ///
        /// As [`query`](Self::query)'s.
        pub async fn query_raw<T, P, I>(&self, statement: &T, params: I) -> Result<RowStream, Error>
        where
            T: Query + ?Sized,
            P: BorrowToSql,
            I: IntoIterator<Item = P>,
            I::IntoIter: ExactSizeIterator,
        {
            self.on().query_raw(statement, params).await
        }

        /// `Client::execute`: the number of rows `statement` changed; run as
        /// [`query`](Self::query).
        ///
        /// # Errors
        ///
        /// What `Client::execute` returns.
        ///
        /// # Cancel safety
        ///
        /// As [`query`](Self::query)'s.
        pub async fn execute<T>(
            &self,
            statement: &T,
            params: &[&(dyn ToSql + Sync)],
        ) -> Result<u64, Error>
        where
            T: Query + ?Sized,
        {
            self.on().execute(statement, params).await
        }

        /// `Client::execute_raw`: [`execute`](Self::execute) with the parameters as an
        /// iterator.
        ///
        /// # Errors
        ///
        /// What `Client::execute_raw` returns.
        ///
        /// # Cancel safety
        ///
        /// As [`query`](Self::query)'s.
        pub async fn execute_raw<T, P, I>(&self, statement: &T, params: I) -> Result<u64, Error>
        where
            T: Query + ?Sized,
            P: BorrowToSql,
            I: IntoIterator<Item = P>,
            I::IntoIter: ExactSizeIterator,
        {
            self.on().execute_raw(statement, params).await
        }

        /// `Client::batch_execute`: the statements of `query` over the simple protocol; it
        /// returns once the transaction status reads the server's answer, as
        /// [`query`](Self::query).
        ///
        /// # Errors
        ///
        /// What `Client::batch_execute` returns.
        ///
        /// # Cancel safety
        ///
        /// As `Client::batch_execute`'s: statements dropped after they were sent may still
        /// run.
        pub async fn batch_execute(&self, query: &str) -> Result<(), Error> {
            self.on().batch_execute(query).await
        }

        /// `Client::simple_query`: the rows and counts of `query`'s statements over the
        /// simple protocol, as text; it returns once the transaction status reads the
        /// server's answer, as [`query`](Self::query).
        ///
        /// # Errors
        ///
        /// What `Client::simple_query` returns.
        ///
        /// # Cancel safety
        ///
        /// As [`batch_execute`](Self::batch_execute)'s.
        pub async fn simple_query(&self, query: &str) -> Result<Vec<SimpleQueryMessage>, Error> {
            self.on().simple_query(query).await
        }
    };
}

impl PgConnection {
    statement_methods!();
}

impl PgTransaction<'_> {
    statement_methods!();
}
