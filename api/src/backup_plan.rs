//! `BackupPlan`: what to back up, where to, and when; and what happened.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use neverwiped_contract::location::{LocationError, RestLocation};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{CredentialsSecretRef, DatabaseType, PodSettings, SecretKeyRef};
use super::mover::{MoverSettings, MoverStatus};
use super::names::{
    DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, HOST_PATTERN, PATH_PATTERN, REPOSITORY_URL_PATTERN,
    REPOSITORY_URL_RULE,
};

/// The schedule field's shape: a `@` macro or five whitespace-separated fields. The operator
/// parses the fields themselves (`Ready=False`, reason `InvalidSchedule`, when they do not parse).
pub const SCHEDULE_PATTERN: &str = r"^(@(hourly|daily|weekly|monthly|yearly|annually)|[^\s]+\s+[^\s]+\s+[^\s]+\s+[^\s]+\s+[^\s]+)$";

/// A duration in hours, minutes and seconds, such as `12h`, `90m` or `1h30m`.
pub const DURATION_PATTERN: &str = r"^(([0-9]+h)([0-9]+m)?([0-9]+s)?|([0-9]+m)([0-9]+s)?|[0-9]+s)$";

/// The default of `spec.deadline`.
pub const DEFAULT_DEADLINE: &str = "12h";

/// The default of `spec.timeZone`.
pub const DEFAULT_TIME_ZONE: &str = "UTC";

