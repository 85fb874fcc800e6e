//! The Jobs the operator runs: a BackupPlan's backup and a Restore's restore, as plain values.
//!
//! Everything the sidecar needs goes through the pod spec: arguments (never a secret), Secrets as
//! files or environment variables, volumes, the deadline. The pod has no Kubernetes API access and
//! as few privileges as reading (or writing back) other users' files allows.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, KeyToPath,
    NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec, PodTemplateSpec,
    ResourceRequirements, SeccompProfile, SecretKeySelector, SecretVolumeSource, SecurityContext,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use neverwiped_contract::cli::{
    self, env, BackupArgs, CheckArgs, DatabaseArg, KeepRules, PruneArgs, RestoreArgs,
};

use crate::api::{
    BackupPlan, CredentialsSecretRef, DatabaseType, NonEmptyTargetPolicy, PodSettings, Restore,
    Retention, RunKind, RunTrigger, SecretKeyRef,
};

/// Name of the sidecar container in every Job's pod.
pub const SIDECAR_CONTAINER: &str = "sidecar";
/// Where the sidecar writes its result: the container's termination message.
pub const RESULT_FILE: &str = "/dev/termination-log";
/// Volumes are backed up from `/data/<claim name>`, so snapshots name them the same whichever
/// copy (the live PVC or a clone from a VolumeSnapshot) was read.
pub const DATA_ROOT: &str = "/data";
/// Restores write under this directory: `/restore` + the path in the snapshot.
pub const RESTORE_ROOT: &str = "/restore";
/// Secrets are mounted as files below this directory.
pub const SECRETS_ROOT: &str = "/var/run/neverwiped";

/// Label: the BackupPlan a Job belongs to.
pub const LABEL_PLAN: &str = "neverwiped.io/plan";
/// Label: the Restore a Job belongs to.
pub const LABEL_RESTORE: &str = "neverwiped.io/restore";
/// Label: `backup` or `restore`.
pub const LABEL_OPERATION: &str = "neverwiped.io/operation";
/// Label: the run (its Job's name) a VolumeSnapshot or a cloned PersistentVolumeClaim is for.
pub const LABEL_RUN: &str = "neverwiped.io/run";
/// Annotation: the PersistentVolumeClaim a VolumeSnapshot or a clone copies.
pub const ANNOTATION_SOURCE_CLAIM: &str = "neverwiped.io/source-claim";
/// Annotation: the scheduled time (RFC 3339) a backup runs for.
pub const ANNOTATION_SCHEDULED_TIME: &str = "neverwiped.io/scheduled-time";
/// Annotation: the [`RunTrigger`] of a backup.
pub const ANNOTATION_TRIGGER: &str = "neverwiped.io/trigger";
/// Annotation: the `spec.manualTrigger` value a manual backup runs for.
pub const ANNOTATION_MANUAL_TRIGGER: &str = "neverwiped.io/manual-trigger";
/// Annotation: the deadline of the run, as written in the spec.
pub const ANNOTATION_DEADLINE: &str = "neverwiped.io/deadline";

/// The value of `app.kubernetes.io/managed-by` on everything the operator creates.
pub const MANAGED_BY: &str = "neverwiped-operator";
/// Kubernetes copies a Job's name into a label value of its pods: at most 63 characters.
const MAX_JOB_NAME_LEN: usize = 63;
/// A pod's host name is a DNS label.
const MAX_HOSTNAME_LEN: usize = 63;
/// The user a pod that reads no volumes runs as.
const UNPRIVILEGED_UID: i64 = 65532;

/// Operator-wide settings of the Jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSettings {
    /// The sidecar image.
    pub image: String,
    /// `Always`, `IfNotPresent` or `Never`; Kubernetes' default when `None`.
    pub image_pull_policy: Option<String>,
    /// Resources of the sidecar container when the plan sets none.
    pub default_resources: Option<ResourceRequirements>,
}

/// A volume a backup Job reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupVolumeMount {
    /// The plan's claim: the volume's name in the snapshot (`/data/<source_claim>`).
    pub source_claim: String,
    /// The claim mounted: the same in `Direct` mode, the clone in `Snapshot` mode.
    pub mounted_claim: String,
    /// Exclude patterns relative to the volume's root.
    pub excludes: Vec<String>,
}

/// One backup run of a plan: what the reconciler decided.
#[derive(Debug, Clone, PartialEq)]
pub struct BackupRun {
    pub trigger: RunTrigger,
    /// The scheduled time for schedule and catch-up runs.
    pub scheduled_time: Option<Timestamp>,
    /// The `spec.manualTrigger` value of a manual run.
    pub manual_trigger: Option<String>,
    pub volumes: Vec<BackupVolumeMount>,
    /// `Direct` mode: the node where the volumes are in use.
    pub node_name: Option<String>,
    pub deadline: SignedDuration,
    /// No other pod of the plan is alive: the sidecar may remove every lock of the plan's host
    /// name (`--remove-locks-of-host`), left by runs that were killed.
    pub remove_stale_locks: bool,
}

/// The host name of every backup pod of a plan, which the sidecar records in its repository locks:
/// the plan's name (made a DNS label) and a hash of `namespace/plan`, so that it differs between
/// plans that share a repository and stays the same across the plan's runs. A run's locks can thus
/// be told apart from other plans' and removed once no pod of the plan is alive.
pub fn lock_hostname(namespace: &str, plan: &str) -> String {
    // FNV-1a, 64 bits: stable across releases and platforms, unlike std's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in format!("{namespace}/{plan}").bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let prefix: String = plan
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(MAX_HOSTNAME_LEN - 17)
        .collect();
    let prefix = prefix.trim_matches('-');
    if prefix.is_empty() {
        format!("nw-{hash:016x}")
    } else {
        format!("{prefix}-{hash:016x}")
    }
}

