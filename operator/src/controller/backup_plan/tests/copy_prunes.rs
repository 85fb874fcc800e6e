//! Retention at the copy destinations: a prune Job per destination with `retention`, on the
//! plan's prune schedule, never beside that destination's copy, recorded on its status entry;
//! the never-wiped rules for each destination.

use super::copies::copy_job_of;
use super::*;
use crate::api::{
    CopyDestination, CopyStatus, MaintenanceStatus, PlanSnapshots, Retention, SuspiciousChange,
};
use crate::controller::effects::Create;
use crate::fixtures::snapshot_record as snapshot;
use crate::job::LABEL_COPY;
use neverwiped_contract::PruneStats;

const PRUNE_JOB: &str = "nightly-copy-offsite-prune-29931840";

fn destination(name: &str, port: u16, retention: Option<Retention>) -> CopyDestination {
    CopyDestination {
        name: name.into(),
        repository: Repository {
            url: format!("http://127.0.0.1:{port}/shop"),
            ..plan_spec().repository
        },
        schedule: None,
        retention,
    }
}

fn keep_daily(days: i32) -> Option<Retention> {
    Some(Retention {
        keep_daily: Some(days),
        ..Retention::default()
    })
}

/// A plan pruned on Sundays at 00:00, copying to `offsite` (kept 7 days) and `archive` (kept
/// whole); the nightly backup of the 28th ran, nothing is behind.
fn retained_plan() -> BackupPlan {
    let mut plan = plan();
    plan.spec.maintenance.prune.suspend = false;
    plan.spec.copies = vec![
        destination("offsite", 8001, keep_daily(7)),
        destination("archive", 8002, None),
    ];
    plan.status = Some(BackupPlanStatus {
        last_schedule_time: Some(Time(at("2026-11-28T02:30:00Z"))),
        ..BackupPlanStatus::default()
    });
    plan
}

fn entry<'a>(decision: &'a PlanDecision, name: &str) -> &'a CopyStatus {
    (decision.status.copies.iter())
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("{name} in {:?}", decision.status.copies))
}

fn prune_job_of(name: &str, created: &str) -> Job {
    let mut job = finished_job(name, created);
    job.metadata.labels = Some(BTreeMap::from([
        (LABEL_OPERATION.to_string(), "prune".to_string()),
        (LABEL_PLAN.to_string(), "nightly".to_string()),
        (LABEL_COPY.to_string(), "offsite".to_string()),
    ]));
    job
}

fn running(mut job: Job) -> Job {
    job.status = None;
    job
}

#[test]
fn a_destination_with_retention_gets_its_own_prune_job_at_the_plans_prune_time() {
    let plan = retained_plan();
    let decision = decide(&plan, &observed(), at("2026-11-29T00:00:05Z"), &settings());
    assert_eq!(
        decision.create_copy_prunes.len(),
        1,
        "{:?}",
        decision.events
    );
    let job = &decision.create_copy_prunes[0].job;
    assert_eq!(job.name_any(), PRUNE_JOB);
    assert_eq!(job.namespace().as_deref(), Some("shop"));
    let args = args(job);
    assert_eq!(args[0], "prune");
    assert!(args
        .windows(2)
        .any(|w| w == ["--repo", "rest:http://127.0.0.1:8001/shop"]));
    assert!(
        args.windows(2).any(|w| w == ["--keep-daily", "7"]),
        "{args:?}"
    );
    assert!(args.windows(2).any(|w| w == ["--host", "shop/nightly"]));
    let offsite = entry(&decision, "offsite");
    assert_eq!(offsite.active_prune_job.as_deref(), Some(PRUNE_JOB));
    assert_eq!(
        offsite.prune.next_schedule_time,
        Some(Time(at("2026-12-06T00:00:00Z")))
    );
    assert!(decision
        .events
        .iter()
        .any(|e| e.reason == Reason::PruneStarted && e.note.contains("copy destination offsite")));
    // The plan's own prune runs beside it: they lock different repositories.
    let own = decision.create.as_ref().expect("the plan's own prune");
    assert_eq!(own.name_any(), "nightly-prune-29931840");
    assert_eq!(
        decision.status.active_run.as_ref().map(|r| r.kind),
        Some(RunKind::Prune)
    );
    // A destination without retention keeps every snapshot: no Job, nothing due.
    let archive = entry(&decision, "archive");
    assert!(archive.prune.is_empty() && archive.active_prune_job.is_none());
    assert!(matches!(
        decision.effects().create[..],
        [Create::Job(_), Create::Job(_)]
    ));

    // The next reconcile sees it run, and starts it again neither in the plan's place nor anew.
    let mut plan = plan.clone();
    plan.status = Some(decision.status.clone());
    let mut observed = observed();
    observed
        .jobs
        .push(running(prune_job_of(PRUNE_JOB, "2026-11-29T00:00:06Z")));
    let busy = decide(&plan, &observed, at("2026-11-29T00:01:00Z"), &settings());
    assert!(busy.create_copy_prunes.is_empty());
    assert_eq!(
        entry(&busy, "offsite").active_prune_job.as_deref(),
        Some(PRUNE_JOB)
    );
    assert!(busy.status.prune.last_run.is_none(), "not the plan's prune");
}

