#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod connect;
mod connection;
mod hosts;
mod queries;
mod recycle;
mod role;
mod session;
#[cfg(feature = "serde")]
mod settings;
mod statements;
mod verdicts;
mod watch;

use std::sync::Arc;

use pooler::{Hooks, Latency, Manager, MemberContext};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Config, NoTls};

pub use crate::connect::{PgError, PgSocket, WatchTls, WatchedSocket};
use crate::connection::Parts;
pub use crate::connection::{CANCEL_GRACE, PgCancelToken, PgConnection, PgTransaction};
pub use crate::hosts::{HOST_RECHECK, SessionTarget};
pub use crate::queries::Query;
pub use crate::recycle::{Recycle, ResetQuery};
use crate::recycle::{SETTLE, clean, define, due, settle};
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
/// A PostgreSQL connection taken from a [`Pool`]: dereferences to
/// [`Client`](tokio_postgres::Client).
pub type Member<T = NoTls> = pooler::Member<PgManager<T>>;

/// Starts PostgreSQL connections.
#[derive(Debug, Clone)]
pub struct PgManager<T = NoTls> {
    config: Config,
    target: SessionTarget,
    hosts: Arc<hosts::Hosts>,
    tls: T,
    recycle: Recycle,
    statement_cache: usize,
    /// Behind a transaction pooler (`transaction_pooling`).
    transaction_pooling: bool,
    hooks: Hooks<PgConnection>,
    /// Custom settings and neutral functions (`custom_settings`, `neutral_functions`).
    declared: Arc<session::Declared>,
}

/// Names as the scan compares them: lower case, as bytes.
fn lower_case<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Vec<Vec<u8>> {
    names
        .into_iter()
        .map(|n| n.as_ref().to_ascii_lowercase().into_bytes())
        .collect()
}

/// How many prepared statements each connection keeps by default.
pub const STATEMENT_CACHE: usize = 256;

impl PgManager<NoTls> {
    /// A manager for a connection string (`postgres://user@host:port/db` or key=value form),
    /// without TLS. Its `target_session_attrs` may be any of libpq's ([`SessionTarget`]).
    ///
    /// # Errors
    ///
    /// When the string cannot be parsed, or names a socket setting the system would refuse
    /// ([`PgError::Setting`]).
    pub fn new(url: &str) -> Result<Self, PgError> {
        let (url, target) = hosts::split_target(url);
        let config = url.parse().map_err(PgError::Postgres)?;
        connect::check(&config)?;
        let manager = Self::from_config(config);
        Ok(match target {
            Some(target) => manager.target_session_attrs(target),
            None => manager,
        })
    }

    /// A manager for settings read with serde (see [`PgSettings`]), without TLS.
    ///
    /// # Errors
    ///
    /// When the settings' `url` cannot be parsed, or a socket setting is one the system
    /// would refuse ([`PgError::Setting`]).
    #[cfg(feature = "serde")]
    #[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
    pub fn from_settings(settings: &PgSettings) -> Result<Self, PgError> {
        let config = settings.to_config()?;
        connect::check(&config)?;
        let manager = Self::from_config(config);
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
            transaction_pooling: false,
            hooks: Hooks::default(),
            declared: Arc::default(),
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
            transaction_pooling: self.transaction_pooling,
            hooks: self.hooks,
            declared: self.declared,
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
    /// one (docs/design.md, "Recycling on return"). Each name has its dot: one without is
    /// PostgreSQL's own setting, which the reset restores, and a pool declaring one has every
    /// start fail with [`PgError::Setting`] (it would be emptied on every connection).
    #[must_use]
    pub fn custom_settings<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Arc::make_mut(&mut self.declared).custom = lower_case(names);
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
        Arc::make_mut(&mut self.declared).neutral = lower_case(names);
        self
    }

    /// How many prepared statements each connection keeps for
    /// [`PgConnection::prepare_cached`] (default [`STATEMENT_CACHE`]; 0 keeps none).
    #[must_use]
    pub fn statement_cache(mut self, capacity: usize) -> Self {
        self.statement_cache = capacity;
        self
    }

    /// Whether the connections reach the server through a pooler that lends a server
    /// connection for one transaction at a time — PgBouncer's `pool_mode = transaction`,
    /// pgcat's and Supavisor's transaction mode (default `false`). There a statement
    /// prepared on the server lasts only until its transaction ends; the next statement may
    /// run on another server connection, where it does not exist ("prepared statement
    /// \"s3\" does not exist"), or where another client's of the same name does ("already
    /// exists"). Turned on:
    ///
    /// - A query *string* given to [`PgConnection`]'s `query`, `query_one`, `query_opt`,
    ///   `query_raw`, `execute` or `execute_raw` outside a transaction runs on the unnamed
    ///   statement, parsed, bound and executed in one round trip; its parameters' types are
    ///   described once (in a transaction of its own, so nothing is left on the server) and
    ///   kept in the statement cache, which holds those descriptions instead of statements.
    ///   Inside a transaction the server connection stays the same, and statements run as
    ///   tokio-postgres runs them.
    /// - [`PgConnection::prepare_cached`] keeps nothing: it prepares a statement for use in
    ///   the transaction under way (use [`PgTransaction::prepare_cached`]).
    /// - Session state (`SET` without `LOCAL`, `LISTEN`, advisory locks, temporary tables)
    ///   reaches a server connection other clients share once its transaction ends, and no
    ///   reset on return can reach it for sure: the return still resets, and logs a warning.
    ///   Use `SET LOCAL` / `set_config(…, true)` inside a transaction, and let PgBouncer reset
    ///   its server connections (`server_reset_query_always = 1`).
    ///
    /// See docs/design.md, "Behind PgBouncer". In session mode, leave it off.
    #[must_use]
    pub fn transaction_pooling(mut self, on: bool) -> Self {
        self.transaction_pooling = on;
        self
    }

