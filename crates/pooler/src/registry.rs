//! `Pooler`: an in-process registry of named pools of any member types, and their groups
//! (pooler's application-level pool management and `pg` groups).

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use crate::config::PoolConfig;
use crate::error::{ConfigError, PoolerError, TakeError};
use crate::manager::Manager;
use crate::member::GroupMember;
use crate::pool::{Pool, Shutdown, Utilization};

/// How [`Pooler::take_group_member`] orders the pools of a group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GroupStrategy {
    /// A random pool first, then the others in random order (pooler's rule). The default.
    #[default]
    Random,
    /// The pool with the most free members first (pooler's early design notes).
    MostFree,
}

/// What the registry needs of a pool whatever its member type.
pub(crate) trait AnyPool: Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn manager_type(&self) -> &'static str;
    fn group(&self) -> Option<String>;
    fn utilization(&self) -> Utilization;
    fn close(&self, how: Shutdown) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

impl<M: Manager> AnyPool for Pool<M> {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn manager_type(&self) -> &'static str {
        std::any::type_name::<M>()
    }
    fn group(&self) -> Option<String> {
        Pool::group(self)
    }
    fn utilization(&self) -> Utilization {
        Pool::utilization(self)
    }
    fn close(&self, how: Shutdown) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(Pool::close(self, how))
    }
}

/// A pool as the registry keeps it.
#[cfg(feature = "file")]
pub(crate) fn any_pool<M: Manager>(pool: Pool<M>) -> Arc<dyn AnyPool> {
    Arc::new(pool)
}

enum Slot {
    /// The name is taken by a pool that is still starting.
    Starting,
    Ready(Arc<dyn AnyPool>),
}

#[derive(Default)]
struct Registry {
    pools: HashMap<String, Slot>,
    strategies: HashMap<String, GroupStrategy>,
}

/// A registry of named pools, of any member types, and of their groups.
///
/// A cheap `Clone` handle. Pools join the group named in their config (and leave or join
/// another when [`Pool::reconfigure`] changes it).
///
/// ```
/// # use pooler::{Manager, MemberContext, Pooler, PoolConfig, Shutdown};
/// # struct Replica(&'static str);
/// # impl Manager for Replica {
/// #     type Member = String;
/// #     type Error = std::io::Error;
/// #     async fn start(&self, c: &MemberContext) -> Result<String, Self::Error> {
/// #         Ok(format!("{}#{}", self.0, c.member_id()))
/// #     }
/// # }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pooler = Pooler::new();
/// for (name, host) in [("db1", "10.0.0.1"), ("db2", "10.0.0.2")] {
///     let config = PoolConfig::new(name, 2, 5).to_builder().group("replicas").build().unwrap();
///     pooler.new_pool(config, Replica(host)).await?;
/// }
/// let conn = pooler
///     .take_group_member::<Replica>("replicas", std::time::Duration::from_secs(1))
///     .await?;
/// println!("{} from {}", *conn, pooler::GroupMember::pool_name(&conn));
/// # drop(conn);
/// pooler.rm_group("replicas", Shutdown::Graceful).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct Pooler {
    inner: Arc<RwLock<Registry>>,
}

impl fmt::Debug for Pooler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pooler")
            .field("pools", &self.pool_names())
            .finish()
    }
}

/// Frees a reserved name if `new_pool` does not finish (an error or a dropped future).
struct Reservation<'a> {
    pooler: &'a Pooler,
    name: Option<String>,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            self.pooler.write().pools.remove(&name);
        }
    }
}

impl Pooler {
    /// An empty registry.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Registry> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Registry> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a pool and registers it under its name (pooler's `new_pool/1`).
    ///
    /// # Errors
    ///
    /// [`ConfigError::DuplicateName`] if the name is taken (by a pool started or starting);
    /// the config's own validation errors.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future frees the name and closes the half-started pool.
    pub async fn new_pool<M: Manager>(
        &self,
        config: PoolConfig,
        manager: M,
    ) -> Result<Pool<M>, PoolerError> {
        config.validate()?;
        let name = config.name.clone();
        {
            let mut registry = self.write();
            if registry.pools.contains_key(&name) {
                return Err(ConfigError::DuplicateName { pool: name }.into());
            }
            registry.pools.insert(name.clone(), Slot::Starting);
        }
        let mut reservation = Reservation {
            pooler: self,
            name: Some(name.clone()),
        };
        let pool = Pool::start(config, manager).await?;
        reservation.name = None;
        self.write()
            .pools
            .insert(name, Slot::Ready(Arc::new(pool.clone())));
        Ok(pool)
    }

