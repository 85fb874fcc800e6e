//! The plan's restore drills: when one starts (its schedule, a request), what puts it off (the
//! plan's backup, prune or check, a backup due, no snapshot, the queue), how a running drill
//! holds the plan's backups off, and how a finished one lands in `status.verify`.

use super::*;
use crate::api::{
    DatabaseRunRecord, DrillOutcome, PlanSnapshots, QueuedRun, RunRecord, VerifySpec,
    ANNOTATION_VERIFY_NOW,
};
use crate::controller::queue::{Admission, Blocker, Demand, Footprint, Gate, Owner, RunKey};
use crate::fixtures::snapshot_record;
use crate::job::{DRILL_OPERATION, SCRATCH_ROOT};
use neverwiped_contract::drill::{DrillStats, DrillVolume};

/// Drills at 04:00 of a plan that backs up at 02:30 and whose backup of today ran.
fn drilled_plan() -> BackupPlan {
    let mut plan = plan();
    plan.spec.verify = Some(VerifySpec {
        schedule: "0 4 * * *".into(),
        recovery_time_objective: Some("10m".into()),
        ..VerifySpec::default()
    });
    let mut newest = snapshot_record("cccccccc", "2026-11-30T02:30:00Z");
    (newest.size_bytes, newest.files) = (5 << 30, 1000);
    plan.status = Some(BackupPlanStatus {
        last_schedule_time: Some(Time(at("2026-11-30T02:30:00Z"))),
        snapshots: Some(PlanSnapshots {
            total: 2,
            newest: vec![newest, snapshot_record("bbbbbbbb", "2026-11-29T02:30:00Z")],
            listed_time: Time(at("2026-11-30T02:31:00Z")),
        }),
        ..BackupPlanStatus::default()
    });
    plan
}

const DRILL_TIME: &str = "2026-11-30T04:00:05Z";

fn verify(decision: &PlanDecision) -> &crate::api::VerifyStatus {
    decision.status.verify.as_ref().expect("status.verify")
}

/// A drill Job of the plan, finished or not, created at `created`.
fn drill_job_of(name: &str, created: &str, finished: bool) -> Job {
    let mut job = finished_job(name, created);
    job.metadata.labels = Some(BTreeMap::from([
        (LABEL_OPERATION.to_string(), DRILL_OPERATION.to_string()),
        (LABEL_PLAN.to_string(), "nightly".to_string()),
    ]));
    if !finished {
        job.status = Some(JobStatus::default());
    }
    job
}

/// The pod of a drill Job that ended with `status` after `secs` seconds of restoring.
fn drill_pod(job: &str, status: ExitStatus, secs: f64, error: Option<&str>) -> Pod {
    let mut result = run_result(Operation::Drill, status);
    result.snapshot_id = Some(format!("cccccccc{}", "0".repeat(56)));
    result.error = error.map(str::to_owned);
    result.drill = Some(DrillStats {
        sample_percent: 100,
        sample_round: 0,
        volumes: vec![DrillVolume {
            path: "/data/data".into(),
            files: 1000,
            bytes: 5 << 30,
            secs,
            mismatched: u64::from(status == ExitStatus::VerifyFailed),
        }],
        databases: Vec::new(),
    });
    pod_with_result(job, &result, status.code())
}

#[test]
fn a_scheduled_drill_starts_with_scratch_for_its_snapshot_and_counts_its_round() {
    let decision = decide(&drilled_plan(), &observed(), at(DRILL_TIME), &settings());
    let job = decision.create_drill.as_ref().expect("a drill Job");
    assert_eq!(
        job.metadata.name.as_deref(),
        Some("nightly-verify-29933520")
    );
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let args = pod.containers[0].args.as_ref().unwrap();
    assert_eq!(&args[..2], ["drill", "latest"]);
    assert!(args.contains(&"shop/nightly".to_owned()), "{args:?}");
    let scratch = (pod.volumes.iter().flatten()).find(|v| v.name == "scratch");
    let limit = scratch
        .unwrap()
        .empty_dir
        .as_ref()
        .unwrap()
        .size_limit
        .clone();
    // 5 GiB of content and a block for each of its 1000 files; no database to load.
    assert_eq!(limit.unwrap().0, "5124Mi");
    assert!(pod.containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .any(|m| m.mount_path == SCRATCH_ROOT));
    let verify = verify(&decision);
    assert_eq!(
        verify.active_job.as_deref(),
        Some("nightly-verify-29933520")
    );
    assert_eq!(verify.drills, 1);
    assert_eq!(verify.waiting, None);
    assert_eq!(
        verify.last_schedule_time,
        Some(Time(at("2026-11-30T04:00:00Z")))
    );
    assert_eq!(
        verify.next_schedule_time,
        Some(Time(at("2026-12-01T04:00:00Z")))
    );
    assert!(decision
        .events
        .iter()
        .any(|e| e.reason == Reason::DrillStarted));
    assert!(decision.create.is_none(), "no backup beside it");
    // The queue counts its Job as the plan's drill, against the repository's host.
    let (_, key, footprint) = crate::controller::queue::watch::job_footprint(job).unwrap();
    assert_eq!(key.owner, Owner::Drill("nightly".into()));
    assert_eq!(footprint.class, crate::controller::queue::RunClass::Drill);
    assert_eq!(footprint.host.as_deref(), Some("127.0.0.1:8000"));
}

