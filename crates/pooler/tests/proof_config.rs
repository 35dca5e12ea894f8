//! Configuration input never panics: arbitrary TOML tables (known and unknown keys, values of
//! every type and range), arbitrary text, and arbitrary pools files give either a valid config
//! or a typed error. (`fuzz/` holds a cargo-fuzz target for the same, run locally.)

use pooler::{ConfigError, Kinds, Manager, MemberContext, PoolConfig, Pooler};
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_table_gives_a_valid_config_or_a_typed_error(table in table()) {
        match PoolConfig::from_table(&table) {
            Ok(config) => prop_assert!(config.validate().is_ok()),
            Err(e) => every_problem_is_typed(&e),
        }
        // serde on its own never panics either.
        let _ = PoolConfig::deserialize_from(&table);
    }

    #[test]
    fn any_text_gives_a_valid_config_or_a_typed_error(text in "\\PC{0,200}") {
        match PoolConfig::from_toml_str(&text) {
            Ok(config) => prop_assert!(config.validate().is_ok()),
            Err(e) => every_problem_is_typed(&e),
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
        let kinds = Kinds::new().kind("nothing", |_, _| Ok(Nothing));
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
