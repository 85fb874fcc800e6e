//! The BackupPlan reconciler: fetch the plan's Jobs, pods, Secrets and claims; [`decide`] (pure);
//! apply: create or delete Jobs, apply the status, publish Events.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::recorder::EventType;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::{Resource, ResourceExt};

use super::{
    create_if_absent, create_job, delete_claim, delete_job, delete_snapshot, events,
    fetch_secret_keys, list_if_served, maintenance, pod_of, Context, Error, Settings,
    FIELD_MANAGER,
};
use crate::api::{
    ActiveRun, BackupPlan, BackupPlanStatus, CopyMethod, MaintenanceRecord, RunKind, RunOutcome,
    RunRecord, RunTrigger,
};
use crate::conditions::{find_condition, reasons, set_condition, types, ConditionStatus};
use crate::csi::{VolumeSnapshot, VolumeSnapshotClass};
use crate::job::{
    backup_job, backup_job_name, job_annotation, run_trigger_of, scheduled_time_of, BackupRun,
    BackupVolumeMount, MaintenanceKind, ANNOTATION_MANUAL_TRIGGER, ANNOTATION_SOURCE_CLAIM,
    LABEL_OPERATION, LABEL_PLAN, LABEL_RUN,
};
use crate::metrics::{MaintenanceLabels, Metrics, PlanLabels, ReconcileLabels, RunLabels};
use crate::plan::{pending_manual_trigger, resolve_plan, secrets_used, SecretKeys};
use crate::schedule::{self, parse_duration, ScheduleState};
use crate::status::{
    backup_run_record, job_end, pod_blocked, record_backup_run, record_repository,
    set_backup_plan_conditions, JobEnd,
};
use crate::volumes::{
    choose_reads, direct_placement, run_snapshot, snapshot_clone, snapshot_run_info,
    SnapshotRunInfo, SnapshotSupport, VolumeRead,
};

/// A safety net: even without a watch event, a plan is looked at this often.
const MAX_REQUEUE: Duration = Duration::from_secs(3600);
/// While a Job runs, its changes wake the reconciler; this only covers a missed watch event.
const ACTIVE_REQUEUE: Duration = Duration::from_secs(300);

/// What the reconciler fetched for a plan.
#[derive(Debug, Clone, Default)]
pub struct ObservedPlan {
    /// The plan's backup Jobs.
    pub jobs: Vec<Job>,
    /// The pods of the namespace (the Jobs' pods, and the applications' for `Direct` placement).
    pub pods: Vec<Pod>,
    /// Keys of the Secrets the plan names.
    pub secrets: SecretKeys,
    /// The PersistentVolumeClaims of the namespace (the clones of the plan's runs among them).
    pub claims: Vec<PersistentVolumeClaim>,
    /// The VolumeSnapshots of the plan's runs.
    pub snapshots: Vec<VolumeSnapshot>,
    /// The VolumeSnapshotClasses; `None` when the cluster does not serve the snapshot API.
    pub snapshot_classes: Option<Vec<VolumeSnapshotClass>>,
    /// The StorageClasses (fetched when the plan may take snapshots).
    pub storage_classes: Vec<StorageClass>,
}

/// An Event to publish about the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedEvent {
    pub type_: EventType,
    pub reason: String,
    pub note: String,
}

/// What to do for a plan.
#[derive(Debug, Clone)]
pub struct PlanDecision {
    /// The status to apply.
    pub status: BackupPlanStatus,
    /// A backup Job to create.
    pub create: Option<Job>,
    /// VolumeSnapshots to take for a run that starts (its Job follows once they are ready).
    pub create_snapshots: Vec<VolumeSnapshot>,
    /// Claims to clone from a run's ready VolumeSnapshots, for its Job to mount.
    pub create_claims: Vec<PersistentVolumeClaim>,
    /// VolumeSnapshots of runs that are over.
    pub delete_snapshots: Vec<String>,
    /// Cloned claims of runs that are over.
    pub delete_claims: Vec<String>,
    /// Jobs to delete: stuck ones already recorded as failed, and finished ones beyond the kept.
    pub delete: Vec<String>,
    pub events: Vec<PlannedEvent>,
    /// Runs that finished in this reconcile (for metrics).
    pub finished: Vec<RunRecord>,
    /// Prunes and checks that finished in this reconcile (for metrics).
    pub finished_maintenance: Vec<(MaintenanceKind, MaintenanceRecord)>,
    /// Scheduled runs newly counted as missed (for metrics).
    pub newly_missed: u32,
    /// The nominal time between two scheduled backups (for metrics and alerts); `None` while
    /// the plan is suspended or not ready.
    pub schedule_interval: Option<SignedDuration>,
    pub requeue_after: Duration,
}

fn owned_by<K: Resource>(object: &K, plan: &BackupPlan) -> bool {
    let uid = plan.metadata.uid.as_deref();
    object
        .meta()
        .owner_references
        .as_ref()
        .is_some_and(|owners| {
            owners
                .iter()
                .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
        })
}

fn finished_event(record: &RunRecord) -> PlannedEvent {
    match record.result {
        RunOutcome::Failed => PlannedEvent {
            type_: EventType::Warning,
            reason: events::BACKUP_FAILED.into(),
            note: format!(
                "{} ({}): {}",
                record.job_name,
                record.reason,
                record.message.as_deref().unwrap_or("no message")
            ),
        },
        _ => PlannedEvent {
            type_: EventType::Normal,
            reason: events::BACKUP_SUCCEEDED.into(),
            note: format!(
                "{} wrote snapshot {}{}",
                record.job_name,
                record.snapshot_id.as_deref().unwrap_or("?"),
                record
                    .message
                    .as_deref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default()
            ),
        },
    }
}