#[test]
fn a_drill_due_while_the_plans_backup_is_due_waits_for_it_then_starts() {
    // The backup of 02:30 and the drill of 02:30 fall due together: the backup goes first.
    let mut plan = drilled_plan();
    plan.spec.verify.as_mut().unwrap().schedule = "30 2 * * *".into();
    let status = plan.status.as_mut().unwrap();
    status.last_schedule_time = Some(Time(at("2026-11-29T02:30:00Z")));
    let now = at("2026-11-30T02:30:05Z");
    let decision = decide(&plan, &observed(), now, &settings());
    let backup = decision.create.as_ref().expect("the backup starts");
    assert!(decision.create_drill.is_none());
    let waiting = verify(&decision).waiting.clone().unwrap();
    assert!(
        waiting.starts_with("a backup of the plan runs"),
        "{waiting}"
    );
    assert_eq!(verify(&decision).last_schedule_time, None, "still due");

    // While the backup runs, the drill still waits.
    let mut observed = observed();
    let mut running = finished_job(&backup.name_any(), "2026-11-30T02:30:06Z");
    running.status = Some(JobStatus::default());
    observed.jobs.push(running);
    plan.status = Some(decision.status.clone());
    let decision = decide(&plan, &observed, at("2026-11-30T02:40:00Z"), &settings());
    assert!(decision.create_drill.is_none());
    assert!(verify(&decision).waiting.is_some());

    // Once it finished, the drill of 02:30 starts late.
    observed.jobs[0] = finished_job(&backup.name_any(), "2026-11-30T02:30:06Z");
    observed.pods.push(pod_for(&backup.name_any()));
    plan.status = Some(decision.status.clone());
    let decision = decide(&plan, &observed, at("2026-11-30T02:50:00Z"), &settings());
    let drill = decision.create_drill.as_ref().expect("the drill starts");
    assert_eq!(
        drill.metadata.name.as_deref(),
        Some("nightly-verify-29933430")
    );
    assert_eq!(verify(&decision).waiting, None);
}

#[test]
fn a_queued_backup_or_a_pending_manual_trigger_puts_the_drill_off() {
    let mut plan = drilled_plan();
    let status = plan.status.as_mut().unwrap();
    status.queued = Some(QueuedRun {
        kind: RunKind::Backup,
        trigger: RunTrigger::Schedule,
        scheduled_time: Some(Time(at("2026-11-30T02:30:00Z"))),
        manual_trigger: None,
        since: Time(at("2026-11-30T02:30:00Z")),
        position: 3,
        waiting: 7,
        message: "full".into(),
    });
    let mut full = Refusing { everything: true };
    let decision = decide_with(&plan, &observed(), at(DRILL_TIME), &settings(), &mut full);
    assert!(decision.create_drill.is_none());
    let waiting = verify(&decision).waiting.clone().unwrap();
    assert!(
        waiting.starts_with("a backup of the plan waits"),
        "{waiting}"
    );

    let mut plan = drilled_plan();
    plan.spec.manual_trigger = Some("now".into());
    plan.status.as_mut().unwrap().active_run = None;
    let mut busy = Refusing { everything: true };
    let decision = decide_with(&plan, &observed(), at(DRILL_TIME), &settings(), &mut busy);
    assert!(decision.create_drill.is_none());
    let waiting = verify(&decision).waiting.clone().unwrap();
    assert!(waiting.contains("backup"), "{waiting}");
}

