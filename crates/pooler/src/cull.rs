//! Culling (pooler's newest rule): every `cull_interval`, free members beyond
//! `max(init_count, the peak in-use count of the last max_age)` are stopped, oldest idle first.
//! The rule itself is the engine's `cull`; `timer` runs this on schedule.

use tokio::time::Instant;

use crate::manager::Manager;
use crate::metrics::Reason;
use crate::shared::Shared;

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
