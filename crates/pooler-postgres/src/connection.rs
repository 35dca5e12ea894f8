//! A pooled connection, its transactions and its way to cancel: what a user holds.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::types::Type;
use tokio_postgres::{CancelToken, Client, Statement};

use crate::connect::{self, PgError, WatchedSocket};
use crate::statements::{self, CacheStats, Statements};
use crate::watch::{self, Seen, TxStatus};

/// How long [`PgConnection::until`] waits, past a request's deadline, for the request to
/// end once its cancel request is on its way; then it abandons the request
/// ([`PgError::Deadline`]). A cancel lands in a round trip to the server's postmaster and
/// the backend's next check for interrupts: milliseconds on a healthy server. A frozen
/// server or a dead link answers neither, and this bounds what the caller waits.
pub const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// A pooled connection: dereferences to [`Client`]. Its own `query`, `query_one`,
/// `query_opt`, `query_raw`, `execute` and `execute_raw` stand in for the client's (same
/// names and signatures), so that they can run on the unnamed statement behind a
/// transaction pooler.
#[derive(Debug)]
pub struct PgConnection {
    /// Boxed: the pool moves a member by value on every take and return, and a pointer moves
    /// for less than the ~300 bytes of a client and its cache.
    pub(crate) parts: Box<Parts>,
}

/// A connection's state.
#[derive(Debug)]
pub(crate) struct Parts {
    pub(crate) client: Client,
    /// What the connection's stream layer saw go by.
    pub(crate) seen: Arc<watch::Seen>,
    pub(crate) statements: statements::Statements,
    /// Resolves when the connection's driver task has ended.
    pub(crate) ended: tokio::sync::oneshot::Receiver<()>,
    /// Cancels the running query.
    pub(crate) cancel: connect::Cancel,
    /// A cancel request was sent and not seen to land (its query ended otherwise): it may
    /// still cancel whatever the connection runs next, so the connection serves nobody else.
    pub(crate) stray_cancel: std::sync::atomic::AtomicBool,
    /// A request was cut at its deadline by [`PgConnection::until`] since the admission
    /// limiter last asked: the use tells it was late, not a latency.
    pub(crate) late: std::sync::atomic::AtomicBool,
    /// The index of its host in the config's list.
    pub(crate) host: usize,
}

