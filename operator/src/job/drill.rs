//! The restore drill Job of a plan (`spec.verify`): the sidecar's `drill` of one snapshot of the
//! plan's host into scratch space of the pod, read back and held to the snapshot, its database
//! dumps loaded into a throwaway server. It reads the plan's repository with the plan's own
//! Secrets (as a restore of it does), never mounts the plan's claims, and runs unprivileged.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    EmptyDirVolumeSource, EphemeralVolumeSource, PersistentVolumeClaimSpec,
    PersistentVolumeClaimTemplate, Volume, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use neverwiped_contract::cli;
use neverwiped_contract::drill::{DrillArgs, DrillSample};

use super::pod::{FinishedPod, PodBuilder, Privileges};
use super::{
    common_labels, job_annotation, job_name, lock_hostname, trigger_name, JobSettings,
    ANNOTATION_DEADLINE, ANNOTATION_SCHEDULED_TIME, ANNOTATION_TRIGGER, LABEL_OPERATION,
    LABEL_PLAN, RESULT_FILE,
};
use crate::api::{BackupPlan, RunTrigger, VerifySpec};
use crate::expansion::literal;

/// The `neverwiped.io/operation` label of drill Jobs.
pub const DRILL_OPERATION: &str = "drill";
/// Where a drill restores to and runs its throwaway database server: the scratch volume.
pub const SCRATCH_ROOT: &str = "/scratch";
/// Annotation: the `neverwiped.io/verify-now` value a requested drill acts on.
pub const ANNOTATION_VERIFY_REQUEST: &str = "neverwiped.io/verify-request";
/// Annotation: the drill's sample round (`status.verify.drills` when it started).
pub const ANNOTATION_DRILL_ROUND: &str = "neverwiped.io/drill-round";

/// One drill of a plan: what the reconciler decided.
#[derive(Debug, Clone, PartialEq)]
pub struct DrillRun {
    pub trigger: RunTrigger,
    /// The scheduled time it runs for; `None` for a requested drill.
    pub scheduled_time: Option<Timestamp>,
    /// The `neverwiped.io/verify-now` value it acts on.
    pub request: Option<String>,
    /// When it starts: its minute names the Job (one Job per minute, so a second create after
    /// a restart finds the first).
    pub started: Timestamp,
    /// The sample round when `samplePercent` is below 100.
    pub round: u64,
    /// The scratch volume's size.
    pub scratch_bytes: u64,
    pub deadline: SignedDuration,
}

/// `<plan>-verify-<minutes since the epoch>`, within a Job name's 63 characters.
pub fn drill_job_name(plan: &BackupPlan, started: Timestamp) -> String {
    let minutes = started.as_second() / 60;
    job_name(&plan.name_any(), &format!("verify-{minutes}"))
}

/// Whether a Job of a plan is one of its drills.
pub fn is_drill_job(job: &Job) -> bool {
    job.labels().get(LABEL_OPERATION).map(String::as_str) == Some(DRILL_OPERATION)
}

/// What a drill Job was started for, read back from its annotations: its trigger, scheduled
/// time, request and sample round.
pub fn drill_run_of(job: &Job) -> (Option<Timestamp>, Option<String>, Option<u64>) {
    let scheduled = super::scheduled_time_of(job);
    let request = job_annotation(job, ANNOTATION_VERIFY_REQUEST).map(str::to_owned);
    let round = job_annotation(job, ANNOTATION_DRILL_ROUND).and_then(|r| r.parse().ok());
    (scheduled, request, round)
}

