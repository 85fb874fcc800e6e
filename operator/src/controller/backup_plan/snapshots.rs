//! Backups that read volumes from CSI VolumeSnapshots: a run first takes its snapshots, then, once
//! they are all ready, clones them into claims and starts its Job on those; when the run is over,
//! its snapshots and clones go. A snapshot that fails, or is not ready within the run's deadline,
//! fails the run. A plan with hooks brackets the snapshots' creation with its hook Jobs
//! ([`super::hooks`]): pre Job, snapshots, post Job, then the backup Job, with no hooks in its
//! pod; a pre Job that failed skips the snapshots and fails the run (`HookFailed`) once the post
//! Job ended.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::ResourceExt;
use neverwiped_contract::streams::HookPhase;

use super::decision::PlanDecision;
use super::fetch::{owned_by, ObservedPlan};
use super::hooks::{self, RunHooks};
use super::occupant::{backup_run, Occupant, PreparingRun};
use super::resolve::ReadyPlan;
use super::triggers;
use crate::api::{BackupPlan, RunOutcome, RunRecord};
use crate::conditions::Reason;
use crate::controller::Settings;
use crate::csi::VolumeSnapshot;
use crate::job::{
    backup_job, job_annotation, run_trigger_of, scheduled_time_of, BackupRun, BackupVolumeMount,
    ANNOTATION_MANUAL_TRIGGER, LABEL_RUN,
};
use crate::schedule::parse_duration;
use crate::volumes::{
    run_snapshot, snapshot_clone, snapshot_run_info, snapshot_trigger, SnapshotRunInfo,
};

/// A run's objects before its backup Job exists: its VolumeSnapshots and hook Jobs.
#[derive(Default)]
struct RunObjects<'a> {
    snapshots: Vec<&'a VolumeSnapshot>,
    hook_jobs: Vec<&'a Job>,
}

/// Finds the run being prepared: VolumeSnapshots or hook Jobs of a run whose backup Job does not
/// exist yet (and was not recorded). A run whose pre hooks or snapshots failed is recorded as
/// failed instead (once its post hooks ended). `backups` and `hook_jobs` are the plan's backup and
/// hook Jobs; while one of the backups runs (`backup_running`), nothing is being prepared.
pub fn observe<'a>(
    plan: &BackupPlan,
    observed: &'a ObservedPlan,
    (backups, hook_jobs): (&[&Job], &[&'a Job]),
    backup_running: bool,
    decision: &mut PlanDecision,
    now: Timestamp,
) -> Option<PreparingRun<'a>> {
    let mut runs: BTreeMap<String, RunObjects> = BTreeMap::new();
    for snapshot in observed.snapshots.iter().filter(|s| owned_by(*s, plan)) {
        if let Some(run) = snapshot.labels().get(LABEL_RUN) {
            runs.entry(run.clone())
                .or_default()
                .snapshots
                .push(snapshot);
        }
    }
    for job in hook_jobs {
        if let Some(run) = job.labels().get(LABEL_RUN) {
            runs.entry(run.clone()).or_default().hook_jobs.push(job);
        }
    }
    let mut preparing = None;
    for (run, objects) in runs {
        let over = backups.iter().any(|job| job.name_any() == run)
            || decision.status.history.iter().any(|r| r.job_name == run);
        if over || backup_running || preparing.is_some() {
            continue;
        }
        preparing = prepared(plan, &observed.pods, run, objects, decision, now);
    }
    preparing
}

