//! Leak detection: a member held longer than `leak_detection_threshold` is reported once,
//! through `tracing`, with where it was taken; and again when it comes back.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::manager::Manager;
use crate::shared::Shared;

/// The leak timer: looks every half threshold, so a leak is reported at most 1.5 thresholds
/// after the take.
pub(crate) async fn run<M: Manager>(shared: Arc<Shared<M>>) {
    let mut changes = shared.reconfigured.subscribe();
    loop {
        let threshold = shared.lock().config.leak_detection_threshold;
        let Some(threshold) = threshold else {
            if changes.changed().await.is_err() {
                return;
            }
            continue;
        };
        let every = (threshold / 2).max(Duration::from_millis(1));
        tokio::select! {
            () = tokio::time::sleep(every) => shared.report_leaks(threshold),
            changed = changes.changed() => if changed.is_err() { return },
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
