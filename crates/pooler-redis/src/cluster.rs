//! Redis Cluster members (feature `cluster`): redis-rs's async cluster connection, which
//! routes each command to the node that owns its key's slot, follows `MOVED` and `ASK`,
//! refreshes the slot map and reconnects to nodes by itself — with the pool's hand-over
//! tracking around it (docs/design.md, "Redis Cluster").
//!
//! A cluster connection holds one connection per node, shared by whatever is sent through
//! it. What a user can leave on it cannot be put back with a command: `UNWATCH`, `DISCARD`
//! and `CLIENT SETNAME` carry no key, so the cluster client sends them to some node, not
//! necessarily the one the user's `WATCH` or `MULTI` went to. So a member left anything but
//! clean — a command whose answer was not read, `MULTI`, `WATCH`, a blocking command, a mode
//! no command undoes — is replaced, not restored.

use pooler::{Manager, MemberContext};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{IntoConnectionInfo, RedisError, RedisResult};

use crate::track::Track;

/// Starts connections to a Redis Cluster.
#[derive(Clone)]
pub struct ClusterManager {
    client: ClusterClient,
}

impl std::fmt::Debug for ClusterManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterManager").finish_non_exhaustive()
    }
}

/// A pool of Redis Cluster connections.
pub type ClusterPool = pooler::Pool<ClusterManager>;

impl ClusterManager {
    /// A manager for the cluster that `nodes` (any of its nodes: `redis://host:port`)
    /// belong to, with the dead-link bounds pooler-redis sets on every socket
    /// ([`TCP_USER_TIMEOUT`](crate::TCP_USER_TIMEOUT), keepalives after 10 s idle).
    ///
    /// # Errors
    ///
    /// When an address cannot be parsed.
    pub fn new<T: IntoConnectionInfo>(nodes: impl IntoIterator<Item = T>) -> RedisResult<Self> {
        let client = ClusterClient::builder(nodes)
            .tcp_settings(crate::socket::tcp_settings())
            .build()?;
        Ok(ClusterManager { client })
    }

    /// A manager for a cluster client built as you choose (`ClusterClient::builder`: reads
    /// from replicas, retries, timeouts, credentials, TLS).
    #[must_use]
    pub fn from_client(client: ClusterClient) -> Self {
        ClusterManager { client }
    }
}

/// A pooled Redis Cluster connection. It implements redis-rs's
/// [`ConnectionLike`](redis::aio::ConnectionLike), so `query_async(&mut conn)` and
/// [`AsyncCommands`](redis::AsyncCommands) work on it (and on the pool's guard) directly; it
/// sees every command sent through it, and a connection left anything but clean is replaced
/// when it comes back.
pub struct RedisClusterConnection {
    conn: ClusterConnection,
    track: Track,
}

impl std::fmt::Debug for RedisClusterConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClusterConnection")
            .field("track", &self.track)
            .finish_non_exhaustive()
    }
}

impl RedisClusterConnection {
    /// The cluster connection underneath. Commands sent through it are not seen, so the
    /// connection is replaced when it comes back rather than handed on unseen.
    pub fn untracked(&mut self) -> &mut ClusterConnection {
        self.track.lasting = true;
        &mut self.conn
    }
}

impl redis::aio::ConnectionLike for RedisClusterConnection {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        let RedisClusterConnection { conn, track } = self;
        track.command(cmd, move || conn.req_packed_command(cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        let RedisClusterConnection { conn, track } = self;
        track.pipeline(pipeline, move || {
            conn.req_packed_commands(pipeline, offset, count)
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

impl Manager for ClusterManager {
    type Member = RedisClusterConnection;
    type Error = RedisError;

    /// Connects to the cluster. redis-rs runs the cluster connection's routing task and its
    /// nodes' drivers itself; they end when the member is dropped.
    async fn start(&self, _ctx: &MemberContext) -> Result<RedisClusterConnection, RedisError> {
        Ok(RedisClusterConnection {
            conn: self.client.get_async_connection().await?,
            track: Track::default(),
        })
    }

    async fn check(&self, conn: &mut RedisClusterConnection) -> Result<(), RedisError> {
        redis::cmd("PING")
            .query_async::<String>(&mut conn.conn)
            .await
            .map(drop)
    }

    fn is_broken(&self, conn: &RedisClusterConnection) -> bool {
        !conn.track.clean() || conn.track.demoted
    }
}
