//! The shared hand-over round judges what it is shown: against an in-memory member whose
//! session a user can dirty, the round fails when the manager hands a dirty member on or
//! loses the next user's write, and passes when the manager resets it on return.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use pooler::{Manager, Member, MemberContext, PoolConfig, Shutdown};
use pooler_testkit::handover::{self, Session};

/// A member with a session setting and a shared store of marks.
#[derive(Debug)]
struct Conn {
    setting: i64,
    store: Arc<AtomicI64>,
}

/// Starts members; resets a returned one's setting only if `resets`, and with
/// `loses_writes` the reset also drops what was written (as a `ROLLBACK` of the last user's
/// unfinished write would).
struct Conns {
    resets: bool,
    loses_writes: bool,
    store: Arc<AtomicI64>,
}

impl Manager for Conns {
    type Member = Conn;
    type Error = std::io::Error;

    async fn start(&self, _: &MemberContext) -> Result<Conn, Self::Error> {
        Ok(Conn {
            setting: 0,
            store: self.store.clone(),
        })
    }

    fn needs_recycle(&self, conn: &Conn) -> bool {
        self.loses_writes || (self.resets && conn.setting != 0)
    }

    async fn recycle(&self, conn: &mut Conn) -> Result<(), Self::Error> {
        conn.setting = 0;
        if self.loses_writes {
            conn.store.store(0, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// A user sets the session's setting; the next one reads it and writes a mark.
struct Settings;

impl Session for Settings {
    type Manager = Conns;
    type Action = i64;

    async fn act(&self, conn: &mut Member<Conns>, value: &i64) {
        conn.setting = *value;
    }

    async fn observe(&self, conn: &mut Member<Conns>) -> String {
        format!("setting={}", conn.setting)
    }

    async fn write(&self, conn: &mut Member<Conns>, mark: i64) -> bool {
        conn.store.store(mark, Ordering::SeqCst);
        true
    }

    async fn count(&self, conn: &mut Member<Conns>, mark: i64) -> i64 {
        i64::from(conn.store.load(Ordering::SeqCst) == mark)
    }
}

async fn round_with(resets: bool, loses_writes: bool, actions: &[i64]) -> Result<(), String> {
    let manager = Conns {
        resets,
        loses_writes,
        store: Arc::default(),
    };
    let pool = pooler_testkit::started(PoolConfig::new("round", 1, 1), manager).await;
    let fresh = handover::fresh(&pool, &Settings).await;
    let verdict = handover::round(&pool, &Settings, actions, &fresh).await;
    pool.close(Shutdown::Graceful).await;
    verdict
}

#[tokio::test]
async fn a_dirty_member_handed_on_fails_the_round_naming_the_sequence() {
    let verdict = round_with(false, false, &[7]).await;
    let failure = verdict.expect_err("the next user saw setting=7");
    assert!(failure.starts_with("after [\n    7,\n]"), "{failure}");
    assert!(failure.contains("differs from a new one's"), "{failure}");
    assert!(failure.contains("seen: setting=7"), "{failure}");
}

#[tokio::test]
async fn a_write_lost_by_the_reset_fails_the_round() {
    let verdict = round_with(true, true, &[7]).await;
    let failure = verdict.expect_err("the reset dropped the next user's write");
    assert!(
        failure.contains("write was lost (0 found, not 1)"),
        "{failure}"
    );
}

#[tokio::test]
async fn a_member_reset_on_return_passes_the_round() {
    round_with(true, false, &[7, 9]).await.unwrap();
    // A sequence that leaves nothing passes either way.
    round_with(false, false, &[0]).await.unwrap();
}

/// A member the next user found dirty is failed, not given back: the next round (a shrink's,
/// say) starts from a new one.
#[tokio::test]
async fn a_round_after_a_dirty_one_starts_clean() {
    let manager = Conns {
        resets: false,
        loses_writes: false,
        store: Arc::default(),
    };
    let pool = pooler_testkit::started(PoolConfig::new("round", 1, 1), manager).await;
    let fresh = handover::fresh(&pool, &Settings).await;
    assert!(
        handover::round(&pool, &Settings, &[7], &fresh)
            .await
            .is_err()
    );
    handover::round(&pool, &Settings, &[], &fresh)
        .await
        .unwrap();
    pool.close(Shutdown::Graceful).await;
}
