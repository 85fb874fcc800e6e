//! `repair snapshots` writes damaged snapshots again as restic 0.19's does. The same three
//! backups are made with restic and with the sidecar, the packs the second backup wrote are
//! deleted on both sides (a file's content, and the trees of a new folder and of the second
//! snapshot's root), both indexes repaired, and then both `repair snapshots` must leave the same
//! snapshots (tags, `original`) whose restores hold the same entries with the same contents:
//! the file cut to what is left, the folder empty, the second snapshot gone. A dry run changes
//! no object.

use super::exact_names::matches_schema;
use super::inspect_common::Restic;
use super::support::fixtures::{walk, Noise};
use super::support::restic_binary;
use super::{initialised, text, Sidecar};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Every object below a repository folder, with its size (locks left out: a run takes one).
fn objects(repo: &Path) -> BTreeSet<(PathBuf, u64)> {
    walk(repo)
        .into_iter()
        .filter(|path| path.is_file() && !path.starts_with(repo.join("locks")))
        .map(|path| {
            let size = fs::metadata(&path).unwrap().len();
            (path.strip_prefix(repo).unwrap().to_path_buf(), size)
        })
        .collect()
}

/// The pack files below a repository folder.
fn packs(repo: &Path) -> BTreeSet<PathBuf> {
    walk(&repo.join("data"))
        .into_iter()
        .filter(|path| path.is_file())
        .collect()
}

/// The snapshots as compared, oldest first (each side made its own at its own times): tags,
/// whether it names an original.
fn compared(listing: &str) -> Vec<(Vec<String>, bool)> {
    let snapshots: Vec<serde_json::Value> = serde_json::from_str(listing).unwrap();
    let mut all: Vec<(i64, Vec<String>, bool)> = snapshots
        .iter()
        .map(|snapshot| {
            let time = chrono::DateTime::parse_from_rfc3339(snapshot["time"].as_str().unwrap())
                .unwrap()
                .timestamp();
            let tags = snapshot["tags"]
                .as_array()
                .map(|tags| tags.iter().map(|t| t.as_str().unwrap().into()).collect())
                .unwrap_or_default();
            (time, tags, snapshot["original"].is_string())
        })
        .collect();
    all.sort();
    all.into_iter()
        .map(|(_, tags, original)| (tags, original))
        .collect()
}

/// The id of the newest snapshot that names an original (the repaired one).
fn repaired_id(listing: &str) -> String {
    let snapshots: Vec<serde_json::Value> = serde_json::from_str(listing).unwrap();
    let repaired: Vec<&serde_json::Value> = snapshots
        .iter()
        .filter(|snapshot| snapshot["original"].is_string())
        .collect();
    assert_eq!(repaired.len(), 1, "{listing}");
    repaired[0]["id"].as_str().unwrap().to_owned()
}

/// What a restore wrote below `source`'s place in `target`: each entry's path, and a file's
/// bytes.
fn restored(target: &Path, source: &Path) -> BTreeSet<(PathBuf, Option<Vec<u8>>)> {
    let root = target.join(source.strip_prefix("/").unwrap());
    walk(&root)
        .into_iter()
        .map(|path| {
            let bytes = path.is_file().then(|| fs::read(&path).unwrap());
            (path.strip_prefix(&root).unwrap().to_path_buf(), bytes)
        })
        .collect()
}

/// Both sides' snapshots and the restores of their repaired snapshots must be the same.
fn assert_same_repair(restic: &Restic, sidecar: &Sidecar, source: &Path, work: &Path) {
    let theirs = restic.run(&["snapshots", "--json"]);
    let ours = sidecar.run(&["snapshots", "--json"]).expect_ok().stdout;
    assert_eq!(
        compared(&ours),
        compared(&theirs),
        "ours: {ours}\nrestic: {theirs}"
    );
    let (restic_target, our_target) = (work.join("restored-restic"), work.join("restored-ours"));
    for target in [&restic_target, &our_target] {
        let _ = fs::remove_dir_all(target);
    }
    restic.run(&[
        "restore",
        "--quiet",
        &repaired_id(&theirs),
        "--target",
        text(&restic_target),
    ]);
    let id = repaired_id(&ours);
    sidecar
        .run(&["restore", &id, "--target", text(&our_target)])
        .expect_ok();
    let restored_ours = restored(&our_target, source);
    assert_eq!(restored_ours, restored(&restic_target, source));
    // What the damage left: the lost file empty, the folder whose tree is gone empty.
    let lost = restored_ours
        .iter()
        .find(|(p, _)| p.ends_with("docs/lost.txt"));
    assert_eq!(lost.and_then(|(_, b)| b.clone()), Some(Vec::new()));
    assert!(restored_ours.iter().any(|(p, _)| p.ends_with("newdir")));
    assert!(!restored_ours.iter().any(|(p, _)| p.ends_with("newdir/x")));
}