/// The run `run` as its objects show it; `None` when it is over (recorded as failed now).
fn prepared<'a>(
    plan: &BackupPlan,
    pods: &[Pod],
    run: String,
    objects: RunObjects<'a>,
    decision: &mut PlanDecision,
    now: Timestamp,
) -> Option<PreparingRun<'a>> {
    let info = run_info(&run, &objects, decision);
    let created = |meta: &ObjectMeta| meta.creation_timestamp.as_ref().map(|t| t.0);
    let started = (objects.snapshots.iter().map(|s| created(&s.metadata)))
        .chain(objects.hook_jobs.iter().map(|j| created(&j.metadata)))
        .flatten()
        .min()
        .unwrap_or(now);
    // The run's trigger is consumed, even if the status apply after the create failed.
    triggers::consume(
        &mut decision.status,
        info.scheduled_time,
        info.manual_trigger.as_deref(),
    );
    let hooks = RunHooks::of(&run, &objects.hook_jobs, pods);
    let snapshot_failure = failure(&plan.spec.deadline, &objects.snapshots, started, now)
        .filter(|_| !hooks.pre_failed());
    // A run with hook Jobs is over only once its post hooks ended: they release the application.
    let settled = !hooks.used() || hooks.post_ended();
    let failed = match (hooks.pre_failed(), &snapshot_failure) {
        (true, _) => Some((Reason::HookFailed, hooks.pre_failure())),
        (false, Some(message)) => Some((Reason::SnapshotFailed, message.clone())),
        (false, None) => None,
    };
    if let (true, Some((reason, message))) = (settled, failed) {
        let mut record = failed_record(run, &info, (started, now), reason, message);
        let reason = hooks.record(reason, &mut record);
        decision.record_backup(reason, record, now);
        return None;
    }
    let active = backup_run(run, info.trigger, info.scheduled_time, Some(Time(started)));
    Some(PreparingRun {
        run: active,
        info,
        snapshots: objects.snapshots,
        hooks,
        snapshot_failure,
    })
}

/// What started the run, from its first hook Job or snapshot (both carry the run's trigger).
fn run_info(run: &str, objects: &RunObjects, decision: &mut PlanDecision) -> SnapshotRunInfo {
    if let Some(job) = objects.hook_jobs.first() {
        let trigger = decision.trigger(run, run_trigger_of(job));
        return SnapshotRunInfo {
            trigger,
            scheduled_time: scheduled_time_of(job),
            manual_trigger: job_annotation(job, ANNOTATION_MANUAL_TRIGGER).map(str::to_owned),
        };
    }
    let snapshot = objects.snapshots[0];
    let trigger = decision.trigger(run, snapshot_trigger(snapshot));
    snapshot_run_info(snapshot, trigger)
}

/// Why a run's snapshots failed: the driver's message, or the deadline passed while some were not
/// ready (or none was created); `None` while they may still get ready.
fn failure(
    deadline: &str,
    snapshots: &[&VolumeSnapshot],
    started: Timestamp,
    now: Timestamp,
) -> Option<String> {
    let failed = snapshots.iter().find_map(|s| {
        s.error_message().map(|message| {
            format!(
                "VolumeSnapshot {} of PersistentVolumeClaim {:?} failed: {message}",
                s.name_any(),
                s.spec
                    .source
                    .persistent_volume_claim_name
                    .as_deref()
                    .unwrap_or("")
            )
        })
    });
    failed.or_else(|| {
        let limit = parse_duration(deadline).ok()?;
        if now.duration_since(started) <= limit {
            return None;
        }
        let waiting: Vec<String> = snapshots
            .iter()
            .filter(|s| !s.is_ready())
            .map(|s| s.name_any())
            .collect();
        match (snapshots.is_empty(), waiting.is_empty()) {
            // After the pre hooks, none could be created: the post hooks must not wait forever.
            (true, _) => Some(format!(
                "no VolumeSnapshot of the run was created within the run's deadline of {deadline}; the operator's log says why (its rights on volumesnapshots, the snapshot API)"
            )),
            (false, false) => Some(format!(
                "VolumeSnapshots {} were not ready within the run's deadline of {deadline}; check the CSI driver's snapshotter",
                waiting.join(", "),
            )),
            (false, true) => None,
        }
    })
}

fn failed_record(
    run: String,
    info: &SnapshotRunInfo,
    (started, now): (Timestamp, Timestamp),
    reason: Reason,
    message: String,
) -> RunRecord {
    let reason = reason.into();
    RunRecord {
        scheduled_time: info.scheduled_time.map(Time),
        start_time: Some(Time(started)),
        completion_time: Some(Time(now)),
        duration_seconds: Some(now.duration_since(started).as_secs()),
        message: Some(message),
        ..RunRecord::without_figures(run, info.trigger, RunOutcome::Failed, reason)
    }
}

