//! The copy Job of a plan to one destination of `spec.copies`: the sidecar's `copy` from the
//! plan's repository to the destination, in the plan's namespace, reading no volumes.
//!
//! The destination is the Job's `--repo` (its password, login and CA as a backup's); the plan's
//! repository is `--from-repo`, its password, login and CA mounted as the `NEVERWIPED_FROM_*`
//! files and variables. No secret is ever an argument.

use std::collections::BTreeMap;

use jiff::SignedDuration;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use neverwiped_contract::cli::CopyArgs;

use super::pod::{FinishedPod, PodBuilder, Privileges};
use super::{
    common_labels, job_name, lock_hostname, lock_wait, JobSettings, ANNOTATION_DEADLINE,
    LABEL_PLAN, RESULT_FILE,
};
use crate::api::{BackupPlan, CopyDestination};
use crate::expansion::literal;

/// Label: the destination (its name in `spec.copies`) a copy Job writes to.
pub const LABEL_COPY: &str = "neverwiped.io/copy";
/// The `neverwiped.io/operation` label of copy Jobs.
pub const COPY_OPERATION: &str = "copy";

/// One copy of a plan's snapshots to a destination: what the reconciler decided.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyRun {
    /// What the run is for, as the end of its Job's name: the first 8 hex digits of the newest
    /// snapshot it copies (after a backup), or the scheduled minute (a `schedule`): one Job per
    /// snapshot or per scheduled time, so a second create after a restart fails instead of
    /// running twice.
    pub suffix: String,
    pub deadline: SignedDuration,
}

/// `<plan>-copy-<name>-<suffix>`, within a Job name's 63 characters. When the plan's and the
/// destination's names are cut, a hash of both keeps two destinations apart.
pub fn copy_job_name(plan: &BackupPlan, destination: &str, suffix: &str) -> String {
    let prefix = format!("{}-copy-{destination}", plan.name_any());
    let name = job_name(&prefix, suffix);
    if name.len() < prefix.len() + suffix.len() + 1 {
        let hash = name_hash(&prefix);
        return job_name(&prefix, &format!("{hash:08x}-{suffix}"));
    }
    name
}

/// 32 bits of FNV-1a: stable across releases.
fn name_hash(text: &str) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in text.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// Builds the Job that copies the plan's snapshots (its host `NAMESPACE/PLAN`) that
/// `destination` lacks. It runs as the plan's prunes do: non-root, no capabilities, the plan's
/// pod settings, under the plan's lock host name (so a killed copy's locks are cleared as a
/// killed backup's). The destination's host is the one the per-host limit counts.
pub fn copy_job(
    plan: &BackupPlan,
    destination: &CopyDestination,
    run: &CopyRun,
    settings: &JobSettings,
) -> Job {
    let spec = &plan.spec;
    let plan_name = plan.name_any();
    let namespace = plan.namespace().unwrap_or_default();
    let mut pod = PodBuilder::default();
    let target = &destination.repository;
    pod.mount_repository(
        &target.password_secret_ref,
        target.credentials_secret_ref.as_ref(),
        target.ca_secret_ref.as_ref(),
    );
    pod.mount_source_repository(
        &spec.repository.password_secret_ref,
        spec.repository.credentials_secret_ref.as_ref(),
        spec.repository.ca_secret_ref.as_ref(),
    );
    let args = CopyArgs {
        repository: super::repository_arg(&literal(&target.url)),
        result_file: RESULT_FILE.into(),
        from_repository: super::repository_arg(&literal(&spec.repository.url)),
        host: format!("{namespace}/{plan_name}"),
        // A new destination is created with its own password, as a plan's first backup does.
        init: true,
        // A destination with retention forgets snapshots the plan still holds: they are not
        // sent again.
        after_newest_copy: destination.retention.is_some(),
        retry_lock: Some(lock_wait(run.deadline)),
    }
    .to_args();
    let mut labels = common_labels(COPY_OPERATION);
    labels.insert(LABEL_PLAN.into(), plan_name.clone());
    labels.insert(LABEL_COPY.into(), destination.name.clone());
    let annotations = BTreeMap::from([(ANNOTATION_DEADLINE.to_owned(), spec.deadline.clone())]);
    pod.finish(FinishedPod {
        name: copy_job_name(plan, &destination.name, &run.suffix),
        namespace: namespace.clone(),
        labels,
        annotations,
        owner: crate::owner::controlled_by(plan),
        args,
        privileges: Privileges::Unprivileged,
        deadline: run.deadline,
        node_name: None,
        repository_url: &target.url,
        hostname: Some(lock_hostname(&namespace, &plan_name)),
        pod_settings: spec.pod.as_ref(),
        settings,
    })
}

/// The destination a Job of a plan copies to: `None` for any Job that is not a copy.
pub fn copy_destination_of(job: &Job) -> Option<&str> {
    let labels = job.metadata.labels.as_ref()?;
    if labels.get(super::LABEL_OPERATION).map(String::as_str) != Some(COPY_OPERATION) {
        return None;
    }
    labels.get(LABEL_COPY).map(String::as_str)
}
