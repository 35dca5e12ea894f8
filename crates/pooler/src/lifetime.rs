//! `max_lifetime` with jitter: each member's expiry. (The timer retires free members when it
//! comes; a member found expired at take is retired and the take goes on; one that expired
//! in use is retired when it comes back.)

use std::time::Duration;

use tokio::time::Instant;

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
    let offset = fastrand::i128(-jitter..=jitter);
    let nanos = i128::try_from(lifetime.as_nanos()).unwrap_or(i128::MAX) + offset;
    Some(born + Duration::from_nanos(u64::try_from(nanos.max(0)).unwrap_or(u64::MAX)))
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