/// The Job's name for a backup run: one name per scheduled time (or per manual trigger, which
/// changes the plan's generation), so a second create of the same run fails instead of running
/// twice.
pub fn backup_job_name(plan: &BackupPlan, run: &BackupRun) -> String {
    let suffix = match (run.trigger, run.scheduled_time) {
        (RunTrigger::Manual, _) | (_, None) => {
            format!("manual-{}", plan.metadata.generation.unwrap_or(0))
        }
        (_, Some(time)) => (time.as_second() / 60).to_string(),
    };
    job_name(&plan.name_any(), &suffix)
}

/// The two kinds of repository maintenance a plan runs besides its backups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaintenanceKind {
    Prune,
    Check,
}

impl MaintenanceKind {
    /// Both, in the order they start when both are due.
    pub const ALL: [MaintenanceKind; 2] = [MaintenanceKind::Prune, MaintenanceKind::Check];

    /// The kind of the plan's run, as `status.activeRun.kind` says it.
    pub fn run_kind(self) -> RunKind {
        match self {
            MaintenanceKind::Prune => RunKind::Prune,
            MaintenanceKind::Check => RunKind::Check,
        }
    }

    /// The value of the Job's `neverwiped.io/operation` label.
    pub fn label(self) -> &'static str {
        self.run_kind().label()
    }
}

/// One prune or check of a plan's repository: what the reconciler decided.
#[derive(Debug, Clone, PartialEq)]
pub struct MaintenanceRun {
    pub kind: MaintenanceKind,
    pub trigger: RunTrigger,
    pub scheduled_time: Timestamp,
    pub deadline: SignedDuration,
    /// As for [`BackupRun::remove_stale_locks`].
    pub remove_stale_locks: bool,
}

/// The Job's name for a prune or check: one per scheduled time, as for backups.
pub fn maintenance_job_name(plan: &BackupPlan, run: &MaintenanceRun) -> String {
    let suffix = format!(
        "{}-{}",
        run.kind.label(),
        run.scheduled_time.as_second() / 60
    );
    job_name(&plan.name_any(), &suffix)
}

/// How long a Job waits for another process's repository lock (another plan's prune or backup of
/// a shared repository) before it fails with `RepositoryLocked`: half its deadline, at most 30
/// minutes.
fn lock_wait(deadline: SignedDuration) -> String {
    let seconds = (deadline.as_secs() / 2).clamp(0, 30 * 60);
    format!("{seconds}s")
}

/// The sidecar's `--keep-*` rules for a plan's retention.
pub fn keep_rules(retention: Option<&Retention>) -> KeepRules {
    let Some(retention) = retention else {
        return KeepRules::default();
    };
    let count = |value: Option<i32>| value.and_then(|v| u32::try_from(v).ok());
    KeepRules {
        last: count(retention.keep_last),
        hourly: count(retention.keep_hourly),
        daily: count(retention.keep_daily),
        weekly: count(retention.keep_weekly),
        monthly: count(retention.keep_monthly),
        yearly: count(retention.keep_yearly),
    }
}

/// Builds the Job that prunes or checks `plan`'s repository. It reads no volumes: it runs as a
/// non-root user without capabilities, under the plan's lock host name so that the locks of a
/// killed prune are cleared like a killed backup's.
pub fn maintenance_job(plan: &BackupPlan, run: &MaintenanceRun, settings: &JobSettings) -> Job {
    let spec = &plan.spec;
    let plan_name = plan.name_any();
    let namespace = plan.namespace().unwrap_or_default();
    let mut pod = PodBuilder::default();
    pod.mount_repository(
        &spec.repository.password_secret_ref,
        spec.repository.credentials_secret_ref.as_ref(),
        spec.repository.ca_secret_ref.as_ref(),
    );
    let hostname = lock_hostname(&namespace, &plan_name);
    let repository = cli::rest_repository(&spec.repository.url);
    let remove_locks_of_host = run.remove_stale_locks.then(|| hostname.clone());
    let args = match run.kind {
        MaintenanceKind::Check => CheckArgs {
            repository,
            result_file: RESULT_FILE.into(),
            read_data_percent: u32::try_from(spec.maintenance.check.read_data_percent)
                .ok()
                .filter(|&percent| percent > 0),
            remove_locks_of_host,
            retry_lock: Some(lock_wait(run.deadline)),
        }
        .to_args(),
        MaintenanceKind::Prune => PruneArgs {
            repository,
            result_file: RESULT_FILE.into(),
            remove_locks_of_host,
            retry_lock: Some(lock_wait(run.deadline)),
        }
        .to_args(),
    };
    let mut labels = common_labels(run.kind.label());
    labels.insert(LABEL_PLAN.into(), plan_name);
    let annotations = BTreeMap::from([
        (
            ANNOTATION_TRIGGER.to_owned(),
            trigger_name(run.trigger).to_owned(),
        ),
        (ANNOTATION_DEADLINE.to_owned(), spec.deadline.clone()),
        (
            ANNOTATION_SCHEDULED_TIME.to_owned(),
            run.scheduled_time.to_string(),
        ),
    ]);
    pod.finish(FinishedPod {
        name: maintenance_job_name(plan, run),
        namespace,
        labels,
        annotations,
        owner: plan.controller_owner_ref(&()),
        args,
        privileges: Privileges::Unprivileged,
        deadline: run.deadline,
        node_name: None,
        hostname: Some(hostname),
        pod_settings: spec.pod.as_ref(),
        settings,
    })
}

/// The Job's name for a Restore.
pub fn restore_job_name(restore: &Restore) -> String {
    job_name(&restore.name_any(), "restore")
}

fn job_name(prefix: &str, suffix: &str) -> String {
    let room = MAX_JOB_NAME_LEN - suffix.len() - 1;
    let prefix: String = prefix.chars().take(room).collect();
    format!("{}-{suffix}", prefix.trim_end_matches(['-', '.']))
}

