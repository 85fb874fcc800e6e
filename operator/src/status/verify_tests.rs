//! A finished drill, read: its outcome held to the objective, the reason of each failure, and
//! how it lands in `status.verify`.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use neverwiped_contract::drill::{DrillDatabase, DrillVolume};
use neverwiped_contract::{ExitStatus, Operation, RunResult};

use super::*;
use crate::job::SIDECAR_CONTAINER;
use crate::status::job_end;

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn job(complete: bool) -> Job {
    let type_ = if complete { "Complete" } else { "Failed" };
    Job {
        metadata: ObjectMeta {
            name: Some("nightly-verify-29932097".into()),
            annotations: Some(BTreeMap::new()),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(JobStatus {
            start_time: Some(Time(at("2026-11-29T04:17:05Z"))),
            completion_time: complete.then(|| Time(at("2026-11-29T04:40:00Z"))),
            conditions: Some(vec![JobCondition {
                type_: type_.into(),
                status: "True".into(),
                last_transition_time: Some(Time(at("2026-11-29T04:40:00Z"))),
                ..JobCondition::default()
            }]),
            ..JobStatus::default()
        }),
    }
}

fn pod(exit_code: i32, result: &RunResult) -> Pod {
    Pod {
        status: Some(PodStatus {
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
        ..Pod::default()
    }
}

/// A drill of two volumes and a database that took 900 + 300 + 600 s.
fn drill_result(status: ExitStatus) -> RunResult {
    let mut result = crate::fixtures::run_result(Operation::Drill, status);
    result.snapshot_id = Some("0a1b2c3d4e5f60718293a4b5c6d7e8f9".into());
    result.drill = Some(DrillStats {
        sample_percent: 100,
        sample_round: 0,
        volumes: vec![
            DrillVolume {
                path: "/data/orders".into(),
                files: 1200,
                bytes: 9_000_000_000,
                secs: 900.0,
                mismatched: 0,
            },
            DrillVolume {
                path: "/data/uploads".into(),
                files: 40,
                bytes: 300_000_000,
                secs: 300.0,
                mismatched: 0,
            },
        ],
        databases: vec![DrillDatabase {
            name: "orders".into(),
            engine: "postgresql".into(),
            bytes: 600_000_000,
            secs: 600.0,
            tables_checked: 12,
            error: None,
        }],
    });
    result
}

fn record(result: &RunResult, exit_code: i32, objective: Option<&str>) -> DrillRecord {
    let job = job(exit_code == 0);
    let end = job_end(&job, Some(&pod(exit_code, result))).unwrap();
    let verify = VerifySpec {
        recovery_time_objective: objective.map(str::to_owned),
        ..VerifySpec::default()
    };
    drill_record(&job, &end, &verify)
}

#[test]
fn a_drill_within_its_objective_records_the_recovery_time_of_each_part() {
    let record = record(&drill_result(ExitStatus::Success), 0, Some("45m"));
    assert_eq!(record.result, DrillOutcome::Succeeded);
    assert_eq!(record.reason, "Succeeded");
    assert_eq!(record.recovery_seconds, Some(1800.0));
    assert_eq!(record.recovery_time_objective.as_deref(), Some("45m"));
    assert_eq!(record.snapshot_id.as_deref(), Some("0a1b2c3d"));
    assert_eq!(record.sample_percent, Some(100));
    assert_eq!(record.volumes.len(), 2);
    assert_eq!(record.volumes[0].path, "/data/orders");
    assert_eq!(record.volumes[0].seconds, 900.0);
    assert_eq!(record.volumes[0].bytes_per_second, 10_000_000);
    assert_eq!(record.databases[0].name, "orders");
    assert_eq!(record.databases[0].seconds, 600.0);
    assert_eq!(record.databases[0].bytes_per_second, 1_000_000);
    assert_eq!(record.databases[0].tables_checked, 12);
    assert_eq!(
        record.completion_time.map(|t| t.0),
        Some(at("2026-11-29T04:40:00Z"))
    );
}

#[test]
fn a_drill_over_its_objective_proved_the_data_but_says_so() {
    let record = record(&drill_result(ExitStatus::Success), 0, Some("20m"));
    assert_eq!(record.result, DrillOutcome::SucceededOverObjective);
    assert!(record.result.is_success());
    assert_eq!(record.reason, "OverObjective");
    let message = record.message.unwrap();
    assert!(message.contains("1800 s"), "{message}");
    assert!(message.contains("20m (1200 s)"), "{message}");
    // Without an objective, any time is within it.
    let record = super::tests::record(&drill_result(ExitStatus::Success), 0, None);
    assert_eq!(record.result, DrillOutcome::Succeeded);
}

#[test]
fn files_that_differ_fail_the_drill_with_verify_failed_naming_them() {
    let mut result = drill_result(ExitStatus::VerifyFailed);
    result.error = Some("2 files differ: /scratch/files/data/orders/a.db (content), …".into());
    result.drill.as_mut().unwrap().volumes[0].mismatched = 2;
    let record = record(&result, 14, Some("45m"));
    assert_eq!(record.result, DrillOutcome::Failed);
    assert_eq!(record.reason, "VerifyFailed");
    assert!(record.message.unwrap().contains("a.db (content)"));
    assert_eq!(record.volumes[0].mismatched, 2);
    // Without the sidecar's words, the volumes' counts say where.
    result.error = None;
    let record = super::tests::record(&result, 14, None);
    assert_eq!(
        record.message.as_deref(),
        Some("files differ from the snapshot: 2 in /data/orders")
    );
}

#[test]
fn a_dump_that_does_not_load_fails_the_drill_with_dump_did_not_load() {
    // The sidecar exits 14: the data differs, in a database.
    let mut result = drill_result(ExitStatus::VerifyFailed);
    result.error = None;
    let database = &mut result.drill.as_mut().unwrap().databases[0];
    database.error = Some("ERROR: relation \"orders\" does not exist".into());
    let record = record(&result, 14, None);
    assert_eq!(record.result, DrillOutcome::Failed);
    assert_eq!(record.reason, "DumpDidNotLoad");
    assert_eq!(
        record.message.as_deref(),
        Some("database orders: ERROR: relation \"orders\" does not exist")
    );
    assert!(record.databases[0].error.is_some());
    // Files that differ as well: they come first.
    result.drill.as_mut().unwrap().volumes[0].mismatched = 1;
    let record = super::tests::record(&result, 14, None);
    assert_eq!(record.reason, "VerifyFailed");
    // A server that could not start (exit 1): the drill could not run, the data is not blamed.
    let mut result = drill_result(ExitStatus::Failed);
    result.error = Some("database orders: no PostgreSQL server: install postgresql".into());
    result.drill.as_mut().unwrap().databases[0].error = Some("no PostgreSQL server".into());
    let record = super::tests::record(&result, 1, None);
    assert_eq!(record.reason, "DrillFailed");
}

#[test]
fn other_failures_keep_the_usual_reasons() {
    let mut result = drill_result(ExitStatus::WrongPassword);
    result.drill = None;
    result.error = Some("wrong password".into());
    let record = record(&result, 12, None);
    assert_eq!(
        (record.result, record.reason.as_str()),
        (DrillOutcome::Failed, "WrongPassword")
    );
    assert_eq!(record.recovery_seconds, None);
    let mut result = drill_result(ExitStatus::Failed);
    result.drill = None;
    let record = super::tests::record(&result, 1, None);
    assert_eq!(record.reason, "DrillFailed");
}

#[test]
fn recording_keeps_five_drills_newest_first_and_the_last_success() {
    let mut status = VerifyStatus {
        active_job: Some("nightly-verify-6".into()),
        ..VerifyStatus::default()
    };
    let now = at("2026-12-01T00:00:00Z");
    let base = record(&drill_result(ExitStatus::Success), 0, None);
    for n in 1..=6 {
        let drill = DrillRecord {
            job_name: format!("nightly-verify-{n}"),
            completion_time: Some(Time(at(&format!("2026-11-0{n}T00:00:00Z")))),
            ..base.clone()
        };
        record_drill(&mut status, drill, now);
    }
    assert_eq!(status.history.len(), VERIFY_HISTORY_LIMIT);
    assert_eq!(status.history[0].job_name, "nightly-verify-6");
    assert_eq!(status.active_job, None);
    assert_eq!(
        status.last_success_time.as_ref().map(|t| t.0),
        Some(at("2026-11-06T00:00:00Z"))
    );
    let failed = DrillRecord {
        job_name: "nightly-verify-7".into(),
        result: DrillOutcome::Failed,
        ..base.clone()
    };
    record_drill(&mut status, failed.clone(), now);
    record_drill(&mut status, failed, now);
    assert_eq!(status.history[0].job_name, "nightly-verify-7");
    assert_eq!(
        status.history[1].job_name, "nightly-verify-6",
        "recorded once"
    );
    assert_eq!(
        status.last_success_time.as_ref().map(|t| t.0),
        Some(at("2026-11-06T00:00:00Z")),
        "a failure leaves the last success"
    );
    assert_eq!(status.last_run.unwrap().result, DrillOutcome::Failed);
}
