//! The plan's copies: a copy Job after a backup, its result on the destination's status entry,
//! and the lag.

use super::*;
use crate::api::{CopiedSnapshot, CopyDestination, CopyStatus, PlanSnapshots};
use crate::fixtures::snapshot_record as snapshot;
use crate::job::{COPY_OPERATION, LABEL_COPY};

fn copy_plan() -> BackupPlan {
    let mut plan = plan();
    plan.spec.copies = vec![CopyDestination {
        name: "offsite".into(),
        repository: Repository {
            url: "http://127.0.0.1:8001/shop".into(),
            ..plan_spec().repository
        },
        schedule: None,
        retention: None,
    }];
    plan
}

/// A plan whose last backups listed three snapshots, the destination holding `copied`.
fn listed_plan(copied: Option<(&str, &str)>) -> BackupPlan {
    let mut plan = copy_plan();
    plan.status = Some(BackupPlanStatus {
        // Nothing else due: the last scheduled time was acted on.
        last_schedule_time: Some(Time(at("2026-11-30T02:30:00Z"))),
        snapshots: Some(PlanSnapshots {
            total: 3,
            newest: vec![
                snapshot("cccccccc", "2026-11-30T02:30:00Z"),
                snapshot("bbbbbbbb", "2026-11-29T02:30:00Z"),
                snapshot("aaaaaaaa", "2026-11-28T02:30:00Z"),
            ],
            listed_time: Time(at("2026-11-30T02:31:00Z")),
        }),
        copies: vec![CopyStatus {
            name: "offsite".into(),
            last_copied_snapshot: copied.map(|(id, time)| CopiedSnapshot {
                id: id.into(),
                time: Time(at(time)),
            }),
            ..CopyStatus::default()
        }],
        ..BackupPlanStatus::default()
    });
    plan
}

pub(super) fn copy_job_of(name: &str, created: &str) -> Job {
    let mut job = finished_job(name, created);
    job.metadata.labels = Some(BTreeMap::from([
        (LABEL_OPERATION.to_string(), COPY_OPERATION.to_string()),
        (LABEL_PLAN.to_string(), "nightly".to_string()),
        (LABEL_COPY.to_string(), "offsite".to_string()),
    ]));
    job
}

/// The pod of a copy Job that ended with `status`, reporting `copied` as its newest snapshot.
fn copy_pod(job: &str, status: ExitStatus, copied: Option<(&str, &str)>) -> Pod {
    let result = RunResult {
        snapshot_id: copied.map(|(id, _)| format!("{id}{}", "0".repeat(56))),
        snapshot_time: copied.map(|(_, time)| time.to_owned()),
        files: 2,
        bytes_transferred: 4096,
        bytes_per_second: None,
        error: (status != ExitStatus::Success).then(|| "cannot reach the gate".to_owned()),
        ..run_result(Operation::Copy, status)
    };
    pod_with_result(job, &result, status.code())
}

#[test]
fn a_destination_behind_the_newest_snapshot_gets_a_copy_job_named_after_it() {
    let plan = listed_plan(Some(("aaaaaaaa", "2026-11-28T02:30:00Z")));
    let decision = decide(&plan, &observed(), at("2026-11-30T02:40:00Z"), &settings());
    assert_eq!(decision.create_copies.len(), 1, "{:?}", decision.events);
    let job = &decision.create_copies[0];
    assert_eq!(
        job.metadata.name.as_deref(),
        Some("nightly-copy-offsite-cccccccc")
    );
    let entry = &decision.status.copies[0];
    assert_eq!(entry.behind_snapshots, 2);
    assert_eq!(entry.behind_since, Some(Time(at("2026-11-29T02:30:00Z"))));
    assert_eq!(
        entry.active_job.as_deref(),
        Some("nightly-copy-offsite-cccccccc")
    );
    assert!(decision
        .events
        .iter()
        .any(|e| e.reason == Reason::CopyStarted));
}

#[test]
fn a_copy_already_tried_for_the_newest_snapshot_is_not_started_again() {
    let mut plan = listed_plan(None);
    plan.status.as_mut().unwrap().copies[0].last_run = Some(crate::api::CopyRun {
        job_name: "nightly-copy-offsite-cccccccc".into(),
        result: RunOutcome::Failed,
        reason: "CopyFailed".into(),
        completion_time: None,
        snapshots_copied: None,
        bytes_sent: None,
    });
    let decision = decide(&plan, &observed(), at("2026-11-30T03:00:00Z"), &settings());
    assert!(decision.create_copies.is_empty());
    assert_eq!(decision.status.copies[0].behind_snapshots, 3);
}

