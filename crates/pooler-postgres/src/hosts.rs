//! Following a failover: which kind of server a pool's connections must be on
//! ([`SessionTarget`], libpq's `target_session_attrs`), what the manager remembers of each
//! host of its list ([`Hosts`]), and when a live connection has learned that its server is no
//! longer of that kind ([`SessionTarget::lost`]).
//!
//! Every connect tries every host, as libpq does; what is remembered only orders them, so a
//! host that was down or of the wrong kind is tried after the others until its recheck is
//! due, and a failover is followed at the first connect after it, however the hosts were
//! marked.
//!
//! # Invariants
//!
//! 1. [`Hosts::order`] returns each host index exactly once.
//! 2. A host's backoff grows only with failures to connect; a host of the wrong kind is
//!    rechecked after one `recheck` interval, since a role is what a failover changes.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::watch::Seen;

/// The kind of server a pool's connections must be on (libpq's `target_session_attrs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
#[non_exhaustive]
pub enum SessionTarget {
    /// Any server (the default).
    #[default]
    Any,
    /// A session that accepts writes: not a standby, and not read-only by default.
    ReadWrite,
    /// A read-only session: a standby, or a server whose transactions are read-only by
    /// default.
    ReadOnly,
    /// A server that is not in recovery.
    Primary,
    /// A standby in recovery.
    Standby,
    /// A standby if one of the hosts is; any server otherwise.
    PreferStandby,
}

impl SessionTarget {
    /// The value's name in a connection string.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            SessionTarget::Any => "any",
            SessionTarget::ReadWrite => "read-write",
            SessionTarget::ReadOnly => "read-only",
            SessionTarget::Primary => "primary",
            SessionTarget::Standby => "standby",
            SessionTarget::PreferStandby => "prefer-standby",
        }
    }

    /// The target a connection-string value names.
    #[must_use]
    pub fn from_name(name: &str) -> Option<SessionTarget> {
        [
            SessionTarget::Any,
            SessionTarget::ReadWrite,
            SessionTarget::ReadOnly,
            SessionTarget::Primary,
            SessionTarget::Standby,
            SessionTarget::PreferStandby,
        ]
        .into_iter()
        .find(|t| t.name() == name)
    }

    /// Whether a session of this server may serve this target: `standby` and `read_only`
    /// as the server says; `None` when it has not said (a server before PostgreSQL 14).
    pub(crate) fn accepts(self, standby: bool, read_only: bool) -> bool {
        match self {
            SessionTarget::Any | SessionTarget::PreferStandby => true,
            SessionTarget::ReadWrite => !standby && !read_only,
            SessionTarget::ReadOnly => standby || read_only,
            SessionTarget::Primary => !standby,
            SessionTarget::Standby => standby,
        }
    }

    /// Whether a live connection has heard that its server no longer serves this target:
    /// a standby's promotion, a primary now in recovery or made read-only, or a write
    /// refused as read-only (SQLSTATE 25006) on a pool that writes.
    pub(crate) fn lost(self, seen: &Seen) -> bool {
        let heard = &seen.heard;
        match self {
            SessionTarget::Any | SessionTarget::PreferStandby => false,
            SessionTarget::ReadWrite => {
                heard.refused_write()
                    || heard.hot_standby() == Some(true)
                    || heard.read_only_default() == Some(true)
            }
            SessionTarget::Primary => heard.refused_write() || heard.hot_standby() == Some(true),
            SessionTarget::Standby => heard.hot_standby() == Some(false),
            SessionTarget::ReadOnly => {
                heard.hot_standby() == Some(false) && heard.read_only_default() == Some(false)
            }
        }
    }
}

