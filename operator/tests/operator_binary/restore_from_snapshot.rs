//! A Restore that reads its snapshot's record: a describe Job first, then the claims the record
//! has (created as recorded, classes mapped, never smaller), then the restore Job pinned to the
//! described snapshot's id, mounting them. The test plays the Job controller: the describe Job
//! ends with the result the real sidecar writes (`sidecar/tests/cli/describe.rs` shows it).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::{Api, ResourceExt};
use neverwiped_contract::record::{RecordedClaim, RecordedDatabase, RecordedSources};
use neverwiped_contract::{ExitStatus, Operation, RunResult};
use serde_json::{json, Value};

use super::{apply, condition, create_example_world, event_seen, example_plan, secret_names};
use crate::support::*;

const SNAPSHOT_ID: &str = "0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5061728394a5b6c7d8e9f";

/// The record a snapshot of the example plan holds: `orders` (gone with the old cluster),
/// `uploads` (which exists here) and `reports` (no class, a small size).
fn record() -> RecordedSources {
    let claim = |name: &str, size: &str, class: Option<&str>| RecordedClaim {
        path: format!("/data/{name}"),
        name: name.into(),
        requested_size: Some(size.into()),
        storage_class_name: class.map(str::to_owned),
        access_modes: vec!["ReadWriteOncePod".into()],
        volume_mode: Some("Filesystem".into()),
        labels: [("app".to_owned(), "shop".to_owned())].into(),
        annotations: [("example.com/team".to_owned(), "payments".to_owned())].into(),
        ..RecordedClaim::default()
    };
    RecordedSources {
        claims: vec![
            claim("orders", "10Gi", Some("fast-ssd")),
            claim("uploads", "5Gi", Some("fast-ssd")),
            claim("reports", "1Gi", None),
        ],
        databases: vec![
            RecordedDatabase {
                name: "orders".into(),
                engine: "postgresql".into(),
                server_version: Some("16.4".into()),
                databases: vec!["shop".into()],
                ..RecordedDatabase::default()
            },
            RecordedDatabase {
                name: "legacy".into(),
                engine: "mariadb".into(),
                ..RecordedDatabase::default()
            },
        ],
        ..RecordedSources::default()
    }
}

fn described() -> RunResult {
    let mut result = run_result(Operation::Describe, ExitStatus::Success);
    result.snapshot_id = Some(SNAPSHOT_ID.into());
    result.snapshot_time = Some("2026-11-28T01:00:00Z".into());
    result.files = 0;
    result.bytes_read = 0;
    result.sources = Some(record());
    result
}

/// A Restore of the example plan's snapshots by the admin (the chart's admission policy has
/// the admin write the annotations), with `spec` merged in.
fn restore(namespace: &str, name: &str, spec: Value) -> Value {
    let mut restore = json!({
        "apiVersion": "neverwiped.io/v1alpha1", "kind": "Restore",
        "metadata": {"name": name, "namespace": namespace, "annotations": {
            "neverwiped.io/requested-by": "admin",
            "neverwiped.io/requested-by-groups": "system:masters",
        }},
        "spec": {"backupPlanName": "nightly", "snapshot": "latest", "takenBefore": "2026-11-29T00:00:00Z"},
    });
    for (key, value) in spec.as_object().unwrap() {
        restore["spec"][key] = value.clone();
    }
    restore
}

fn restore_status(namespace: &str, name: &str) -> Value {
    kubectl_json(&["get", "restores.neverwiped.io", name, "-n", namespace])["status"].clone()
}

async fn status_when(namespace: &str, name: &str, phase: &str) -> Value {
    eventually(&format!("Restore {name} {phase}"), ACT_TIMEOUT, || async {
        let status = restore_status(namespace, name);
        (status["phase"] == phase).then_some(status)
    })
    .await
}

/// A StorageClass of this test alone (they are cluster-wide), deleted when dropped.
struct TestStorageClass(String);

impl TestStorageClass {
    fn create(name: String) -> TestStorageClass {
        let class = json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name}, "provisioner": "csi.example.com",
        });
        apply(&class);
        TestStorageClass(name)
    }
}