#[test]
fn a_caught_up_destination_gets_no_job_and_no_lag() {
    let plan = listed_plan(Some(("cccccccc", "2026-11-30T02:30:00Z")));
    let decision = decide(&plan, &observed(), at("2026-11-30T02:40:00Z"), &settings());
    assert!(decision.create_copies.is_empty());
    assert_eq!(decision.status.copies[0].behind_snapshots, 0);
    assert_eq!(decision.status.copies[0].behind_since, None);
}

#[test]
fn a_failed_copy_keeps_the_lag_and_says_why() {
    let plan = listed_plan(Some(("aaaaaaaa", "2026-11-28T02:30:00Z")));
    let mut observed = observed();
    let name = "nightly-copy-offsite-cccccccc";
    observed
        .jobs
        .push(copy_job_of(name, "2026-11-30T02:45:00Z"));
    observed.pods.push(copy_pod(name, ExitStatus::Failed, None));
    let decision = decide(&plan, &observed, at("2026-11-30T02:50:00Z"), &settings());
    let entry = &decision.status.copies[0];
    assert_eq!(entry.last_error.as_deref(), Some("cannot reach the gate"));
    let run = entry.last_run.as_ref().unwrap();
    assert_eq!(
        (run.job_name.as_str(), run.result),
        (name, RunOutcome::Failed)
    );
    assert_eq!(run.reason, "CopyFailed");
    assert_eq!(entry.behind_snapshots, 2);
    assert!(
        decision.create_copies.is_empty(),
        "not retried for the same snapshot"
    );
    assert_eq!(
        decision.finished_copies,
        vec![("offsite".into(), RunOutcome::Failed)]
    );
    assert!(decision
        .events
        .iter()
        .any(|e| e.reason == Reason::CopyFailed && e.type_ == EventType::Warning));
}

#[test]
fn a_succeeded_copy_records_the_newest_snapshot_and_zeroes_the_lag() {
    let mut plan = listed_plan(Some(("aaaaaaaa", "2026-11-28T02:30:00Z")));
    plan.status.as_mut().unwrap().copies[0].last_error = Some("earlier".into());
    let mut observed = observed();
    let name = "nightly-copy-offsite-cccccccc";
    observed
        .jobs
        .push(copy_job_of(name, "2026-11-30T02:45:00Z"));
    let copied = Some(("cccccccc", "2026-11-30T02:30:00Z"));
    observed
        .pods
        .push(copy_pod(name, ExitStatus::Success, copied));
    let decision = decide(&plan, &observed, at("2026-11-30T02:50:00Z"), &settings());
    let entry = &decision.status.copies[0];
    let last = entry.last_copied_snapshot.as_ref().unwrap();
    assert_eq!(last.id, "cccccccc");
    assert_eq!(entry.behind_snapshots, 0);
    assert_eq!(entry.behind_since, None);
    assert_eq!(entry.last_error, None);
    assert_eq!(entry.last_run.as_ref().unwrap().snapshots_copied, Some(2));
    assert!(decision.create_copies.is_empty());
    // Recorded once: the next reconcile sees the same Job as recorded.
    let mut after = plan.clone();
    after.status = Some(decision.status.clone());
    let again = decide(&after, &observed, at("2026-11-30T02:51:00Z"), &settings());
    assert!(again.finished_copies.is_empty() && again.create_copies.is_empty());
}

#[test]
fn a_running_copy_holds_off_the_plans_prune() {
    let mut plan = listed_plan(Some(("aaaaaaaa", "2026-11-28T02:30:00Z")));
    plan.spec.maintenance.prune.suspend = false;
    plan.status.as_mut().unwrap().last_schedule_time = Some(Time(at("2026-12-05T02:30:00Z")));
    let mut observed = observed();
    let mut running = copy_job_of("nightly-copy-offsite-cccccccc", "2026-11-30T02:45:00Z");
    running.status = None;
    observed.jobs.push(running);
    // Sunday midnight: the weekly prune is due.
    let decision = decide(&plan, &observed, at("2026-12-06T00:00:30Z"), &settings());
    assert!(decision.create.is_none(), "no prune beside a copy");
    assert!(decision.create_copies.is_empty(), "one copy at a time");
    assert_eq!(
        decision.status.copies[0].active_job.as_deref(),
        Some("nightly-copy-offsite-cccccccc")
    );
}

#[test]
fn a_destination_removed_from_the_spec_leaves_the_status() {
    let mut plan = listed_plan(None);
    plan.spec.copies.clear();
    let decision = decide(&plan, &observed(), at("2026-11-30T02:40:00Z"), &settings());
    assert!(decision.status.copies.is_empty());
}
