//! `--protect-within`: no snapshot younger than the window is forgotten, by `forget`'s rules,
//! `backup --keep-*` or `prune --keep-*`; naming one to `forget` fails and removes nothing; one
//! dated in the future is protected too.

use super::{initialised, small_tree, text, Sidecar};
use chrono::{Duration, SecondsFormat, Utc};
use std::path::Path;

/// Backs `source` up as of `days_ago` days before now (negative: in the future); returns its id.
fn backup_aged(sidecar: &Sidecar, source: &Path, days_ago: i64) -> String {
    let time = (Utc::now() - Duration::days(days_ago)).to_rfc3339_opts(SecondsFormat::Secs, true);
    let run = sidecar
        .run(&[
            "backup",
            text(source),
            "--host",
            "shop/nightly",
            "--time",
            &time,
            "--json",
        ])
        .expect_ok();
    let summary = run.stdout.lines().last().unwrap_or_default();
    let value: serde_json::Value = serde_json::from_str(summary)
        .unwrap_or_else(|e| panic!("backup --json is not JSON ({e}):\n{}", run.stdout));
    value["snapshotId"]
        .as_str()
        .expect("a snapshot id")
        .to_owned()
}

fn ids(sidecar: &Sidecar) -> Vec<String> {
    let mut ids: Vec<String> = sidecar
        .snapshots()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

#[test]
fn forget_backup_and_prune_keep_every_snapshot_inside_the_window() {
    let (work, _repo, sidecar) = initialised();
    let source = small_tree(work.path(), "source");
    let old = backup_aged(&sidecar, &source, 40);
    let older_than_window = backup_aged(&sidecar, &source, 15);
    let recent = backup_aged(&sidecar, &source, 13);
    let future = backup_aged(&sidecar, &source, -3);

    // Naming a protected snapshot fails, says why, and removes nothing.
    let refused = sidecar
        .run(&[
            "forget",
            &recent[..12],
            &old[..12],
            "--protect-within",
            "14d",
        ])
        .expect_code(1);
    assert!(
        refused
            .stderr
            .contains(&format!("snapshot {} of ", &recent[..8]))
            && refused
                .stderr
                .contains("younger than the protection window (--protect-within 14d)")
            && refused.stderr.contains("nothing was removed"),
        "{}",
        refused.stderr
    );
    assert_eq!(ids(&sidecar).len(), 4);

    // The rules keep the newest (the one dated in the future); the window keeps the one of 13
    // days ago; the two older ones go.
    let forget = sidecar
        .run(&[
            "forget",
            "--keep-last",
            "1",
            "--protect-within",
            "14d",
            "--json",
        ])
        .expect_ok();
    let printed: serde_json::Value = serde_json::from_str(&forget.stdout).unwrap();
    assert_eq!(printed["removed"], 2, "{printed}");
    let reasons: Vec<String> = printed["groups"][0]["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["snapshot"]["id"] == recent.as_str())
        .flat_map(|s| s["reasons"].as_array().unwrap().clone())
        .map(|r| r.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(reasons, ["protected: younger than --protect-within 14d"]);
    assert_eq!(ids(&sidecar), sorted(vec![recent.clone(), future.clone()]));
    let _ = older_than_window;

    // A window of 36 hours protects only the future one: backup --keep-last 1 (the new snapshot)
    // keeps it and the new one, and forgets the one of 13 days ago.
    let run = sidecar
        .run(&[
            "backup",
            text(&source),
            "--host",
            "shop/nightly",
            "--keep-last",
            "1",
            "--protect-within",
            "36h",
            "--json",
        ])
        .expect_ok();
    let newest: serde_json::Value =
        serde_json::from_str(run.stdout.lines().last().unwrap()).unwrap();
    let newest = newest["snapshotId"].as_str().unwrap().to_owned();
    assert_eq!(ids(&sidecar), sorted(vec![future.clone(), newest.clone()]));

    // prune --host --keep-last 1 forgets, then prunes, under one lock: with no window the
    // future-dated one (the newest by its time) stays, the other goes; with a window of 14 days
    // nothing would.
    sidecar
        .run(&[
            "prune",
            "--host",
            "shop/nightly",
            "--keep-last",
            "1",
            "--protect-within",
            "14d",
        ])
        .expect_ok();
    assert_eq!(ids(&sidecar), sorted(vec![future.clone(), newest.clone()]));
    let pruned = sidecar
        .run(&["prune", "--host", "shop/nightly", "--keep-last", "1"])
        .expect_ok();
    assert!(
        pruned.stdout.contains("1 snapshot(s) forgotten"),
        "{}",
        pruned.stdout
    );
    assert_eq!(ids(&sidecar), vec![future.clone()]);
    sidecar.run(&["check", "--read-data"]).expect_ok();
    sidecar.restore_and_compare(&future, &source);
}
