//! What a returned connection is made as clean as (docs/design.md, "Recycling on return"):
//! the modes, and the cleaning each does with what the stream layer saw.

use std::sync::Arc;

use tokio_postgres::SimpleQueryMessage;

use crate::connect::PgError;
use crate::connection::PgConnection;
use crate::session;
use crate::watch::TxStatus;

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
    /// [`Recycle::Query`] does (behind a transaction pooler, where that question would go
    /// behind the request's sync point, the connection is replaced instead), and a
    /// connection that has not answered it within four more seconds is replaced (its
    /// request may never end: a `RowStream` kept past the return holds the rows, and the
    /// connection reads nothing until they are taken). A connection left in
    /// `COPY FROM STDIN`, or whose statements dropped what cannot be restored (`LOAD`,
    /// `DISCARD ALL`, `DEALLOCATE ALL`), is replaced. The default.
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
    /// back; a connection whose transaction failed cannot answer, or that has not answered
    /// within five seconds (a second's wait for what the last user left running, then four
    /// for the question sent behind it), is replaced. The session's state is left as it is.
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

/// The statement that defines the custom settings `names` as `''`.
pub(crate) fn define(names: &[Vec<u8>]) -> String {
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
pub(crate) const SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a returned connection with an answer still outstanding after [`SETTLE`] waits
/// for a question sent behind it before it is replaced.
const ASK_BEHIND: std::time::Duration = std::time::Duration::from_secs(4);

/// What resets every piece of session state a statement can leave (as `DISCARD ALL` does,
/// except that the statements tokio-postgres prepared at the protocol level are kept:
/// tokio-postgres and the statement cache still hold them).
const RESET_ALL: &str = "CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; UNLISTEN *; \
SELECT pg_advisory_unlock_all(); DISCARD TEMP; DISCARD SEQUENCES; ";

/// Deallocates the statements prepared with SQL `PREPARE` (and only those).
const DEALLOCATE_SQL: &str = "DO $pooler$DECLARE n text; BEGIN FOR n IN SELECT name FROM \
pg_prepared_statements WHERE from_sql LOOP EXECUTE 'DEALLOCATE ' || quote_ident(n); END LOOP; \
END$pooler$; ";

/// Waits up to [`SETTLE`] for every answer still outstanding, and returns the status then.
/// Behind a transaction pooler (`pooled`) an answer still outstanding past the wait refuses
/// the connection: whatever the pool sent now would go behind a sync point the pooler may
/// answer for another client (docs/design.md, "Behind PgBouncer").
pub(crate) async fn settle(conn: &PgConnection, pooled: bool) -> Result<TxStatus, PgError> {
    let status = tokio::time::timeout(SETTLE, conn.parts.seen.settled())
        .await
        .unwrap_or(TxStatus::Unsettled);
    if pooled && status == TxStatus::Unsettled && !conn.parts.seen.in_copy() {
        return Err(PgError::Unclean(
            "an answer was still outstanding, and behind a transaction pooler nothing is sent behind one",
        ));
    }
    Ok(status)
}

/// Whether a returned connection needs the cleaning `recycle` says, from what the stream
/// layer saw of it (`set_up`: as in [`clean`]).
pub(crate) fn due(recycle: &Recycle, conn: &PgConnection, set_up: bool) -> bool {
    let seen = &conn.parts.seen;
    match recycle {
        Recycle::Observed => {
            seen.status() != TxStatus::Idle || !seen.dirt().for_session(set_up).is_clean()
        }
        Recycle::Transaction => seen.status() != TxStatus::Idle,
        Recycle::Always | Recycle::Custom(_) | Recycle::Query => true,
        Recycle::Nothing => false,
    }
}

/// Makes a returned connection clean as `recycle` says; `true` if the session was reset to
/// its start (settings included). `pooled`: behind a transaction pooler, where nothing is
/// sent behind an outstanding answer. `set_up`: an `after_connect` hook made the session's
/// start, and runs again after a reset; so `Recycle::Observed` resets a dirty session whole
/// rather than the kinds of state the user left, which would undo part of the hook's
/// set-up (a user's `LISTEN` cleaned by `UNLISTEN *` took the hook's listener too) and
/// leave the rest for the hook to meet again (its `CREATE TEMP TABLE` then fails).
pub(crate) async fn clean(
    recycle: &Recycle,
    conn: &mut PgConnection,
    pooled: bool,
    set_up: bool,
) -> Result<bool, PgError> {
    use session::Dirt;
    if matches!(recycle, Recycle::Nothing) {
        return Ok(false);
    }
    // Behind a transaction pooler, an answer still outstanding here has refused the
    // connection already.
    let status = settle(conn, pooled).await?;
    if conn.parts.seen.in_copy() {
        return Err(PgError::Unclean("it was given back in COPY FROM STDIN"));
    }
    if matches!(recycle, Recycle::Query) {
        ask_behind(conn, ASK_BEHIND).await?;
        // Our answer came last: every request is answered, whatever the layer counted.
        conn.parts.seen.resync();
        return Ok(false);
    }
    if status == TxStatus::Unsettled {
        // An answer still outstanding past the wait (a long query whose future was
        // dropped): ask, behind it — for a while. A request still unanswered then may
        // never be: its rows wait for a `RowStream` the user kept past the return, and
        // tokio-postgres reads nothing more until they are taken.
        ask_behind(conn, ASK_BEHIND).await?;
    }
    let dirt = conn.parts.seen.dirt().for_session(set_up);
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
        Recycle::Observed if set_up && dirt.has(Dirt::ALL | Dirt::SET_UP) => {
            sql.push_str(RESET_ALL);
            sql.push_str(DEALLOCATE_SQL);
        }
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
        Recycle::Observed if set_up => dirt.has(Dirt::ALL | Dirt::SET_UP),
        Recycle::Observed => dirt.has(Dirt::SETTING),
        _ => matches!(recycle, Recycle::Always),
    })
}

/// [`rollback_if_open`], sent behind whatever is outstanding, within `bound`; past it the
/// connection is refused (replaced).
async fn ask_behind(conn: &mut PgConnection, bound: std::time::Duration) -> Result<(), PgError> {
    tokio::time::timeout(bound, rollback_if_open(conn))
        .await
        .map_err(|_| {
            PgError::Unclean(
                "a request was still unanswered seconds after the return (a query running on, or a RowStream kept past the return)",
            )
        })?
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
