//! The limiters that set the admission limit from the latency of holds. Both average holds
//! in batches (at least [`MIN_BATCH`], or half the limit) and move the limit once a batch.
//!
//! A batch's latency is its holds' interquartile mean ([`Batch`]), not their mean.
//!
//! - [`Vegas`] (TCP Vegas, as Netflix's concurrency-limits has it): the database's latency
//!   unloaded is the *base*; a batch whose latency is `short` says `limit × (1 − base/short)`
//!   queries are queued inside the database. Kept between `alpha` and `beta`
//!   ([`thresholds`]): fewer, the limit grows; more, it falls at once to the limit that would
//!   queue `alpha` if latency grows with concurrency — by half at most. The base is the
//!   lowest batch latency, and it is re-measured every [`PROBE_EVERY`] batches (from the next
//!   batch on after a drop of more than half) by a probe that halves the limit for two
//!   batches, drains and measures (as BBR's ProbeRTT), so a database that became slower for
//!   good gets a new base instead of a limit of one.
//! - [`Gradient`] (Gradient2): compares the batch mean with a long-term average over many
//!   batches and shrinks the limit by their ratio when the batch is more than `TOLERANCE`
//!   times slower; otherwise grows by about the square root of the limit. It follows changes
//!   of latency, not its level: a latency that stays high becomes the new normal.
//!
//! In both, a batch that used less than half the limit moves it only down, to no less than
//! twice what it used ([`unused`]).
//!
//! # Invariants
//!
//! 1. `1 <= limit <= max` after every call.

use std::time::Duration;

use super::LimitMove;

/// The fewest holds a batch averages.
const MIN_BATCH: usize = 8;
/// Vegas: batches between probes of the base latency.
const PROBE_EVERY: u32 = 50;
/// Gradient2: the short-term latency may reach this many times the long-term one before the
/// limit shrinks.
const TOLERANCE: f64 = 1.5;
/// Gradient2: how much of each new estimate the limit takes.
const SMOOTHING: f64 = 0.2;
/// Gradient2: the long-term average's window, in batches.
const LONG_WINDOW: f64 = 60.0;

/// A batch of holds being summarised by their interquartile mean (the mean of the middle
/// half): a minority of outliers — a few queries many times slower (a bimodal cost), a few
/// holds cut short (cancelled at a deadline) — does not move it, where a plain mean follows
/// each of them; and it is steadier than a median under jitter.
#[derive(Debug, Clone, Default)]
struct Batch {
    /// The holds of the batch, in seconds (kept between batches: no allocation once grown).
    holds: Vec<f64>,
    peak: usize,
}

impl Batch {
    /// Adds a hold that ended with `in_use` admitted; the batch's interquartile mean and the
    /// most admitted at once in it, once it holds `size`.
    fn add(&mut self, held: Duration, in_use: usize, size: usize) -> Option<(f64, usize)> {
        self.holds.push(held.as_secs_f64());
        self.peak = self.peak.max(in_use);
        if self.holds.len() < size.max(MIN_BATCH) {
            return None;
        }
        self.holds.sort_unstable_by(f64::total_cmp);
        let quarter = self.holds.len() / 4;
        let middle = &self.holds[quarter..self.holds.len() - quarter];
        let mean = middle.iter().sum::<f64>() / middle.len() as f64;
        let done = (mean.max(1e-9), self.peak);
        self.holds.clear();
        self.peak = 0;
        Some(done)
    }
}

/// Where a Vegas probe of the base latency stands.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Probe {
    /// Not probing: this many batches since the last probe.
    After(u32),
    /// The limit is halved; the holds begun before it drain in this batch.
    Draining { restore: f64 },
    /// This batch measures the base.
    Measuring { restore: f64 },
}

#[derive(Debug, Clone)]
pub(crate) struct Vegas {
    limit: f64,
    max: f64,
    base: Option<f64>,
    short: f64,
    batch: Batch,
    probe: Probe,
    last_move: LimitMove,
}

impl Vegas {
    fn new(max: f64) -> Self {
        Vegas {
            limit: max,
            max,
            base: None,
            short: 0.0,
            batch: Batch::default(),
            probe: Probe::After(0),
            last_move: LimitMove::Starting,
        }
    }

