//! Runtime reconfiguration (pooler's `pool_reconfigure/2`): a full new config is checked as a
//! whole, then applied at once under the pool's lock, and the actions taken are returned in
//! pooler's order. A rejected config changes nothing.

use tokio::time::Instant;

use crate::config::{MemberOrder, PoolConfig};
use crate::error::{ConfigError, TakeError};
use crate::lifetime;
use crate::manager::Manager;
use crate::metrics::Reason;
use crate::shared::{Shared, limits};

/// One thing [`Pool::reconfigure`](crate::Pool::reconfigure) did.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReconfigureAction {
    /// A key took a new value.
    SetParameter(&'static str),
    /// This many members were started (`init_count` went up).
    StartWorkers(usize),
    /// This many free members were stopped (`max_count` went down).
    StopFreeWorkers(usize),
    /// This many of the oldest waiters were refused (`queue_max` went down).
    ShrinkQueue(usize),
    /// The cull timer was re-armed (`cull_interval` or `max_age` changed).
    ResetCullTimer,
    /// A cull ran at once (`init_count` or `max_age` went down).
    Cull,
    /// Every member's expiry was recomputed (`max_lifetime` or its jitter changed).
    UpdateTtl,
    /// The pool left this group.
    LeaveGroup(String),
    /// The pool joined this group.
    JoinGroup(String),
    /// Takes now follow this order.
    SetMemberOrder(MemberOrder),
}

/// The keys whose values differ, in the config's order.
fn changed_keys(old: &PoolConfig, new: &PoolConfig) -> Vec<&'static str> {
    let mut keys = Vec::new();
    macro_rules! diff {
        ($($key:ident),*) => {
            $(if old.$key != new.$key { keys.push(stringify!($key)); })*
        };
    }
    diff!(
        group,
        init_count,
        max_count,
        cull_interval,
        max_age,
        member_start_timeout,
        queue_max,
        auto_grow_threshold,
        max_lifetime,
        max_lifetime_jitter,
        member_order,
        member_shutdown,
        health_check_interval,
        leak_detection_threshold,
        idle_check_threshold
    );
    keys
}

impl<M: Manager> Shared<M> {
    pub(crate) fn reconfigure(
        &self,
        new: PoolConfig,
    ) -> Result<Vec<ReconfigureAction>, ConfigError> {
        use ReconfigureAction as A;
        new.validate()?;
        let now = Instant::now();
        let mut state = self.lock();
        let old = state.config.clone();
        if new.name != old.name {
            return Err(ConfigError::NameChanged {
                pool: old.name,
                new_name: new.name,
            });
        }
        if state.engine.is_closed() {
            return Err(ConfigError::Closed { pool: old.name });
        }
        let counts = state.engine.counts();
        let to_stop = counts.total().saturating_sub(new.max_count);
        if to_stop > counts.free {
            return Err(ConfigError::NotEnoughFree {
                pool: old.name,
                max_count: new.max_count,
                needed: to_stop,
                free: counts.free,
            });
        }

        // Nothing below can fail: apply everything.
        let mut actions: Vec<_> = changed_keys(&old, &new)
            .into_iter()
            .map(A::SetParameter)
            .collect();
        let stopped = state.engine.take_oldest_free(to_stop, now);
        let refused = state.engine.shed_waiters(new.queue_max);
        state.engine.set_limits(limits(&new));
        state.config = new.clone();

        let live = counts.in_use + counts.free - to_stop + counts.starting;
        let starts = if new.init_count > old.init_count && new.init_count > live {
            state.engine.grow(new.init_count - live, now)
        } else {
            Default::default()
        };
        let cull = new.init_count < old.init_count || new.max_age < old.max_age;
        let culled = if cull {
            state.engine.cull(now, new.max_age)
        } else {
            Vec::new()
        };
        let ttl = old.max_lifetime != new.max_lifetime
            || old.max_lifetime_jitter != new.max_lifetime_jitter;
        if ttl {
            state.engine.reschedule(|born| {
                lifetime::expiry(born, new.max_lifetime, new.max_lifetime_jitter)
            });
        }
        let more = state.engine.refill(now);
        drop(state);

        if !starts.is_empty() {
            actions.push(A::StartWorkers(starts.slots.len()));
        }
        if !stopped.is_empty() {
            actions.push(A::StopFreeWorkers(stopped.len()));
        }
        if !refused.is_empty() {
            actions.push(A::ShrinkQueue(refused.len()));
        }
        if old.cull_interval != new.cull_interval || old.max_age != new.max_age {
            actions.push(A::ResetCullTimer);
        }
        if cull {
            actions.push(A::Cull);
        }
        if ttl {
            actions.push(A::UpdateTtl);
        }
        if old.group != new.group {
            actions.extend(old.group.clone().map(A::LeaveGroup));
            actions.extend(new.group.clone().map(A::JoinGroup));
        }
        if old.member_order != new.member_order {
            actions.push(A::SetMemberOrder(new.member_order));
        }

        for waiter in refused {
            let _ = waiter.tx.send(Err(TakeError::QueueShrunk {
                pool: self.name.clone(),
                queue_max: new.queue_max,
            }));
        }
        for (key, held) in stopped {
            self.retire(key, held, Reason::Reconfigured);
        }
        for (key, held) in culled {
            self.retire(key, held, Reason::MaxAge);
        }
        self.spawn_starts(starts, None);
        self.spawn_starts(more, None);
        self.reconfigured.send_replace(now);
        self.lifetime_poke.notify_one();
        tracing::info!(pool = %self.name, ?actions, "reconfigured");
        Ok(actions)
    }
}