/// Whether a pod of one of the plan's backup, prune or check runs may still run (it is not
/// `Succeeded` or `Failed`): then the locks it holds in the repository are not stale, whatever its
/// Job says. (Restores lock under their own host names.)
pub fn plan_pod_alive(plan_name: &str, pods: &[Pod]) -> bool {
    let locking = [RunKind::Backup, RunKind::Prune, RunKind::Check].map(RunKind::label);
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

/// Decides everything about `plan` at `now`, from what was fetched. No I/O.
pub fn decide(
    plan: &BackupPlan,
    observed: &ObservedPlan,
    now: Timestamp,
    settings: &Settings,
) -> PlanDecision {
    let spec = &plan.spec;
    let generation = plan.metadata.generation;
    let mut status = plan.status.clone().unwrap_or_default();
    let ready_before = find_condition(&status.conditions, types::READY)
        .map(|c| (c.status.clone(), c.reason.clone()));
    let mut planned_events = Vec::new();
    let mut finished = Vec::new();
    let mut delete = Vec::new();

    // 1. What the plan's Jobs say: record finished runs, fail stuck ones, find the running one.
    let (maintenance_jobs, mut jobs): (Vec<&Job>, Vec<&Job>) = observed
        .jobs
        .iter()
        .filter(|job| owned_by(*job, plan))
        .partition(|job| maintenance::maintenance_kind(job).is_some());
    jobs.sort_by_key(|job| job.metadata.creation_timestamp.as_ref().map(|t| t.0));
    let mut active: Option<&Job> = None;
    for job in &jobs {
        let job_name = job.name_any();
        if status.history.iter().any(|r| r.job_name == job_name) {
            continue;
        }
        let pod = pod_of(job, &observed.pods);
        let end = match job_end(job, pod) {
            Some(end) => end,
            None => match pod.and_then(pod_blocked) {
                // It would only wait for its deadline: fail it now, with the real reason.
                Some((reason, message)) => {
                    delete.push(job_name.clone());
                    JobEnd {
                        outcome: RunOutcome::Failed,
                        reason: reason.into(),
                        message: Some(message),
                        result: None,
                        start_time: job
                            .status
                            .as_ref()
                            .and_then(|s| s.start_time.as_ref())
                            .map(|t| t.0),
                        completion_time: Some(now),
                    }
                }
                None => {
                    active = Some(job);
                    continue;
                }
            },
        };
        let record = backup_run_record(job, &end);
        record_repository(&mut status, &end, now);
        planned_events.push(finished_event(&record));
        record_backup_run(&mut status, record.clone(), now);
        finished.push(record);
    }
    status.active_run = active.map(|job| ActiveRun {
        job_name: job.name_any(),
        kind: RunKind::Backup,
        trigger: run_trigger_of(job),
        scheduled_time: scheduled_time_of(job).map(Time),
        start_time: job.metadata.creation_timestamp.clone(),
    });
    // A run whose status was not written (the apply failed after the create) is still acted on.
    if let Some(job) = active {
        if let Some(time) = scheduled_time_of(job) {
            if status
                .last_schedule_time
                .as_ref()
                .is_none_or(|last| last.0 < time)
            {
                status.last_schedule_time = Some(Time(time));
            }
        }
        if let Some(trigger) = job_annotation(job, ANNOTATION_MANUAL_TRIGGER) {
            status.last_manual_trigger = Some(trigger.to_owned());
        }
    }
    // Keep the newest finished Jobs; their runs are recorded.
    let finished_jobs: Vec<&&Job> = jobs
        .iter()
        .rev()
        .filter(|job| active.map(|a| a.name_any()) != Some(job.name_any()))
        .filter(|job| status.history.iter().any(|r| r.job_name == job.name_any()))
        .collect();
    for job in finished_jobs.iter().skip(settings.finished_jobs_to_keep) {
        if !delete.contains(&job.name_any()) {
            delete.push(job.name_any());
        }
    }

    // 1b. A run being prepared: VolumeSnapshots of a run whose Job does not exist yet.
    let mut runs: BTreeMap<String, Vec<&VolumeSnapshot>> = BTreeMap::new();
    for snapshot in observed.snapshots.iter().filter(|s| owned_by(*s, plan)) {
        if let Some(run) = snapshot.labels().get(LABEL_RUN) {
            runs.entry(run.clone()).or_default().push(snapshot);
        }
    }
    let mut preparing: Option<(String, Vec<&VolumeSnapshot>)> = None;
    for (run, snapshots) in runs {
        let over = jobs.iter().any(|job| job.name_any() == run)
            || status.history.iter().any(|r| r.job_name == run);
        if over || active.is_some() || preparing.is_some() {
            continue;
        }
        let info = snapshot_run_info(snapshots[0]);
        let started = snapshots
            .iter()
            .filter_map(|s| s.metadata.creation_timestamp.as_ref().map(|t| t.0))
            .min()
            .unwrap_or(now);
        // The run's trigger is consumed, even if the status apply after the create failed.
        if let Some(time) = info.scheduled_time {
            if status
                .last_schedule_time
                .as_ref()
                .is_none_or(|last| last.0 < time)
            {
                status.last_schedule_time = Some(Time(time));
            }
        }
        if let Some(trigger) = &info.manual_trigger {
            status.last_manual_trigger = Some(trigger.clone());
        }
        let failure = snapshots
            .iter()
            .find_map(|s| {
                s.error_message().map(|message| {
                    format!(
                        "VolumeSnapshot {} of PersistentVolumeClaim {:?} failed: {message}",
                        s.name_any(),
                        s.spec.source.persistent_volume_claim_name.as_deref().unwrap_or("")
                    )
                })
            })
            .or_else(|| {
                let deadline = parse_duration(&spec.deadline).ok()?;
                let waiting: Vec<String> = snapshots
                    .iter()
                    .filter(|s| !s.is_ready())
                    .map(|s| s.name_any())
                    .collect();
                (now.duration_since(started) > deadline && !waiting.is_empty()).then(|| {
                    format!(
                        "VolumeSnapshots {} were not ready within the run's deadline of {}; check the CSI driver's snapshotter",
                        waiting.join(", "),
                        spec.deadline
                    )
                })
            });
        match failure {
            Some(message) => {
                let record = RunRecord {
                    job_name: run.clone(),
                    trigger: info.trigger,
                    scheduled_time: info.scheduled_time.map(Time),
                    start_time: Some(Time(started)),
                    completion_time: Some(Time(now)),
                    duration_seconds: Some(now.duration_since(started).as_secs()),
                    result: RunOutcome::Failed,
                    reason: reasons::SNAPSHOT_FAILED.into(),
                    message: Some(message),
                    snapshot_id: None,
                    files_read: None,
                    bytes_read: None,
                    bytes_added: None,
                    bytes_sent: None,
                    warnings: None,
                    databases: Vec::new(),
                };
                planned_events.push(finished_event(&record));
                record_backup_run(&mut status, record.clone(), now);
                finished.push(record);
            }
            None => {
                status.active_run = Some(ActiveRun {
                    job_name: run.clone(),
                    kind: RunKind::Backup,
                    trigger: info.trigger,
                    scheduled_time: info.scheduled_time.map(Time),
                    start_time: Some(Time(started)),
                });
                preparing = Some((run, snapshots));
            }
        }
    }

    // 1c. The plan's prunes and checks; one of them may be what runs now.
    let observed_maintenance =
        maintenance::observe(&maintenance_jobs, &observed.pods, &mut status, now);
    planned_events.extend(observed_maintenance.events);
    delete.extend(observed_maintenance.delete);
    if status.active_run.is_none() {
        status.active_run = observed_maintenance.active.clone();
    }

    // 2. What the spec names, how each volume is read, and where the pod must run.
    let mut problems = Vec::new();
    // The clones of the plan's own runs are never backed up.
    let claims: Vec<PersistentVolumeClaim> = observed
        .claims
        .iter()
        .filter(|c| !c.labels().contains_key(LABEL_RUN))
        .cloned()
        .collect();
    let mut resolved = match resolve_plan(spec, &observed.secrets, &claims) {
        Ok(resolved) => Some(resolved),
        Err(found) => {
            problems = found;
            None
        }
    };
    let mut reads: Vec<VolumeRead> = Vec::new();
    let mut direct_node = None;
    if let Some(plan_volumes) = resolved.as_ref().filter(|r| !r.claims.is_empty()) {
        let plan_claims: Vec<&PersistentVolumeClaim> = plan_volumes
            .claims
            .iter()
            .filter_map(|c| {
                claims
                    .iter()
                    .find(|pvc| pvc.metadata.name.as_deref() == Some(&c.name))
            })
            .collect();
        let support = SnapshotSupport {
            classes: observed.snapshot_classes.as_deref(),
            storage_classes: &observed.storage_classes,
        };
        match choose_reads(
            spec.copy_method,
            spec.volume_snapshot_class_name.as_deref(),
            &plan_claims,
            support,
        ) {
            Ok(chosen) => reads = chosen,
            Err(found) => problems.extend(found),
        }
        // Only volumes read directly tie the pod to a node.
        let direct: Vec<&PersistentVolumeClaim> = plan_claims
            .iter()
            .zip(&reads)
            .filter(|(_, read)| **read == VolumeRead::Direct)
            .map(|(claim, _)| *claim)
            .collect();
        match direct_placement(&direct, &observed.pods) {
            Ok(node) => direct_node = node,
            Err(problem) => problems.push(problem),
        }
    }
    if !problems.is_empty() {
        resolved = None;
    }

    // 3. Whether to start a run.
    let mut create = None;
    let mut create_snapshots = Vec::new();
    let mut create_claims = Vec::new();
    let mut newly_missed = 0;
    let mut ready_message = String::new();
    match &resolved {
        None => status.next_schedule_time = None,
        Some(resolved) => {
            let mut run = None;
            let mut next_run = None;
            if active.is_none() && preparing.is_none() && observed_maintenance.active.is_none() {
                if let Some(trigger) = pending_manual_trigger(spec, Some(&status)) {
                    run = Some((RunTrigger::Manual, None, Some(trigger.to_owned())));
                    status.last_manual_trigger = Some(trigger.to_owned());
                }
                let state = ScheduleState {
                    last_schedule_time: status.last_schedule_time.as_ref().map(|t| t.0),
                    created: plan
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0)
                        .unwrap_or(now),
                    suspended: spec.suspend,
                };
                // A manual run goes first; a scheduled time due meanwhile catches up after it.
                if run.is_none() {
                    let decision =
                        schedule::decide(&resolved.schedule, &state, now, settings.catch_up_window);
                    newly_missed = decision.newly_missed;
                    status.last_schedule_time = decision.last_schedule_time.map(Time);
                    run = decision
                        .run
                        .map(|r| (r.trigger, Some(r.scheduled_time), None));
                    next_run = decision.next_run;
                } else if !spec.suspend {
                    next_run = resolved.schedule.next_after(now);
                }
            } else if !spec.suspend {
                next_run = resolved.schedule.next_after(now);
            }
            if newly_missed > 0 {
                status.missed_runs += i64::from(newly_missed);
                planned_events.push(PlannedEvent {
                    type_: EventType::Warning,
                    reason: events::MISSED_RUNS.into(),
                    note: format!(
                        "{newly_missed} scheduled run(s) did not start on time (the operator was down or a run was still going)"
                    ),
                });
            }
            status.next_schedule_time = next_run.map(Time);
            let remove_stale_locks = !plan_pod_alive(&plan.name_any(), &observed.pods);
            // The claims read from snapshots, in order: the nth is snapshot `<job>-<n>`.
            let snapshotted: Vec<(&str, &str)> = resolved
                .claims
                .iter()
                .zip(&reads)
                .filter_map(|(claim, read)| match read {
                    VolumeRead::Snapshot { class } => Some((claim.name.as_str(), class.as_str())),
                    VolumeRead::Direct => None,
                })
                .collect();
            if let Some((trigger, scheduled_time, manual_trigger)) = run {
                let backup_run = BackupRun {
                    trigger,
                    scheduled_time,
                    manual_trigger,
                    volumes: resolved
                        .claims
                        .iter()
                        .map(|c| BackupVolumeMount {
                            source_claim: c.name.clone(),
                            mounted_claim: c.name.clone(),
                            excludes: c.excludes.clone(),
                        })
                        .collect(),
                    node_name: direct_node.clone(),
                    deadline: resolved.deadline,
                    remove_stale_locks,
                };
                let job_name = backup_job_name(plan, &backup_run);
                let note = if snapshotted.is_empty() {
                    create = Some(backup_job(plan, &backup_run, &settings.job));
                    format!("created Job {job_name} ({trigger:?})")
                } else {
                    // The Job follows when the snapshots are ready.
                    let info = SnapshotRunInfo {
                        trigger,
                        scheduled_time,
                        manual_trigger: backup_run.manual_trigger.clone(),
                    };
                    for (index, (claim, class)) in snapshotted.iter().enumerate() {
                        create_snapshots
                            .push(run_snapshot(plan, &info, &job_name, index, claim, class));
                    }
                    let names: Vec<&str> = snapshotted.iter().map(|(claim, _)| *claim).collect();
                    format!(
                        "taking VolumeSnapshots of {} for Job {job_name} ({trigger:?})",
                        names.join(", ")
                    )
                };
                planned_events.push(PlannedEvent {
                    type_: EventType::Normal,
                    reason: events::BACKUP_STARTED.into(),
                    note,
                });
                status.active_run = Some(ActiveRun {
                    job_name,
                    kind: RunKind::Backup,
                    trigger,
                    scheduled_time: scheduled_time.map(Time),
                    start_time: Some(Time(now)),
                });
            }
            // A prepared run whose snapshots are ready: clone them, and start its Job.
            if let Some((run_name, snapshots)) = &preparing {
                let info = snapshot_run_info(snapshots[0]);
                let snapshot_of = |claim: &str| {
                    snapshots.iter().any(|s| {
                        s.annotations()
                            .get(ANNOTATION_SOURCE_CLAIM)
                            .map(String::as_str)
                            == Some(claim)
                    })
                };
                // A snapshot whose create failed after the others': take it now.
                for (index, (claim, class)) in snapshotted.iter().enumerate() {
                    if !snapshot_of(claim) {
                        create_snapshots
                            .push(run_snapshot(plan, &info, run_name, index, claim, class));
                    }
                }
                if create_snapshots.is_empty() && snapshots.iter().all(|s| s.is_ready()) {
                    let clone_of = |claim: &str| {
                        snapshots.iter().find(|s| {
                            s.annotations()
                                .get(ANNOTATION_SOURCE_CLAIM)
                                .map(String::as_str)
                                == Some(claim)
                        })
                    };
                    let mut volumes = Vec::new();
                    for claim in &resolved.claims {
                        let mounted = match clone_of(&claim.name) {
                            Some(snapshot) => {
                                let exists = observed
                                    .claims
                                    .iter()
                                    .any(|c| c.metadata.name == snapshot.metadata.name);
                                if let (false, Some(source)) =
                                    (exists, claims.iter().find(|c| c.name_any() == claim.name))
                                {
                                    create_claims.push(snapshot_clone(plan, snapshot, source));
                                }
                                snapshot.name_any()
                            }
                            None => claim.name.clone(),
                        };
                        volumes.push(BackupVolumeMount {
                            source_claim: claim.name.clone(),
                            mounted_claim: mounted,
                            excludes: claim.excludes.clone(),
                        });
                    }
                    let started = status
                        .active_run
                        .as_ref()
                        .and_then(|a| a.start_time.as_ref())
                        .map(|t| t.0)
                        .unwrap_or(now);
                    // The deadline is the whole run's, preparation included.
                    let deadline = (resolved.deadline - now.duration_since(started))
                        .max(SignedDuration::from_mins(1));
                    let backup_run = BackupRun {
                        trigger: info.trigger,
                        scheduled_time: info.scheduled_time,
                        manual_trigger: info.manual_trigger,
                        volumes,
                        node_name: direct_node.clone(),
                        deadline,
                        remove_stale_locks,
                    };
                    let mut job = backup_job(plan, &backup_run, &settings.job);
                    // The run's name was fixed when its snapshots were taken.
                    job.metadata.name = Some(run_name.clone());
                    create = Some(job);
                    preparing = None;
                }
            }
            // An idle plan prunes and checks its repository when they are due.
            let idle = create.is_none() && create_snapshots.is_empty();
            match status.active_run.is_none() && idle {
                true => {
                    if let Some(started) = maintenance::start_due(
                        plan,
                        resolved,
                        &mut status,
                        now,
                        remove_stale_locks,
                        &settings.job,
                    ) {
                        create = Some(started.job);
                        status.active_run = Some(started.active);
                        planned_events.push(started.event);
                    }
                }
                false => maintenance::show_next(plan, resolved, &mut status, now),
            }
            ready_message = match (&status.next_schedule_time, spec.suspend) {
                (_, true) => "suspended: no scheduled runs".into(),
                (Some(next), false) => format!("next run at {}", next.0),
                (None, false) => "ready".into(),
            };
        }
    }

    // 4. Conditions, and an Event when readiness changes.
    set_backup_plan_conditions(&mut status, &problems, &ready_message, generation, now);
    if let Some((run, snapshots)) = &preparing {
        let ready = snapshots.iter().filter(|s| s.is_ready()).count();
        set_condition(
            &mut status.conditions,
            types::RUNNING,
            ConditionStatus::True,
            reasons::PREPARING_SNAPSHOTS,
            format!(
                "Job {run} starts when its VolumeSnapshots are ready ({ready} of {})",
                snapshots.len()
            ),
            generation,
            now,
        );
    }
    // The snapshots and clones of runs that are over.
    let current_run = status.active_run.as_ref().map(|a| a.job_name.clone());
    let over = |labels: &BTreeMap<String, String>, deleting: bool| {
        !deleting
            && labels
                .get(LABEL_RUN)
                .is_some_and(|run| Some(run) != current_run.as_ref())
    };
    let delete_snapshots: Vec<String> = observed
        .snapshots
        .iter()
        .filter(|s| owned_by(*s, plan))
        .filter(|s| over(s.labels(), s.metadata.deletion_timestamp.is_some()))
        .map(|s| s.name_any())
        .collect();
    let delete_claims: Vec<String> = observed
        .claims
        .iter()
        .filter(|c| owned_by(*c, plan))
        .filter(|c| over(c.labels(), c.metadata.deletion_timestamp.is_some()))
        .map(|c| c.name_any())
        .collect();
    status.observed_generation = generation;
    let ready_after = find_condition(&status.conditions, types::READY)
        .map(|c| (c.status.clone(), c.reason.clone()));
    if ready_after != ready_before {
        if let Some(condition) =
            find_condition(&status.conditions, types::READY).filter(|c| c.status == "False")
        {
            planned_events.push(PlannedEvent {
                type_: EventType::Warning,
                reason: condition.reason.clone(),
                note: condition.message.clone(),
            });
        }
    }

    let requeue_after = if preparing.is_some() {
        settings.snapshot_poll
    } else if resolved.is_none() {
        settings.not_ready_recheck
    } else if status.active_run.is_some() {
        ACTIVE_REQUEUE
    } else {
        status
            .next_schedule_time
            .as_ref()
            .map(|t| t.0)
            .into_iter()
            .chain(maintenance::next_wake(&status))
            .min()
            .map(|next| next.duration_since(now).max(SignedDuration::from_secs(1)))
            .and_then(|wait| Duration::try_from(wait).ok())
            .unwrap_or(MAX_REQUEUE)
            .min(MAX_REQUEUE)
    };
    PlanDecision {
        status,
        create,
        create_snapshots,
        create_claims,
        delete_snapshots,
        delete_claims,
        delete,
        events: planned_events,
        finished,
        finished_maintenance: observed_maintenance.finished,
        newly_missed,
        // A suspended plan is not expected to back up: no interval, no overdue alert.
        schedule_interval: resolved
            .as_ref()
            .filter(|_| !spec.suspend)
            .and_then(|r| r.schedule.interval_after(now)),
        requeue_after,
    }
}