    fn sample(&mut self, held: Duration, in_use: usize) -> bool {
        let Some((short, peak)) = self.batch.add(held, in_use, self.limit as usize / 2) else {
            return false;
        };
        self.short = short;
        match self.probe {
            Probe::Draining { restore } => {
                self.probe = Probe::Measuring { restore };
                self.last_move = LimitMove::Probed;
                return true;
            }
            Probe::Measuring { restore } => {
                self.base = Some(short);
                // Back to where it was, under a `max` lowered meanwhile.
                self.limit = restore.min(self.max);
                self.probe = Probe::After(0);
                self.last_move = LimitMove::Probed;
                return true;
            }
            Probe::After(n) if n + 1 >= PROBE_EVERY => {
                let restore = self.limit;
                self.limit = (self.limit / 2.0).max(1.0);
                self.probe = Probe::Draining { restore };
                self.last_move = LimitMove::Probed;
                return true;
            }
            Probe::After(n) => self.probe = Probe::After(n + 1),
        }
        let base = self.base.map_or(short, |b| b.min(short));
        self.base = Some(base);
        if (peak as f64) < self.limit / 2.0 {
            self.limit = unused(self.limit, peak);
            self.last_move = LimitMove::Idle;
            return true;
        }
        let queued = self.limit * (1.0 - base / short);
        let step = self.limit.log10().max(1.0);
        let (alpha, beta) = thresholds(self.limit);
        let (limit, moved) = if queued <= step {
            (self.limit + beta, LimitMove::Grew)
        } else if queued < alpha {
            (self.limit + step, LimitMove::Grew)
        } else if queued > beta {
            // Down to the limit that would queue `alpha`, were latency proportional to
            // concurrency past what the database serves at once.
            let to = (self.limit * base / short + alpha).min(self.limit - step);
            if to < self.limit / 2.0 {
                // A drop this large may be a database slower for good rather than more
                // queued: halve, and measure the base from the next batch on (the probe
                // halves once more and drains).
                self.probe = Probe::After(PROBE_EVERY - 1);
                (self.limit / 2.0, LimitMove::Shrank)
            } else {
                (to, LimitMove::Shrank)
            }
        } else {
            (self.limit, LimitMove::Held)
        };
        self.limit = limit.clamp(1.0, self.max);
        self.last_move = moved;
        true
    }
}

/// Vegas's `alpha` and `beta`: the queries queued inside the database below which the limit
/// grows and above which it falls. Netflix's 3 and 6 times `log10(limit)` for large limits;
/// for small ones a tenth and a fifth of the limit (at least 1 and 2), so a database serving
/// ten at once runs at most about 1.2 times its own latency rather than 1.6 times.
fn thresholds(limit: f64) -> (f64, f64) {
    let step = limit.log10().max(1.0);
    (
        (0.1 * limit).clamp(1.0, 3.0 * step),
        (0.2 * limit).clamp(2.0, 6.0 * step),
    )
}

/// The limit after a batch in which at most `peak` were admitted at once, under half of it:
/// a limit that is not used is not known to be safe (as TCP's congestion window validation,
/// RFC 7661), so it comes down by `log10(limit)` a batch, to no less than twice the peak —
/// room for a burst, and fewer queries let in at once should the database slow down.
fn unused(limit: f64, peak: usize) -> f64 {
    (limit - limit.log10().max(1.0))
        .max(2.0 * peak as f64)
        .max(1.0)
}

#[derive(Debug, Clone)]
pub(crate) struct Gradient {
    limit: f64,
    max: f64,
    long: Option<f64>,
    short: f64,
    batch: Batch,
    last_move: LimitMove,
}

impl Gradient {
    fn new(max: f64) -> Self {
        Gradient {
            limit: max,
            max,
            long: None,
            short: 0.0,
            batch: Batch::default(),
            last_move: LimitMove::Starting,
        }
    }

    fn sample(&mut self, held: Duration, in_use: usize) -> bool {
        let Some((short, peak)) = self.batch.add(held, in_use, self.limit as usize / 2) else {
            return false;
        };
        self.short = short;
        let mut long = self.long.map_or(short, |long| {
            long + (short - long) * 2.0 / (LONG_WINDOW + 1.0)
        });
        // Latency fell well below the long-term level: let the average catch up faster.
        if long / short > 2.0 {
            long *= 0.95;
        }
        self.long = Some(long);
        if (peak as f64) < self.limit / 2.0 {
            self.limit = unused(self.limit, peak);
            self.last_move = LimitMove::Idle;
            return true;
        }
        let gradient = (TOLERANCE * long / short).clamp(0.5, 1.0);
        let estimate = self.limit * gradient + self.limit.sqrt();
        self.limit = (self.limit * (1.0 - SMOOTHING) + estimate * SMOOTHING).clamp(1.0, self.max);
        self.last_move = if gradient < 1.0 {
            LimitMove::Shrank
        } else {
            LimitMove::Grew
        };
        true
    }
}