#[test]
fn a_destinations_prune_waits_for_its_copy_and_its_copy_waits_for_it() {
    let mut plan = retained_plan();
    let status = plan.status.as_mut().unwrap();
    status.snapshots = Some(PlanSnapshots {
        total: 2,
        newest: vec![
            snapshot("bbbbbbbb", "2026-11-28T02:30:00Z"),
            snapshot("aaaaaaaa", "2026-11-27T02:30:00Z"),
        ],
        listed_time: Time(at("2026-11-28T02:31:00Z")),
    });
    let copying = "nightly-copy-offsite-bbbbbbbb";
    let mut observed = observed();
    observed
        .jobs
        .push(running(copy_job_of(copying, "2026-11-28T23:59:00Z")));
    let now = at("2026-11-29T00:00:05Z");
    let waiting = decide(&plan, &observed, now, &settings());
    assert!(
        waiting.create_copy_prunes.is_empty(),
        "no prune beside its copy"
    );
    let offsite = entry(&waiting, "offsite");
    assert_eq!(offsite.prune.last_schedule_time, None, "still due");
    assert_eq!(
        offsite.prune.next_schedule_time,
        Some(Time(at("2026-12-06T00:00:00Z")))
    );

    // The copy ends: the prune, still due, starts.
    plan.status = Some(waiting.status.clone());
    observed.jobs = vec![copy_job_of(copying, "2026-11-28T23:59:00Z")];
    let done = decide(&plan, &observed, at("2026-11-29T00:05:00Z"), &settings());
    assert_eq!(done.create_copy_prunes.len(), 1);
    let pruning = done.create_copy_prunes[0].job.name_any();

    // While it runs, a copy due for a newer snapshot waits for it.
    plan.status = Some(done.status.clone());
    let status = plan.status.as_mut().unwrap();
    status
        .snapshots
        .as_mut()
        .unwrap()
        .newest
        .insert(0, snapshot("cccccccc", "2026-11-29T02:30:00Z"));
    observed
        .jobs
        .push(running(prune_job_of(&pruning, "2026-11-29T00:05:01Z")));
    let held = decide(&plan, &observed, at("2026-11-29T02:40:00Z"), &settings());
    assert!(held
        .create_copies
        .iter()
        .all(|j| j.labels()[LABEL_COPY] != "offsite"));
    assert!(entry(&held, "offsite").active_job.is_none());
    assert!(held
        .create_copies
        .iter()
        .any(|j| j.labels()[LABEL_COPY] == "archive"));
}

