//! A plan's runs at the concurrency limits' gate.

use std::num::NonZeroUsize;

use super::*;
use crate::conditions::Reason;
use crate::controller::queue::watch::job_footprint;
use crate::controller::queue::{
    Demand, Footprint, Gate, Ledger, Limits, RunClass, RunKey, QUEUED_RECHECK,
};

fn one_backup_at_a_time() -> Ledger {
    let limits = Limits {
        backups: NonZeroUsize::new(1),
        ..Limits::UNLIMITED
    };
    Ledger::synced(limits)
}

/// Another plan's backup takes the only slot.
fn occupy(ledger: &mut Ledger, now: Timestamp) -> (JobId, Demand) {
    let demand = Demand {
        key: RunKey::plan("other", "plan"),
        footprint: Footprint {
            class: RunClass::Backup,
            node: None,
            host: None,
        },
        since: now,
    };
    assert_eq!(
        ledger.admit(&demand, now),
        crate::controller::queue::Admission::Admitted
    );
    let id = ("other".to_string(), "plan-1".to_string());
    ledger.observe_job(
        id.clone(),
        Some((demand.key.clone(), demand.footprint.clone())),
        now,
    );
    (id, demand)
}

type JobId = (String, String);

#[test]
fn a_due_run_beyond_the_limit_waits_in_status_and_starts_on_time_when_a_slot_frees() {
    let mut ledger = one_backup_at_a_time();
    let due = at("2026-11-30T02:30:02Z");
    let (other_job, _) = occupy(&mut ledger, due);
    let mut plan = plan();
    plan.status = Some(BackupPlanStatus {
        last_schedule_time: Some(Time(at("2026-11-29T02:30:00Z"))),
        ..BackupPlanStatus::default()
    });
    let decision = decide_with(&plan, &observed(), due, &settings(), &mut ledger);
    assert!(decision.create.is_none(), "no Job beyond the limit");
    let queued = decision.status.queued.clone().expect("queued");
    assert_eq!((queued.position, queued.waiting), (1, 1));
    assert_eq!(queued.kind, RunKind::Backup);
    assert_eq!(queued.trigger, RunTrigger::Schedule);
    assert!(
        queued.message.contains("1 backups run"),
        "{}",
        queued.message
    );
    let running = find_condition(&decision.status.conditions, types::RUNNING).unwrap();
    assert_eq!(
        (running.status.as_str(), running.reason.as_str()),
        ("False", Reason::Queued.as_str())
    );
    assert_eq!(decision.requeue_after, QUEUED_RECHECK);
    assert!(decision.status.active_run.is_none());

    // An hour later the other backup ends: the run starts for its scheduled time, not as a
    // late catch-up, and nothing counts as missed.
    let later = at("2026-11-30T03:30:00Z");
    let woken = ledger.observe_job(other_job, None, later);
    assert_eq!(woken, vec![RunKey::plan("shop", "nightly")]);
    plan.status = Some(decision.status);
    let started = decide_with(&plan, &observed(), later, &settings(), &mut ledger);
    let job = started.create.expect("a Job once a slot is free");
    assert_eq!(job.metadata.name.as_deref(), Some("nightly-29933430"));
    let active = started.status.active_run.as_ref().unwrap();
    assert_eq!(active.trigger, RunTrigger::Schedule);
    assert_eq!(
        active.scheduled_time,
        Some(Time(at("2026-11-30T02:30:00Z")))
    );
    assert!(started.status.queued.is_none());
    assert_eq!(started.status.missed_runs, 0);
    // The Job tells the watch what it takes from the limits.
    let (_, key, footprint) = job_footprint(&job).expect("an operator Job");
    assert_eq!(key, RunKey::plan("shop", "nightly"));
    assert_eq!(footprint.class, RunClass::Backup);
    assert_eq!(footprint.host.as_deref(), Some("127.0.0.1:8000"));
}

#[test]
fn a_manual_trigger_waits_its_turn_too() {
    let mut ledger = one_backup_at_a_time();
    let now = at("2026-11-30T10:00:00Z");
    let (other_job, _) = occupy(&mut ledger, now);
    let mut plan = plan();
    plan.spec.manual_trigger = Some("before-upgrade".into());
    let decision = decide_with(&plan, &observed(), now, &settings(), &mut ledger);
    assert!(decision.create.is_none());
    let queued = decision.status.queued.clone().unwrap();
    assert_eq!(queued.trigger, RunTrigger::Manual);
    assert_eq!(queued.manual_trigger.as_deref(), Some("before-upgrade"));

    ledger.observe_job(other_job, None, now);
    plan.status = Some(decision.status);
    let started = decide_with(&plan, &observed(), now, &settings(), &mut ledger);
    assert!(started.create.is_some());
    let active = started.status.active_run.as_ref().unwrap();
    assert_eq!(active.trigger, RunTrigger::Manual);
}

#[test]
fn a_newer_scheduled_time_replaces_the_waiting_one_and_counts_it_missed() {
    let mut ledger = one_backup_at_a_time();
    let first = at("2026-11-30T02:30:01Z");
    occupy(&mut ledger, first);
    let mut plan = plan();
    plan.status = Some(BackupPlanStatus {
        last_schedule_time: Some(Time(at("2026-11-29T02:30:00Z"))),
        ..BackupPlanStatus::default()
    });
    let decision = decide_with(&plan, &observed(), first, &settings(), &mut ledger);
    let since = decision.status.queued.as_ref().unwrap().since.clone();
    plan.status = Some(decision.status);
    // Still waiting a day later.
    let next_day = at("2026-12-01T02:30:01Z");
    let again = decide_with(&plan, &observed(), next_day, &settings(), &mut ledger);
    let queued = again.status.queued.as_ref().unwrap();
    assert_eq!(
        queued.scheduled_time,
        Some(Time(at("2026-12-01T02:30:00Z")))
    );
    assert_eq!(queued.since, since, "it keeps its place in the queue");
    assert_eq!(again.status.missed_runs, 1);
}

