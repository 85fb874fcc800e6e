//! `find PATTERN…` finds the same entries as restic 0.19's `find` in the same snapshots: the same
//! patterns (names at any depth, anchored paths, folders and all below them, `-i`), the same
//! time bounds, snapshot by snapshot.

use super::exact_names::matches_schema;
use super::inspect_common::{build_tree, set_times, Restic};
use super::support::restic_binary;
use super::{initialised, text};
use std::fs;

/// The paths found, snapshot by snapshot in the order printed, from `find --json` (restic's or
/// neverwiped's: both have `matches[].path`).
fn found(printed: &str) -> Vec<Vec<String>> {
    let printed: serde_json::Value = serde_json::from_str(printed)
        .unwrap_or_else(|e| panic!("find --json is not JSON ({e}):\n{printed}"));
    printed
        .as_array()
        .unwrap()
        .iter()
        .map(|snapshot| {
            snapshot["matches"]
                .as_array()
                .unwrap()
                .iter()
                .map(|entry| entry["path"].as_str().unwrap().to_owned())
                .collect()
        })
        .collect()
}

#[test]
fn find_matches_what_restic_finds_in_each_snapshot() {
    let test = "find_matches_what_restic_finds_in_each_snapshot";
    let Some(restic_path) = restic_binary(test) else {
        return;
    };
    let (work, _repo, sidecar) = initialised();
    let source = work.path().join("source");
    build_tree(&source);
    let restic = Restic::init(restic_path, work.path());
    restic.backup(&source, &["--time", "2026-01-01 00:00:00"]);
    sidecar.run(&["backup", text(&source)]).expect_ok();
    // A second snapshot, with a file more and one less.
    fs::write(source.join("docs/notes/new.txt"), b"new\n").unwrap();
    fs::remove_file(source.join("docs/a.txt")).unwrap();
    set_times(&source);
    restic.backup(&source, &["--time", "2026-01-02 00:00:00"]);
    sidecar.run(&["backup", text(&source)]).expect_ok();

    let anchored = format!("{}/docs/notes", text(&source));
    let cases: Vec<Vec<&str>> = vec![
        vec!["*.txt"],
        vec!["todo.txt"],
        vec!["notes"],
        vec!["notes/*.txt"],
        vec![&anchored],
        vec!["*.jpg"],
        vec!["-i", "*.jpg"],
        vec!["-i", "b.txt", "README*"],
        vec!["2024"],
        vec!["*.txt", "--oldest", "2023-11-15 05:00"],
        vec![
            "*",
            "--newest",
            "2023-11-15 03:13:20",
            "--oldest",
            "2023-11-15",
        ],
        vec!["**/old/*"],
        vec!["link", "fifo", "sticky"],
        vec!["*.txt", "--reverse"],
    ];
    for case in cases {
        let mut args = vec!["find", "--json"];
        args.extend(&case);
        let ours = sidecar.run(&args).expect_ok().stdout;
        matches_schema("find.json", &ours, false);
        let theirs = restic.run(&args);
        // restic leaves out snapshots without a match.
        let ours: Vec<Vec<String>> = found(&ours).into_iter().filter(|m| !m.is_empty()).collect();
        let theirs = found(&theirs);
        assert!(!theirs.is_empty(), "find {case:?} finds nothing");
        assert_eq!(ours, theirs, "find {case:?}");
    }

    // The text: a heading per snapshot with a match, then one path a line.
    let printed = sidecar.run(&["find", "new.txt"]).expect_ok().stdout;
    let lines: Vec<&str> = printed.lines().collect();
    assert!(
        lines[0].starts_with("Found matching entries in snapshot "),
        "{printed}"
    );
    assert_eq!(lines[1], format!("{}/docs/notes/new.txt", text(&source)));
    assert_eq!(lines.len(), 3, "{printed}");
    // A pattern restic refuses is refused.
    let refused = sidecar.run(&["find", "*["]).expect_code(1);
    assert!(
        refused.error_line().contains("invalid pattern"),
        "{}",
        refused.stderr
    );
}
