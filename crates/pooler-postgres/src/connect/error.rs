//! The backend's error ([`PgError`]): a socket or TLS that could not be set up, the server's
//! refusal, a reset that cannot serve or a session left unclean, a hook's error, a session
//! that is not the one the config asks for.

use std::io;

use crate::hosts::SessionTarget;

/// Why a connection could not be made.
#[derive(Debug)]
#[non_exhaustive]
pub enum PgError {
    /// The socket to a host could not be opened (the last host tried, if there are several).
    Connect {
        /// The host (a name, an address, or a socket directory).
        host: String,
        /// The port.
        port: u16,
        /// What the system said.
        source: io::Error,
    },
    /// The config names no host.
    NoHost,
    /// A setting that cannot serve, by its key: one the socket would refuse
    /// (`keepalives_idle` past the 32 767 s Linux allows; every connect would fail with
    /// "Invalid argument"), or a name in `custom_settings` that is no custom setting.
    Setting {
        /// The setting's key, as a URL or `PgSettings` names it.
        key: &'static str,
        /// What it must be.
        reason: &'static str,
    },
    /// The TLS connector could not be set up for the host.
    Tls(Box<dyn std::error::Error + Send + Sync>),
    /// The server or the protocol refused (authentication, a query, a closed connection).
    Postgres(tokio_postgres::Error),
    /// A custom reset query ([`Recycle::custom`](crate::Recycle::custom)) that cannot serve.
    ResetQuery {
        /// The query.
        query: String,
        /// Why not.
        why: &'static str,
    },
    /// A connection given back could not be made clean for its next user (it is replaced).
    Unclean(&'static str),
    /// A hook of the manager's ([`Hooks`](pooler::Hooks)) failed.
    Hook(Box<dyn std::error::Error + Send + Sync>),
    /// No host's server is the kind `target_session_attrs` asks for (the last one tried).
    WrongSession {
        /// The host.
        host: String,
        /// The port.
        port: u16,
        /// The kind asked for.
        want: SessionTarget,
        /// Whether the server is a standby in recovery.
        standby: bool,
        /// Whether its sessions are read-only (a standby's always are).
        read_only: bool,
    },
    /// A request passed its deadline ([`PgConnection::until`](crate::PgConnection::until))
    /// and the server answered neither it nor the cancel request within
    /// [`CANCEL_GRACE`](crate::CANCEL_GRACE) (a frozen server, a dead link): the request was
    /// abandoned. It may have reached the server, and may run there still: retry it only if
    /// it is idempotent. The connection is replaced when it is given back.
    Deadline {
        /// How long past its deadline it was abandoned.
        overran: std::time::Duration,
    },
}

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PgError::Connect { host, port, source } => {
                write!(f, "cannot connect to {host}:{port}: {source}")
            }
            PgError::NoHost => f.write_str("the connection config names no host"),
            PgError::Setting { key, reason } => write!(f, "the setting `{key}` {reason}"),
            PgError::Tls(e) => write!(f, "cannot set up TLS: {e}"),
            PgError::Postgres(e) => write!(f, "{e}"),
            PgError::ResetQuery { query, why } => {
                write!(f, "the reset query `{query}` cannot serve: {why}")
            }
            PgError::Unclean(why) => write!(f, "the connection cannot be made clean: {why}"),
            PgError::Deadline { overran } => write!(
                f,
                "the request was abandoned {overran:?} past its deadline, unanswered and its \
                 cancel unanswered: it may have reached the server"
            ),
            PgError::Hook(e) => write!(f, "a hook failed: {e}"),
            PgError::WrongSession {
                host,
                port,
                want,
                standby,
                read_only,
            } => {
                let is = match (standby, read_only) {
                    (true, _) => "a read-only standby",
                    (false, true) => "a primary whose sessions are read-only",
                    (false, false) => "a read-write primary",
                };
                write!(
                    f,
                    "the server at {host}:{port} is {is}, and target_session_attrs asks for {want}"
                )
            }
        }
    }
}

impl std::error::Error for PgError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PgError::Connect { source, .. } => Some(source),
            PgError::NoHost => None,
            PgError::Tls(e) | PgError::Hook(e) => Some(&**e),
            PgError::Postgres(e) => Some(e),
            PgError::ResetQuery { .. }
            | PgError::Setting { .. }
            | PgError::Unclean(_)
            | PgError::WrongSession { .. }
            | PgError::Deadline { .. } => None,
        }
    }
}

impl PgError {
    /// The SQLSTATE of the server's error, if the server refused (`query_canceled` for a
    /// request [`until`](crate::PgConnection::until) cancelled at its deadline).
    #[must_use]
    pub fn code(&self) -> Option<&tokio_postgres::error::SqlState> {
        match self {
            PgError::Postgres(e) => e.code(),
            _ => None,
        }
    }
}

impl From<tokio_postgres::Error> for PgError {
    fn from(e: tokio_postgres::Error) -> Self {
        PgError::Postgres(e)
    }
}