/// Builds the drill Job of `plan` by `verify` (the plan's `spec.verify`, or its defaults for a
/// requested drill of a plan without one).
pub fn drill_job(
    plan: &BackupPlan,
    verify: &VerifySpec,
    run: &DrillRun,
    settings: &JobSettings,
) -> Job {
    let spec = &plan.spec;
    let plan_name = plan.name_any();
    let namespace = plan.namespace().unwrap_or_default();
    let repository = &spec.repository;
    let mut pod = PodBuilder::default();
    pod.mount_repository(
        &repository.password_secret_ref,
        repository.credentials_secret_ref.as_ref(),
        repository.ca_secret_ref.as_ref(),
    );
    pod.mount_volume(scratch_volume(verify, run.scratch_bytes), SCRATCH_ROOT);
    let mut args = DrillArgs {
        snapshot: verify.snapshot.clone(),
        repository: super::repository_arg(&literal(&repository.url)),
        result_file: RESULT_FILE.into(),
        scratch: SCRATCH_ROOT.into(),
        host: Some(format!("{namespace}/{plan_name}")),
        sample: sample(verify.sample_percent, run.round),
        databases: verify.databases && !spec.databases.is_empty(),
    }
    .to_args();
    cli::push_key_hint(&mut args, super::key_hint(plan));
    let mut labels = common_labels(DRILL_OPERATION);
    labels.insert(LABEL_PLAN.into(), plan_name.clone());
    let job = pod.finish(FinishedPod {
        name: drill_job_name(plan, run.started),
        namespace: namespace.clone(),
        labels,
        annotations: annotations(plan, run),
        owner: crate::owner::controlled_by(plan),
        args,
        privileges: Privileges::Unprivileged,
        deadline: run.deadline,
        node_name: None,
        repository_url: &repository.url,
        // The plan's lock host name: a killed drill's locks are cleared as a killed backup's.
        hostname: Some(lock_hostname(&namespace, &plan_name)),
        pod_settings: spec.pod.as_ref(),
        settings,
    });
    match &settings.drill_image {
        Some(image) => with_image(job, image, settings.drill_image_pull_policy.as_deref()),
        None => job,
    }
}

fn annotations(plan: &BackupPlan, run: &DrillRun) -> BTreeMap<String, String> {
    let mut annotations = BTreeMap::from([
        (
            ANNOTATION_TRIGGER.to_owned(),
            trigger_name(run.trigger).to_owned(),
        ),
        (ANNOTATION_DEADLINE.to_owned(), plan.spec.deadline.clone()),
        (ANNOTATION_DRILL_ROUND.to_owned(), run.round.to_string()),
    ]);
    if let Some(time) = run.scheduled_time {
        annotations.insert(ANNOTATION_SCHEDULED_TIME.into(), time.to_string());
    }
    if let Some(request) = &run.request {
        annotations.insert(ANNOTATION_VERIFY_REQUEST.into(), request.clone());
    }
    annotations
}

/// Every file, or `percent` of them in round `round`.
fn sample(percent: i32, round: u64) -> DrillSample {
    match u8::try_from(percent) {
        Ok(percent @ 1..=99) => DrillSample::Percent { percent, round },
        _ => DrillSample::All,
    }
}

/// The scratch volume: an emptyDir limited to `bytes`, or with `scratch` a generic ephemeral
/// volume of that size (its class, or the cluster's default).
fn scratch_volume(verify: &VerifySpec, bytes: u64) -> Volume {
    let size = Quantity(format!("{}Mi", bytes.div_ceil(1 << 20).max(1)));
    let Some(scratch) = &verify.scratch else {
        return Volume {
            name: "scratch".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: None,
                size_limit: Some(size),
            }),
            ..Volume::default()
        };
    };
    let claim = PersistentVolumeClaimSpec {
        access_modes: Some(vec!["ReadWriteOnce".into()]),
        storage_class_name: scratch.storage_class_name.clone(),
        resources: Some(VolumeResourceRequirements {
            requests: Some(BTreeMap::from([("storage".to_owned(), size)])),
            limits: None,
        }),
        ..PersistentVolumeClaimSpec::default()
    };
    Volume {
        name: "scratch".into(),
        ephemeral: Some(EphemeralVolumeSource {
            volume_claim_template: Some(PersistentVolumeClaimTemplate {
                metadata: None,
                spec: claim,
            }),
        }),
        ..Volume::default()
    }
}

/// The Job with its container's image (and its pull policy, when one is set) replaced: the drill
/// image carries the database servers.
fn with_image(mut job: Job, image: &str, pull_policy: Option<&str>) -> Job {
    let containers = (job.spec.as_mut())
        .and_then(|s| s.template.spec.as_mut())
        .map(|p| p.containers.iter_mut());
    for container in containers.into_iter().flatten() {
        container.image = Some(image.to_owned());
        if let Some(policy) = pull_policy {
            container.image_pull_policy = Some(policy.to_owned());
        }
    }
    job
}
