//! The prune and check Jobs of a plan: no volumes, a non-root user without capabilities; a
//! protected plan's prune in the operator's namespace with the admin's maintenance login.

use crate::expansion::literal;
use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use neverwiped_contract::cli::{self, CheckArgs, PruneArgs};

use super::backup::keep_rules;
use super::pod::{FinishedPod, PodBuilder, Privileges};
use super::{
    common_labels, job_name, lock_hostname, lock_wait, trigger_name, JobSettings,
    ANNOTATION_DEADLINE, ANNOTATION_PLAN_UID, ANNOTATION_SCHEDULED_TIME, ANNOTATION_TRIGGER,
    LABEL_PLAN, LABEL_PLAN_NAMESPACE, RESULT_FILE,
};
use crate::api::{BackupPlan, Repository, RunKind, RunTrigger, SecretKeyRef};
use crate::protection::MaintenanceCredentials;

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
    /// As for [`super::BackupRun::remove_stale_locks`].
    pub remove_stale_locks: bool,
}

/// The Job's name for a prune or check: one per scheduled time, as for backups. A protected
/// plan's prune runs in the operator's namespace among every namespace's: its name also carries
/// the plan's namespace and a hash of `namespace/plan`.
pub fn maintenance_job_name(
    plan: &BackupPlan,
    run: &MaintenanceRun,
    settings: &JobSettings,
) -> String {
    let minutes = run.scheduled_time.as_second() / 60;
    let namespace = plan.namespace().unwrap_or_default();
    if runs_remote(plan, run.kind, settings) {
        let hash = plan_hash(&namespace, &plan.name_any());
        let suffix = format!("{}-{minutes}-{hash:08x}", run.kind.label());
        return job_name(&format!("{namespace}-{}", plan.name_any()), &suffix);
    }
    let suffix = format!("{}-{minutes}", run.kind.label());
    job_name(&plan.name_any(), &suffix)
}

/// Whether this kind of maintenance of `plan` runs in the operator's namespace with the admin's
/// login: a prune of a plan whose repository has maintenance credentials.
fn runs_remote(plan: &BackupPlan, kind: MaintenanceKind, settings: &JobSettings) -> bool {
    let namespace = plan.namespace().unwrap_or_default();
    kind == MaintenanceKind::Prune
        && settings
            .protection
            .for_plan(&namespace, &plan.spec.repository.url)
            .credentials
            .is_some()
}

/// 32 bits of FNV-1a over `namespace/plan`: stable across releases.
pub(super) fn plan_hash(namespace: &str, plan: &str) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in format!("{namespace}/{plan}").bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// The Secret in the operator's namespace that holds a copy of a protected plan's repository
/// password (and CA) for one prune Job, owned by that Job.
pub fn password_copy_name(job_name: &str) -> String {
    format!("{job_name}-repository")
}

/// What the operator copies for a protected plan's prune Job: the plan's password (and CA) from
/// its namespace into a Secret beside the Job, created after the Job and owned by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswordCopy {
    /// The copy: in the operator's namespace.
    pub name: String,
    pub namespace: String,
    /// The Job that owns it.
    pub job_name: String,
    /// Where the plan's Secrets are.
    pub source_namespace: String,
    pub password: SecretKeyRef,
    pub ca: Option<SecretKeyRef>,
}

/// The copy `job` (built by [`maintenance_job`] for `plan`) needs; `None` for a Job in the plan's
/// own namespace, which mounts the plan's Secrets.
pub fn password_copy(plan: &BackupPlan, job: &Job) -> Option<PasswordCopy> {
    let source_namespace = plan.namespace().unwrap_or_default();
    let namespace = job.namespace()?;
    if namespace == source_namespace {
        return None;
    }
    let job_name = job.name_any();
    let repository = &plan.spec.repository;
    Some(PasswordCopy {
        name: password_copy_name(&job_name),
        namespace,
        job_name,
        source_namespace,
        password: repository.password_secret_ref.clone(),
        ca: repository.ca_secret_ref.clone(),
    })
}

