//! The BackupPlan reconciler: fetch the plan's Jobs, pods, Secrets and claims; [`decide`] (pure);
//! apply: create or delete Jobs, apply the status, publish Events.

use std::sync::Arc;
use std::time::Duration;

use crate::recorder::EventType;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::ResourceExt;

use super::{
    create_job, delete_job, events, fetch_secret_keys, pod_of, Context, Error, Settings,
    FIELD_MANAGER,
};
use crate::api::{
    ActiveRun, BackupPlan, BackupPlanStatus, CopyMethod, RunOutcome, RunRecord, RunTrigger,
};
use crate::conditions::{find_condition, types};
use crate::job::{
    backup_job, backup_job_name, BackupRun, BackupVolumeMount, ANNOTATION_MANUAL_TRIGGER,
    ANNOTATION_SCHEDULED_TIME, ANNOTATION_TRIGGER, LABEL_OPERATION, LABEL_PLAN,
};
use crate::metrics::{PlanLabels, ReconcileLabels, RunLabels};
use crate::plan::{pending_manual_trigger, resolve_plan, secrets_used, Problem, SecretKeys};
use crate::schedule::{self, ScheduleState};
use crate::status::{
    backup_run_record, job_end, pod_blocked, record_backup_run, set_backup_plan_conditions, JobEnd,
};
use crate::volumes::direct_placement;

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
    /// The PersistentVolumeClaims of the namespace.
    pub claims: Vec<PersistentVolumeClaim>,
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
    /// Jobs to delete: stuck ones already recorded as failed, and finished ones beyond the kept.
    pub delete: Vec<String>,
    pub events: Vec<PlannedEvent>,
    /// Runs that finished in this reconcile (for metrics).
    pub finished: Vec<RunRecord>,
    /// Scheduled runs newly counted as missed (for metrics).
    pub newly_missed: u32,
    pub requeue_after: Duration,
}