/// The finalizer on every BackupPlan: deleting a plan first deletes what the operator created for
/// it (its Jobs, and the VolumeSnapshots and clones of its runs).
pub const FINALIZER: &str = "neverwiped.io/cleanup";

/// Reconciles one BackupPlan: adds the finalizer, then [`apply`]; or, once the plan is being
/// deleted, [`cleanup`] and removes the finalizer.
#[tracing::instrument(name = "reconcile", skip_all, fields(kind = "BackupPlan", namespace = plan.namespace().unwrap_or_default(), name = %plan.name_any()))]
pub async fn reconcile(plan: Arc<BackupPlan>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = plan.namespace().ok_or(Error::Incomplete {
        kind: "BackupPlan",
        field: "namespace",
    })?;
    ctx.metrics
        .reconciliations
        .get_or_create(&ReconcileLabels {
            kind: "BackupPlan".into(),
        })
        .inc();
    let api = Api::<BackupPlan>::namespaced(ctx.client.clone(), &namespace);
    finalizer(&api, FINALIZER, plan, |event| async {
        match event {
            FinalizerEvent::Apply(plan) => apply(plan, ctx.clone()).await,
            FinalizerEvent::Cleanup(plan) => cleanup(plan, ctx.clone()).await,
        }
    })
    .await
    .map_err(|error| Error::Finalizer(Box::new(error)))
}