/// Builds the Job that prunes or checks `plan`'s repository. It reads no volumes: it runs as a
/// non-root user without capabilities, under the plan's lock host name so that the locks of a
/// killed prune are cleared like a killed backup's.
///
/// A plan whose repository has maintenance credentials ([`crate::protection`]) is pruned from the
/// operator's namespace, out of its tenant's reach: with the admin's login, a copy of the
/// repository password ([`password_copy`]), the plan's keep rules and the admin's window, and none
/// of the plan's pod settings. Any other plan's prune runs in its namespace with its own login, as
/// its backups forget; the window applies to both.
pub fn maintenance_job(plan: &BackupPlan, run: &MaintenanceRun, settings: &JobSettings) -> Job {
    let spec = &plan.spec;
    let plan_name = plan.name_any();
    let plan_namespace = plan.namespace().unwrap_or_default();
    let protection = settings
        .protection
        .for_plan(&plan_namespace, &spec.repository.url);
    let remote = runs_remote(plan, run.kind, settings);
    let name = maintenance_job_name(plan, run, settings);
    let mut pod = PodBuilder::default();
    mount_secrets(
        &mut pod,
        &spec.repository,
        protection.credentials.filter(|_| remote),
        &name,
    );
    let hostname = lock_hostname(&plan_namespace, &plan_name);
    let repository = super::repository_arg(&literal(&spec.repository.url));
    let remove_locks_of_host = run.remove_stale_locks.then(|| hostname.clone());
    let mut args = match run.kind {
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
            // The same host name as the plan's backups, whose snapshots the result lists.
            host: Some(format!("{plan_namespace}/{plan_name}")),
            // A protected plan's retention runs here; any other's with its backups. A suspicious
            // night pauses it either way.
            keep: crate::suspicion::retention(
                plan,
                if remote {
                    keep_rules(spec.retention.as_ref())
                } else {
                    Default::default()
                },
            ),
            protect_within: protection.protect_within(),
        }
        .to_args(),
    };
    cli::push_key_hint(&mut args, super::key_hint(plan));
    let mut labels = common_labels(run.kind.label());
    labels.insert(LABEL_PLAN.into(), plan_name);
    let mut annotations = BTreeMap::from([
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
    let (namespace, owner, pod_settings) = if remote {
        labels.insert(LABEL_PLAN_NAMESPACE.into(), plan_namespace);
        let uid = plan.metadata.uid.clone().unwrap_or_default();
        annotations.insert(ANNOTATION_PLAN_UID.into(), uid);
        (settings.protection.namespace.clone(), None, None)
    } else {
        let owner = crate::owner::controlled_by(plan);
        (plan_namespace, owner, spec.pod.as_ref())
    };
    pod.finish(FinishedPod {
        name,
        namespace,
        labels,
        annotations,
        owner,
        args,
        privileges: Privileges::Unprivileged,
        deadline: run.deadline,
        node_name: None,
        repository_url: &plan.spec.repository.url,
        hostname: Some(hostname),
        pod_settings,
        settings,
    })
}

/// Mounts `repository`'s Secrets; or, for a Job with the admin's `credentials`, those and the
/// password copy of the Job `job_name`.
pub(super) fn mount_secrets(
    pod: &mut PodBuilder,
    repository: &Repository,
    credentials: Option<&MaintenanceCredentials>,
    job_name: &str,
) {
    let Some(credentials) = credentials else {
        pod.mount_repository(
            &repository.password_secret_ref,
            repository.credentials_secret_ref.as_ref(),
            repository.ca_secret_ref.as_ref(),
        );
        return;
    };
    let copy = password_copy_name(job_name);
    let key = |key: &str| SecretKeyRef {
        name: copy.clone(),
        key: key.into(),
    };
    let ca = repository.ca_secret_ref.as_ref().map(|_| key(COPY_CA_KEY));
    pod.mount_repository(
        &key(COPY_PASSWORD_KEY),
        Some(&credentials.secret_ref()),
        ca.as_ref(),
    );
}

/// The keys of a [`PasswordCopy`].
pub const COPY_PASSWORD_KEY: &str = "password";
pub const COPY_CA_KEY: &str = "ca.crt";

/// Whether `job` is a prune of `plan` in the operator's namespace: labelled with the plan's
/// namespace and name, and annotated with its uid (a label alone can be copied by whoever may
/// create Jobs there, who is the admin).
pub fn remote_job_of(job: &Job, plan: &BackupPlan) -> bool {
    let labels = job.labels();
    let uid = plan.metadata.uid.as_deref();
    labels.get(LABEL_PLAN_NAMESPACE).map(String::as_str) == plan.namespace().as_deref()
        && labels.get(LABEL_PLAN).map(String::as_str) == plan.metadata.name.as_deref()
        && uid.is_some()
        && super::job_annotation(job, ANNOTATION_PLAN_UID) == uid
}