fn annotation<'a>(job: &'a Job, key: &str) -> Option<&'a str> {
    job.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn owned_by(job: &Job, plan: &BackupPlan) -> bool {
    let uid = plan.metadata.uid.as_deref();
    job.metadata
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
    let mut jobs: Vec<&Job> = observed
        .jobs
        .iter()
        .filter(|job| owned_by(job, plan))
        .collect();
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
        planned_events.push(finished_event(&record));
        record_backup_run(&mut status, record.clone(), now);
        finished.push(record);
    }
    status.active_run = active.map(|job| ActiveRun {
        job_name: job.name_any(),
        trigger: match annotation(job, ANNOTATION_TRIGGER) {
            Some("Manual") => RunTrigger::Manual,
            Some("CatchUp") => RunTrigger::CatchUp,
            _ => RunTrigger::Schedule,
        },
        scheduled_time: annotation(job, ANNOTATION_SCHEDULED_TIME)
            .and_then(|t| t.parse::<Timestamp>().ok())
            .map(Time),
        start_time: job.metadata.creation_timestamp.clone(),
    });
    // A run whose status was not written (the apply failed after the create) is still acted on.
    if let Some(job) = active {
        if let Some(time) =
            annotation(job, ANNOTATION_SCHEDULED_TIME).and_then(|t| t.parse::<Timestamp>().ok())
        {
            if status
                .last_schedule_time
                .as_ref()
                .is_none_or(|last| last.0 < time)
            {
                status.last_schedule_time = Some(Time(time));
            }
        }
        if let Some(trigger) = annotation(job, ANNOTATION_MANUAL_TRIGGER) {
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

    // 2. What the spec names, and where the pod must run.
    let mut problems = Vec::new();
    let mut resolved = match resolve_plan(spec, &observed.secrets, &observed.claims) {
        Ok(resolved) => Some(resolved),
        Err(found) => {
            problems = found;
            None
        }
    };
    let mut node_name = None;
    if let Some(plan_volumes) = resolved.as_ref().filter(|r| !r.claims.is_empty()) {
        match spec.copy_method {
            CopyMethod::Snapshot => problems.push(Problem::SnapshotNotAvailable),
            // Until CSI snapshots are supported, Auto reads directly.
            CopyMethod::Auto | CopyMethod::Direct => {
                let claims: Vec<&PersistentVolumeClaim> = plan_volumes
                    .claims
                    .iter()
                    .filter_map(|c| {
                        observed
                            .claims
                            .iter()
                            .find(|pvc| pvc.metadata.name.as_deref() == Some(&c.name))
                    })
                    .collect();
                match direct_placement(&claims, &observed.pods) {
                    Ok(node) => node_name = node,
                    Err(problem) => problems.push(problem),
                }
            }
        }
    }
    if !problems.is_empty() {
        resolved = None;
    }

    // 3. Whether to start a run.
    let mut create = None;
    let mut newly_missed = 0;
    let mut ready_message = String::new();
    match &resolved {
        None => status.next_schedule_time = None,
        Some(resolved) => {
            let mut run = None;
            let mut next_run = None;
            if active.is_none() {
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
                    node_name: node_name.clone(),
                    deadline: resolved.deadline,
                };
                let job = backup_job(plan, &backup_run, &settings.job);
                let job_name = backup_job_name(plan, &backup_run);
                planned_events.push(PlannedEvent {
                    type_: EventType::Normal,
                    reason: events::BACKUP_STARTED.into(),
                    note: format!("created Job {job_name} ({trigger:?})"),
                });
                status.active_run = Some(ActiveRun {
                    job_name,
                    trigger,
                    scheduled_time: scheduled_time.map(Time),
                    start_time: Some(Time(now)),
                });
                create = Some(job);
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

    let requeue_after = if resolved.is_none() {
        settings.not_ready_recheck
    } else if status.active_run.is_some() {
        ACTIVE_REQUEUE
    } else {
        status
            .next_schedule_time
            .as_ref()
            .map(|next| next.0.duration_since(now).max(SignedDuration::from_secs(1)))
            .and_then(|wait| Duration::try_from(wait).ok())
            .unwrap_or(MAX_REQUEUE)
            .min(MAX_REQUEUE)
    };
    PlanDecision {
        status,
        create,
        delete,
        events: planned_events,
        finished,
        newly_missed,
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
    let selector = format!("{LABEL_PLAN}={name},{LABEL_OPERATION}=backup");
    let jobs = Api::<Job>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default().labels(&selector))
        .await?;
    for job in jobs.items.iter().filter(|job| owned_by(job, &plan)) {
        delete_job(client, &namespace, &job.name_any()).await?;
    }
    let labels = PlanLabels {
        namespace: namespace.clone(),
        plan: name.clone(),
    };
    ctx.metrics
        .backup_last_success_timestamp_seconds
        .remove(&labels);
    tracing::info!(jobs = jobs.items.len(), "cleaned up a deleted BackupPlan");
    Ok(Action::await_change())
}

/// Fetches what a plan names, [`decide`]s, and applies the decision.
pub async fn apply(plan: Arc<BackupPlan>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = plan.namespace().unwrap_or_default();
    let name = plan.name_any();
    let client = &ctx.client;

    let selector = format!("{LABEL_PLAN}={name},{LABEL_OPERATION}=backup");
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
    };
    let now = Timestamp::now();
    let decision = decide(&plan, &observed, now, &ctx.settings);

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
    if let Some(time) = &decision.status.last_successful_time {
        ctx.metrics
            .backup_last_success_timestamp_seconds
            .get_or_create(&labels)
            .set(time.0.as_second());
    }
    ctx.reset_failures(&super::object_key(plan.as_ref()));
    Ok(Action::requeue(decision.requeue_after))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        BackupPlanSpec, BackupVolume, CredentialsSecretRef, Repository, SecretKeyRef,
    };
    use crate::job::SIDECAR_CONTAINER;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use neverwiped_contract::{ExitStatus, Operation, RunResult, RESULT_FORMAT_VERSION};
    use std::collections::BTreeMap;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn settings() -> Settings {
        Settings::with_image("sidecar:test")
    }

    fn plan() -> BackupPlan {
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

    fn observed() -> ObservedPlan {
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

    fn finished_job(name: &str, created: &str) -> Job {
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

    fn pod_for(job: &str) -> Pod {
        let result = RunResult {
            version: RESULT_FORMAT_VERSION,
            operation: Operation::Backup,
            status: ExitStatus::Success,
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