/// A limiter (see the module's docs).
#[derive(Debug, Clone)]
pub(crate) enum Limiter {
    Vegas(Vegas),
    Gradient(Gradient),
}

impl Limiter {
    pub(crate) fn vegas(max: usize) -> Self {
        Limiter::Vegas(Vegas::new(max.max(1) as f64))
    }

    pub(crate) fn gradient(max: usize) -> Self {
        Limiter::Gradient(Gradient::new(max.max(1) as f64))
    }

    /// One hold of `held`, ended with `in_use` takes admitted (itself included): what the
    /// limiter did with the limit, when the hold ended a batch.
    pub(crate) fn sample(&mut self, held: Duration, in_use: usize) -> Option<LimitMove> {
        let judged = match self {
            Limiter::Vegas(v) => v.sample(held, in_use),
            Limiter::Gradient(g) => g.sample(held, in_use),
        };
        debug_assert!(
            (1.0..=self.max()).contains(&self.raw()),
            "invariant 1: the limit within [1, max]"
        );
        judged.then(|| self.signal().2)
    }

    fn raw(&self) -> f64 {
        match self {
            Limiter::Vegas(v) => v.limit,
            Limiter::Gradient(g) => g.limit,
        }
    }

    fn max(&self) -> f64 {
        match self {
            Limiter::Vegas(v) => v.max,
            Limiter::Gradient(g) => g.max,
        }
    }

    /// The limit now.
    pub(crate) fn limit(&self) -> usize {
        self.raw().round() as usize
    }

    /// A new `max_count`: the limit stays under it.
    pub(crate) fn set_max(&mut self, max: usize) {
        let max = max.max(1) as f64;
        let (limit, top) = match self {
            Limiter::Vegas(v) => (&mut v.limit, &mut v.max),
            Limiter::Gradient(g) => (&mut g.limit, &mut g.max),
        };
        *top = max;
        *limit = limit.min(max).max(1.0);
    }

