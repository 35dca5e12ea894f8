//! Configuration input never panics: arbitrary TOML tables (known and unknown keys, values of
//! every type and range), arbitrary text, and arbitrary pools files give either a valid config
//! or a typed error. (`fuzz/` holds a cargo-fuzz target for the same, run locally.)
#![cfg(feature = "file")]

mod common;

use std::time::Duration;

use pooler::{ConfigError, Kinds, Manager, MemberContext, MemberOrder, PoolConfig, Pooler};
use proptest::prelude::*;

fn value() -> impl Strategy<Value = toml::Value> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(toml::Value::Integer),
        (-5i64..200).prop_map(toml::Value::Integer),
        any::<f64>().prop_map(toml::Value::Float),
        any::<bool>().prop_map(toml::Value::Boolean),
        "[a-z0-9 ]{0,12}".prop_map(toml::Value::String),
        prop_oneof![
            Just("2min"),
            Just("120s"),
            Just("500us"),
            Just("1h"),
            Just("-3s"),
            Just("99999999h"),
            Just("lifo"),
            Just("fifo")
        ]
        .prop_map(|s| toml::Value::String(s.to_owned())),
        (
            any::<i64>(),
            prop_oneof![
                Just("min"),
                Just("sec"),
                Just("ms"),
                Just("mu"),
                Just("hour"),
                Just("day")
            ]
        )
            .prop_map(|(n, u)| toml::Value::Array(vec![n.into(), u.into()])),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(toml::Value::Array),
            proptest::collection::btree_map("[a-z_]{1,8}", inner, 0..3)
                .prop_map(|m| toml::Value::Table(m.into_iter().collect())),
        ]
    })
}

fn key() -> impl Strategy<Value = String> {
    let known: Vec<String> = PoolConfig::keys().map(str::to_owned).collect();
    prop_oneof![4 => proptest::sample::select(known), 1 => "[a-z_]{1,10}"]
}

fn table() -> impl Strategy<Value = toml::Table> {
    proptest::collection::btree_map(key(), value(), 0..12).prop_map(|m| m.into_iter().collect())
}

fn every_problem_is_typed(e: &ConfigError) {
    for p in e.problems() {
        assert!(!matches!(p, ConfigError::Multiple(_)));
        assert!(!p.to_string().is_empty());
    }
}

struct Nothing;

