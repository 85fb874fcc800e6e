//! The prune Job of one destination of `spec.copies` that has `retention`: forget the plan's
//! snapshots there by the destination's keep rules, then prune. The never-wiped rules apply as to
//! the plan's own prune, for the destination's repository: where maintenance credentials cover
//! its URL, the Job runs in the operator's namespace with the admin's login and a copy of the
//! destination's password; elsewhere in the plan's namespace with the destination's own login.
//! The admin's window binds both, and a suspicious night leaves it without keep rules.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use neverwiped_contract::cli::PruneArgs;

use super::backup::keep_rules;
use super::maintenance::{mount_secrets, plan_hash, PasswordCopy};
use super::pod::{FinishedPod, PodBuilder, Privileges};
use super::{
    common_labels, job_name, lock_hostname, lock_wait, password_copy_name, trigger_name,
    JobSettings, ANNOTATION_DEADLINE, ANNOTATION_PLAN_UID, ANNOTATION_SCHEDULED_TIME,
    ANNOTATION_TRIGGER, LABEL_COPY, LABEL_OPERATION, LABEL_PLAN, LABEL_PLAN_NAMESPACE, RESULT_FILE,
};
use crate::api::{BackupPlan, CopyDestination, RunKind, RunTrigger};
use crate::expansion::literal;

/// One prune of a destination: what the reconciler decided.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyPruneRun {
    pub trigger: RunTrigger,
    /// The plan's prune time it runs for: one Job per destination and time.
    pub scheduled_time: Timestamp,
    pub deadline: SignedDuration,
    /// Removes the locks of the plan's lock host name at the destination (a killed copy's), when
    /// no pod of the plan is alive.
    pub remove_stale_locks: bool,
}

/// A destination's prune Job, and the password copy it mounts when it runs in the operator's
/// namespace (created after the Job, owned by it).
#[derive(Debug, Clone)]
pub struct CopyPruneJob {
    pub job: Job,
    pub password_copy: Option<PasswordCopy>,
}

/// The destination a prune Job of a plan prunes: `None` for any other Job (the plan's own prune
/// carries no destination).
pub fn copy_prune_destination_of(job: &Job) -> Option<&str> {
    let labels = job.metadata.labels.as_ref()?;
    if labels.get(LABEL_OPERATION).map(String::as_str) != Some(RunKind::Prune.label()) {
        return None;
    }
    labels.get(LABEL_COPY).map(String::as_str)
}

/// The Job's name: `<plan>-copy-<name>-prune-<minutes>` in the plan's namespace; in the
/// operator's, among every namespace's, the plan's namespace leads and a hash of
/// `namespace/plan/name` ends it.
pub fn copy_prune_job_name(
    plan: &BackupPlan,
    destination: &str,
    scheduled_time: Timestamp,
    remote: bool,
) -> String {
    let minutes = scheduled_time.as_second() / 60;
    if !remote {
        return super::copy_job_name(plan, destination, &format!("prune-{minutes}"));
    }
    let namespace = plan.namespace().unwrap_or_default();
    let hash = plan_hash(&namespace, &format!("{}/{destination}", plan.name_any()));
    let prefix = format!("{namespace}-{}-copy-{destination}", plan.name_any());
    job_name(&prefix, &format!("prune-{minutes}-{hash:08x}"))
}

/// Builds the prune Job of `destination` (which has `retention`; without it the Job keeps every
/// snapshot and only frees unused data). Like the plan's prune: no volumes, a non-root user
/// without capabilities, the plan's lock host name; `--host NAMESPACE/PLAN` so that only the
/// plan's copies are forgotten.
pub fn copy_prune_job(
    plan: &BackupPlan,
    destination: &CopyDestination,
    run: &CopyPruneRun,
    settings: &JobSettings,
) -> CopyPruneJob {
    let plan_name = plan.name_any();
    let plan_namespace = plan.namespace().unwrap_or_default();
    let target = &destination.repository;
    let protection = settings.protection.for_plan(&plan_namespace, &target.url);
    let remote = protection.credentials.is_some();
    let name = copy_prune_job_name(plan, &destination.name, run.scheduled_time, remote);
    let mut pod = PodBuilder::default();
    mount_secrets(
        &mut pod,
        target,
        protection.credentials.filter(|_| remote),
        &name,
    );
    let hostname = lock_hostname(&plan_namespace, &plan_name);
    let args = PruneArgs {
        repository: super::repository_arg(&literal(&target.url)),
        result_file: RESULT_FILE.into(),
        remove_locks_of_host: run.remove_stale_locks.then(|| hostname.clone()),
        retry_lock: Some(lock_wait(run.deadline)),
        host: Some(format!("{plan_namespace}/{plan_name}")),
        // No backup writes to a destination: its retention runs here only, paused by a
        // suspicious night as the plan's.
        keep: crate::suspicion::retention(plan, keep_rules(destination.retention.as_ref())),
        protect_within: protection.protect_within(),
    }
    .to_args();
    let mut labels = common_labels(RunKind::Prune.label());
    labels.insert(LABEL_PLAN.into(), plan_name);
    labels.insert(LABEL_COPY.into(), destination.name.clone());
    let mut annotations = BTreeMap::from([
        (
            ANNOTATION_TRIGGER.to_owned(),
            trigger_name(run.trigger).to_owned(),
        ),
        (ANNOTATION_DEADLINE.to_owned(), plan.spec.deadline.clone()),
        (
            ANNOTATION_SCHEDULED_TIME.to_owned(),
            run.scheduled_time.to_string(),
        ),
    ]);
    let (namespace, owner, pod_settings, password_copy) = if remote {
        labels.insert(LABEL_PLAN_NAMESPACE.into(), plan_namespace.clone());
        let uid = plan.metadata.uid.clone().unwrap_or_default();
        annotations.insert(ANNOTATION_PLAN_UID.into(), uid);
        let namespace = settings.protection.namespace.clone();
        let copy = PasswordCopy {
            name: password_copy_name(&name),
            namespace: namespace.clone(),
            job_name: name.clone(),
            source_namespace: plan_namespace,
            password: target.password_secret_ref.clone(),
            ca: target.ca_secret_ref.clone(),
        };
        (namespace, None, None, Some(copy))
    } else {
        let owner = crate::owner::controlled_by(plan);
        (plan_namespace, owner, plan.spec.pod.as_ref(), None)
    };
    let job = pod.finish(FinishedPod {
        name,
        namespace,
        labels,
        annotations,
        owner,
        args,
        privileges: Privileges::Unprivileged,
        deadline: run.deadline,
        node_name: None,
        repository_url: &target.url,
        hostname: Some(hostname),
        pod_settings,
        settings,
    });
    CopyPruneJob { job, password_copy }
}
