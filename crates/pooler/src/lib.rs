#![doc = include_str!("../../../README.md")]
#![forbid(unsafe_code)]

mod config;
mod cull;
mod engine;
mod error;
mod file;
mod health;
mod leak;
mod lifecycle;
mod lifetime;
mod manager;
mod member;
pub mod metrics;
mod pool;
mod reconfigure;
mod registry;
mod shared;
mod supervisor;
pub mod time;
mod timer;

pub use crate::config::{MemberOrder, PoolConfig};
pub use crate::error::{ConfigError, StartError, TakeError};
pub use crate::file::Kinds;
pub use crate::manager::{Manager, MemberContext};
pub use crate::member::Member;
pub use crate::pool::{MemberStats, MemberStatus, Pool, Shutdown, Utilization};
pub use crate::reconfigure::ReconfigureAction;
pub use crate::registry::{GroupMember, GroupStrategy, Pooler, PoolerError};
/// The TOML crate, re-exported for [`Kinds`] builders, which read a pool's `member` table.
pub use toml;
