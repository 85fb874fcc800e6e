//! The hook Jobs of a run that reads its volumes from CSI VolumeSnapshots: `<plan>-hooks-pre-<suffix>`
//! runs the plan's pre hooks (`neverwiped-sidecar hooks --phase pre`) before the snapshots are
//! taken, `<plan>-hooks-post-<suffix>` its post hooks once they are ready or failed; the backup Job
//! then reads the snapshots without hooks. The application pauses for the snapshots' creation
//! only. They carry the run's name ([`super::LABEL_RUN`]) and its trigger, as the backup Job does.

use std::collections::BTreeMap;

use jiff::SignedDuration;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use neverwiped_contract::streams::{HookPhase, HooksArgs};

use super::extras;
use super::pod::{FinishedPod, PodBuilder, Privileges};
use super::{
    common_labels, job_name, trigger_name, JobSettings, ANNOTATION_DEADLINE,
    ANNOTATION_MANUAL_TRIGGER, ANNOTATION_SCHEDULED_TIME, ANNOTATION_TRIGGER, LABEL_PLAN,
    LABEL_RUN, RESULT_FILE,
};
use crate::api::BackupPlan;
use crate::mover::Mover;
use crate::volumes::SnapshotRunInfo;

/// The `neverwiped.io/operation` of the hook Jobs.
pub const HOOKS_OPERATION: &str = "hooks";
/// Label: the phase of a hook Job, `pre` or `post`.
pub const LABEL_HOOK_PHASE: &str = "neverwiped.io/hook-phase";

/// What a hook Job runs for.
#[derive(Debug, Clone, PartialEq)]
pub struct HooksRun<'a> {
    /// The run's name: its backup Job's (and its VolumeSnapshots' label).
    pub run: &'a str,
    pub info: &'a SnapshotRunInfo,
    pub phase: HookPhase,
    /// How long the Job may take: the hooks' time limits and a margin, within the run's deadline.
    pub deadline: SignedDuration,
    /// Who the run's pods run as: the hooks run as its user when it is not root.
    pub mover: &'a Mover,
}

/// The name of a run's hook Job of `phase`: `<plan>-hooks-<phase>-<suffix>`, the suffix the run's
/// (`<plan>-<suffix>`).
pub fn hooks_job_name(plan: &BackupPlan, run: &str, phase: HookPhase) -> String {
    let plan_name = plan.name_any();
    let suffix = run
        .strip_prefix(&plan_name)
        .and_then(|rest| rest.strip_prefix('-'))
        .unwrap_or_else(|| run.rsplit('-').next().unwrap_or(run));
    job_name(&plan_name, &format!("hooks-{}-{suffix}", phase.arg()))
}

/// The phase of a hook Job of a plan; `None` for its other Jobs.
pub fn hook_phase_of(job: &Job) -> Option<HookPhase> {
    let labels = job.metadata.labels.as_ref()?;
    if labels.get(super::LABEL_OPERATION).map(String::as_str) != Some(HOOKS_OPERATION) {
        return None;
    }
    match labels.get(LABEL_HOOK_PHASE).map(String::as_str) {
        Some("pre") => Some(HookPhase::Pre),
        Some("post") => Some(HookPhase::Post),
        _ => None,
    }
}

/// Builds the hook Job of `run`'s phase: the phase's hook containers beside a sidecar that runs
/// `hooks --phase PHASE`, with no repository, Secret or claim of its own.
pub fn hooks_job(plan: &BackupPlan, run: &HooksRun, settings: &JobSettings) -> Job {
    let spec = &plan.spec;
    let mut pod = PodBuilder::default();
    let list = match run.phase {
        HookPhase::Pre => &spec.hooks.pre,
        HookPhase::Post => &spec.hooks.post,
    };
    let hooks = extras::hooks(&mut pod, run.phase, list, &settings.image);
    let args = HooksArgs {
        phase: run.phase,
        result_file: RESULT_FILE.into(),
        hooks,
    }
    .to_args();
    let mut labels = common_labels(HOOKS_OPERATION);
    labels.insert(LABEL_PLAN.into(), plan.name_any());
    labels.insert(LABEL_RUN.into(), run.run.to_owned());
    labels.insert(LABEL_HOOK_PHASE.into(), run.phase.arg().into());
    let info = run.info;
    let mut annotations = BTreeMap::from([
        (ANNOTATION_TRIGGER.into(), trigger_name(info.trigger).into()),
        (ANNOTATION_DEADLINE.into(), spec.deadline.clone()),
    ]);
    if let Some(time) = info.scheduled_time {
        annotations.insert(ANNOTATION_SCHEDULED_TIME.into(), time.to_string());
    }
    if let Some(trigger) = &info.manual_trigger {
        annotations.insert(ANNOTATION_MANUAL_TRIGGER.into(), trigger.clone());
    }
    let privileges = match run.mover {
        Mover::Unprivileged(identity) => Privileges::User(identity.reading()),
        Mover::Privileged => Privileges::Unprivileged,
    };
    pod.finish(FinishedPod {
        name: hooks_job_name(plan, run.run, run.phase),
        namespace: plan.namespace().unwrap_or_default(),
        labels,
        annotations,
        owner: crate::owner::controlled_by(plan),
        args,
        privileges,
        deadline: run.deadline,
        node_name: None,
        // Not read, but counted: the run's slot under the per-host limit is the backup's.
        repository_url: &spec.repository.url,
        hostname: None,
        pod_settings: spec.pod.as_ref(),
        settings,
    })
}

/// A hook Job's deadline: every hook's time limit and a minute; a pre Job's never beyond what
/// is left of the run's.
pub fn hooks_deadline(plan: &BackupPlan, phase: HookPhase, left: SignedDuration) -> SignedDuration {
    let list = match phase {
        HookPhase::Pre => &plan.spec.hooks.pre,
        HookPhase::Post => &plan.spec.hooks.post,
    };
    let total: i64 = list.iter().map(|h| h.timeout_seconds.max(1)).sum();
    let full = SignedDuration::from_secs(total + 60);
    match phase {
        HookPhase::Pre => full.min(left.max(SignedDuration::from_mins(1))),
        // The post hooks release the application: they get their whole time, whatever is left.
        HookPhase::Post => full,
    }
}
