//! Named baselines: every figure of a run, saved under `docs/baselines/NAME.toml`
//! (`--save-baseline NAME`), and a later run compared with one (`--baseline NAME`), figure by
//! figure. The instruction counts make that comparison exact; wall-clock figures move with the
//! machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where baselines live: `docs/baselines/` next to the report.
pub(crate) fn path(docs: &Path, name: &str) -> PathBuf {
    docs.join("baselines").join(format!("{name}.toml"))
}

/// Writes `figures` as baseline `name`.
pub(crate) fn save(
    docs: &Path,
    name: &str,
    figures: &BTreeMap<String, f64>,
) -> std::io::Result<()> {
    let file = path(docs, name);
    std::fs::create_dir_all(file.parent().expect("a folder"))?;
    let mut text = String::from(
        "# A pooler-bench baseline: figure = value (see docs/benchmarks.md for units).\n",
    );
    for (figure, value) in figures {
        text.push_str(&format!("\"{figure}\" = {value}\n"));
    }
    std::fs::write(file, text)
}

/// Reads baseline `name`.
pub(crate) fn load(docs: &Path, name: &str) -> Result<BTreeMap<String, f64>, String> {
    let file = path(docs, name);
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(table
        .into_iter()
        .filter_map(|(k, v)| {
            v.as_float()
                .or_else(|| v.as_integer().map(|i| i as f64))
                .map(|v| (k, v))
        })
        .collect())
}

/// One figure compared: its name, its baseline value, its value now, and the change
/// (now ÷ baseline − 1).
pub(crate) type Change = (String, f64, f64, f64);

/// Each figure present in both, with its baseline value, its value now and the change.
pub(crate) fn compare(base: &BTreeMap<String, f64>, now: &BTreeMap<String, f64>) -> Vec<Change> {
    now.iter()
        .filter_map(|(figure, &value)| {
            let &before = base.get(figure)?;
            let change = if before == 0.0 {
                0.0
            } else {
                value / before - 1.0
            };
            Some((figure.clone(), before, value, change))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_baseline_reads_back_and_compares() {
        let dir =
            std::env::temp_dir().join(format!("pooler-bench-baseline-{}", std::process::id()));
        let figures: BTreeMap<String, f64> = [
            ("instructions.pooler.take".to_owned(), 842.0),
            ("grid.8.64.pooler".to_owned(), 193.25),
        ]
        .into_iter()
        .collect();
        save(&dir, "before", &figures).unwrap();
        let back = load(&dir, "before").unwrap();
        assert_eq!(back, figures);
        let mut now = figures.clone();
        now.insert("instructions.pooler.take".into(), 421.0);
        let rows = compare(&back, &now);
        assert_eq!(
            rows[1],
            ("instructions.pooler.take".to_owned(), 842.0, 421.0, -0.5)
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
