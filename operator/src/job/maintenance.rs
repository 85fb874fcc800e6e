//! The prune and check Jobs of a plan: no volumes, a non-root user without capabilities.

use crate::expansion::literal;
use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use kube::{Resource, ResourceExt};
use neverwiped_contract::cli::{self, CheckArgs, PruneArgs};

use super::pod::{FinishedPod, PodBuilder, Privileges};
use super::{
    common_labels, job_name, lock_hostname, lock_wait, trigger_name, JobSettings,
    ANNOTATION_DEADLINE, ANNOTATION_SCHEDULED_TIME, ANNOTATION_TRIGGER, LABEL_PLAN, RESULT_FILE,
};
use crate::api::{BackupPlan, RunKind, RunTrigger};

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

/// The Job's name for a prune or check: one per scheduled time, as for backups.
pub fn maintenance_job_name(plan: &BackupPlan, run: &MaintenanceRun) -> String {
    let suffix = format!(
        "{}-{}",
        run.kind.label(),
        run.scheduled_time.as_second() / 60
    );
    job_name(&plan.name_any(), &suffix)
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
    let repository = literal(&cli::rest_repository(&spec.repository.url));
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
            host: Some(format!("{namespace}/{plan_name}")),
            keep: crate::suspicion::retention(plan, Default::default()),
            protect_within: None,
        }
        .to_args(),
    };
    cli::push_key_hint(&mut args, super::key_hint(plan));
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
        repository_url: &plan.spec.repository.url,
        hostname: Some(hostname),
        pod_settings: spec.pod.as_ref(),
        settings,
    })
}
