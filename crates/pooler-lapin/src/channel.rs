//! A pooled channel, and what its users left on it (docs/design.md, "RabbitMQ: a pool of
//! channels").

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions,
    BasicPublishOptions, BasicQosOptions, BasicRecoverAsyncOptions, BasicRecoverOptions,
    BasicRejectOptions, ChannelFlowOptions, ConfirmSelectOptions,
};
use lapin::types::{FieldTable, ShortString};
use lapin::{BasicProperties, Channel, PublisherConfirm};

use crate::shared::Slot;

mod exclusive;
mod prefetch;
mod topology;

/// A pooled channel. It has [`Channel`]'s methods, with lapin's signatures, so calls
/// written for a `Channel` work on it (and on the pool's guard); there is no `Deref` to the
/// `Channel` itself, so no call reaches the channel unseen. [`untracked`](Self::untracked)
/// reaches it, and has the channel replaced when it comes back.
///
/// What one user leaves never reaches the next: the methods whose failure the broker
/// reports later, by closing the channel (`basic_publish`, `basic_ack`, `basic_nack`,
/// `basic_reject`, `basic_recover_async`) — and every other method that sends the broker
/// something it may refuse (declarations, bindings, `tx_commit`, `basic_cancel`, …), whose
/// refusal also comes later when its call is dropped mid-way — have the channel confirmed
/// alive by one round trip when it comes back, and messages the broker returned
/// (`mandatory`) are dropped then; a `basic_qos` is reset; an exclusive queue declared is
/// deleted (it belongs to the pool's connection, which outlives every user); a delivery got
/// with acks on (`basic_get`, `basic_consume`), whose `Acker` the user may still hold, and
/// modes no method undoes (`tx_select`, `confirm_select`, `channel_flow`, a `close`) have
/// the channel replaced.
pub struct AmqpChannel {
    pub(crate) channel: Channel,
    pub(crate) slot: Slot,
    /// What the user did, as [`Left`] bits.
    pub(crate) left: AtomicU8,
    /// The exclusive queues declared on the channel since it was last clean. Such a queue
    /// belongs to the connection, which outlives every user (and every channel) in a pool,
    /// so each is deleted when the channel comes back or is stopped.
    exclusive: std::sync::Mutex<exclusive::Exclusive>,
    /// The prefetch limits asked for, and the set-up's, which every user starts with.
    prefetch: std::sync::Mutex<prefetch::Limits>,
    /// `tx_select` was asked for: the channel is transactional for good. Asked by a user, it
    /// is replaced at the return; asked by the manager's hooks, it is the set-up's mode, and
    /// what a user left uncommitted is rolled back at the return.
    transactional: AtomicBool,
}

impl std::fmt::Debug for AmqpChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpChannel")
            .field("channel", &self.channel)
            .field("generation", &self.slot.generation)
            .field("left", &self.left.load(Ordering::Relaxed))
            .finish()
    }
}

/// What a user left on a channel.
pub(crate) struct Left;

impl Left {
    /// A method whose failure the broker reports by closing the channel later.
    pub(crate) const UNCONFIRMED: u8 = 1;
    /// `basic_qos` per consumer.
    pub(crate) const QOS: u8 = 2;
    /// `basic_qos` for the whole channel.
    pub(crate) const QOS_GLOBAL: u8 = 4;
    /// What no method undoes: a mode, or a delivery whose `Acker` may outlive the use.
    pub(crate) const LASTING: u8 = 8;
}

impl AmqpChannel {
    pub(crate) fn new(channel: Channel, slot: Slot) -> Self {
        AmqpChannel {
            channel,
            slot,
            left: AtomicU8::new(0),
            exclusive: std::sync::Mutex::default(),
            prefetch: std::sync::Mutex::default(),
            transactional: AtomicBool::new(false),
        }
    }

    pub(crate) fn note(&self, left: u8) {
        self.left.fetch_or(left, Ordering::Relaxed);
    }

    /// Whether the channel is transactional (its set-up's mode, once it is handed out).
    pub(crate) fn transactional(&self) -> bool {
        self.transactional.load(Ordering::Relaxed)
    }

