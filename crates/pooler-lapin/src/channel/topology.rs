//! The channel's methods that declare, bind and delete exchanges and queues. They leave
//! nothing on the channel, but the broker may refuse one by closing the channel — after the
//! user has given it back, when the call's future was dropped mid-way or sent `nowait` — so
//! each has the channel confirmed alive when it comes back, as a publish does.

use lapin::options::{
    ExchangeBindOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, ExchangeUnbindOptions,
    QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::{FieldTable, ShortString};

use super::{AmqpChannel, Left};

impl AmqpChannel {
    /// `Channel::exchange_declare`.
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn exchange_declare(
        &self,
        exchange: ShortString,
        kind: lapin::ExchangeKind,
        options: ExchangeDeclareOptions,
        arguments: FieldTable,
    ) -> lapin::Result<()> {
        self.note(Left::UNCONFIRMED);
        self.channel
            .exchange_declare(exchange, kind, options, arguments)
            .await
    }

    /// `Channel::exchange_delete`.
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn exchange_delete(
        &self,
        exchange: ShortString,
        options: ExchangeDeleteOptions,
    ) -> lapin::Result<()> {
        self.note(Left::UNCONFIRMED);
        self.channel.exchange_delete(exchange, options).await
    }

    /// `Channel::exchange_bind`.
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn exchange_bind(
        &self,
        destination: ShortString,
        source: ShortString,
        routing_key: ShortString,
        options: ExchangeBindOptions,
        arguments: FieldTable,
    ) -> lapin::Result<()> {
        self.note(Left::UNCONFIRMED);
        self.channel
            .exchange_bind(destination, source, routing_key, options, arguments)
            .await
    }

    /// `Channel::exchange_unbind`.
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn exchange_unbind(
        &self,
        destination: ShortString,
        source: ShortString,
        routing_key: ShortString,
        options: ExchangeUnbindOptions,
        arguments: FieldTable,
    ) -> lapin::Result<()> {
        self.note(Left::UNCONFIRMED);
        self.channel
            .exchange_unbind(destination, source, routing_key, options, arguments)
            .await
    }

    /// `Channel::queue_declare`. An exclusive queue belongs to the pool's connection, which
    /// outlives this use: it is deleted when the channel comes back. An exclusive queue the
    /// broker names (`queue` empty) is declared without `nowait` even if asked: its name,
    /// in the answer, is what deletes it (and what the caller needs to use it).
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's. An exclusive queue is deleted at the return whether or not its
    /// declaration was sent or answered: the return waits for the answer to a declaration the
    /// broker names.
    pub async fn queue_declare(
        &self,
        queue: ShortString,
        options: QueueDeclareOptions,
        arguments: FieldTable,
    ) -> lapin::Result<lapin::Queue> {
        self.note(Left::UNCONFIRMED);
        if !options.exclusive || options.passive {
            return self.channel.queue_declare(queue, options, arguments).await;
        }
        if queue.as_str().is_empty() {
            let answered = QueueDeclareOptions {
                nowait: false,
                ..options
            };
            return self.declare_named_by_the_broker(answered, arguments).await;
        }
        self.declared_exclusive(&queue);
        self.channel.queue_declare(queue, options, arguments).await
    }

    /// `Channel::queue_bind`.
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn queue_bind(
        &self,
        queue: ShortString,
        exchange: ShortString,
        routing_key: ShortString,
        options: QueueBindOptions,
        arguments: FieldTable,
    ) -> lapin::Result<()> {
        self.note(Left::UNCONFIRMED);
        self.channel
            .queue_bind(queue, exchange, routing_key, options, arguments)
            .await
    }

    /// `Channel::queue_unbind`.
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn queue_unbind(
        &self,
        queue: ShortString,
        exchange: ShortString,
        routing_key: ShortString,
        arguments: FieldTable,
    ) -> lapin::Result<()> {
        self.note(Left::UNCONFIRMED);
        self.channel
            .queue_unbind(queue, exchange, routing_key, arguments)
            .await
    }

    /// `Channel::queue_purge`.
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn queue_purge(
        &self,
        queue: ShortString,
        options: QueuePurgeOptions,
    ) -> lapin::Result<u32> {
        self.note(Left::UNCONFIRMED);
        self.channel.queue_purge(queue, options).await
    }

    /// `Channel::queue_delete`.
    ///
    /// # Errors
    ///
    /// As lapin's.
    ///
    /// # Cancel safety
    ///
    /// As lapin's.
    pub async fn queue_delete(
        &self,
        queue: ShortString,
        options: QueueDeleteOptions,
    ) -> lapin::Result<u32> {
        self.note(Left::UNCONFIRMED);
        self.channel.queue_delete(queue, options).await
    }
}
