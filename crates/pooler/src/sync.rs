//! The synchronisation primitives the pool's shared state is built on — the locks and the
//! atomics: `parking_lot`'s and `std`'s, or loom's under `cfg(pooler_loom)`, so the loom
//! models run the real code (as tokio's `crate::loom`).

#[cfg(pooler_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard, atomic};
#[cfg(not(pooler_loom))]
pub(crate) use parking_lot::{Mutex, MutexGuard};
#[cfg(not(pooler_loom))]
pub(crate) use std::sync::atomic;

/// Locks `mutex`. No code under the pool's locks panics, so there is no poisoning to mind;
/// outside loom the lock is `parking_lot`'s, which has none to check.
#[inline]
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(pooler_loom)]
    return mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    #[cfg(not(pooler_loom))]
    mutex.lock()
}
