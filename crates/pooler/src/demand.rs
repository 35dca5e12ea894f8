//! The demand window behind culling (pooler's newest rule): the peak in-use count seen over
//! the last `max_age`.
//!
//! Each cull tick records the highest in-use count since the previous tick, stamped with when
//! it was last seen (docs/design.md, "The demand window"). The records sit in a monotone queue, so a tick costs O(1)
//! amortized and the front is always the window's peak.
//!
//! # Invariants
//!
//! 1. Records are in time order, and their peaks strictly decrease front to back.
//! 2. After a tick at `now`, no record is older than `now − max_age`.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug, Default)]
pub(crate) struct Demand {
    peaks: VecDeque<(Instant, usize)>,
}

impl Demand {
    fn holds(&self) -> bool {
        self.peaks
            .iter()
            .zip(self.peaks.iter().skip(1))
            .all(|(a, b)| a.0 <= b.0 && a.1 > b.1)
    }

    /// A tick at `now`: records `peak`, the highest in-use count since the last tick, last
    /// seen at `seen`, forgets what is older than `max_age`, and says the window's peak (at
    /// least `in_use`, the count now).
    pub(crate) fn tick(
        &mut self,
        now: Instant,
        max_age: Duration,
        peak: usize,
        seen: Instant,
        in_use: usize,
    ) -> usize {
        if max_age.is_zero() {
            // The window holds nothing: not even a peak seen at this very instant (see
            // docs/design.md, "The demand window").
            self.peaks.clear();
            return in_use;
        }
        while self.peaks.back().is_some_and(|&(_, p)| p <= peak) {
            self.peaks.pop_back();
        }
        // A record never goes before a later one (invariant #1), whatever the stamps say.
        let seen = self.peaks.back().map_or(seen, |&(at, _)| seen.max(at));
        self.peaks.push_back((seen, peak));
        // A peak seen at t counts at no tick after t + max_age.
        if let Some(start) = now.checked_sub(max_age) {
            while self.peaks.front().is_some_and(|&(at, _)| at < start) {
                self.peaks.pop_front();
            }
        }
        debug_assert!(self.holds());
        self.peaks.front().map_or(0, |&(_, p)| p).max(in_use)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peak_counts_until_max_age_after_it_was_last_seen() {
        let mut d = Demand::default();
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let age = Duration::from_secs(15);
        // Seen until 0 s: counts at the tick at 10 s, not at 20 s.
        assert_eq!(d.tick(at(10), age, 8, at(0), 0), 8);
        assert_eq!(d.tick(at(20), age, 0, at(20), 0), 0);
        // Seen until 9 s: still counts at 20 s.
        assert_eq!(d.tick(at(30), age, 8, at(29), 0), 8);
        assert_eq!(d.tick(at(40), age, 2, at(40), 2), 8);
        assert_eq!(d.tick(at(45), age, 2, at(45), 2), 2);
    }

    #[test]
    fn with_max_age_zero_the_window_holds_nothing() {
        let mut d = Demand::default();
        let t0 = Instant::now();
        // A peak seen at the very instant of the tick does not count: only the count now.
        assert_eq!(d.tick(t0, Duration::ZERO, 8, t0, 0), 0);
        assert_eq!(d.tick(t0, Duration::ZERO, 8, t0, 3), 3);
        let later = t0 + Duration::from_secs(1);
        assert_eq!(d.tick(later, Duration::ZERO, 5, later, 1), 1);
    }

    #[test]
    fn the_current_count_is_a_floor() {
        let mut d = Demand::default();
        let t0 = Instant::now();
        assert_eq!(d.tick(t0, Duration::ZERO, 3, t0, 5), 5);
    }
}
