//! How the pod of a Job that reads or writes volumes runs (`spec.mover` of a BackupPlan or a
//! Restore), and which way the operator chose (`status.mover`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Whether the pod that reads (or writes back) volumes runs as root.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum MoverMode {
    /// A non-root user without capabilities (Pod Security Standard `restricted`): it reads the
    /// files that user may read; the others are warnings of the run.
    #[default]
    Unprivileged,
    /// Root with `DAC_READ_SEARCH` for backups (every file, whoever owns it) and with the
    /// capabilities that set owners and modes for restores. Only in namespaces the cluster admin
    /// allows (the chart's `policy.privilegedMoverNamespaces`); meets no Pod Security Standard but
    /// `privileged`.
    Privileged,
}

/// How the pods that read or write volumes run. The user and groups of an unprivileged pod are
/// these when set; otherwise, for a backup, those of the application pod that mounts the plan's
/// first claim (its container's or pod's `runAsUser`, `runAsGroup`, `fsGroup`,
/// `supplementalGroups`); otherwise 65532.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MoverSettings {
    /// `Unprivileged` (the default) or `Privileged`.
    #[serde(default)]
    pub mode: MoverMode,
    /// The user an unprivileged pod runs as (never 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 2147483647))]
    pub run_as_user: Option<i64>,
    /// The primary group of an unprivileged pod; by default the same number as the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub run_as_group: Option<i64>,
    /// The group that owns the application's files (as the application pod's `fsGroup`). A backup
    /// adds it to the pod's supplemental groups and never sets the pod's `fsGroup`, which would
    /// make the kubelet change the group and mode of every file on the volume; a restore sets it
    /// as the pod's `fsGroup` with `fsGroupChangePolicy: OnRootMismatch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub fs_group: Option<i64>,
    /// More groups of an unprivileged pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub supplemental_groups: Vec<i64>,
}

/// How the pods that read or write volumes run, and why.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MoverStatus {
    pub mode: MoverMode,
    /// The user of an unprivileged pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<i64>,
    /// The primary group of an unprivileged pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<i64>,
    /// The supplemental groups of an unprivileged pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supplemental_groups: Vec<i64>,
    /// The group of the application's files: a supplemental group of backup pods, the `fsGroup`
    /// of restore pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_group: Option<i64>,
    /// Where the mode and the user come from, for a person.
    pub message: String,
}
