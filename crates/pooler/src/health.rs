//! Health checks: free members are checked with `Manager::check` every
//! `health_check_interval`, and a member idle longer than `idle_check_threshold` is checked
//! by `take_member` before it is handed out. A failed check replaces the member.
//!
//! A member being checked is claimed exactly as a take claims it (it is in use and held by a
//! [`Member`] guard), so a check and a take never get the same member, and a check that
//! panics or is cancelled destroys the member rather than losing it. Recycling a returned
//! member (`Manager::recycle`) goes through the same guarded path.

use tokio::time::Instant;

use crate::manager::Manager;
use crate::member::Member;
use crate::shared::Shared;

/// A manager hook run on a member the pool holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hook {
    /// `Manager::check`: a health check.
    Check,
    /// `Manager::recycle`: fitting a returned member for its next consumer.
    Recycle,
}

/// Runs `hook` on `member`, bounded by `member_start_timeout`. Passed, the member comes back
/// for the caller to hand out or return; failed or timed out, it is failed (replaced) and
/// `None` comes back. A panic or a cancellation drops the guard mid-use, which destroys it.
pub(crate) async fn vet<M: Manager>(
    shared: &Shared<M>,
    mut member: Member<M>,
    hook: Hook,
) -> Option<Member<M>> {
    let (limit, _) = shared.timeouts();
    member.set_mid_use(true);
    let run = async {
        match hook {
            Hook::Check => shared.manager.check(&mut member).await,
            Hook::Recycle => shared.manager.recycle(&mut member).await,
        }
    };
    let result = tokio::time::timeout(limit, run).await;
    member.set_mid_use(false);
    let what = match hook {
        Hook::Check => "health check",
        Hook::Recycle => "recycling a returned member",
    };
    match result {
        Ok(Ok(())) => return Some(member),
        Ok(Err(e)) => {
            tracing::warn!(pool = %shared.name, member = Member::id(&member), error = %e, "{what} failed; replacing the member");
        }
        Err(_) => {
            tracing::warn!(pool = %shared.name, member = Member::id(&member), "{what} timed out; replacing the member");
        }
    }
    Member::fail(member);
    None
}

impl<M: Manager> Shared<M> {
    /// One round: every member idle since before the round began is checked once, oldest
    /// idle first, one at a time (the rest stay available to takes).
    pub(crate) async fn check_free_members(&self) {
        let round = Instant::now();
        loop {
            let claimed = self.lock().engine.claim_for_check(Instant::now(), round);
            let Some((key, held)) = claimed else { break };
            let member = Member::new(self.arc(), key, held, Instant::now());
            drop(vet(self, member, Hook::Check).await);
        }
    }
}
