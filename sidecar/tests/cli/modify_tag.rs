//! `tag` changes tags as restic's does: the same three snapshots (times, hosts, tags) are made
//! with restic 0.19 and with the sidecar, the same `tag` commands run on both, and after each the
//! snapshots must hold the same tags in the same order, the same count of changed snapshots, and
//! an `original` naming the id each snapshot was first written under. A shared lock of another
//! process stops `tag`.

use super::exact_names::matches_schema;
use super::inspect_common::Restic;
use super::support::restic_binary;
use super::{initialised_cheaply, small_tree, text, Sidecar};
use std::collections::BTreeMap;

/// The snapshots made on both sides: time (UTC), host, tags.
const MADE: [(&str, &str, &[&str]); 3] = [
    ("2026-01-01 10:00:00", "alpha", &["x", "y", "z"]),
    ("2026-01-02 10:00:00", "alpha", &[]),
    ("2026-01-03 10:00:00", "beta", &["x"]),
];

/// The `tag` commands run on both sides in turn; `FIRST` stands for a prefix of the id the
/// oldest snapshot has at that moment on that side, `SRC` for the backed-up folder.
const STEPS: &[&[&str]] = &[
    &["--add", "a,b", "--add", "c", "--remove", "x"],
    &["--remove", "m,a", "--remove", "m", "--host", "alpha"],
    &["--set", "q,r", "--host", "beta"],
    &["--add", "k", "latest"],
    &["--add", " n , ,o", "FIRST"],
    &["--add", "c", "--tag", "c"],
    &["--set", "q,r", "--tag", "q"],
    &["--remove", "y", "--path", "SRC"],
    &["--add", "c", "--host", "nobody"],
];

/// A snapshot as compared: time in seconds, host, tags in their order, original id.
type Seen = (i64, String, Vec<String>, Option<String>);

/// One snapshot list (`snapshots --json` of either program), oldest first, with ids.
fn seen(listing: &str) -> Vec<(String, Seen)> {
    let snapshots: Vec<serde_json::Value> = serde_json::from_str(listing)
        .unwrap_or_else(|e| panic!("snapshots --json is not JSON ({e}): {listing}"));
    let mut all: Vec<(String, Seen)> = snapshots
        .iter()
        .map(|snapshot| {
            let time = chrono::DateTime::parse_from_rfc3339(snapshot["time"].as_str().unwrap())
                .unwrap()
                .timestamp();
            let tags = snapshot["tags"]
                .as_array()
                .map(|tags| {
                    tags.iter()
                        .map(|t| t.as_str().unwrap().to_owned())
                        .collect()
                })
                .unwrap_or_default();
            let original = snapshot["original"].as_str().map(str::to_owned);
            let host = snapshot["hostname"].as_str().unwrap().to_owned();
            let id = snapshot["id"].as_str().unwrap().to_owned();
            (id, (time, host, tags, original))
        })
        .collect();
    all.sort_by_key(|(_, seen)| seen.0);
    all
}

/// What both sides must agree on: each snapshot's time, host and tags, and whether it has been
/// rewritten; its `original` must be the id it was first written under on its own side.
fn comparable(listing: &[(String, Seen)], first_ids: &BTreeMap<i64, String>) -> Vec<Seen> {
    listing
        .iter()
        .map(|(id, (time, host, tags, original))| {
            if let Some(original) = original {
                assert_eq!(Some(original), first_ids.get(time), "original of {id}");
                assert_ne!(original, id, "a rewritten snapshot has a new id");
            }
            (
                *time,
                host.clone(),
                tags.clone(),
                original.as_ref().map(|_| "set".into()),
            )
        })
        .collect()
}

/// The step's arguments for one side.
fn arguments<'a>(step: &[&'a str], first: &'a str, source: &'a str) -> Vec<&'a str> {
    step.iter()
        .map(|arg| match *arg {
            "FIRST" => first,
            "SRC" => source,
            other => other,
        })
        .collect()
}

fn our_listing(sidecar: &Sidecar) -> Vec<(String, Seen)> {
    let run = sidecar.run(&["snapshots", "--json"]).expect_ok();
    matches_schema("snapshots.json", &run.stdout, false);
    seen(&run.stdout)
}

/// Runs one step on our side; returns how many snapshots it says it changed, and the snapshots
/// after it.
fn our_tag(
    sidecar: &Sidecar,
    args: &[&str],
    before: &[(String, Seen)],
) -> (u64, Vec<(String, Seen)>) {
    let mut all = vec!["tag", "--json"];
    all.extend(args);
    let printed = sidecar.run(&all).expect_ok().stdout;
    assert!(matches_schema("tag.json", &printed, false), "{printed}");
    let printed: serde_json::Value = serde_json::from_str(&printed).unwrap();
    let after = our_listing(sidecar);
    for change in printed["changed"].as_array().unwrap() {
        let old = change["oldSnapshotId"].as_str().unwrap();
        let new = change["newSnapshotId"].as_str().unwrap();
        assert!(before.iter().any(|(id, _)| id == old), "{args:?}: {old}");
        assert!(
            after.iter().all(|(id, _)| id != old),
            "{args:?}: {old} stays"
        );
        assert!(after.iter().any(|(id, _)| id == new), "{args:?}: {new}");
    }
    (printed["changedSnapshots"].as_u64().unwrap(), after)
}

