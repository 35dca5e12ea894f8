//! Instructions per operation, counted exactly by callgrind: this binary runs itself under
//! `valgrind --tool=callgrind` in `count` mode twice per measurement, once doing `n`
//! operations and once doing none, on a current-thread runtime with a pool of 8; the
//! difference divided by `n` is what one operation costs, start-up and pool creation
//! cancelled out. The count does not depend on what else the machine is doing. Callgrind's
//! bus events (`--collect-bus=yes`) count the atomic read-modify-write instructions (the
//! `lock`-prefixed ones) the same way.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::peers;

/// What one measurement does, `n` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// An awaited take and its return (`take_member` + drop; each peer's `get` + drop).
    Take,
    /// pooler's `take()` (the config's `take_timeout`, none here) and its return.
    Default,
    /// A take that never waits, and its return (`try_take_member`; deadpool's `timeout_get`
    /// with a zero wait).
    Try,
    /// A take that never waits, on a pool whose members are all held: it fails.
    Fail,
}

impl Op {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Take => "take",
            Op::Default => "default",
            Op::Try => "try",
            Op::Fail => "fail",
        }
    }

    /// The operation a word names (`take`, `default`, `try`, `fail`).
    pub(crate) fn parse(s: &str) -> Option<Op> {
        [Op::Take, Op::Default, Op::Try, Op::Fail]
            .into_iter()
            .find(|op| op.name() == s)
    }
}

/// The measurements, in report order: (contender, operation).
pub(crate) const MEASURED: [(&str, Op); 10] = [
    ("pooler", Op::Take),
    ("pooler", Op::Default),
    ("pooler", Op::Try),
    ("pooler", Op::Fail),
    // With admission on (vegas): the limit's comparison, and the hold timed for the limiter.
    ("pooler-admit", Op::Take),
    ("deadpool", Op::Take),
    ("deadpool", Op::Try),
    ("deadpool", Op::Fail),
    ("bb8", Op::Take),
    ("qp", Op::Take),
];

/// `count <contender> <op> <n>`: does the work (run under callgrind by [`measure`]).
pub(crate) async fn count(who: &str, op: Op, n: u32) {
    // With POOLER_BENCH_RECORDER=prometheus, the pool's metrics reach a Prometheus recorder.
    let _recorder = std::env::var("POOLER_BENCH_RECORDER")
        .is_ok_and(|r| r == "prometheus")
        .then(|| {
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .install_recorder()
                .expect("the only recorder")
        });
    match (who, op) {
        ("pooler" | "pooler-admit", _) => {
            let pool = if who == "pooler" {
                peers::pooler(8).await
            } else {
                peers::pooler_admitted(8).await
            };
            let _held: Vec<_> = if op == Op::Fail {
                (0..8)
                    .map(|_| pool.try_take_member().expect("free"))
                    .collect()
            } else {
                Vec::new()
            };
            for _ in 0..n {
                match op {
                    Op::Take => {
                        let m = pool.take_member(Duration::from_secs(60)).await;
                        std::hint::black_box(&m.expect("a member"));
                    }
                    Op::Default => {
                        std::hint::black_box(&pool.take().await.expect("a member"));
                    }
                    Op::Try => {
                        std::hint::black_box(&pool.try_take_member().expect("a member"));
                    }
                    Op::Fail => {
                        std::hint::black_box(&pool.try_take_member().map(drop).expect_err("full"));
                    }
                }
            }
        }
        ("deadpool", _) => {
            let pool = peers::deadpool(8);
            let zero = deadpool::managed::Timeouts {
                wait: Some(Duration::ZERO),
                ..Default::default()
            };
            let _held: Vec<_> = if op == Op::Fail {
                let mut held = Vec::new();
                for _ in 0..8 {
                    held.push(pool.get().await.expect("a member"));
                }
                held
            } else {
                Vec::new()
            };
            for _ in 0..n {
                match op {
                    Op::Take | Op::Default => {
                        std::hint::black_box(&pool.get().await.expect("a member"));
                    }
                    Op::Try => {
                        std::hint::black_box(&pool.timeout_get(&zero).await.expect("a member"));
                    }
                    Op::Fail => {
                        let failed = pool.timeout_get(&zero).await.map(drop);
                        std::hint::black_box(&failed.expect_err("full"));
                    }
                }
            }
        }
        ("bb8", Op::Take) => {
            let pool = peers::bb8(8).await;
            for _ in 0..n {
                std::hint::black_box(&pool.get().await.expect("a member"));
            }
        }
        ("qp", Op::Take) => {
            let pool = peers::qp(8);
            for _ in 0..n {
                std::hint::black_box(&pool.acquire_unchecked().await.expect("a member"));
            }
        }
        (who, op) => {
            eprintln!(
                "pooler-bench: no instruction count for `{who} {}` (counted: {})",
                op.name(),
                MEASURED
                    .map(|(who, op)| format!("{who} {}", op.name()))
                    .join(", ")
            );
            std::process::exit(2);
        }
    }
}

