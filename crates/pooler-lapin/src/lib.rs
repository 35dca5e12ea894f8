#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures_util::StreamExt as _;
use futures_util::future::{Either, select};
use lapin::options::{BasicQosOptions, QueueDeleteOptions};
use lapin::tcp::OwnedTLSConfig;
use lapin::types::ShortString;
use lapin::{ConnectionProperties, DefaultConnectionBuilder};
use pooler::{Hooks, Manager, MemberContext};

pub use lapin;
pub use pooler;

mod channel;
#[cfg(feature = "serde")]
mod settings;
mod shared;

pub use channel::AmqpChannel;
use channel::Left;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use settings::{AmqpSettings, SettingsError};
use shared::{Shared, Slot};

/// A pool of AMQP channels.
pub type Pool = pooler::Pool<AmqpManager>;
/// A channel taken from a [`Pool`]: dereferences to [`AmqpChannel`], which has
/// `lapin::Channel`'s methods.
pub type Member = pooler::Member<AmqpManager>;

/// Opens channels on one connection per pool, (re)connecting when needed.
///
/// Clones share that connection (a clone kept outside the pool can ask
/// [`connected`](AmqpManager::connected)); give each pool a manager of its own made with
/// [`new`](AmqpManager::new).
#[derive(Clone)]
pub struct AmqpManager {
    uri: String,
    properties: ConnectionProperties,
    tls: OwnedTLSConfig,
    shared: Arc<Shared>,
    hooks: Hooks<AmqpChannel>,
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
            tls: OwnedTLSConfig::default(),
            shared: Arc::default(),
            hooks: Hooks::default(),
        }
    }

    /// A manager for settings read from a pools file or any serde format.
    ///
    /// # Errors
    ///
    /// [`SettingsError`] when the settings cannot make a URI.
    #[cfg(feature = "serde")]
    #[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
    pub fn from_settings(settings: &AmqpSettings) -> Result<Self, SettingsError> {
        let manager = Self::new(settings.to_uri()?);
        Ok(match &settings.connection_name {
            Some(name) => manager.properties(
                ConnectionProperties::default().with_connection_name(name.as_str().into()),
            ),
            None => manager,
        })
    }

    /// The same manager, connecting with these connection properties.
    #[must_use]
    pub fn properties(mut self, properties: ConnectionProperties) -> Self {
        self.properties = properties;
        self
    }

    /// The same manager, with what an `amqps://` connection needs beyond the system's roots:
    /// `cert_chain`, the PEM of the certificate authorities that signed the broker's
    /// certificate (a private CA), and `identity`, a client certificate and key for brokers
    /// that ask for one. The broker's certificate is verified against the roots and the
    /// host name in the URI.
    ///
    /// A TLS library must be on: this crate's `rustls` feature (rustls with ring, the
    /// system's roots), or one of lapin's own TLS features. Without one, an `amqps://`
    /// connection fails to start.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use pooler_lapin::AmqpManager;
    /// use pooler_lapin::lapin::tcp::OwnedTLSConfig;
    ///
    /// let ca = std::fs::read_to_string("/etc/rabbitmq/ca.pem")?;
    /// let manager = AmqpManager::new("amqps://app:secret@mq.internal:5671/%2f").tls(OwnedTLSConfig {
    ///     cert_chain: Some(ca),
    ///     identity: None,
    /// });
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn tls(mut self, config: OwnedTLSConfig) -> Self {
        self.tls = config;
        self
    }

    /// Runs `hooks` on every channel: `after_connect` once it is open, `after_return` once a
    /// returned channel is clean (see [`Hooks`]). Add per-channel setup here rather than by
    /// wrapping the manager: a wrapper must forward every hook of [`Manager`], and one that
    /// forgets `is_broken`, `needs_recycle` or `recycle` hands the next user a channel the
    /// broker is closing, or one left in transactional mode.
    #[must_use]
    pub fn hooks(mut self, hooks: Hooks<AmqpChannel>) -> Self {
        self.hooks = hooks;
        self
    }

    /// Whether the pool's connection is open now. Waits for a channel's start that is
    /// opening the connection.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn connected(&self) -> bool {
        let _opening = self.shared.opening.lock().await;
        self.shared
            .state()
            .connection
            .as_ref()
            .is_some_and(|c| c.status().connected())
    }
}