    /// Reserves every one of `names` at once, or none: the names taken come back as
    /// [`ConfigError::DuplicateName`]s.
    #[cfg(feature = "file")]
    pub(crate) fn reserve(&self, names: &[String]) -> Result<(), ConfigError> {
        let mut registry = self.write();
        let taken: Vec<_> = names
            .iter()
            .filter(|n| registry.pools.contains_key(*n))
            .map(|n| ConfigError::DuplicateName { pool: n.clone() })
            .collect();
        ConfigError::from_list(taken)?;
        for name in names {
            registry.pools.insert(name.clone(), Slot::Starting);
        }
        Ok(())
    }

    /// Registers a started pool under the name reserved for it.
    #[cfg(feature = "file")]
    pub(crate) fn fill(&self, name: String, pool: Arc<dyn AnyPool>) {
        self.write().pools.insert(name, Slot::Ready(pool));
    }

    /// Frees a name reserved for a pool that did not start.
    #[cfg(feature = "file")]
    pub(crate) fn release(&self, name: &str) {
        let mut registry = self.write();
        if matches!(registry.pools.get(name), Some(Slot::Starting)) {
            registry.pools.remove(name);
        }
    }

    fn any(&self, name: &str) -> Result<Arc<dyn AnyPool>, PoolerError> {
        match self.read().pools.get(name) {
            Some(Slot::Ready(pool)) => Ok(pool.clone()),
            _ => Err(PoolerError::NoSuchPool {
                pool: name.to_owned(),
            }),
        }
    }

    /// The pool registered under `name`, as a pool of `M`.
    ///
    /// # Errors
    ///
    /// [`PoolerError::NoSuchPool`]; [`PoolerError::WrongType`] if its manager is not `M`.
    pub fn pool<M: Manager>(&self, name: &str) -> Result<Pool<M>, PoolerError> {
        let pool = self.any(name)?;
        pool.as_any()
            .downcast_ref::<Pool<M>>()
            .cloned()
            .ok_or_else(|| PoolerError::WrongType {
                pool: name.to_owned(),
                requested: std::any::type_name::<M>(),
                actual: pool.manager_type(),
            })
    }

    /// Closes the pool registered under `name` and removes it (pooler's `rm_pool/1`).
    ///
    /// # Errors
    ///
    /// [`PoolerError::NoSuchPool`].
    ///
    /// # Cancel safety
    ///
    /// The pool is removed at once; dropping the future stops the waiting, not the close.
    pub async fn rm_pool(&self, name: &str, how: Shutdown) -> Result<(), PoolerError> {
        let removed = {
            let mut registry = self.write();
            match registry.pools.get(name) {
                Some(Slot::Ready(_)) => registry.pools.remove(name),
                _ => None,
            }
        };
        match removed {
            Some(Slot::Ready(pool)) => {
                pool.close(how).await;
                Ok(())
            }
            _ => Err(PoolerError::NoSuchPool {
                pool: name.to_owned(),
            }),
        }
    }

