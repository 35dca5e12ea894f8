//! Runtime reconfiguration (pooler's `pool_reconfigure/2`): a full new config is checked as a
//! whole, then applied at once under the pool's lock, and the actions taken are returned in
//! pooler's order. A rejected config changes nothing.

use crate::cold::Limits;
use crate::config::{MemberOrder, PoolConfig};
use crate::error::{ConfigError, TakeError};
use crate::lifetime;
use crate::manager::Manager;
use crate::metrics::Reason;
use crate::shared::Shared;
use crate::step::Step;

/// One thing [`Pool::reconfigure`](crate::Pool::reconfigure) did, in the order it did them
/// (pooler's `pool_reconfigure/2` order; the guide maps each to pooler's name).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReconfigureAction {
    /// A key took a new value (pooler's `set_parameter`).
    Changed(&'static str),
    /// This many members were started because `init_count` went up (`start_workers`).
    Started(usize),
    /// This many free members were retired because `max_count` went down
    /// (`stop_free_workers`).
    Retired(usize),
    /// This many of the oldest waiters were refused because `queue_max` went down
    /// (`shrink_queue`).
    Shed(usize),
    /// The cull timer was re-armed because `cull_interval` or `max_age` changed
    /// (`reset_cull_timer`).
    CullTimerReset,
    /// A cull ran at once because `init_count` or `max_age` went down (`cull`).
    Culled,
    /// Every member's expiry was recomputed because `max_lifetime` or its jitter changed
    /// (`update_ttl`).
    LifetimesRecomputed,
    /// The pool left this group (`leave_group`).
    LeftGroup(String),
    /// The pool joined this group (`join_group`).
    JoinedGroup(String),
    /// Takes now follow this order (`set_member_order`).
    MemberOrderChanged(MemberOrder),
}

impl<M: Manager> Shared<M> {
    pub(crate) fn reconfigure(
        &self,
        new: PoolConfig,
    ) -> Result<Vec<ReconfigureAction>, ConfigError> {
        use ReconfigureAction as A;
        new.validate()?;
        let name = self.name.clone();
        // The decision is one step; what it sets outside the two locks (the features the
        // checkout path reads, the shedder's window, the leak table, the recorder's gauges)
        // is set after the locks are released and before its effects are carried out, so
        // that the starts it spawns read the new timeouts (docs/design.md, "Reconfigure").
        let (decided, effects) = self
            .cold
            .step(&self.hot, &self.clock, |s: &mut Step<'_, M>| {
                let old = s.cold.config.clone();
                if new.name != old.name {
                    return Err(ConfigError::NameChanged {
                        pool: old.name,
                        new_name: new.name.clone(),
                    });
                }
                if s.cold.engine.is_closed() {
                    return Err(ConfigError::Closed { pool: old.name });
                }
                let view = s.hot.view();
                // Members already stopping are part of the excess (docs/design.md,
                // "Reconfigure"): only the members that would stay beyond the new cap must be
                // stopped, from the free ones.
                let staying = view.live() + s.cold.engine.starting();
                let to_stop = staying.saturating_sub(new.max_count);
                if to_stop > view.free {
                    return Err(ConfigError::NotEnoughFree {
                        pool: old.name,
                        max_count: new.max_count,
                        needed: to_stop,
                        free: view.free,
                    });
                }

                // Nothing below can fail: apply everything.
                let mut actions: Vec<_> =
                    old.changed_keys(&new).into_iter().map(A::Changed).collect();
                let stopped = s.retire_free(to_stop, Reason::Reconfigured, |_| true);
                let (refused, wakers) = s.hot.shed(new.queue_max, || TakeError::QueueShrunk {
                    pool: name.clone(),
                    queue_max: new.queue_max,
                });
                s.effects.wake.extend(wakers);
                s.hot.set_limits(new.member_order, new.queue_max);
                s.cold.engine.set_limits(Limits::of(&new), s.hot.view());
                s.cold.config = new.clone();
                let wakers = s
                    .hot
                    .set_admission(new.admission, new.max_count, new.queue_target);
                s.effects.wake.extend(wakers);
                // With admission on, the target in force is the hot core's (derived from the
                // latency unless set); the shedder follows it.
                let target = s.hot.queue_target().or(new.queue_target_in_force());
                let shedder = (new.queue_target_in_force() != old.queue_target_in_force()
                    || new.queue_interval != old.queue_interval
                    || new.admission != old.admission)
                    .then_some((target, new.queue_interval, s.now));

                let view = s.hot.view();
                let live = view.live() + s.cold.engine.starting();
                let started = if new.init_count > old.init_count && new.init_count > live {
                    let starts = s.cold.engine.grow(new.init_count - live, s.now, view);
                    let n = starts.slots.len();
                    s.effects.starts.push(starts);
                    n
                } else {
                    0
                };
                let cull = new.init_count < old.init_count || new.max_age < old.max_age;
                if cull {
                    s.cull();
                }
                let ttl = old.max_lifetime != new.max_lifetime
                    || old.max_lifetime_jitter != new.max_lifetime_jitter;
                if ttl {
                    let mut stamps = Vec::new();
                    s.cold.engine.reschedule(|born, meta| {
                        let at = lifetime::expiry(born, new.max_lifetime, new.max_lifetime_jitter);
                        stamps.push((meta.clone(), at));
                        at
                    });
                    for (meta, at) in stamps {
                        meta.set_expires_at(at.map(|at| s.stamp_of(at)));
                    }
                }
                s.effects.expiry = true;
                s.refill();

                if started > 0 {
                    actions.push(A::Started(started));
                }
                if stopped > 0 {
                    actions.push(A::Retired(stopped));
                }
                if refused > 0 {
                    actions.push(A::Shed(refused));
                }
                if old.cull_interval != new.cull_interval || old.max_age != new.max_age {
                    actions.push(A::CullTimerReset);
                }
                if cull {
                    actions.push(A::Culled);
                }
                if ttl {
                    actions.push(A::LifetimesRecomputed);
                }
                if old.group != new.group {
                    actions.extend(old.group.clone().map(A::LeftGroup));
                    actions.extend(new.group.clone().map(A::JoinedGroup));
                }
                if old.member_order != new.member_order {
                    actions.push(A::MemberOrderChanged(new.member_order));
                }
                Ok((actions, s.now, shedder))
            });
        let (actions, at, shedder) = match decided {
            Ok(decided) => decided,
            Err(e) => {
                debug_assert!(effects.is_empty(), "a rejected reconfigure changes nothing");
                return Err(e);
            }
        };
        self.features.set(&new);
        if let Some((target, interval, now)) = shedder {
            self.shedder.set(target, interval, now);
        }
        if new.leak_detection_threshold.is_none() {
            self.leaks.clear();
        }
        self.metrics.limits(new.init_count, new.max_count);
        if !effects.is_empty() {
            self.apply(effects);
        }
        self.reconfigured.send_replace(at);
        tracing::info!(pool = %self.name, actions = ?actions, "reconfigured");
        Ok(actions)
    }
}