#[test]
fn a_suspended_plan_leaves_the_queue() {
    let mut ledger = one_backup_at_a_time();
    let now = at("2026-11-30T02:30:01Z");
    occupy(&mut ledger, now);
    let mut plan = plan();
    plan.status = Some(BackupPlanStatus {
        last_schedule_time: Some(Time(at("2026-11-29T02:30:00Z"))),
        ..BackupPlanStatus::default()
    });
    let decision = decide_with(&plan, &observed(), now, &settings(), &mut ledger);
    assert_eq!(ledger.waiting(RunClass::Backup), 1);
    plan.status = Some(decision.status);
    plan.spec.suspend = true;
    let suspended = decide_with(&plan, &observed(), now, &settings(), &mut ledger);
    assert!(suspended.status.queued.is_none());
    assert_eq!(ledger.waiting(RunClass::Backup), 0);
}

/// A reconcile after a start: the plan asks the gate (as `Queue::with_gate` does), then decides.
fn reconcile(ledger: &mut Ledger, plan: &BackupPlan, now: Timestamp) -> PlanDecision {
    let key = RunKey::plan(plan.metadata.namespace.clone().unwrap(), plan.name_any());
    ledger.asked(&key, now);
    decide_with(plan, &observed(), now, &settings(), ledger)
}

#[test]
fn a_queued_run_keeps_its_place_across_a_restart() {
    let due = at("2026-11-30T02:30:02Z");
    let mut plan = plan();
    plan.status = Some(BackupPlanStatus {
        last_schedule_time: Some(Time(at("2026-11-29T02:30:00Z"))),
        ..BackupPlanStatus::default()
    });
    // Another namespace's plan, due as well, that the first operator never looked at.
    let mut newcomer = plan.clone();
    newcomer.metadata.namespace = Some("blog".into());
    newcomer.metadata.uid = Some("uid-2".into());
    let mut before = one_backup_at_a_time();
    occupy(&mut before, due);
    let queued = decide_with(&plan, &observed(), due, &settings(), &mut before);
    plan.status = Some(queued.status);

    // The operator restarts a minute later (the other backup has ended meanwhile); the other
    // plan happens to be looked at first.
    let restart = due + jiff::SignedDuration::from_mins(1);
    let mut ledger = Ledger::new(one_backup_at_a_time().limits().to_owned());
    ledger.resync([], restart);
    let keys = [
        RunKey::plan("shop", "nightly"),
        RunKey::plan("blog", "nightly"),
    ];
    ledger.plans_listed(keys, restart);
    let first = reconcile(&mut ledger, &newcomer, restart);
    assert!(
        first.create.is_none(),
        "nothing starts before every plan was looked at"
    );
    // The plan that waited before the restart goes first.
    let started = reconcile(&mut ledger, &plan, restart);
    assert!(started.create.is_some(), "the oldest run starts");
    newcomer.status = Some(first.status);
    let again = reconcile(&mut ledger, &newcomer, restart);
    assert!(again.create.is_none());
    assert_eq!(again.status.queued.map(|q| q.position), Some(1));
}

#[test]
fn a_queued_run_shows_its_place_again_when_it_has_halved_not_at_every_move() {
    let mut ledger = one_backup_at_a_time();
    let due = at("2026-11-30T02:30:02Z");
    occupy(&mut ledger, due);
    // Seven runs of other namespaces waited before this one.
    let earlier = at("2026-11-30T02:00:00Z");
    let ahead: Vec<RunKey> = (0..7)
        .map(|i| RunKey::plan(format!("team-{i}"), "nightly"))
        .collect();
    for key in &ahead {
        let demand = Demand {
            key: key.clone(),
            footprint: Footprint {
                class: RunClass::Backup,
                node: None,
                host: None,
            },
            since: earlier,
        };
        let admission = ledger.admit(&demand, due);
        assert!(matches!(
            admission,
            crate::controller::queue::Admission::Queued { .. }
        ));
    }
    let mut plan = plan();
    plan.status = Some(BackupPlanStatus {
        last_schedule_time: Some(Time(at("2026-11-29T02:30:00Z"))),
        ..BackupPlanStatus::default()
    });
    let first = decide_with(&plan, &observed(), due, &settings(), &mut ledger);
    let shown = first.status.queued.clone().expect("queued");
    assert_eq!((shown.position, shown.waiting), (8, 8));
    plan.status = Some(first.status.clone());

    // Three runs ahead leave: 5th of 5 is not written over 8th of 8 (no status change, so no
    // write and no reconcile after it).
    for key in &ahead[..3] {
        ledger.withdraw(key);
    }
    let later = due + jiff::SignedDuration::from_mins(1);
    let moved = decide_with(&plan, &observed(), later, &settings(), &mut ledger);
    assert_eq!(moved.status.queued.as_ref(), Some(&shown));
    assert_eq!(moved.status.conditions, first.status.conditions);

    // One more leaves: 4th of 4 is half of 8, and is shown.
    ledger.withdraw(&ahead[3]);
    let halved = decide_with(&plan, &observed(), later, &settings(), &mut ledger);
    let queued = halved.status.queued.expect("still queued");
    assert_eq!((queued.position, queued.waiting), (4, 4));
    let running = find_condition(&halved.status.conditions, types::RUNNING).unwrap();
    assert!(
        running.message.contains("number 4 of 4"),
        "{}",
        running.message
    );
}