/// The heartbeat a connection asks for when its URI names none (docs/faults.md): the broker's
/// own default (RabbitMQ's 60 s) let a silently dead link go unnoticed for minutes; lapin
/// closes a connection that heard nothing for two heartbeats, so with 10 s a dead link is
/// found within 20–30 s (it is checked once a heartbeat) and its channels fail and are
/// replaced.
pub const DEFAULT_HEARTBEAT_SECS: u16 = 10;

/// How long a stop waits for the broker to answer its goodbye (the channel's close-ok, and
/// the connection's with the last channel). A broker the link reaches answers in
/// milliseconds; one it no longer reaches never does, and without a bound a pool's close —
/// graceful or immediate — waited for the heartbeats to notice the dead link (20 s with
/// the defaults). Past it the stop ends; what it dropped, lapin closes in the background.
pub const GOODBYE: std::time::Duration = std::time::Duration::from_millis(500);

/// `uri` asking for [`DEFAULT_HEARTBEAT_SECS`] unless it names a heartbeat of its own (`0`
/// turns heartbeats off, as the URI says).
fn with_heartbeat(uri: &str) -> String {
    let query = uri.split_once('?').map_or("", |(_, q)| q);
    if query
        .split('&')
        .any(|kv| kv.split('=').next() == Some("heartbeat"))
    {
        return uri.to_owned();
    }
    let sep = if uri.contains('?') { '&' } else { '?' };
    format!("{uri}{sep}heartbeat={DEFAULT_HEARTBEAT_SECS}")
}

/// The smallest frame AMQP 0-9-1 allows a peer to ask for (its `frame-min-size`).
const FRAME_MIN: u32 = 4096;

/// Why a `frame_max` under [`FRAME_MIN`] is refused.
const FRAME_TOO_SMALL: &str =
    "must be 0 (no limit) or at least 4096 bytes, the protocol's smallest frame";

/// Whether `uri` asks for a frame smaller than the protocol allows (0, no limit, is allowed):
/// the broker refuses every connection that does ("frame too large: 504 bytes"). A URI
/// lapin cannot read is left to lapin's own error.
fn frame_too_small(uri: &str) -> bool {
    uri.parse::<lapin::uri::AMQPUri>().is_ok_and(|uri| {
        uri.query
            .frame_max
            .is_some_and(|n| (1..FRAME_MIN).contains(&n))
    })
}

/// Why a channel could not be opened, or is no longer usable.
#[derive(Debug)]
#[non_exhaustive]
pub enum AmqpError {
    /// The connection or the channel could not be opened.
    Lapin(lapin::Error),
    /// The URI asks for what every connection would be refused, named by its key.
    Setting {
        /// The URI's query key at fault.
        key: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The channel was closed (by the broker, or with its connection).
    Closed,
    /// A hook of the manager's ([`Hooks`]) failed.
    Hook(Box<dyn std::error::Error + Send + Sync>),
}

impl std::fmt::Display for AmqpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AmqpError::Lapin(e) => write!(f, "{e}"),
            AmqpError::Setting { key, reason } => write!(f, "AMQP URI: `{key}` {reason}"),
            AmqpError::Closed => f.write_str("the channel is closed"),
            AmqpError::Hook(e) => write!(f, "a hook failed: {e}"),
        }
    }
}

