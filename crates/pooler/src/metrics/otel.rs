//! The names metrics are published under: pooler's, or the OpenTelemetry conventions for
//! database client connection pools where they name one (docs/design.md, "Tracing").

/// The names a pool's metrics are published under, chosen before pools start
/// ([`set_naming`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Naming {
    /// pooler's own names (`pooler_in_use`, …), each labelled `pool`. The default.
    #[default]
    Pooler,
    /// The OpenTelemetry semantic conventions for database client connection pools where
    /// one exists ([`otel_names`]: `db.client.connection.count` with
    /// `db.client.connection.state` `idle` or `used`, `.max`, `.idle.min`,
    /// `.pending_requests`, `.timeouts`, `.create_time`, `.wait_time`, `.use_time`), labelled
    /// `db.client.connection.pool.name`; pooler's names for the rest, with that same pool
    /// label.
    OpenTelemetry,
}

static NAMING: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Chooses the names pools started from now on publish their metrics under (pools already
/// started keep theirs), for the whole process: call it where the recorder is installed.
///
/// ```
/// pooler::metrics::set_naming(pooler::metrics::Naming::OpenTelemetry);
/// assert_eq!(pooler::metrics::naming(), pooler::metrics::Naming::OpenTelemetry);
/// # pooler::metrics::set_naming(pooler::metrics::Naming::Pooler);
/// ```
pub fn set_naming(naming: Naming) {
    let n = match naming {
        Naming::Pooler => 0,
        Naming::OpenTelemetry => 1,
    };
    NAMING.store(n, std::sync::atomic::Ordering::Relaxed);
}

/// The names pools started now publish under.
#[must_use]
pub fn naming() -> Naming {
    match NAMING.load(std::sync::atomic::Ordering::Relaxed) {
        1 => Naming::OpenTelemetry,
        _ => Naming::Pooler,
    }
}

/// One of pooler's metrics as the OpenTelemetry conventions name it ([`Naming::OpenTelemetry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct OtelName {
    /// pooler's name.
    pub pooler: &'static str,
    /// The value of pooler's `reason` label this is, for a counter split by reason.
    pub reason: Option<&'static str>,
    /// The OpenTelemetry name.
    pub name: &'static str,
    /// The `db.client.connection.state` attribute, for `db.client.connection.count`.
    pub state: Option<&'static str>,
}

/// The label OpenTelemetry names a connection pool with.
pub const OTEL_POOL_LABEL: &str = "db.client.connection.pool.name";
/// The attribute of `db.client.connection.count` that says idle or used.
pub const OTEL_STATE_LABEL: &str = "db.client.connection.state";

const fn otel(
    pooler: &'static str,
    reason: Option<&'static str>,
    name: &'static str,
    state: Option<&'static str>,
) -> OtelName {
    OtelName {
        pooler,
        reason,
        name,
        state,
    }
}

pub(super) const OTEL_NAMES: &[OtelName] = &[
    otel(
        "pooler_free",
        None,
        "db.client.connection.count",
        Some("idle"),
    ),
    otel(
        "pooler_in_use",
        None,
        "db.client.connection.count",
        Some("used"),
    ),
    otel("pooler_max_count", None, "db.client.connection.max", None),
    otel(
        "pooler_init_count",
        None,
        "db.client.connection.idle.min",
        None,
    ),
    otel(
        "pooler_queue",
        None,
        "db.client.connection.pending_requests",
        None,
    ),
    otel(
        "pooler_error_no_members_total",
        Some("timeout"),
        "db.client.connection.timeouts",
        None,
    ),
    otel(
        "pooler_member_start_seconds",
        None,
        "db.client.connection.create_time",
        None,
    ),
    otel(
        "pooler_take_wait_seconds",
        None,
        "db.client.connection.wait_time",
        None,
    ),
    otel(
        "pooler_member_use_seconds",
        None,
        "db.client.connection.use_time",
        None,
    ),
];

/// How [`Naming::OpenTelemetry`] renames pooler's metrics; those not listed keep pooler's
/// names. The crate's README has the same table.
#[must_use]
pub fn otel_names() -> &'static [OtelName] {
    OTEL_NAMES
}

/// The name and the labels (beside any `reason`) a metric is registered under.
#[cfg(feature = "metrics")]
pub(crate) fn registered(
    naming: Naming,
    pooler: &'static str,
    reason: Option<&'static str>,
    pool: &str,
) -> (&'static str, Vec<metrics::Label>) {
    let otel = OTEL_NAMES
        .iter()
        .find(|o| o.pooler == pooler && o.reason == reason);
    match (naming, otel) {
        (Naming::OpenTelemetry, Some(o)) => {
            let mut labels = vec![metrics::Label::new(OTEL_POOL_LABEL, pool.to_owned())];
            if let Some(state) = o.state {
                labels.push(metrics::Label::new(OTEL_STATE_LABEL, state));
            }
            (o.name, labels)
        }
        _ => {
            // One scrape names a pool one way: the conventions' label under their naming,
            // for the metrics that keep pooler's names too.
            let key = match naming {
                Naming::OpenTelemetry => OTEL_POOL_LABEL,
                Naming::Pooler => "pool",
            };
            let mut labels = vec![metrics::Label::new(key, pool.to_owned())];
            if let Some(reason) = reason {
                labels.push(metrics::Label::new("reason", reason));
            }
            (pooler, labels)
        }
    }
}

#[cfg(all(test, feature = "metrics", not(pooler_loom)))]
mod tests {
    use super::*;

    fn pool_label(naming: Naming, pooler: &'static str, reason: Option<&'static str>) -> String {
        let (_, labels) = registered(naming, pooler, reason, "p");
        let keys: Vec<&str> = labels.iter().map(metrics::Label::key).collect();
        let pool = keys
            .iter()
            .filter(|k| **k == "pool" || **k == OTEL_POOL_LABEL);
        let pool: Vec<&&str> = pool.collect();
        assert_eq!(pool.len(), 1, "{pooler}: one pool label, {keys:?}");
        (*pool[0]).to_owned()
    }

    /// One scrape names a pool one way: under the OpenTelemetry conventions every metric —
    /// renamed or keeping pooler's name — carries `db.client.connection.pool.name`.
    #[test]
    fn one_naming_labels_every_metric_of_a_pool_the_same_way() {
        let metrics = [
            ("pooler_in_use", None),
            ("pooler_starting", None),
            ("pooler_error_no_members_total", Some("timeout")),
            ("pooler_error_no_members_total", Some("closed")),
            ("pooler_admission_limit", None),
        ];
        for (pooler, reason) in metrics {
            assert_eq!(pool_label(Naming::Pooler, pooler, reason), "pool");
            assert_eq!(
                pool_label(Naming::OpenTelemetry, pooler, reason),
                OTEL_POOL_LABEL,
                "{pooler} {reason:?}"
            );
        }
    }
}