    fn prefetch(&self) -> std::sync::MutexGuard<'_, prefetch::Limits> {
        self.prefetch
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The `basic_qos` calls that put the channel's prefetch limits back to its set-up; with
    /// `confirm`, at least one (an answered method that confirms the channel alive).
    pub(crate) fn prefetch_restore(&self, confirm: bool) -> [Option<(u16, bool)>; 4] {
        self.prefetch().restore(confirm)
    }

    /// The manager's hooks ran: the exclusive queues declared and the prefetch limits asked
    /// for since the channel was last clean are its set-up, kept at every return from now on.
    pub(crate) async fn set_up(&self) {
        self.prefetch().set_up();
        self.exclusive_queues().await;
        self.exclusive().set_up();
    }

    /// The channel is clean again: nothing left, no exclusive queue of a user's.
    pub(crate) fn cleared(&self) {
        self.left.store(0, Ordering::Relaxed);
        self.prefetch().cleared();
        self.exclusive().cleared();
    }

    /// `Channel::basic_publish`; the channel is confirmed alive when it comes back (a publish
    /// to a missing exchange makes the broker close it later).
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's: dropped, the message may or may not have been sent.
    pub async fn basic_publish(
        &self,
        exchange: ShortString,
        routing_key: ShortString,
        options: BasicPublishOptions,
        payload: &[u8],
        properties: BasicProperties,
    ) -> lapin::Result<PublisherConfirm> {
        self.note(Left::UNCONFIRMED);
        self.channel
            .basic_publish(exchange, routing_key, options, payload, properties)
            .await
    }

    /// `Channel::basic_ack`; the channel is confirmed alive when it comes back (a wrong
    /// delivery tag makes the broker close it later).
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's: dropped, the ack may or may not have been sent.
    pub async fn basic_ack(
        &self,
        delivery_tag: u64,
        options: BasicAckOptions,
    ) -> lapin::Result<()> {
        self.note(Left::UNCONFIRMED);
        self.channel.basic_ack(delivery_tag, options).await
    }

    /// `Channel::basic_nack`; the channel is confirmed alive when it comes back.
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's: dropped, the nack may or may not have been sent.
    pub async fn basic_nack(
        &self,
        delivery_tag: u64,
        options: BasicNackOptions,
    ) -> lapin::Result<()> {
        self.note(Left::UNCONFIRMED);
        self.channel.basic_nack(delivery_tag, options).await
    }

    /// `Channel::basic_reject`; the channel is confirmed alive when it comes back.
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's: dropped, the reject may or may not have been sent.
    pub async fn basic_reject(
        &self,
        delivery_tag: u64,
        options: BasicRejectOptions,
    ) -> lapin::Result<()> {
        self.note(Left::UNCONFIRMED);
        self.channel.basic_reject(delivery_tag, options).await
    }

    /// `Channel::basic_recover_async`; the channel is confirmed alive when it comes back.
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn basic_recover_async(
        &self,
        options: BasicRecoverAsyncOptions,
    ) -> lapin::Result<()> {
        self.note(Left::UNCONFIRMED);
        self.channel.basic_recover_async(options).await
    }

    /// `Channel::basic_get`. With acks on, the channel is replaced when it comes back: the
    /// delivery's `Acker` may outlive the use, and an ack of it on the next user's channel
    /// would have the broker close that channel (a delivery tag the channel no longer
    /// knows); closed instead, the channel gives what was not acked back to its queue, and
    /// a late ack fails for its own user. With `no_ack`, the channel is confirmed alive when
    /// it comes back, as after a publish (a missing queue makes the broker close it).
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn basic_get(
        &self,
        queue: ShortString,
        options: BasicGetOptions,
    ) -> lapin::Result<Option<lapin::message::BasicGetMessage>> {
        self.note(if options.no_ack {
            Left::UNCONFIRMED
        } else {
            Left::LASTING
        });
        self.channel.basic_get(queue, options).await
    }

