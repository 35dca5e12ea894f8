//! The features a reference-model sequence runs with, and the rules each adds, as the
//! model states them: the start cap (docs/design.md, "Start throttling"), queue-delay
//! shedding ("Shedding") and make before break ("Lifetimes").

use std::time::Duration;

use pooler::{AdmissionMode, PoolConfig};
use proptest::prelude::*;

/// What one sequence turns on. Times are milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Features {
    /// `max_concurrent_starts`.
    pub(crate) cap: Option<usize>,
    /// `queue_target` and `queue_interval`.
    pub(crate) shed: Option<(u64, u64)>,
    /// `admission`, always with a `queue_target` here (a derived one follows the measured
    /// latency, which the model does not restate).
    pub(crate) admission: Option<AdmissionMode>,
    /// `max_lifetime` (even, so that lifetimes end at even milliseconds, never in a taker's
    /// tick) and `max_lifetime_overlap` (even too).
    pub(crate) lifetime: Option<(u64, Option<u64>)>,
}

impl Features {
    /// `config` with these features on (lifetimes with no jitter, so the model knows when
    /// each ends).
    pub(crate) fn apply(self, config: PoolConfig) -> PoolConfig {
        let ms = Duration::from_millis;
        let mut b = config
            .to_builder()
            .max_concurrent_starts(self.cap)
            .admission(self.admission.unwrap_or(AdmissionMode::Off))
            .queue_target(self.shed.map(|(target, _)| ms(target)))
            .max_lifetime_jitter(Duration::ZERO);
        if let Some((_, interval)) = self.shed {
            b = b.queue_interval(ms(interval));
        }
        if let Some((lifetime, overlap)) = self.lifetime {
            b = b
                .max_lifetime(ms(lifetime))
                .max_lifetime_overlap(overlap.map(ms));
        }
        b.build().expect("a valid feature set")
    }
}

pub(crate) fn features() -> impl Strategy<Value = Features> {
    let cap = proptest::option::weighted(0.4, 1usize..=2);
    let shed = (1u64..=30, 10u64..=300);
    let shed = prop_oneof![
        Just((None, None)),
        shed.clone().prop_map(|shed| (Some(shed), None)),
        (
            shed,
            prop_oneof![Just(AdmissionMode::Vegas), Just(AdmissionMode::Gradient)]
        )
            .prop_map(|(shed, mode)| (Some(shed), Some(mode))),
    ];
    let lifetime = proptest::option::weighted(
        0.4,
        (50u64..=300).prop_flat_map(|half| {
            let lifetime = 2 * half;
            (
                Just(lifetime),
                proptest::option::weighted(0.6, (1..half).prop_map(|h| 2 * h)),
            )
        }),
    );
    (cap, shed, lifetime).prop_map(|(cap, (shed, admission), lifetime)| Features {
        cap,
        shed,
        admission,
        lifetime,
    })
}

/// The shedding window as docs/design.md ("Shedding") states it: an interval whose shortest
/// queue wait was above the target overloads the next one; while overloaded a take that
/// would queue is shed, and one served after more than twice the target is stale.
#[derive(Debug)]
pub(crate) struct Window {
    target: u64,
    interval: u64,
    began: u64,
    min: Option<u64>,
    overloaded: bool,
}

impl Window {
    pub(crate) fn new(target: u64, interval: u64) -> Window {
        Window {
            target,
            interval,
            began: 0,
            min: None,
            overloaded: false,
        }
    }

    /// Ends the interval under way if it is over.
    fn roll(&mut self, now: u64) {
        if now - self.began >= self.interval {
            self.overloaded = self.min.is_some_and(|m| m > self.target);
            self.began = now;
            self.min = None;
        }
    }

    /// A queue wait of `waited` ended at `now` (served, or out of time).
    pub(crate) fn waited(&mut self, waited: u64, now: u64) {
        self.roll(now);
        self.min = Some(self.min.map_or(waited, |m| m.min(waited)));
    }

    /// Whether a take that would queue at `now` is shed.
    pub(crate) fn sheds(&mut self, now: u64) -> bool {
        self.roll(now);
        self.overloaded
    }

    /// Whether a take served at `now` after waiting `waited` is refused as stale.
    pub(crate) fn stale(&mut self, waited: u64, now: u64) -> bool {
        self.sheds(now) && waited > 2 * self.target
    }
}
