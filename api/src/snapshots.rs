//! The plan's own snapshots in its repository, as its last backup or prune listed them: what
//! `kubectl get backupplan -o yaml` shows can be restored.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The snapshots of the plan's host (`NAMESPACE/PLAN`) in the repository.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanSnapshots {
    /// How many snapshots of the plan the repository holds.
    pub total: i64,
    /// The newest of them, newest first (at most 15).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub newest: Vec<SnapshotRecord>,
    /// When they were listed (the end of the run that listed them).
    pub listed_time: Time,
}

/// One snapshot of the plan.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotRecord {
    /// The first 8 hex digits of its id: what a Restore's `snapshot` accepts.
    pub id: String,
    /// When it was taken.
    pub time: Time,
    /// Files in it.
    pub files: i64,
    /// Bytes of file content in it.
    pub size_bytes: i64,
    /// The same, as a Kubernetes quantity (e.g. `553Mi`), for reading.
    pub size: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}