/// Deletes what the operator created for a plan that is being deleted: its backup Jobs (a running
/// one is stopped; the repository stays valid, the next backup of another plan reuses what it
/// uploaded) and the VolumeSnapshots and clones of its runs. The plan's metrics go too, so an
/// alert on its last success does not fire forever.
pub async fn cleanup(plan: Arc<BackupPlan>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = plan.namespace().unwrap_or_default();
    let name = plan.name_any();
    let client = &ctx.client;
    // Backups, prunes and checks; restores are owned by their Restore, not by the plan.
    let selector = format!("{LABEL_PLAN}={name}");
    let jobs = Api::<Job>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default().labels(&selector))
        .await?;
    for job in jobs.items.iter().filter(|job| owned_by(*job, &plan)) {
        delete_job(client, &namespace, &job.name_any()).await?;
    }
    let run_selector = format!("{LABEL_PLAN}={name},{LABEL_RUN}");
    let snapshots = list_if_served(
        &Api::<VolumeSnapshot>::namespaced(client.clone(), &namespace),
        &ListParams::default().labels(&run_selector),
    )
    .await?
    .unwrap_or_default();
    for snapshot in snapshots.iter().filter(|s| owned_by(*s, &plan)) {
        delete_snapshot(client, &namespace, &snapshot.name_any()).await?;
    }
    let clones = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default().labels(&run_selector))
        .await?;
    for clone in clones.items.iter().filter(|c| owned_by(*c, &plan)) {
        delete_claim(client, &namespace, &clone.name_any()).await?;
    }
    let labels = PlanLabels {
        namespace: namespace.clone(),
        plan: name.clone(),
    };
    ctx.metrics.remove_plan(&labels);
    tracing::info!(jobs = jobs.items.len(), "cleaned up a deleted BackupPlan");
    Ok(Action::await_change())
}

/// Fetches what a plan names, [`decide`]s, and applies the decision.
pub async fn apply(plan: Arc<BackupPlan>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = plan.namespace().unwrap_or_default();
    let name = plan.name_any();
    let client = &ctx.client;

    // Backups, prunes and checks ([`decide`] keeps those the plan owns).
    let selector = format!("{LABEL_PLAN}={name}");
    let may_snapshot = !plan.spec.volumes.is_empty() && plan.spec.copy_method != CopyMethod::Direct;
    let observed = ObservedPlan {
        jobs: Api::<Job>::namespaced(client.clone(), &namespace)
            .list(&ListParams::default().labels(&selector))
            .await?
            .items,
        pods: Api::<Pod>::namespaced(client.clone(), &namespace)
            .list(&ListParams::default())
            .await?
            .items,
        secrets: fetch_secret_keys(client, &namespace, &secrets_used(&plan.spec)).await?,
        claims: if plan.spec.volumes.is_empty() {
            Vec::new()
        } else {
            Api::<PersistentVolumeClaim>::namespaced(client.clone(), &namespace)
                .list(&ListParams::default())
                .await?
                .items
        },
        // Listed for every plan: a plan switched to Direct still cleans up after its last run.
        snapshots: list_if_served(
            &Api::<VolumeSnapshot>::namespaced(client.clone(), &namespace),
            &ListParams::default().labels(&format!("{LABEL_PLAN}={name},{LABEL_RUN}")),
        )
        .await?
        .unwrap_or_default(),
        snapshot_classes: if may_snapshot {
            list_if_served(
                &Api::<VolumeSnapshotClass>::all(client.clone()),
                &ListParams::default(),
            )
            .await?
        } else {
            None
        },
        storage_classes: if may_snapshot {
            Api::<StorageClass>::all(client.clone())
                .list(&ListParams::default())
                .await?
                .items
        } else {
            Vec::new()
        },
    };
    let now = Timestamp::now();
    let decision = decide(&plan, &observed, now, &ctx.settings);

    let snapshots_api = Api::<VolumeSnapshot>::namespaced(client.clone(), &namespace);
    for snapshot in &decision.create_snapshots {
        create_if_absent(&snapshots_api, snapshot).await?;
    }
    let claims_api = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &namespace);
    for claim in &decision.create_claims {
        create_if_absent(&claims_api, claim).await?;
    }
    if let Some(job) = &decision.create {
        create_job(client, &namespace, job).await?;
    }
    let patch = serde_json::json!({
        "apiVersion": "neverwiped.io/v1alpha1",
        "kind": "BackupPlan",
        "status": decision.status,
    });
    Api::<BackupPlan>::namespaced(client.clone(), &namespace)
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    for event in &decision.events {
        ctx.publish(
            plan.as_ref(),
            event.type_,
            &event.reason,
            event.note.clone(),
            "Reconcile",
        )
        .await;
    }
    for job in &decision.delete {
        delete_job(client, &namespace, job).await?;
    }
    for claim in &decision.delete_claims {
        delete_claim(client, &namespace, claim).await?;
    }
    for snapshot in &decision.delete_snapshots {
        delete_snapshot(client, &namespace, snapshot).await?;
    }

    let labels = PlanLabels {
        namespace: namespace.clone(),
        plan: name.clone(),
    };
    for record in &decision.finished {
        ctx.metrics
            .backup_runs
            .get_or_create(&RunLabels {
                namespace: namespace.clone(),
                plan: name.clone(),
                result: format!("{:?}", record.result),
                reason: record.reason.clone(),
            })
            .inc();
        if let Some(duration) = record.duration_seconds {
            ctx.metrics
                .backup_duration_seconds
                .get_or_create(&labels)
                .observe(duration as f64);
        }
        if let Some(bytes) = record.bytes_sent {
            ctx.metrics
                .backup_bytes_sent
                .get_or_create(&labels)
                .inc_by(bytes.max(0) as u64);
        }
    }
    if decision.newly_missed > 0 {
        ctx.metrics
            .backup_missed_runs
            .get_or_create(&labels)
            .inc_by(u64::from(decision.newly_missed));
    }
    for (kind, record) in &decision.finished_maintenance {
        ctx.metrics
            .maintenance_runs
            .get_or_create(&MaintenanceLabels {
                namespace: namespace.clone(),
                plan: name.clone(),
                kind: kind.label().into(),
                result: format!("{:?}", record.result),
            })
            .inc();
        if let Some(bytes) = record.bytes_freed {
            ctx.metrics
                .prune_freed_bytes
                .get_or_create(&labels)
                .inc_by(bytes.max(0) as u64);
        }
    }
    set_plan_gauges(&ctx.metrics, &labels, &decision);
    ctx.reset_failures(&super::object_key(plan.as_ref()));
    Ok(Action::requeue(decision.requeue_after))
}