    /// The last batch's mean hold, the latency it is compared with (Vegas's base,
    /// Gradient2's long-term average), and why the limit last moved.
    pub(crate) fn signal(&self) -> (Duration, Duration, LimitMove) {
        let secs = |s: f64| Duration::from_secs_f64(s.max(0.0));
        match self {
            Limiter::Vegas(v) => (secs(v.short), secs(v.base.unwrap_or(0.0)), v.last_move),
            Limiter::Gradient(g) => (secs(g.short), secs(g.long.unwrap_or(0.0)), g.last_move),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A database serving `capacity` at once with `base` latency, each extra query sharing it:
    /// `rounds` batches of holds at the limit the limiter sets, all of it in use.
    fn run(l: &mut Limiter, base: Duration, capacity: usize, holds: usize) {
        for _ in 0..holds {
            let limit = l.limit();
            let held = base * limit.max(capacity) as u32 / capacity as u32;
            l.sample(held, limit);
        }
    }

    #[test]
    fn vegas_settles_a_tenth_or_so_over_what_the_database_serves() {
        let mut l = Limiter::vegas(100);
        run(&mut l, 10 * MS, 20, 20_000);
        let limit = l.limit();
        assert!((21..=25).contains(&limit), "{limit}");
        // The database slows ten times over, serving as many at once: after a dip and a
        // probe the limit settles where it was.
        run(&mut l, 100 * MS, 20, 20_000);
        let (_, base, _) = l.signal();
        assert!(base >= 90 * MS, "the base was measured again: {base:?}");
        assert!((21..=25).contains(&l.limit()), "{}", l.limit());
        // It serves half as many at once: the limit follows.
        run(&mut l, 100 * MS, 10, 20_000);
        assert!((11..=13).contains(&l.limit()), "{}", l.limit());
    }

    /// A `max_count` lowered while a probe halves the limit: the probe puts the limit back
    /// under the new `max`, not where it was.
    #[test]
    fn a_probe_ends_under_a_max_lowered_meanwhile() {
        let mut l = Limiter::vegas(40);
        let mut lowered = false;
        for _ in 0..5_000 {
            let limit = l.limit();
            l.sample(10 * MS, limit);
            if !lowered && l.signal().2 == LimitMove::Probed {
                l.set_max(10);
                lowered = true;
            }
            assert!(l.limit() <= if lowered { 10 } else { 40 }, "{}", l.limit());
        }
        assert!(lowered, "a probe ran");
    }

    /// A bimodal cost — one hold in twenty fifty times slower, with no overload — does not
    /// read as a database queueing: the limit stays over what the database serves. (With a
    /// batch's plain mean, a batch holding one slow hold read as five times slower, and the
    /// limit fell to a few.)
    #[test]
    fn a_few_slow_holds_do_not_read_as_overload() {
        let mut l = Limiter::vegas(100);
        for i in 0..20_000u32 {
            let limit = l.limit();
            let held = if i % 20 == 0 {
                500 * MS
            } else {
                10 * MS * limit.max(20) as u32 / 20
            };
            l.sample(held, limit);
        }
        assert!(l.limit() >= 20, "{}", l.limit());
    }

    #[test]
    fn vegas_drops_at_once_when_latency_jumps() {
        let mut l = Limiter::vegas(100);
        run(&mut l, 10 * MS, 20, 5_000);
        let before = l.limit();
        // Two batches of holds ten times slower: the one under way ends in them (its fast
        // half may outweigh them: the batch's interquartile mean ignores a minority), the
        // next is all slow.
        let mut moves = Vec::new();
        for _ in 0..2 * (before / 2).max(MIN_BATCH) {
            l.sample(100 * MS, before);
            moves.push(l.signal().2);
            if moves.last() == Some(&LimitMove::Shrank) {
                break;
            }
        }
        assert!(moves.contains(&LimitMove::Shrank), "{moves:?}");
        assert!(
            l.limit() <= before.div_ceil(2),
            "{} from {before}",
            l.limit()
        );
        // No further than half at once; the base is measured again from the next batch on,
        // and the limit comes back over what the database serves.
        assert!(l.limit() >= before / 2, "{} from {before}", l.limit());
        run(&mut l, 100 * MS, 20, 200);
        let (_, base, _) = l.signal();
        assert!(base >= 90 * MS, "the base was measured again: {base:?}");
        assert!(l.limit() >= 20, "{}", l.limit());
    }

    #[test]
    fn gradient_shrinks_on_a_change_and_comes_back_as_it_lasts() {
        let mut l = Limiter::gradient(40);
        for _ in 0..400 {
            l.sample(10 * MS, 40);
        }
        assert_eq!(
            l.limit(),
            40,
            "steady latency at full use keeps the limit at max"
        );
        for _ in 0..200 {
            l.sample(100 * MS, 40);
        }
        assert!(l.limit() <= 20, "{}", l.limit());
        assert_eq!(l.signal().2, LimitMove::Shrank);
        let low = l.limit();
        for _ in 0..3000 {
            l.sample(100 * MS, 40);
        }
        assert!(l.limit() > low, "{} > {low}", l.limit());
        assert_eq!(l.signal().2, LimitMove::Grew);
    }

    #[test]
    fn a_limit_not_used_comes_down_to_twice_the_use() {
        for mut l in [Limiter::vegas(40), Limiter::gradient(40)] {
            for _ in 0..100 {
                l.sample(10 * MS, 40);
            }
            assert_eq!(l.limit(), 40);
            // At most 5 admitted at once, at the same latency: the limit comes down step
            // by step to twice that, no lower (at twice, half of it is used, and it may grow
            // a little again).
            let mut seen = Vec::new();
            for i in 0..400 {
                l.sample(10 * MS, 1 + i % 5);
                seen.push(l.limit());
            }
            let above: Vec<_> = seen.iter().take_while(|&&l| l > 12).collect();
            assert!(above.windows(2).all(|w| w[1] <= w[0]), "{seen:?}");
            assert!(above.windows(2).all(|w| w[0] - w[1] <= 2), "{seen:?}");
            assert!(above.len() < seen.len(), "{seen:?}");
            assert!(seen.iter().all(|&l| l >= 10), "{seen:?}");
            assert!((10..=12).contains(&l.limit()), "{seen:?}");
        }
    }
}
