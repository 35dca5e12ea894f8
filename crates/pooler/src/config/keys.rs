//! The table of a pool's keys: each key's kind, the setters the builder gets, and the
//! listings validation and `reconfigure` read. A field of `PoolConfig` missing here fails to
//! compile.

use std::time::Duration;

use super::{MemberOrder, PoolConfig, PoolConfigBuilder};
use crate::admission::AdmissionMode;

/// What kind of value a key takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A string.
    Text,
    /// A whole number from 0 to [`MAX_COUNT`].
    Count,
    /// A time value (see [`time`](crate::time)); `zero_ok` says whether zero is allowed.
    Time { zero_ok: bool },
    /// `"lifo"` or `"fifo"`.
    Order,
    /// `"off"`, `"vegas"` or `"gradient"`.
    Admission,
}

/// What a key's value looks like to validation.
pub(super) trait Value {
    /// A time key's value (`None` when unset).
    fn time(&self) -> Option<Option<Duration>> {
        None
    }
    /// A count key's value (`None` when unset).
    fn count(&self) -> Option<Option<usize>> {
        None
    }
}

impl Value for String {}
impl Value for Option<String> {}
impl Value for MemberOrder {}
impl Value for AdmissionMode {}
impl Value for Duration {
    fn time(&self) -> Option<Option<Duration>> {
        Some(Some(*self))
    }
}
impl Value for Option<Duration> {
    fn time(&self) -> Option<Option<Duration>> {
        Some(*self)
    }
}
impl Value for usize {
    fn count(&self) -> Option<Option<usize>> {
        Some(Some(*self))
    }
}
impl Value for Option<usize> {
    fn count(&self) -> Option<Option<usize>> {
        Some(*self)
    }
}

/// The table of keys: `key: Type => Kind, setter`. Setters for the text keys (`name`,
/// `group`) are written by hand below; `exact` generates one taking the key's type, `set` one
/// taking anything that converts to it (for optional durations: a `Duration` or `None`).
macro_rules! keys {
    ($($key:ident: $ty:ty => $kind:expr, $setter:ident;)*) => {
        /// Every key, with its kind, in the config's order.
        pub(crate) const KEYS: &[(&str, Kind)] = &[$((stringify!($key), $kind)),*];

        impl PoolConfig {
            /// The keys whose values differ between two configs, in the config's order.
            pub(crate) fn changed_keys(&self, other: &PoolConfig) -> Vec<&'static str> {
                let mut changed = Vec::new();
                $(if self.$key != other.$key { changed.push(stringify!($key)); })*
                changed
            }

            /// Every key's value, for validation.
            pub(super) fn values(&self) -> [(&'static str, Kind, &dyn Value); KEYS.len()] {
                [$((stringify!($key), $kind, &self.$key as &dyn Value)),*]
            }
        }

        /// A field of `PoolConfig` missing from the table fails to compile here.
        #[allow(dead_code)]
        fn every_field_is_in_the_table(config: PoolConfig) {
            let PoolConfig { $($key: _,)* backoff_jitter: _ } = config;
        }

        impl PoolConfigBuilder {
            $(keys!(@setter $setter $key $ty);)*
        }
    };
    (@setter set $key:ident $ty:ty) => {
        #[doc = concat!("Sets `", stringify!($key), "` (see [`PoolConfig::", stringify!($key), "`]).")]
        pub fn $key(mut self, value: impl Into<$ty>) -> Self {
            self.config.$key = value.into();
            keys!(@required self $key);
            self
        }
    };
    (@setter exact $key:ident $ty:ty) => {
        #[doc = concat!("Sets `", stringify!($key), "` (see [`PoolConfig::", stringify!($key), "`]).")]
        pub fn $key(mut self, value: $ty) -> Self {
            self.config.$key = value;
            keys!(@required self $key);
            self
        }
    };
    (@setter by_hand $key:ident $ty:ty) => {};
    (@required $self:ident init_count) => { $self.init_set = true; };
    (@required $self:ident max_count) => { $self.max_set = true; };
    (@required $self:ident $key:ident) => {};
}

keys! {
    name: String => Kind::Text, by_hand;
    group: Option<String> => Kind::Text, by_hand;
    init_count: usize => Kind::Count, exact;
    max_count: usize => Kind::Count, exact;
    cull_interval: Duration => Kind::Time { zero_ok: true }, exact;
    max_age: Duration => Kind::Time { zero_ok: true }, exact;
    member_start_timeout: Duration => Kind::Time { zero_ok: false }, exact;
    queue_max: usize => Kind::Count, exact;
    queue_target: Option<Duration> => Kind::Time { zero_ok: false }, set;
    queue_interval: Duration => Kind::Time { zero_ok: false }, exact;
    admission: AdmissionMode => Kind::Admission, exact;
    auto_grow_threshold: Option<usize> => Kind::Count, exact;
    max_concurrent_starts: Option<usize> => Kind::Count, exact;
    max_start_rate: Option<usize> => Kind::Count, exact;
    max_lifetime: Option<Duration> => Kind::Time { zero_ok: false }, set;
    max_lifetime_overlap: Option<Duration> => Kind::Time { zero_ok: false }, set;
    max_lifetime_jitter: Duration => Kind::Time { zero_ok: true }, exact;
    member_order: MemberOrder => Kind::Order, exact;
    member_shutdown: Duration => Kind::Time { zero_ok: false }, exact;
    health_check_interval: Option<Duration> => Kind::Time { zero_ok: false }, set;
    leak_detection_threshold: Option<Duration> => Kind::Time { zero_ok: false }, set;
    idle_check_threshold: Option<Duration> => Kind::Time { zero_ok: true }, set;
    take_timeout: Option<Duration> => Kind::Time { zero_ok: true }, set;
}

/// The keys a pool must name.
#[cfg(feature = "file")]
pub(crate) const REQUIRED_KEYS: &[&str] = &["name", "init_count", "max_count"];
