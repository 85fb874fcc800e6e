use super::*;
use crate::api::{ActiveRun, RestorePhase, RestoreStatus, RunOutcome, RunTrigger};
use crate::job::{
    run_trigger_of, ANNOTATION_DEADLINE, ANNOTATION_SCHEDULED_TIME, ANNOTATION_TRIGGER,
    SIDECAR_CONTAINER,
};
use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, Pod,
    PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use neverwiped_contract::{ExitStatus, Operation, RunResult};
use std::collections::BTreeMap;

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn job(condition: Option<(&str, &str)>) -> Job {
    Job {
        metadata: ObjectMeta {
            name: Some("nightly-29933370".into()),
            annotations: Some(BTreeMap::from([
                (ANNOTATION_TRIGGER.to_string(), "CatchUp".to_string()),
                (
                    ANNOTATION_SCHEDULED_TIME.to_string(),
                    "2026-11-30T01:30:00Z".to_string(),
                ),
                (ANNOTATION_DEADLINE.to_string(), "12h".to_string()),
            ])),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(JobStatus {
            start_time: Some(Time(at("2026-11-30T02:00:00Z"))),
            completion_time: (condition.map(|c| c.0) == Some("Complete"))
                .then(|| Time(at("2026-11-30T02:10:00Z"))),
            conditions: condition.map(|(type_, reason)| {
                vec![JobCondition {
                    type_: type_.into(),
                    status: "True".into(),
                    reason: Some(reason.into()),
                    message: Some("Job has reached the specified backoff limit".into()),
                    last_transition_time: Some(Time(at("2026-11-30T02:10:00Z"))),
                    ..JobCondition::default()
                }]
            }),
            ..JobStatus::default()
        }),
    }
}

fn pod(state: ContainerState) -> Pod {
    Pod {
        status: Some(PodStatus {
            phase: Some("Failed".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: SIDECAR_CONTAINER.into(),
                image: "ghcr.io/neverwiped/sidecar:0.1.0".into(),
                state: Some(state),
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        }),
        ..Pod::default()
    }
}

fn terminated(exit_code: i32, reason: &str, message: &str) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code,
            reason: Some(reason.into()),
            message: Some(message.into()),
            ..ContainerStateTerminated::default()
        }),
        ..ContainerState::default()
    }
}

fn result(status: ExitStatus) -> RunResult {
    RunResult {
        started_at: "2026-11-30T02:00:01Z".into(),
        finished_at: "2026-11-30T02:09:58Z".into(),
        duration_secs: 597.4,
        ..crate::fixtures::run_result(Operation::Backup, status)
    }
}

#[test]
fn a_running_job_has_no_end() {
    assert_eq!(job_end(&job(None), None), None);
}

#[test]
fn a_successful_run_is_recorded_from_the_sidecars_result() {
    let job = job(Some(("Complete", "CompletionsReached")));
    let pod = pod(terminated(
        0,
        "Completed",
        &result(ExitStatus::Success).to_termination_message(),
    ));
    let end = job_end(&job, Some(&pod)).unwrap();
    assert_eq!(end.outcome, RunOutcome::Succeeded);
    let record = backup_run_record(&job, run_trigger_of(&job).unwrap(), &end);
    assert_eq!(record.reason, "Succeeded");
    assert_eq!(record.trigger, RunTrigger::CatchUp);
    assert_eq!(
        record.scheduled_time,
        Some(Time(at("2026-11-30T01:30:00Z")))
    );
    assert_eq!(record.snapshot_id.as_deref(), Some("4f2a9c1b0d"));
    assert_eq!(record.bytes_sent, Some(12_500_000));
    assert_eq!(record.bytes_added, Some(12_000_000));
    assert_eq!(record.files_read, Some(1200));
    assert_eq!(record.duration_seconds, Some(597));
    assert_eq!(
        record.completion_time,
        Some(Time(at("2026-11-30T02:10:00Z")))
    );
}

