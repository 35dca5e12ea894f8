//! Pools from a TOML file.

mod common;

use common::*;
use pooler::{ConfigError, Kinds, PoolConfig, Pooler};

fn kinds() -> Kinds {
    Kinds::new().kind("fake", |_pool, member: &pooler::toml::Table| {
        if let Some(v) = member.get("fail_start") {
            let fail = v.as_bool().ok_or("`fail_start` must be true or false")?;
            let fake = Fake::default();
            if fail {
                fake.probe.set_start(Step::Err);
            }
            return Ok(fake);
        }
        Ok(Fake::default())
    })
}

#[tokio::test(start_paused = true)]
async fn a_file_starts_every_pool_with_its_settings() {
    let pooler = Pooler::from_config(
        r#"
        [[pools]]
        name = "a"
        kind = "fake"
        group = "g"
        init_count = 2
        max_count = 5
        cull_interval = [1, "min"]
        max_lifetime = "1h"
        max_lifetime_jitter = 60000

        [[pools]]
        name = "b"
        kind = "fake"
        init_count = 1
        max_count = 1
        member = { fail_start = false }
        "#,
        &kinds(),
    )
    .await
    .unwrap();
    assert_eq!(pooler.pool_names(), ["a", "b"]);
    let a = pooler.pool::<Fake>("a").unwrap();
    let expected = PoolConfig {
        group: Some("g".into()),
        cull_interval: std::time::Duration::from_secs(60),
        max_lifetime: Some(std::time::Duration::from_secs(3600)),
        max_lifetime_jitter: std::time::Duration::from_secs(60),
        ..PoolConfig::new("a", 2, 5)
    };
    assert_eq!(a.config(), expected);
    assert_eq!(a.utilization().free_count, 2);
    assert_eq!(pooler.group_members("g"), ["a"]);
}

#[tokio::test(start_paused = true)]
async fn every_problem_in_a_file_is_reported_at_once_and_nothing_starts() {
    let pooler = Pooler::new();
    pooler
        .new_pool(PoolConfig::new("taken", 0, 1), Fake::default())
        .await
        .unwrap();
    let e = pooler
        .load(
            r#"
            colour = "blue"

            [[pools]]
            name = "ok"
            kind = "fake"
            init_count = 1
            max_count = 1

            [[pools]]
            name = "bad"
            kind = "fake"
            init_count = 5
            max_count = 2
            max_age = "soonish"
            speed = 3

            [[pools]]
            name = "ok"
            kind = "unicorn"
            init_count = 1
            max_count = 1

            [[pools]]
            name = "taken"
            init_count = 1
            max_count = 1

            [[pools]]
            name = "member"
            kind = "fake"
            init_count = 1
            max_count = 1
            member = { fail_start = "yes" }
            "#,
            &kinds(),
        )
        .await
        .unwrap_err();
    let problems: Vec<String> = e.problems().iter().map(ToString::to_string).collect();
    let expected = [
        "pool `(file)`: unknown key `colour`",
        "pool `bad`: bad time value for `max_age`",
        "pool `bad`: unknown key `speed`",
        "pool `ok`: a pool of that name already exists",
        "pool `ok`: unknown kind `unicorn` (known: fake)",
        "pool `taken`: a pool of that name already exists",
        "pool `taken`: missing key `kind`",
        "pool `member`: bad value for `member`: `fail_start` must be true or false",
    ];
    for needle in expected {
        assert!(
            problems.iter().any(|p| p.starts_with(needle)),
            "missing {needle:?} in {problems:#?}"
        );
    }
    assert!(problems.len() >= expected.len());
    assert_eq!(
        pooler.pool_names(),
        ["taken"],
        "nothing from the bad file started"
    );
    // init_count > max_count is only found once the keys themselves are good.
    let e = pooler
        .load(
            "[[pools]]\nname = \"x\"\nkind = \"fake\"\ninit_count = 5\nmax_count = 2\n",
            &kinds(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ConfigError::InitExceedsMax { .. }), "{e}");
}

#[tokio::test(start_paused = true)]
async fn a_file_that_is_not_toml_is_a_syntax_error() {
    let e = Pooler::from_config("[[pools]\nname=", &kinds())
        .await
        .unwrap_err();
    assert!(matches!(e, ConfigError::Syntax { .. }), "{e}");
    let e = Pooler::from_config_file("/nonexistent/pools.toml", &kinds())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("/nonexistent/pools.toml"), "{e}");
}
