//! `copyMethod: Snapshot` and `Auto` with the operator binary against real Kubernetes API
//! machinery: the CSI snapshot CRDs (`snapshot.storage.k8s.io/v1`, `tests/fixtures/`) are applied
//! by the test, which plays the CSI snapshot controller (it sets a VolumeSnapshot's
//! `status.readyToUse`, or its `status.error`), the Job controller and the kubelet.

mod support;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use neverwiped_contract::{ExitStatus, Operation};
use neverwiped_operator::csi::VolumeSnapshot;
use serde_json::{json, Value};
use support::csi::{apply_snapshot_crds, create_claim, plan, snapshotter_makes_ready, Driver};
use support::*;

fn condition(namespace: &str, plan: &str, type_: &str) -> Value {
    let status = kubectl_json(&["get", "backupplan", plan, "-n", namespace])["status"].clone();
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_).cloned())
        .unwrap_or(Value::Null)
}

async fn snapshot_taken(client: &Client, namespace: &str, name: &str) -> VolumeSnapshot {
    let api: Api<VolumeSnapshot> = Api::namespaced(client.clone(), namespace);
    eventually(&format!("VolumeSnapshot {name}"), ACT_TIMEOUT, || {
        let api = api.clone();
        async move { api.get_opt(name).await.ok().flatten() }
    })
    .await
}

async fn gone<K>(client: &Client, namespace: &str, name: &str)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    eventually(
        &format!("{} {name} to be deleted", K::kind(&())),
        ACT_TIMEOUT,
        || {
            let api = api.clone();
            async move { matches!(api.get_opt(name).await, Ok(None)).then_some(()) }
        },
    )
    .await;
}

/// [`test_world`] with the CSI snapshot CRDs and the repository's Secret.
async fn setup(prefix: &str) -> Option<TestWorld> {
    let world = test_world(prefix).await?;
    apply_snapshot_crds();
    create_secret(&world.namespace.name, "repository", &[("password", "pw")]);
    Some(world)
}

#[tokio::test]
async fn auto_snapshots_a_volume_whose_driver_has_a_class_clones_it_for_the_job_and_cleans_up() {
    let Some(TestWorld { namespace, client }) = setup("snap").await else {
        return;
    };
    let ns = namespace.name.as_str();
    let driver = Driver::install(ns);
    create_claim(ns, "uploads", Some(&driver.storage_class));
    // No StorageClass: no snapshot; in use by an application on node-b.
    create_claim(ns, "scratch", None);
    let app: Pod = serde_json::from_value(json!({
        "metadata": {"name": "app-0"},
        "spec": {
            "nodeName": "node-b",
            "containers": [{"name": "app", "image": "app:1"}],
            "volumes": [{"name": "scratch", "persistentVolumeClaim": {"claimName": "scratch"}}],
        }
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &app)
        .await
        .unwrap();
    let _operator = Operator::start(ns);
    kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&plan(ns, "nightly", "Auto", &["uploads", "scratch"]).to_string()),
    );

    // The run starts with a VolumeSnapshot of the claim whose driver has a class.
    let snapshot = snapshot_taken(&client, ns, "nightly-manual-1-0").await;
    assert_eq!(
        snapshot.spec.source.persistent_volume_claim_name.as_deref(),
        Some("uploads")
    );
    assert_eq!(
        snapshot.spec.volume_snapshot_class_name.as_deref(),
        Some(driver.snapshot_class.as_str())
    );
    let owner = &snapshot.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("BackupPlan", "nightly")
    );
    let running = eventually("PreparingSnapshots", ACT_TIMEOUT, || async {
        let running = condition(ns, "nightly", "Running");
        (running["reason"] == "PreparingSnapshots").then_some(running)
    })
    .await;
    assert_eq!(running["status"], "True");
    assert!(job_names(&client, ns, "neverwiped.io/plan=nightly")
        .await
        .is_empty());
    let rows = table(&kubectl(&["get", "volumesnapshots", "-n", ns]));
    assert_eq!(rows[0]["SOURCEPVC"], "uploads");

    // The snapshotter is done: a claim is cloned from the snapshot, and the Job mounts it.
    snapshotter_makes_ready(&client, ns, "nightly-manual-1-0", "2Gi").await;
    let job = job_created(&client, ns, "nightly-manual-1").await;
    let clone = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .get("nightly-manual-1-0")
        .await
        .expect("the clone");
    let clone_spec = clone.spec.as_ref().unwrap();
    let source = clone_spec.data_source.as_ref().unwrap();
    assert_eq!(
        (
            source.api_group.as_deref(),
            source.kind.as_str(),
            source.name.as_str()
        ),
        (
            Some("snapshot.storage.k8s.io"),
            "VolumeSnapshot",
            "nightly-manual-1-0"
        )
    );
    assert_eq!(
        clone_spec.storage_class_name.as_deref(),
        Some(driver.storage_class.as_str())
    );
    assert_eq!(
        clone_spec
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["storage"]
            .0,
        "2Gi"
    );
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let mounted: BTreeMap<String, (String, bool)> = pod.containers[0]
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .filter_map(|mount| {
            let volume = pod
                .volumes
                .as_ref()?
                .iter()
                .find(|v| v.name == mount.name)?;
            let claim = volume.persistent_volume_claim.as_ref()?;
            Some((
                mount.mount_path.clone(),
                (claim.claim_name.clone(), claim.read_only == Some(true)),
            ))
        })
        .collect();
    assert_eq!(
        mounted,
        BTreeMap::from([
            ("/data/scratch".to_string(), ("scratch".to_string(), true)),
            (
                "/data/uploads".to_string(),
                ("nightly-manual-1-0".to_string(), true)
            ),
        ])
    );
    // Placed where the directly read volume is in use.
    let affinity = serde_json::to_value(pod.affinity.as_ref().unwrap()).unwrap();
    assert_eq!(
        affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchFields"][0]["values"],
        json!(["node-b"])
    );
    assert_eq!(
        condition(ns, "nightly", "Running")["reason"],
        "BackupRunning"
    );

    // The run ends: its snapshot and clone go.
    finish_job(
        &client,
        ns,
        "nightly-manual-1",
        Ending::Result {
            exit_code: 0,
            result: Box::new(run_result(Operation::Backup, ExitStatus::Success)),
        },
    )
    .await;
    gone::<PersistentVolumeClaim>(&client, ns, "nightly-manual-1-0").await;
    gone::<VolumeSnapshot>(&client, ns, "nightly-manual-1-0").await;
    let status = kubectl_json(&["get", "backupplan", "nightly", "-n", ns])["status"].clone();
    assert_eq!(status["lastRun"]["result"], "Succeeded");
    // The claims the plan names are untouched.
    let claims = kubectl(&["get", "pvc", "-n", ns, "-o", "name"]);
    assert_eq!(
        claims.lines().collect::<Vec<_>>(),
        [
            "persistentvolumeclaim/scratch",
            "persistentvolumeclaim/uploads"
        ]
    );
}