/// Total instructions and atomic read-modify-writes of this binary in `count` mode, by
/// callgrind. `None` without valgrind.
fn total(who: &str, op: Op, n: u32) -> Option<(u64, u64)> {
    let exe = std::env::current_exe().ok()?;
    let out = std::env::temp_dir().join(format!(
        "pooler-bench-cg-{}-{who}-{}-{n}",
        std::process::id(),
        op.name()
    ));
    let status = Command::new("valgrind")
        .args(["--tool=callgrind", "--collect-bus=yes", "-q"])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(&exe)
        .args(["count", who, op.name(), &n.to_string()])
        .status()
        .ok()?;
    let text = std::fs::read_to_string(&out).ok();
    let _ = std::fs::remove_file(&out);
    if !status.success() {
        return None;
    }
    summary(&text?)
}

/// The `summary:` (or `totals:`) line of a callgrind output file: instructions and bus
/// events (0 when not collected).
fn summary(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find_map(|l| {
        l.strip_prefix("summary:")
            .or_else(|| l.strip_prefix("totals:"))
    })?;
    let mut fields = line.split_whitespace().map(|v| v.parse::<u64>().ok());
    let ir = fields.next()??;
    let bus = fields.next().flatten().unwrap_or(0);
    Some((ir, bus))
}

/// One measurement: instructions and atomic read-modify-writes per operation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PerOp {
    pub(crate) instructions: f64,
    pub(crate) atomics: f64,
}

/// Instructions and atomics per operation for every measurement (`None` where valgrind is
/// missing or a run failed): `n` operations minus none, divided by `n`.
pub(crate) fn measure(
    which: &[(&'static str, Op)],
    n: u32,
) -> Vec<(&'static str, Op, Option<PerOp>)> {
    which
        .iter()
        .map(|&(who, op)| {
            let per_op = match (total(who, op, n), total(who, op, 0)) {
                (Some(with), Some(without)) => Some(PerOp {
                    instructions: with.0.saturating_sub(without.0) as f64 / f64::from(n),
                    atomics: with.1.saturating_sub(without.1) as f64 / f64::from(n),
                }),
                _ => None,
            };
            eprintln!(
                "  {who:<9} {:<7} {}",
                op.name(),
                per_op.map_or("n/a".into(), |p| format!(
                    "{:.0} instructions, {:.1} atomic read-modify-writes",
                    p.instructions, p.atomics
                ))
            );
            (who, op, per_op)
        })
        .collect()
}

/// Whether callgrind can run here.
pub(crate) fn available() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
        && Path::new("/proc/self").exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_is_read() {
        assert_eq!(summary("events: Ir\nsummary: 12345\n"), Some((12345, 0)));
        assert_eq!(summary("totals: 99 3\n"), Some((99, 3)));
        assert_eq!(summary("nothing"), None);
    }
}