/// The end of a Job (condition `job_condition`) whose sidecar exited with `exit` and reported
/// `status` with one warning, `first`, of `total`.
fn end_with_warnings(
    status: ExitStatus,
    total: u64,
    first: &str,
    exit: (i32, &str),
    job_condition: (&str, &str),
) -> JobEnd {
    let mut reported = result(status);
    reported.warnings_total = total;
    reported.warnings = vec![first.into()];
    let message = reported.to_termination_message();
    let job = job(Some(job_condition));
    job_end(&job, Some(&pod(terminated(exit.0, exit.1, &message)))).unwrap()
}

#[test]
fn a_partial_run_succeeds_with_warnings_and_says_which_file() {
    let end = end_with_warnings(
        ExitStatus::Partial,
        2,
        "/data/app/secret.key: permission denied",
        (3, "Error"),
        ("Failed", "BackoffLimitExceeded"),
    );
    assert_eq!(end.outcome, RunOutcome::SucceededWithWarnings);
    assert_eq!(end.reason, Reason::SucceededWithWarnings);
    assert!(end
        .message
        .unwrap()
        .contains("2 files could not be read; the first: /data/app/secret.key"));
}

#[test]
fn names_in_a_runs_messages_reach_the_status_as_printable_text() {
    let mut partial = result(ExitStatus::Partial);
    partial.warnings_total = 1;
    partial.warnings = vec!["/data/\x1b]52;c;cm0K\x07\nforged: permission denied".into()];
    let job = job(Some(("Failed", "BackoffLimitExceeded")));
    let message = partial.to_termination_message();
    let end = job_end(&job, Some(&pod(terminated(3, "Error", &message)))).unwrap();
    let shown = end.message.unwrap();
    assert!(!shown.chars().any(char::is_control), "{shown:?}");
    assert!(
        shown.ends_with(r"the first: /data/\x1b]52;c;cm0K\x07\nforged: permission denied"),
        "{shown}"
    );
}

#[test]
fn a_complete_run_with_warnings_succeeds_with_warnings_and_says_the_first() {
    let end = end_with_warnings(
        ExitStatus::Success,
        1,
        "retention not applied: 403 Forbidden",
        (0, "Completed"),
        ("Complete", "CompletionsReached"),
    );
    assert_eq!(end.outcome, RunOutcome::SucceededWithWarnings);
    assert_eq!(end.reason, Reason::SucceededWithWarnings);
    assert!(end
        .message
        .unwrap()
        .contains("1 warning(s); the first: retention not applied"));
}

#[test]
fn a_failure_the_sidecar_reports_keeps_its_reason_and_message() {
    let mut failed = result(ExitStatus::WrongPassword);
    failed.error = Some("the password opens no key of the repository".into());
    let job = job(Some(("Failed", "BackoffLimitExceeded")));
    let end = job_end(
        &job,
        Some(&pod(terminated(
            12,
            "Error",
            &failed.to_termination_message(),
        ))),
    )
    .unwrap();
    assert_eq!(
        (end.outcome, end.reason.as_str()),
        (RunOutcome::Failed, "WrongPassword")
    );
    assert_eq!(
        end.message.as_deref(),
        Some("the password opens no key of the repository")
    );

    let mut failed = result(ExitStatus::Failed);
    failed.error = Some("connection refused".into());
    let end = job_end(
        &job,
        Some(&pod(terminated(
            1,
            "Error",
            &failed.to_termination_message(),
        ))),
    )
    .unwrap();
    assert_eq!(end.reason, Reason::BackupFailed);
}

#[test]
fn a_backup_stopped_after_its_snapshot_was_stored_succeeded_with_a_warning() {
    let job = job(Some(("Failed", "BackoffLimitExceeded")));
    let mut stopped = result(ExitStatus::Terminated);
    stopped.snapshot_id = Some("1a2b3c4d".repeat(8));
    stopped.error = Some("interrupted: stopped by SIGTERM after snapshot 1a2b3c4d".into());
    let message = stopped.to_termination_message();
    let end = job_end(&job, Some(&pod(terminated(143, "Error", &message)))).unwrap();
    assert_eq!(end.outcome, RunOutcome::SucceededWithWarnings);
    assert!(end.message.unwrap().contains("after snapshot 1a2b3c4d"));
    // Before its snapshot: the backup failed.
    stopped.snapshot_id = None;
    let message = stopped.to_termination_message();
    let end = job_end(&job, Some(&pod(terminated(143, "Error", &message)))).unwrap();
    assert_eq!(end.reason, Reason::BackupFailed);
}

