//! `spec.verify`: restore drills on a schedule, and `status.verify`: what they proved and how
//! long a recovery took.
//!
//! A drill restores one snapshot into scratch space of its own pod (never the plan's claims),
//! holds every restored file to the snapshot, loads each database dump into a throwaway server
//! and counts its tables' rows against what the backup recorded.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::backup_plan::{DURATION_PATTERN, SCHEDULE_PATTERN};
use super::names::DNS_SUBDOMAIN_PATTERN;

/// The drill schedule when `spec.verify` gives none: weekly, at a minute and hour hashed from
/// the plan's name (`H H * * H`), as every other schedule of the plan.
pub const DEFAULT_VERIFY_SCHEDULE: &str = "@weekly";

/// How many finished drills `status.verify.history` keeps.
pub const VERIFY_HISTORY_LIMIT: usize = 5;

/// Annotation on a BackupPlan: asks for one drill now (`kubectl neverwiped verify` sets it).
/// Any new value is one request, acted on once (`status.verify.lastRequest` keeps it); a plan
/// without `spec.verify` is drilled with the defaults.
pub const ANNOTATION_VERIFY_NOW: &str = "neverwiped.io/verify-now";

/// Restore drills of the plan's snapshots.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct VerifySpec {
    /// When to drill, as `spec.schedule` (in `spec.timeZone`; `@weekly` and the like are hashed
    /// from the plan's name). A drill due while a backup of the plan is due or running waits for
    /// it.
    #[serde(default = "default_verify_schedule")]
    #[schemars(length(min = 1, max = 128), regex(pattern = SCHEDULE_PATTERN))]
    pub schedule: String,
    /// Which snapshot to drill: `latest` (the newest of the plan, the default) or a snapshot id
    /// or unique prefix of one (8 to 64 hex digits).
    #[serde(default = "default_snapshot")]
    #[schemars(
        length(min = 1, max = 64),
        regex(pattern = "^(latest|[0-9a-f]{8,64})$")
    )]
    pub snapshot: String,
    /// Percent of the files each drill restores (100: all). A smaller share is chosen from the
    /// files' paths and moves on with each drill, so that successive drills cover every file
    /// within `ceil(100 / samplePercent)` drills.
    #[serde(default = "default_sample_percent")]
    #[schemars(range(min = 1, max = 100))]
    pub sample_percent: i32,
    /// Whether to load each database dump of the snapshot into a throwaway server and check its
    /// tables' rows (default true).
    #[serde(default = "default_true")]
    pub databases: bool,
    /// The longest a recovery may take (`30m`, `1h30m`): a drill that proves the data but takes
    /// longer ends `SucceededOverObjective`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 32), regex(pattern = DURATION_PATTERN))]
    pub recovery_time_objective: Option<String>,
    /// Where the drill restores to: without it an emptyDir whose size limit is the snapshot's
    /// size plus room for the databases; with it a generic ephemeral volume of that size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scratch: Option<VerifyScratch>,
    /// Stops scheduled drills (`kubectl neverwiped verify` still runs one).
    #[serde(default)]
    pub suspend: bool,
}

impl Default for VerifySpec {
    /// What `spec.verify: {}` means: weekly drills of the newest snapshot, every file and
    /// database, no objective, scratch in an emptyDir.
    fn default() -> VerifySpec {
        VerifySpec {
            schedule: default_verify_schedule(),
            snapshot: default_snapshot(),
            sample_percent: default_sample_percent(),
            databases: true,
            recovery_time_objective: None,
            scratch: None,
            suspend: false,
        }
    }
}

/// The scratch space of a drill, as a generic ephemeral volume.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct VerifyScratch {
    /// The storage class of the ephemeral volume; the cluster's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub storage_class_name: Option<String>,
}

fn default_verify_schedule() -> String {
    DEFAULT_VERIFY_SCHEDULE.into()
}

fn default_snapshot() -> String {
    "latest".into()
}

fn default_sample_percent() -> i32 {
    100
}

fn default_true() -> bool {
    true
}

/// How a drill ended.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum DrillOutcome {
    /// Every restored file matched the snapshot and every database loaded with its rows.
    Succeeded,
    /// As `Succeeded`, but the recovery took longer than `recoveryTimeObjective`.
    SucceededOverObjective,
    /// A file, a dump or the run itself failed; `reason` and `message` say which.
    Failed,
}

impl DrillOutcome {
    /// Whether the drill proved the data (within its objective or not).
    pub fn is_success(self) -> bool {
        !matches!(self, DrillOutcome::Failed)
    }
}

/// The drills of a plan.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VerifyStatus {
    /// The latest scheduled time acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// When the next scheduled drill is due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<Time>,
    /// When the last drill that proved the data ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_time: Option<Time>,
    /// The drill Job running now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_job: Option<String>,
    /// Why a due drill waits (a backup of the plan due or running, the queue's limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    /// The `kubectl neverwiped verify` request (`neverwiped.io/verify-now`'s value) acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_request: Option<String>,
    /// Drills started so far: the next drill's sample round.
    #[serde(default)]
    pub drills: i64,
    /// The last finished drill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<DrillRecord>,
    /// The last few finished drills, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<DrillRecord>,
}

/// One finished drill.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DrillRecord {
    /// The Job that ran it.
    pub job_name: String,
    pub result: DrillOutcome,
    /// A CamelCase word for why it ended so: `Succeeded`, `OverObjective`, `VerifyFailed`,
    /// `DumpDidNotLoad`, `RowsDiffer`, `DeadlineExceeded`, …
    pub reason: String,
    /// What happened, for a person: the files that differ, the server's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The snapshot drilled (8 hex digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// The recovery time: the seconds every volume and database took to come back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_seconds: Option<f64>,
    /// The objective it was held to, as written in the spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_time_objective: Option<String>,
    /// The share of files restored (100: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_percent: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<DrilledVolume>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub databases: Vec<DrilledDatabase>,
}

/// How one volume came back in a drill.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DrilledVolume {
    /// The volume's path in the snapshot.
    pub path: String,
    pub files: i64,
    pub bytes: i64,
    pub seconds: f64,
    pub bytes_per_second: i64,
    /// Files that differ from the snapshot.
    #[serde(default)]
    pub mismatched: i64,
}

/// How one database came back in a drill.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DrilledDatabase {
    /// The entry's name in `spec.databases`.
    pub name: String,
    pub engine: String,
    /// Bytes of dump loaded.
    pub bytes: i64,
    pub seconds: f64,
    pub bytes_per_second: i64,
    /// Tables whose rows were counted against the backup's record.
    #[serde(default)]
    pub tables_checked: i64,
    /// Why it failed; absent when it passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