/// Takes out of a connection string a `target_session_attrs` value tokio-postgres does not
/// parse (`primary`, `standby`, `prefer-standby`), leaving `any` in its place.
pub(crate) fn split_target(url: &str) -> (String, Option<SessionTarget>) {
    const KEY: &str = "target_session_attrs=";
    let Some(at) = url.find(KEY) else {
        return (url.to_owned(), None);
    };
    let mut start = at + KEY.len();
    if url[start..].starts_with('\'') {
        start += 1;
    }
    let end = url[start..]
        .find(['&', ' ', '\'', '#'])
        .map_or(url.len(), |n| start + n);
    match SessionTarget::from_name(&url[start..end]) {
        Some(
            t @ (SessionTarget::Primary | SessionTarget::Standby | SessionTarget::PreferStandby),
        ) => (format!("{}any{}", &url[..start], &url[end..]), Some(t)),
        _ => (url.to_owned(), None),
    }
}

impl std::fmt::Display for SessionTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How long a host that failed or was of the wrong kind is tried after the others, by
/// default.
pub const HOST_RECHECK: Duration = Duration::from_secs(10);

/// The longest backoff, in `recheck` intervals, for a host that keeps failing to connect.
const MAX_BACKOFF: u32 = 8;

/// What the manager remembers of each host of its list.
#[derive(Debug)]
pub(crate) struct Hosts {
    recheck: Duration,
    state: Mutex<Vec<Host>>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Host {
    /// Tried after the others until then.
    after: Option<Instant>,
    /// Failures to connect in a row.
    failures: u32,
}

impl Hosts {
    pub(crate) fn new(recheck: Duration) -> Self {
        Hosts {
            recheck,
            state: Mutex::new(Vec::new()),
        }
    }

    fn with<R>(&self, count: usize, f: impl FnOnce(&mut Vec<Host>) -> R) -> R {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.len() != count {
            state.resize(count, Host::default());
        }
        f(&mut state)
    }

    /// The order to try hosts `listed` in (their indices, as listed or shuffled): the ones
    /// in good standing or due a recheck first, in that order; then the others, the soonest
    /// due first.
    pub(crate) fn order(&self, listed: Vec<usize>) -> Vec<usize> {
        let now = Instant::now();
        let mut order = listed;
        let count = order.len();
        self.with(count, |state| {
            // A stable sort: hosts in good standing keep the listed order.
            order.sort_by_key(|&i| state[i].after.filter(|&t| t > now));
        });
        debug_assert!(
            {
                let mut seen = order.clone();
                seen.sort_unstable();
                seen.iter().copied().eq(0..count)
            },
            "invariant 1: each host once"
        );
        order
    }

    /// A connection to host `i` of `count` was made and accepted.
    pub(crate) fn served(&self, i: usize, count: usize) {
        self.with(count, |state| state[i] = Host::default());
    }

    /// Host `i` could not be connected to: tried last for a backoff that grows.
    pub(crate) fn unreachable(&self, i: usize, count: usize) {
        let recheck = self.recheck;
        self.with(count, |state| {
            let host = &mut state[i];
            host.failures = host.failures.saturating_add(1);
            let steps = 1u32 << host.failures.saturating_sub(1).min(MAX_BACKOFF.ilog2());
            host.after = Some(later(recheck.saturating_mul(steps)));
        });
    }

