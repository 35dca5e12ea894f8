//! The demo, end to end: a short run on the built-in pools file, a bad file, and --help.

use pooler_testkit::Server;
use std::process::Command;

fn demo() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pooler-demo"))
}

/// Runs the demo with `args`, requires it to succeed, and returns what it printed.
fn run_ok(args: &[&str]) -> String {
    let out = demo().args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The summary section of a run's output.
fn summary(stdout: &str) -> &str {
    stdout
        .split("\nsummary\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no summary:\n{stdout}"))
}

/// The takes the summary reports for `target`.
fn takes(summary: &str, target: &str) -> u64 {
    let line = summary
        .lines()
        .find(|l| l.starts_with(target))
        .unwrap_or_else(|| panic!("{target}:\n{summary}"));
    line[target.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_short_run_on_the_default_file_ends_with_a_summary() {
    let stdout = run_ok(&["--duration", "3s", "--plain", "--consumers", "8"]);
    let summary = summary(&stdout);
    for pool in ["replica-a", "replica-b", "jobs"] {
        assert!(
            stdout.contains(&format!("{pool:<10} [")),
            "{pool} was not drawn:\n{stdout}"
        );
    }
    assert!(takes(summary, "group replicas") > 0, "{summary}");
    assert!(takes(summary, "jobs") > 0, "{summary}");
    assert!(
        summary.contains("wait p99") && summary.contains("errors by reason"),
        "{summary}"
    );
}

#[test]
fn a_bad_file_lists_its_problems_and_exits_2() {
    let dir = std::env::temp_dir().join(format!("pooler-demo-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "[[pools]]\nname = \"x\"\nkind = \"sim\"\ninit_count = 9\nmax_count = 2\nmember = { crash_rate = 7 }\n\n\
         [[pools]]\nname = \"y\"\nkind = \"sim\"\ninit_count = 1\nmax_count = 1\nmax_age = \"later\"\n\n\
         [[pools]]\nname = \"z\"\nkind = \"sim\"\nmember = { outage_at = \"soon\" }\n\n\
         [[pools]]\nname = \"w\"\nkind = \"sim\"\nmember = { outage_for = \"1s\" }\n",
    )
    .unwrap();
    let out = demo()
        .args(["--file", path.to_str().unwrap(), "--duration", "1s"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains(
            "pool `x`: bad value for `member`: `crash_rate` must be a number from 0.0 to 1.0"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("pool `y`: bad time value for `max_age`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("pool `z`: bad value for `member`: `outage_at`:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("pool `w`: bad value for `member`: `outage_for` needs `outage_at`"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn help_explains_the_options() {
    let out = demo().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for option in [
        "--file",
        "--duration",
        "--consumers",
        "--plain",
        "--print-default-file",
    ] {
        assert!(
            help.contains(option),
            "{option} missing from --help:\n{help}"
        );
    }
    let out = demo().arg("--print-default-file").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("[[pools]]"));
}

#[tokio::test]
async fn the_same_binary_drives_real_postgres_redis_mysql_and_amqp_pools() {
    let pg = Server::Postgres.url().await;
    let redis = Server::Redis.url().await;
    let mysql = Server::Mysql.url().await;
    let amqp = Server::Amqp.url().await;
    let (Some(pg), Some(redis), Some(mysql), Some(amqp)) = (pg, redis, mysql, amqp) else {
        return;
    };
    let file = include_str!("../pools-live.toml")
        .replace("postgres://postgres@127.0.0.1:5432/test", &pg)
        .replace("redis://127.0.0.1:6379", &redis)
        .replace("mysql://root@127.0.0.1:3306/test", &mysql)
        .replace("amqp://guest:guest@127.0.0.1:5672/%2f", &amqp);
    let path = std::env::temp_dir().join(format!("pooler-demo-live-{}.toml", std::process::id()));
    std::fs::write(&path, file).unwrap();
    let stdout = run_ok(&[
        "--file",
        path.to_str().unwrap(),
        "--duration",
        "2s",
        "--plain",
        "--consumers",
        "6",
    ]);
    let _ = std::fs::remove_file(&path);
    let summary = summary(&stdout);
    for target in ["pg", "cache", "orders", "events"] {
        assert!(takes(summary, target) > 0, "{summary}");
    }
}

/// The default run shows every lifecycle feature it promises, in pooler's own events: growth
/// in batches, queueing, a crash replaced, culling, retirement at max_lifetime, and a failed
/// start backed off. (The built-in file's rates make each of these near certain in 20 s; the
/// jobs pool's outage at 6 s makes the backoff certain: its starts fail one after another
/// there, and after a lone failure the next start waits out a step.)
#[test]
fn the_default_run_shows_every_lifecycle_feature() {
    let stdout = run_ok(&["--plain"]);
    let events: Vec<&str> = stdout.lines().filter(|l| l.contains(" event ")).collect();
    let seen = |what: &str| events.iter().any(|l| l.contains(what));
    let batch = events.iter().any(|l| {
        l.split("starting members (members=")
            .nth(1)
            .and_then(|n| n.trim_end_matches(')').parse::<usize>().ok())
            .is_some_and(|n| n >= 2)
    });
    assert!(batch, "no growth batch of two or more:\n{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.contains(" [") && !l.contains("queued=0 ")),
        "nobody ever queued:\n{stdout}"
    );
    for what in [
        "member died",
        "culled to the demand window's peak",
        "reason=max_lifetime",
        "member start failed",
        "the next start waits out a backoff step",
    ] {
        assert!(seen(what), "no `{what}` event:\n{stdout}");
    }
}

/// The live view, under a real pseudo-terminal (tmux): pools, histories and the event pane are
/// drawn, `q` ends the run early, and the terminal is given back for the summary.
#[test]
fn the_live_view_draws_pools_and_events_and_quits_on_q() {
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .args(["-L", &format!("pooler-demo-{}", std::process::id())])
            .args(args)
            .output()
    };
    if tmux(&["-V"]).is_err() {
        eprintln!("skipping: tmux is not installed");
        return;
    }
    let command = format!(
        "{} --duration 60s; echo demo-exited-$?; sleep 60",
        env!("CARGO_BIN_EXE_pooler-demo")
    );
    let started = tmux(&[
        "new-session",
        "-d",
        "-s",
        "demo",
        "-x",
        "150",
        "-y",
        "45",
        &command,
    ])
    .unwrap();
    assert!(started.status.success(), "{started:?}");
    let capture = || {
        let out = tmux(&["capture-pane", "-p", "-t", "demo"]).unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let wait_for = |what: &dyn Fn(&str) -> bool, why: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let screen = capture();
            if what(&screen) {
                return screen;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{why}; the screen:\n{screen}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let screen = wait_for(
        &|s| s.contains("starting members") && s.contains("queued"),
        "the live view never showed pools and events",
    );
    for part in [
        "pooler-demo",
        "pools",
        "events (what happened, to which pool, why)",
        "replica-a",
        "replica-b",
        "jobs",
        "in use",
        "free",
        "queued",
    ] {
        assert!(screen.contains(part), "`{part}` missing:\n{screen}");
    }
    tmux(&["send-keys", "-t", "demo", "q"]).unwrap();
    let screen = wait_for(&|s| s.contains("demo-exited-"), "q did not end the run");
    // Everything written after the live view, scrollback included: the pools' last state and
    // the summary, not the event log the view already showed.
    let after = tmux(&["capture-pane", "-p", "-S", "-", "-t", "demo"]).unwrap();
    let after = String::from_utf8_lossy(&after.stdout).into_owned();
    let _ = tmux(&["kill-server"]);
    assert!(screen.contains("demo-exited-0"), "{screen}");
    assert!(screen.contains("summary"), "{screen}");
    assert!(
        !after.contains(" event "),
        "the event log was printed again after the live view:\n{after}"
    );
}

/// `--plain` piped into a reader that stops early (`| head`) ends quietly, not with a panic
/// on the closed pipe.
#[test]
fn a_closed_pipe_ends_the_demo_quietly() {
    use std::io::Read as _;
    let mut child = demo()
        .args(["--plain", "--duration", "5s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 64];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
}
