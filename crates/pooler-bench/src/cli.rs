//! The command line (the crate's docs list the modes): its arguments, and one function per
//! kind of mode — the whole report, the overload simulation, the counts on one thread that
//! callgrind reads, and the rest, each on a runtime of its own.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::suites::{self, Effort};
use crate::{
    backends, baseline, driver, instructions, overload_live, overload_report, peers, report,
};

/// The flags that take a value: the mode is the first argument that is neither a flag nor
/// the value of one of these.
const VALUED: [&str; 9] = [
    "--out",
    "--save-baseline",
    "--baseline",
    "--rounds",
    "--only",
    "--seeds",
    "--tasks",
    "--queries",
    "--pairs",
];

/// The arguments of a run, and where its mode stands among them.
pub(crate) struct Args {
    list: Vec<String>,
    mode_at: Option<usize>,
}

impl Args {
    /// This process's arguments.
    pub(crate) fn from_env() -> Self {
        Self::from_list(std::env::args().skip(1).collect())
    }

    /// The arguments `list` (the program's name left out).
    fn from_list(list: Vec<String>) -> Self {
        let mode_at = (0..list.len()).find(|&i| {
            !list[i].starts_with("--") && (i == 0 || !VALUED.contains(&list[i - 1].as_str()))
        });
        Args { list, mode_at }
    }

    /// The mode; empty for the whole report.
    fn mode(&self) -> &str {
        self.mode_at.map_or("", |i| &self.list[i])
    }

    /// The arguments after the mode (a mode's own words, such as `count WHO OP N`'s).
    fn after_mode(&self) -> &[String] {
        self.mode_at.map_or(&[], |i| &self.list[i + 1..])
    }

    /// The value a flag gives (`--only postgresql`).
    fn value_of(&self, flag: &str) -> Option<String> {
        let i = self.list.iter().position(|a| a == flag)?;
        self.list.get(i + 1).cloned()
    }

    /// Whether a flag or word is given.
    fn has(&self, word: &str) -> bool {
        self.list.iter().any(|a| a == word)
    }

    /// The mode's word at `index` (`handoff-fixed WHO N`'s WHO), one of `choices`; anything
    /// else is a message naming the word and the choices.
    fn word_at(&self, index: usize, choices: &[&str]) -> Result<&str, String> {
        let word = self.after_mode().get(index).map_or("", String::as_str);
        if choices.contains(&word) {
            Ok(word)
        } else {
            Err(format!(
                "{}'s word {} is one of {}, not `{word}`",
                self.mode(),
                index + 1,
                choices.join(", ")
            ))
        }
    }

    /// The mode's count at `index` (`handoff-fixed WHO N`'s N), at least `least`; a missing
    /// count, or one that is not a whole number of at least `least`, is a message naming it.
    fn count_at(&self, index: usize, least: u32) -> Result<u32, String> {
        let word = self.after_mode().get(index).map_or("", String::as_str);
        match word.parse::<u32>() {
            Ok(n) if n >= least => Ok(n),
            _ => Err(format!(
                "{}'s word {} is a count of at least {least}, not `{word}`",
                self.mode(),
                index + 1
            )),
        }
    }

    /// `count WHO OP N`'s words: a contender, an operation, and how many (0 for the run that
    /// [`instructions::measure`] subtracts).
    fn count_words(&self) -> Result<(&str, instructions::Op, u32), String> {
        let who = self.word_at(0, &["pooler", "pooler-admit", "deadpool", "bb8", "qp"])?;
        let op = self.word_at(1, &["take", "default", "try", "fail"])?;
        let op = instructions::Op::parse(op).ok_or_else(|| format!("no operation `{op}`"))?;
        Ok((who, op, self.count_at(2, 0)?))
    }

    /// `handoff-fixed WHO N`'s words: a contender and how many rounds (at least one).
    fn handoff_words(&self) -> Result<(&str, u32), String> {
        let who = self.word_at(0, &["pooler", "pooler-member", "deadpool"])?;
        Ok((who, self.count_at(1, 1)?))
    }

    /// A count a flag gives (`--rounds 3`): `default` when the flag is absent; a value that is
    /// not a whole number of at least one ends the run with a message naming both.
    fn count_of(&self, flag: &str, default: u32) -> u32 {
        match self.value_of(flag) {
            None => default,
            Some(v) => match v.parse::<u32>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    eprintln!("pooler-bench: {flag} takes a count of at least 1, not `{v}`");
                    std::process::exit(2);
                }
            },
        }
    }
}

/// The value, or the run ends with `pooler-bench: ` and the message.
fn or_exit<T>(words: Result<T, String>) -> T {
    words.unwrap_or_else(|message| {
        eprintln!("pooler-bench: {message}");
        std::process::exit(2);
    })
}

