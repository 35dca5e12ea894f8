//! Leak detection: a member held longer than `leak_detection_threshold` is reported once,
//! through `tracing`, with where it was taken; and again when it comes back.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::manager::Manager;
use crate::shared::Shared;

/// The leak timer: looks every half threshold (from `origin`, the pool's start), so a leak
/// is reported at most 1.5 thresholds after the take; re-armed by `reconfigure`.
pub(crate) async fn run<M: Manager>(shared: Arc<Shared<M>>, origin: Instant) {
    let mut changes = shared.reconfigured.subscribe();
    let period = |t: Option<Duration>| t.map(|t| (t / 2).max(Duration::from_millis(1)));
    let mut threshold = shared.lock().config.leak_detection_threshold;
    let tick = tokio::time::sleep_until(origin + period(threshold).unwrap_or_default());
    tokio::pin!(tick);
    loop {
        tokio::select! {
            () = &mut tick, if threshold.is_some() => {
                let t = threshold.unwrap_or_default();
                shared.report_leaks(t);
                tick.as_mut().reset(Instant::now() + period(threshold).unwrap_or_default());
            }
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                let at = *changes.borrow_and_update();
                let now = shared.lock().config.leak_detection_threshold;
                if now != threshold {
                    threshold = now;
                    tick.as_mut().reset(at + period(threshold).unwrap_or_default());
                }
            }
        }
    }
}

impl<M: Manager> Shared<M> {
    fn report_leaks(&self, threshold: Duration) {
        let now = Instant::now();
        let Some(held_before) = now.checked_sub(threshold) else {
            return;
        };
        let leaks = self.lock().engine.leaks(held_before);
        for leak in leaks {
            let taken_at = leak
                .taken_by
                .map_or_else(|| "?".to_owned(), ToString::to_string);
            tracing::warn!(
                pool = %self.name,
                member = leak.id,
                held_for = %humantime::format_duration(now - leak.since),
                taken_at = %taken_at,
                "member held past leak_detection_threshold; possible leak"
            );
        }
    }
}
