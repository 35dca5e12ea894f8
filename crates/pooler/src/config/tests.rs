use super::*;

#[test]
fn the_builder_validates_and_requires_the_counts() {
    let c = PoolConfig::builder("p")
        .init_count(1)
        .max_count(4)
        .max_lifetime(Duration::from_secs(60))
        .group("g")
        .build()
        .unwrap();
    assert_eq!(
        (c.max_lifetime, c.group.as_deref()),
        (Some(Duration::from_secs(60)), Some("g"))
    );
    let e = PoolConfig::builder("p").build().unwrap_err();
    let missing: Vec<_> = e
        .problems()
        .into_iter()
        .filter_map(|p| match p {
            ConfigError::MissingKey { key, .. } => Some(*key),
            _ => None,
        })
        .collect();
    assert_eq!(missing, ["init_count", "max_count"]);
    let e = c.to_builder().init_count(5).build().unwrap_err();
    assert!(matches!(e, ConfigError::InitExceedsMax { .. }), "{e}");
    let back = c.to_builder().max_lifetime(None).build().unwrap();
    assert_eq!(back.max_lifetime, None);
}

#[test]
fn semantic_rules_are_typed() {
    let e = PoolConfig::new("p", 3, 2).validate().unwrap_err();
    assert_eq!(
        e,
        ConfigError::InitExceedsMax {
            pool: "p".into(),
            init_count: 3,
            max_count: 2
        }
    );
    assert_eq!(
        e.to_string(),
        "pool `p`: init_count (3) exceeds max_count (2)"
    );
    assert!(matches!(
        PoolConfig::new("p", 0, 0).validate(),
        Err(ConfigError::ZeroMaxCount { .. })
    ));
    let jitter = PoolConfig::builder("p")
        .init_count(1)
        .max_count(2)
        .max_lifetime(Duration::from_secs(10))
        .max_lifetime_jitter(Duration::from_secs(10))
        .build();
    assert!(matches!(
        jitter,
        Err(ConfigError::JitterNotBelowLifetime { .. })
    ));
    let zero_timeout = PoolConfig::new("p", 1, 2)
        .to_builder()
        .member_start_timeout(Duration::ZERO)
        .build();
    assert!(matches!(
        zero_timeout,
        Err(ConfigError::BadTime { key, .. }) if key == "member_start_timeout"
    ));
}

/// Regression: counts were unbounded, so `init_count = usize::MAX` panicked ("capacity
/// overflow") and `2^40` aborted the process on a 16 TiB allocation.
#[test]
fn counts_are_bounded_with_an_error_naming_the_key() {
    for n in [usize::MAX, 1 << 40, MAX_COUNT + 1] {
        let e = PoolConfig::new("p", n, n).validate().unwrap_err();
        let keys: Vec<_> = e
            .problems()
            .into_iter()
            .filter_map(|p| match p {
                ConfigError::InvalidValue { key, .. } => Some(key.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(keys, ["init_count", "max_count"], "{e}");
        let queue = PoolConfig::new("p", 1, 1)
            .to_builder()
            .queue_max(n)
            .auto_grow_threshold(Some(n))
            .build()
            .unwrap_err();
        assert_eq!(queue.problems().len(), 2, "{queue}");
    }
    PoolConfig::new("p", MAX_COUNT, MAX_COUNT)
        .validate()
        .unwrap();
}

#[cfg(feature = "file")]
#[test]
fn every_key_has_one_kind_and_the_required_ones_are_keys() {
    let mut names: Vec<_> = PoolConfig::keys().collect();
    let n = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), n, "a key listed twice");
    for key in REQUIRED_KEYS {
        assert!(names.contains(key), "{key}");
    }
}

/// The README's configuration table documents every key.
#[test]
fn every_key_is_documented_in_the_readme() {
    let readme = include_str!("../../README.md");
    for key in PoolConfig::keys() {
        assert!(
            readme.contains(&format!("| `{key}` |")),
            "README.md has no row for `{key}`"
        );
    }
}

#[test]
fn changed_keys_follow_the_table() {
    let a = PoolConfig::new("p", 1, 2);
    let b = a
        .to_builder()
        .queue_max(3)
        .take_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    assert_eq!(a.changed_keys(&b), ["queue_max", "take_timeout"]);
}

#[test]
fn zero_concurrent_starts_is_refused_by_name() {
    let e = PoolConfig::new("p", 1, 2)
        .to_builder()
        .max_concurrent_starts(Some(0))
        .build()
        .unwrap_err();
    assert!(
        matches!(&e, ConfigError::InvalidValue { key, .. } if key == "max_concurrent_starts"),
        "{e:?}"
    );
    assert!(
        PoolConfig::new("p", 1, 2)
            .to_builder()
            .max_concurrent_starts(Some(1))
            .build()
            .is_ok()
    );
}