#[test]
fn a_plan_without_a_snapshot_is_not_drilled_and_says_so() {
    let mut plan = drilled_plan();
    plan.status.as_mut().unwrap().snapshots = None;
    let decision = decide(&plan, &observed(), at(DRILL_TIME), &settings());
    assert!(decision.create_drill.is_none());
    let waiting = verify(&decision).waiting.clone().unwrap();
    assert!(waiting.contains("no snapshot yet"), "{waiting}");
    assert_eq!(verify(&decision).last_schedule_time, None, "still due");
}

#[test]
fn a_request_drills_a_plan_without_spec_verify_once() {
    let mut plan = drilled_plan();
    plan.spec.verify = None;
    plan.metadata.annotations = Some(BTreeMap::from([(
        ANNOTATION_VERIFY_NOW.to_string(),
        "2026-11-30T10:00:00Z".to_string(),
    )]));
    let now = at("2026-11-30T10:00:30Z");
    let decision = decide(&plan, &observed(), now, &settings());
    let job = decision.create_drill.as_ref().expect("the requested drill");
    assert_eq!(
        job.metadata.name.as_deref(),
        Some("nightly-verify-29933880")
    );
    let verify = verify(&decision);
    assert_eq!(verify.last_request.as_deref(), Some("2026-11-30T10:00:00Z"));
    assert_eq!(
        verify.next_schedule_time, None,
        "no schedule without spec.verify"
    );
    // Acted on once: the same value asks for nothing more, even after the drill is gone.
    plan.status = Some(BackupPlanStatus {
        verify: Some(crate::api::VerifyStatus {
            active_job: None,
            ..verify.clone()
        }),
        ..decision.status.clone()
    });
    let decision = decide(&plan, &observed(), at("2026-11-30T11:00:00Z"), &settings());
    assert!(decision.create_drill.is_none());
    // A plan never drilled nor asked keeps no status.verify.
    let decision = decide(&super::plan(), &observed(), now, &settings());
    assert!(decision.status.verify.is_none());
}

#[test]
fn a_running_drill_holds_the_plans_backup_off_until_it_ends() {
    let mut plan = drilled_plan();
    let status = plan.status.as_mut().unwrap();
    status.last_schedule_time = Some(Time(at("2026-11-29T02:30:00Z")));
    let mut observed = observed();
    observed.jobs.push(drill_job_of(
        "nightly-verify-29933400",
        "2026-11-30T02:00:00Z",
        false,
    ));
    let now = at("2026-11-30T02:30:05Z");
    let decision = decide(&plan, &observed, now, &settings());
    assert!(decision.create.is_none(), "the backup waits for the drill");
    assert_eq!(
        verify(&decision).active_job.as_deref(),
        Some("nightly-verify-29933400")
    );
    assert_eq!(
        verify(&decision).drills,
        0,
        "no round annotation: nothing counted"
    );
    assert_eq!(decision.requeue_after, ACTIVE_REQUEUE);
    // Ended, it is recorded, and the backup catches up.
    observed.jobs[0] = drill_job_of("nightly-verify-29933400", "2026-11-30T02:00:00Z", true);
    observed.pods.push(drill_pod(
        "nightly-verify-29933400",
        ExitStatus::Success,
        240.0,
        None,
    ));
    plan.status = Some(decision.status.clone());
    let decision = decide(&plan, &observed, at("2026-11-30T02:40:00Z"), &settings());
    let backup = decision.create.as_ref().expect("the backup catches up");
    assert_eq!(backup.metadata.name.as_deref(), Some("nightly-29933430"));
    let last = verify(&decision).last_run.clone().unwrap();
    assert_eq!(last.result, DrillOutcome::Succeeded);
    assert_eq!(last.recovery_seconds, Some(240.0));
    assert_eq!(last.snapshot_id.as_deref(), Some("cccccccc"));
    assert!(decision
        .events
        .iter()
        .any(|e| e.reason == Reason::DrillSucceeded));
    assert_eq!(decision.finished_drills.len(), 1);
}