/// Backs up volumes and databases of its namespace on a schedule into an encrypted, deduplicated
/// repository on a gate (a restic REST server).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "neverwiped.io",
    version = "v1alpha1",
    kind = "BackupPlan",
    namespaced,
    status = "BackupPlanStatus",
    derive = "PartialEq",
    shortname = "bp",
    shortname = "nwbp",
    category = "neverwiped",
    doc = "A BackupPlan backs up volumes and databases of its namespace on a schedule into an encrypted, deduplicated repository.",
    printcolumn = r#"{"name":"Schedule","type":"string","jsonPath":".spec.schedule"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Last Result","type":"string","jsonPath":".status.lastRun.result"}"#,
    printcolumn = r#"{"name":"Last Success","type":"date","jsonPath":".status.lastSuccessfulTime"}"#,
    printcolumn = r#"{"name":"Bytes Sent","type":"integer","jsonPath":".status.lastRun.bytesSent"}"#,
    printcolumn = r#"{"name":"Repository","type":"string","jsonPath":".status.repository.size"}"#,
    printcolumn = r#"{"name":"Next Run","type":"string","jsonPath":".status.nextScheduleTime"}"#,
    printcolumn = r#"{"name":"Runs At","type":"string","jsonPath":".status.resolvedSchedule"}"#,
    printcolumn = r#"{"name":"Queued","type":"integer","jsonPath":".status.queued.position"}"#,
    printcolumn = r#"{"name":"Suspicious","type":"string","jsonPath":".status.suspiciousChange.reason"}"#,
    printcolumn = r#"{"name":"Verified","type":"string","jsonPath":".status.verify.lastRun.result"}"#,
    printcolumn = r#"{"name":"Recovery","type":"number","jsonPath":".status.verify.lastRun.recoverySeconds","priority":1}"#,
    printcolumn = r#"{"name":"Mover","type":"string","jsonPath":".status.mover.mode","priority":1}"#,
    printcolumn = r#"{"name":"Suspended","type":"boolean","jsonPath":".spec.suspend","priority":1}"#,
    printcolumn = r#"{"name":"Snapshot","type":"string","jsonPath":".status.lastRun.snapshotId","priority":1}"#,
    printcolumn = r#"{"name":"Snapshots","type":"integer","jsonPath":".status.repository.snapshots","priority":1}"#,
    printcolumn = r#"{"name":"Last Check","type":"string","jsonPath":".status.check.lastRun.result","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new(
    "(has(self.volumes) && size(self.volumes) > 0) || (has(self.databases) && size(self.databases) > 0) || (has(self.streams) && size(self.streams) > 0)"
).message("a BackupPlan needs at least one entry in volumes, databases or streams"))]
#[x_kube(validation = Rule::new(
    "!has(self.copies) || self.copies.all(c, c.repository.url != self.repository.url)"
).message("a copy's repository.url must differ from spec.repository.url: a copy in the same repository protects nothing"))]
#[serde(rename_all = "camelCase")]
pub struct BackupPlanSpec {
    /// When to run: five cron fields (minute hour day-of-month month day-of-week, e.g.
    /// `30 2 * * *`) or `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`.
    #[schemars(length(min = 1, max = 128), regex(pattern = SCHEDULE_PATTERN))]
    pub schedule: String,
    /// The IANA time zone the schedule is read in, e.g. `Europe/Berlin`. A daily run at 02:30
    /// stays at 02:30 local time across daylight saving changes; a time skipped by a change runs
    /// at the first time after it, a repeated one runs once.
    #[serde(default = "default_time_zone")]
    #[schemars(
        length(min = 1, max = 64),
        regex(pattern = r"^[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*$")
    )]
    pub time_zone: String,
    /// Stops scheduled runs (a running one finishes). A changed `manualTrigger` still runs.
    #[serde(default)]
    pub suspend: bool,
    /// Changing this value runs a backup now, e.g. `kubectl patch bp NAME --type merge -p
    /// '{"spec":{"manualTrigger":"'$(date +%s)'"}}'`. The value last acted on is
    /// `status.lastManualTrigger`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub manual_trigger: Option<String>,
    /// Where the backups go.
    pub repository: Repository,
    /// The PersistentVolumeClaims of this namespace to back up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub volumes: Vec<BackupVolume>,
    /// How volumes are read: `Snapshot` backs up a PVC cloned from a CSI VolumeSnapshot (a
    /// consistent point in time); `Direct` mounts the live PVC read-only, on the node where a
    /// ReadWriteOnce volume is in use; `Auto` uses `Snapshot` where a VolumeSnapshotClass for the
    /// volume's CSI driver exists and `Direct` elsewhere.
    #[serde(default)]
    pub copy_method: CopyMethod,
    /// The VolumeSnapshotClass for snapshots; by default the class marked default for the
    /// volume's CSI driver, or its only class. With `Auto`, only the volumes of this class's
    /// driver are snapshotted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub volume_snapshot_class_name: Option<String>,
    /// Database servers to dump into the same snapshot as the volumes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub databases: Vec<DatabaseSource>,
    /// Dump containers of any data store, run in the backup Job's pod: each one's standard
    /// output goes into the same snapshot as `/streams/NAME`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new(super::streams::UNIQUE_NAMES_RULE).message("streams: each name once"))]
    pub streams: Vec<super::BackupStream>,
    /// Commands run in the backup Job's pod before the data is read and after (a checkpoint, a
    /// write lock and its release); `status.lastRun.pausedSeconds` says how long they held the
    /// application.
    #[serde(default, skip_serializing_if = "super::Hooks::is_empty")]
    pub hooks: super::Hooks,
    /// Which snapshots of this plan to keep; applied after each successful backup. Without it,
    /// every snapshot is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
    /// Other repositories (another gate, another site) that get a copy of each of the plan's
    /// snapshots, each by its own Job after each successful backup or on its own schedule;
    /// `status.copies` says how far each is behind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub copies: Vec<super::CopyDestination>,
    /// Repository upkeep: when to prune (free the data of forgotten snapshots) and when to check
    /// it. Each runs as its own Job, never at the same time as a backup of this plan.
    #[serde(default)]
    pub maintenance: Maintenance,
    /// Limits of each run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// Restore drills: a snapshot restored into scratch space on a schedule and held to what it
    /// recorded, with the recovery time measured (`status.verify`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<super::VerifySpec>,
    /// How long a run may take, e.g. `12h` or `90m`; a run still going then is stopped and
    /// reported as `DeadlineExceeded`.
    #[serde(default = "default_deadline")]
    #[schemars(length(min = 2, max = 32), regex(pattern = DURATION_PATTERN))]
    #[x_kube(validation = Rule::new("duration(self) >= duration('1m')").message("deadline must be at least 1m"))]
    pub deadline: String,
    /// Placement and resources of the Jobs' pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mover: Option<MoverSettings>,
}

