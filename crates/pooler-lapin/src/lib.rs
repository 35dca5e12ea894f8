#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::sync::Arc;

use futures_util::StreamExt as _;
use futures_util::future::{Either, select};
use lapin::{Channel, Connection, ConnectionProperties};
use pooler::{Manager, MemberContext};
use tokio::sync::Mutex;

pub use lapin;
pub use pooler;

/// A pool of AMQP channels.
pub type Pool = pooler::Pool<AmqpManager>;
/// A channel taken from a [`Pool`]: dereferences to [`AmqpChannel`], and so to [`Channel`].
pub type Member = pooler::Member<AmqpManager>;

/// The pool's connection and how many of its channels are open.
#[derive(Default)]
struct Shared {
    connection: Option<Connection>,
    /// Raised when the current connection reports an error: every channel on it is dead.
    lost: Arc<tokio::sync::watch::Sender<bool>>,
    /// Counts the connections opened: a channel remembers the one it was opened on.
    generation: u64,
    /// Channels open on the current connection.
    channels: usize,
}

/// A pooled channel: dereferences to [`Channel`].
#[derive(Debug)]
pub struct AmqpChannel {
    channel: Channel,
    generation: u64,
}

impl std::ops::Deref for AmqpChannel {
    type Target = Channel;
    fn deref(&self) -> &Channel {
        &self.channel
    }
}

/// Opens channels on one connection per pool, (re)connecting when needed.
///
/// Clones share that connection (a clone kept outside the pool can ask
/// [`connected`](AmqpManager::connected)); give each pool a manager of its own made with
/// [`new`](AmqpManager::new).
#[derive(Clone)]
pub struct AmqpManager {
    uri: String,
    properties: ConnectionProperties,
    shared: Arc<Mutex<Shared>>,
}

impl std::fmt::Debug for AmqpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URI may hold a password: only its scheme and host part are shown.
        let shown = self
            .uri
            .rsplit_once('@')
            .map_or(self.uri.as_str(), |(_, h)| h);
        f.debug_struct("AmqpManager")
            .field("host", &shown)
            .finish_non_exhaustive()
    }
}

impl AmqpManager {
    /// A manager for an AMQP URI (`amqp://user:password@host:port/vhost`).
    #[must_use]
    pub fn new(uri: impl Into<String>) -> Self {
        AmqpManager {
            uri: uri.into(),
            properties: ConnectionProperties::default(),
            shared: Arc::default(),
        }
    }

    /// The same manager, connecting with these connection properties.
    #[must_use]
    pub fn properties(mut self, properties: ConnectionProperties) -> Self {
        self.properties = properties;
        self
    }

    /// Whether the pool's connection is open now. Waits for a channel's start that is
    /// opening the connection.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn connected(&self) -> bool {
        let shared = self.shared.lock().await;
        shared
            .connection
            .as_ref()
            .is_some_and(|c| c.status().connected())
    }
}

/// Why a channel could not be opened, or is no longer usable.
#[derive(Debug)]
#[non_exhaustive]
pub enum AmqpError {
    /// The connection or the channel could not be opened.
    Lapin(lapin::Error),
    /// The channel was closed (by the broker, or with its connection).
    Closed,
}

impl std::fmt::Display for AmqpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AmqpError::Lapin(e) => write!(f, "{e}"),
            AmqpError::Closed => f.write_str("the channel is closed"),
        }
    }
}

impl std::error::Error for AmqpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AmqpError::Lapin(e) => Some(e),
            AmqpError::Closed => None,
        }
    }
}

impl From<lapin::Error> for AmqpError {
    fn from(e: lapin::Error) -> Self {
        AmqpError::Lapin(e)
    }
}

impl Manager for AmqpManager {
    type Member = AmqpChannel;
    type Error = AmqpError;

    async fn start(&self, ctx: &MemberContext) -> Result<AmqpChannel, AmqpError> {
        // Held across the connect, so concurrent starts open one connection, not several.
        let mut shared = self.shared.lock().await;
        if !shared
            .connection
            .as_ref()
            .is_some_and(|c| c.status().connected())
        {
            let connection = Connection::connect(&self.uri, self.properties.clone()).await?;
            shared.connection = Some(connection);
            shared.lost = Arc::new(tokio::sync::watch::Sender::new(false));
            shared.generation += 1;
            shared.channels = 0;
        }
        let Some(connection) = shared.connection.as_ref() else {
            return Err(AmqpError::Closed);
        };
        let channel = connection.create_channel().await?;
        // The member's driver: it ends when the connection is lost, so a lost connection is
        // every channel's death at once, free ones included. lapin's event stream hands each
        // event to one listener only, so the driver that receives the error raises `lost`
        // for the others.
        let lost = shared.lost.clone();
        let mut events = Box::pin(connection.events_listener());
        ctx.spawn(async move {
            let mut seen = lost.subscribe();
            loop {
                let gone = std::pin::pin!(seen.wait_for(|lost| *lost));
                match select(events.next(), gone).await {
                    Either::Left((Some(lapin::Event::Error(e)), _)) => {
                        tracing::debug!(error = %e, "the AMQP connection failed");
                        lost.send_replace(true);
                        break;
                    }
                    Either::Left((Some(_), _)) => {}
                    Either::Left((None, _)) | Either::Right(_) => break,
                }
            }
        });
        shared.channels += 1;
        Ok(AmqpChannel {
            channel,
            generation: shared.generation,
        })
    }

    async fn check(&self, channel: &mut AmqpChannel) -> Result<(), AmqpError> {
        if channel.status().connected() {
            Ok(())
        } else {
            Err(AmqpError::Closed)
        }
    }

    fn is_broken(&self, channel: &AmqpChannel) -> bool {
        !channel.status().connected()
    }

    async fn stop(&self, channel: AmqpChannel) {
        if channel.status().connected() {
            let _ = channel.close(200, "retired by pooler".into()).await;
        }
        let mut shared = self.shared.lock().await;
        if channel.generation != shared.generation {
            return; // opened on a connection since lost: not counted any more
        }
        shared.channels = shared.channels.saturating_sub(1);
        if shared.channels == 0
            && let Some(connection) = shared.connection.take()
            && connection.status().connected()
            && let Err(e) = connection
                .close(200, "pooler: no channel left".into())
                .await
        {
            tracing::debug!(error = %e, "closing the AMQP connection failed");
        }
    }
}