#[test]
fn finished_drills_are_recorded_by_outcome_and_old_ones_deleted() {
    let mut observed = observed();
    let endings = [
        (ExitStatus::Success, 900.0, None),
        (
            ExitStatus::VerifyFailed,
            60.0,
            Some("1 file differs: a.db (content)"),
        ),
        (ExitStatus::Success, 120.0, None),
        (ExitStatus::Success, 30.0, None),
    ];
    for (day, (status, secs, error)) in endings.into_iter().enumerate() {
        let name = format!("nightly-verify-{day}");
        let created = format!("2026-11-2{day}T04:00:00Z");
        observed.jobs.push(drill_job_of(&name, &created, true));
        observed.pods.push(drill_pod(&name, status, secs, error));
    }
    let decision = decide(&drilled_plan(), &observed, at(DRILL_TIME), &settings());
    let verify = verify(&decision);
    let results: Vec<(&str, &str)> = (verify.history.iter())
        .map(|r| (r.job_name.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(
        results,
        [
            ("nightly-verify-3", "Succeeded"),
            ("nightly-verify-2", "Succeeded"),
            ("nightly-verify-1", "VerifyFailed"),
            ("nightly-verify-0", "OverObjective"),
        ]
    );
    assert_eq!(
        verify.history[0].recovery_time_objective.as_deref(),
        Some("10m")
    );
    assert_eq!(
        verify.history[3].result,
        DrillOutcome::SucceededOverObjective
    );
    let failed = &verify.history[2];
    assert_eq!(failed.result, DrillOutcome::Failed);
    assert!(failed.message.as_deref().unwrap().contains("a.db"));
    assert_eq!(decision.delete, ["nightly-verify-0"], "three are kept");
    let warnings: Vec<Reason> = (decision.events.iter())
        .filter(|e| e.type_ == EventType::Warning && e.note.contains("nightly-verify"))
        .map(|e| e.reason)
        .collect();
    assert_eq!(warnings, [Reason::OverObjective, Reason::VerifyFailed]);
    assert!(verify.last_success_time.is_some());
}

#[test]
fn a_drill_refused_a_slot_waits_and_looks_again() {
    let mut gate = Refusing { everything: false };
    let plan = drilled_plan();
    let decision = decide_with(&plan, &observed(), at(DRILL_TIME), &settings(), &mut gate);
    assert!(decision.create_drill.is_none());
    let waiting = verify(&decision).waiting.clone().unwrap();
    assert!(
        waiting.starts_with("waiting for a slot (2 of 4)"),
        "{waiting}"
    );
    assert_eq!(verify(&decision).last_schedule_time, None, "still due");
    assert!(decision.requeue_after <= crate::controller::queue::QUEUED_RECHECK);
}

#[test]
fn a_drill_that_loads_databases_gets_room_for_three_times_its_largest_dumps() {
    let mut plan = drilled_plan();
    plan.spec.databases = vec![serde_json::from_value(serde_json::json!({
        "name": "orders", "type": "postgresql", "host": "pg",
        "credentialsSecretRef": {"name": "pg"},
    }))
    .unwrap()];
    let verify_spec = plan.spec.verify.clone().unwrap();
    let mut status = plan.status.clone().unwrap();
    let files_room = (5u64 << 30) + 1000 * 4096;
    let bytes = super::super::drill_due::scratch_bytes(&plan, &verify_spec, &status);
    assert_eq!(bytes, files_room + super::super::drill_due::DUMP_ROOM_FLOOR);
    let run = |dump_bytes: i64| RunRecord {
        databases: vec![DatabaseRunRecord {
            name: "orders".into(),
            dump_bytes,
            error: None,
        }],
        ..serde_json::from_value(serde_json::json!({
            "jobName": "j", "trigger": "Schedule", "result": "Succeeded", "reason": "Succeeded"
        }))
        .unwrap()
    };
    status.history = vec![run(2 << 30), run(1 << 30)];
    let bytes = super::super::drill_due::scratch_bytes(&plan, &verify_spec, &status);
    assert_eq!(bytes, files_room + 3 * (2 << 30));
    // A snapshot by id that the listing lacks is sized as the largest listed.
    let by_id = VerifySpec {
        snapshot: "dddddddd".into(),
        databases: false,
        ..verify_spec
    };
    assert_eq!(
        super::super::drill_due::scratch_bytes(&plan, &by_id, &status),
        files_room
    );
}

/// A gate that queues every drill at 2 of 4, and admits everything else unless `everything`.
struct Refusing {
    everything: bool,
}

impl Gate for Refusing {
    fn admit(&mut self, demand: &Demand, _: Timestamp) -> Admission {
        match demand.key.owner {
            Owner::Drill(_) => Admission::Queued {
                position: 2,
                waiting: 4,
                blocked_by: Blocker::Maintenance(5),
            },
            _ if self.everything => Admission::Queued {
                position: 1,
                waiting: 1,
                blocked_by: Blocker::Backups(1),
            },
            _ => Admission::Admitted,
        }
    }
    fn hold(&mut self, _: &RunKey, _: &Footprint, _: Timestamp) {}
    fn withdraw(&mut self, _: &RunKey) {}
}
