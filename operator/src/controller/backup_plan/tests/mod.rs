//! The BackupPlan reconciler's decisions, from fetched objects to what it would write.

mod copies;
mod copy_prunes;
mod drills;
mod hooks;
mod listed_snapshots;
mod maintenance;
mod queue;
mod selection;
mod snapshots;
mod streams;

use super::decide::ACTIVE_REQUEUE;
use super::*;
use crate::api::{BackupPlanSpec, CheckSettings, Maintenance, PruneSettings, Repository};
use crate::api::{BackupPlanStatus, CopyMethod, RunKind, RunOutcome, RunTrigger};
use crate::conditions::Reason;
use crate::conditions::{find_condition, types};
use crate::controller::Settings;
use crate::csi::{VolumeSnapshot, VolumeSnapshotClass};
use crate::fixtures::{plan_spec, run_result};
use crate::job::ANNOTATION_TRIGGER;
use crate::job::SIDECAR_CONTAINER;
use crate::job::{ANNOTATION_MANUAL_TRIGGER, ANNOTATION_SOURCE_CLAIM, LABEL_OPERATION, LABEL_PLAN};
use crate::recorder::EventType;
use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use neverwiped_contract::{ExitStatus, Operation, RunResult};
use std::collections::BTreeMap;
use std::time::Duration;

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
            time_zone: "UTC".into(),
            repository: Repository {
                url: "http://127.0.0.1:8000/shop".into(),
                ..plan_spec().repository
            },
            copy_method: CopyMethod::Direct,
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
            ..plan_spec()
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
    assert_eq!(decision.events[0].reason, Reason::BackupStarted);
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
    assert!(
        ready
            .message
            .starts_with("next run at 2026-11-30T02:30:00Z; "),
        "{}",
        ready.message
    );
    // No maintenance credentials in these settings: the one Event says so.
    let reasons: Vec<Reason> = decision.events.iter().map(|e| e.reason).collect();
    assert_eq!(reasons, [Reason::BackupLoginCanDeleteHistory]);
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
        snapshot_id: Some("abcdef12".into()),
        started_at: "2026-11-30T02:00:00Z".into(),
        finished_at: "2026-11-30T02:01:00Z".into(),
        duration_secs: 60.0,
        files: 3,
        bytes_read: 300,
        bytes_added: 30,
        bytes_transferred: 40,
        bytes_per_second: None,
        ..run_result(Operation::Backup, ExitStatus::Success)
    };
    pod_with_result(job, &result, 0)
}

/// The pod of `job` whose sidecar ended with `exit_code` and `result` as its termination
/// message.
pub(super) fn pod_with_result(job: &str, result: &RunResult, exit_code: i32) -> Pod {
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
                        exit_code,
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
            .filter(|e| e.reason == Reason::BackupSucceeded)
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

#[test]
fn a_job_whose_trigger_annotation_is_unknown_is_reported_not_taken_silently() {
    let mut observed = observed();
    let mut running = finished_job("nightly-manual-1", "2026-11-30T02:00:00Z");
    running.status = Some(JobStatus::default());
    running
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ANNOTATION_TRIGGER.into(), "Sometimes".into());
    observed.jobs.push(running);
    let decision = decide(&plan(), &observed, at("2026-11-30T02:30:00Z"), &settings());
    let warning = decision
        .events
        .iter()
        .find(|e| e.reason == Reason::UnknownTrigger)
        .expect("an UnknownTrigger Event");
    assert_eq!(warning.type_, EventType::Warning);
    assert!(
        warning.note.contains("nightly-manual-1") && warning.note.contains("\"Sometimes\""),
        "{}",
        warning.note
    );
    // The run still occupies the plan: nothing else starts beside it.
    assert!(decision.create.is_none());
    assert_eq!(
        decision.status.active_run.unwrap().trigger,
        RunTrigger::Schedule
    );
}