    /// Host `i`'s server is not of the kind the pool needs (now): tried last for one
    /// recheck interval.
    pub(crate) fn wrong_kind(&self, i: usize, count: usize) {
        let recheck = self.recheck;
        self.with(count, |state| {
            state[i] = Host {
                after: Some(later(recheck)),
                failures: 0,
            };
        });
    }
}

/// `wait` from now; a wait longer than any time key accepts
/// ([`MAX_TIME`](pooler::time::MAX_TIME)) is that long, so no interval overflows `Instant`.
fn later(wait: Duration) -> Instant {
    Instant::now() + wait.min(pooler::time::MAX_TIME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn hosts_marked_are_tried_last_until_their_recheck() {
        let hosts = Hosts::new(Duration::from_secs(10));
        assert_eq!(hosts.order(vec![0, 1, 2]), vec![0, 1, 2]);
        hosts.wrong_kind(0, 3);
        assert_eq!(hosts.order(vec![0, 1, 2]), vec![1, 2, 0]);
        hosts.unreachable(1, 3);
        // Both marked: the one due first goes first, the one in good standing before both.
        tokio::time::advance(Duration::from_secs(1)).await;
        hosts.unreachable(1, 3);
        assert_eq!(hosts.order(vec![0, 1, 2]), vec![2, 0, 1]);
        tokio::time::advance(Duration::from_secs(10)).await;
        // 0's recheck is due; 1 failed twice, so it waits 20 s.
        assert_eq!(hosts.order(vec![0, 1, 2]), vec![0, 2, 1]);
        hosts.served(1, 3);
        assert_eq!(hosts.order(vec![2, 1, 0]), vec![2, 1, 0]);
        // The backoff stops growing at eight intervals.
        for _ in 0..20 {
            hosts.unreachable(2, 3);
        }
        tokio::time::advance(Duration::from_secs(79)).await;
        assert_eq!(hosts.order(vec![2, 1, 0]), vec![1, 0, 2]);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(hosts.order(vec![2, 1, 0]), vec![2, 1, 0]);
    }

    /// Any recheck interval is accepted: zero (a marked host is due at once) to
    /// `Duration::MAX` (tried last for good), never a panic past `Instant`'s range.
    #[tokio::test(start_paused = true)]
    async fn a_recheck_of_any_length_is_accepted() {
        for recheck in [Duration::ZERO, Duration::from_nanos(1), Duration::MAX] {
            let hosts = Hosts::new(recheck);
            for _ in 0..4 {
                hosts.unreachable(0, 2);
            }
            hosts.wrong_kind(0, 2);
            for _ in 0..4 {
                hosts.unreachable(0, 2);
            }
            tokio::time::advance(Duration::from_micros(1)).await;
            let order = hosts.order(vec![0, 1]);
            if recheck == Duration::MAX {
                assert_eq!(order, vec![1, 0], "the marked one still last");
            } else {
                assert_eq!(order, vec![0, 1], "{recheck:?}: due again");
            }
        }
    }

    #[test]
    fn targets_tokio_postgres_cannot_parse_are_taken_out_of_urls() {
        let cases = [
            (
                "postgres://h1,h2/db?target_session_attrs=primary&application_name=x",
                "postgres://h1,h2/db?target_session_attrs=any&application_name=x",
                Some(SessionTarget::Primary),
            ),
            (
                "host=a,b target_session_attrs='prefer-standby' user=u",
                "host=a,b target_session_attrs='any' user=u",
                Some(SessionTarget::PreferStandby),
            ),
            (
                "postgres://h/db?target_session_attrs=standby",
                "postgres://h/db?target_session_attrs=any",
                Some(SessionTarget::Standby),
            ),
        ];
        for (url, left, target) in cases {
            assert_eq!(split_target(url), (left.to_owned(), target));
            left.parse::<tokio_postgres::Config>().unwrap();
        }
        let kept = "postgres://h/db?target_session_attrs=read-write";
        assert_eq!(split_target(kept), (kept.to_owned(), None));
    }

    #[test]
    fn targets_accept_and_lose_as_libpq_names_them() {
        use SessionTarget as T;
        for t in [
            T::Any,
            T::ReadWrite,
            T::ReadOnly,
            T::Primary,
            T::Standby,
            T::PreferStandby,
        ] {
            assert_eq!(T::from_name(t.name()), Some(t));
        }
        assert_eq!(T::from_name("primary-ish"), None);
        // (standby, read-only default)
        let cases = [(false, false), (false, true), (true, true)];
        let accepted = |t: T| cases.map(|(s, r)| t.accepts(s, r));
        assert_eq!(accepted(T::ReadWrite), [true, false, false]);
        assert_eq!(accepted(T::ReadOnly), [false, true, true]);
        assert_eq!(accepted(T::Primary), [true, true, false]);
        assert_eq!(accepted(T::Standby), [false, false, true]);
        assert_eq!(accepted(T::Any), [true; 3]);
    }
}