fn default_time_zone() -> String {
    DEFAULT_TIME_ZONE.into()
}

fn default_deadline() -> String {
    DEFAULT_DEADLINE.into()
}

/// The repository on the gate: its URL, the password that encrypts it, and how to log in.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Repository {
    /// URL of the repository on the gate or any restic REST server, e.g.
    /// `https://gate.example.com/team-a/shop`.
    #[schemars(length(min = 8, max = 2048), regex(pattern = REPOSITORY_URL_PATTERN))]
    #[x_kube(validation = Rule::new(REPOSITORY_URL_RULE).message(
        "the URL may have no '.' or '..' segment, user, query, fragment or backslash"
    ))]
    pub url: String,
    /// The repository password: it encrypts everything; without it nothing can be restored.
    pub password_secret_ref: SecretKeyRef,
    /// User name and password for the gate's HTTP authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<CredentialsSecretRef>,
    /// PEM CA certificate(s) to verify the gate's TLS certificate, when a private CA signed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret_ref: Option<SecretKeyRef>,
}

impl Repository {
    /// The URL, parsed: refused under the rules the CRD and admission apply, with the rule.
    pub fn location(&self) -> Result<RestLocation, LocationError> {
        RestLocation::parse(&self.url)
    }
}

/// PersistentVolumeClaims to back up: one by name, or all that match a label selector.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new("has(self.claimName) != has(self.selector)")
    .message("set exactly one of claimName or selector"))]
#[serde(rename_all = "camelCase")]
pub struct BackupVolume {
    /// Name of a PersistentVolumeClaim in this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN_PATTERN))]
    pub claim_name: Option<String>,
    /// Selects PersistentVolumeClaims of this namespace by label; at least one must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Paths to leave out, as restic's `--exclude` patterns scoped to the volume. `/tmp` is
    /// anchored at the volume's root; a pattern without a leading `/` matches at any depth
    /// (`cache` leaves out every file or directory named `cache`, `logs/*.log` the logs of every
    /// `logs` directory). `*` and `?` stay within one name, `**` spans any number of directories,
    /// `[a-z]` is a class, `\` escapes; a matched directory is left out whole; a trailing `/`
    /// changes nothing. `!pattern` takes back what the patterns before it left out. Every pattern
    /// is inside the volume, a leading `/` included. Refused: a `..` component, a control
    /// character, a pattern restic refuses (`*[`, `a/[]`, a `\` at the end), one that leaves out
    /// the whole volume (`/`, `**`, `*`), and a first pattern starting with `!`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 256),
        inner(length(min = 1, max = 4096), regex(pattern = PATH_PATTERN))
    )]
    pub excludes: Vec<String>,
    /// Leave out the contents of this volume's folders tagged as caches: a `CACHEDIR.TAG` file
    /// starting with the signature of the Cache Directory Tagging Specification (the folder and
    /// the tag file are kept). restic's `--exclude-caches`, acting only inside this volume.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclude_caches: bool,
    /// `FILE` or `FILE:HEADER`: leave out the contents of every folder of this volume that holds
    /// a file named FILE, starting with HEADER when one is given (the folder and FILE are kept).
    /// restic's `--exclude-if-present`, acting only inside this volume. FILE is a name: not
    /// empty, no `/`, not `.` or `..`; no control characters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 256)))]
    #[x_kube(validation = Rule::new(TAG_FILES_RULE).message(
        "excludeIfPresent: each entry is FILE or FILE:HEADER, FILE a file name (not empty, no '/', not '.' or '..') and no control characters"
    ))]
    pub exclude_if_present: Vec<String>,
    /// Leave out this volume's files larger than this size: digits, then optionally `b`, `k`,
    /// `m`, `g` or `t` (any case, powers of 1024), e.g. `500M` (quote a plain number: `"4096"`).
    /// restic's `--exclude-larger-than`, acting only inside this volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 24))]
    #[x_kube(validation = Rule::new(SIZE_RULE).message(
        "excludeLargerThan: digits, then optionally b, k, m, g or t (powers of 1024), e.g. 500M"
    ))]
    pub exclude_larger_than: Option<String>,
}