/// The gauges of a plan, from its status: they survive operator restarts.
fn set_plan_gauges(metrics: &Metrics, labels: &PlanLabels, decision: &PlanDecision) {
    let status = &decision.status;
    if let Some(time) = &status.last_successful_time {
        metrics
            .backup_last_success_timestamp_seconds
            .get_or_create(labels)
            .set(time.0.as_second());
    }
    match decision.schedule_interval {
        Some(interval) => {
            metrics
                .backup_schedule_interval_seconds
                .get_or_create(labels)
                .set(interval.as_secs());
        }
        None => {
            metrics.backup_schedule_interval_seconds.remove(labels);
        }
    }
    if let Some(repository) = &status.repository {
        metrics
            .repository_size_bytes
            .get_or_create(labels)
            .set(repository.size_bytes);
        metrics
            .repository_snapshots
            .get_or_create(labels)
            .set(repository.snapshots);
    }
    if let Some(check) = &status.check.last_run {
        metrics
            .repository_check_ok
            .get_or_create(labels)
            .set(i64::from(check.result.is_success()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        BackupPlanSpec, BackupVolume, CheckSettings, CredentialsSecretRef, Maintenance,
        PruneSettings, Repository, SecretKeyRef,
    };
    use crate::job::ANNOTATION_TRIGGER;
    use crate::job::SIDECAR_CONTAINER;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use neverwiped_contract::{ExitStatus, Operation, RunResult, RESULT_FORMAT_VERSION};
    use std::collections::BTreeMap;

    pub(super) fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    pub(super) fn settings() -> Settings {
        Settings::with_image("sidecar:test")
    }

    pub(super) fn plan() -> BackupPlan {
        let mut plan = BackupPlan::new(
            "nightly",
            BackupPlanSpec {
                schedule: "30 2 * * *".into(),
                time_zone: "UTC".into(),
                suspend: false,
                manual_trigger: None,
                repository: Repository {
                    url: "http://127.0.0.1:8000/shop".into(),
                    password_secret_ref: SecretKeyRef {
                        name: "repo".into(),
                        key: "password".into(),
                    },
                    credentials_secret_ref: Some(CredentialsSecretRef::new("gate")),
                    ca_secret_ref: None,
                },
                volumes: vec![BackupVolume::claim("data")],
                copy_method: CopyMethod::Direct,
                volume_snapshot_class_name: None,
                databases: vec![],
                retention: None,
                // The backup tests leave out prunes and checks; maintenance_tests has them.
                maintenance: Maintenance {
                    prune: PruneSettings {
                        suspend: true,
                        ..PruneSettings::default()
                    },
                    check: CheckSettings {
                        suspend: true,
                        ..CheckSettings::default()
                    },
                },
                limits: None,
                deadline: "12h".into(),
                pod: None,
            },
        );
        plan.metadata.namespace = Some("shop".into());
        plan.metadata.uid = Some("uid-1".into());
        plan.metadata.generation = Some(1);
        plan.metadata.creation_timestamp = Some(Time(at("2026-11-01T00:00:00Z")));
        plan
    }

    pub(super) fn observed() -> ObservedPlan {
        ObservedPlan {
            secrets: [
                ("repo".to_string(), ["password".to_string()].into()),
                (
                    "gate".to_string(),
                    ["username".to_string(), "password".to_string()].into(),
                ),
            ]
            .into(),
            claims: vec![PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some("data".into()),
                    ..ObjectMeta::default()
                },
                ..PersistentVolumeClaim::default()
            }],
            ..ObservedPlan::default()
        }
    }

    #[test]
    fn a_due_run_creates_its_job_and_marks_the_plan_running() {
        let now = at("2026-11-30T02:30:02Z");
        let mut plan = plan();
        plan.status = Some(BackupPlanStatus {
            last_schedule_time: Some(Time(at("2026-11-29T02:30:00Z"))),
            ..BackupPlanStatus::default()
        });
        let decision = decide(&plan, &observed(), now, &settings());
        let job = decision.create.expect("a Job");
        assert_eq!(job.metadata.name.as_deref(), Some("nightly-29933430"));
        let active = decision.status.active_run.as_ref().unwrap();
        assert_eq!(active.trigger, RunTrigger::Schedule);
        assert_eq!(
            decision.status.last_schedule_time,
            Some(Time(at("2026-11-30T02:30:00Z")))
        );
        assert_eq!(
            decision.status.next_schedule_time,
            Some(Time(at("2026-12-01T02:30:00Z")))
        );
        let running = find_condition(&decision.status.conditions, types::RUNNING).unwrap();
        assert_eq!(running.status, "True");
        assert_eq!(decision.events[0].reason, "BackupStarted");
        assert_eq!(decision.requeue_after, ACTIVE_REQUEUE);
    }

    #[test]
    fn nothing_due_waits_until_the_next_run() {
        let now = at("2026-11-30T01:30:00Z");
        let mut plan = plan();
        plan.status = Some(BackupPlanStatus {
            last_schedule_time: Some(Time(at("2026-11-29T02:30:00Z"))),
            ..BackupPlanStatus::default()
        });
        let decision = decide(&plan, &observed(), now, &settings());
        assert!(decision.create.is_none());
        assert_eq!(decision.requeue_after, Duration::from_secs(3600));
        let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(ready.message, "next run at 2026-11-30T02:30:00Z");
        assert!(decision.events.is_empty());
    }

    #[test]
    fn a_missing_secret_blocks_runs_with_a_condition_and_one_event() {
        let mut observed = observed();
        observed.secrets.remove("repo");
        let mut plan = plan();
        plan.spec.manual_trigger = Some("now".into());
        let decision = decide(&plan, &observed, at("2026-11-30T02:30:00Z"), &settings());
        assert!(decision.create.is_none());
        let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "SecretNotFound")
        );
        assert_eq!(decision.events.len(), 1);
        assert_eq!(decision.events[0].type_, EventType::Warning);
        assert_eq!(decision.requeue_after, settings().not_ready_recheck);
        // The same problem again: no second Event.
        plan.status = Some(decision.status);
        let again = decide(&plan, &observed, at("2026-11-30T02:32:00Z"), &settings());
        assert!(again.events.is_empty());
    }

    pub(super) fn finished_job(name: &str, created: &str) -> Job {
        Job {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(at(created))),
                owner_references: Some(vec![
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                        api_version: "neverwiped.io/v1alpha1".into(),
                        kind: "BackupPlan".into(),
                        name: "nightly".into(),
                        uid: "uid-1".into(),
                        controller: Some(true),
                        block_owner_deletion: None,
                    },
                ]),
                annotations: Some(BTreeMap::from([(
                    ANNOTATION_TRIGGER.to_string(),
                    "Manual".to_string(),
                )])),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(JobStatus {
                conditions: Some(vec![JobCondition {
                    type_: "Complete".into(),
                    status: "True".into(),
                    ..JobCondition::default()
                }]),
                completion_time: Some(Time(at(created))),
                ..JobStatus::default()
            }),
        }
    }

    pub(super) fn pod_for(job: &str) -> Pod {
        let result = RunResult {
            version: RESULT_FORMAT_VERSION,
            operation: Operation::Backup,
            status: ExitStatus::Success,
            snapshot_time: None,
            snapshot_id: Some("abcdef12".into()),
            started_at: "2026-11-30T02:00:00Z".into(),
            finished_at: "2026-11-30T02:01:00Z".into(),
            duration_secs: 60.0,
            files: 3,
            bytes_read: 300,
            bytes_added: 30,
            bytes_transferred: 40,
            databases: vec![],
            warnings_total: 0,
            warnings: vec![],
            error: None,
            repository: None,
            snapshots_forgotten: None,
            prune: None,
            check: None,
        };
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("{job}-x")),
                labels: Some(BTreeMap::from([(
                    "batch.kubernetes.io/job-name".to_string(),
                    job.to_string(),
                )])),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some("Succeeded".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: SIDECAR_CONTAINER.into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: 0,
                            message: Some(result.to_termination_message()),
                            ..ContainerStateTerminated::default()
                        }),
                        ..ContainerState::default()
                    }),
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }

    #[test]
    fn finished_jobs_are_recorded_once_and_old_ones_deleted() {
        let mut observed = observed();
        for day in 1..=5 {
            let name = format!("nightly-{day}");
            observed
                .jobs
                .push(finished_job(&name, &format!("2026-11-0{day}T02:30:00Z")));
            observed.pods.push(pod_for(&name));
        }
        let mut plan = plan();
        let now = at("2026-11-06T00:00:00Z");
        let decision = decide(&plan, &observed, now, &settings());
        assert_eq!(decision.finished.len(), 5);
        assert_eq!(decision.status.history[0].job_name, "nightly-5");
        assert_eq!(
            decision
                .status
                .last_run
                .as_ref()
                .unwrap()
                .snapshot_id
                .as_deref(),
            Some("abcdef12")
        );
        assert_eq!(decision.delete, ["nightly-2", "nightly-1"]);
        let succeeded =
            find_condition(&decision.status.conditions, types::LAST_BACKUP_SUCCEEDED).unwrap();
        assert_eq!(succeeded.status, "True");
        assert_eq!(
            decision
                .events
                .iter()
                .filter(|e| e.reason == "BackupSucceeded")
                .count(),
            5
        );

        plan.status = Some(decision.status);
        let again = decide(&plan, &observed, now, &settings());
        assert!(again.finished.is_empty());
        assert!(again.events.is_empty());
    }

    #[test]
    fn a_running_job_prevents_a_second_run() {
        let mut observed = observed();
        let mut running = finished_job("nightly-manual-1", "2026-11-30T02:00:00Z");
        running.status = Some(JobStatus::default());
        observed.jobs.push(running);
        let mut plan = plan();
        plan.status = Some(BackupPlanStatus {
            last_schedule_time: Some(Time(at("2026-11-29T02:30:00Z"))),
            ..BackupPlanStatus::default()
        });
        let decision = decide(&plan, &observed, at("2026-11-30T02:30:00Z"), &settings());
        assert!(decision.create.is_none());
        assert_eq!(
            decision.status.active_run.as_ref().unwrap().job_name,
            "nightly-manual-1"
        );
        // The scheduled time is not consumed: it catches up when the running one ends.
        assert_eq!(
            decision.status.last_schedule_time,
            Some(Time(at("2026-11-29T02:30:00Z")))
        );
    }

    pub(super) fn args(job: &Job) -> Vec<String> {
        job.spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .args
            .clone()
            .unwrap()
    }

    #[test]
    fn locks_of_earlier_runs_are_removed_only_when_no_pod_of_the_plan_is_alive() {
        let mut plan = plan();
        plan.spec.manual_trigger = Some("again".into());
        // The earlier run was killed: its Job failed, its pod is gone or ended.
        let mut observed = observed();
        let mut killed = pod_for("nightly-manual-0");
        killed.metadata.labels = Some(BTreeMap::from([
            (LABEL_PLAN.to_string(), "nightly".to_string()),
            (LABEL_OPERATION.to_string(), "backup".to_string()),
        ]));
        killed.status.as_mut().unwrap().phase = Some("Failed".into());
        observed.pods.push(killed.clone());
        let decision = decide(&plan, &observed, at("2026-11-30T12:00:00Z"), &settings());
        let job = decision.create.unwrap();
        let hostname = crate::job::lock_hostname("shop", "nightly");
        assert!(args(&job)
            .windows(2)
            .any(|w| w == ["--remove-locks-of-host", hostname.as_str()]));

        // A pod of the plan still runs (its Job already counted as failed): its lock is live.
        killed.status.as_mut().unwrap().phase = Some("Running".into());
        observed.pods = vec![killed];
        let decision = decide(&plan, &observed, at("2026-11-30T12:00:00Z"), &settings());
        let job = decision.create.unwrap();
        assert!(!args(&job).contains(&"--remove-locks-of-host".to_string()));
    }

    #[test]
    fn a_manual_trigger_runs_now_even_when_suspended() {
        let mut plan = plan();
        plan.spec.suspend = true;
        plan.spec.manual_trigger = Some("restore-drill".into());
        let decision = decide(&plan, &observed(), at("2026-11-30T12:00:00Z"), &settings());
        let job = decision.create.unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("nightly-manual-1"));
        assert_eq!(
            job.metadata.annotations.as_ref().unwrap()[ANNOTATION_MANUAL_TRIGGER],
            "restore-drill"
        );
        assert_eq!(
            decision.status.last_manual_trigger.as_deref(),
            Some("restore-drill")
        );
        assert_eq!(decision.status.next_schedule_time, None);
    }
}

