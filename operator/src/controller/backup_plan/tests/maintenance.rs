use super::*;
use crate::api::{Maintenance, Retention};
use crate::conditions::Reason;
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
    observed.pods.push(pod_with_result(&name, &result, 0));
}

fn result(operation: Operation, status: ExitStatus) -> RunResult {
    RunResult {
        snapshot_id: None,
        started_at: "2026-11-30T00:00:00Z".into(),
        finished_at: "2026-11-30T00:10:00Z".into(),
        files: 0,
        bytes_read: 0,
        bytes_added: 0,
        bytes_transferred: 0,
        bytes_per_second: None,
        repository: Some(RepositoryStats {
            size_bytes: 580_000_000,
            snapshots: 14,
        }),
        ..crate::fixtures::run_result(operation, status)
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
    assert_eq!(running.reason, Reason::PruneRunning.as_str());
    assert_eq!(decision.events[0].reason, Reason::PruneStarted);
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
        .any(|e| e.reason == Reason::PruneSucceeded));
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
    plan.status.as_mut().unwrap().prune.last_schedule_time = Some(Time(at("2026-11-29T00:00:00Z")));
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
    assert_eq!(last.reason, Reason::RepositoryDamaged.as_str());
    assert_eq!(last.problems, Some(1));
    assert!(last
        .message
        .as_ref()
        .unwrap()
        .contains("pack 1a2b is missing"));
    let event = done
        .events
        .iter()
        .find(|e| e.reason == Reason::CheckFailed)
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
    // The two newest are kept too: the new snapshot's parent outlives a backup of an attack.
    for pair in [
        ["--keep-last", "2"],
        ["--keep-daily", "7"],
        ["--keep-weekly", "4"],
        ["--keep-monthly", "12"],
    ] {
        assert!(args.windows(2).any(|w| w == pair), "{pair:?} in {args:?}");
    }
}

#[test]
fn an_invalid_maintenance_schedule_makes_the_plan_not_ready() {
    let mut plan = maintained_plan();
    plan.spec.maintenance.check.schedule = "61 * * * *".into();
    let decision = decide(&plan, &observed(), at("2026-11-30T12:00:00Z"), &settings());
    let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
    assert_eq!(ready.reason, Reason::InvalidSchedule.as_str());
    assert!(
        ready
            .message
            .starts_with("spec.maintenance.check.schedule:"),
        "{}",
        ready.message
    );
}

/// Settings whose admin has a maintenance login for the test plan's gate.
fn protected_settings() -> Settings {
    let mut settings = settings();
    let values = r#"{"credentials": [{"urlPrefix": "http://127.0.0.1:8000/", "secretName": "gate-maintenance"}],
        "protectionWindow": {"default": "14d"}}"#;
    settings.job.protection =
        crate::protection::Protection::parse(values, "backup-system").unwrap();
    settings
}

#[test]
fn a_protected_plans_prune_runs_in_the_operators_namespace_with_a_password_copy() {
    let mut plan = maintained_plan();
    plan.spec.retention = Some(Retention {
        keep_last: Some(1),
        ..Retention::default()
    });
    plan.status = Some(BackupPlanStatus {
        last_schedule_time: Some(Time(at("2026-11-28T02:30:00Z"))),
        ..BackupPlanStatus::default()
    });
    let now = at("2026-11-29T00:00:05Z");
    let mut observed = observed();
    let decision = decide(&plan, &observed, now, &protected_settings());
    let job = decision.create.clone().expect("a prune Job");
    assert_eq!(job.namespace().as_deref(), Some("backup-system"));
    let copy = decision.password_copy.clone().expect("a password copy");
    assert_eq!(copy.job_name, job.name_any());
    assert_eq!(copy.source_namespace, plan.namespace().unwrap());
    let args = args(&job);
    assert!(
        args.windows(2).any(|w| w == ["--keep-last", "1"]),
        "{args:?}"
    );
    assert!(
        args.windows(2).any(|w| w == ["--protect-within", "14d"]),
        "{args:?}"
    );
    // A protected plan is plainly Ready, without the Warning.
    let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
    assert_eq!(ready.reason, "Ready");
    assert!(decision
        .events
        .iter()
        .all(|e| e.reason != Reason::BackupLoginCanDeleteHistory));

    // The Job in the operator's namespace is the plan's: it runs, then its result is recorded;
    // once a newer prune has finished, it is deleted there, with its copy.
    plan.status = Some(decision.status.clone());
    let mut running = job.clone();
    running.metadata.creation_timestamp = Some(Time(now));
    observed.jobs.push(running);
    let busy = decide(&plan, &observed, now, &protected_settings());
    assert_eq!(
        busy.status.active_run.as_ref().map(|r| r.job_name.clone()),
        Some(job.name_any())
    );
    finish(
        &mut observed,
        &job,
        result(Operation::Prune, ExitStatus::Success),
    );
    let recorded = decide(&plan, &observed, now, &protected_settings());
    let last = recorded.status.prune.last_run.as_ref().expect("recorded");
    assert_eq!(last.job_name, job.name_any());
    let mut newer = job.clone();
    newer.metadata.name = Some(format!("{}-next", job.name_any()));
    newer.metadata.creation_timestamp = Some(Time(now + jiff::SignedDuration::from_secs(60)));
    plan.status = Some(recorded.status);
    finish(
        &mut observed,
        &newer,
        result(Operation::Prune, ExitStatus::Success),
    );
    let pruned = decide(&plan, &observed, now, &protected_settings());
    assert_eq!(
        pruned.delete_remote,
        [("backup-system".to_owned(), job.name_any())]
    );
    assert!(pruned.delete.is_empty());

    // A Job labelled for the plan but without its uid is not the plan's.
    let mut forged = job.clone();
    forged.metadata.name = Some("forged".into());
    forged.metadata.annotations = None;
    assert!(!crate::job::remote_job_of(&forged, &plan));
}

#[test]
fn a_plan_without_maintenance_credentials_says_its_login_can_delete_history_once() {
    let plan = maintained_plan();
    let now = at("2026-11-29T00:00:05Z");
    let decision = decide(&plan, &observed(), now, &settings());
    let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "BackupLoginCanDeleteHistory")
    );
    assert!(
        ready.message.contains("no protection window"),
        "{}",
        ready.message
    );
    let warnings = |d: &PlanDecision| {
        d.events
            .iter()
            .filter(|e| e.reason == Reason::BackupLoginCanDeleteHistory)
            .count()
    };
    assert_eq!(warnings(&decision), 1);
    let mut again = plan.clone();
    again.status = Some(decision.status);
    assert_eq!(warnings(&decide(&again, &observed(), now, &settings())), 0);
}