#[test]
fn a_finished_destination_prune_is_recorded_on_its_entry_once() {
    let mut plan = retained_plan();
    plan.status.as_mut().unwrap().copies = vec![CopyStatus {
        name: "offsite".into(),
        active_prune_job: Some(PRUNE_JOB.into()),
        prune: MaintenanceStatus {
            last_schedule_time: Some(Time(at("2026-11-29T00:00:00Z"))),
            ..MaintenanceStatus::default()
        },
        ..CopyStatus::default()
    }];
    let mut observed = observed();
    observed
        .jobs
        .push(prune_job_of(PRUNE_JOB, "2026-11-29T00:10:00Z"));
    let mut pod = pod_for(PRUNE_JOB);
    let result = RunResult {
        snapshot_id: None,
        prune: Some(PruneStats {
            bytes_freed: 4096,
            bytes_kept: 1 << 20,
            packs_deleted: 1,
        }),
        ..run_result(Operation::Prune, ExitStatus::Success)
    };
    let statuses = pod.status.as_mut().unwrap().container_statuses.as_mut();
    let state = statuses.unwrap()[0].state.as_mut().unwrap();
    state.terminated.as_mut().unwrap().message = Some(result.to_termination_message());
    observed.pods.push(pod);
    let now = at("2026-11-29T00:11:00Z");
    let decision = decide(&plan, &observed, now, &settings());
    let offsite = entry(&decision, "offsite");
    let last = offsite.prune.last_run.as_ref().expect("recorded");
    assert_eq!(
        (last.job_name.as_str(), last.result, last.bytes_freed),
        (PRUNE_JOB, RunOutcome::Succeeded, Some(4096))
    );
    assert!(offsite.active_prune_job.is_none());
    assert_eq!(decision.finished_copy_prunes.len(), 1);
    assert!(
        decision
            .events
            .iter()
            .any(|e| e.reason == Reason::PruneSucceeded
                && e.note.contains("copy destination offsite"))
    );
    // The plan's own status knows nothing of it.
    assert!(decision.status.prune.last_run.is_none() && decision.status.repository.is_none());

    plan.status = Some(decision.status);
    let again = decide(&plan, &observed, now, &settings());
    assert!(
        again.finished_copy_prunes.is_empty()
            && again
                .events
                .iter()
                .all(|e| e.reason != Reason::PruneSucceeded)
    );
}

#[test]
fn a_destination_under_a_maintenance_login_is_pruned_from_the_operators_namespace() {
    let mut settings = settings();
    let values = r#"{"credentials": [{"urlPrefix": "http://127.0.0.1:8001/", "secretName": "offsite-maintenance"}],
        "protectionWindow": {"default": "14d"}}"#;
    settings.job.protection =
        crate::protection::Protection::parse(values, "backup-system").unwrap();
    let plan = retained_plan();
    let decision = decide(&plan, &observed(), at("2026-11-29T00:00:05Z"), &settings);
    let pruned = &decision.create_copy_prunes[0];
    assert_eq!(pruned.job.namespace().as_deref(), Some("backup-system"));
    assert!(crate::job::remote_job_of(&pruned.job, &plan));
    let copy = pruned.password_copy.as_ref().expect("a password copy");
    assert_eq!(copy.job_name, pruned.job.name_any());
    assert_eq!(copy.source_namespace, "shop");
    assert!(args(&pruned.job)
        .windows(2)
        .any(|w| w == ["--protect-within", "14d"]));
    assert!(decision.effects().create.iter().any(
        |c| matches!(c, Create::RemoteJob(job, _) if job.name_any() == pruned.job.name_any())
    ));
    // The plan's repository and `archive` have no maintenance login: the plan says so, naming
    // them, and not the protected destination.
    let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
    assert_eq!(ready.reason, "BackupLoginCanDeleteHistory");
    assert!(
        ready.message.contains("copy destination archive"),
        "{}",
        ready.message
    );
    assert!(!ready.message.contains("offsite"), "{}", ready.message);

    // Its finished Job is found there by the plan's labels and uid, and deleted there once a
    // newer one has finished.
    let mut plan = plan.clone();
    plan.status = Some(decision.status.clone());
    let mut observed = observed();
    let mut older = pruned.job.clone();
    older.status = finished_job("x", "2026-11-29T00:10:00Z").status;
    older.metadata.creation_timestamp = Some(Time(at("2026-11-29T00:00:06Z")));
    let mut newer = older.clone();
    newer.metadata.name = Some(format!("{}-next", pruned.job.name_any()));
    newer.metadata.creation_timestamp = Some(Time(at("2026-12-06T00:00:06Z")));
    observed.jobs = vec![older, newer];
    let later = decide(&plan, &observed, at("2026-12-06T00:20:00Z"), &settings);
    assert_eq!(
        later.delete_remote,
        [("backup-system".to_owned(), pruned.job.name_any())]
    );
}