/// CEL, on `excludeIfPresent`: every entry is `FILE[:HEADER]` with FILE a file name (not empty,
/// no `/`, not `.` or `..`) and no control character anywhere.
pub const TAG_FILES_RULE: &str = "self.all(f, f.matches('^([^/:.[:cntrl:]]|[.][^/:.[:cntrl:]]|[.][.][^/:[:cntrl:]])[^/:[:cntrl:]]*(:[^[:cntrl:]]*)?$'))";

/// CEL, on `excludeLargerThan`: a size in restic's syntax.
pub const SIZE_RULE: &str = "self.matches('^[0-9]+[bBkKmMgGtT]?$')";

impl BackupVolume {
    /// A volume by claim name.
    pub fn claim(name: impl Into<String>) -> BackupVolume {
        BackupVolume {
            claim_name: Some(name.into()),
            selector: None,
            excludes: Vec::new(),
            exclude_caches: false,
            exclude_if_present: Vec::new(),
            exclude_larger_than: None,
        }
    }
}

/// How a volume's data is read.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum CopyMethod {
    /// `Snapshot` where a VolumeSnapshotClass for the volume's CSI driver exists, else `Direct`.
    #[default]
    Auto,
    /// A CSI VolumeSnapshot, and a PVC cloned from it that the Job reads.
    Snapshot,
    /// The live PVC, mounted read-only.
    Direct,
}

/// A database server to dump with each backup.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseSource {
    /// Name of this entry: the dump is stored under `/databases/<name>/` in the snapshot.
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub name: String,
    /// The server's engine.
    #[serde(rename = "type")]
    pub engine: DatabaseType,
    /// Host name or address of the server, e.g. `postgres.shop.svc`.
    #[schemars(length(min = 1, max = 253), regex(pattern = HOST_PATTERN))]
    pub host: String,
    /// Port of the server; by default 5432 for PostgreSQL and 3306 for MariaDB and MySQL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// User name and password to connect with; the user needs the rights to dump.
    pub credentials_secret_ref: CredentialsSecretRef,
    /// The databases to dump; empty dumps all of them (with roles, for PostgreSQL).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(
            length(min = 1, max = 63),
            regex(pattern = r"^[A-Za-z0-9_][-A-Za-z0-9_.$]*$")
        )
    )]
    pub databases: Vec<String>,
}

/// Which snapshots of the plan to keep. A snapshot is kept when any rule keeps it; the rest are
/// forgotten after each successful backup and their data freed by the next prune.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[x_kube(validation = Rule::new(
    "has(self.keepLast) || has(self.keepHourly) || has(self.keepDaily) || has(self.keepWeekly) || has(self.keepMonthly) || has(self.keepYearly)"
).message("set at least one keep rule, or leave out retention to keep every snapshot"))]
#[serde(rename_all = "camelCase")]
pub struct Retention {
    /// Keep the newest N snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub keep_last: Option<i32>,
    /// Keep the newest snapshot of each of the last N hours that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub keep_hourly: Option<i32>,
    /// Keep the newest snapshot of each of the last N days that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub keep_daily: Option<i32>,
    /// Keep the newest snapshot of each of the last N weeks that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub keep_weekly: Option<i32>,
    /// Keep the newest snapshot of each of the last N months that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub keep_monthly: Option<i32>,
    /// Keep the newest snapshot of each of the last N years that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub keep_yearly: Option<i32>,
}

