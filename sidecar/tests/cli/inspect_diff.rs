//! `diff` lists the same changed paths with the same modifiers as restic 0.19's `diff` between
//! two snapshots of the same trees, with and without `--metadata`.

use super::exact_names::matches_schema;
use super::inspect_common::{build_tree, Restic};
use super::support::restic_binary;
use super::{initialised, text};
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Changes the tree: content, entries added and removed (folders too), modes, times and types.
fn change_tree(source: &Path) {
    fs::write(source.join("docs/a.txt"), b"first file, changed\n").unwrap();
    fs::remove_file(source.join("docs/B.TXT")).unwrap();
    fs::write(source.join("docs/new.txt"), b"new\n").unwrap();
    fs::remove_dir_all(source.join("photos/2024")).unwrap();
    fs::create_dir_all(source.join("added/inner")).unwrap();
    fs::write(source.join("added/inner/file"), b"added\n").unwrap();
    fs::set_permissions(source.join("private"), fs::Permissions::from_mode(0o640)).unwrap();
    super::support::fixtures::set_mtime(&source.join("README.md"), 1_800_000_000, 0);
    fs::remove_file(source.join("link")).unwrap();
    fs::write(source.join("link"), b"a file where a link was\n").unwrap();
    fs::remove_dir(source.join("empty")).unwrap();
    fs::write(source.join("empty"), b"").unwrap();
    fs::remove_dir(source.join("sticky")).unwrap();
    std::os::unix::fs::symlink("docs", source.join("sticky")).unwrap();
}

/// The `(modifier, path)` of each change below `root`, from restic's JSON lines or neverwiped's
/// JSON object.
fn changes(printed: &str, root: &str) -> BTreeSet<(String, String)> {
    let values: Vec<serde_json::Value> = match serde_json::from_str::<serde_json::Value>(printed) {
        Ok(object) => object["changes"].as_array().unwrap().clone(),
        Err(_) => printed
            .lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .filter(|line| line["message_type"] == "change")
            .collect(),
    };
    values
        .iter()
        .map(|change| {
            (
                change["modifier"].as_str().unwrap().to_owned(),
                change["path"].as_str().unwrap().to_owned(),
            )
        })
        .filter(|(_, path)| path.starts_with(root))
        .collect()
}

#[test]
fn diff_classifies_every_change_as_restic_does() {
    let test = "diff_classifies_every_change_as_restic_does";
    let Some(restic_path) = restic_binary(test) else {
        return;
    };
    let (work, _repo, sidecar) = initialised();
    let stable = work.path().join("stable");
    let source = stable.join("source");
    build_tree(&source);
    let restic = Restic::init(restic_path, work.path());
    restic.backup(&source, &[]);
    sidecar.run(&["backup", text(&source)]).expect_ok();
    change_tree(&source);
    restic.backup(&source, &[]);
    sidecar.run(&["backup", text(&source)]).expect_ok();

    let ids = |snapshots: serde_json::Value, field: &str| -> Vec<String> {
        snapshots
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s[field].as_str().unwrap()[..8].to_owned())
            .collect()
    };
    let ours_ids = ids(
        serde_json::from_str(&sidecar.run(&["snapshots", "--json"]).expect_ok().stdout).unwrap(),
        "id",
    );
    let theirs_ids = ids(
        serde_json::from_str(&restic.run(&["snapshots", "--json"])).unwrap(),
        "id",
    );
    let root = text(&stable);
    // The counts of entries, as restic's statistics give them (its blob counts are of its own
    // chunks, and cannot be compared).
    let counts = |printed: &serde_json::Value| {
        let side = |side: &serde_json::Value| {
            (
                side["files"].clone(),
                side["dirs"].clone(),
                side["others"].clone(),
            )
        };
        (
            printed["changedFiles"].clone(),
            side(&printed["added"]),
            side(&printed["removed"]),
        )
    };
    let ours: serde_json::Value = serde_json::from_str(
        &sidecar
            .run(&["diff", "--json", &ours_ids[0], &ours_ids[1]])
            .expect_ok()
            .stdout,
    )
    .unwrap();
    let theirs = restic.run(&["diff", "--json", &theirs_ids[0], &theirs_ids[1]]);
    let statistics: serde_json::Value = theirs
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .find(|line| line["message_type"] == "statistics")
        .unwrap();
    let statistics = serde_json::json!({
        "changedFiles": statistics["changed_files"],
        "added": statistics["added"],
        "removed": statistics["removed"],
    });
    assert_eq!(counts(&ours), counts(&statistics), "{ours}\n{statistics}");
    assert!(ours["added"]["dataBlobs"].as_u64().unwrap() > 0, "{ours}");
    assert!(
        ours["removed"]["bytes"].as_u64().unwrap() >= 2_800_000,
        "{ours}"
    );

    for metadata in [false, true] {
        let mut ours_args = vec!["diff", "--json", &ours_ids[0], &ours_ids[1]];
        let mut theirs_args = vec!["diff", "--json", &theirs_ids[0], &theirs_ids[1]];
        if metadata {
            ours_args.push("--metadata");
            theirs_args.push("--metadata");
        }
        let ours = sidecar.run(&ours_args).expect_ok().stdout;
        matches_schema("diff.json", &ours, false);
        let theirs = restic.run(&theirs_args);
        let (ours, theirs) = (changes(&ours, root), changes(&theirs, root));
        assert!(theirs.len() > 10, "{theirs:?}");
        assert_eq!(ours, theirs, "diff --metadata={metadata}");
    }

    // The text: restic's layout, and the closing count.
    let printed = sidecar
        .run(&["diff", &ours_ids[0], &ours_ids[1]])
        .expect_ok()
        .stdout;
    let a_txt = format!("M    {}/docs/a.txt\n", text(&source));
    assert!(printed.contains(&a_txt), "{printed}");
    assert!(
        printed.contains("\nFiles:           2 new,     3 removed,     1 changed\n"),
        "{printed}"
    );
}
