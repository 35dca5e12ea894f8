//! Closing a pool (docs/design.md, "Closing"): waiters get `Closed`, starts and housekeeping
//! end, free members stop; then the close waits for starts and stops (and, gracefully, for
//! members in use) and finally ends the members' driver tasks. A runtime found gone closes
//! the pool at once, dropping what no task can stop any more.

use crate::error::TakeError;
use crate::manager::Manager;
use crate::shared::Shared;
use crate::step::Why;

impl<M: Manager> Shared<M> {
    /// Closes the pool and waits until it is closed (see above); `wait_in_use`: a graceful
    /// close.
    pub(crate) async fn close(&self, wait_in_use: bool) {
        let error = self.closed_error();
        self.step(|s| {
            s.cold.engine.close();
            let (free, wakers) = s.hot.close(|| error.clone());
            for held in free {
                s.cold.engine.begin_stop(held.meta.key);
                s.effects.stops.push((held, Why::Quiet));
            }
            s.effects.wake.extend(wakers);
        });
        self.supervisor.closing.cancel();
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.step(|s| s.cold.engine.is_drained(s.hot.view(), wait_in_use)) {
                break;
            }
            notified.await;
        }
        self.publish();
        self.step(|s| s.cold.shut = true);
        self.supervisor.kill.cancel();
    }

    /// Whether a close has begun.
    pub(crate) fn is_closing(&self) -> bool {
        self.cold.read(|c| c.engine.is_closed())
    }

    /// Whether the close has finished.
    pub(crate) fn is_shut(&self) -> bool {
        self.cold.read(|c| c.shut)
    }

    /// The pool's runtime has shut down (a spawn found it so): no task can run any more, so
    /// the pool closes at once. Waiters get [`TakeError::RuntimeGone`]; free members are
    /// dropped where they are, since no stop can run.
    pub(crate) fn runtime_gone(&self) {
        if !self.features.set_gone() {
            return;
        }
        let error = TakeError::RuntimeGone {
            pool: self.name.clone(),
        };
        self.step(|s| {
            s.cold.engine.close();
            let (free, wakers) = s.hot.close(|| error.clone());
            for held in free {
                s.cold.engine.begin_stop(held.meta.key);
                s.cold.engine.stop_done(held.meta.key);
                s.effects.dropped.push(held);
            }
            s.effects.wake.extend(wakers);
            s.effects.drained = true;
        });
        tracing::error!(pool = %self.name, "the runtime the pool was started on has shut down; the pool is closed");
        self.supervisor.closing.cancel();
        self.supervisor.kill.cancel();
    }
}
