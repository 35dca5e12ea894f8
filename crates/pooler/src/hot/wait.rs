//! The two ways a take treats the queue, as types: a take that never waits holds no place
//! in it, and the compiler, not a check, says so.

use std::convert::Infallible;

use super::{Locked, Refused};
use crate::waiters::WaitKey;

/// Whether a take that finds nothing free may wait, as a type ([`No`] or [`Queue`]): what a
/// take that never waits finds has no place in the queue to hold, since its key type has no
/// value.
pub(crate) trait Wait: Copy {
    /// What a queued take holds: a [`WaitKey`], or for a take that never waits, nothing
    /// that can exist.
    type Key;
    /// Whether the take may wait.
    const QUEUES: bool;
    /// Joins the queue of `core`, or says why not.
    fn join<T, E>(core: &mut Locked<'_, T, E>) -> Result<Self::Key, Refused>;
}

/// A take that never waits (`try_take_member`, a timeout of zero).
#[derive(Debug, Clone, Copy)]
pub(crate) struct No;

/// A take that may wait in the queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Queue;

impl Wait for No {
    type Key = Infallible;
    const QUEUES: bool = false;
    #[inline(always)]
    fn join<T, E>(_: &mut Locked<'_, T, E>) -> Result<Infallible, Refused> {
        Err(Refused::NoQueue)
    }
}

impl Wait for Queue {
    type Key = WaitKey;
    const QUEUES: bool = true;
    #[inline(always)]
    fn join<T, E>(core: &mut Locked<'_, T, E>) -> Result<WaitKey, Refused> {
        core.enqueue()
    }
}