/// Builds the backup Job for one run of `plan`.
pub fn backup_job(plan: &BackupPlan, run: &BackupRun, settings: &JobSettings) -> Job {
    let spec = &plan.spec;
    let plan_name = plan.name_any();
    let namespace = plan.namespace().unwrap_or_default();
    let mut pod = PodBuilder::default();
    pod.mount_repository(
        &spec.repository.password_secret_ref,
        spec.repository.credentials_secret_ref.as_ref(),
        spec.repository.ca_secret_ref.as_ref(),
    );

    let mut volumes = run.volumes.clone();
    volumes.sort_by(|a, b| a.source_claim.cmp(&b.source_claim));
    let mut paths = Vec::new();
    let mut excludes = Vec::new();
    for (index, volume) in volumes.iter().enumerate() {
        let path = format!("{DATA_ROOT}/{}", volume.source_claim);
        pod.mount_claim(&format!("data-{index}"), &volume.mounted_claim, &path, true);
        excludes.extend(
            volume
                .excludes
                .iter()
                .map(|pattern| scoped_exclude(&path, pattern)),
        );
        paths.push(path);
    }

    let mut databases = Vec::new();
    for database in &spec.databases {
        let port = database
            .port
            .map(|p| p as u16)
            .unwrap_or(database.engine.default_port());
        let (username_var, password_file) =
            pod.mount_database_credentials(&database.name, &database.credentials_secret_ref);
        let base = database_uri(database.engine, &username_var, &database.host, port);
        if database.databases.is_empty() {
            databases.push(DatabaseArg {
                name: database.name.clone(),
                uri: base,
                password_file: Some(password_file),
            });
        } else {
            // One entry, several databases: `/databases/<entry>/<database>.sql` each; the
            // password file is named once for the entry.
            for (index, name) in database.databases.iter().enumerate() {
                databases.push(DatabaseArg {
                    name: database.name.clone(),
                    uri: format!("{base}/{name}"),
                    password_file: (index == 0).then(|| password_file.clone()),
                });
            }
        }
    }

    let hostname = lock_hostname(&namespace, &plan_name);
    let args = BackupArgs {
        paths,
        repository: cli::rest_repository(&spec.repository.url),
        result_file: RESULT_FILE.into(),
        host: Some(format!("{namespace}/{plan_name}")),
        tags: vec![("plan".into(), plan_name.clone())],
        excludes,
        upload_limit_bytes_per_sec: spec
            .limits
            .as_ref()
            .and_then(|l| l.upload_bytes_per_second)
            .map(|b| b as u64),
        remove_locks_of_host: run.remove_stale_locks.then(|| hostname.clone()),
        databases,
        keep: keep_rules(spec.retention.as_ref()),
        retry_lock: Some(lock_wait(run.deadline)),
        // A plan's first backup creates its repository.
        init: true,
    }
    .to_args();

    // Reading every file of a volume, whoever owns it, needs root's DAC_READ_SEARCH (read files
    // and search directories regardless of their mode) and nothing else: the volumes are mounted
    // read-only, so no write privilege is granted. A plan with only databases needs none. (The Pod
    // Security Standard `baseline` does not list DAC_READ_SEARCH; DAC_OVERRIDE, which it lists,
    // would also grant writing: the narrower capability is the safer one.)
    let privileges = if volumes.is_empty() {
        Privileges::Unprivileged
    } else {
        Privileges::Root(&["DAC_READ_SEARCH"])
    };

    let mut labels = common_labels("backup");
    labels.insert(LABEL_PLAN.into(), plan_name.clone());
    let mut annotations = BTreeMap::new();
    annotations.insert(ANNOTATION_TRIGGER.into(), trigger_name(run.trigger).into());
    annotations.insert(ANNOTATION_DEADLINE.into(), spec.deadline.clone());
    if let Some(time) = run.scheduled_time {
        annotations.insert(ANNOTATION_SCHEDULED_TIME.into(), time.to_string());
    }
    if let Some(trigger) = &run.manual_trigger {
        annotations.insert(ANNOTATION_MANUAL_TRIGGER.into(), trigger.clone());
    }
    pod.finish(FinishedPod {
        name: backup_job_name(plan, run),
        namespace,
        labels,
        annotations,
        owner: plan.controller_owner_ref(&()),
        args,
        privileges,
        deadline: run.deadline,
        node_name: run.node_name.clone(),
        hostname: Some(hostname),
        pod_settings: spec.pod.as_ref(),
        settings,
    })
}

/// A restore Job's inputs beyond the Restore and its plan.
#[derive(Debug, Clone, PartialEq)]
pub struct RestoreRun {
    pub deadline: SignedDuration,
    /// The engine of each database entry, from the Restore or else from the plan.
    pub database_types: BTreeMap<String, DatabaseType>,
}