#[tokio::test]
async fn a_snapshot_that_fails_fails_the_run_with_the_drivers_error() {
    let Some(TestWorld { namespace, client }) = setup("snapfail").await else {
        return;
    };
    let ns = namespace.name.as_str();
    let driver = Driver::install(ns);
    create_claim(ns, "uploads", Some(&driver.storage_class));
    let _operator = Operator::start(ns);
    kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&plan(ns, "nightly", "Snapshot", &["uploads"]).to_string()),
    );
    snapshot_taken(&client, ns, "nightly-manual-1-0").await;
    let api: Api<VolumeSnapshot> = Api::namespaced(client.clone(), ns);
    let status = json!({"status": {"readyToUse": false, "error": {
        "message": "Failed to create snapshot: rpc error: code = ResourceExhausted desc = snapshot quota exceeded",
        "time": jiff::Timestamp::now().to_string(),
    }}});
    api.patch_status(
        "nightly-manual-1-0",
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .unwrap();
    let status = eventually("the failed run", ACT_TIMEOUT, || async {
        let status = kubectl_json(&["get", "backupplan", "nightly", "-n", ns])["status"].clone();
        (status["lastRun"]["jobName"] == "nightly-manual-1").then_some(status)
    })
    .await;
    assert_eq!(status["lastRun"]["result"], "Failed");
    assert_eq!(status["lastRun"]["reason"], "SnapshotFailed");
    assert!(status["lastRun"]["message"]
        .as_str()
        .unwrap()
        .contains("snapshot quota exceeded"));
    let events = table(&kubectl(&["get", "events", "-n", ns]));
    assert!(events
        .iter()
        .any(|e| e["REASON"] == "BackupFailed" && e["MESSAGE"].contains("SnapshotFailed")));
    gone::<VolumeSnapshot>(&client, ns, "nightly-manual-1-0").await;
    assert!(job_names(&client, ns, "neverwiped.io/plan=nightly")
        .await
        .is_empty());
}

#[tokio::test]
async fn snapshot_settings_the_cluster_cannot_honour_set_ready_false() {
    let Some(TestWorld { namespace, .. }) = setup("snapclass").await else {
        return;
    };
    let ns = namespace.name.as_str();
    let driver = Driver::install(ns);
    create_claim(ns, "uploads", Some(&driver.storage_class));
    create_claim(ns, "plain", None);
    let _operator = Operator::start(ns);

    let mut named = plan(ns, "named", "Snapshot", &["uploads"]);
    named["spec"]["volumeSnapshotClassName"] = json!("no-such-class");
    kubectl_stdin(&["apply", "-f", "-"], Some(&named.to_string()));
    let ready = eventually("VolumeSnapshotClassNotFound", ACT_TIMEOUT, || async {
        let ready = condition(ns, "named", "Ready");
        (ready["status"] == "False").then_some(ready)
    })
    .await;
    assert_eq!(ready["reason"], "VolumeSnapshotClassNotFound");

    // Snapshot asked of a volume without a StorageClass (so without a CSI driver).
    kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&plan(ns, "classless", "Snapshot", &["plain"]).to_string()),
    );
    let ready = eventually("NoVolumeSnapshotClass", ACT_TIMEOUT, || async {
        let ready = condition(ns, "classless", "Ready");
        (ready["status"] == "False").then_some(ready)
    })
    .await;
    assert_eq!(ready["reason"], "NoVolumeSnapshotClass");
    assert!(ready["message"].as_str().unwrap().contains("\"plain\""));
}

#[tokio::test]
async fn deleting_a_plan_while_its_snapshots_get_ready_deletes_them() {
    let Some(TestWorld { namespace, client }) = setup("snapdel").await else {
        return;
    };
    let ns = namespace.name.as_str();
    let driver = Driver::install(ns);
    create_claim(ns, "uploads", Some(&driver.storage_class));
    let _operator = Operator::start(ns);
    kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&plan(ns, "nightly", "Snapshot", &["uploads"]).to_string()),
    );
    snapshot_taken(&client, ns, "nightly-manual-1-0").await;
    kubectl(&["delete", "backupplan", "nightly", "-n", ns, "--timeout=30s"]);
    gone::<VolumeSnapshot>(&client, ns, "nightly-manual-1-0").await;
    assert!(kubectl(&["get", "volumesnapshots", "-n", ns]).is_empty());
}
