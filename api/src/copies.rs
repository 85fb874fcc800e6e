//! `spec.copies`: other repositories that hold a copy of each of the plan's snapshots (the "2"
//! and the "1 off-site" of 3-2-1), and `status.copies`: how far each is behind.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::backup_plan::{MaintenanceStatus, Repository, Retention, RunOutcome, SCHEDULE_PATTERN};
use super::names::DNS_LABEL_PATTERN;

/// The most destinations a plan copies to.
pub const MAX_COPIES: usize = 8;

/// A repository the plan's snapshots are copied to, with its own password and login. Its
/// snapshots keep the plan's host (`NAMESPACE/PLAN`), times and ids (as `original`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CopyDestination {
    /// Names the copy in status, Jobs and metrics: a DNS label, unique in the plan.
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub name: String,
    /// The destination repository, as `spec.repository` (the same rules and tenant policy); its
    /// password may differ from the plan's. It must not be the plan's own repository.
    pub repository: Repository,
    /// When to copy, as `spec.schedule` (in `spec.timeZone`). Without it, a copy runs after each
    /// successful backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128), regex(pattern = SCHEDULE_PATTERN))]
    pub schedule: Option<String>,
    /// Which of the plan's snapshots the destination keeps, as `spec.retention`: applied by a
    /// prune Job of the destination on the plan's prune schedule (`spec.maintenance.prune`),
    /// under the same protection as the plan's repository. Without it, the destination keeps
    /// every snapshot copied to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
}

/// How far one destination is behind the plan's repository.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CopyStatus {
    /// The destination's `name` in `spec.copies`.
    pub name: String,
    /// The newest of the plan's snapshots the destination is known to hold, by its id in the
    /// plan's repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_copied_snapshot: Option<CopiedSnapshot>,
    /// The plan's snapshots (of the newest the status lists) taken after `lastCopiedSnapshot`:
    /// not yet in the destination. 0 when it is caught up.
    #[serde(default)]
    pub behind_snapshots: i64,
    /// When the oldest of those was taken; absent when caught up. The lag is now minus this
    /// (`neverwiped_copy_lag_seconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behind_since: Option<Time>,
    /// The error of the last copy, when it failed; cleared by a copy that succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The last finished copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<CopyRun>,
    /// The copy Job running now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_job: Option<String>,
    /// The latest scheduled time acted on (a destination with `schedule`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// The destination's prunes (a destination with `retention`): the last one, with its error,
    /// and when the next is due.
    #[serde(default, skip_serializing_if = "MaintenanceStatus::is_empty")]
    pub prune: MaintenanceStatus,
    /// The destination's prune Job running now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_prune_job: Option<String>,
}

/// A snapshot of the plan, as a destination holds it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CopiedSnapshot {
    /// The first 8 hex digits of its id in the plan's repository (what `status.snapshots` lists).
    pub id: String,
    /// When it was taken.
    pub time: Time,
}

/// One finished copy Job.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CopyRun {
    /// The Job that ran it.
    pub job_name: String,
    /// `Succeeded` or `Failed`.
    pub result: RunOutcome,
    /// Why it ended so, as a backup run's `reason` (e.g. `Succeeded`, `WrongPassword`,
    /// `RepositoryUnreachable`, `DeadlineExceeded`).
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Snapshots the run stored in the destination (the others it chose were there already).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshots_copied: Option<i64>,
    /// Bytes it sent to the destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_sent: Option<i64>,
}