/// Builds the Job that runs `restore`, reading from `plan`'s repository.
pub fn restore_job(
    restore: &Restore,
    plan: &BackupPlan,
    run: &RestoreRun,
    settings: &JobSettings,
) -> Job {
    let spec = &restore.spec;
    let repository = &plan.spec.repository;
    let namespace = restore.namespace().unwrap_or_default();
    let plan_name = plan.name_any();
    let mut pod = PodBuilder::default();
    pod.mount_repository(
        &repository.password_secret_ref,
        repository.credentials_secret_ref.as_ref(),
        repository.ca_secret_ref.as_ref(),
    );

    if !spec.volumes.is_empty() {
        // The restore also sets the metadata of the folders above the claims (/restore/data):
        // on the read-only root they need a writable folder of their own, which the claims sit in.
        pod.mount_empty_dir("restore-root", RESTORE_ROOT);
    }
    let mut includes = Vec::new();
    for (index, volume) in spec.volumes.iter().enumerate() {
        let snapshot_path = format!("{DATA_ROOT}/{}", volume.source_claim_name);
        // The target is mounted where the restore writes the source's files: /restore/data/<source>.
        pod.mount_claim(
            &format!("target-{index}"),
            &volume.target_claim_name,
            &format!("{RESTORE_ROOT}{snapshot_path}"),
            false,
        );
        if volume.includes.is_empty() {
            includes.push(snapshot_path);
        } else {
            includes.extend(
                volume
                    .includes
                    .iter()
                    .map(|path| format!("{snapshot_path}/{}", path.trim_start_matches('/'))),
            );
        }
    }

    let mut databases = Vec::new();
    let mut databases_to_overwrite = Vec::new();
    for database in &spec.databases {
        let Some(engine) = database
            .engine
            .or_else(|| run.database_types.get(&database.name).copied())
        else {
            continue;
        };
        let port = database
            .port
            .map(|p| p as u16)
            .unwrap_or(engine.default_port());
        let (username_var, password_file) =
            pod.mount_database_credentials(&database.name, &database.credentials_secret_ref);
        databases.push(DatabaseArg {
            name: database.name.clone(),
            uri: database_uri(engine, &username_var, &database.host, port),
            password_file: Some(password_file),
        });
        if database.on_non_empty_target == NonEmptyTargetPolicy::Overwrite {
            databases_to_overwrite.push(database.name.clone());
        }
    }

    let latest = spec.snapshot == "latest";
    let args = RestoreArgs {
        snapshot: spec.snapshot.clone(),
        repository: cli::rest_repository(&repository.url),
        result_file: RESULT_FILE.into(),
        target: (!spec.volumes.is_empty()).then(|| RESTORE_ROOT.to_owned()),
        includes,
        host: latest.then(|| format!("{}/{plan_name}", plan.namespace().unwrap_or_default())),
        before: spec.taken_before.as_ref().map(|time| time.0.to_string()),
        databases,
        databases_to_overwrite,
    }
    .to_args();

    // Writing files back with their owners and modes needs CHOWN (set the owner), FOWNER (set
    // modes and times of files the process does not own) and DAC_OVERRIDE (write into directories
    // whatever their mode); nothing else.
    let privileges = if spec.volumes.is_empty() {
        Privileges::Unprivileged
    } else {
        Privileges::Root(&["CHOWN", "DAC_OVERRIDE", "FOWNER"])
    };
    let mut labels = common_labels("restore");
    labels.insert(LABEL_RESTORE.into(), restore.name_any());
    labels.insert(LABEL_PLAN.into(), plan_name);
    pod.finish(FinishedPod {
        name: restore_job_name(restore),
        namespace,
        labels,
        annotations: BTreeMap::new(),
        owner: restore.controller_owner_ref(&()),
        args,
        privileges,
        deadline: run.deadline,
        node_name: None,
        hostname: None,
        pod_settings: spec.pod.as_ref().or(plan.spec.pod.as_ref()),
        settings,
    })
}

/// The trigger a Job of a plan was created for, from its annotation.
pub fn run_trigger_of(job: &Job) -> RunTrigger {
    match job_annotation(job, ANNOTATION_TRIGGER) {
        Some("Manual") => RunTrigger::Manual,
        Some("CatchUp") => RunTrigger::CatchUp,
        _ => RunTrigger::Schedule,
    }
}

/// The scheduled time a Job of a plan runs for, from its annotation.
pub fn scheduled_time_of(job: &Job) -> Option<Timestamp> {
    job_annotation(job, ANNOTATION_SCHEDULED_TIME)?.parse().ok()
}

/// One annotation of a Job.
pub fn job_annotation<'a>(job: &'a Job, key: &str) -> Option<&'a str> {
    job.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// The name of a run trigger in annotations.
pub fn trigger_name(trigger: RunTrigger) -> &'static str {
    match trigger {
        RunTrigger::Schedule => "Schedule",
        RunTrigger::CatchUp => "CatchUp",
        RunTrigger::Manual => "Manual",
    }
}

/// A volume's exclude pattern, scoped to that volume: `/x` is anchored at the volume's root,
/// anything else matches at any depth below it.
fn scoped_exclude(volume_path: &str, pattern: &str) -> String {
    match pattern.strip_prefix('/') {
        Some(anchored) => format!("{volume_path}/{anchored}"),
        None => format!("{volume_path}/**/{pattern}"),
    }
}

/// `scheme://$(USERNAME_VAR)@host:port`: Kubernetes expands the variable from the Secret before
/// the sidecar starts, so the user name never appears in the Job's spec.
fn database_uri(engine: DatabaseType, username_var: &str, host: &str, port: u16) -> String {
    format!("{}://$({username_var})@{host}:{port}", engine.uri_scheme())
}

/// The labels of everything the operator creates for an `operation` (`backup`, `restore`,
/// `prune`, `check`).
pub fn common_labels(operation: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), "neverwiped".to_owned()),
        (
            "app.kubernetes.io/component".to_owned(),
            operation.to_owned(),
        ),
        (
            "app.kubernetes.io/managed-by".to_owned(),
            MANAGED_BY.to_owned(),
        ),
        (LABEL_OPERATION.to_owned(), operation.to_owned()),
    ])
}

/// The environment variable name for a database entry (`orders-eu` → `ORDERS_EU`).
fn env_suffix(name: &str) -> String {
    name.to_ascii_uppercase().replace(['-', '.'], "_")
}

enum Privileges {
    /// Root, with only these capabilities.
    Root(&'static [&'static str]),
    /// A non-root user with no capabilities.
    Unprivileged,
}

#[derive(Default)]
struct PodBuilder {
    volumes: Vec<Volume>,
    mounts: Vec<VolumeMount>,
    env: Vec<EnvVar>,
    mounts_claims: bool,
}

struct FinishedPod<'a> {
    name: String,
    namespace: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    owner: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
    args: Vec<String>,
    privileges: Privileges,
    deadline: SignedDuration,
    node_name: Option<String>,
    hostname: Option<String>,
    pod_settings: Option<&'a PodSettings>,
    settings: &'a JobSettings,
}

