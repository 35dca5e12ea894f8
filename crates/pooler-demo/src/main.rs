//! pooler-demo: watch pools breathe.
//!
//! Loads a pools file (by default the one built into the binary, of simulated members),
//! drives a bursty workload across the group `replicas` (or the first group in the file) and a
//! standalone pool, draws each pool live, and ends with a summary.
#![allow(clippy::disallowed_methods)] // the spawn ban guards the library, not this program

#[macro_use]
mod say;
mod events;
mod sim;
mod summary;
mod view;
mod work;

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use pooler::{GroupMember, Kinds, Member, Pooler, Shutdown};
use rand::Rng;
use tokio::time::Instant;

use crate::events::EventLog;
use crate::sim::SimMember;
use crate::view::{Status, View};
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::say::say;
use crate::sim::Sim;
use crate::summary::{Tallies, record, summary};
use crate::work::Work;
use pooler_lapin::AmqpManager;
use pooler_mysql::MysqlManager;
use pooler_postgres::PgManager;
use pooler_redis::RedisManager;

/// The pools file used when --file is not given.
const DEFAULT_POOLS: &str = include_str!("../pools.toml");

/// Watch pooler pools breathe under a bursty workload.
///
/// The workload alternates calm and burst phases. Consumers take members from every group in
/// the pools file (load-balanced over its pools) and from every standalone pool, hold them for
/// a while, and now and then fail them. On a terminal each pool is drawn live with its members
/// (in use, free, starting, stopping), a short history of in use / free / queued, and beside
/// the pools an event pane of what pooler did, to which pool and why: growth in batches,
/// queueing, crashed members replaced, culls back to init_count, retirement at max_lifetime,
/// failed starts and their backoff. Press q to end early.
///
/// Without --file the built-in pools file is used (simulated members, no server needed); run
/// with --print-default-file to see it, then edit a copy. A bad file prints every problem in it
/// and exits with status 2.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Args {
    /// A pools file (TOML, one `[[pools]]` table per pool) instead of the built-in one.
    #[arg(long, short)]
    file: Option<std::path::PathBuf>,
    /// How long to run the workload, e.g. "20s" or "1min".
    #[arg(long, short, default_value = "20s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Peak number of concurrent consumers during a burst.
    #[arg(long, default_value_t = 24)]
    consumers: usize,
    /// Print one line per pool every second, and each event as it happens, instead of drawing
    /// the live view (the default when the output is not a terminal).
    #[arg(long)]
    plain: bool,
    /// Print the built-in pools file and exit.
    #[arg(long)]
    print_default_file: bool,
    /// Run one of the overload scenarios live instead (a simulated database before real
    /// pools, in real time: "latency-step", "burst", "failover", …; see docs/overload.md),
    /// printing a line a second.
    #[arg(long)]
    scenario: Option<String>,
    /// The pool configuration for --scenario: fixed, fixed-4x, shed, vegas or gradient.
    #[arg(long, default_value = "vegas")]
    mode: String,
}

/// Runs an overload scenario live, then prints its scores; a bad name exits with status 2.
async fn run_scenario(name: &str, mode: &str) {
    let scenario = pooler_sim::scenario(name).unwrap_or_else(|e| {
        eprintln!("pooler-demo: {e}");
        std::process::exit(2);
    });
    let Some(mode) = pooler_sim::Mode::from_name(mode) else {
        eprintln!("pooler-demo: no mode `{mode}` (fixed, fixed-4x, shed, vegas, gradient)");
        std::process::exit(2);
    };
    say(&format!(
        "{}: {} ({})\n",
        scenario.name,
        scenario.about,
        mode.name()
    ));
    let score = tokio::task::spawn_blocking(move || pooler_sim::run_live(&scenario, mode))
        .await
        .expect("the scenario runs");
    say(&format!(
        "goodput {:.0}/s ({:.0} % of what the database could serve), admitted p50 {:.0} ms, p99 {:.0} ms, {} timed out, {} shed\n",
        score.goodput,
        score.goodput_share() * 100.0,
        score.p50 * 1e3,
        score.p99 * 1e3,
        score.timed_out,
        score.shed
    ));
}

/// Where consumers take from.
#[derive(Debug, Clone)]
enum Target {
    Group(String),
    Pool(String),
}

/// The member kinds the demo drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sim,
    Postgres,
    Redis,
    Mysql,
    Amqp,
}

fn kind_of(pooler: &Pooler, name: &str) -> Kind {
    if pooler.pool::<PgManager>(name).is_ok() {
        Kind::Postgres
    } else if pooler.pool::<RedisManager>(name).is_ok() {
        Kind::Redis
    } else if pooler.pool::<MysqlManager>(name).is_ok() {
        Kind::Mysql
    } else if pooler.pool::<AmqpManager>(name).is_ok() {
        Kind::Amqp
    } else {
        Kind::Sim
    }
}

