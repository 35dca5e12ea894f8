//! `max_lifetime` with jitter: each member's expiry, and the timer that recycles free members
//! when it comes. (Expired members at the head of the free list are also evicted at take, and
//! expired members in use are recycled when returned; see the engine.)

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use crate::manager::Manager;
use crate::metrics::Reason;
use crate::shared::Shared;

/// When a member born at `born` expires: `born + lifetime + u`, with `u` uniform in
/// `[-jitter, +jitter]`. `None` when the pool has no lifetime. Validation keeps
/// `jitter < lifetime`, so a member never expires before it is born.
pub(crate) fn expiry(
    born: Instant,
    lifetime: Option<Duration>,
    jitter: Duration,
) -> Option<Instant> {
    let lifetime = lifetime?;
    if jitter.is_zero() {
        return Some(born + lifetime);
    }
    let jitter = i128::try_from(jitter.as_nanos()).unwrap_or(i128::MAX);
    let offset = rand::rng().random_range(-jitter..=jitter);
    let nanos = i128::try_from(lifetime.as_nanos()).unwrap_or(i128::MAX) + offset;
    Some(born + Duration::from_nanos(u64::try_from(nanos.max(0)).unwrap_or(u64::MAX)))
}

/// The lifetime timer: sleeps until the soonest expiry, recycles what is due, and starts
/// replacements. Woken early when a new member (or a reconfigured lifetime) may expire sooner.
pub(crate) async fn run<M: Manager>(shared: Arc<Shared<M>>) {
    loop {
        let next = shared.lock().engine.next_expiry();
        match next {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => shared.expire_due(),
                    () = shared.lifetime_poke.notified() => {}
                }
            }
            None => shared.lifetime_poke.notified().await,
        }
    }
}

impl<M: Manager> Shared<M> {
    fn expire_due(&self) {
        let now = Instant::now();
        let mut state = self.lock();
        let due = state.engine.expire_due(now);
        let starts = state.engine.refill(now);
        drop(state);
        if !due.is_empty() {
            tracing::debug!(pool = %self.name, members = due.len(), "recycling members at max_lifetime");
        }
        for (key, held) in due {
            self.retire(key, held, Reason::MaxLifetime);
        }
        self.spawn_starts(starts, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_stays_within_the_jitter_window() {
        let born = Instant::now();
        let (life, jitter) = (Duration::from_secs(60), Duration::from_secs(10));
        let mut seen_early = false;
        let mut seen_late = false;
        for _ in 0..1000 {
            let at = expiry(born, Some(life), jitter).unwrap();
            assert!(at >= born + life - jitter && at <= born + life + jitter);
            seen_early |= at < born + life - Duration::from_secs(5);
            seen_late |= at > born + life + Duration::from_secs(5);
        }
        assert!(seen_early && seen_late, "spread over the whole window");
        assert_eq!(expiry(born, None, jitter), None);
        assert_eq!(expiry(born, Some(life), Duration::ZERO), Some(born + life));
    }
}
