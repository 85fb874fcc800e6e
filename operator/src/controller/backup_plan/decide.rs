//! [`decide`]: everything about a plan at one instant, from what was fetched. No I/O.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::decision::PlanDecision;
use super::fetch::ObservedPlan;
use super::occupant::{Occupant, PreparingRun};
use super::resolve::{resolve, ReadyPlan};
use super::{maintenance, runs, snapshots, triggers};
use crate::api::{BackupPlan, BackupPlanStatus};
use crate::conditions::{find_condition, reasons, set_condition, types, ConditionStatus};
use crate::controller::effects::PlannedEvent;
use crate::controller::Settings;
use crate::recorder::EventType;
use crate::status::set_backup_plan_conditions;

/// A safety net: even without a watch event, a plan is looked at this often.
const MAX_REQUEUE: Duration = Duration::from_secs(3600);
/// While a Job runs, its changes wake the reconciler; this only covers a missed watch event.
pub(super) const ACTIVE_REQUEUE: Duration = Duration::from_secs(300);

/// Decides everything about `plan` at `now`, from what was fetched. No I/O.
pub fn decide(
    plan: &BackupPlan,
    observed: &ObservedPlan,
    now: Timestamp,
    settings: &Settings,
) -> PlanDecision {
    let generation = plan.metadata.generation;
    let mut decision = PlanDecision::starting_from(plan.status.clone().unwrap_or_default());
    let ready_before = ready_condition(&decision.status);

    // What the plan's Jobs and snapshots say, and so what occupies it now.
    let jobs = runs::plan_jobs(plan, observed);
    let backup = runs::observe(&jobs.backups, &observed.pods, &mut decision, now, settings);
    let preparing = snapshots::observe(
        plan,
        observed,
        &jobs.backups,
        backup.is_some(),
        &mut decision,
        now,
    );
    let maintenance = maintenance::observe(&jobs.maintenance, &observed.pods, &mut decision, now);
    let mut occupant = match (backup, preparing, maintenance) {
        (Some(run), _, _) => Occupant::Backup(run),
        (None, Some(preparing), _) => Occupant::PreparingSnapshots(preparing),
        (None, None, Some(run)) => Occupant::Maintenance(run),
        (None, None, None) => Occupant::Idle,
    };

    // What the spec names; then what starts or moves on.
    let ready = resolve(plan, observed, &settings.tenant_policy);
    let ready_message = match &ready {
        Err(_) => {
            decision.status.next_schedule_time = None;
            String::new()
        }
        Ok(ready) => {
            decision.status.mover = Some(ready.mover.status());
            occupant = start_or_advance(
                plan,
                observed,
                ready,
                occupant,
                now,
                settings,
                &mut decision,
            );
            ready_message(plan.spec.suspend, &decision.status)
        }
    };
    decision.status.active_run = occupant.active_run().cloned();

    // Conditions, an Event when readiness changes, and the snapshots of runs that are over.
    let problems = ready.as_ref().err().map(Vec::as_slice).unwrap_or_default();
    set_backup_plan_conditions(
        &mut decision.status,
        problems,
        &ready_message,
        generation,
        now,
    );
    if let Occupant::PreparingSnapshots(preparing) = &occupant {
        show_preparing(preparing, generation, now, &mut decision.status);
    }
    let current_run = occupant.active_run().map(|run| run.job_name.as_str());
    (decision.delete_snapshots, decision.delete_claims) =
        snapshots::over(plan, observed, current_run);
    decision.status.observed_generation = generation;
    if ready_condition(&decision.status) != ready_before {
        decision.events.extend(not_ready_event(&decision.status));
    }

    decision.requeue_after =
        requeue_after(&occupant, ready.is_ok(), &decision.status, now, settings);
    // A suspended plan is not expected to back up: no interval, no overdue alert.
    decision.schedule_interval = ready
        .as_ref()
        .ok()
        .filter(|_| !plan.spec.suspend)
        .and_then(|r| r.plan.schedule.interval_after(now));
    decision
}