    /// The names of the registered pools, sorted.
    #[must_use]
    pub fn pool_names(&self) -> Vec<String> {
        let mut names: Vec<_> = self
            .read()
            .pools
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Ready(_)))
            .map(|(n, _)| n.clone())
            .collect();
        names.sort();
        names
    }

    /// Every registered pool with its utilization, sorted by name.
    #[must_use]
    pub fn utilization(&self) -> Vec<(String, Utilization)> {
        let pools: Vec<_> = self
            .read()
            .pools
            .iter()
            .filter_map(|(n, s)| match s {
                Slot::Ready(p) => Some((n.clone(), p.clone())),
                Slot::Starting => None,
            })
            .collect();
        let mut out: Vec<_> = pools
            .into_iter()
            .map(|(n, p)| (n, p.utilization()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The names of the pools in `group`, sorted.
    #[must_use]
    pub fn group_members(&self, group: &str) -> Vec<String> {
        let mut names: Vec<_> = self
            .ready()
            .into_iter()
            .filter(|(_, p)| p.group().as_deref() == Some(group))
            .map(|(n, _)| n)
            .collect();
        names.sort();
        names
    }

    fn ready(&self) -> Vec<(String, Arc<dyn AnyPool>)> {
        self.read()
            .pools
            .iter()
            .filter_map(|(n, s)| match s {
                Slot::Ready(p) => Some((n.clone(), p.clone())),
                Slot::Starting => None,
            })
            .collect()
    }

    /// Sets how `take_group_member` orders the pools of `group`.
    pub fn set_group_strategy(&self, group: &str, strategy: GroupStrategy) {
        self.write().strategies.insert(group.to_owned(), strategy);
    }

    /// Takes a member from a pool of `group` whose manager is `M` (pooler's
    /// `take_group_member`).
    ///
    /// The pools are tried in the group's [`GroupStrategy`] order without waiting; if none
    /// has a free member and `timeout` is not zero, the taker waits on every pool of the
    /// group at once and takes the first member any of them hands over (so one busy pool
    /// does not hold it while another has room). The [`GroupMember`] goes back to the pool
    /// it came from.
    ///
    /// # Errors
    ///
    /// [`TakeError::NoSuchGroup`] when no pool of `M` is in the group; otherwise the error of
    /// the last pool tried.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves every queue, and a member handed over in that
    /// instant goes back to its pool.
    #[track_caller]
    pub fn take_group_member<M: Manager>(
        &self,
        group: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<GroupMember<M>, TakeError>> + Send + 'static {
        let mut pools: Vec<Pool<M>> = self
            .ready()
            .into_iter()
            .filter(|(_, p)| p.group().as_deref() == Some(group))
            .filter_map(|(_, p)| p.as_any().downcast_ref::<Pool<M>>().cloned())
            .collect();
        let strategy = self
            .read()
            .strategies
            .get(group)
            .copied()
            .unwrap_or_default();
        match strategy {
            GroupStrategy::Random => {
                fastrand::shuffle(&mut pools);
            }
            GroupStrategy::MostFree => {
                // One look at each pool's free list (the hot lock alone), not one per
                // comparison.
                pools.sort_by_cached_key(|p| std::cmp::Reverse(p.free_now()));
            }
        }
        let group: Arc<str> = group.into();
        // Try each pool without waiting, here, so the caller's location is the take's.
        let (mut found, mut last) = (None, None);
        for pool in &pools {
            match pool.try_take_member() {
                Ok(member) => {
                    found = Some(member);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        async move {
            if let Some(member) = found {
                return Ok(GroupMember::new(member));
            }
            let Some(last) = last else {
                return Err(TakeError::NoSuchGroup { group });
            };
            if timeout.is_zero() {
                return Err(last);
            }
            let waits = pools.iter().map(|p| Box::pin(p.take_member(timeout)));
            crate::combinators::first_ok(waits)
                .await
                .map(GroupMember::new)
        }
    }

    /// Closes and removes every pool of `group` (pooler's `rm_group/1`); returns how many.
    ///
    /// # Errors
    ///
    /// [`PoolerError::NoSuchGroup`] when no pool is in the group.
    ///
    /// # Cancel safety
    ///
    /// Every pool of the group is removed and its close begun at the first poll, together;
    /// dropping the future afterwards stops the waiting, not the closes.
    pub async fn rm_group(&self, group: &str, how: Shutdown) -> Result<usize, PoolerError> {
        let pools = {
            let mut registry = self.write();
            let names: Vec<String> = registry
                .pools
                .iter()
                .filter_map(|(name, slot)| match slot {
                    Slot::Ready(pool) if pool.group().as_deref() == Some(group) => {
                        Some(name.clone())
                    }
                    _ => None,
                })
                .collect();
            registry.strategies.remove(group);
            take_out(&mut registry, names)
        };
        if pools.is_empty() {
            return Err(PoolerError::NoSuchGroup {
                group: group.to_owned(),
            });
        }
        let removed = pools.len();
        close_all(&pools, how).await;
        Ok(removed)
    }

    /// Closes and removes every pool.
    ///
    /// # Cancel safety
    ///
    /// Every pool is removed and its close begun at the first poll, together; dropping the
    /// future afterwards stops the waiting, not the closes.
    pub async fn close(&self, how: Shutdown) {
        let pools = {
            let mut registry = self.write();
            let names: Vec<String> = registry.pools.keys().cloned().collect();
            registry.strategies.clear();
            take_out(&mut registry, names)
        };
        close_all(&pools, how).await;
    }
}

/// Removes the ready pools among `names` from the registry (a name still starting stays).
fn take_out(registry: &mut Registry, names: Vec<String>) -> Vec<Arc<dyn AnyPool>> {
    names
        .into_iter()
        .filter_map(|name| match registry.pools.remove(&name) {
            Some(Slot::Ready(pool)) => Some(pool),
            Some(Slot::Starting) => {
                registry.pools.insert(name, Slot::Starting);
                None
            }
            None => None,
        })
        .collect()
}

/// Closes every pool at once and waits for all of them: each close begins at the first poll.
async fn close_all(pools: &[Arc<dyn AnyPool>], how: Shutdown) {
    crate::combinators::join_all(pools.iter().map(|pool| pool.close(how))).await;
}
