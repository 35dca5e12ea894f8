#![doc = include_str!("../../../README.md")]
#![forbid(unsafe_code)]

mod config;
mod engine;
mod error;
mod lifecycle;
mod manager;
mod member;
mod pool;
mod shared;
mod supervisor;
pub mod time;

pub use crate::config::{MemberOrder, PoolConfig};
pub use crate::error::{ConfigError, StartError, TakeError};
pub use crate::manager::{Manager, MemberContext};
pub use crate::member::Member;
pub use crate::pool::{MemberStats, MemberStatus, Pool, Shutdown, Utilization};
