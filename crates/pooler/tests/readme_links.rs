//! The README renders on crates.io as well as in rustdoc: every code link written as
//! ``[`Name`]`` has a link definition (crates.io does not resolve rustdoc's paths). The
//! adapters use the same check from pooler-testkit, which pooler itself cannot depend on.

#[test]
fn every_code_link_in_the_readme_has_a_definition() {
    let readme = include_str!("../README.md");
    let mut missing = Vec::new();
    let mut rest = readme;
    while let Some(at) = rest.find("[`") {
        let after = &rest[at + 2..];
        let Some(end) = after.find("`]") else { break };
        let name = &after[..end];
        let follows = after[end + 2..].chars().next();
        let inline = matches!(follows, Some('(' | '[' | ':'));
        let defined = readme.contains(&format!("\n[`{name}`]: "));
        if !inline && !defined && !name.contains('\n') {
            missing.push(name.to_owned());
        }
        rest = &after[end + 2..];
    }
    assert!(missing.is_empty(), "links with no definition: {missing:?}");
}
