//! Playing the CSI snapshot machinery for `copyMethod: Snapshot`: the snapshot CRDs
//! (`snapshot.storage.k8s.io/v1`, `tests/fixtures/`), a CSI driver of the test's own with its
//! classes, claims of it, a plan that copies them, and the snapshot controller's readiness.

use std::sync::Once;

use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use neverwiped_operator::csi::VolumeSnapshot;
use serde_json::{json, Value};

use super::{kubectl, kubectl_output, kubectl_stdin, repo_root};

pub fn apply_snapshot_crds() {
    static APPLIED: Once = Once::new();
    APPLIED.call_once(|| {
        let fixtures = repo_root().join("operator/tests/fixtures");
        kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=neverwiped-test",
            "-f",
            fixtures.to_str().expect("a UTF-8 path"),
        ]);
        kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=30s",
            "crd/volumesnapshots.snapshot.storage.k8s.io",
            "crd/volumesnapshotclasses.snapshot.storage.k8s.io",
        ]);
    });
}

/// A CSI driver of the test's own: a StorageClass and a VolumeSnapshotClass (cluster-scoped,
/// deleted when dropped).
pub struct Driver {
    pub driver: String,
    pub storage_class: String,
    pub snapshot_class: String,
}

impl Driver {
    pub fn install(namespace: &str) -> Driver {
        let driver = Driver {
            driver: format!("{namespace}.csi.neverwiped.test"),
            storage_class: format!("{namespace}-fast"),
            snapshot_class: format!("{namespace}-snap"),
        };
        let storage_class = json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": driver.storage_class},
            "provisioner": driver.driver,
            "volumeBindingMode": "WaitForFirstConsumer",
        });
        let snapshot_class = json!({
            "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
            "metadata": {
                "name": driver.snapshot_class,
                "annotations": {"snapshot.storage.kubernetes.io/is-default-class": "true"},
            },
            "driver": driver.driver,
            "deletionPolicy": "Delete",
        });
        for object in [storage_class, snapshot_class] {
            kubectl_stdin(&["apply", "-f", "-"], Some(&object.to_string()));
        }
        driver
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = kubectl_output(
            &[
                "delete",
                &format!("storageclass/{}", self.storage_class),
                &format!("volumesnapshotclass/{}", self.snapshot_class),
                "--ignore-not-found",
                "--wait=false",
            ],
            None,
        );
    }
}

pub fn create_claim(namespace: &str, name: &str, storage_class: Option<&str>) {
    let mut claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    });
    if let Some(class) = storage_class {
        claim["spec"]["storageClassName"] = json!(class);
    }
    kubectl_stdin(&["apply", "-f", "-"], Some(&claim.to_string()));
}

pub fn plan(namespace: &str, name: &str, copy_method: &str, volumes: &[&str]) -> Value {
    let volumes: Vec<Value> = volumes.iter().map(|v| json!({"claimName": v})).collect();
    json!({
        "apiVersion": "neverwiped.io/v1alpha1", "kind": "BackupPlan",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedule": "@daily",
            "manualTrigger": "now",
            "copyMethod": copy_method,
            "repository": {
                "url": "http://gate.example.test:8000/shop",
                "passwordSecretRef": {"name": "repository", "key": "password"},
            },
            "volumes": volumes,
        },
    })
}

/// Plays the CSI snapshot controller: the snapshot is cut and can be cloned.
pub async fn snapshotter_makes_ready(client: &Client, namespace: &str, name: &str, size: &str) {
    let api: Api<VolumeSnapshot> = Api::namespaced(client.clone(), namespace);
    let now = jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        "boundVolumeSnapshotContentName": format!("snapcontent-{name}"),
        "creationTime": now, "readyToUse": true, "restoreSize": size,
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("the snapshot's status is set");
}