#[cfg(test)]
mod snapshot_tests {
    use super::tests::*;
    use super::*;
    use crate::csi::VolumeSnapshotStatus;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::api::core::v1::PersistentVolumeClaimSpec;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn storage_class(name: &str, provisioner: &str) -> StorageClass {
        StorageClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            provisioner: provisioner.into(),
            ..StorageClass::default()
        }
    }

    fn snapshot_class(name: &str, driver: &str) -> VolumeSnapshotClass {
        VolumeSnapshotClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            driver: driver.into(),
            deletion_policy: "Delete".into(),
            parameters: None,
        }
    }

    fn snapshot_plan() -> BackupPlan {
        let mut plan = plan();
        plan.spec.copy_method = CopyMethod::Snapshot;
        plan.spec.manual_trigger = Some("now".into());
        // Today's scheduled run is done: only the manual one is due.
        plan.status = Some(BackupPlanStatus {
            last_schedule_time: Some(Time(at("2026-11-30T02:30:00Z"))),
            ..BackupPlanStatus::default()
        });
        plan
    }

    fn snapshot_world() -> ObservedPlan {
        let mut observed = observed();
        observed.claims[0].spec = Some(PersistentVolumeClaimSpec {
            storage_class_name: Some("fast".into()),
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            ..PersistentVolumeClaimSpec::default()
        });
        observed.storage_classes = vec![storage_class("fast", "csi.example.com")];
        observed.snapshot_classes = Some(vec![snapshot_class("fast-snap", "csi.example.com")]);
        observed
    }

    /// What the API server returns for a created object.
    fn stored<K: Resource>(mut object: K, created: &str) -> K {
        object.meta_mut().creation_timestamp = Some(Time(at(created)));
        object
    }

    fn ready(mut snapshot: VolumeSnapshot) -> VolumeSnapshot {
        snapshot.status = Some(VolumeSnapshotStatus {
            ready_to_use: Some(true),
            restore_size: Some(Quantity("3Gi".into())),
            ..VolumeSnapshotStatus::default()
        });
        snapshot
    }

    #[test]
    fn a_snapshot_run_takes_its_snapshots_then_clones_them_into_its_job_then_cleans_up() {
        let mut plan = snapshot_plan();
        let mut observed = snapshot_world();
        let now = at("2026-11-30T12:00:00Z");

        // The run starts by taking a snapshot of each volume; no Job yet.
        let decision = decide(&plan, &observed, now, &settings());
        assert!(decision.create.is_none());
        assert_eq!(decision.create_snapshots.len(), 1);
        let snapshot = decision.create_snapshots[0].clone();
        assert_eq!(
            snapshot.metadata.name.as_deref(),
            Some("nightly-manual-1-0")
        );
        assert_eq!(
            snapshot.spec.source.persistent_volume_claim_name.as_deref(),
            Some("data")
        );
        assert_eq!(
            snapshot.spec.volume_snapshot_class_name.as_deref(),
            Some("fast-snap")
        );
        assert_eq!(
            decision.status.active_run.as_ref().unwrap().job_name,
            "nightly-manual-1"
        );
        assert_eq!(decision.events[0].reason, "BackupStarted");
        plan.status = Some(decision.status);

        // Not ready yet: the run waits, and says so.
        observed.snapshots = vec![stored(snapshot.clone(), "2026-11-30T12:00:00Z")];
        let decision = decide(&plan, &observed, at("2026-11-30T12:00:05Z"), &settings());
        assert!(decision.create.is_none() && decision.create_snapshots.is_empty());
        assert!(decision.delete_snapshots.is_empty());
        let running = find_condition(&decision.status.conditions, types::RUNNING).unwrap();
        assert_eq!(running.reason, "PreparingSnapshots");
        assert_eq!(decision.requeue_after, settings().snapshot_poll);
        assert_eq!(decision.status.last_manual_trigger.as_deref(), Some("now"));
        plan.status = Some(decision.status);

        // Ready: a claim is cloned from it and the Job mounts the clone where the volume goes.
        observed.snapshots = vec![ready(stored(snapshot, "2026-11-30T12:00:00Z"))];
        let decision = decide(&plan, &observed, at("2026-11-30T12:01:00Z"), &settings());
        assert_eq!(decision.create_claims.len(), 1);
        let clone = decision.create_claims[0].clone();
        let clone_spec = clone.spec.as_ref().unwrap();
        assert_eq!(clone.metadata.name.as_deref(), Some("nightly-manual-1-0"));
        assert_eq!(
            clone_spec.data_source.as_ref().unwrap().kind,
            "VolumeSnapshot"
        );
        assert_eq!(clone_spec.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(
            clone_spec
                .resources
                .as_ref()
                .unwrap()
                .requests
                .as_ref()
                .unwrap()["storage"],
            Quantity("3Gi".into())
        );
        let job = decision.create.clone().expect("the Job");
        assert_eq!(job.metadata.name.as_deref(), Some("nightly-manual-1"));
        let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let volume = pod
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find_map(|v| v.persistent_volume_claim.as_ref())
            .unwrap();
        assert_eq!(volume.claim_name, "nightly-manual-1-0");
        assert_eq!(args(&job)[1], "/data/data", "the snapshot names the source");
        // The minute of preparation counts against the deadline.
        assert_eq!(
            job.spec.as_ref().unwrap().active_deadline_seconds,
            Some(12 * 3600 - 60)
        );
        plan.status = Some(decision.status);

        // The Job runs: everything of the run stays.
        observed.claims.push(stored(clone, "2026-11-30T12:01:00Z"));
        let mut job = stored(job, "2026-11-30T12:01:00Z");
        observed.jobs = vec![job.clone()];
        let decision = decide(&plan, &observed, at("2026-11-30T12:02:00Z"), &settings());
        assert!(decision.create.is_none() && decision.create_claims.is_empty());
        assert!(decision.delete_snapshots.is_empty() && decision.delete_claims.is_empty());
        plan.status = Some(decision.status);

        // The Job ends: the run is recorded, its snapshot and clone deleted.
        job.status = Some(JobStatus {
            conditions: Some(vec![JobCondition {
                type_: "Complete".into(),
                status: "True".into(),
                ..JobCondition::default()
            }]),
            ..JobStatus::default()
        });
        observed.jobs = vec![job];
        observed.pods = vec![pod_for("nightly-manual-1")];
        let decision = decide(&plan, &observed, at("2026-11-30T12:30:00Z"), &settings());
        assert_eq!(decision.finished.len(), 1);
        assert_eq!(decision.delete_snapshots, ["nightly-manual-1-0"]);
        assert_eq!(decision.delete_claims, ["nightly-manual-1-0"]);
        assert!(decision.create_snapshots.is_empty());
    }

    #[test]
    fn a_snapshot_whose_create_failed_is_taken_before_the_job_starts() {
        let mut plan = snapshot_plan();
        plan.spec
            .volumes
            .push(crate::api::BackupVolume::claim("logs"));
        let mut observed = snapshot_world();
        let mut logs = observed.claims[0].clone();
        logs.metadata.name = Some("logs".into());
        observed.claims.push(logs);
        let decision = decide(&plan, &observed, at("2026-11-30T12:00:00Z"), &settings());
        let names: Vec<String> = decision
            .create_snapshots
            .iter()
            .map(|s| s.name_any())
            .collect();
        assert_eq!(names, ["nightly-manual-1-0", "nightly-manual-1-1"]);
        plan.status = Some(decision.status);
        // Only the first was created (the second create failed); it is ready.
        observed.snapshots = vec![ready(stored(
            decision.create_snapshots[0].clone(),
            "2026-11-30T12:00:00Z",
        ))];
        let decision = decide(&plan, &observed, at("2026-11-30T12:00:10Z"), &settings());
        assert!(
            decision.create.is_none(),
            "the Job waits for every snapshot"
        );
        let again: Vec<String> = decision
            .create_snapshots
            .iter()
            .map(|s| s.name_any())
            .collect();
        assert_eq!(again, ["nightly-manual-1-1"]);
        assert_eq!(
            decision.create_snapshots[0].annotations()[ANNOTATION_SOURCE_CLAIM],
            "logs"
        );
    }

    #[test]
    fn a_failed_snapshot_fails_the_run_with_the_drivers_message() {
        let mut plan = snapshot_plan();
        let mut observed = snapshot_world();
        let decision = decide(&plan, &observed, at("2026-11-30T12:00:00Z"), &settings());
        let mut snapshot = stored(decision.create_snapshots[0].clone(), "2026-11-30T12:00:00Z");
        plan.status = Some(decision.status);
        snapshot.status = Some(VolumeSnapshotStatus {
            ready_to_use: Some(false),
            error: Some(crate::csi::VolumeSnapshotError {
                message: Some("rpc error: code = ResourceExhausted desc = quota".into()),
                time: None,
            }),
            ..VolumeSnapshotStatus::default()
        });
        observed.snapshots = vec![snapshot];
        let decision = decide(&plan, &observed, at("2026-11-30T12:00:30Z"), &settings());
        let last = decision.status.last_run.as_ref().unwrap();
        assert_eq!(last.job_name, "nightly-manual-1");
        assert_eq!(last.reason, "SnapshotFailed");
        assert!(last.message.as_ref().unwrap().contains("ResourceExhausted"));
        assert!(decision.status.active_run.is_none());
        assert_eq!(decision.delete_snapshots, ["nightly-manual-1-0"]);
        assert!(decision.create.is_none());
        assert_eq!(decision.events[0].reason, "BackupFailed");
    }

    #[test]
    fn snapshots_not_ready_by_the_deadline_fail_the_run() {
        let mut plan = snapshot_plan();
        plan.spec.deadline = "1h".into();
        let mut observed = snapshot_world();
        let decision = decide(&plan, &observed, at("2026-11-30T12:00:00Z"), &settings());
        observed.snapshots = vec![stored(
            decision.create_snapshots[0].clone(),
            "2026-11-30T12:00:00Z",
        )];
        plan.status = Some(decision.status);
        let decision = decide(&plan, &observed, at("2026-11-30T13:00:01Z"), &settings());
        let last = decision.status.last_run.as_ref().unwrap();
        assert_eq!(last.reason, "SnapshotFailed");
        assert!(last.message.as_ref().unwrap().contains("deadline of 1h"));
    }

    #[test]
    fn snapshot_without_a_class_for_the_driver_is_not_ready() {
        let plan = snapshot_plan();
        let mut observed = snapshot_world();
        observed.snapshot_classes = Some(vec![snapshot_class("other", "csi.other.org")]);
        let decision = decide(&plan, &observed, at("2026-11-30T12:00:00Z"), &settings());
        let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
        assert_eq!(ready.reason, "NoVolumeSnapshotClass");
        assert!(
            ready.message.contains("\"csi.example.com\""),
            "{}",
            ready.message
        );
        assert!(decision.create_snapshots.is_empty() && decision.create.is_none());

        // Auto reads that volume directly instead.
        let mut auto = plan.clone();
        auto.spec.copy_method = CopyMethod::Auto;
        let decision = decide(&auto, &observed, at("2026-11-30T12:00:00Z"), &settings());
        assert!(decision.create_snapshots.is_empty());
        assert!(decision.create.is_some());
    }
}

