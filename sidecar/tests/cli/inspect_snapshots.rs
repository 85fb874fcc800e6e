//! `snapshots` filters (`--host`, `--tag`, `--path`, `--latest N`, `--group-by`, ids) choose the
//! same snapshots as restic 0.19's on snapshots with the same hosts, tags, paths and order.

use super::exact_names::matches_schema;
use super::inspect_common::Restic;
use super::support::restic_binary;
use super::{initialised, text};
use std::collections::BTreeSet;
use std::fs;

/// The backups of the test, oldest first: host, tags, sources (`a`, `b`).
const BACKUPS: &[(&str, &[&str], &[&str])] = &[
    ("h1", &["daily"], &["a"]),
    ("h1", &["daily", "web"], &["a"]),
    ("h2", &["web"], &["a"]),
    ("h1", &["daily"], &["a", "b"]),
    ("h2", &["daily", "web"], &["b"]),
    ("h1", &["weekly"], &["a"]),
    ("h2", &["web"], &["b"]),
    ("h1", &["daily", "web"], &["a"]),
];

/// The numbers (their `n=` tags) of the snapshots in a JSON array of snapshots.
fn numbers(snapshots: &serde_json::Value) -> BTreeSet<u32> {
    snapshots
        .as_array()
        .unwrap()
        .iter()
        .map(|snapshot| {
            let tags = snapshot["tags"].as_array().unwrap();
            tags.iter()
                .find_map(|tag| tag.as_str().unwrap().strip_prefix("n="))
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect()
}

/// Each group of a JSON array of groups: its host and paths, and the numbers of its snapshots.
fn groups(printed: &serde_json::Value, key_field: &str) -> BTreeSet<String> {
    printed
        .as_array()
        .unwrap()
        .iter()
        .map(|group| {
            let key = &group[key_field];
            // restic writes an ungrouped host as "", neverwiped as null.
            let host = match &key["hostname"] {
                serde_json::Value::String(host) if host.is_empty() => serde_json::Value::Null,
                host => host.clone(),
            };
            format!(
                "{} {} {:?}",
                host,
                key["paths"],
                numbers(&group["snapshots"])
            )
        })
        .collect()
}

#[test]
fn snapshot_filters_choose_what_restic_chooses() {
    let test = "snapshot_filters_choose_what_restic_chooses";
    let Some(restic_path) = restic_binary(test) else {
        return;
    };
    let (work, _repo, sidecar) = initialised();
    let stable = work.path().join("stable");
    for name in ["a", "b"] {
        fs::create_dir_all(stable.join(name)).unwrap();
        fs::write(stable.join(name).join("file"), name).unwrap();
    }
    let source = |name: &str| text(&stable.join(name)).to_owned();
    let restic = Restic::init(restic_path, work.path());
    for (number, (host, tags, sources)) in BACKUPS.iter().enumerate() {
        let number_tag = format!("n={}", number + 1);
        let time = format!("2026-01-{:02} 03:00:00", number + 1);
        let mut args = vec!["backup".to_owned(), "--host".into(), host.to_string()];
        for tag in tags.iter().copied().chain([number_tag.as_str()]) {
            args.extend(["--tag".into(), tag.to_owned()]);
        }
        args.extend(sources.iter().map(|name| source(name)));
        sidecar.run(&args).expect_ok();
        let mut theirs = args.clone();
        theirs.extend(["--quiet".into(), "--time".into(), time]);
        let theirs: Vec<&str> = theirs.iter().map(String::as_str).collect();
        restic.run(&theirs);
    }

    let (a, b) = (source("a"), source("b"));
    let cases: Vec<Vec<&str>> = vec![
        vec![],
        vec!["--host", "h1"],
        vec!["--host", "h1", "--host", "h2"],
        vec!["--tag", "web"],
        vec!["--tag", "daily,web"],
        vec!["--tag", "daily,web", "--tag", "weekly"],
        vec!["--path", &a],
        vec!["--path", &a, "--path", &b],
        vec!["--path", &b, "--host", "h2", "--tag", "web"],
        vec!["--latest", "1"],
        vec!["--latest", "2", "--host", "h1"],
        vec!["--latest", "1", "--tag", "daily"],
        vec!["latest", "--host", "h2"],
    ];
    for case in cases {
        let mut ours_args = vec!["snapshots", "--json"];
        ours_args.extend(&case);
        let ours = sidecar.run(&ours_args).expect_ok().stdout;
        matches_schema("snapshots.json", &ours, false);
        let theirs = restic.run(&ours_args);
        let (ours, theirs): (serde_json::Value, serde_json::Value) = (
            serde_json::from_str(&ours).unwrap(),
            serde_json::from_str(&theirs).unwrap(),
        );
        assert!(!numbers(&theirs).is_empty(), "{case:?} chooses nothing");
        assert_eq!(numbers(&ours), numbers(&theirs), "snapshots {case:?}");
    }

    for case in [
        vec!["--group-by", "host"],
        vec!["--group-by", "host,paths", "--latest", "1"],
        vec!["--group-by", "paths", "--tag", "web"],
    ] {
        let mut ours_args = vec!["snapshots", "--json"];
        ours_args.extend(&case);
        let ours = sidecar.run(&ours_args).expect_ok().stdout;
        matches_schema("snapshots.json", &ours, false);
        let theirs = restic.run(&ours_args);
        let (ours, theirs): (serde_json::Value, serde_json::Value) = (
            serde_json::from_str(&ours).unwrap(),
            serde_json::from_str(&theirs).unwrap(),
        );
        assert_eq!(
            groups(&ours, "groupKey"),
            groups(&theirs, "group_key"),
            "snapshots {case:?}"
        );
    }

    // Ids and `latest` together: each once, whatever the filters say of an id.
    let all: serde_json::Value =
        serde_json::from_str(&sidecar.run(&["snapshots", "--json"]).expect_ok().stdout).unwrap();
    let third = all[2]["id"].as_str().unwrap()[..8].to_uppercase();
    let chosen = sidecar
        .run(&["snapshots", "--json", &third, "latest", "--host", "h1"])
        .expect_ok()
        .stdout;
    let chosen: serde_json::Value = serde_json::from_str(&chosen).unwrap();
    assert_eq!(numbers(&chosen), BTreeSet::from([3, 8]));
    let table = sidecar
        .run(&["snapshots", "--group-by", "host", "--host", "h2"])
        .expect_ok()
        .stdout;
    assert!(table.starts_with("snapshots for host h2:\n"), "{table}");
    assert!(table.ends_with("3 snapshot(s) in 1 group(s)\n"), "{table}");
}
