//! Leak detection: a member held longer than `leak_detection_threshold` is reported once,
//! through `tracing`, with where it was taken; and again when it comes back.

use tokio::time::Instant;

use crate::manager::Manager;
use crate::shared::Shared;

impl<M: Manager> Shared<M> {
    /// Reports every holder past `leak_detection_threshold` not reported yet (run by `timer`).
    pub(crate) fn report_leaks(&self) {
        let Some(threshold) = self.lock().config.leak_detection_threshold else {
            return;
        };
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