#[test]
fn an_oom_killed_sidecar_is_reported_as_such_with_its_limit() {
    let job = job(Some(("Failed", "BackoffLimitExceeded")));
    let mut pod = pod(terminated(137, "OOMKilled", ""));
    pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
        containers: vec![k8s_openapi::api::core::v1::Container {
            name: SIDECAR_CONTAINER.into(),
            resources: Some(k8s_openapi::api::core::v1::ResourceRequirements {
                limits: Some(BTreeMap::from([(
                    "memory".to_string(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity("512Mi".into()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    });
    let end = job_end(&job, Some(&pod)).unwrap();
    assert_eq!(end.reason, Reason::OomKilled);
    assert!(end.message.unwrap().contains("memory limit 512Mi"));
}

#[test]
fn a_run_stopped_at_its_deadline_says_so_even_when_the_sidecar_wrote_an_error() {
    let job = job(Some(("Failed", "DeadlineExceeded")));
    let mut interrupted = result(ExitStatus::Failed);
    interrupted.error = Some("interrupted by SIGTERM".into());
    let end = job_end(
        &job,
        Some(&pod(terminated(
            143,
            "Error",
            &interrupted.to_termination_message(),
        ))),
    )
    .unwrap();
    assert_eq!(end.reason, Reason::DeadlineExceeded);
    assert!(end.message.as_deref().unwrap().contains("deadline of 12h"));
    // The partial statistics are kept.
    assert_eq!(end.result.unwrap().files, 1200);
    // No pod at all: the Job's condition still tells.
    let end = job_end(&job, None).unwrap();
    assert_eq!(end.reason, Reason::DeadlineExceeded);
}

#[test]
fn an_image_that_cannot_be_pulled_is_the_reason_not_the_deadline_it_led_to() {
    let waiting = ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some("ImagePullBackOff".into()),
            message: Some("Back-off pulling image".into()),
        }),
        ..ContainerState::default()
    };
    let pod = pod(waiting);
    assert_eq!(
        pod_blocked(&pod).map(|(reason, _)| reason),
        Some(Reason::ImagePullFailed)
    );
    let end = job_end(&job(Some(("Failed", "BackoffLimitExceeded"))), Some(&pod)).unwrap();
    assert_eq!(end.reason, Reason::ImagePullFailed);
    assert!(end
        .message
        .unwrap()
        .contains("ghcr.io/neverwiped/sidecar:0.1.0"));
}

#[test]
fn a_crash_without_a_result_quotes_what_it_left() {
    let job = job(Some(("Failed", "BackoffLimitExceeded")));
    let end = job_end(
        &job,
        Some(&pod(terminated(
            101,
            "Error",
            "thread 'main' panicked at src/main.rs:3",
        ))),
    )
    .unwrap();
    assert_eq!(end.reason, Reason::SidecarCrashed);
    assert_eq!(
        end.message.as_deref(),
        Some("the sidecar exited with code 101 (Error) without a result: thread 'main' panicked at src/main.rs:3")
    );
    let complete = self::job(Some(("Complete", "CompletionsReached")));
    let end = job_end(&complete, Some(&pod(terminated(0, "Completed", "")))).unwrap();
    assert_eq!(
        (end.outcome, end.reason.as_str()),
        (RunOutcome::Failed, "NoResult")
    );
}

#[test]
fn a_job_failed_without_a_pod_reports_the_jobs_reason() {
    let end = job_end(&job(Some(("Failed", "BackoffLimitExceeded"))), None).unwrap();
    assert_eq!(end.reason, Reason::JobFailed);
    assert!(end.message.unwrap().contains("BackoffLimitExceeded"));
}

fn record(name: &str, result: RunOutcome, completed: &str) -> RunRecord {
    let reason = if result.is_success() {
        "Succeeded"
    } else {
        "BackupFailed"
    };
    RunRecord {
        completion_time: Some(Time(at(completed))),
        ..RunRecord::without_figures(name.into(), RunTrigger::Schedule, result, reason.into())
    }
}

#[test]
fn history_is_newest_first_bounded_and_idempotent() {
    let mut status = BackupPlanStatus {
        active_run: Some(ActiveRun {
            kind: RunKind::Backup,
            job_name: "run-0".into(),
            trigger: RunTrigger::Schedule,
            scheduled_time: None,
            start_time: None,
        }),
        ..BackupPlanStatus::default()
    };
    let now = at("2026-12-01T00:00:00Z");
    record_backup_run(
        &mut status,
        record("run-0", RunOutcome::Succeeded, "2026-11-01T00:00:00Z"),
        now,
    );
    assert_eq!(status.active_run, None);
    for day in 1..=12 {
        let outcome = if day == 12 {
            RunOutcome::Failed
        } else {
            RunOutcome::Succeeded
        };
        record_backup_run(
            &mut status,
            record(
                &format!("run-{day}"),
                outcome,
                &format!("2026-11-{day:02}T03:00:00Z"),
            ),
            now,
        );
    }
    record_backup_run(
        &mut status,
        record("run-12", RunOutcome::Failed, "2026-11-12T03:00:00Z"),
        now,
    );
    assert_eq!(status.history.len(), HISTORY_LIMIT);
    assert_eq!(status.history[0].job_name, "run-12");
    assert_eq!(status.history[9].job_name, "run-3");
    assert_eq!(status.last_run.as_ref().unwrap().job_name, "run-12");
    assert_eq!(
        status.last_successful_time,
        Some(Time(at("2026-11-11T03:00:00Z")))
    );
}

#[test]
fn conditions_tell_ready_running_and_last_result() {
    let now = at("2026-12-01T00:00:00Z");
    let mut status = BackupPlanStatus::default();
    set_backup_plan_conditions(
        &mut status,
        &[],
        "next run at 2026-12-01T01:30:00Z",
        Some(4),
        now,
    );
    let get = |status: &BackupPlanStatus, type_: &str| {
        let c = crate::conditions::find_condition(&status.conditions, type_).unwrap();
        (c.status.clone(), c.reason.clone())
    };
    assert_eq!(get(&status, "Ready"), ("True".into(), "Ready".into()));
    assert_eq!(get(&status, "Running"), ("False".into(), "Idle".into()));
    assert_eq!(
        get(&status, "LastBackupSucceeded"),
        ("Unknown".into(), "NoBackupYet".into())
    );

    status.last_run = Some(record("run-1", RunOutcome::Failed, "2026-11-30T03:00:00Z"));
    let problems = [Problem::SecretNotFound {
        name: "repo".into(),
        field: "spec.repository.passwordSecretRef".into(),
    }];
    set_backup_plan_conditions(&mut status, &problems, "", Some(5), now);
    assert_eq!(
        get(&status, "Ready"),
        ("False".into(), "SecretNotFound".into())
    );
    assert_eq!(
        get(&status, "LastBackupSucceeded"),
        ("False".into(), "BackupFailed".into())
    );
    assert!(status
        .conditions
        .iter()
        .all(|c| c.observed_generation == Some(5)));
}

/// A reconcile that sees the restore Job's end: the record, then the conditions.
fn finish(status: &mut RestoreStatus, end: &JobEnd) {
    let now = at("2026-12-01T00:00:00Z");
    finish_restore(status, end, now);
    let conditions = RestoreConditions {
        readiness: None,
        ended: Some(end),
    };
    set_restore_conditions(status, conditions, Some(1), now);
}

#[test]
fn a_finished_restore_reports_phase_counts_and_snapshot() {
    let mut restored = result(ExitStatus::Success);
    restored.operation = Operation::Restore;
    let job = job(Some(("Complete", "CompletionsReached")));
    let end = job_end(
        &job,
        Some(&pod(terminated(
            0,
            "Completed",
            &restored.to_termination_message(),
        ))),
    )
    .unwrap();
    let mut status = RestoreStatus::default();
    finish(&mut status, &end);
    assert_eq!(status.phase, Some(RestorePhase::Succeeded));
    assert_eq!(status.snapshot_id.as_deref(), Some("4f2a9c1b0d"));
    assert_eq!(status.bytes_restored, Some(5_000_000_000));
    assert_eq!(status.conditions[0].type_, "Complete");
    assert_eq!(status.conditions[0].status, "True");

    let mut failed = restored.clone();
    failed.status = ExitStatus::Failed;
    failed.snapshot_id = None;
    failed.error = Some("target database \"orders\" is not empty".into());
    let end = job_end(
        &job,
        Some(&pod(terminated(
            1,
            "Error",
            &failed.to_termination_message(),
        ))),
    )
    .unwrap();
    let mut status = RestoreStatus::default();
    finish(&mut status, &end);
    assert_eq!(status.phase, Some(RestorePhase::Failed));
    assert_eq!(status.conditions[0].reason, "RestoreFailed");
    assert_eq!(
        status.message.as_deref(),
        Some("target database \"orders\" is not empty")
    );
}

#[test]
fn a_finished_restore_records_its_speed_from_the_result() {
    let restored = RunResult {
        operation: Operation::Restore,
        bytes_per_second: Some(89_128_960),
        ..result(ExitStatus::Success)
    };
    let job = job(Some(("Complete", "CompletionsReached")));
    let message = restored.to_termination_message();
    let end = job_end(&job, Some(&pod(terminated(0, "Completed", &message)))).unwrap();
    let mut status = RestoreStatus::default();
    finish(&mut status, &end);
    assert_eq!(status.bytes_per_second, Some(89_128_960));

    // A restore that wrote no files (databases only) has no speed to record.
    let databases_only = RunResult {
        bytes_per_second: None,
        ..restored
    };
    let message = databases_only.to_termination_message();
    let end = job_end(&job, Some(&pod(terminated(0, "Completed", &message)))).unwrap();
    let mut status = RestoreStatus::default();
    finish(&mut status, &end);
    assert_eq!(status.bytes_per_second, None);
}

#[test]
fn the_key_that_opened_the_repository_is_recorded_and_kept() {
    let now = at("2026-11-30T02:10:00Z");
    let end = |key_id: Option<String>, measured: bool| JobEnd {
        outcome: RunOutcome::Succeeded,
        reason: Reason::Succeeded,
        message: None,
        result: Some(RunResult {
            key_id,
            repository: measured.then_some(neverwiped_contract::RepositoryStats {
                size_bytes: 4096,
                snapshots: 3,
            }),
            ..result(ExitStatus::Success)
        }),
        start_time: None,
        completion_time: Some(now),
    };
    let key = "5f".repeat(32);
    let mut status = BackupPlanStatus::default();
    record_repository(&mut status, &end(Some(key.clone()), true), now);
    assert_eq!(status.key_id(), Some(key.as_str()));
    // A run that names no key (it failed before opening), or something that is no key id,
    // leaves the recorded one.
    record_repository(&mut status, &end(None, true), now);
    assert_eq!(status.key_id(), Some(key.as_str()));
    record_repository(&mut status, &end(Some("--all".into()), false), now);
    assert_eq!(status.key_id(), Some(key.as_str()));
    // Another key opened it: that one is recorded, with or without measurements.
    let other = "a0".repeat(32);
    record_repository(&mut status, &end(Some(other.clone()), false), now);
    assert_eq!(status.key_id(), Some(other.as_str()));
    assert_eq!(status.repository.map(|r| r.size_bytes), Some(4096));
    let mut unmeasured = BackupPlanStatus::default();
    record_repository(&mut unmeasured, &end(Some(key), false), now);
    assert_eq!(unmeasured.repository, None);
}