/// The default of `spec.maintenance.prune.schedule`: Sundays at 00:00.
pub const DEFAULT_PRUNE_SCHEDULE: &str = "@weekly";
/// The default of `spec.maintenance.check.schedule`: the first of each month at 00:00.
pub const DEFAULT_CHECK_SCHEDULE: &str = "@monthly";
/// The default of `spec.maintenance.check.readDataPercent`.
pub const DEFAULT_READ_DATA_PERCENT: i32 = 5;

/// When the plan's repository is pruned and checked, in the plan's time zone.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Maintenance {
    #[serde(default)]
    pub prune: PruneSettings,
    #[serde(default)]
    pub check: CheckSettings,
}

/// Prune: deletes the data that no snapshot uses any more (after retention forgot snapshots, or
/// left by interrupted runs). It locks the repository exclusively: backups of other plans that
/// share the repository wait for it or fail with `RepositoryLocked`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PruneSettings {
    /// When to prune, as `spec.schedule`.
    #[serde(default = "default_prune_schedule")]
    #[schemars(length(min = 1, max = 128), regex(pattern = SCHEDULE_PATTERN))]
    pub schedule: String,
    /// Stops scheduled prunes.
    #[serde(default)]
    pub suspend: bool,
}

impl Default for PruneSettings {
    fn default() -> Self {
        PruneSettings {
            schedule: default_prune_schedule(),
            suspend: false,
        }
    }
}

fn default_prune_schedule() -> String {
    DEFAULT_PRUNE_SCHEDULE.into()
}

/// Check: verifies that every snapshot's data is in the repository, and reads back and
/// authenticates a share of it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckSettings {
    /// When to check, as `spec.schedule`.
    #[serde(default = "default_check_schedule")]
    #[schemars(length(min = 1, max = 128), regex(pattern = SCHEDULE_PATTERN))]
    pub schedule: String,
    /// Percent of the stored data to download and verify on each check (a different random
    /// share each time); 0 checks the structure only, 100 reads everything.
    #[serde(default = "default_read_data_percent")]
    #[schemars(range(min = 0, max = 100))]
    pub read_data_percent: i32,
    /// Stops scheduled checks.
    #[serde(default)]
    pub suspend: bool,
}

impl Default for CheckSettings {
    fn default() -> Self {
        CheckSettings {
            schedule: default_check_schedule(),
            read_data_percent: DEFAULT_READ_DATA_PERCENT,
            suspend: false,
        }
    }
}

fn default_check_schedule() -> String {
    DEFAULT_CHECK_SCHEDULE.into()
}

fn default_read_data_percent() -> i32 {
    DEFAULT_READ_DATA_PERCENT
}

/// Limits of each run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Most bytes per second sent to the repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub upload_bytes_per_second: Option<i64>,
}