#[test]
fn repair_snapshots_cuts_out_what_is_gone_as_restic_does_and_a_dry_run_changes_nothing() {
    let test =
        "repair_snapshots_cuts_out_what_is_gone_as_restic_does_and_a_dry_run_changes_nothing";
    let Some(restic_path) = restic_binary(test) else {
        return;
    };
    let (work, repo, sidecar) = initialised();
    let source = work.path().join("stable/source");
    fs::create_dir_all(source.join("docs")).unwrap();
    fs::write(source.join("a.txt"), b"first\n").unwrap();
    fs::write(source.join("docs/b.txt"), b"second\n").unwrap();
    fs::write(source.join("c.bin"), Noise::new(7).bytes(100_000)).unwrap();
    let restic = Restic::init(restic_path, work.path());
    let restic_repo = work.path().join("restic-repo");
    let backup_both = || {
        restic.backup(&source, &[]);
        sidecar.run(&["backup", text(&source)]).expect_ok();
    };
    backup_both();
    let before = (packs(&restic_repo), packs(&repo));
    fs::create_dir(source.join("newdir")).unwrap();
    fs::write(source.join("newdir/x"), b"in the new folder\n").unwrap();
    fs::write(source.join("docs/lost.txt"), b"its pack is deleted\n").unwrap();
    backup_both();
    let after = (packs(&restic_repo), packs(&repo));
    fs::write(source.join("docs/later.txt"), b"third backup\n").unwrap();
    backup_both();
    for pack in after
        .0
        .difference(&before.0)
        .chain(after.1.difference(&before.1))
    {
        fs::remove_file(pack).unwrap();
    }
    restic.run(&["repair", "index"]);
    sidecar.run(&["repair", "index"]).expect_ok();

    let unrepaired = objects(&repo);
    let dry = sidecar
        .run(&["repair", "snapshots", "--dry-run", "--forget", "--json"])
        .expect_ok()
        .stdout;
    matches_schema("repair-snapshots.json", &dry, false);
    assert_eq!(
        objects(&repo),
        unrepaired,
        "a dry run wrote or removed objects"
    );
    let report: serde_json::Value = serde_json::from_str(&dry).unwrap();
    assert_eq!(report["changedSnapshots"], 2, "{report}");
    let actions: Vec<&str> = report["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|one| one["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["unchanged", "removed", "rewritten"], "{report}");
    let problems: Vec<(String, String)> = report["snapshots"][2]["damage"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["path"].as_str().unwrap().into(),
                d["problem"].as_str().unwrap().into(),
            )
        })
        .collect();
    let at = |name: &str| format!("{}/{name}", text(&source));
    assert_eq!(
        problems,
        [
            (at("docs/lost.txt"), "missingContent".into()),
            (at("newdir"), "unreadableFolder".into())
        ]
    );

    // Without --forget (on copies): the damaged snapshot stays, the repaired one is tagged.
    let copy = |from: &Path, to: &Path| {
        let status = std::process::Command::new("cp")
            .args(["-a", text(from), text(to)])
            .status()
            .unwrap();
        assert!(status.success());
    };
    let (restic_kept, ours_kept) = (work.path().join("restic-kept"), work.path().join("kept"));
    copy(&restic_repo, &restic_kept);
    copy(&repo, &ours_kept);

    restic.run(&["repair", "snapshots", "--forget"]);
    let forgot = sidecar
        .run(&["repair", "snapshots", "--forget", "--json"])
        .expect_ok()
        .stdout;
    matches_schema("repair-snapshots.json", &forgot, false);
    assert_same_repair(&restic, &sidecar, &source, work.path());
    sidecar.run(&["check"]).expect_ok();

    fs::remove_dir_all(&restic_repo).unwrap();
    fs::rename(&restic_kept, &restic_repo).unwrap();
    let kept = Sidecar::local(&ours_kept);
    restic.run(&["repair", "snapshots"]);
    kept.run(&["repair", "snapshots"]).expect_ok();
    assert_same_repair(&restic, &kept, &source, work.path());
    let tags = kept.run(&["snapshots", "--json"]).expect_ok().stdout;
    assert!(tags.contains("\"repaired\""), "{tags}");
}
