//! What takes and returns read of the config without a lock: which features make a take or a
//! return do more than move a member, and the few limits the hot path and the start and stop
//! tasks need. Written only by the pool's start and by `reconfigure` (under the cold lock),
//! read anywhere with relaxed loads (docs/design.md, "The engine").
//!
//! # Invariants
//!
//! 1. The values always describe one config: a reconfigure writes them under the cold lock,
//!    after the config itself, so a reader never acts on a feature the config does not have
//!    for longer than the race between the two writes.
//! 2. `gone` never goes back to false.

use std::time::Duration;

use crate::config::PoolConfig;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// A duration as a relaxed atomic: nanoseconds, `NONE` for no value.
#[derive(Debug)]
struct Nanos(AtomicU64);

impl Nanos {
    const NONE: u64 = u64::MAX;

    fn new(d: Option<Duration>) -> Self {
        let n = Nanos(AtomicU64::new(Self::NONE));
        n.set(d);
        n
    }

    fn set(&self, d: Option<Duration>) {
        let n = d.map_or(Self::NONE, |d| {
            u64::try_from(d.as_nanos()).unwrap_or(Self::NONE - 1)
        });
        self.0.store(n, Relaxed);
    }

    #[inline]
    fn get(&self) -> Option<Duration> {
        match self.0.load(Relaxed) {
            Self::NONE => None,
            n => Some(Duration::from_nanos(n)),
        }
    }
}

#[derive(Debug)]
pub(crate) struct Features {
    /// Bits of [`Features::LIFETIMES`], [`Features::LEAKS`], [`Features::IDLE`],
    /// [`Features::GROW`], [`Features::ZERO_WAITS`], [`Features::ADMIT`].
    flags: AtomicU64,
    idle_check: Nanos,
    take_timeout: Nanos,
    start_timeout: Nanos,
    shutdown: Nanos,
    /// The runtime the pool was started on has shut down (the pool closed because of it).
    gone: AtomicBool,
    /// The wait histogram reaches a recorder.
    waits_live: bool,
    /// The manager's `idle_check_threshold`, for a configuration that sets none.
    idle_check_fallback: Option<Duration>,
}

impl Features {
    /// `max_lifetime` is set: takes check expiries against an exact clock, and returns too
    /// for a member near its expiry by the coarse time.
    pub(crate) const LIFETIMES: u64 = 1;
    /// `leak_detection_threshold` is set: takes and returns keep leak records (a take with
    /// an exact clock read, a return with none unless the member was reported).
    pub(crate) const LEAKS: u64 = 2;
    /// `idle_check_threshold` is set.
    pub(crate) const IDLE: u64 = 8;
    /// `auto_grow_threshold` is set.
    pub(crate) const GROW: u64 = 16;
    /// Takes served at once are counted as waits of zero (the wait histogram reaches a
    /// recorder and no idle check makes a take wait). Not a feature the fast path minds.
    pub(crate) const ZERO_WAITS: u64 = 32;
    /// `admission` is on: the hot core times the holds the limiter needs (a timed hold
    /// takes the slow path both ways), and a timed hold's return gives the limiter the
    /// latency it measured. Not a bit the fast path minds: an untimed hold under admission
    /// is taken and returned as any other.
    pub(crate) const ADMIT: u64 = 64;
    /// The bits a take's fast path minds.
    pub(crate) const SLOW: u64 = Self::LIFETIMES | Self::LEAKS | Self::IDLE | Self::GROW;
    /// The bits a return's fast path minds.
    pub(crate) const SLOW_RETURN: u64 = Self::LIFETIMES | Self::LEAKS;

    /// `idle_check_fallback`: the threshold in force while the configuration sets none (the
    /// manager's, [`Manager::idle_check_threshold`](crate::Manager::idle_check_threshold)).
    pub(crate) fn new(
        config: &PoolConfig,
        waits_live: bool,
        idle_check_fallback: Option<Duration>,
    ) -> Self {
        let f = Features {
            flags: AtomicU64::new(0),
            idle_check: Nanos::new(None),
            take_timeout: Nanos::new(None),
            start_timeout: Nanos::new(None),
            shutdown: Nanos::new(None),
            gone: AtomicBool::new(false),
            waits_live,
            idle_check_fallback,
        };
        f.set(config);
        f
    }

    /// Takes `config`'s values (at start, and by `reconfigure` under the cold lock).
    pub(crate) fn set(&self, config: &PoolConfig) {
        let mut flags = 0;
        let idle_check = config.idle_check_threshold.or(self.idle_check_fallback);
        if self.waits_live && idle_check.is_none() {
            flags |= Self::ZERO_WAITS;
        }
        if config.max_lifetime.is_some() {
            flags |= Self::LIFETIMES;
        }
        if config.leak_detection_threshold.is_some() {
            flags |= Self::LEAKS;
        }
        if idle_check.is_some() {
            flags |= Self::IDLE;
        }
        if config.auto_grow_threshold.is_some() {
            flags |= Self::GROW;
        }
        if config.admission != crate::admission::AdmissionMode::Off {
            flags |= Self::ADMIT;
        }
        self.idle_check.set(idle_check);
        self.take_timeout.set(config.take_timeout);
        self.start_timeout.set(Some(config.member_start_timeout));
        self.shutdown.set(Some(config.member_shutdown));
        self.flags.store(flags, Relaxed);
    }

    #[inline]
    pub(crate) fn flags(&self) -> u64 {
        self.flags.load(Relaxed)
    }

    /// `idle_check_threshold`, or the manager's when the configuration sets none.
    #[inline]
    pub(crate) fn idle_check(&self) -> Option<Duration> {
        self.idle_check.get()
    }

    /// `take_timeout`.
    #[inline]
    pub(crate) fn take_timeout(&self) -> Option<Duration> {
        self.take_timeout.get()
    }

    /// `member_start_timeout` and `member_shutdown`.
    pub(crate) fn timeouts(&self) -> (Duration, Duration) {
        (
            self.start_timeout.get().unwrap_or_default(),
            self.shutdown.get().unwrap_or_default(),
        )
    }

    /// Whether the pool closed because its runtime shut down.
    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Relaxed)
    }

    /// The pool's runtime has shut down; true if it was not known before.
    pub(crate) fn set_gone(&self) -> bool {
        !self.gone.swap(true, Relaxed)
    }
}

#[cfg(all(test, not(pooler_loom)))]
mod tests {
    use super::*;

    #[test]
    fn durations_round_trip_and_none_stays_none() {
        let mut config = PoolConfig::new("f", 1, 2);
        config.take_timeout = Some(Duration::from_millis(250));
        config.idle_check_threshold = None;
        let f = Features::new(&config, false, None);
        assert_eq!(f.take_timeout(), Some(Duration::from_millis(250)));
        assert_eq!(f.idle_check(), None);
        config.take_timeout = None;
        config.idle_check_threshold = Some(Duration::MAX);
        f.set(&config);
        assert_eq!(f.take_timeout(), None);
        assert!(
            f.idle_check().is_some(),
            "a huge threshold is still a threshold"
        );
        assert!(f.set_gone());
        assert!(!f.set_gone());
        assert!(f.is_gone());
    }
}
