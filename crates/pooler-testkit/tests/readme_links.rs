//! Every published crate's README renders on crates.io as well as in rustdoc: each code link
//! written as ``[`Name`]`` has a link definition (crates.io does not resolve rustdoc's
//! paths).

const PUBLISHED: [&str; 7] = [
    "pooler",
    "pooler-postgres",
    "pooler-redis",
    "pooler-mysql",
    "pooler-lapin",
    "pooler-diesel-async",
    "pooler-testkit",
];

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