#[test]
fn a_plan_protected_but_for_a_destination_says_the_destinations_login_can_delete_history() {
    let mut settings = settings();
    let values = r#"{"credentials": [{"urlPrefix": "http://127.0.0.1:8000/", "secretName": "gate-maintenance"},
        {"urlPrefix": "http://127.0.0.1:8002/", "secretName": "archive-maintenance"}]}"#;
    settings.job.protection =
        crate::protection::Protection::parse(values, "backup-system").unwrap();
    let plan = retained_plan();
    let decision = decide(&plan, &observed(), at("2026-11-28T12:00:00Z"), &settings);
    let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
    assert_eq!(ready.reason, "BackupLoginCanDeleteHistory");
    assert!(
        ready
            .message
            .contains("copy destination offsite's repository http://127.0.0.1:8001/shop"),
        "{}",
        ready.message
    );
    assert!(!ready.message.contains("8000") && !ready.message.contains("archive"));
    assert_eq!(
        (decision.events.iter())
            .filter(|e| e.reason == Reason::BackupLoginCanDeleteHistory)
            .count(),
        1
    );
    // With every repository covered, the plan is plainly Ready.
    let mut covered = plan.clone();
    covered.spec.copies.retain(|c| c.name == "archive");
    let decision = decide(&covered, &observed(), at("2026-11-28T12:00:00Z"), &settings);
    let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
    assert_eq!(ready.reason, "Ready");
}

#[test]
fn a_suspicious_night_pauses_the_destinations_retention_too() {
    let mut plan = retained_plan();
    plan.status.as_mut().unwrap().suspicious_change = Some(SuspiciousChange {
        snapshot_id: "4f2a9c1b".repeat(8),
        reason: "MassRewrite".into(),
        message: "98% of the parent's files were changed".into(),
        time: Time(at("2026-11-28T02:40:00Z")),
    });
    let decision = decide(&plan, &observed(), at("2026-11-29T00:00:05Z"), &settings());
    let pruned = &decision.create_copy_prunes[0];
    let args = args(&pruned.job);
    assert!(args.iter().all(|a| !a.starts_with("--keep-")), "{args:?}");
    assert!(decision
        .events
        .iter()
        .any(|e| e.reason == Reason::PruneStarted && e.note.contains("keeping every snapshot")));
}

#[test]
fn a_suspended_prune_schedule_suspends_the_destinations_prunes() {
    let mut plan = retained_plan();
    plan.spec.maintenance.prune.suspend = true;
    let decision = decide(&plan, &observed(), at("2026-11-29T00:00:05Z"), &settings());
    assert!(decision.create_copy_prunes.is_empty());
    assert_eq!(entry(&decision, "offsite").prune.next_schedule_time, None);
}

#[test]
fn a_busy_plan_wakes_for_its_destinations_prune_time() {
    let plan = retained_plan();
    let mut observed = observed();
    // A backup runs; the destinations' prune is due in 30 s and does not wait for it.
    observed.jobs.push(running(finished_job(
        "nightly-manual-1",
        "2026-11-28T23:50:00Z",
    )));
    let decision = decide(&plan, &observed, at("2026-11-28T23:59:30Z"), &settings());
    assert_eq!(
        decision.status.active_run.as_ref().map(|r| r.kind),
        Some(RunKind::Backup)
    );
    assert_eq!(decision.requeue_after, Duration::from_secs(30));
}
