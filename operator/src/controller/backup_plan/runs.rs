//! The plan's backup Jobs: which finished (recorded once), which are stuck (failed now), which
//! runs; and the Job or VolumeSnapshots of a run that starts.

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::decision::PlanDecision;
use super::fetch::{owned_by, ObservedPlan};
use super::hooks::{self, RunHooks};
use super::listing::record_snapshots;
use super::occupant::{backup_run, Occupant};
use super::resolve::ReadyPlan;
use super::snapshots;
use super::triggers::{self, RunRequest};
use crate::api::{ActiveRun, BackupPlan, RunKind};
use crate::conditions::Reason;
use crate::controller::effects::PlannedEvent;
use crate::controller::{pod_of, Settings};
use crate::job::{
    backup_job, backup_job_name, job_annotation, run_trigger_of, scheduled_time_of, BackupRun,
    BackupVolumeMount, ANNOTATION_MANUAL_TRIGGER, LABEL_OPERATION, LABEL_PLAN,
};
use crate::recorder::EventType;
use crate::status::{backup_run_record, job_state, record_repository, JobState};

/// The plan's own Jobs, by what they run, oldest first.
pub struct PlanJobs<'a> {
    pub backups: Vec<&'a Job>,
    /// The pre and post hook Jobs around runs' VolumeSnapshots (the queue counts them as the
    /// plan's backup, but they are no backup Job: a run's record is its backup Job's).
    pub hooks: Vec<&'a Job>,
    /// Prunes and checks.
    pub maintenance: Vec<&'a Job>,
    /// Copies to the destinations of `spec.copies`.
    pub copies: Vec<&'a Job>,
    /// Prunes of the destinations of `spec.copies` (their retention).
    pub copy_prunes: Vec<&'a Job>,
    /// Restore drills.
    pub drills: Vec<&'a Job>,
}

/// The Jobs of `observed` that `plan` owns.
pub fn plan_jobs<'a>(plan: &BackupPlan, observed: &'a ObservedPlan) -> PlanJobs<'a> {
    let (copy_prunes, own): (Vec<&Job>, Vec<&Job>) = observed
        .jobs
        .iter()
        .filter(|job| owned_by(*job, plan) || crate::job::remote_job_of(job, plan))
        .partition(|job| crate::job::copy_prune_destination_of(job).is_some());
    let (drills, own): (Vec<&Job>, Vec<&Job>) = own
        .into_iter()
        .partition(|job| crate::job::is_drill_job(job));
    let (maintenance, others): (Vec<&Job>, Vec<&Job>) = own
        .into_iter()
        .partition(|job| super::maintenance::maintenance_kind(job).is_some());
    let (hooks, others): (Vec<&Job>, Vec<&Job>) = others
        .into_iter()
        .partition(|job| crate::job::hook_phase_of(job).is_some());
    let (mut copies, mut backups): (Vec<&Job>, Vec<&Job>) = others
        .into_iter()
        .partition(|job| crate::job::copy_destination_of(job).is_some());
    backups.sort_by_key(|job| job.metadata.creation_timestamp.as_ref().map(|t| t.0));
    copies.sort_by_key(|job| job.metadata.creation_timestamp.as_ref().map(|t| t.0));
    PlanJobs {
        backups,
        hooks,
        maintenance,
        copies,
        copy_prunes,
        drills,
    }
}

