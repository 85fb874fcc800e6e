//! A snapshot records what its volumes' claims were (`backup --claim`), so that a restore in
//! another cluster can recreate them; `snapshots --json` shows the record, and `tag` and `copy`
//! keep it. A snapshot a newer version wrote, with members this one does not know, keeps them
//! through `tag` and `copy` and restores with a warning that names them.

use super::exact_names::matches_schema;
use super::fixtures::assert_same_tree;
use super::{initialised, restored, small_tree, text, Sidecar, PASSWORD};
use neverwiped::backend::local::LocalBackend;
use neverwiped::backend::SharedBackend;
use neverwiped::repository::Repository;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;

const ORDERS_CLAIM: &str = r#"{"name":"orders","requestedSize":"10Gi","storageClassName":"fast","accessModes":["ReadWriteOnce"],"volumeMode":"Filesystem","labels":{"app":"shop"},"annotations":{"example.com/team":"payments"}}"#;

/// `ORDERS_CLAIM` for the volume at `path`.
fn claim_at(path: &Path) -> String {
    let mut claim: Value = serde_json::from_str(ORDERS_CLAIM).unwrap();
    claim["path"] = text(path).into();
    claim.to_string()
}

/// The newest snapshot `snapshots --json` lists, checked against its schema.
fn newest(sidecar: &Sidecar) -> Value {
    let listed = sidecar.run(&["snapshots", "--json"]).expect_ok().stdout;
    matches_schema("snapshots.json", &listed, false);
    let snapshots: Vec<Value> = serde_json::from_str(&listed).unwrap();
    snapshots.last().expect("a snapshot").clone()
}

#[test]
fn the_claims_given_are_recorded_in_the_snapshot_and_kept_by_tag_and_copy() {
    let (work, repo, sidecar) = initialised();
    let orders = small_tree(work.path(), "orders");
    let media = small_tree(work.path(), "media");
    let claim = claim_at(&orders);
    sidecar
        .run(&["backup", text(&orders), text(&media), "--claim", &claim])
        .expect_ok();
    let snapshot = newest(&sidecar);
    let expected: Value = serde_json::from_str(&claim).unwrap();
    assert_eq!(snapshot["sources"], json!({ "claims": [expected.clone()] }));

    sidecar.run(&["tag", "--add", "checked"]).expect_ok();
    let tagged = newest(&sidecar);
    assert_eq!(tagged["tags"], json!(["checked"]));
    assert_eq!(tagged["sources"], snapshot["sources"]);

    let copy = work.path().join("copy");
    let destination = Sidecar::local(&copy);
    destination.run(&["init"]).expect_ok();
    let mut command = destination.command();
    command
        .env("NEVERWIPED_FROM_PASSWORD_FILE", &sidecar.password_file)
        .args(["copy", "--from-repo", text(&repo)]);
    super::run(command).expect_ok();
    assert_eq!(newest(&destination)["sources"]["claims"][0], expected);
}

#[test]
fn a_claim_of_a_path_not_backed_up_stores_nothing() {
    let (work, _repo, sidecar) = initialised();
    let orders = small_tree(work.path(), "orders");
    let elsewhere = work.path().join("elsewhere");
    let refused = sidecar
        .run(&["backup", text(&orders), "--claim", &claim_at(&elsewhere)])
        .expect_code(1);
    assert!(
        refused.stderr.contains("not one of the paths backed up"),
        "{}",
        refused.stderr
    );
    let twice = claim_at(&orders);
    let refused = sidecar
        .run(&[
            "backup",
            text(&orders),
            "--claim",
            &twice,
            "--claim",
            &twice,
        ])
        .expect_code(1);
    assert!(refused.stderr.contains("twice"), "{}", refused.stderr);
    let refused = sidecar
        .run(&["backup", text(&orders), "--claim", "{\"name\":\"orders\"}"])
        .expect_code(1);
    assert!(
        refused.stderr.contains("not a claim record"),
        "{}",
        refused.stderr
    );
    assert!(sidecar.snapshots().is_empty());
}

/// Replaces the newest snapshot of the repository at `repo` by one with members no version knows
/// yet, at the top and inside its claim record, as a newer version would write; returns its id.
fn store_as_a_newer_version(repo_dir: &Path) -> String {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let backend: SharedBackend = Arc::new(LocalBackend::new(repo_dir));
        let repo = Repository::open(backend, PASSWORD.as_bytes())
            .await
            .unwrap();
        let (old, mut snapshot) = repo.snapshots().await.unwrap().pop().unwrap();
        std::fs::remove_file(repo_dir.join("snapshots").join(old.to_hex())).unwrap();
        snapshot.program_version = "neverwiped 9.0.0".into();
        snapshot.unknown.insert(
            "applications".into(),
            json!([{ "kind": "Helm", "name": "shop" }]),
        );
        snapshot.sources.claims[0]
            .unknown
            .insert("volumeAttributesClassName".into(), json!("gold"));
        repo.write_snapshot(&snapshot).await.unwrap().to_hex()
    })
}

#[test]
fn members_of_a_newer_version_are_kept_and_named_when_restoring() {
    let (work, repo, sidecar) = initialised();
    let orders = small_tree(work.path(), "orders");
    sidecar
        .run(&["backup", text(&orders), "--claim", &claim_at(&orders)])
        .expect_ok();
    let newer = store_as_a_newer_version(&repo);
    let shown = newest(&sidecar);
    assert_eq!(shown["id"], newer.as_str());
    assert_eq!(shown["unknownMembers"], json!(["applications"]));
    assert_eq!(
        shown["sources"]["claims"][0]["volumeAttributesClassName"],
        "gold"
    );

    let target = work.path().join("target");
    let restore = sidecar
        .run(&["restore", &newer, "--target", text(&target)])
        .expect_ok();
    assert!(
        restore.stderr.contains("written by neverwiped 9.0.0")
            && restore.stderr.contains("does not know (applications)"),
        "{}",
        restore.stderr
    );
    assert_same_tree(&orders, &restored(&target, &orders), true);

    // A rewrite keeps what it does not know, at the top and inside the record.
    sidecar
        .run(&["tag", "--add", "kept", &newer[..8]])
        .expect_ok();
    let tagged = newest(&sidecar);
    assert_eq!(tagged["tags"], json!(["kept"]));
    assert_eq!(tagged["unknownMembers"], json!(["applications"]));
    assert_eq!(
        tagged["sources"]["claims"][0]["volumeAttributesClassName"],
        "gold"
    );
    let applications = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let backend: SharedBackend = Arc::new(LocalBackend::new(&repo));
        let repo = Repository::open(backend, PASSWORD.as_bytes())
            .await
            .unwrap();
        let (_, snapshot) = repo.snapshots().await.unwrap().pop().unwrap();
        snapshot.unknown["applications"].clone()
    });
    assert_eq!(applications, json!([{ "kind": "Helm", "name": "shop" }]));
}