/// What the operator observed of a BackupPlan.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupPlanStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (the spec is valid and everything it names exists), `Running` (a run is in
    /// progress), `LastBackupSucceeded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The latest scheduled time the operator has acted on: it started a run for it, or counted
    /// it as missed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// When the next scheduled run starts; absent while suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<Time>,
    /// When the last successful run (with or without warnings) completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<Time>,
    /// The `spec.manualTrigger` value last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_manual_trigger: Option<String>,
    /// The run in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_run: Option<ActiveRun>,
    /// The last finished run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<RunRecord>,
    /// The last finished runs, newest first (at most ten).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<RunRecord>,
    /// Scheduled runs that did not start on time (the operator was down, or the previous run was
    /// still going), since the plan was created. The latest one runs late, once, when it is still
    /// within the catch-up window.
    #[serde(default)]
    pub missed_runs: i64,
    /// The repository as the last backup, prune or check measured it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<RepositoryStatus>,
    /// The plan's prunes.
    #[serde(default, skip_serializing_if = "MaintenanceStatus::is_empty")]
    pub prune: MaintenanceStatus,
    /// The plan's checks.
    #[serde(default, skip_serializing_if = "MaintenanceStatus::is_empty")]
    pub check: MaintenanceStatus,
    /// The plan's own snapshots in the repository, as the last backup or prune listed them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<super::PlanSnapshots>,
    /// A run that is due but waits for a slot under the operator's concurrency limits; it starts
    /// when one frees, and its deadline counts from then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<QueuedRun>,
    /// `spec.schedule` with every `H` replaced by this plan's own value: when it really runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_schedule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mover: Option<MoverStatus>,
    /// What the plan's last successful backups changed against their parents, newest first (at
    /// most ten; flagged and expected nights are left out): what a usual night looks like.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub change_history: Vec<super::ChangeRatios>,
    /// Each destination of `spec.copies`: its last copied snapshot and how far it is behind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub copies: Vec<super::CopyStatus>,
    /// A backup far outside the usual changes that no admin has acknowledged yet: while it is
    /// set, the plan's retention is paused (condition `SuspiciousChange`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspicious_change: Option<super::SuspiciousChange>,
    /// The restore drills (`spec.verify`): the last, the last that proved the data, the next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<super::VerifyStatus>,
}

/// A run waiting for a slot.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueuedRun {
    /// A backup, prune or check.
    pub kind: RunKind,
    pub trigger: RunTrigger,
    /// The scheduled time it runs for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_time: Option<Time>,
    /// The `spec.manualTrigger` value it runs for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual_trigger: Option<String>,
    /// When it started waiting: its place in the queue (oldest first, one per namespace in turn).
    pub since: Time,
    /// Its place in the queue when last looked at (1 is next).
    pub position: i64,
    /// How many runs waited then.
    pub waiting: i64,
    /// The limit it waits for.
    pub message: String,
}

/// The repository's size and content.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryStatus {
    /// Bytes the gate stores for the repository (all plans that share it).
    pub size_bytes: i64,
    /// The same, as a Kubernetes quantity (e.g. `553Mi`), for reading.
    pub size: String,
    /// Snapshots in the repository, of every plan that shares it.
    pub snapshots: i64,
    /// When it was measured.
    pub measured_time: Time,
    /// The id of the key object that opened the repository in the last run that opened it: the
    /// plan's next Jobs, and the plugin, try it first (`--key-hint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
}

impl BackupPlanStatus {
    /// The key that opened the repository last time (`status.repository.keyId`).
    pub fn key_id(&self) -> Option<&str> {
        self.repository.as_ref()?.key_id.as_deref()
    }
}

/// One kind of maintenance (prune or check) of a plan.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceStatus {
    /// The latest scheduled time acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// When the next one is due; absent while suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<Time>,
    /// The last finished one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<MaintenanceRecord>,
}

impl MaintenanceStatus {
    pub fn is_empty(&self) -> bool {
        *self == MaintenanceStatus::default()
    }
}

/// One finished prune or check.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceRecord {
    /// The Job that ran it.
    pub job_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// `Succeeded` or `Failed` (a check that found problems failed).
    pub result: RunOutcome,
    /// Why it ended so, as a run's `reason`; `RepositoryDamaged` when a check found problems.
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Prune: bytes freed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_freed: Option<i64>,
    /// Check: problems found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problems: Option<i64>,
    /// Check: packs read back and verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packs_read: Option<i64>,
}

/// Why a run started.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RunTrigger {
    /// At its scheduled time.
    Schedule,
    /// Late, for a scheduled time that was missed.
    CatchUp,
    /// By a change of `spec.manualTrigger`.
    Manual,
}

