//! The Jobs the operator runs: a BackupPlan's backup and a Restore's restore, as plain values.
//!
//! Everything the sidecar needs goes through the pod spec: arguments (never a secret), Secrets as
//! files or environment variables, volumes, the deadline. The pod has no Kubernetes API access and
//! as few privileges as reading (or writing back) other users' files allows.
//!
//! One module per Job: [`backup`], [`copy`], [`copy_prune`] (a destination's retention),
//! [`drill`] (a restore drill), [`hooks`] (a run's hooks around its VolumeSnapshots),
//! [`maintenance`] (prune, check), [`restore`]; [`pod`] builds the pod they share, [`extras`]
//! the stream and hook containers beside its sidecar. This module holds the names, labels and annotations they are known by.

mod backup;
mod copy;
mod copy_prune;
mod describe;
mod drill;
mod extras;
mod hooks;
mod maintenance;
mod pod;
mod restore;

#[cfg(test)]
mod annotation_tests;
#[cfg(test)]
mod copy_prune_tests;
#[cfg(test)]
mod copy_tests;
#[cfg(test)]
mod drill_tests;
#[cfg(test)]
mod golden_tests;
#[cfg(test)]
mod restore_tests;
#[cfg(test)]
mod selection_tests;
#[cfg(test)]
mod streams_tests;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ResourceRequirements;

use neverwiped_contract::location::{RepositoryLocation, RestLocation};

use crate::api::{DatabaseType, RunTrigger};

pub use backup::{backup_job, backup_job_name, keep_rules, BackupRun, BackupVolumeMount};
pub use copy::{copy_destination_of, copy_job, copy_job_name, CopyRun, COPY_OPERATION, LABEL_COPY};
pub use copy_prune::{
    copy_prune_destination_of, copy_prune_job, copy_prune_job_name, CopyPruneJob, CopyPruneRun,
};
pub use describe::{describe_job, describe_job_name};
pub use drill::{
    drill_job, drill_job_name, drill_run_of, is_drill_job, DrillRun, ANNOTATION_DRILL_ROUND,
    ANNOTATION_VERIFY_REQUEST, DRILL_OPERATION, SCRATCH_ROOT,
};
pub use hooks::{
    hook_phase_of, hooks_deadline, hooks_job, hooks_job_name, HooksRun, HOOKS_OPERATION,
    LABEL_HOOK_PHASE,
};
pub use maintenance::{
    maintenance_job, maintenance_job_name, password_copy, password_copy_name, remote_job_of,
    MaintenanceKind, MaintenanceRun, PasswordCopy, COPY_CA_KEY, COPY_PASSWORD_KEY,
};
pub use pod::TOOLS_CONTAINER;
pub use restore::{restore_job, restore_job_name, RestoreRun};

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
/// Label: the namespace of the BackupPlan a Job in the operator's own namespace belongs to (a
/// protected plan's prune, [`maintenance`]); such a Job has no owner reference (none may cross
/// namespaces) but [`ANNOTATION_PLAN_UID`].
pub const LABEL_PLAN_NAMESPACE: &str = "neverwiped.io/plan-namespace";
/// Annotation: the uid of the BackupPlan a Job in the operator's own namespace belongs to.
pub const ANNOTATION_PLAN_UID: &str = "neverwiped.io/plan-uid";
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
/// Annotation: the host (and port) of the repository a Job reads or writes
/// ([`neverwiped_contract::location::RestLocation::host`]), which the per-host limit counts. An annotation: a host with a port is no label value.
pub const ANNOTATION_REPOSITORY_HOST: &str = "neverwiped.io/repository-host";
/// Annotation: the node a Job's pod must run on (it reads volumes attached there). An
/// annotation: a node name may be longer than a label value.
pub const ANNOTATION_NODE: &str = "neverwiped.io/node";

/// The value of `app.kubernetes.io/managed-by` on everything the operator creates.
pub const MANAGED_BY: &str = "neverwiped-operator";
/// Kubernetes copies a Job's name into a label value of its pods: at most 63 characters.
const MAX_JOB_NAME_LEN: usize = 63;
/// A pod's host name is a DNS label.
const MAX_HOSTNAME_LEN: usize = 63;

/// Operator-wide settings of the Jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSettings {
    /// The sidecar image.
    pub image: String,
    /// The image of restore drills (the sidecar with the database servers a drill loads dumps
    /// into); the sidecar image when `None`.
    pub drill_image: Option<String>,
    /// The drill image's pull policy; the sidecar's when `None`.
    pub drill_image_pull_policy: Option<String>,
    /// `Always`, `IfNotPresent` or `Never`; Kubernetes' default when `None`.
    pub image_pull_policy: Option<String>,
    /// Resources of the sidecar container when the plan sets none.
    pub default_resources: Option<ResourceRequirements>,
    /// The admin's maintenance credentials and protection windows.
    pub protection: crate::protection::Protection,
}

/// The key that opened `plan`'s repository last time (`status.repository.keyId`), passed to its
/// Jobs as `--key-hint` so that they try it first. A plan without one gets no hint, and Jobs the
/// same arguments as before the hint existed.
pub fn key_hint(plan: &crate::api::BackupPlan) -> Option<&str> {
    let key_id = plan.status.as_ref()?.key_id()?;
    neverwiped_contract::is_key_id(key_id).then_some(key_id)
}

/// The sidecar's `--repo` for a plan's repository URL `url`, given as a container's arguments carry
/// it ([`crate::expansion::literal`]: every `$` doubled, which Kubernetes' expansion undoes; a
/// doubled `$` keeps a URL valid). Admission has parsed the URL, so this parse succeeds; were it to
/// fail, the text would go as written, which the sidecar refuses (`rest:` missing) rather than
/// reading a folder of that name.
fn repository_arg(url: &str) -> RepositoryLocation {
    RestLocation::parse(url).map_or_else(
        |_| RepositoryLocation::Local(url.to_owned()),
        RepositoryLocation::from,
    )
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

fn job_name(prefix: &str, suffix: &str) -> String {
    let room = MAX_JOB_NAME_LEN - suffix.len() - 1;
    let prefix: String = prefix.chars().take(room).collect();
    format!("{}-{suffix}", prefix.trim_end_matches(['-', '.']))
}

/// How long a Job waits for another process's repository lock (another plan's prune or backup of
/// a shared repository) before it fails with `RepositoryLocked`: half its deadline, at most 30
/// minutes.
fn lock_wait(deadline: SignedDuration) -> String {
    let seconds = (deadline.as_secs() / 2).clamp(0, 30 * 60);
    format!("{seconds}s")
}

/// A run trigger annotation this operator cannot read (edited by hand, or written by another
/// version): reported, never taken for a scheduled run without a word.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("annotation {ANNOTATION_TRIGGER} is {0:?}, not one of Schedule, CatchUp, Manual")]
pub struct UnknownTrigger(pub Option<String>);

/// A run trigger from its name in annotations (see [`trigger_name`]).
pub fn parse_trigger(name: Option<&str>) -> Result<RunTrigger, UnknownTrigger> {
    match name {
        Some("Schedule") => Ok(RunTrigger::Schedule),
        Some("CatchUp") => Ok(RunTrigger::CatchUp),
        Some("Manual") => Ok(RunTrigger::Manual),
        other => Err(UnknownTrigger(other.map(str::to_owned))),
    }
}

/// The trigger a Job of a plan was created for, from its annotation.
pub fn run_trigger_of(job: &Job) -> Result<RunTrigger, UnknownTrigger> {
    parse_trigger(job_annotation(job, ANNOTATION_TRIGGER))
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