/// Runs one step on restic's side; returns how many snapshots it says it changed.
fn restic_tag(restic: &Restic, args: &[&str]) -> u64 {
    let mut all = vec!["tag", "--json"];
    all.extend(args);
    let printed = restic.run(&all);
    let summary: serde_json::Value = serde_json::from_str(printed.lines().last().unwrap()).unwrap();
    assert_eq!(summary["message_type"], "summary", "{printed}");
    summary["changed_snapshots"].as_u64().unwrap()
}

#[test]
fn tag_adds_removes_and_sets_tags_as_restic_does_and_keeps_the_original_id() {
    let test = "tag_adds_removes_and_sets_tags_as_restic_does_and_keeps_the_original_id";
    let Some(restic_path) = restic_binary(test) else {
        return;
    };
    let (work, _repo, sidecar) = initialised_cheaply();
    let source = small_tree(work.path(), "source");
    let restic = Restic::init(restic_path, work.path());
    for (time, host, tags) in MADE {
        let rfc3339 = format!("{}Z", time.replace(' ', "T"));
        let mut ours = vec!["backup", text(&source), "--host", host, "--time", &rfc3339];
        let mut theirs = vec!["--host", host, "--time", time];
        for tag in tags {
            ours.extend(["--tag", tag]);
            theirs.extend(["--tag", tag]);
        }
        sidecar.run(&ours).expect_ok();
        restic.backup(&source, &theirs);
    }
    let first_ids = |listing: &[(String, Seen)]| -> BTreeMap<i64, String> {
        listing.iter().map(|(id, s)| (s.0, id.clone())).collect()
    };
    let mut ours = our_listing(&sidecar);
    let mut theirs = seen(&restic.run(&["snapshots", "--json"]));
    let (our_first, their_first) = (first_ids(&ours), first_ids(&theirs));
    assert_eq!(our_first.len(), 3);

    for step in STEPS {
        let our_args = arguments(step, &ours[0].0[..8], text(&source));
        let their_args = arguments(step, &theirs[0].0[..8], text(&source));
        let (our_count, our_after) = our_tag(&sidecar, &our_args, &ours);
        let their_count = restic_tag(&restic, &their_args);
        assert_eq!(our_count, their_count, "tag {step:?}: snapshots changed");
        ours = our_after;
        theirs = seen(&restic.run(&["snapshots", "--json"]));
        assert_eq!(
            comparable(&ours, &our_first),
            comparable(&theirs, &their_first),
            "tag {step:?}"
        );
    }
}

#[test]
fn tag_takes_the_exclusive_lock_and_refuses_what_names_nothing() {
    let (work, repo, sidecar) = initialised_cheaply();
    let source = small_tree(work.path(), "source");
    sidecar
        .run(&["backup", text(&source), "--tag", "kept"])
        .expect_ok();
    let before = sidecar.snapshots();

    // A backup of another host holds a shared lock: tag waits for no one and changes nothing.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let lock = runtime.block_on(super::write_lock(&repo, "other-host", false, "backup"));
    let refused = sidecar.run(&["tag", "--add", "new"]).expect_code(11);
    assert!(refused.stderr.contains("lock"), "{}", refused.stderr);
    assert_eq!(sidecar.snapshots(), before);
    std::fs::remove_file(repo.join("locks").join(lock.to_hex())).unwrap();

    // Nothing to do, an id that names no snapshot, --set beside --add: refused, nothing changed.
    let nothing = sidecar.run(&["tag"]).expect_code(1);
    assert!(
        nothing.stderr.contains("nothing to do"),
        "{}",
        nothing.stderr
    );
    let missing = sidecar
        .run(&["tag", "--add", "new", "deadbeef"])
        .expect_code(1);
    assert!(missing.stderr.contains("deadbeef"), "{}", missing.stderr);
    let both = sidecar.run(&["tag", "--set", "a", "--add", "b"]);
    assert_ne!(both.code, 0, "{}", both.stderr);
    assert!(both.stderr.contains("--set"), "{}", both.stderr);
    assert_eq!(sidecar.snapshots(), before);

    // --set '' removes every tag (restic 0.19 changes nothing there), and text says so.
    let cleared = sidecar.run(&["tag", "--set", ""]).expect_ok();
    assert!(
        cleared.stdout.contains("modified 1 snapshots"),
        "{}",
        cleared.stdout
    );
    assert!(
        cleared.stdout.contains("old snapshot ID: "),
        "{}",
        cleared.stdout
    );
    let after = sidecar.snapshots();
    assert_eq!(after[0]["tags"], serde_json::json!([]));
    assert_eq!(after[0]["original"], before[0]["id"]);
    // The lock was released.
    assert_eq!(std::fs::read_dir(repo.join("locks")).unwrap().count(), 0);
}