    /// `Channel::basic_qos`; put back when the channel comes back, to no limit or to the one
    /// the manager's hooks set.
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn basic_qos(
        &self,
        prefetch_count: u16,
        options: BasicQosOptions,
    ) -> lapin::Result<()> {
        self.prefetch().asked(prefetch_count, options.global);
        self.note(if options.global {
            Left::QOS_GLOBAL
        } else {
            Left::QOS
        });
        self.channel.basic_qos(prefetch_count, options).await
    }

    /// `Channel::basic_consume`; the channel is replaced when it comes back (its consumer
    /// would go on receiving the next user's deliveries).
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn basic_consume(
        &self,
        queue: ShortString,
        consumer_tag: ShortString,
        options: BasicConsumeOptions,
        arguments: FieldTable,
    ) -> lapin::Result<lapin::Consumer> {
        self.note(Left::LASTING);
        self.channel
            .basic_consume(queue, consumer_tag, options, arguments)
            .await
    }

    /// `Channel::tx_select`; the channel is replaced when it comes back (no method leaves
    /// transactional mode: the next user's publishes would wait for a commit).
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn tx_select(&self) -> lapin::Result<()> {
        self.transactional.store(true, Ordering::Relaxed);
        self.note(Left::LASTING);
        self.channel.tx_select().await
    }

    /// `Channel::confirm_select`; the channel is replaced when it comes back (no method
    /// leaves confirm mode).
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn confirm_select(&self, options: ConfirmSelectOptions) -> lapin::Result<()> {
        self.note(Left::LASTING);
        self.channel.confirm_select(options).await
    }

    /// `Channel::channel_flow`; the channel is replaced when it comes back.
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn channel_flow(&self, options: ChannelFlowOptions) -> lapin::Result<bool> {
        self.note(Left::LASTING);
        self.channel.channel_flow(options).await
    }
    /// The `Channel` itself, for code written against lapin's type. What is done through it
    /// is not seen, so the channel is replaced when it comes back rather than handed on
    /// unseen.
    pub fn untracked(&self) -> &Channel {
        self.note(Left::LASTING);
        &self.channel
    }

    /// `Channel::status`.
    #[must_use]
    pub fn status(&self) -> &lapin::ChannelStatus {
        self.channel.status()
    }

    /// `Channel::id`.
    #[must_use]
    pub fn id(&self) -> lapin::types::ChannelId {
        self.channel.id()
    }

    /// `Channel::close`; a closed channel is replaced when it comes back.
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn close(&self, reply_code: u16, reply_text: ShortString) -> lapin::Result<()> {
        self.note(Left::LASTING);
        self.channel.close(reply_code, reply_text).await
    }

    /// `Channel::wait_for_confirms`.
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn wait_for_confirms(
        &self,
    ) -> lapin::Result<Vec<lapin::message::BasicReturnMessage>> {
        self.channel.wait_for_confirms().await
    }

    /// `Channel::basic_recover`; the channel is confirmed alive when it comes back.
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn basic_recover(&self, options: BasicRecoverOptions) -> lapin::Result<()> {
        self.note(Left::UNCONFIRMED);
        self.channel.basic_recover(options).await
    }

    /// `Channel::basic_cancel`; the channel is confirmed alive when it comes back.
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn basic_cancel(
        &self,
        consumer_tag: ShortString,
        options: BasicCancelOptions,
    ) -> lapin::Result<()> {
        self.note(Left::UNCONFIRMED);
        self.channel.basic_cancel(consumer_tag, options).await
    }

    /// `Channel::tx_commit` (in transactional mode, which has the channel replaced); the
    /// channel is confirmed alive when it comes back (outside transactional mode the broker
    /// refuses it by closing the channel — after its return, if the call was dropped).
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn tx_commit(&self) -> lapin::Result<()> {
        self.note(Left::UNCONFIRMED);
        self.channel.tx_commit().await
    }

    /// `Channel::tx_rollback` (in transactional mode, which has the channel replaced); the
    /// channel is confirmed alive when it comes back, as after [`tx_commit`](Self::tx_commit).
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn tx_rollback(&self) -> lapin::Result<()> {
        self.note(Left::UNCONFIRMED);
        self.channel.tx_rollback().await
    }
}