/// For a run that starts: takes the snapshots of the volumes read from snapshots — or, when the
/// plan has hooks, starts its pre hook Job first (the snapshots follow it). Returns the start's
/// Event note; `None` when the plan reads every volume directly (the Job starts now).
pub fn take(
    plan: &BackupPlan,
    ready: &ReadyPlan,
    run: &BackupRun,
    job_name: &str,
    settings: &Settings,
    decision: &mut PlanDecision,
) -> Option<String> {
    let snapshotted = ready.snapshotted();
    if snapshotted.is_empty() {
        return None;
    }
    let info = SnapshotRunInfo {
        trigger: run.trigger,
        scheduled_time: run.scheduled_time,
        manual_trigger: run.manual_trigger.clone(),
    };
    let claims = snapshotted
        .iter()
        .map(|(c, _)| *c)
        .collect::<Vec<_>>()
        .join(", ");
    let trigger = run.trigger;
    if hooks::bracket_snapshots(plan) {
        let run_and_info = (job_name, &info);
        let left = ready.plan.deadline;
        hooks::start(
            plan,
            ready,
            run_and_info,
            HookPhase::Pre,
            left,
            settings,
            decision,
        );
        return Some(format!(
            "running the pre hooks, then taking VolumeSnapshots of {claims} for Job {job_name} ({trigger:?})"
        ));
    }
    for (index, (claim, class)) in snapshotted.iter().enumerate() {
        decision
            .create_snapshots
            .push(run_snapshot(plan, &info, job_name, index, claim, class));
    }
    Some(format!(
        "taking VolumeSnapshots of {claims} for Job {job_name} ({trigger:?})"
    ))
}

/// Moves a prepared run on: after its pre hooks, takes its snapshots (and one whose create
/// failed); once they are ready or failed, starts its post hooks; once those ended (or with no
/// hooks, once the snapshots are ready), clones them and creates the run's Job. Returns what
/// occupies the plan after.
#[allow(clippy::too_many_arguments)]
pub fn advance<'a>(
    plan: &BackupPlan,
    ready: &ReadyPlan,
    observed: &ObservedPlan,
    preparing: PreparingRun<'a>,
    remove_stale_locks: bool,
    now: Timestamp,
    settings: &Settings,
    decision: &mut PlanDecision,
) -> Occupant<'a> {
    let hooks = &preparing.hooks;
    let run_and_info = (preparing.run.job_name.as_str(), &preparing.info);
    let left = ready.plan.deadline;
    // The post hooks start in two places: at once after a failed pre hook, or once the
    // snapshots settled.
    let start_post = |decision: &mut PlanDecision| {
        let phase = HookPhase::Post;
        hooks::start(plan, ready, run_and_info, phase, left, settings, decision);
    };
    if hooks.used() && !hooks.pre_succeeded() {
        // The pre hooks run, or failed: then no snapshot, and the post hooks at once.
        if hooks.pre_failed() && !hooks.post_started() {
            start_post(decision);
        }
        return Occupant::PreparingSnapshots(preparing);
    }
    // Snapshots are taken between the hooks, never after the post hooks started, nor once the
    // run has failed.
    if !hooks.post_started() && preparing.snapshot_failure.is_none() {
        take_missing(plan, ready, &preparing, decision);
    }
    let all_ready =
        decision.create_snapshots.is_empty() && preparing.snapshots.iter().all(|s| s.is_ready());
    if hooks.used() && !hooks.post_ended() {
        let settled = all_ready || preparing.snapshot_failure.is_some();
        if settled && !hooks.post_started() {
            start_post(decision);
        }
        return Occupant::PreparingSnapshots(preparing);
    }
    if !all_ready {
        return Occupant::PreparingSnapshots(preparing);
    }
    start_backup(
        plan,
        ready,
        observed,
        preparing,
        remove_stale_locks,
        now,
        settings,
        decision,
    )
}

