//! Health checks: free members are checked with `Manager::check` every
//! `health_check_interval`, and a member idle longer than `idle_check_threshold` is checked
//! by `take_member` before it is handed out. A failed check replaces the member.
//!
//! A member being checked is claimed exactly as a take claims it (it is in use and held by a
//! [`Member`] guard), so a check and a take never get the same member, and a check that
//! panics or is cancelled destroys the member rather than losing it. Recycling a returned
//! member (`Manager::recycle`) goes through the same guarded path.

use crate::combinators::caught;
use tokio::time::Instant;

use crate::manager::Manager;
use crate::member::{Member, Origin};
use crate::shared::Shared;

/// A manager hook run on a member the pool holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hook {
    /// `Manager::check`: a health check.
    Check,
    /// `Manager::recycle`: fitting a returned member for its next consumer.
    Recycle,
}

/// Runs `hook` on `member`, a member of `shared`'s pool, bounded by `member_start_timeout`
/// and by `deadline` (a taker's, for an idle check at take). Passed, the member comes back
/// for the caller to hand out or return; failed, panicked or timed out, it is failed
/// (replaced); cut short by `deadline`, it is destroyed as crashed (it was cancelled
/// mid-check); either way `None` comes back. A cancellation of this future drops the guard
/// mid-use, which destroys the member too.
pub(crate) async fn vet<M: Manager>(
    shared: &Shared<M>,
    mut member: Member<M>,
    hook: Hook,
    deadline: Option<Instant>,
) -> Option<Member<M>> {
    let (limit, _) = shared.features.timeouts();
    let manager = &shared.manager;
    let pool = Member::pool_name(&member).to_owned();
    let own = Instant::now() + limit;
    let until = deadline.map_or(own, |d| d.min(own));
    member.set_mid_use(true);
    member.set_origin(match hook {
        Hook::Check => Origin::Checked,
        Hook::Recycle => Origin::Recycled,
    });
    let run = async {
        match hook {
            Hook::Check => manager.check(&mut member).await,
            Hook::Recycle => manager.recycle(&mut member).await,
        }
    };
    let result = tokio::time::timeout_at(until, caught(run)).await;
    member.set_mid_use(false);
    let what = match hook {
        Hook::Check => "health check",
        Hook::Recycle => "recycling a returned member",
    };
    let id = Member::id(&member);
    match result {
        Ok(Ok(Ok(()))) => return Some(member),
        Ok(Ok(Err(e))) => {
            tracing::warn!(pool = %pool, member = id, error = %e, "{what} failed; replacing the member");
        }
        Ok(Err(_)) => {
            tracing::error!(pool = %pool, member = id, "{what} panicked; replacing the member");
        }
        Err(_) if until < own => {
            tracing::debug!(pool = %pool, member = id, "{what} cut short by the taker's deadline; replacing the member");
            Member::crash(member);
            return None;
        }
        Err(_) => {
            tracing::warn!(pool = %pool, member = id, "{what} timed out; replacing the member");
        }
    }
    Member::fail(member);
    None
}
