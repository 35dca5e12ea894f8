//! The README renders on crates.io as well as in rustdoc: every code link written as
//! ``[`Name`]`` has a link definition.

#[test]
fn every_code_link_in_the_readme_has_a_definition() {
    let missing = pooler_testkit::undefined_code_links(include_str!("../README.md"));
    assert!(missing.is_empty(), "links with no definition: {missing:?}");
}