/// Takes the run's snapshots that do not exist: all of them after its pre hooks, or one whose
/// create failed after the others'.
fn take_missing(
    plan: &BackupPlan,
    ready: &ReadyPlan,
    preparing: &PreparingRun,
    decision: &mut PlanDecision,
) {
    let run_name = &preparing.run.job_name;
    for (index, (claim, class)) in ready.snapshotted().iter().enumerate() {
        if preparing.snapshot_of(claim).is_none() {
            let snapshot = run_snapshot(plan, &preparing.info, run_name, index, claim, class);
            decision.create_snapshots.push(snapshot);
        }
    }
}

/// Clones the run's ready snapshots and creates its Job on the clones; its hooks already ran
/// around the snapshots when it has hook Jobs, so its pod runs none.
#[allow(clippy::too_many_arguments)]
fn start_backup<'a>(
    plan: &BackupPlan,
    ready: &ReadyPlan,
    observed: &ObservedPlan,
    preparing: PreparingRun<'a>,
    remove_stale_locks: bool,
    now: Timestamp,
    settings: &Settings,
    decision: &mut PlanDecision,
) -> Occupant<'a> {
    let volumes = mounted_clones(plan, ready, observed, &preparing, decision);
    let started = preparing
        .run
        .start_time
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(now);
    // The deadline is the whole run's, preparation included.
    let deadline =
        (ready.plan.deadline - now.duration_since(started)).max(SignedDuration::from_mins(1));
    let info = preparing.info;
    let run = BackupRun {
        trigger: info.trigger,
        scheduled_time: info.scheduled_time,
        manual_trigger: info.manual_trigger,
        volumes,
        node_name: ready.direct_node.clone(),
        deadline,
        remove_stale_locks,
        mover: ready.mover.mover.clone(),
        hooks_in_pod: !preparing.hooks.used(),
    };
    let mut job = backup_job(plan, &run, &settings.job);
    // The run's name was fixed when its first object was created.
    job.metadata.name = Some(preparing.run.job_name.clone());
    decision.create = Some(job);
    Occupant::Backup(preparing.run)
}

/// The run's volumes as its Job mounts them: a clone of each one's snapshot (created when it
/// does not exist), or the claim itself when it is read directly.
fn mounted_clones(
    plan: &BackupPlan,
    ready: &ReadyPlan,
    observed: &ObservedPlan,
    preparing: &PreparingRun,
    decision: &mut PlanDecision,
) -> Vec<BackupVolumeMount> {
    let mut volumes = Vec::new();
    for claim in &ready.plan.claims {
        let mounted = match preparing.snapshot_of(&claim.name) {
            Some(snapshot) => {
                let exists = observed
                    .claims
                    .iter()
                    .any(|c| c.metadata.name == snapshot.metadata.name);
                let source = ready.claim(&claim.name);
                if let (false, Some(source)) = (exists, source) {
                    decision
                        .create_claims
                        .push(snapshot_clone(plan, snapshot, source));
                }
                snapshot.name_any()
            }
            None => claim.name.clone(),
        };
        volumes.push(BackupVolumeMount {
            source_claim: claim.name.clone(),
            mounted_claim: mounted,
            excludes: claim.excludes.clone(),
            selection: claim.selection.clone(),
            claim: ready.claim(&claim.name).cloned(),
        });
    }
    volumes
}

/// The VolumeSnapshots and clones of runs that are over (not `current_run`), to delete.
pub fn over(
    plan: &BackupPlan,
    observed: &ObservedPlan,
    current_run: Option<&str>,
) -> (Vec<String>, Vec<String>) {
    let over = |labels: &BTreeMap<String, String>, deleting: bool| {
        !deleting
            && labels
                .get(LABEL_RUN)
                .is_some_and(|run| Some(run.as_str()) != current_run)
    };
    let snapshots = observed
        .snapshots
        .iter()
        .filter(|s| owned_by(*s, plan))
        .filter(|s| over(s.labels(), s.metadata.deletion_timestamp.is_some()))
        .map(|s| s.name_any())
        .collect();
    let claims = observed
        .claims
        .iter()
        .filter(|c| owned_by(*c, plan))
        .filter(|c| over(c.labels(), c.metadata.deletion_timestamp.is_some()))
        .map(|c| c.name_any())
        .collect();
    (snapshots, claims)
}
