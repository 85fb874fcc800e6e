//! The parts of the CSI snapshot API (`snapshot.storage.k8s.io/v1`, served by the CRDs of the
//! Kubernetes CSI external-snapshotter) that the operator uses: `VolumeSnapshot` and
//! `VolumeSnapshotClass`. Fields the operator does not read are not declared; they are kept by
//! the API server, never written back (the operator only creates and deletes these objects).

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::{CustomResource, Resource};
use serde::{Deserialize, Serialize};

/// The API group of CSI snapshots.
pub const SNAPSHOT_GROUP: &str = "snapshot.storage.k8s.io";

/// A VolumeSnapshotClass annotated with this (`"true"`) is its driver's default.
pub const DEFAULT_SNAPSHOT_CLASS_ANNOTATION: &str =
    "snapshot.storage.kubernetes.io/is-default-class";

/// A StorageClass annotated with this (`"true"`) is the cluster's default.
pub const DEFAULT_STORAGE_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

/// A point-in-time copy of a PersistentVolumeClaim's volume, taken by its CSI driver.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "snapshot.storage.k8s.io",
    version = "v1",
    kind = "VolumeSnapshot",
    namespaced,
    status = "VolumeSnapshotStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotSpec {
    pub source: VolumeSnapshotSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_snapshot_class_name: Option<String>,
}

/// What a VolumeSnapshot copies.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_snapshot_content_name: Option<String>,
}

/// What the snapshot controller reports about a VolumeSnapshot.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_volume_snapshot_content_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<Time>,
    /// The snapshot can be used to provision a volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_to_use: Option<bool>,
    /// The smallest size of a volume provisioned from the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_size: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<VolumeSnapshotError>,
}

/// The last error taking a snapshot.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotError {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
}

/// How a CSI driver takes snapshots (cluster-scoped; its fields are at the top level).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotClass {
    pub metadata: ObjectMeta,
    /// The CSI driver, the same name as the StorageClasses' `provisioner`.
    pub driver: String,
    #[serde(default)]
    pub deletion_policy: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<BTreeMap<String, String>>,
}

impl VolumeSnapshotClass {
    /// Whether the class is marked its driver's default.
    pub fn is_default(&self) -> bool {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DEFAULT_SNAPSHOT_CLASS_ANNOTATION))
            .is_some_and(|v| v == "true")
    }
}

impl Resource for VolumeSnapshotClass {
    type DynamicType = ();
    type Scope = k8s_openapi::ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "VolumeSnapshotClass".into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        SNAPSHOT_GROUP.into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        "volumesnapshotclasses".into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl VolumeSnapshot {
    /// Whether the snapshot can be cloned.
    pub fn is_ready(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.ready_to_use)
            .unwrap_or(false)
    }

    /// The snapshot controller's error, when it reports one.
    pub fn error_message(&self) -> Option<String> {
        let error = self.status.as_ref()?.error.as_ref()?;
        Some(
            error
                .message
                .clone()
                .unwrap_or_else(|| "the snapshot failed without a message".into()),
        )
    }
}