/// Runs the mode `args` name.
pub(crate) fn run(args: &Args) {
    let docs = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs"));
    let out = args
        .value_of("--out")
        .map_or_else(|| docs.clone(), PathBuf::from);
    match args.mode() {
        "" => whole(args, &docs, &out),
        "overload" => overload(args, &docs),
        "count" => {
            let (who, op, n) = or_exit(args.count_words());
            on_one_thread(instructions::count(who, op, n));
        }
        "handoff-fixed" => {
            let (who, rounds) = or_exit(args.handoff_words());
            on_one_thread(suites::handoffs(who, rounds as usize));
        }
        "driver-cost" => on_one_thread(driver::compare(15, 200_000)),
        "driver-fixed" => on_one_thread(driver::fixed(args.has("supervised"), 100_000)),
        "postgres-fixed" => {
            let who = args
                .after_mode()
                .iter()
                .find(|a| ["pooler", "pooler-nothing", "deadpool"].contains(&a.as_str()))
                .map_or("pooler", String::as_str);
            let tasks = args.count_of("--tasks", 1);
            let queries = args.count_of("--queries", 20_000);
            on_one_thread(backends::fixed_postgres(
                who,
                queries,
                tasks,
                args.has("armed"),
            ));
        }
        "mass-timeout" => {
            // Its own paused-clock runtime per measurement.
            for n in [25_000, 50_000, 100_000] {
                let (filled, lag) = suites::mass_timeout(n);
                println!(
                    "{n:>7} takers: queued in {filled:.1} ms; the last timed out {lag:.1} ms after its deadline"
                );
            }
        }
        "instructions" => {
            for (who, op, per_op) in instructions::measure(&instructions::MEASURED, 100_000) {
                println!(
                    "{who:<9} {:<7} {}",
                    op.name(),
                    per_op.map_or("n/a".into(), |p| format!(
                        "{:.0} instructions, {:.1} atomics",
                        p.instructions, p.atomics
                    ))
                );
            }
        }
        "fairness" => crate::fairness_rounds(args.count_of("--rounds", 5) as usize),
        _ => crate::fresh(on_runtime(args, &out)),
    }
}

/// Every suite, and the report written (`--smoke`: each for a moment, nothing written unless
/// `--out` is given), compared with a baseline or saved as one when asked.
fn whole(args: &Args, docs: &Path, out: &Path) {
    let smoke = args.has("--smoke");
    let effort = if smoke { Effort::SMOKE } else { Effort::FULL };
    let mut results = crate::run_all(effort);
    if let Some(name) = args.value_of("--baseline") {
        match baseline::load(docs, &name) {
            Ok(base) => {
                let rows = baseline::compare(&base, &results.figures());
                for (figure, before, now, change) in &rows {
                    println!(
                        "{figure:<40} {before:>12.1} → {now:>12.1}  {:+.1} %",
                        change * 100.0
                    );
                }
                results.against = Some((name, rows));
            }
            Err(e) => eprintln!("no baseline to compare with: {e}"),
        }
    }
    if let Some(name) = args.value_of("--save-baseline") {
        baseline::save(docs, &name, &results.figures()).expect("the baseline is written");
        println!("saved baseline {}", baseline::path(docs, &name).display());
    }
    if smoke && args.value_of("--out").is_none() {
        println!("smoke run: every suite ran in {:.1} s", results.seconds);
    } else {
        report::write(&results, out).expect("the report is written");
        println!("wrote {}", out.join("benchmarks.md").display());
    }
}

/// The overload simulation: seed 0's table, or each score's spread over `--seeds N`; the
/// report written (`--write`) or checked against its baseline (`--check`, which ends the
/// run with status 1 when a score fell below it).
fn overload(args: &Args, docs: &Path) {
    let only = args.value_of("--only");
    if args.value_of("--seeds").is_some() {
        let seeds = u64::from(args.count_of("--seeds", 1));
        println!("min / median / max over {seeds} seeds\n");
        let seeded = overload_report::run_seeds(only.as_deref(), seeds);
        print!("{}", overload_report::spread(&seeded));
        if args.has("--goals") {
            print!("{}", overload_report::goals(&seeded));
        }
        return;
    }
    let started = Instant::now();
    let (write, check) = (args.has("--write"), args.has("--check"));
    // The baseline and the report's spread are over seeds; the table is seed 0's.
    let seeds = if write || check {
        overload_report::SEEDS
    } else {
        1
    };
    let seeded = overload_report::run_seeds(only.as_deref(), seeds);
    print!("{}", overload_report::table(&seeded[0]));
    println!(
        "(simulated {seeds} seed(s) in {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    if write {
        overload_report::write(&seeded, docs).expect("the overload report is written");
        println!("wrote {}", docs.join("overload.md").display());
    }
    if check {
        let failures = overload_report::check(&seeded, docs);
        if !failures.is_empty() {
            for f in &failures {
                eprintln!("below the baseline: {f}");
            }
            std::process::exit(1);
        }
        println!("every score is at or above its baseline");
    }
}

/// `work` on a current-thread runtime: the fixed amounts of work that callgrind counts, so
/// the count is exact and repeatable, and a round trip to a driver is two task switches, not
/// two cross-thread wake-ups.
fn on_one_thread<F: std::future::Future>(work: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(work)
}

