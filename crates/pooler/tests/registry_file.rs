//! Pools from a TOML file.
#![cfg(feature = "file")]

mod common;

use common::*;
use pooler::{ConfigError, Kinds, PoolConfig, Pooler};

/// What a `fake` pool's member table holds.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FakeMember {
    #[serde(default)]
    fail_start: bool,
}

fn kinds() -> Kinds {
    Kinds::new().kind("fake", |_pool, member: FakeMember| {
        let fake = Fake::default();
        if member.fail_start {
            fake.probe.set_start(Step::Err);
        }
        Ok(fake)
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
    let expected = PoolConfig::new("a", 2, 5)
        .to_builder()
        .group("g")
        .cull_interval(std::time::Duration::from_secs(60))
        .max_lifetime(std::time::Duration::from_secs(3600))
        .max_lifetime_jitter(std::time::Duration::from_secs(60))
        .build()
        .unwrap();
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
        "pool `member`: bad value for `member`: invalid type: string \"yes\", expected a boolean",
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

/// Regression: two pools named `?` were not seen as duplicates (the name stood for "no name"
/// in the check), so one started and stayed registered in a file that was then rejected.
#[tokio::test(start_paused = true)]
async fn a_rejected_file_starts_nothing_even_with_odd_names() {
    let pooler = Pooler::new();
    let file = r#"
        [[pools]]
        name = "?"
        kind = "fake"
        init_count = 1
        max_count = 1

        [[pools]]
        name = "?"
        kind = "fake"
        init_count = 1
        max_count = 1
    "#;
    let e = pooler.load(file, &kinds()).await.unwrap_err();
    assert!(
        e.problems()
            .iter()
            .any(|p| matches!(p, ConfigError::DuplicateName { pool } if pool == "?")),
        "{e}"
    );
    assert!(pooler.pool_names().is_empty(), "{:?}", pooler.pool_names());
}

/// Regression: a count of `i64::MAX` in a file passed validation and aborted the process
/// allocating for it.
#[tokio::test(start_paused = true)]
async fn a_huge_count_in_a_file_is_a_typed_error() {
    let file = format!(
        "[[pools]]\nname = \"big\"\nkind = \"fake\"\ninit_count = {m}\nmax_count = {m}\n",
        m = i64::MAX
    );
    let e = Pooler::from_config(&file, &kinds()).await.unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("init_count") && text.contains("max_count"),
        "{text}"
    );
}

/// `Pooler::load` dropped at every point it can stop at (every poll, on the paused clock,
/// through slow starts, a failing one and the closes that follow it) leaves the registry as
/// it was: no pool registered, every name free again, and every member started meanwhile
/// stopped.
#[tokio::test(start_paused = true)]
async fn dropping_load_at_any_await_point_leaves_the_registry_as_it_was() {
    #[derive(serde::Deserialize)]
    struct Timed {
        start_ms: u64,
        #[serde(default)]
        fails: bool,
    }
    let probes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kinds = {
        let probes = probes.clone();
        Kinds::new().kind("timed", move |_pool, member: Timed| {
            let fake = Fake::default();
            fake.probe.set_start(if member.fails {
                Step::FailAfter(ms(member.start_ms))
            } else {
                Step::Slow(ms(member.start_ms))
            });
            probes.lock().unwrap().push(fake.probe.clone());
            Ok(fake)
        })
    };
    let good = r#"
        [[pools]]
        name = "a"
        kind = "timed"
        init_count = 2
        max_count = 2
        member = { start_ms = 10 }

        [[pools]]
        name = "b"
        kind = "timed"
        init_count = 1
        max_count = 1
        member = { start_ms = 30 }
        "#;
    let failing = format!(
        "{good}
        [[pools]]
        name = \"c\"
        kind = \"timed\"
        init_count = 1
        max_count = 1
        member_start_timeout = 20
        member = {{ start_ms = 50, fails = true }}
        "
    );
    for file in [good, failing.as_str()] {
        let mut completed = false;
        let mut cut = 0;
        while !completed {
            let pooler = Pooler::new();
            probes.lock().unwrap().clear();
            {
                let mut load = std::pin::pin!(pooler.load(file, &kinds));
                for _ in 0..cut {
                    if futures_util::poll!(load.as_mut()).is_ready() {
                        completed = true;
                        break;
                    }
                    advance(ms(1)).await;
                }
            }
            if completed {
                pooler.close(pooler::Shutdown::Immediate).await;
                break;
            }
            assert!(pooler.pool_names().is_empty(), "cut after {cut} polls");
            advance(ms(100)).await;
            let alive: usize = probes.lock().unwrap().iter().map(|p| p.alive()).sum();
            assert_eq!(alive, 0, "members left running after a cut at poll {cut}");
            pooler.load(good, &kinds).await.unwrap();
            assert_eq!(pooler.pool_names(), ["a", "b"], "the names are free again");
            pooler.close(pooler::Shutdown::Immediate).await;
            cut += 1;
        }
        assert!(cut > 10, "the load stopped at {cut} points");
    }
}