impl std::error::Error for AmqpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AmqpError::Lapin(e) => Some(e),
            AmqpError::Setting { .. } | AmqpError::Closed => None,
            AmqpError::Hook(e) => Some(&**e),
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
        // The channel's place on the connection is taken together with the connection, under
        // the state's lock: from then on the last other channel's stop cannot close the
        // connection under the channel being opened on it (it did: a replacement started while
        // the channel it replaced was stopping was handed out on a closed connection).
        let (connection, lost, slot) = {
            let _opening = self.shared.opening.lock().await;
            let open = {
                let mut state = self.shared.state();
                match state.connection.clone() {
                    // A connection whose loss was heard is not used again, even should it
                    // still read as connected.
                    Some(connection)
                        if connection.status().connected() && !*state.lost.borrow() =>
                    {
                        state.channels += 1;
                        let slot = Slot::taken(self.shared.clone(), state.generation);
                        Some((connection, state.lost.clone(), slot))
                    }
                    _ => None,
                }
            };
            match open {
                Some(open) => open,
                None => {
                    if frame_too_small(&self.uri) {
                        return Err(AmqpError::Setting {
                            key: "frame_max",
                            reason: FRAME_TOO_SMALL,
                        });
                    }
                    let connection = Arc::new(
                        DefaultConnectionBuilder::new()?
                            .with_uri_str(with_heartbeat(&self.uri))
                            .with_properties(self.properties.clone())
                            .with_tls_config(self.tls.clone())
                            .connect()
                            .await?,
                    );
                    let mut state = self.shared.state();
                    state.connection = Some(connection.clone());
                    state.lost = Arc::new(tokio::sync::watch::Sender::new(false));
                    state.generation += 1;
                    state.channels = 1;
                    let slot = Slot::taken(self.shared.clone(), state.generation);
                    (connection, state.lost.clone(), slot)
                }
            }
        };
        // Dropped on an error, the slot gives its place up (and closes the connection if it
        // was the last).
        let channel = connection.create_channel().await?;
        // The member's driver: it ends when the connection is lost, so a lost connection is
        // every channel's death at once, free ones included. lapin's event stream hands each
        // event to one listener only, so the driver that receives the error raises `lost`
        // for the others. The stream also reports a channel's error (the broker closing one
        // channel for a refused method): the connection is lost only if it says so itself
        // (lapin marks it before it reports the error), and held weakly, so the driver does
        // not keep it open.
        let mut events = Box::pin(connection.events_listener());
        let weak = Arc::downgrade(&connection);
        drop(connection);
        ctx.spawn(async move {
            let mut seen = lost.subscribe();
            loop {
                let gone = std::pin::pin!(seen.wait_for(|lost| *lost));
                match select(events.next(), gone).await {
                    Either::Left((Some(lapin::Event::Error(e)), _)) => {
                        let open = weak
                            .upgrade()
                            .is_some_and(|connection| connection.status().connected());
                        if open {
                            tracing::debug!(error = %e, "an AMQP channel failed");
                            continue;
                        }
                        tracing::debug!(error = %e, "the AMQP connection failed");
                        lost.send_replace(true);
                        break;
                    }
                    Either::Left((Some(_), _)) => {}
                    Either::Left((None, _)) | Either::Right(_) => break,
                }
            }
        });
        Ok(AmqpChannel::new(channel, slot))
    }

    async fn initialize(&self, channel: &mut AmqpChannel) -> Result<(), AmqpError> {
        self.hooks
            .run_after_connect(channel)
            .await
            .map_err(AmqpError::Hook)?;
        // What the hook set up is where every user starts, and stays: its exclusive queues
        // are the channel's, not a user's to have deleted at a return.
        channel.set_up().await;
        channel.cleared();
        Ok(())
    }

    async fn check(&self, channel: &mut AmqpChannel) -> Result<(), AmqpError> {
        if channel.status().connected() {
            Ok(())
        } else {
            Err(AmqpError::Closed)
        }
    }

    fn is_broken(&self, channel: &AmqpChannel) -> bool {
        !channel.status().connected() || channel.left.load(Ordering::Relaxed) & Left::LASTING != 0
    }

    fn needs_recycle(&self, channel: &AmqpChannel) -> bool {
        channel.left.load(Ordering::Relaxed) != 0 || self.hooks.has_after_return()
    }

    async fn recycle(&self, channel: &mut AmqpChannel) -> Result<(), AmqpError> {
        let left = channel.left.load(Ordering::Relaxed);
        // A method on the channel is answered only after everything sent before it: if the
        // broker is closing the channel for an earlier method, it fails instead. One such
        // round trip confirms the channel alive.
        let mut confirmed = false;
        // On a channel the hooks made transactional, what the user published or acked and
        // did not commit is theirs, not the next user's to commit.
        if channel.transactional() && left & Left::UNCONFIRMED != 0 {
            channel.channel.tx_rollback().await?;
            confirmed = true;
        }
        // The user's exclusive queues, which would outlive them on the connection. Each
        // delete is answered.
        let exclusive = channel.exclusive_queues().await;
        delete(&channel.channel, &exclusive).await?;
        confirmed |= !exclusive.is_empty();
        // Putting the prefetch limits back to the set-up's (none, or the hooks') is such a
        // method too.
        let confirm = left & Left::UNCONFIRMED != 0 && !confirmed;
        for (count, global) in channel.prefetch_restore(confirm).into_iter().flatten() {
            channel
                .channel
                .basic_qos(count, BasicQosOptions { global })
                .await?;
        }
        if left & Left::UNCONFIRMED != 0 {
            // Messages the broker returned (`mandatory`) came before the answer above: they
            // were the last user's, and are dropped here, with the confirms of what they
            // published when the hooks put the channel in confirm mode (a user who did is
            // replaced).
            drop(channel.channel.wait_for_confirms().await?);
        }
        channel.cleared();
        self.hooks
            .run_after_return(channel)
            .await
            .map_err(AmqpError::Hook)?;
        // What the hook declared is set-up too.
        channel.set_up().await;
        Ok(())
    }

    async fn stop(&self, mut channel: AmqpChannel) {
        let goodbye = async move {
            // The user's exclusive queues (and those the broker named for the channel's
            // set-up) go first, on this channel while it is open, or on one opened for it when
            // the broker closed this one: they belong to the connection, which outlives the
            // channel.
            let exclusive = channel.exclusive_queues_at_the_end().await;
            let mut answered = false;
            if !exclusive.is_empty() {
                answered = channel.status().connected()
                    && delete(&channel.channel, &exclusive).await.is_ok();
                if !answered
                    && let Some(connection) = channel.slot.connection()
                    && let Ok(other) = connection.create_channel().await
                {
                    let _ = delete(&other, &exclusive).await;
                    let _ = other
                        .close(200, "pooler: exclusive queues deleted".into())
                        .await;
                }
            }
            // A method the user left may have the broker closing the channel already (a
            // `tx_commit` outside a transaction, a declaration refused). Closing it from this
            // side at the same moment makes lapin fail the connection's close too (it reads
            // the broker's close-ok for a channel it counts closed), and a connection left
            // open keeps its channels' unacked deliveries from their queues. So one answered
            // method first (the deletes above are such methods): answered, nothing before it
            // made the broker close the channel; refused, the broker closes it, and this side
            // need not.
            if !answered
                && channel.left.load(Ordering::Relaxed) != 0
                && channel.status().connected()
            {
                let _ = channel
                    .channel
                    .basic_qos(0, BasicQosOptions { global: false })
                    .await;
            }
            if channel.status().connected() {
                let _ = channel.close(200, "retired by pooler".into()).await;
            }
            if let Some(connection) = channel.slot.release()
                && connection.status().connected()
                && let Err(e) = connection
                    .close(200, "pooler: no channel left".into())
                    .await
            {
                tracing::warn!(error = %e, "closing the AMQP connection failed: it may stay open");
            }
        };
        // Dropped unanswered, the channel gives its place up, and the last handle on the
        // connection has lapin close it in the background.
        if tokio::time::timeout(GOODBYE, goodbye).await.is_err() {
            tracing::debug!(
                "the broker did not answer the stop within {GOODBYE:?}: closed without waiting"
            );
        }
    }
}