#[cfg(test)]
mod maintenance_tests {
    use super::tests::{args, at, finished_job, observed, plan, pod_for, settings};
    use super::*;
    use crate::api::{Maintenance, Retention};
    use crate::conditions::reasons;
    use neverwiped_contract::{
        CheckStats, ExitStatus, Operation, PruneStats, RepositoryStats, RunResult,
    };

    /// The test plan with prunes (Sundays 00:00) and checks (the 1st, 00:00) on, as by default.
    fn maintained_plan() -> BackupPlan {
        let mut plan = plan();
        plan.spec.maintenance = Maintenance::default();
        plan
    }

    /// `job` finished, its pod reporting `result`.
    fn finish(observed: &mut ObservedPlan, job: &Job, result: RunResult) {
        let name = job.name_any();
        let mut finished = job.clone();
        finished.status = finished_job(&name, "2026-11-30T00:10:00Z").status;
        observed.jobs.retain(|j| j.name_any() != name);
        observed.jobs.push(finished);
        let mut pod = pod_for(&name);
        let terminated = pod
            .status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
            .state
            .as_mut()
            .unwrap()
            .terminated
            .as_mut()
            .unwrap();
        terminated.message = Some(result.to_termination_message());
        observed.pods.push(pod);
    }

    fn result(operation: Operation, status: ExitStatus) -> RunResult {
        RunResult {
            version: neverwiped_contract::RESULT_FORMAT_VERSION,
            operation,
            status,
            snapshot_time: None,
            snapshot_id: None,
            started_at: "2026-11-30T00:00:00Z".into(),
            finished_at: "2026-11-30T00:10:00Z".into(),
            duration_secs: 600.0,
            files: 0,
            bytes_read: 0,
            bytes_added: 0,
            bytes_transferred: 0,
            databases: vec![],
            warnings_total: 0,
            warnings: vec![],
            error: None,
            repository: Some(RepositoryStats {
                size_bytes: 580_000_000,
                snapshots: 14,
            }),
            snapshots_forgotten: None,
            prune: None,
            check: None,
        }
    }