impl Drop for TestStorageClass {
    fn drop(&mut self) {
        let _ = kubectl_output(
            &["delete", "storageclass", &self.0, "--ignore-not-found"],
            None,
        );
    }
}

fn claim_names(job: &Job) -> Vec<String> {
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let volumes = pod.volumes.as_deref().unwrap_or_default();
    let mut names: Vec<String> = volumes
        .iter()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_restore_from_the_snapshot_creates_the_recorded_claims_and_restores_that_snapshot() {
    let Some(TestWorld { namespace, client }) = test_world("fromsnap").await else {
        return;
    };
    let ns = namespace.name.as_str();
    create_example_world(&client, ns).await;
    let class = TestStorageClass::create(format!("{ns}-standard"));
    let _operator = Operator::start(ns);
    let mut plan = example_plan(ns);
    plan["spec"]
        .as_object_mut()
        .unwrap()
        .remove("manualTrigger");
    apply(&plan);
    let spec = json!({
        "allVolumes": true,
        "createClaims": "FromSnapshot",
        "storageClassMapping": [{"from": "fast-ssd", "to": class.0}],
        "minimumClaimSize": "2Gi",
        "allDatabases": {"host": "db-new.shop.svc", "credentialsSecretRef": {"name": "pg-backup"}},
    });
    apply(&restore(ns, "whole-plan", spec));

    // The describe Job: the restore's selection and repository, no volume, unprivileged.
    let describe = job_created(&client, ns, "whole-plan-describe").await;
    let args = args_of(&describe);
    assert_eq!(
        args[..8],
        [
            "describe",
            "latest",
            "--repo",
            "rest:http://gate.example.test:8000/shop",
            "--result-file",
            "/dev/termination-log",
            "--host",
            &format!("{ns}/nightly"),
        ]
    );
    assert_eq!(args[8..10], ["--before", "2026-11-29T00:00:00Z"]);
    assert!(claim_names(&describe).is_empty());
    assert_eq!(secret_names(&describe), ["gate-login", "shop-repository"]);
    let pod = describe
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let security = pod.containers[0].security_context.as_ref().unwrap();
    assert_eq!(
        security.run_as_non_root,
        Some(true),
        "the describe Job runs unprivileged"
    );
    assert_eq!(security.capabilities.as_ref().unwrap().add, None);
    assert_eq!(
        status_when(ns, "whole-plan", "Describing").await["describeJobName"],
        "whole-plan-describe"
    );
    event_seen(ns, "DescribeStarted", "whole-plan-describe").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    assert!(
        claims.get_opt("orders").await.unwrap().is_none(),
        "no claim before the record"
    );

    let result = Box::new(described());
    let ending = Ending::Result {
        exit_code: 0,
        result,
    };
    finish_job(&client, ns, "whole-plan-describe", ending).await;

    // The restore Job: pinned to the described id, every recorded volume mounted.
    let job = job_created(&client, ns, "whole-plan-restore").await;
    let args = args_of(&job);
    assert_eq!(args[..2], ["restore", SNAPSHOT_ID]);
    assert!(!args.iter().any(|a| a == "--before"), "{args:?}");
    for path in ["/data/orders", "/data/uploads", "/data/reports"] {
        assert!(
            args.windows(2).any(|w| w == ["--include", path]),
            "{path} in {args:?}"
        );
    }
    assert_eq!(claim_names(&job), ["orders", "reports", "uploads"]);
    // Every recorded database into the one server named, each by its recorded engine.
    let databases: Vec<&str> = (args.windows(2))
        .filter(|w| w[0] == "--database")
        .map(|w| w[1].as_str())
        .collect();
    assert_eq!(
        databases,
        [
            "orders=postgresql://$(NEVERWIPED_DB_USERNAME_ORDERS)@db-new.shop.svc:5432",
            "legacy=mariadb://$(NEVERWIPED_DB_USERNAME_LEGACY)@db-new.shop.svc:3306",
        ]
    );
    // The repository's Secrets as the describe Job had them, and the databases' login.
    assert_eq!(
        secret_names(&job),
        ["gate-login", "pg-backup", "pg-backup", "shop-repository"]
    );

    // Created as recorded: the class mapped, the size at least the minimum, nothing owns them.
    let orders = claims.get("orders").await.expect("orders was created");
    assert_eq!(orders.metadata.owner_references, None);
    assert_eq!(orders.labels()["app"], "shop");
    assert_eq!(orders.labels()["neverwiped.io/restore"], "whole-plan");
    assert_eq!(orders.annotations()["example.com/team"], "payments");
    let spec = orders.spec.unwrap();
    assert_eq!(spec.storage_class_name.as_deref(), Some(class.0.as_str()));
    assert_eq!(spec.access_modes.unwrap(), ["ReadWriteOncePod"]);
    assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
    assert_eq!(
        spec.resources.unwrap().requests.unwrap()["storage"].0,
        "10Gi"
    );
    let reports = claims
        .get("reports")
        .await
        .expect("reports was created")
        .spec
        .unwrap();
    assert_eq!(
        reports.storage_class_name, None,
        "the cluster's default class"
    );
    assert_eq!(
        reports.resources.unwrap().requests.unwrap()["storage"].0,
        "2Gi"
    );
    // The claim that existed is restored into, not made again.
    let uploads = claims.get("uploads").await.unwrap();
    assert!(!uploads.labels().contains_key("neverwiped.io/restore"));
    let spec = uploads.spec.unwrap();
    assert_eq!(
        spec.resources.unwrap().requests.unwrap()["storage"].0,
        "1Gi"
    );

    let running = status_when(ns, "whole-plan", "Running").await;
    assert_eq!(running["snapshotId"], SNAPSHOT_ID);
    assert_eq!(running["snapshotTime"], "2026-11-28T01:00:00Z");
    assert_eq!(running["createdClaims"], json!(["orders", "reports"]));
    assert_eq!(running["existingClaims"], json!(["uploads"]));
    event_seen(ns, "SnapshotDescribed", SNAPSHOT_ID).await;
    event_seen(ns, "ClaimCreated", "orders").await;

    let mut restored = run_result(Operation::Restore, ExitStatus::Success);
    restored.snapshot_id = Some(SNAPSHOT_ID.into());
    let ending = Ending::Result {
        exit_code: 0,
        result: Box::new(restored),
    };
    finish_job(&client, ns, "whole-plan-restore", ending).await;
    let done = status_when(ns, "whole-plan", "Succeeded").await;
    assert_eq!(done["snapshotId"], SNAPSHOT_ID);
    assert_eq!(done["createdClaims"], json!(["orders", "reports"]));
    assert_eq!(condition(&done, "Complete")["status"], "True");
}

#[tokio::test]
async fn a_recorded_class_the_cluster_lacks_fails_the_restore_and_says_how_to_map_it() {
    let Some(TestWorld { namespace, client }) = test_world("noclass").await else {
        return;
    };
    let ns = namespace.name.as_str();
    create_example_world(&client, ns).await;
    let _operator = Operator::start(ns);
    let mut plan = example_plan(ns);
    plan["spec"]
        .as_object_mut()
        .unwrap()
        .remove("manualTrigger");
    apply(&plan);
    let spec = json!({
        "createClaims": "FromSnapshot",
        "volumes": [{"sourceClaimName": "orders", "targetClaimName": "orders-back"}],
    });
    apply(&restore(ns, "orders-back", spec));
    job_created(&client, ns, "orders-back-describe").await;
    let ending = Ending::Result {
        exit_code: 0,
        result: Box::new(described()),
    };
    finish_job(&client, ns, "orders-back-describe", ending).await;

    let failed = status_when(ns, "orders-back", "Failed").await;
    let complete = condition(&failed, "Complete");
    assert_eq!(complete["status"], "False");
    assert_eq!(complete["reason"], "StorageClassNotFound");
    let message = complete["message"].as_str().unwrap();
    assert!(message.contains("\"fast-ssd\""), "{message}");
    assert!(
        message.contains("storageClassMapping") && message.contains("{from: fast-ssd, to: CLASS}"),
        "{message}"
    );
    assert_eq!(failed["message"], complete["message"]);
    event_seen(ns, "StorageClassNotFound", "fast-ssd").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    assert!(claims.get_opt("orders-back").await.unwrap().is_none());
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    assert!(jobs.get_opt("orders-back-restore").await.unwrap().is_none());
}
