//! What a plan's backups usually change, and the night that was far outside it: the status the
//! operator's suspicion check (`operator/src/suspicion.rs`) reads and writes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The annotation on a BackupPlan with which an admin acknowledges a suspicious night: its value
/// is the flagged snapshot's id (`status.suspiciousChange.snapshotId`). Only the admin groups
/// the chart names may set or change it (its ValidatingAdmissionPolicy).
pub const ANNOTATION_ACKNOWLEDGE_SUSPICIOUS_CHANGE: &str =
    "neverwiped.io/acknowledge-suspicious-change";

/// The annotation on a BackupPlan that marks a manual run as an expected large change: its value
/// is the `spec.manualTrigger` value of that run, which is then neither flagged nor counted in
/// the plan's usual changes. Guarded like the acknowledgement: a tenant who could set it could
/// hide an attack behind it.
pub const ANNOTATION_EXPECTED_CHANGE: &str = "neverwiped.io/expected-change";

/// One successful backup's changes against its parent, as shares: what a night of this plan
/// usually looks like.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangeRatios {
    /// The snapshot the backup wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
    /// Files the parent snapshot held.
    pub parent_files: i64,
    /// Files changed or removed, per file of the parent (0 to 1).
    pub rewritten_share: f64,
    /// Files removed, per file of the parent (0 to 1).
    pub removed_share: f64,
    /// Bytes of new file content the backup stored, before compression.
    pub new_bytes: i64,
    /// The new content's size after compression per byte before (near 1: it did not compress);
    /// absent when there was no new content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compressed_share: Option<f64>,
    /// Bytes added to the repository per byte read; absent when nothing was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_per_read: Option<f64>,
}

/// A backup far outside the plan's usual changes, until an admin acknowledges it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuspiciousChange {
    /// The snapshot of that backup: the value the acknowledgement annotation must carry.
    pub snapshot_id: String,
    /// Which signal: `MassRewrite`, `MassDelete` or `IncompressibleData`.
    pub reason: String,
    /// What was seen, with its figures and the plan's usual ones.
    pub message: String,
    /// When the backup finished.
    pub time: Time,
}
