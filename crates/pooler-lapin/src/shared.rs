//! The pool's one AMQP connection, shared by its channels, and each channel's place on it.

use std::sync::Arc;

use lapin::Connection;
use tokio::sync::Mutex;

/// The pool's connection and how many of its channels are open.
#[derive(Default)]
pub(crate) struct Shared {
    /// Held across a connect, so concurrent starts open one connection, not several.
    pub(crate) opening: Mutex<()>,
    state: std::sync::Mutex<State>,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) connection: Option<Arc<Connection>>,
    /// Raised when the current connection reports an error: every channel on it is dead.
    pub(crate) lost: Arc<tokio::sync::watch::Sender<bool>>,
    /// Counts the connections opened: a channel remembers the one it was opened on.
    pub(crate) generation: u64,
    /// Channels open, or being opened, on the current connection: each holds a [`Slot`].
    pub(crate) channels: usize,
}

impl Shared {
    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A channel's place on its connection: given up when the channel is stopped, or dropped
/// without a stop (a member returned after an immediate close). The last one given up on
/// the current connection takes the connection with it, so a closed pool leaves none open
/// even while a clone of its manager lives.
pub(crate) struct Slot {
    pub(crate) shared: Arc<Shared>,
    pub(crate) generation: u64,
    pub(crate) released: bool,
}

impl Slot {
    /// A place on connection `generation`, already counted in `channels`.
    pub(crate) fn taken(shared: Arc<Shared>, generation: u64) -> Slot {
        Slot {
            shared,
            generation,
            released: false,
        }
    }

    /// The connection this place is on, while it is the current one and connected.
    pub(crate) fn connection(&self) -> Option<Arc<Connection>> {
        let state = self.shared.state();
        if self.released || self.generation != state.generation {
            return None;
        }
        state.connection.clone().filter(|c| c.status().connected())
    }

    /// Gives the place up; the connection if this was its last channel.
    pub(crate) fn release(&mut self) -> Option<Arc<Connection>> {
        if std::mem::replace(&mut self.released, true) {
            return None;
        }
        let mut state = self.shared.state();
        if self.generation != state.generation {
            return None; // opened on a connection since lost: not counted any more
        }
        state.channels = state.channels.saturating_sub(1);
        if state.channels == 0 {
            state.connection.take()
        } else {
            None
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Dropping the last handle on the connection has lapin close it.
        drop(self.release());
    }
}
