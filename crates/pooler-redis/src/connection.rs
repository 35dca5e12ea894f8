//! The pooled connection: redis-rs's multiplexed connection with the hand-over tracking
//! around every command sent through it (`track.rs`), and the driver it runs on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use redis::aio::MultiplexedConnection;

use crate::sentinel::Placed;
use crate::track::Track;

/// A pooled connection. It implements redis-rs's
/// [`ConnectionLike`](redis::aio::ConnectionLike), so `query_async(&mut conn)` and
/// [`AsyncCommands`](redis::AsyncCommands) work on it (and on the pool's guard) directly.
///
/// It sees every command sent through it, so that what a user leaves on the connection
/// never reaches the next one: an open `MULTI` is discarded, keys watched are unwatched, a
/// database selected and a name set are put back — in one round trip, and only when the user
/// changed them; a request whose answer never came (a cancelled `BLPOP k 0`) or a mode no
/// command undoes (`SUBSCRIBE`, `MONITOR`, `CLIENT REPLY`, `HELLO`, `AUTH`, `QUIT`) has the
/// connection replaced. [`untracked`](RedisConnection::untracked) reaches the multiplexed
/// connection underneath, and has the connection replaced when it comes back.
pub struct RedisConnection {
    pub(crate) conn: MultiplexedConnection,
    /// Set when the connection's driver has ended.
    pub(crate) ended: Arc<AtomicBool>,
    pub(crate) track: Track,
    /// The server the Sentinels named, when they did.
    pub(crate) placed: Option<Placed>,
    /// The name every user starts with: the manager's `client_name`, or the one its
    /// `after_connect` hook gave. A user's `CLIENT SETNAME` is put back to it.
    pub(crate) base_name: Option<String>,
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConnection")
            .field("ended", &self.ended.load(Ordering::Relaxed))
            .field("track", &self.track)
            .finish_non_exhaustive()
    }
}

impl RedisConnection {
    /// The multiplexed connection underneath. Commands sent through it (or through a clone
    /// of it) are not seen, so the connection is replaced when it comes back rather than
    /// handed on unseen.
    pub fn untracked(&mut self) -> &mut MultiplexedConnection {
        self.track.lasting = true;
        &mut self.conn
    }

    /// The database this connection's commands go to now.
    #[must_use]
    pub fn db(&self) -> i64 {
        self.track.db
    }
}

/// Commands run on the pooled connection itself, seen on their way.
impl redis::aio::ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        let RedisConnection { conn, track, .. } = self;
        // The inherent method: one boxed future per command (the track's), not two.
        track.command(cmd, move || conn.send_packed_command(cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        let RedisConnection { conn, track, .. } = self;
        track.pipeline(pipeline, move || {
            conn.send_packed_commands(pipeline, offset, count)
        })
    }

    fn get_db(&self) -> i64 {
        self.track.db
    }
}