/// The modes that run on the multi-thread runtime of [`crate::fresh`].
async fn on_runtime(args: &Args, out: &Path) {
    let smoke = args.has("--smoke");
    match args.mode() {
        "uncontended" => {
            for name in ["pooler", "deadpool"] {
                let ns = suites::uncontended(name, 8, Effort::FULL).await;
                println!("{name:<9} {:.1} ns", ns.unwrap_or(f64::NAN));
            }
        }
        "grid-sample" => {
            for (size, tasks) in [(4, 16), (8, 64), (16, 256)] {
                for name in ["pooler", "deadpool"] {
                    let cell = suites::grid_cell(name, size, tasks, Effort::FULL).await;
                    println!(
                        "{name:<9} size {size:>2} tasks {tasks:>3}: {:.1} µs",
                        cell.unwrap_or(f64::NAN)
                    );
                }
            }
        }
        "overload-live" => overload_live::main(args.has("--check")).await,
        "backends" => {
            let rounds = args.count_of("--rounds", 3) as usize;
            let only = args.value_of("--only").unwrap_or_default();
            backends::main(out, smoke, rounds, &only).await;
        }
        mode @ ("postgres-paired" | "pgbouncer-paired") => {
            let pairs = args.count_of("--pairs", 20) as usize;
            let bouncer = mode == "pgbouncer-paired";
            if smoke {
                backends::paired_postgres(1, 0.2, bouncer).await;
            } else {
                backends::paired_postgres(pairs, 1.0, bouncer).await;
            }
        }
        "metrics-share" => println!("{:?}", crate::metrics_share()),
        "metrics" => {
            let (none, prom) = crate::metrics_cost(200_000).await;
            println!(
                "take+return: {none:.1} ns with no recorder, {prom:.1} ns with Prometheus ({:.2}×)",
                prom / none
            );
        }
        "churn-memory" => {
            let n = args
                .list
                .iter()
                .find_map(|a| a.strip_prefix("--replacements="))
                .and_then(|n| n.parse().ok())
                .unwrap_or(1_000_000);
            crate::churn_memory(n).await;
        }
        "fixed-plain" => crate::fixed_work(false).await,
        "fixed-lifetime" => crate::fixed_work(true).await,
        "lifetime" => {
            let base = peers::pooler_config(8);
            let with = base
                .to_builder()
                .max_lifetime(Duration::from_secs(3600))
                .build()
                .unwrap();
            let (a, b) = crate::paired(base.clone(), with, 200_000).await;
            println!(
                "take+return: {a:.1} ns without max_lifetime, {b:.1} ns with ({:+.1} %)",
                (b / a - 1.0) * 100.0
            );
            let leaks = base
                .to_builder()
                .leak_detection_threshold(Duration::from_secs(30))
                .build()
                .unwrap();
            let (a, b) = crate::paired(base, leaks, 200_000).await;
            println!(
                "take+return: {a:.1} ns without leak_detection_threshold, {b:.1} ns with ({:+.1} %)",
                (b / a - 1.0) * 100.0
            );
        }
        other => {
            eprintln!(
                "unknown mode `{other}`: run with no mode (or --smoke), or backends [--smoke] [--rounds N] [--only BACKEND], postgres-paired [--pairs N], pgbouncer-paired [--pairs N], overload-live [--check], driver-cost, driver-fixed, postgres-fixed, lifetime, fairness, \
                 grid-sample, uncontended, metrics, metrics-share, mass-timeout, churn-memory [--replacements=N], instructions, \
                 count WHO OP N, fixed-plain, fixed-lifetime"
            );
            std::process::exit(2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Args {
        Args::from_list(words.iter().map(|w| (*w).to_string()).collect())
    }

    /// Every count the instruction report runs under callgrind — each measured pair, and the
    /// run of none it subtracts — is one the command line takes.
    #[test]
    fn every_count_the_report_runs_is_accepted() {
        for (who, op) in instructions::MEASURED {
            for n in ["0", "100000"] {
                let words = args(&["count", who, op.name(), n]);
                let parsed = words.count_words();
                let (w, o, c) = parsed.unwrap_or_else(|e| panic!("{who} {}: {e}", op.name()));
                assert_eq!((w, o, c.to_string()), (who, op, n.to_string()));
            }
        }
    }

    #[test]
    fn a_missing_or_unknown_word_is_refused_by_name() {
        let refused = |words: &[&str]| args(words).handoff_words().map(|_| ()).unwrap_err();
        assert!(refused(&["handoff-fixed", "pooler"]).contains("word 2"));
        assert!(refused(&["handoff-fixed", "pooler", "0"]).contains("at least 1"));
        assert!(refused(&["handoff-fixed", "poler", "3"]).contains("`poler`"));
        let words = args(&["count", "pooler", "take"]);
        assert!(words.count_words().unwrap_err().contains("word 3"));
        let words = args(&["handoff-fixed", "deadpool", "5"]);
        assert_eq!(words.handoff_words(), Ok(("deadpool", 5)));
    }
}