/// Records the backup Jobs that finished (with the hooks their hook Jobs ran around their
/// snapshots), fails those whose pod cannot start, and deletes finished Jobs beyond the kept;
/// returns the one that runs now, as it occupies the plan.
pub fn observe(
    plan: &BackupPlan,
    jobs: &PlanJobs,
    observed: &ObservedPlan,
    decision: &mut PlanDecision,
    now: Timestamp,
    settings: &Settings,
) -> Option<ActiveRun> {
    let backups = &jobs.backups;
    let mut active: Option<&Job> = None;
    for job in backups {
        let job_name = job.name_any();
        if decision
            .status
            .history
            .iter()
            .any(|r| r.job_name == job_name)
        {
            continue;
        }
        let end = match job_state(job, pod_of(job, &observed.pods), now) {
            JobState::Ended(end) => end,
            JobState::Blocked(end) => {
                decision.delete.push(job_name.clone());
                end
            }
            JobState::Running => {
                active = Some(job);
                continue;
            }
        };
        let trigger = decision.trigger(&job_name, run_trigger_of(job));
        let mut record = backup_run_record(job, trigger, &end);
        let hooks = RunHooks::of(&job_name, &jobs.hooks, &observed.pods);
        let reason = hooks.record(end.reason, &mut record);
        record_repository(&mut decision.status, &end, now);
        record_snapshots(&mut decision.status, &end, now);
        decision.record_backup(reason, record, now);
        super::suspect::judge(plan, job, trigger, &end, decision, settings, now);
    }
    // A run whose status was not written (the apply failed after the create) is still acted on.
    if let Some(job) = active {
        triggers::consume(
            &mut decision.status,
            scheduled_time_of(job),
            job_annotation(job, ANNOTATION_MANUAL_TRIGGER),
        );
    }
    // Keep the newest finished Jobs; their runs are recorded.
    let active_name = active.map(|job| job.name_any());
    let finished: Vec<String> = backups
        .iter()
        .rev()
        .map(|job| job.name_any())
        .filter(|name| Some(name) != active_name.as_ref())
        .filter(|name| decision.status.history.iter().any(|r| &r.job_name == name))
        .collect();
    for name in finished.into_iter().skip(settings.finished_jobs_to_keep) {
        decision.delete_job(name);
    }
    hooks::delete_over(&jobs.hooks, settings.finished_jobs_to_keep, decision);
    active.map(|job| {
        let name = job.name_any();
        let trigger = decision.trigger(&name, run_trigger_of(job));
        let start = job.metadata.creation_timestamp.clone();
        backup_run(name, trigger, scheduled_time_of(job), start)
    })
}

/// Starts the run `request` asks for: its Job, or, when volumes are read from snapshots, their
/// VolumeSnapshots or, with hooks, its pre hook Job (the Job follows when they are ready). Returns the run, as it occupies the plan.
pub fn start<'a>(
    plan: &BackupPlan,
    ready: &ReadyPlan,
    request: RunRequest,
    remove_stale_locks: bool,
    now: Timestamp,
    settings: &Settings,
    decision: &mut PlanDecision,
) -> Occupant<'a> {
    let run = BackupRun {
        trigger: request.trigger,
        scheduled_time: request.scheduled_time,
        manual_trigger: request.manual_trigger,
        volumes: ready
            .plan
            .claims
            .iter()
            .map(|c| BackupVolumeMount {
                source_claim: c.name.clone(),
                mounted_claim: c.name.clone(),
                excludes: c.excludes.clone(),
                selection: c.selection.clone(),
                claim: ready.claim(&c.name).cloned(),
            })
            .collect(),
        node_name: ready.direct_node.clone(),
        deadline: ready.plan.deadline,
        remove_stale_locks,
        mover: ready.mover.mover.clone(),
        hooks_in_pod: true,
    };
    let job_name = backup_job_name(plan, &run);
    let trigger = run.trigger;
    let note = match snapshots::take(plan, ready, &run, &job_name, settings, decision) {
        None => {
            decision.create = Some(backup_job(plan, &run, &settings.job));
            format!("created Job {job_name} ({trigger:?})")
        }
        Some(note) => note,
    };
    decision.events.push(PlannedEvent {
        type_: EventType::Normal,
        reason: Reason::BackupStarted,
        note,
    });
    Occupant::Backup(backup_run(
        job_name,
        trigger,
        run.scheduled_time,
        Some(Time(now)),
    ))
}

/// Whether a pod of one of the plan's backup, prune, check or copy runs may still run (it is not
/// `Succeeded` or `Failed`): then the locks it holds in the repository are not stale, whatever its
/// Job says. (Restores lock under their own host names.)
pub fn plan_pod_alive(plan_name: &str, pods: &[Pod]) -> bool {
    let [backup, prune, check] =
        [RunKind::Backup, RunKind::Prune, RunKind::Check].map(RunKind::label);
    let locking = [backup, prune, check, crate::job::COPY_OPERATION];
    pods.iter().any(|pod| {
        let labels = pod.metadata.labels.as_ref();
        let ours = labels.is_some_and(|l| {
            l.get(LABEL_PLAN).map(String::as_str) == Some(plan_name)
                && l.get(LABEL_OPERATION)
                    .is_some_and(|operation| locking.contains(&operation.as_str()))
        });
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        ours && !matches!(phase, Some("Succeeded" | "Failed"))
    })
}
