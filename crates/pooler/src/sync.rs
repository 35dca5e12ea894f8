//! The synchronisation primitives the pool's shared state is built on — the locks and the
//! atomics: `std`'s (or `parking_lot`'s lock with the `parking_lot` feature, which saves
//! about a tenth of a take's instructions: docs/design.md, "Features, dependencies and the
//! supported Rust version"), or loom's under `cfg(pooler_loom)`, so the loom models run the
//! real code (as tokio's `crate::loom`).

#[cfg(pooler_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard, atomic};
#[cfg(all(not(pooler_loom), feature = "parking_lot"))]
pub(crate) use parking_lot::{Mutex, MutexGuard};
#[cfg(not(pooler_loom))]
pub(crate) use std::sync::atomic;
#[cfg(all(not(pooler_loom), not(feature = "parking_lot")))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`. No code under the pool's locks panics, so there is no poisoning to mind
/// (`parking_lot`'s lock has none to check).
#[inline]
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(any(pooler_loom, not(feature = "parking_lot")))]
    return mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    #[cfg(all(not(pooler_loom), feature = "parking_lot"))]
    mutex.lock()
}
