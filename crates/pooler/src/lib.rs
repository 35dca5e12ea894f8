#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

mod admission;
mod backoff;
mod cancel;
mod checkout;
mod clock;
mod closing;
mod cold;
mod combinators;
mod config;
mod demand;
mod driver;
mod error;
mod expiries;
mod features;
#[cfg(feature = "file")]
mod file;
mod health;
mod held;
mod hooks;
mod hot;
mod housekeeping;
mod leak;
mod lifecycle;
mod lifetime;
pub mod links;
mod lives;
mod manager;
mod member;
pub mod metrics;
mod pool;
mod reconfigure;
mod registry;
mod shared;
mod shed;
mod status;
mod step;
mod supervisor;
mod sync;
mod take;
pub mod time;
mod waiters;

pub use crate::admission::{AdmissionMode, AdmissionStatus, LimitMove};
pub use crate::config::{MAX_COUNT, MIN_LIFETIME, MemberOrder, PoolConfig, PoolConfigBuilder};
pub use crate::error::{ConfigError, PoolerError, StartError, TakeError};
#[cfg(feature = "file")]
pub use crate::file::Kinds;
pub use crate::hooks::{HookFuture, HookResult, Hooks};
pub use crate::manager::{Latency, Manager, MemberContext};
pub use crate::member::{GroupMember, Member};
pub use crate::pool::{Health, MemberStats, MemberStatus, Pool, Shutdown, Utilization, WeakPool};
pub use crate::reconfigure::ReconfigureAction;
pub use crate::registry::{GroupStrategy, Pooler};

/// Guides for people coming to pooler from another pool.
pub mod guide {
    #[doc = include_str!("../guide/deadpool.md")]
    pub mod from_deadpool {}
    #[doc = include_str!("../guide/bb8.md")]
    pub mod from_bb8 {}
    #[doc = include_str!("../guide/erlang-pooler.md")]
    pub mod from_erlang_pooler {}
}