/// Deletes `queues` (the exclusive ones a user declared) on `channel`, each answered.
/// RabbitMQ answers the delete of a queue that no longer exists as done.
async fn delete(channel: &lapin::Channel, queues: &[ShortString]) -> lapin::Result<()> {
    for queue in queues {
        channel
            .queue_delete(queue.clone(), QueueDeleteOptions::default())
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uri_asking_for_a_frame_under_the_protocols_minimum_is_found() {
        for small in ["frame_max=1", "frame_max=4095", "heartbeat=5&frame_max=504"] {
            assert!(frame_too_small(&format!("amqp://h/%2f?{small}")), "{small}");
        }
        for taken in [
            "amqp://h/%2f",
            "amqp://h/%2f?frame_max=0",
            "amqp://h/%2f?frame_max=4096",
            "amqp://h/%2f?frame_max=4294967295",
            // Not read by lapin either: its own error says so.
            "amqp://h/%2f?frame_max=soon",
        ] {
            assert!(!frame_too_small(taken), "{taken}");
        }
    }

    #[test]
    fn a_uri_without_a_heartbeat_asks_for_the_default_one() {
        assert_eq!(
            with_heartbeat("amqp://h:5672/%2f"),
            "amqp://h:5672/%2f?heartbeat=10"
        );
        assert_eq!(
            with_heartbeat("amqp://h/%2f?frame_max=8192"),
            "amqp://h/%2f?frame_max=8192&heartbeat=10"
        );
        // One of its own, off included, is kept.
        for uri in [
            "amqp://h/%2f?heartbeat=30",
            "amqp://h/%2f?channel_max=9&heartbeat=0",
        ] {
            assert_eq!(with_heartbeat(uri), uri);
        }
    }
}
