//! The exclusive queues declared on a channel, which belong to the pool's connection and so
//! outlive every user of the channel (docs/design.md, "RabbitMQ: a pool of channels").
//!
//! # Invariants
//!
//! 1. A name is in `named` once, and never in both `named` and `kept`.
//! 2. `by_the_broker ⊆ named` and `own ⊆ kept`.
//! 3. A declaration leaves `naming` when its caller has the answer, or when the return or
//!    the stop awaits it (its name then joins `named` and `by_the_broker`).

use futures_util::FutureExt as _;
use futures_util::future::{BoxFuture, Shared};
use lapin::options::QueueDeclareOptions;
use lapin::types::{FieldTable, ShortString};

use super::AmqpChannel;

/// The exclusive queues declared on a channel since it was last clean, by name, and the
/// declarations whose name the broker gives and which may still be unanswered; and those
/// the manager's hooks declared, `kept`: the channel's set-up, which a user declaring them
/// again does not make theirs. Of those, the ones the broker named are the channel's `own`
/// (no other channel can have declared them), deleted when it is stopped; a name a hook
/// gave may be every channel's.
#[derive(Default)]
pub(super) struct Exclusive {
    named: Vec<ShortString>,
    by_the_broker: Vec<ShortString>,
    naming: Vec<Naming>,
    kept: Vec<ShortString>,
    own: Vec<ShortString>,
}

/// A declaration of an exclusive queue the broker names, shared between the user's call and
/// the channel: dropped by the user before the answer, it is awaited at the return, so the
/// name is learnt and the queue deleted.
type Naming = Shared<BoxFuture<'static, lapin::Result<lapin::Queue>>>;

impl Exclusive {
    fn declared(&mut self, queue: &ShortString) {
        if !self.named.contains(queue) && !self.kept.contains(queue) {
            self.named.push(queue.clone());
        }
    }

    fn named_by_the_broker(&mut self, queue: &ShortString) {
        if self.kept.contains(queue) {
            return;
        }
        self.declared(queue);
        if !self.by_the_broker.contains(queue) {
            self.by_the_broker.push(queue.clone());
        }
    }

    /// The manager's hooks ran, and every declaration is answered: what was declared is
    /// the channel's set-up.
    pub(super) fn set_up(&mut self) {
        debug_assert!(self.naming.is_empty(), "invariant 3");
        debug_assert!(
            self.by_the_broker.iter().all(|q| self.named.contains(q)),
            "invariant 2"
        );
        let by_the_broker = std::mem::take(&mut self.by_the_broker);
        for queue in std::mem::take(&mut self.named) {
            if by_the_broker.contains(&queue) {
                self.own.push(queue.clone());
            }
            if !self.kept.contains(&queue) {
                self.kept.push(queue);
            }
        }
    }

    /// The channel is clean again: no exclusive queue of a user's.
    pub(super) fn cleared(&mut self) {
        self.named.clear();
        self.by_the_broker.clear();
        self.naming.clear();
    }
}

impl AmqpChannel {
    pub(super) fn exclusive(&self) -> std::sync::MutexGuard<'_, Exclusive> {
        self.exclusive
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `queue` is an exclusive queue declared on the channel (or maybe declared: its
    /// declaration was sent, or is about to be).
    pub(crate) fn declared_exclusive(&self, queue: &ShortString) {
        self.exclusive().declared(queue);
    }

    /// Declares an exclusive queue the broker names, as lapin's `queue_declare` (without
    /// `nowait`: the name is in the answer). The declaration stays the channel's until it is
    /// answered, whether or not the caller waits for it.
    pub(crate) async fn declare_named_by_the_broker(
        &self,
        options: QueueDeclareOptions,
        arguments: FieldTable,
    ) -> lapin::Result<lapin::Queue> {
        let channel = self.channel.clone();
        let naming = async move {
            channel
                .queue_declare(ShortString::default(), options, arguments)
                .await
        }
        .boxed()
        .shared();
        self.exclusive().naming.push(naming.clone());
        let declared = naming.clone().await;
        let mut exclusive = self.exclusive();
        exclusive.naming.retain(|other| !other.ptr_eq(&naming));
        if let Ok(queue) = &declared {
            exclusive.named_by_the_broker(queue.name());
        }
        declared
    }

    /// The exclusive queues declared on the channel since it was last clean, once every
    /// declaration the broker names is answered (a refused one left no queue). Cancel safe:
    /// a declaration leaves the channel's list only once answered.
    pub(crate) async fn exclusive_queues(&self) -> Vec<ShortString> {
        let naming = self.exclusive().naming.clone();
        for declaration in naming {
            let answered = declaration.clone().await;
            let mut exclusive = self.exclusive();
            exclusive.naming.retain(|other| !other.ptr_eq(&declaration));
            if let Ok(queue) = answered {
                exclusive.named_by_the_broker(queue.name());
            }
        }
        self.exclusive().named.clone()
    }

    /// What a stop deletes: [`exclusive_queues`](Self::exclusive_queues), and the queues the
    /// broker named for the channel's set-up.
    pub(crate) async fn exclusive_queues_at_the_end(&self) -> Vec<ShortString> {
        let mut queues = self.exclusive_queues().await;
        queues.extend(self.exclusive().own.iter().cloned());
        queues
    }
}