impl Target {
    fn label(&self) -> String {
        match self {
            Target::Group(g) => format!("group {g}"),
            Target::Pool(p) => p.clone(),
        }
    }
}

/// One consumer: take, work, hold, maybe fail, return; until `end`.
async fn consumer<M: Work>(pooler: Pooler, target: Target, end: Instant, tallies: Tallies) {
    while Instant::now() < end {
        let (hold, fail) = {
            let mut rng = rand::rng();
            (
                Duration::from_millis(rng.random_range(50..400)),
                rng.random_bool(0.03),
            )
        };
        let asked = Instant::now();
        let label = target.label();
        let taken = match &target {
            Target::Group(group) => pooler
                .take_group_member::<M>(group, Duration::from_secs(2))
                .await
                .map(GroupMember::into_member),
            Target::Pool(name) => {
                let Ok(pool) = pooler.pool::<M>(name) else {
                    return;
                };
                pool.take_member(Duration::from_secs(2)).await
            }
        };
        match taken {
            Ok(mut m) => {
                record(&tallies, &label, Ok(asked.elapsed()));
                if let Err(e) = M::work(&mut m).await {
                    tracing::warn!(target = %label, error = %e, "work failed");
                    Member::fail(m);
                    continue;
                }
                tokio::time::sleep(hold).await;
                if fail {
                    Member::fail(m);
                }
            }
            Err(e) => {
                record(&tallies, &label, Err(&e));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

fn spawn_consumer(
    kind: Kind,
    pooler: Pooler,
    target: Target,
    end: Instant,
    tallies: Tallies,
) -> tokio::task::JoinHandle<()> {
    match kind {
        Kind::Sim => tokio::spawn(consumer::<Sim>(pooler, target, end, tallies)),
        Kind::Postgres => tokio::spawn(consumer::<PgManager>(pooler, target, end, tallies)),
        Kind::Redis => tokio::spawn(consumer::<RedisManager>(pooler, target, end, tallies)),
        Kind::Mysql => tokio::spawn(consumer::<MysqlManager>(pooler, target, end, tallies)),
        Kind::Amqp => tokio::spawn(consumer::<AmqpManager>(pooler, target, end, tallies)),
    }
}

/// How many consumers run at `elapsed`: calm, burst, calm, burst, calm.
fn load(elapsed: Duration, total: Duration, peak: usize) -> usize {
    let phase = (elapsed.as_secs_f64() / total.as_secs_f64() * 5.0) as usize;
    if phase % 2 == 1 {
        peak
    } else {
        (peak / 6).max(1)
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if args.print_default_file {
        say(DEFAULT_POOLS);
        return;
    }
    if let Some(name) = &args.scenario {
        return run_scenario(name, &args.mode).await;
    }
    let live = !args.plain && std::io::stdout().is_terminal();
    // pooler's events feed the event pane (and the plain output); with --plain, the
    // POOLER_DEMO_LOG filter also sends what it selects to stderr.
    let events = EventLog::new();
    let pane = events
        .layer()
        .with_filter(Targets::new().with_target("pooler", tracing::Level::DEBUG));
    let subscriber = tracing_subscriber::registry().with(pane);
    if live {
        subscriber.init();
    } else {
        subscriber
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_filter(tracing_subscriber::EnvFilter::from_env("POOLER_DEMO_LOG")),
            )
            .init();
    }

    let text = match &args.file {
        None => DEFAULT_POOLS.to_owned(),
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) => {
                eprintln!("pooler-demo: cannot read {}: {e}", path.display());
                std::process::exit(2);
            }
        },
    };
    // Keep each pool's manager (a clone shares its counters) for the summary.
    let sims: Arc<Mutex<BTreeMap<String, Sim>>> = Arc::default();
    let built = sims.clone();
    let kinds = Kinds::new()
        .kind("sim", move |pool, member: SimMember| {
            let sim = Sim::new(member)?;
            let mut sims = built
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            sims.insert(pool.name.clone(), sim.clone());
            Ok(sim)
        })
        // Each real kind reads its backend's settings: a `url`, or the keys one by one.
        .kind("postgres", |_, member: pooler_postgres::PgSettings| {
            PgManager::from_settings(&member).map_err(|e| e.to_string())
        })
        .kind("amqp", |_, member: pooler_lapin::AmqpSettings| {
            AmqpManager::from_settings(&member).map_err(|e| e.to_string())
        })
        .kind("mysql", |_, member: pooler_mysql::MysqlSettings| {
            MysqlManager::from_settings(&member).map_err(|e| e.to_string())
        })
        .kind("redis", |_, member: pooler_redis::RedisSettings| {
            RedisManager::from_settings(&member).map_err(|e| e.to_string())
        });
    let pooler = match Pooler::from_config(&text, &kinds).await {
        Ok(pooler) => pooler,
        Err(e) => {
            eprintln!("pooler-demo: the pools file has problems:");
            for problem in e.problems() {
                eprintln!("  - {problem}");
            }
            std::process::exit(2);
        }
    };
    let names = pooler.pool_names();
    let sims = sims
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();

    // Targets: every group, and every pool in no group.
    let mut targets: Vec<(Kind, Target)> = Vec::new();
    for name in &names {
        let kind = kind_of(&pooler, name);
        let group = group_of(&pooler, name);
        match group {
            Some(group)
                if !targets
                    .iter()
                    .any(|(_, t)| matches!(t, Target::Group(g) if *g == group)) =>
            {
                targets.push((kind, Target::Group(group)));
            }
            Some(_) => {}
            None => targets.push((kind, Target::Pool(name.clone()))),
        }
    }

    let groups = targets_groups(&pooler, &names);
    let mut view = View::new(events.clone(), groups);
    let mut terminal = live.then(ratatui::init);
    let tallies: Tallies = Arc::default();
    let start = Instant::now();
    let mut end = start + args.duration;
    // (target index, consumer) pairs; a group gets the full load, a standalone pool a third.
    let mut running: Vec<(usize, tokio::task::JoinHandle<()>)> = Vec::new();
    let mut last_line = Instant::now();
    while Instant::now() < end {
        let elapsed = start.elapsed();
        let peak = load(elapsed, args.duration, args.consumers);
        running.retain(|(_, h)| !h.is_finished());
        // Calm phases let consumers run out; bursts add them.
        for (i, (kind, target)) in targets.iter().enumerate() {
            let want = if matches!(target, Target::Group(_)) {
                peak
            } else {
                (peak / 3).max(1)
            };
            let have = running.iter().filter(|(t, _)| *t == i).count();
            for _ in have..want {
                let phase_end = (Instant::now() + Duration::from_millis(800)).min(end);
                let consumer = spawn_consumer(
                    *kind,
                    pooler.clone(),
                    target.clone(),
                    phase_end,
                    tallies.clone(),
                );
                running.push((i, consumer));
            }
        }
        view.sample(&pooler);
        let status = Status {
            elapsed,
            duration: args.duration,
            burst: peak == args.consumers,
            consumers: running.len(),
        };
        if let Some(terminal) = &mut terminal {
            if terminal.draw(|f| view.draw(f, &status)).is_err() || quit_pressed() {
                end = Instant::now();
            }
        } else if last_line.elapsed() >= Duration::from_secs(1) {
            say(&view.plain(&status));
            last_line = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (_, consumer) in running {
        consumer.abort();
        let _ = consumer.await;
    }
    if terminal.take().is_some() {
        ratatui::restore();
        // The live view showed the events as they came: after it, the pools' last state and
        // the summary, not the whole log again.
        view.caught_up();
    }
    view.sample(&pooler);
    let status = Status {
        elapsed: start.elapsed(),
        duration: args.duration,
        burst: false,
        consumers: 0,
    };
    say(&view.plain(&status));
    pooler.close(Shutdown::Graceful).await;
    summary(&tallies, &sims, &events);
}

/// Each pool's group, by pool name.
fn targets_groups(pooler: &Pooler, names: &[String]) -> BTreeMap<String, String> {
    let mut groups = BTreeMap::new();
    for (name, group) in pooler_groups(pooler) {
        if names.contains(&name) {
            groups.insert(name, group);
        }
    }
    groups
}

/// Every (pool, group) pair of the registry.
fn pooler_groups(pooler: &Pooler) -> Vec<(String, String)> {
    pooler
        .pool_names()
        .into_iter()
        .filter_map(|name| group_of(pooler, &name).map(|group| (name, group)))
        .collect()
}

/// The group of the pool `name`, whatever its kind.
fn group_of(pooler: &Pooler, name: &str) -> Option<String> {
    match kind_of(pooler, name) {
        Kind::Sim => pooler.pool::<Sim>(name).ok()?.group(),
        Kind::Postgres => pooler.pool::<PgManager>(name).ok()?.group(),
        Kind::Redis => pooler.pool::<RedisManager>(name).ok()?.group(),
        Kind::Mysql => pooler.pool::<MysqlManager>(name).ok()?.group(),
        Kind::Amqp => pooler.pool::<AmqpManager>(name).ok()?.group(),
    }
}

/// Whether `q`, Esc or Ctrl-C was pressed (the terminal is in raw mode, so Ctrl-C is a key).
fn quit_pressed() -> bool {
    use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    while event::poll(Duration::ZERO).unwrap_or(false) {
        if let Ok(Event::Key(key)) = event::read()
            && key.kind == KeyEventKind::Press
            && (matches!(key.code, KeyCode::Char('q') | KeyCode::Esc)
                || (key.code == KeyCode::Char('c')
                    && key.modifiers.contains(KeyModifiers::CONTROL)))
        {
            return true;
        }
    }
    false
}