    /// Runs `hooks` on every connection: `after_connect` once it is open, `after_return`
    /// once a returned connection is clean (see [`Hooks`]). Add per-connection setup here
    /// rather than by wrapping the manager: a wrapper must forward every hook of
    /// [`Manager`], and one that forgets `needs_recycle` or `recycle` hands the next user
    /// the last user's transaction. With an `after_connect` hook, a dirty session is reset
    /// whole and the hook runs again; `CLOSE`, `FETCH`, `DROP`, `ALTER` and the like, which
    /// may change its cursor or temporary table, count as dirty there.
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
        // Defined as `''` at each connect, a name of PostgreSQL's own (`search_path`) would
        // be emptied on every connection: refused before anything is connected.
        if self
            .declared
            .custom
            .iter()
            .any(|name| !name.contains(&b'.'))
        {
            return Err(PgError::Setting {
                key: "custom_settings",
                reason: "names custom settings, each with its dot (`app.tenant`): a name \
                         without one is PostgreSQL's own setting, which the reset restores",
            });
        }
        let connect::Opened {
            client,
            connection,
            seen,
            cancel,
            host,
        } = connect::connect(&self.config, &self.tls, self.target, &self.hosts).await?;
        let (done, ended) = tokio::sync::oneshot::channel();
        let end = watch::End {
            pool: ctx.pool_name().to_owned(),
            member: ctx.member_id(),
            done: Some(done),
        };
        ctx.spawn(watch::Driven::new(connection, seen.clone(), end));
        Ok(PgConnection {
            parts: Box::new(Parts {
                client,
                seen,
                statements: statements::Statements::new(
                    self.statement_cache,
                    !self.transaction_pooling,
                ),
                ended,
                cancel,
                stray_cancel: std::sync::atomic::AtomicBool::new(false),
                late: std::sync::atomic::AtomicBool::new(false),
                host,
            }),
        })
    }

    async fn initialize(&self, conn: &mut PgConnection) -> Result<(), PgError> {
        conn.parts.seen.declare(self.declared.clone());
        if !self.declared.custom.is_empty() {
            conn.parts
                .client
                .batch_execute(&define(&self.declared.custom))
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
        // A statement kept past the return closes itself when it is dropped, with a request
        // sent unanswered: the check waits for its answer rather than go behind it.
        settle(conn, self.transaction_pooling).await?;
        let checked = conn.parts.client.simple_query("").await;
        conn.parts.seen.forget_served();
        checked?;
        Ok(())
    }

    /// The server's own time per request since the last use asked (docs/design.md,
    /// "Admission"), so an admission limit follows the database, not the work an
    /// application does between statements while it holds the connection; late if a
    /// request was cut at its deadline by [`PgConnection::until`] meanwhile.
    fn latency(&self, conn: &PgConnection) -> Latency {
        let served = conn.parts.seen.served();
        if conn
            .parts
            .late
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            return Latency::Late;
        }
        served.map_or(Latency::Unmeasured, Latency::Measured)
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
        // driver waits on a COPY that will never end, or would read the rest of one sent, or
        // waits for an answer first (tokio-postgres says goodbye only with none
        // outstanding: a request abandoned at its deadline on a frozen server or a dead link
        // would hold the stop for all of `member_shutdown`): then the pool ends the driver.
        drop(client);
        if !seen.in_copy() && !seen.copy_out() && !seen.unanswered() {
            let _ = ended.await;
        }
    }

    fn needs_recycle(&self, conn: &PgConnection) -> bool {
        let set_up = self.hooks.has_after_connect();
        due(&self.recycle, conn, set_up) || self.hooks.has_after_return()
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
        let set_up = self.hooks.has_after_connect();
        if self.transaction_pooling {
            let dirt = conn.parts.seen.dirt().for_session(set_up);
            if !dirt.is_clean() {
                tracing::warn!(
                    state = %dirt,
                    "a statement may have left session state on a server connection the transaction pooler shares with other clients; the reset on return may not reach it (docs/design.md, \"Behind PgBouncer\")"
                );
            }
        }
        let reset = clean(&self.recycle, conn, self.transaction_pooling, set_up).await?;
        let hooked = (reset && set_up) || self.hooks.has_after_return();
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