impl PgConnection {
    /// The session's transaction status as the server last stated it, read without a round
    /// trip; [`TxStatus::Unsettled`] while an answer is outstanding, or while the connection's
    /// driver may hold a request not yet written (it has been woken and has not run since).
    ///
    /// Right after a statement run through this connection's methods (`query`, `execute`,
    /// `batch_execute`, …, [`transaction`](PgConnection::transaction), a
    /// [`PgTransaction`]'s and its `commit` and `rollback`) returns, it reads the server's
    /// answer to it: they return once the driver has caught up. Not so while another statement
    /// is under way at the same time (its answer is outstanding), after
    /// [`query_raw`](PgConnection::query_raw) (its rows are still to come), or after a
    /// statement run through tokio-postgres's `Client` itself; use
    /// [`settled`](PgConnection::settled) then.
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
    /// connection: a replaced connection starts with an empty one. Behind a transaction
    /// pooler ([`PgManager::transaction_pooling`](crate::PgManager::transaction_pooling)) it
    /// keeps nothing and prepares each time: the statement lasts only as long as the
    /// transaction under way.
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
    /// this connection's statement cache ([`PgTransaction::prepare_cached`]) and runs
    /// statements as the connection's methods do. Dropped uncommitted, it rolls back (and a
    /// connection given back meanwhile waits for that).
    ///
    /// # Errors
    ///
    /// What `BEGIN` returns.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a `BEGIN` dropped before its answer may still run; the connection's
    /// return then sees the transaction open and rolls it back (with
    /// [`Recycle::Observed`](crate::Recycle::Observed),
    /// [`Recycle::Transaction`](crate::Recycle::Transaction),
    /// [`Recycle::Always`](crate::Recycle::Always) and
    /// [`Recycle::Query`](crate::Recycle::Query)).
    pub async fn transaction(&mut self) -> Result<PgTransaction<'_>, tokio_postgres::Error> {
        let Parts {
            client,
            statements,
            seen,
            ..
        } = &mut *self.parts;
        Ok(PgTransaction {
            inner: seen.settling(|| client.transaction()).await?,
            statements,
            seen,
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
    /// The query's own ([`PgError::Postgres`]): `query_canceled`
    /// ([`PgError::code`]) when it was cancelled at the deadline. [`PgError::Deadline`] when
    /// neither the query nor its cancel was answered within [`CANCEL_GRACE`] past the
    /// deadline (a frozen server, a dead link, a cancel request that cannot be sent): the
    /// request is abandoned then, so `until` returns by `deadline + CANCEL_GRACE` whatever
    /// the server does; the request may have reached it. A deadline more than
    /// [`MAX_TIME`](pooler::time::MAX_TIME) away is none.
    ///
    /// # Cancel safety
    ///
    /// As the query's own: dropped, its request is abandoned as any dropped query is, and the
    /// connection is made clean when it is given back.
    pub async fn until<F, T>(&self, deadline: tokio::time::Instant, query: F) -> Result<T, PgError>
    where
        F: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let mut query = std::pin::pin!(query);
        // A deadline further than any time key accepts is none, as for a take: one near the
        // end of `Instant`'s range would overflow the timer.
        let now = tokio::time::Instant::now();
        if deadline.saturating_duration_since(now) > pooler::time::MAX_TIME {
            return query.await.map_err(PgError::Postgres);
        }
        if let Ok(done) = tokio::time::timeout_at(deadline, query.as_mut()).await {
            return done.map_err(PgError::Postgres);
        }
        // Marked before the request may leave, cleared once it is seen to land: so a `until`
        // dropped meanwhile leaves the connection marked too.
        let stray = &self.parts.stray_cancel;
        stray.store(true, std::sync::atomic::Ordering::Release);
        self.parts
            .late
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let mut cancel = std::pin::pin!(self.cancel_query());
        let mut sent = false;
        let ended = std::future::poll_fn(|cx| {
            // The query first: once it has ended, the cancel request is not waited for.
            if let std::task::Poll::Ready(done) = query.as_mut().poll(cx) {
                return std::task::Poll::Ready(done);
            }
            if !sent && cancel.as_mut().poll(cx).is_ready() {
                sent = true;
            }
            std::task::Poll::Pending
        });
        // Abandoned unanswered past the grace: still marked, so it is replaced at its return.
        let Ok(done) = tokio::time::timeout_at(deadline + CANCEL_GRACE, ended).await else {
            return Err(PgError::Deadline {
                overran: deadline.elapsed(),
            });
        };
        let landed = matches!(&done, Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED));
        if landed {
            stray.store(false, std::sync::atomic::Ordering::Release);
        }
        done.map_err(PgError::Postgres)
    }

    /// What this connection's statements run on (the statement methods, `queries.rs`): its
    /// client, statement cache and stream layer's view.
    pub(crate) fn statement_parts(&self) -> (&Client, &Statements, &Seen) {
        (&self.parts.client, &self.parts.statements, &self.parts.seen)
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
/// [`Transaction`](tokio_postgres::Transaction), reaches the connection's statement cache, and
/// has the connection's statement methods (`query`, `execute`, `batch_execute`, …), which
/// shadow the transaction's.
pub struct PgTransaction<'a> {
    inner: tokio_postgres::Transaction<'a>,
    statements: &'a statements::Statements,
    seen: &'a watch::Seen,
}

impl std::fmt::Debug for PgTransaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTransaction").finish_non_exhaustive()
    }
}

impl<'a> PgTransaction<'a> {
    /// [`PgConnection::tx_status`], inside the transaction.
    #[must_use]
    pub fn tx_status(&self) -> TxStatus {
        self.seen.status()
    }

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
        self.seen.settling(|| self.inner.commit()).await
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
        self.seen.settling(|| self.inner.rollback()).await
    }

    /// What this transaction's statements run on (the statement methods, `queries.rs`): its
    /// connection's client, statement cache and stream layer's view.
    pub(crate) fn statement_parts(&self) -> (&Client, &Statements, &Seen) {
        (self.inner.client(), self.statements, self.seen)
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
