//! What the READMEs say, checked:
//! - the workspace README's dependency table says how many crates each published crate pulls
//!   in, for the feature sets it lists: each row is counted again here with `cargo tree`, so
//!   the table cannot drift from the manifests;
//! - every published crate's README renders on crates.io as well as in rustdoc: each code
//!   link written as ``[`Name`]`` has a link definition (crates.io does not resolve rustdoc's
//!   paths).

use std::collections::BTreeSet;
use std::process::Command;

const PUBLISHED: [&str; 7] = [
    "pooler",
    "pooler-postgres",
    "pooler-redis",
    "pooler-mysql",
    "pooler-lapin",
    "pooler-diesel-async",
    "pooler-testkit",
];

/// One row of the table: `| `crate` | features | count |`.
struct Row {
    krate: String,
    features: Vec<String>,
    count: usize,
}

fn rows(readme: &str) -> Vec<Row> {
    let start = readme
        .find("<!-- dependency-table:")
        .expect("the README has the dependency table");
    let end = readme
        .find("<!-- dependency-table end -->")
        .expect("the table's end");
    readme[start..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            let [krate, features, count] = cells[..] else {
                panic!("a row has three cells: {line}");
            };
            Row {
                krate: krate.trim_matches('`').to_owned(),
                features: features
                    .split(',')
                    .map(|f| f.trim().trim_matches('`').to_owned())
                    .filter(|f| !f.is_empty() && f != "none")
                    .collect(),
                count: count.parse().unwrap_or_else(|_| panic!("a count: {line}")),
            }
        })
        .collect()
}

/// The crates in `krate`'s normal dependency closure (itself not counted) with `features`,
/// where `default` stands for the default features.
fn dependencies(krate: &str, features: &[String]) -> usize {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut command = Command::new(cargo);
    command.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "tree", "--locked", "-e", "normal", "--prefix", "none", "--format", "{p}", "-p", krate,
    ]);
    if !features.iter().any(|f| f == "default") {
        command.arg("--no-default-features");
    }
    let named: Vec<&str> = features
        .iter()
        .map(String::as_str)
        .filter(|f| *f != "default")
        .collect();
    if !named.is_empty() {
        command.args(["--features", &named.join(",")]);
    }
    let out = command.output().expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {krate}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let crates: BTreeSet<String> = String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .filter_map(|l| {
            // "name vX.Y.Z", then perhaps a path, "(proc-macro)" or "(*)".
            let mut words = l.split_whitespace();
            Some(format!("{} {}", words.next()?, words.next()?))
        })
        .collect();
    crates.len() - 1
}

#[test]
fn the_readme_counts_each_crates_dependencies_as_cargo_tree_does() {
    let readme = include_str!("../../../README.md");
    let rows = rows(readme);
    for krate in PUBLISHED {
        assert!(
            rows.iter()
                .any(|r| r.krate == krate && r.features == ["default"]),
            "the table has a row for {krate} with its default features"
        );
    }
    let wrong: Vec<String> = rows
        .iter()
        .filter_map(|row| {
            let counted = dependencies(&row.krate, &row.features);
            (counted != row.count).then(|| {
                format!(
                    "{} [{}]: the README says {}, cargo tree counts {counted}",
                    row.krate,
                    row.features.join(", "),
                    row.count
                )
            })
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_code_link_in_every_readme_has_a_definition() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for name in PUBLISHED {
        let path = crates.join(name).join("README.md");
        let readme = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} cannot be read: {e}", path.display()));
        let missing = pooler_testkit::undefined_code_links(&readme);
        assert!(
            missing.is_empty(),
            "{name}'s README: links with no definition: {missing:?}"
        );
    }
}

#[test]
fn a_code_link_with_no_definition_is_found() {
    let readme = "Take with [`Pool::take`] or [`try_take`](x), see [`Pool`].\n\n[`Pool`]: y\n";
    assert_eq!(pooler_testkit::undefined_code_links(readme), ["Pool::take"]);
}