impl PodBuilder {
    fn mount_repository(
        &mut self,
        password: &SecretKeyRef,
        credentials: Option<&CredentialsSecretRef>,
        ca: Option<&SecretKeyRef>,
    ) {
        let file = self.mount_secret_key(
            "repository-password",
            &password.name,
            &password.key,
            "repository",
            "password",
        );
        self.env_value(env::PASSWORD_FILE, file);
        if let Some(credentials) = credentials {
            self.env_from_secret(
                env::GATE_USERNAME,
                &credentials.name,
                &credentials.username_key,
            );
            let file = self.mount_secret_key(
                "gate-password",
                &credentials.name,
                &credentials.password_key,
                "gate",
                "password",
            );
            self.env_value(env::GATE_PASSWORD_FILE, file);
        }
        if let Some(ca) = ca {
            let file = self.mount_secret_key("gate-ca", &ca.name, &ca.key, "gate-ca", "ca.crt");
            self.env_value(env::GATE_CA_FILE, file);
        }
    }

    /// Mounts a database's password as a file and its user name as a variable; returns the
    /// variable's name and the file's path.
    fn mount_database_credentials(
        &mut self,
        entry: &str,
        credentials: &CredentialsSecretRef,
    ) -> (String, String) {
        let username_var = format!("{}{}", env::DB_USERNAME_PREFIX, env_suffix(entry));
        self.env_from_secret(&username_var, &credentials.name, &credentials.username_key);
        let index = self.volumes.len();
        let file = self.mount_secret_key(
            &format!("db-{index}-password"),
            &credentials.name,
            &credentials.password_key,
            &format!("databases/{entry}"),
            "password",
        );
        (username_var, file)
    }