    #[test]
    fn a_due_prune_runs_as_its_own_unprivileged_job_and_reports_what_it_freed() {
        let mut plan = maintained_plan();
        // The nightly backup of the 28th ran; Sunday's prune (the 29th, 00:00) is due.
        plan.status = Some(BackupPlanStatus {
            last_schedule_time: Some(Time(at("2026-11-28T02:30:00Z"))),
            ..BackupPlanStatus::default()
        });
        let now = at("2026-11-29T00:00:05Z");
        let mut observed = observed();
        let decision = decide(&plan, &observed, now, &settings());
        let job = decision.create.clone().expect("a prune Job");
        assert_eq!(job.name_any(), "nightly-prune-29931840");
        assert_eq!(job.labels().get(LABEL_OPERATION).unwrap(), "prune");
        let args = args(&job);
        assert_eq!(args[0], "prune");
        assert!(args.contains(&"--remove-locks-of-host".to_string()));
        let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let security = pod.containers[0].security_context.as_ref().unwrap();
        assert_eq!(security.run_as_non_root, Some(true));
        assert_eq!(security.capabilities.as_ref().unwrap().add, None);
        assert!(pod
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .all(|v| v.persistent_volume_claim.is_none()));
        let active = decision.status.active_run.clone().unwrap();
        assert_eq!(active.kind, RunKind::Prune);
        let running = find_condition(&decision.status.conditions, types::RUNNING).unwrap();
        assert_eq!(running.reason, reasons::PRUNE_RUNNING);
        assert_eq!(decision.events[0].reason, events::PRUNE_STARTED);
        assert_eq!(
            decision.status.prune.next_schedule_time,
            Some(Time(at("2026-12-06T00:00:00Z")))
        );

        // It runs: nothing else starts, even a manual backup.
        plan.status = Some(decision.status);
        plan.spec.manual_trigger = Some("now".into());
        observed.jobs.push(job.clone());
        let busy = decide(&plan, &observed, at("2026-11-29T00:05:00Z"), &settings());
        assert!(busy.create.is_none());
        assert_eq!(
            busy.status.active_run.as_ref().unwrap().kind,
            RunKind::Prune
        );

        // It ends: the freed bytes and the repository's size land in the status, and the waiting
        // manual backup starts.
        let mut pruned = result(Operation::Prune, ExitStatus::Success);
        pruned.prune = Some(PruneStats {
            bytes_freed: 123_456,
            bytes_kept: 580_000_000,
            packs_deleted: 3,
        });
        finish(&mut observed, &job, pruned);
        plan.status = Some(busy.status);
        let done = decide(&plan, &observed, at("2026-11-29T00:11:00Z"), &settings());
        let last = done.status.prune.last_run.as_ref().unwrap();
        assert_eq!(
            (last.result, last.bytes_freed),
            (RunOutcome::Succeeded, Some(123_456))
        );
        let repository = done.status.repository.as_ref().unwrap();
        assert_eq!(
            (repository.size.as_str(), repository.snapshots),
            ("553Mi", 14)
        );
        assert_eq!(done.finished_maintenance.len(), 1);
        assert!(done
            .events
            .iter()
            .any(|e| e.reason == events::PRUNE_SUCCEEDED));
        let backup = done
            .create
            .expect("the manual backup starts after the prune");
        assert_eq!(backup.labels().get(LABEL_OPERATION).unwrap(), "backup");
        // The prune is recorded once.
        plan.status = Some(done.status);
        let again = decide(&plan, &observed, at("2026-11-29T00:12:00Z"), &settings());
        assert!(again.finished_maintenance.is_empty());
    }

    #[test]
    fn a_prune_due_during_a_backup_waits_for_it_and_then_catches_up() {
        let mut plan = maintained_plan();
        plan.status = Some(BackupPlanStatus {
            last_schedule_time: Some(Time(at("2026-11-28T23:50:00Z"))),
            ..BackupPlanStatus::default()
        });
        plan.spec.schedule = "50 23 * * *".into();
        let mut observed = observed();
        // The backup of 23:50 is still running at midnight.
        // Prunes run daily at midnight; the one of the 29th already ran.
        plan.spec.maintenance.prune.schedule = "0 0 * * *".into();
        plan.status.as_mut().unwrap().prune.last_schedule_time =
            Some(Time(at("2026-11-29T00:00:00Z")));
        let backup_started = decide(&plan, &observed, at("2026-11-29T23:50:00Z"), &settings());
        let backup = backup_started.create.clone().unwrap();
        assert_eq!(backup.labels().get(LABEL_OPERATION).unwrap(), "backup");
        plan.status = Some(backup_started.status);
        observed.jobs.push(backup.clone());
        let during = decide(&plan, &observed, at("2026-11-30T00:00:30Z"), &settings());
        assert!(during.create.is_none(), "no prune while the backup runs");
        assert_eq!(
            during.status.active_run.as_ref().unwrap().kind,
            RunKind::Backup
        );

        finish(
            &mut observed,
            &backup,
            result(Operation::Backup, ExitStatus::Success),
        );
        plan.status = Some(during.status);
        let after = decide(&plan, &observed, at("2026-11-30T00:20:00Z"), &settings());
        let prune = after.create.expect("the prune catches up");
        assert_eq!(prune.labels().get(LABEL_OPERATION).unwrap(), "prune");
        assert_eq!(
            after.status.active_run.as_ref().unwrap().trigger,
            RunTrigger::CatchUp
        );
    }

    #[test]
    fn a_check_that_finds_problems_fails_with_repository_damaged() {
        let mut plan = maintained_plan();
        plan.spec.maintenance.prune.suspend = true;
        plan.status = Some(BackupPlanStatus {
            last_schedule_time: Some(Time(at("2026-11-30T02:30:00Z"))),
            ..BackupPlanStatus::default()
        });
        let mut observed = observed();
        let started = decide(&plan, &observed, at("2026-12-01T00:00:10Z"), &settings());
        let job = started.create.clone().expect("a check Job");
        assert_eq!(job.labels().get(LABEL_OPERATION).unwrap(), "check");
        let args = args(&job);
        assert_eq!(args[0], "check");
        assert!(args.windows(2).any(|w| w == ["--read-data-subset", "5%"]));
        assert_eq!(started.status.prune.next_schedule_time, None, "suspended");

        observed.jobs.push(job.clone());
        let mut damaged = result(Operation::Check, ExitStatus::Failed);
        damaged.error = Some("the repository has 1 problem(s): pack 1a2b is missing".into());
        damaged.check = Some(CheckStats {
            snapshots: 14,
            packs: 40,
            packs_read: 2,
            problems: 1,
        });
        finish(&mut observed, &job, damaged);
        plan.status = Some(started.status);
        let done = decide(&plan, &observed, at("2026-12-01T00:30:00Z"), &settings());
        let last = done.status.check.last_run.as_ref().unwrap();
        assert_eq!(last.result, RunOutcome::Failed);
        assert_eq!(last.reason, reasons::REPOSITORY_DAMAGED);
        assert_eq!(last.problems, Some(1));
        assert!(last
            .message
            .as_ref()
            .unwrap()
            .contains("pack 1a2b is missing"));
        let event = done
            .events
            .iter()
            .find(|e| e.reason == events::CHECK_FAILED)
            .unwrap();
        assert_eq!(event.type_, EventType::Warning);
    }

    #[test]
    fn retention_goes_into_the_backup_jobs_arguments() {
        let mut plan = plan();
        plan.spec.retention = Some(Retention {
            keep_daily: Some(7),
            keep_weekly: Some(4),
            keep_monthly: Some(12),
            ..Retention::default()
        });
        plan.spec.manual_trigger = Some("now".into());
        let decision = decide(&plan, &observed(), at("2026-11-30T12:00:00Z"), &settings());
        let args = args(&decision.create.unwrap());
        for pair in [
            ["--keep-daily", "7"],
            ["--keep-weekly", "4"],
            ["--keep-monthly", "12"],
        ] {
            assert!(args.windows(2).any(|w| w == pair), "{pair:?} in {args:?}");
        }
        assert!(!args.iter().any(|a| a == "--keep-last"));
    }

    #[test]
    fn an_invalid_maintenance_schedule_makes_the_plan_not_ready() {
        let mut plan = maintained_plan();
        plan.spec.maintenance.check.schedule = "61 * * * *".into();
        let decision = decide(&plan, &observed(), at("2026-11-30T12:00:00Z"), &settings());
        let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
        assert_eq!(ready.reason, reasons::INVALID_SCHEDULE);
        assert!(
            ready
                .message
                .starts_with("spec.maintenance.check.schedule:"),
            "{}",
            ready.message
        );
    }
}
