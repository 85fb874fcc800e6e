//! `describe` resolves a selection as `restore` does (`latest` of a host, before a time, an id)
//! and reports the snapshot's id, time and record in its result, which must fit a termination
//! message whole: the operator creates claims from it and then restores that very snapshot.

use super::exact_names::matches_schema;
use super::{initialised, small_tree, text, Sidecar};
use neverwiped_contract::{ExitStatus, Operation, RunResult, TERMINATION_MESSAGE_MAX_BYTES};
use serde_json::{json, Value};
use std::path::Path;

const HOST: &str = "shop/nightly";

/// A claim record of the volume at `path`, with `annotation` as an annotation's value.
fn claim_at(path: &Path, name: &str, label: &str, annotation: &str) -> String {
    json!({
        "path": text(path), "name": name, "requestedSize": "10Gi", "storageClassName": "fast",
        "accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
        "labels": {"app": "shop", "note": label}, "annotations": {"example.com/team": annotation},
    })
    .to_string()
}

/// Backs up `paths` with their `claims` as a plan's run at `time`; returns the snapshot's id.
fn backup_at(sidecar: &Sidecar, paths: &[&Path], claims: &[String], time: &str) -> String {
    let mut args: Vec<&str> = vec!["backup", "--host", HOST, "--time", time];
    args.extend(paths.iter().map(|p| text(p)));
    for claim in claims {
        args.extend(["--claim", claim.as_str()]);
    }
    sidecar.run(&args).expect_ok();
    let snapshots = sidecar.snapshots();
    let newest = snapshots.last().expect("a snapshot");
    newest["id"].as_str().unwrap().to_owned()
}

/// `describe ARGS --result-file` and its result, which must fit a termination message.
fn describe(sidecar: &Sidecar, args: &[&str], result_file: &Path) -> (super::Run, RunResult) {
    let mut all = vec!["describe"];
    all.extend(args);
    all.extend(["--result-file", text(result_file)]);
    let run = sidecar.run(&all);
    let written = std::fs::read_to_string(result_file).expect("a result file");
    assert!(
        written.len() <= TERMINATION_MESSAGE_MAX_BYTES,
        "{}",
        written.len()
    );
    (run, RunResult::from_json(&written).expect("a RunResult"))
}

#[test]
fn describe_names_the_snapshot_a_selection_means_and_what_it_recorded() {
    let (work, _repo, sidecar) = initialised();
    let orders = small_tree(work.path(), "orders");
    let media = small_tree(work.path(), "media");
    let result_file = work.path().join("result.json");
    let first_claims = [claim_at(&orders, "orders", "first", "payments")];
    let first = backup_at(&sidecar, &[&orders], &first_claims, "2026-11-28T01:00:00Z");
    let second_claims = [
        claim_at(&orders, "orders", "second", "payments"),
        claim_at(&media, "media", "second", "content"),
    ];
    let second = backup_at(
        &sidecar,
        &[&orders, &media],
        &second_claims,
        "2026-11-29T01:00:00Z",
    );

    let (run, result) = describe(
        &sidecar,
        &["latest", "--host", HOST, "--json"],
        &result_file,
    );
    let run = run.expect_ok();
    assert_eq!(result.operation, Operation::Describe);
    assert_eq!(result.status, ExitStatus::Success);
    assert_eq!(result.snapshot_id.as_deref(), Some(second.as_str()));
    assert!(result
        .snapshot_time
        .unwrap()
        .starts_with("2026-11-29T01:00:00"));
    let sources = result.sources.expect("the record");
    let names: Vec<&str> = sources.claims.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["orders", "media"]);
    let media_record: Value = serde_json::from_str(&second_claims[1]).unwrap();
    assert_eq!(
        serde_json::to_value(&sources.claims[1]).unwrap(),
        media_record
    );
    matches_schema("describe.json", &run.stdout, false);
    let printed: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(printed["snapshotId"], json!(second));
    assert_eq!(printed["hostname"], HOST);
    assert_eq!(printed["sources"]["claims"][1], media_record);

    // takenBefore's snapshot, and its own record.
    let before = ["latest", "--host", HOST, "--before", "2026-11-29T00:00:00Z"];
    let (run, result) = describe(&sidecar, &before, &result_file);
    assert!(run.expect_ok().stdout.contains("claim orders at"));
    assert_eq!(result.snapshot_id.as_deref(), Some(first.as_str()));
    let record = result.sources.unwrap();
    assert_eq!(record.claims.len(), 1);
    assert_eq!(record.claims[0].labels["note"], "first");

    // An id is resolved to the whole id; one of another origin is refused.
    let (run, result) = describe(&sidecar, &[&first[..8], "--host", HOST], &result_file);
    run.expect_ok();
    assert_eq!(result.snapshot_id.as_deref(), Some(first.as_str()));
    let (run, result) = describe(
        &sidecar,
        &[&first[..8], "--host", "shop/other"],
        &result_file,
    );
    let run = run.expect_code(1);
    assert!(
        run.stderr.contains("is of host shop/nightly"),
        "{}",
        run.stderr
    );
    assert!(result.sources.is_none() && result.snapshot_id.is_none());
    let (run, result) = describe(&sidecar, &["latest", "--host", "gone/plan"], &result_file);
    run.expect_code(ExitStatus::NoSnapshotOfHost.code());
    assert_eq!(result.status, ExitStatus::NoSnapshotOfHost);
}

#[test]
fn a_record_too_large_for_a_termination_message_fails_and_says_what_to_do() {
    let (work, _repo, sidecar) = initialised();
    let result_file = work.path().join("result.json");
    // Large annotations are left out (and said so) when the rest fits.
    let volumes: Vec<_> = (0..4)
        .map(|n| small_tree(work.path(), &format!("volume-{n}")))
        .collect();
    let paths: Vec<&Path> = volumes.iter().map(|p| p.as_path()).collect();
    let annotated: Vec<String> = volumes
        .iter()
        .enumerate()
        .map(|(n, path)| claim_at(path, &format!("volume-{n}"), "x", &"a".repeat(1500)))
        .collect();
    let annotated_id = backup_at(&sidecar, &paths, &annotated, "2026-11-28T01:00:00Z");
    let (run, result) = describe(&sidecar, &["latest", "--host", HOST], &result_file);
    run.expect_ok();
    assert_eq!(result.snapshot_id.as_deref(), Some(annotated_id.as_str()));
    let claims = result.sources.unwrap().claims;
    assert_eq!(claims.len(), 4);
    assert!(claims
        .iter()
        .all(|c| c.annotations.is_empty() && c.annotations_left_out && c.labels["note"] == "x"));

    // Labels are kept whole: when they alone do not fit, the run fails with what to do instead.
    let labelled: Vec<String> = volumes
        .iter()
        .enumerate()
        .map(|(n, path)| claim_at(path, &format!("volume-{n}"), &"l".repeat(1200), "a"))
        .collect();
    backup_at(&sidecar, &paths, &labelled, "2026-11-29T01:00:00Z");
    let (run, result) = describe(&sidecar, &["latest", "--host", HOST], &result_file);
    let run = run.expect_code(1);
    let error = result.error.expect("an error");
    assert_eq!(result.status, ExitStatus::Failed);
    assert!(result.sources.is_none());
    for part in ["4 claim(s)", "4096 bytes", "createClaim", "--create-claims"] {
        assert!(error.contains(part), "{part:?} in {error}");
    }
    assert!(run.stderr.contains("4096 bytes"), "{}", run.stderr);
}