    /// Mounts one key of a Secret as `SECRETS_ROOT/<directory>/<file>`; returns the path.
    fn mount_secret_key(
        &mut self,
        volume: &str,
        secret: &str,
        key: &str,
        directory: &str,
        file: &str,
    ) -> String {
        let mount_path = format!("{SECRETS_ROOT}/{directory}");
        self.volumes.push(Volume {
            name: volume.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.into()),
                items: Some(vec![KeyToPath {
                    key: key.into(),
                    path: file.into(),
                    mode: None,
                }]),
                // Owner read-only; `fsGroup` makes it readable by a non-root sidecar.
                default_mode: Some(0o440),
                optional: Some(false),
            }),
            ..Volume::default()
        });
        self.mounts.push(VolumeMount {
            name: volume.into(),
            mount_path: mount_path.clone(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
        format!("{mount_path}/{file}")
    }

    fn mount_empty_dir(&mut self, volume: &str, path: &str) {
        self.volumes.push(Volume {
            name: volume.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
        self.mounts.push(VolumeMount {
            name: volume.into(),
            mount_path: path.into(),
            ..VolumeMount::default()
        });
    }

    fn mount_claim(&mut self, volume: &str, claim: &str, path: &str, read_only: bool) {
        self.mounts_claims = true;
        self.volumes.push(Volume {
            name: volume.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.into(),
                read_only: Some(read_only),
            }),
            ..Volume::default()
        });
        self.mounts.push(VolumeMount {
            name: volume.into(),
            mount_path: path.into(),
            read_only: Some(read_only),
            ..VolumeMount::default()
        });
    }

    fn env_value(&mut self, name: &str, value: String) {
        self.env.push(EnvVar {
            name: name.into(),
            value: Some(value),
            value_from: None,
        });
    }

    fn env_from_secret(&mut self, name: &str, secret: &str, key: &str) {
        self.env.push(EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.into(),
                    key: key.into(),
                    optional: Some(false),
                }),
                ..EnvVarSource::default()
            }),
        });
    }

    fn finish(mut self, pod: FinishedPod<'_>) -> Job {
        // The root filesystem is read-only; the sidecar's scratch space is an emptyDir.
        self.volumes.push(Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
        self.mounts.push(VolumeMount {
            name: "tmp".into(),
            mount_path: "/tmp".into(),
            ..VolumeMount::default()
        });
        self.env_value("TMPDIR", "/tmp".into());

        let (run_as_user, capabilities) = match pod.privileges {
            Privileges::Root(capabilities) => {
                (0, capabilities.iter().map(|c| c.to_string()).collect())
            }
            Privileges::Unprivileged => (UNPRIVILEGED_UID, Vec::new()),
        };
        let container = Container {
            name: SIDECAR_CONTAINER.into(),
            image: Some(pod.settings.image.clone()),
            image_pull_policy: pod.settings.image_pull_policy.clone(),
            command: Some(vec![cli::SIDECAR_BINARY.into()]),
            args: Some(pod.args),
            env: Some(self.env),
            volume_mounts: Some(self.mounts),
            resources: pod
                .pod_settings
                .and_then(|p| p.resources.clone())
                .or_else(|| pod.settings.default_resources.clone()),
            termination_message_path: Some(RESULT_FILE.into()),
            // The sidecar writes its JSON result there; logs are never mistaken for a result.
            termination_message_policy: Some("File".into()),
            security_context: Some(SecurityContext {
                allow_privilege_escalation: Some(false),
                privileged: Some(false),
                read_only_root_filesystem: Some(true),
                run_as_non_root: Some(run_as_user != 0),
                run_as_user: Some(run_as_user),
                run_as_group: Some(run_as_user),
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".into()]),
                    add: (!capabilities.is_empty()).then_some(capabilities),
                }),
                ..SecurityContext::default()
            }),
            ..Container::default()
        };
        let affinity = pod.node_name.map(|node| Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_fields: Some(vec![NodeSelectorRequirement {
                            key: "metadata.name".into(),
                            operator: "In".into(),
                            values: Some(vec![node]),
                        }]),
                        match_expressions: None,
                    }],
                }),
                preferred_during_scheduling_ignored_during_execution: None,
            }),
            ..Affinity::default()
        });
        let pod_settings = pod.pod_settings.cloned().unwrap_or_default();
        let pod_spec = PodSpec {
            containers: vec![container],
            volumes: Some(self.volumes),
            restart_policy: Some("Never".into()),
            // The sidecar talks to the gate, never to the Kubernetes API.
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            security_context: Some(PodSecurityContext {
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    localhost_profile: None,
                }),
                // fsGroup would change the group of every file on mounted claims: only without them.
                fs_group: (!self.mounts_claims).then_some(run_as_user),
                ..PodSecurityContext::default()
            }),
            affinity,
            hostname: pod.hostname,
            node_selector: (!pod_settings.node_selector.is_empty())
                .then_some(pod_settings.node_selector),
            tolerations: (!pod_settings.tolerations.is_empty()).then_some(pod_settings.tolerations),
            priority_class_name: pod_settings.priority_class_name,
            ..PodSpec::default()
        };
        Job {
            metadata: ObjectMeta {
                name: Some(pod.name),
                namespace: Some(pod.namespace),
                labels: Some(pod.labels.clone()),
                annotations: (!pod.annotations.is_empty()).then_some(pod.annotations),
                owner_references: pod.owner.map(|owner| vec![owner]),
                ..ObjectMeta::default()
            },
            spec: Some(JobSpec {
                // One attempt: a failed backup is reported, and the next scheduled run retries.
                backoff_limit: Some(0),
                active_deadline_seconds: Some(pod.deadline.as_secs().max(1)),
                // No ttlSecondsAfterFinished: the operator reads the result, then deletes old Jobs.
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(pod.labels),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(pod_spec),
                },
                ..JobSpec::default()
            }),
            status: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        BackupPlanSpec, BackupVolume, CopyMethod, DatabaseSource, Limits, Repository,
        RestoreDatabase, RestoreSpec, RestoreVolume,
    };
    use k8s_openapi::api::core::v1::Toleration;

    fn settings() -> JobSettings {
        JobSettings {
            image: "ghcr.io/neverwiped/sidecar:0.1.0".into(),
            image_pull_policy: Some("IfNotPresent".into()),
            default_resources: None,
        }
    }

    fn plan() -> BackupPlan {
        let mut plan = BackupPlan::new(
            "nightly",
            BackupPlanSpec {
                schedule: "30 2 * * *".into(),
                time_zone: "Europe/Berlin".into(),
                suspend: false,
                manual_trigger: None,
                repository: Repository {
                    url: "https://gate.example.com/shop".into(),
                    password_secret_ref: SecretKeyRef {
                        name: "repo".into(),
                        key: "password".into(),
                    },
                    credentials_secret_ref: Some(CredentialsSecretRef::new("gate")),
                    ca_secret_ref: Some(SecretKeyRef {
                        name: "gate-ca".into(),
                        key: "ca.crt".into(),
                    }),
                },
                volumes: vec![BackupVolume::claim("data")],
                copy_method: CopyMethod::Direct,
                volume_snapshot_class_name: None,
                databases: vec![],
                retention: None,
                maintenance: Default::default(),
                limits: Some(Limits {
                    upload_bytes_per_second: Some(5_000_000),
                }),
                deadline: "2h".into(),
                pod: Some(PodSettings {
                    tolerations: vec![Toleration {
                        key: Some("backup".into()),
                        operator: Some("Exists".into()),
                        ..Toleration::default()
                    }],
                    ..PodSettings::default()
                }),
            },
        );
        plan.metadata.namespace = Some("shop".into());
        plan.metadata.uid = Some("0b6d1c1e-0000-4000-8000-000000000001".into());
        plan.metadata.generation = Some(3);
        plan
    }

    fn run() -> BackupRun {
        BackupRun {
            trigger: RunTrigger::Schedule,
            scheduled_time: Some("2026-11-30T01:30:00Z".parse().unwrap()),
            manual_trigger: None,
            volumes: vec![
                BackupVolumeMount {
                    source_claim: "logs".into(),
                    mounted_claim: "logs".into(),
                    excludes: vec!["*.gz".into()],
                },
                BackupVolumeMount {
                    source_claim: "data".into(),
                    mounted_claim: "data".into(),
                    excludes: vec!["cache".into(), "/lost+found".into()],
                },
            ],
            node_name: Some("node-7".into()),
            deadline: SignedDuration::from_hours(2),
            remove_stale_locks: true,
        }
    }

    fn pod_spec(job: &Job) -> &PodSpec {
        job.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
    }

    fn container(job: &Job) -> &Container {
        &pod_spec(job).containers[0]
    }

    fn env_value<'a>(container: &'a Container, name: &str) -> Option<&'a EnvVar> {
        container
            .env
            .as_ref()
            .unwrap()
            .iter()
            .find(|e| e.name == name)
    }

    #[test]
    fn backup_job_runs_the_sidecar_with_the_documented_arguments() {
        let job = backup_job(&plan(), &run(), &settings());
        let container = container(&job);
        assert_eq!(
            container.command.as_deref(),
            Some(&["neverwiped-sidecar".to_string()][..])
        );
        assert_eq!(
            container.args.as_deref().unwrap(),
            [
                "backup",
                "/data/data",
                "/data/logs",
                "--repo",
                "rest:https://gate.example.com/shop",
                "--result-file",
                "/dev/termination-log",
                "--host",
                "shop/nightly",
                "--tag",
                "plan=nightly",
                "--exclude",
                "/data/data/**/cache",
                "--exclude",
                "/data/data/lost+found",
                "--exclude",
                "/data/logs/**/*.gz",
                "--limit-upload",
                "5000000",
                "--remove-locks-of-host",
                "nightly-d0997da5b47dbdb3",
                // Half the 2h deadline, at most 30 minutes.
                "--retry-lock",
                "1800s",
                "--init",
            ]
        );
        // The pod runs under that host name, which the sidecar records in its locks.
        assert_eq!(
            pod_spec(&job).hostname.as_deref(),
            Some("nightly-d0997da5b47dbdb3")
        );
        let alive = BackupRun {
            remove_stale_locks: false,
            ..run()
        };
        let job = backup_job(&plan(), &alive, &settings());
        assert!(!pod_spec(&job).containers[0]
            .args
            .as_ref()
            .unwrap()
            .contains(&"--remove-locks-of-host".to_string()));
        assert_eq!(
            pod_spec(&job).hostname.as_deref(),
            Some("nightly-d0997da5b47dbdb3")
        );
    }

    #[test]
    fn lock_host_names_are_dns_labels_that_differ_per_plan_and_stay_per_plan() {
        let name = lock_hostname("shop", "nightly");
        assert_eq!(name, lock_hostname("shop", "nightly"));
        assert_ne!(name, lock_hostname("shop2", "nightly"));
        assert_ne!(name, lock_hostname("shop", "nightly2"));
        for (namespace, plan) in [("shop", "nightly"), ("a", &"x.y".repeat(80)), ("a", "...")] {
            let host = lock_hostname(namespace, plan);
            assert!(host.len() <= 63, "{host}");
            assert!(
                host.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{host}"
            );
            assert!(!host.starts_with('-') && !host.ends_with('-'), "{host}");
        }
    }

    #[test]
    fn backup_job_mounts_volumes_read_only_at_their_claim_names() {
        let job = backup_job(&plan(), &run(), &settings());
        let pod = pod_spec(&job);
        let mounts = container(&job).volume_mounts.as_ref().unwrap();
        for (claim, path) in [("data", "/data/data"), ("logs", "/data/logs")] {
            let mount = mounts.iter().find(|m| m.mount_path == path).unwrap();
            assert_eq!(mount.read_only, Some(true));
            let volume = pod
                .volumes
                .as_ref()
                .unwrap()
                .iter()
                .find(|v| v.name == mount.name)
                .unwrap();
            let source = volume.persistent_volume_claim.as_ref().unwrap();
            assert_eq!(source.claim_name, claim);
            assert_eq!(source.read_only, Some(true));
        }
        assert!(mounts
            .iter()
            .any(|m| m.mount_path == "/tmp" && m.read_only.is_none()));
    }

    #[test]
    fn secrets_reach_the_sidecar_only_as_files_and_environment() {
        let job = backup_job(&plan(), &run(), &settings());
        let container = container(&job);
        assert_eq!(
            env_value(container, "NEVERWIPED_PASSWORD_FILE")
                .unwrap()
                .value
                .as_deref(),
            Some("/var/run/neverwiped/repository/password")
        );
        assert_eq!(
            env_value(container, "NEVERWIPED_GATE_PASSWORD_FILE")
                .unwrap()
                .value
                .as_deref(),
            Some("/var/run/neverwiped/gate/password")
        );
        assert_eq!(
            env_value(container, "NEVERWIPED_GATE_CA_FILE")
                .unwrap()
                .value
                .as_deref(),
            Some("/var/run/neverwiped/gate-ca/ca.crt")
        );
        let username = env_value(container, "NEVERWIPED_GATE_USERNAME").unwrap();
        let selector = username
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap();
        assert_eq!(
            (selector.name.as_str(), selector.key.as_str()),
            ("gate", "username")
        );

        let volumes = pod_spec(&job).volumes.as_ref().unwrap();
        let password = volumes
            .iter()
            .find(|v| v.name == "repository-password")
            .unwrap();
        let secret = password.secret.as_ref().unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("repo"));
        assert_eq!(secret.items.as_ref().unwrap()[0].key, "password");
        // No argument names a Secret's value, and none could: they are not known to the builder.
        assert!(container
            .args
            .as_ref()
            .unwrap()
            .iter()
            .all(|a| !a.contains("gate-ca") && !a.contains("repo ")));
    }

    #[test]
    fn backup_job_is_locked_down() {
        let job = backup_job(&plan(), &run(), &settings());
        let job_spec = job.spec.as_ref().unwrap();
        assert_eq!(job_spec.backoff_limit, Some(0));
        assert_eq!(job_spec.active_deadline_seconds, Some(7200));
        let pod = pod_spec(&job);
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        let pod_security = pod.security_context.as_ref().unwrap();
        assert_eq!(
            pod_security.seccomp_profile.as_ref().unwrap().type_,
            "RuntimeDefault"
        );
        assert_eq!(
            pod_security.fs_group, None,
            "fsGroup would chown the claims"
        );
        let container = container(&job);
        assert_eq!(
            container.termination_message_policy.as_deref(),
            Some("File")
        );
        let security = container.security_context.as_ref().unwrap();
        assert_eq!(security.read_only_root_filesystem, Some(true));
        assert_eq!(security.allow_privilege_escalation, Some(false));
        let capabilities = security.capabilities.as_ref().unwrap();
        assert_eq!(capabilities.drop.as_deref(), Some(&["ALL".to_string()][..]));
        assert_eq!(
            capabilities.add.as_deref(),
            Some(&["DAC_READ_SEARCH".to_string()][..])
        );
    }

    #[test]
    fn backup_job_links_to_its_plan_and_places_direct_reads_on_the_volumes_node() {
        let job = backup_job(&plan(), &run(), &settings());
        assert_eq!(job.metadata.name.as_deref(), Some("nightly-29933370"));
        assert_eq!(job.metadata.namespace.as_deref(), Some("shop"));
        let labels = job.metadata.labels.as_ref().unwrap();
        assert_eq!(labels.get(LABEL_PLAN).map(String::as_str), Some("nightly"));
        assert_eq!(
            labels.get(LABEL_OPERATION).map(String::as_str),
            Some("backup")
        );
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("BackupPlan", "nightly")
        );
        assert_eq!(owner.controller, Some(true));
        let annotations = job.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            annotations[ANNOTATION_SCHEDULED_TIME],
            "2026-11-30T01:30:00Z"
        );
        assert_eq!(annotations[ANNOTATION_TRIGGER], "Schedule");

        let pod = pod_spec(&job);
        let terms = &pod
            .affinity
            .as_ref()
            .unwrap()
            .node_affinity
            .as_ref()
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap()
            .node_selector_terms;
        let field = &terms[0].match_fields.as_ref().unwrap()[0];
        assert_eq!(
            (field.key.as_str(), field.values.as_deref()),
            ("metadata.name", Some(&["node-7".to_string()][..]))
        );
        assert_eq!(
            pod.tolerations.as_ref().unwrap()[0].key.as_deref(),
            Some("backup")
        );
    }

    #[test]
    fn job_names_fit_a_label_value_and_differ_per_run() {
        let mut plan = plan();
        plan.metadata.name = Some("a".repeat(80));
        let name = backup_job_name(&plan, &run());
        assert!(name.len() <= 63, "{name}");
        assert!(name.ends_with("-29933370"));
        let manual = BackupRun {
            trigger: RunTrigger::Manual,
            scheduled_time: None,
            ..run()
        };
        assert!(backup_job_name(&plan, &manual).ends_with("-manual-3"));
    }

    #[test]
    fn database_only_backup_runs_unprivileged_and_passes_credentials_by_reference() {
        let mut plan = plan();
        plan.spec.volumes.clear();
        plan.spec.databases = vec![
            DatabaseSource {
                name: "orders".into(),
                engine: DatabaseType::Postgresql,
                host: "pg.shop.svc".into(),
                port: None,
                credentials_secret_ref: CredentialsSecretRef::new("pg-backup"),
                databases: vec![],
            },
            DatabaseSource {
                name: "shop-db".into(),
                engine: DatabaseType::Mariadb,
                host: "mariadb".into(),
                port: Some(3307),
                credentials_secret_ref: CredentialsSecretRef::new("mariadb-backup"),
                databases: vec!["shop".into(), "audit".into()],
            },
        ];
        let run = BackupRun {
            volumes: vec![],
            node_name: None,
            ..run()
        };
        let job = backup_job(&plan, &run, &settings());
        let container = container(&job);
        let args = container.args.as_ref().unwrap();
        let databases: Vec<_> = args
            .windows(2)
            .filter(|w| w[0] == "--database")
            .map(|w| w[1].as_str())
            .collect();
        assert_eq!(
            databases,
            [
                "orders=postgresql://$(NEVERWIPED_DB_USERNAME_ORDERS)@pg.shop.svc:5432",
                "shop-db=mariadb://$(NEVERWIPED_DB_USERNAME_SHOP_DB)@mariadb:3307/shop",
                "shop-db=mariadb://$(NEVERWIPED_DB_USERNAME_SHOP_DB)@mariadb:3307/audit",
            ]
        );
        // One password file per entry, however many of its databases are dumped.
        let password_files: Vec<_> = args
            .windows(2)
            .filter(|w| w[0] == "--database-password-file")
            .map(|w| w[1].split('=').next().unwrap())
            .collect();
        assert_eq!(password_files, ["orders", "shop-db"]);
        assert!(args.windows(2).any(|w| w
            == [
                "--database-password-file",
                "orders=/var/run/neverwiped/databases/orders/password"
            ]));
        // The variable the URI names is defined, from the Secret, before use.
        let username = env_value(container, "NEVERWIPED_DB_USERNAME_ORDERS").unwrap();
        assert_eq!(
            username
                .value_from
                .as_ref()
                .unwrap()
                .secret_key_ref
                .as_ref()
                .unwrap()
                .name,
            "pg-backup"
        );

        let security = container.security_context.as_ref().unwrap();
        assert_eq!(security.run_as_non_root, Some(true));
        assert_eq!(security.capabilities.as_ref().unwrap().add, None);
        assert_eq!(
            pod_spec(&job).security_context.as_ref().unwrap().fs_group,
            Some(UNPRIVILEGED_UID)
        );
    }

    fn restore() -> Restore {
        let mut restore = Restore::new(
            "bring-back",
            RestoreSpec {
                backup_plan_name: "nightly".into(),
                snapshot: "latest".into(),
                taken_before: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    "2026-11-29T00:00:00Z".parse().unwrap(),
                )),
                volumes: vec![RestoreVolume {
                    source_claim_name: "data".into(),
                    target_claim_name: "data-restored".into(),
                    create_claim: None,
                    includes: vec!["/uploads/2026".into()],
                }],
                databases: vec![RestoreDatabase {
                    name: "orders".into(),
                    engine: None,
                    host: "pg-new".into(),
                    port: None,
                    credentials_secret_ref: CredentialsSecretRef::new("pg-admin"),
                    on_non_empty_target: NonEmptyTargetPolicy::Overwrite,
                }],
                pod: None,
            },
        );
        restore.metadata.namespace = Some("shop".into());
        restore.metadata.uid = Some("0b6d1c1e-0000-4000-8000-000000000002".into());
        restore
    }

    #[test]
    fn restore_job_writes_each_volume_into_its_target_claim() {
        let run = RestoreRun {
            deadline: SignedDuration::from_hours(12),
            database_types: BTreeMap::from([("orders".to_string(), DatabaseType::Postgresql)]),
        };
        let job = restore_job(&restore(), &plan(), &run, &settings());
        assert_eq!(job.metadata.name.as_deref(), Some("bring-back-restore"));
        let container = container(&job);
        assert_eq!(
            container.args.as_deref().unwrap(),
            [
                "restore",
                "latest",
                "--repo",
                "rest:https://gate.example.com/shop",
                "--result-file",
                "/dev/termination-log",
                "--target",
                "/restore",
                "--include",
                "/data/data/uploads/2026",
                "--host",
                "shop/nightly",
                "--before",
                "2026-11-29T00:00:00Z",
                "--database",
                "orders=postgresql://$(NEVERWIPED_DB_USERNAME_ORDERS)@pg-new:5432",
                "--database-password-file",
                "orders=/var/run/neverwiped/databases/orders/password",
                "--overwrite-database",
                "orders",
            ]
        );
        let mount = container
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.mount_path == "/restore/data/data")
            .unwrap();
        assert_eq!(mount.read_only, Some(false));
        let capabilities = container
            .security_context
            .as_ref()
            .unwrap()
            .capabilities
            .as_ref()
            .unwrap();
        assert_eq!(
            capabilities.add.as_deref().unwrap(),
            ["CHOWN".to_string(), "DAC_OVERRIDE".into(), "FOWNER".into()]
        );
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(owner.kind, "Restore");
        assert_eq!(
            job.metadata.labels.as_ref().unwrap()[LABEL_RESTORE],
            "bring-back"
        );
        // The plan's placement applies to its restores too.
        assert!(pod_spec(&job).tolerations.is_some());
    }
}
