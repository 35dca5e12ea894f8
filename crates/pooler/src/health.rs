//! Health checks: free members are checked with `Manager::check` every
//! `health_check_interval`, and a member idle longer than `idle_check_threshold` is checked
//! by `take_member` before it is handed out. A failed check replaces the member.
//!
//! A member being checked is claimed exactly as a take claims it (it is in use and held by a
//! [`Member`] guard), so a check and a take never get the same member, and a check that
//! panics or is cancelled destroys the member rather than losing it.

use std::sync::Arc;

use tokio::time::Instant;

use crate::manager::Manager;
use crate::member::Member;
use crate::shared::Shared;

/// The health-check timer: a round every `health_check_interval`, counted from `origin` (the
/// pool's start) and then from the end of the previous round; re-armed by `reconfigure`.
pub(crate) async fn run<M: Manager>(shared: Arc<Shared<M>>, origin: Instant) {
    let mut changes = shared.reconfigured.subscribe();
    let mut every = shared.lock().config.health_check_interval;
    let tick = tokio::time::sleep_until(origin + every.unwrap_or_default());
    tokio::pin!(tick);
    loop {
        tokio::select! {
            () = &mut tick, if every.is_some() => {
                shared.check_free_members().await;
                tick.as_mut().reset(Instant::now() + every.unwrap_or_default());
            }
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                let at = *changes.borrow_and_update();
                let now = shared.lock().config.health_check_interval;
                if now != every {
                    every = now;
                    tick.as_mut().reset(at + every.unwrap_or_default());
                }
            }
        }
    }
}

/// Checks a member; `false` if the check failed or ran past `member_start_timeout` (the
/// guard is then failed, so the member is replaced).
pub(crate) async fn check<M: Manager>(
    shared: &Shared<M>,
    mut member: Member<M>,
) -> Option<Member<M>> {
    let (limit, _) = shared.timeouts();
    member.set_mid_use(true);
    let result = tokio::time::timeout(limit, shared.manager.check(&mut member)).await;
    member.set_mid_use(false);
    match result {
        Ok(Ok(())) => Some(member),
        Ok(Err(e)) => {
            tracing::warn!(pool = %shared.name, member = Member::id(&member), error = %e, "health check failed; replacing the member");
            Member::fail(member);
            None
        }
        Err(_) => {
            tracing::warn!(pool = %shared.name, member = Member::id(&member), "health check timed out; replacing the member");
            Member::fail(member);
            None
        }
    }
}

impl<M: Manager> Shared<M> {
    /// One round: every member idle since before the round began is checked once, oldest
    /// idle first, one at a time (the rest stay available to takes).
    async fn check_free_members(&self) {
        let round = Instant::now();
        loop {
            let claimed = self.lock().engine.claim_for_check(Instant::now(), round);
            let Some((key, held)) = claimed else { break };
            let member = Member::new(self.arc(), key, held, Instant::now());
            drop(check(self, member).await);
        }
    }
}
