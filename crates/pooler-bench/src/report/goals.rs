//! The report's goals table: each goal of docs/design.md, its figure, and whether it is met.

use std::fmt::Write as _;

use super::{cell, size_spread, uncontended_ns};
use crate::Results;
use crate::instructions::Op;
use crate::suites::percentile;

/// Each goal, its figure, and whether it is met.
pub(super) fn goals_section(md: &mut String, r: &Results) -> std::fmt::Result {
    let ours = uncontended_ns(r, "pooler");
    let flat = size_spread(r);
    writeln!(md, "\n## Goals\n")?;
    writeln!(md, "| goal | measured | met |\n|---|---|---|")?;
    let mut worst_deadpool = f64::MAX;
    let mut vs_qp = Vec::new();
    for size in [4, 8, 16] {
        for tasks in [4, 16, 64, 256] {
            let ours = cell(r, "pooler", size, tasks);
            if let (Some(o), Some(d)) = (ours, cell(r, "deadpool", size, tasks)) {
                worst_deadpool = worst_deadpool.min(d / o);
            }
            if let (Some(o), Some(q)) = (ours, cell(r, "qp", size, tasks)) {
                vs_qp.push(q / o);
            }
        }
    }
    let hung = r.grid.iter().any(|g| g.0 == "pooler" && g.3.is_none());
    let qp_median = if vs_qp.is_empty() {
        f64::NAN
    } else {
        vs_qp.sort_by(f64::total_cmp);
        vs_qp[vs_qp.len() / 2]
    };
    let yes = |b: bool| if b { "yes" } else { "no" };
    writeln!(
        md,
        "| contended grid ≥ 1.5× deadpool in every cell | worst cell {worst_deadpool:.2}× | {} |",
        yes(worst_deadpool >= 1.5)
    )?;
    writeln!(
        md,
        "| at least qp's median, never hanging | median cell {qp_median:.2}× qp; pooler hung: {} | {} |",
        yes(hung),
        yes(qp_median >= 1.0 && !hung)
    )?;
    let dead_unc = r
        .uncontended
        .iter()
        .find(|u| u.0 == "deadpool")
        .and_then(|u| u.1);
    let unc = dead_unc.zip(ours).map(|(d, o)| d / o).unwrap_or(f64::NAN);
    writeln!(
        md,
        "| uncontended ≥ 4× deadpool | {unc:.2}× | {} |",
        yes(unc >= 4.0)
    )?;
    if let Some(Some(lat)) = r.fairness.iter().find(|f| f.0 == "pooler").map(|f| &f.1) {
        let p50 = percentile(lat, 0.5).max(1.0);
        let (p99, p999) = (percentile(lat, 0.99) / p50, percentile(lat, 0.999) / p50);
        writeln!(
            md,
            "| fairness p99 ≤ 2× p50 | {p99:.1}× | {} |",
            yes(p99 <= 2.0)
        )?;
        writeln!(
            md,
            "| fairness p99.9 ≤ 4× p50 | {p999:.1}× | {} |",
            yes(p999 <= 4.0)
        )?;
    }
    writeln!(
        md,
        "| pool-size cost flat within 1.2× | {flat:.2}× | {} |",
        yes(flat <= 1.2)
    )?;
    let instr = |who: &str, op: Op| {
        r.instructions
            .iter()
            .find(|i| i.0 == who && i.1 == op)
            .and_then(|i| i.2)
    };
    if let Some(default) = instr("pooler", Op::Default) {
        let v = default.instructions;
        writeln!(
            md,
            "| instructions per uncontended `take()`+return ≤ 200 | {v:.0} | {} |",
            yes(v <= 200.0)
        )?;
    }
    if let (Some(take), Some(dead)) = (instr("pooler", Op::Take), instr("deadpool", Op::Take)) {
        let (take, dead) = (take.instructions, dead.instructions);
        writeln!(
            md,
            "| instructions per take_member+return ≤ 250 and ≥ 4× fewer than deadpool | {take:.0} ({:.2}× fewer) | {} |",
            dead / take,
            yes(take <= 250.0 && dead / take >= 4.0)
        )?;
    }
    if let Some(try_) = instr("pooler", Op::Try) {
        let v = try_.instructions;
        writeln!(
            md,
            "| instructions per try_take_member+return ≤ 150 | {v:.0} | {} |",
            yes(v <= 150.0)
        )?;
    }
    if let (Some(take), Some(default)) = (instr("pooler", Op::Take), instr("pooler", Op::Default)) {
        let most = take.atomics.max(default.atomics);
        writeln!(
            md,
            "| atomic read-modify-writes per take+return ≤ 4 | take_member {:.1}, take() {:.1} | {} |",
            take.atomics,
            default.atomics,
            yes(most <= 4.0)
        )?;
    }
    if let (Some(fail), Some(dead)) = (instr("pooler", Op::Fail), instr("deadpool", Op::Fail)) {
        let (fail, dead) = (fail.instructions, dead.instructions);
        writeln!(
            md,
            "| instructions per failed try_take_member ≤ deadpool's | {fail:.0} (deadpool {dead:.0}) | {} |",
            yes(fail <= dead)
        )?;
    }
    let (none, prom) = r.metrics;
    writeln!(
        md,
        "| take+return with a Prometheus recorder ≤ 1.05× without | {:.2}× ({none:.0} → {prom:.0} ns) | {} |",
        prom / none,
        yes(prom / none <= 1.05)
    )?;
    let p50 = |who: &str| {
        r.fairness
            .iter()
            .find(|f| f.0 == who)
            .and_then(|f| f.1.as_ref())
            .map(|lat| percentile(lat, 0.5))
    };
    for (who, how) in [("pooler", "take"), ("pooler-member", "take_member")] {
        if let (Some(ours), Some(dead)) = (p50(who), p50("deadpool")) {
            writeln!(
                md,
                "| fairness p50 with `{how}` ≤ deadpool's | {:.1} µs (deadpool {:.1} µs) | {} |",
                ours / 1e3,
                dead / 1e3,
                yes(ours <= dead)
            )?;
        }
    }
    let ready = r.parallel_start.as_secs_f64() * 1e3;
    writeln!(
        md,
        "| 100 × 100 ms starts ready within 130 ms | {ready:.1} ms | {} |",
        yes(ready <= 130.0)
    )?;
    match r.metrics_share {
        Some(s) => writeln!(
            md,
            "| metrics cost ≤ 5 % with no recorder | {:.1} % | {} |",
            s * 100.0,
            yes(s <= 0.05)
        )?,
        None => writeln!(
            md,
            "| metrics cost ≤ 5 % with no recorder | not measured (no valgrind) | ? |"
        )?,
    }
    Ok(())
}
