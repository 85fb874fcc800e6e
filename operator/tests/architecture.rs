//! `docs/architecture.md` stays true: every operator, API and contract source file it names by its
//! full path exists, and every file of the BackupPlan reconciler's folder and of the API crate is
//! on its map. (The
//! sidecar's files are named there too; the sidecar's own tests keep its part.)

mod support;

use std::collections::BTreeSet;

use support::repo_root;

fn architecture() -> String {
    std::fs::read_to_string(repo_root().join("docs/architecture.md"))
        .expect("docs/architecture.md exists")
}

/// The `operator/src/...`, `api/src/...` and `contract/src/...` paths the document names in full.
fn named_paths(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for start in ["operator/src/", "api/src/", "contract/src/"] {
        let mut rest = text;
        while let Some(at) = rest.find(start) {
            let path: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '.' | '-'))
                .collect();
            found.insert(path.trim_end_matches('.').to_owned());
            rest = &rest[at + start.len()..];
        }
    }
    found
}

#[test]
fn every_source_file_the_architecture_names_exists() {
    let named = named_paths(&architecture());
    assert!(
        named.contains("operator/src/controller/backup_plan/triggers.rs"),
        "the map names the file that decides when a backup runs: {named:?}"
    );
    let missing: Vec<&String> = named
        .iter()
        .filter(|path| !repo_root().join(path).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md names files that do not exist: {missing:?}"
    );
}

/// The `.rs` files of `folder` that the map does not list (indented, as its file trees are).
fn unmapped_files(folder: &str) -> Vec<String> {
    let text = architecture();
    let mut unmapped = Vec::new();
    for entry in std::fs::read_dir(repo_root().join(folder)).expect("the folder exists") {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".rs") && !text.contains(&format!("    {name}")) {
            unmapped.push(name);
        }
    }
    unmapped
}

#[test]
fn every_module_of_the_backup_plan_reconciler_is_on_the_map() {
    let unmapped = unmapped_files("operator/src/controller/backup_plan");
    assert!(
        unmapped.is_empty(),
        "not in docs/architecture.md: {unmapped:?}"
    );
}

#[test]
fn every_module_of_the_api_crate_is_on_the_map() {
    let unmapped = unmapped_files("api/src");
    assert!(
        unmapped.is_empty(),
        "not in docs/architecture.md: {unmapped:?}"
    );
}
