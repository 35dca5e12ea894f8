//! What `Recycle::Reset` puts back beyond `COM_RESET_CONNECTION` (docs/design.md, "Recycling
//! on return"), and what it cannot put back.
//!
//! `COM_RESET_CONNECTION` leaves two things a user can change: the current database (`USE`)
//! and, on MariaDB, the current role (`SET ROLE`). So the reset is followed by one statement
//! that puts both back as a new connection has them: `USE` the configured database, and the
//! role a new connection starts with (MariaDB: the one the first connection reported, or
//! `NONE`; MySQL 8: `SET ROLE DEFAULT`). That statement is learned once, at the manager's
//! first connection. With no database configured, `COM_CHANGE_USER` does the reset instead,
//! which also takes the session back to no database.
//!
//! Two things no statement fixes make a connection unfit to hand on: `change_user` to
//! another user, password or database (mysql_async then keeps those as the connection's
//! options, and every reset would restore *them*), and a transaction guard forgotten with
//! `std::mem::forget` (mysql_async then believes for ever that the connection is in a
//! transaction, and refuses the next user's). mysql_async says the latter only in its
//! `Debug` output, which [`client_in_transaction`] reads without allocating.

use std::fmt::Write as _;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};

/// The statement that follows the reset (empty: none), learned from a new connection.
///
/// # Errors
///
/// What the server answers, unless it is that `CURRENT_ROLE()` does not exist (a server
/// without roles): a failure to learn fails the start rather than leave the role unrestored.
pub(crate) async fn learn(conn: &mut Conn, opts: &Opts) -> Result<String, mysql_async::Error> {
    /// `ER_SP_DOES_NOT_EXIST`: the function does not exist.
    const NO_SUCH_FUNCTION: u16 = 1305;
    let mut sql = String::new();
    if let Some(db) = opts.db_name() {
        sql.push_str("USE `");
        sql.push_str(&db.replace('`', "``"));
        sql.push_str("`; ");
    }
    let version: Option<String> = conn.query_first("SELECT VERSION()").await?;
    let maria = version.is_some_and(|v| v.contains("MariaDB"));
    // `CURRENT_ROLE()` exists where roles do (MariaDB 10.0.5, MySQL 8.0).
    let role: Result<Option<Option<String>>, _> = conn.query_first("SELECT CURRENT_ROLE()").await;
    match role {
        Ok(role) if maria => match role.flatten() {
            Some(role) if role != "NONE" => {
                sql.push_str("SET ROLE `");
                sql.push_str(&role.replace('`', "``"));
                sql.push_str("`; ");
            }
            _ => sql.push_str("SET ROLE NONE; "),
        },
        Ok(_) => sql.push_str("SET ROLE DEFAULT; "),
        Err(mysql_async::Error::Server(e)) if e.code == NO_SUCH_FUNCTION => {}
        Err(e) => return Err(e),
    }
    Ok(sql)
}

/// Whether `conn` still logs in as `opts` say (user, password, database): one a user has
/// `change_user`d elsewhere is not handed on.
pub(crate) fn same_login(conn: &Conn, opts: &Opts) -> bool {
    let now = conn.opts();
    now.user() == opts.user() && now.pass() == opts.pass() && now.db_name() == opts.db_name()
}

/// Whether mysql_async believes `conn` is inside a transaction (a `Transaction` guard
/// alive or forgotten). Read from its `Debug` output, streamed through a matcher that stops
/// the formatting at the answer.
pub(crate) fn client_in_transaction(conn: &Conn) -> bool {
    const FIELD: &str = "tx_status: ";
    /// Follows the output for `FIELD`, then reads the value after it.
    struct Find {
        matched: usize,
        value: Option<bool>,
    }
    impl std::fmt::Write for Find {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            for &b in s.as_bytes() {
                if self.matched == FIELD.len() {
                    self.value = Some(b == b'I'); // `InTransaction`
                    return Err(std::fmt::Error);
                }
                self.matched = if FIELD.as_bytes()[self.matched] == b {
                    self.matched + 1
                } else {
                    usize::from(FIELD.as_bytes()[0] == b)
                };
            }
            Ok(())
        }
    }
    let mut find = Find {
        matched: 0,
        value: None,
    };
    let _ = write!(find, "{conn:?}");
    // Not found (mysql_async's output changed): fail safe.
    find.value.unwrap_or(true)
}