/// For a ready plan: starts a due backup, or moves a prepared one on, or starts a due prune or
/// check; returns what occupies the plan after.
fn start_or_advance<'a>(
    plan: &BackupPlan,
    observed: &ObservedPlan,
    ready: &ReadyPlan,
    occupant: Occupant<'a>,
    now: Timestamp,
    settings: &Settings,
    decision: &mut PlanDecision,
) -> Occupant<'a> {
    let remove_stale_locks = !runs::plan_pod_alive(
        &plan.metadata.name.clone().unwrap_or_default(),
        &observed.pods,
    );
    let request = triggers::due(plan, ready, occupant.is_idle(), now, settings, decision);
    let occupant = match (occupant, request) {
        (Occupant::Idle, Some(request)) => runs::start(
            plan,
            ready,
            request,
            remove_stale_locks,
            now,
            settings,
            decision,
        ),
        (Occupant::PreparingSnapshots(preparing), _) => snapshots::advance(
            plan,
            ready,
            observed,
            preparing,
            remove_stale_locks,
            now,
            settings,
            decision,
        ),
        (occupant, _) => occupant,
    };
    // An idle plan prunes and checks its repository when they are due.
    if !occupant.is_idle() {
        maintenance::show_next(plan, &ready.plan, &mut decision.status, now);
        return occupant;
    }
    match maintenance::start_due(
        plan,
        &ready.plan,
        &mut decision.status,
        now,
        remove_stale_locks,
        &settings.job,
    ) {
        Some(started) => {
            decision.create = Some(started.job);
            decision.events.push(started.event);
            Occupant::Maintenance(started.active)
        }
        None => Occupant::Idle,
    }
}

/// The `Running` condition of a run waiting for its VolumeSnapshots, with how many are ready.
fn show_preparing(
    preparing: &PreparingRun,
    generation: Option<i64>,
    now: Timestamp,
    status: &mut BackupPlanStatus,
) {
    let taken = preparing.snapshots.len();
    let ready = preparing.snapshots.iter().filter(|s| s.is_ready()).count();
    set_condition(
        &mut status.conditions,
        types::RUNNING,
        ConditionStatus::True,
        reasons::PREPARING_SNAPSHOTS,
        format!(
            "Job {} starts when its VolumeSnapshots are ready ({ready} of {taken})",
            preparing.run.job_name
        ),
        generation,
        now,
    );
}

fn ready_message(suspend: bool, status: &BackupPlanStatus) -> String {
    match (&status.next_schedule_time, suspend) {
        (_, true) => "suspended: no scheduled runs".into(),
        (Some(next), false) => format!("next run at {}", next.0),
        (None, false) => "ready".into(),
    }
}

/// The `Ready` condition's status and reason, to see whether it changed.
fn ready_condition(status: &BackupPlanStatus) -> Option<(ConditionStatus, String)> {
    find_condition(&status.conditions, types::READY)
        .map(|c| (ConditionStatus::of(c), c.reason.clone()))
}

/// The Warning to publish when the plan is not ready.
fn not_ready_event(status: &BackupPlanStatus) -> Option<PlannedEvent> {
    find_condition(&status.conditions, types::READY)
        .filter(|c| ConditionStatus::of(c) == ConditionStatus::False)
        .map(|condition| PlannedEvent {
            type_: EventType::Warning,
            reason: condition.reason.clone(),
            note: condition.message.clone(),
        })
}

fn requeue_after(
    occupant: &Occupant,
    ready: bool,
    status: &BackupPlanStatus,
    now: Timestamp,
    settings: &Settings,
) -> Duration {
    if matches!(occupant, Occupant::PreparingSnapshots(_)) {
        settings.snapshot_poll
    } else if !ready {
        settings.not_ready_recheck
    } else if !occupant.is_idle() {
        ACTIVE_REQUEUE
    } else {
        status
            .next_schedule_time
            .as_ref()
            .map(|t| t.0)
            .into_iter()
            .chain(maintenance::next_wake(status))
            .min()
            .map(|next| next.duration_since(now).max(SignedDuration::from_secs(1)))
            .and_then(|wait| Duration::try_from(wait).ok())
            .unwrap_or(MAX_REQUEUE)
            .min(MAX_REQUEUE)
    }
}
