//! The describe Job of a Restore that needs its snapshot's record (`createClaims: FromSnapshot`,
//! `allVolumes`, `allDatabases`): the sidecar's `describe` with the restore's selection, in a pod
//! like the restore's (its repository's Secrets and arguments, its placement) that mounts no
//! volume and runs unprivileged. Its result names the snapshot that the restore Job then
//! restores by id, and carries the snapshot's record.

use std::collections::BTreeMap;

use jiff::SignedDuration;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use neverwiped_contract::cli::{self, DescribeArgs};

use super::pod::{FinishedPod, PodBuilder, Privileges};
use super::{common_labels, job_name, JobSettings, LABEL_PLAN, LABEL_RESTORE, RESULT_FILE};
use crate::api::Restore;
use crate::expansion::literal;
use crate::restore_source::ReadFrom;

/// The describe Job's name for a Restore.
pub fn describe_job_name(restore: &Restore) -> String {
    job_name(&restore.name_any(), "describe")
}

/// Builds the Job that describes the snapshot `restore` means, among those of `from`'s origin.
pub fn describe_job(
    restore: &Restore,
    from: &ReadFrom,
    deadline: SignedDuration,
    settings: &JobSettings,
) -> Job {
    let spec = &restore.spec;
    let repository = from.repository;
    let mut pod = PodBuilder::default();
    pod.mount_repository(
        &repository.password_secret_ref,
        repository.credentials_secret_ref.as_ref(),
        repository.ca_secret_ref.as_ref(),
    );
    let mut args = DescribeArgs {
        snapshot: spec.snapshot.clone(),
        repository: super::repository_arg(&literal(&repository.url)),
        result_file: RESULT_FILE.into(),
        host: from.host_arg(&spec.snapshot),
        before: spec.taken_before.as_ref().map(|time| time.0.to_string()),
    }
    .to_args();
    cli::push_key_hint(&mut args, from.plan.and_then(super::key_hint));
    let mut labels = common_labels("describe");
    labels.insert(LABEL_RESTORE.into(), restore.name_any());
    if let Some(plan) = from.plan {
        labels.insert(LABEL_PLAN.into(), plan.name_any());
    }
    pod.finish(FinishedPod {
        name: describe_job_name(restore),
        namespace: restore.namespace().unwrap_or_default(),
        labels,
        annotations: BTreeMap::new(),
        owner: crate::owner::controlled_by(restore),
        args,
        privileges: Privileges::Unprivileged,
        deadline,
        node_name: None,
        repository_url: &repository.url,
        hostname: None,
        pod_settings: spec
            .pod
            .as_ref()
            .or(from.plan.and_then(|p| p.spec.pod.as_ref())),
        settings,
    })
}
