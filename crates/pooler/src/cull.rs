//! Culling (pooler's newest rule): every `cull_interval`, free members beyond
//! `max(init_count, the peak in-use count of the last max_age)` are stopped, oldest idle first.
//! The rule itself is the engine's `cull`; this is its timer.

use std::sync::Arc;

use tokio::time::Instant;

use crate::manager::Manager;
use crate::metrics::Reason;
use crate::shared::Shared;

/// The cull timer, first due `cull_interval` after `origin` (the pool's start). A
/// `reconfigure` that changes `cull_interval` re-arms it (from zero to on included); the next
/// tick is scheduled after the previous cull completes.
pub(crate) async fn run<M: Manager>(shared: Arc<Shared<M>>, origin: Instant) {
    let mut changes = shared.reconfigured.subscribe();
    let mut interval = shared.lock().config.cull_interval;
    let tick = tokio::time::sleep_until(origin + interval);
    tokio::pin!(tick);
    loop {
        tokio::select! {
            () = &mut tick, if !interval.is_zero() => {
                shared.cull();
                tick.as_mut().reset(Instant::now() + interval);
            }
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                let at = *changes.borrow_and_update();
                let now = shared.lock().config.cull_interval;
                if now != interval {
                    interval = now;
                    tick.as_mut().reset(at + interval);
                }
            }
        }
    }
}

impl<M: Manager> Shared<M> {
    /// One cull, now.
    pub(crate) fn cull(&self) {
        let now = Instant::now();
        let mut state = self.lock();
        let max_age = state.config.max_age;
        let culled = state.engine.cull(now, max_age);
        drop(state);
        if !culled.is_empty() {
            tracing::info!(pool = %self.name, members = culled.len(), "culled idle members beyond recent demand");
        }
        for (key, held) in culled {
            self.retire(key, held, Reason::MaxAge);
        }
    }
}