impl Manager for Nothing {
    type Member = ();
    type Error = std::io::Error;
    async fn start(&self, _: &MemberContext) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// Any valid config: every key at a value in its range.
fn config() -> impl Strategy<Value = PoolConfig> {
    let time = (0u64..10_000_000).prop_map(Duration::from_micros);
    let some_time = (1u64..10_000_000).prop_map(Duration::from_micros);
    (
        ("[a-z][a-z0-9_-]{0,10}", proptest::option::of("[a-z]{1,6}")),
        (
            0usize..20,
            1usize..40,
            0usize..100,
            proptest::option::of(0usize..10),
        ),
        (
            time.clone(),
            time.clone(),
            some_time.clone(),
            some_time.clone(),
        ),
        (
            proptest::option::of((
                (100_000u64..10_000_000).prop_map(Duration::from_micros),
                0u64..100,
            )),
            any::<bool>(),
        ),
        (
            proptest::option::of(some_time.clone()),
            proptest::option::of(some_time),
            proptest::option::of(time),
        ),
    )
        .prop_map(
            |(
                (name, group),
                (init, max, queue, grow),
                (cull, age, start, shutdown),
                (life, fifo),
                (health, leak, idle),
            )| {
                let max = max.max(init).max(1);
                let (max_lifetime, jitter) = match life {
                    Some((life, pct)) => (Some(life), life * u32::try_from(pct).unwrap() / 100),
                    None => (None, Duration::ZERO),
                };
                let builder = PoolConfig::new(name, init, max).to_builder();
                let builder = match group {
                    Some(group) => builder.group(group),
                    None => builder.no_group(),
                };
                builder
                    .cull_interval(cull)
                    .max_age(age)
                    .member_start_timeout(start)
                    .queue_max(queue)
                    .auto_grow_threshold(grow)
                    .max_lifetime(max_lifetime)
                    .max_lifetime_jitter(jitter)
                    .member_order(if fifo {
                        MemberOrder::Fifo
                    } else {
                        MemberOrder::Lifo
                    })
                    .member_shutdown(shutdown)
                    .health_check_interval(health)
                    .leak_detection_threshold(leak)
                    .idle_check_threshold(idle)
                    .build()
                    .unwrap()
            },
        )
}

/// A value that no key accepts.
fn bad_value() -> impl Strategy<Value = toml::Value> {
    prop_oneof![
        any::<bool>().prop_map(toml::Value::Boolean),
        Just(toml::Value::Float(1.5)),
        Just(toml::Value::Table(toml::Table::new())),
    ]
}

proptest! {
    #![proptest_config(common::keeping_failures(2000))]

    /// A valid config written as TOML reads back as itself, through `from_toml_str` (the
    /// checked path) and through serde alone.
    #[test]
    fn a_config_written_and_read_back_is_itself(config in config()) {
        prop_assert!(config.validate().is_ok(), "{:?}", config.validate());
        let text = toml::to_string(&config).unwrap();
        prop_assert_eq!(&PoolConfig::from_toml_str(&text).unwrap(), &config, "{}", text);
        let table: toml::Table = text.parse().unwrap();
        prop_assert_eq!(PoolConfig::deserialize_from(&table).unwrap(), config);
    }

    /// A bad value under any key is reported under that key, and under no other.
    #[test]
    fn a_bad_value_names_its_key(config in config(), key in proptest::sample::select(PoolConfig::keys().collect::<Vec<_>>()), bad in bad_value()) {
        let mut table: toml::Table = toml::to_string(&config).unwrap().parse().unwrap();
        table.insert(key.to_owned(), bad);
        let e = PoolConfig::from_toml_str(&toml::to_string(&table).unwrap_or_default()).unwrap_err();
        let named: Vec<String> = e.problems().iter().filter_map(|p| match p {
            ConfigError::InvalidValue { key, .. } | ConfigError::BadTime { key, .. } => Some(key.clone()),
            _ => None,
        }).collect();
        prop_assert_eq!(named, vec![key.to_owned()], "{}", e);
    }

    /// Arbitrary tables, text and pools files never panic: a config or a typed error.
    #[test]
    fn any_table_gives_a_config_or_a_typed_error(table in table()) {
        if let Err(e) = PoolConfig::from_toml_str(&toml::to_string(&table).unwrap_or_default()) {
            every_problem_is_typed(&e);
        }
        // serde on its own never panics either.
        let _ = PoolConfig::deserialize_from(&table);
    }

    #[test]
    fn any_text_gives_a_config_or_a_typed_error(text in "\\PC{0,200}") {
        if let Err(e) = PoolConfig::from_toml_str(&text) {
            every_problem_is_typed(&e);
        }
    }

    #[test]
    fn any_pools_file_starts_or_is_rejected_whole(pools in proptest::collection::vec(table(), 0..4)) {
        let mut file = String::new();
        for mut pool in pools {
            pool.insert("kind".into(), "nothing".into());
            file.push_str("[[pools]]\n");
            file.push_str(&toml::to_string(&pool).unwrap_or_default());
            file.push('\n');
        }
        let kinds = Kinds::new().kind("nothing", |_, _: toml::Table| Ok(Nothing));
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        rt.block_on(async {
            let pooler = Pooler::new();
            match pooler.load(&file, &kinds).await {
                Ok(()) => {}
                Err(e) => {
                    every_problem_is_typed(&e);
                    assert!(pooler.pool_names().is_empty(), "a rejected file started pools");
                }
            }
            pooler.close(pooler::Shutdown::Immediate).await;
        });
    }
}

/// serde's derive path, for the property above.
trait DeserializeFrom {
    fn deserialize_from(table: &toml::Table) -> Result<PoolConfig, toml::de::Error>;
}

impl DeserializeFrom for PoolConfig {
    fn deserialize_from(table: &toml::Table) -> Result<PoolConfig, toml::de::Error> {
        toml::from_str(&toml::to_string(table).unwrap_or_default())
    }
}