/// What a plan's Job does.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RunKind {
    #[default]
    Backup,
    Prune,
    Check,
}

impl RunKind {
    /// The value of the Job's `neverwiped.io/operation` label.
    pub fn label(self) -> &'static str {
        match self {
            RunKind::Backup => "backup",
            RunKind::Prune => "prune",
            RunKind::Check => "check",
        }
    }
}

/// A run in progress: its VolumeSnapshots getting ready, or its Job running.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActiveRun {
    /// The Job that runs it.
    pub job_name: String,
    /// A backup, or the repository's prune or check: one at a time per plan.
    #[serde(default)]
    pub kind: RunKind,
    pub trigger: RunTrigger,
    /// The scheduled time it runs for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_time: Option<Time>,
    /// When the run started (its Job, or its first VolumeSnapshot, was created).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
}

/// How a run ended.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RunOutcome {
    /// A snapshot of everything was written.
    Succeeded,
    /// A snapshot was written, but some files could not be read (see `warnings` and `message`).
    SucceededWithWarnings,
    /// No snapshot was written; `reason` and `message` say why.
    Failed,
}

impl RunOutcome {
    /// Whether the run wrote a snapshot.
    pub fn is_success(self) -> bool {
        matches!(
            self,
            RunOutcome::Succeeded | RunOutcome::SucceededWithWarnings
        )
    }
}

/// One finished run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    /// The Job that ran it.
    pub job_name: String,
    pub trigger: RunTrigger,
    /// The scheduled time it ran for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<i64>,
    pub result: RunOutcome,
    /// A CamelCase word for why it ended so, e.g. `Succeeded`, `WrongPassword`, `OOMKilled`,
    /// `DeadlineExceeded`.
    pub reason: String,
    /// What happened, for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The snapshot written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_read: Option<i64>,
    /// Bytes of file content and dumps read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_read: Option<i64>,
    /// Bytes of new (deduplicated, compressed, encrypted) data stored in the repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_added: Option<i64>,
    /// Bytes sent to the repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_sent: Option<i64>,
    /// How many files could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnings: Option<i64>,
    /// Each database dump of the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub databases: Vec<DatabaseRunRecord>,
    /// How long the application was paused: from the first pre hook's start to the last post
    /// hook's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_seconds: Option<f64>,
    /// Each stream of the run: its bytes, and its error when it failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<super::StreamRecord>,
    /// Each hook that was due, in the order it ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<super::HookRecord>,
}

impl RunRecord {
    /// The record of a run that measured nothing (no sidecar result: it failed before the
    /// sidecar reported, or never started); times and figures are filled in where known.
    pub fn without_figures(
        job_name: String,
        trigger: RunTrigger,
        result: RunOutcome,
        reason: String,
    ) -> RunRecord {
        RunRecord {
            job_name,
            trigger,
            scheduled_time: None,
            start_time: None,
            completion_time: None,
            duration_seconds: None,
            result,
            reason,
            message: None,
            snapshot_id: None,
            files_read: None,
            bytes_read: None,
            bytes_added: None,
            bytes_sent: None,
            warnings: None,
            databases: Vec::new(),
            paused_seconds: None,
            streams: Vec::new(),
            hooks: Vec::new(),
        }
    }
}

/// One database dump of a run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseRunRecord {
    pub name: String,
    /// Bytes the dump tool produced.
    pub dump_bytes: i64,
    /// The dump tool's error, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The manual trigger to act on: `spec.manualTrigger` when set and not yet acted on.
pub fn pending_manual_trigger<'a>(
    spec: &'a BackupPlanSpec,
    status: Option<&BackupPlanStatus>,
) -> Option<&'a str> {
    let trigger = spec.manual_trigger.as_deref().filter(|t| !t.is_empty())?;
    let acted_on = status.and_then(|s| s.last_manual_trigger.as_deref());
    (acted_on != Some(trigger)).then_some(trigger)
}
