//! [`decide`]: everything about a plan at one instant, from what was fetched, and the answers of
//! the concurrency limits' gate ([`decide_with`]). No I/O.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use super::admit::{self, Waiting};
use super::decision::PlanDecision;
use super::fetch::ObservedPlan;
use super::occupant::Occupant;
use super::resolve::{resolve, ReadyPlan};
use super::{
    copies, copy_prunes, drills, listing, maintenance, runs, snapshots, suspect, triggers,
};
use crate::api::{BackupPlan, BackupPlanStatus, PlanSnapshots};
use crate::conditions::{condition_state, find_condition, types, ConditionStatus, Reason};
use crate::controller::effects::PlannedEvent;
use crate::controller::queue::{Gate, Open, RunClass, QUEUED_RECHECK};
use crate::controller::Settings;
use crate::plan::{not_ready, Problem};
use crate::recorder::EventType;
use crate::status::{set_plan_conditions, PlanConditions, PreparingSnapshots};

/// A safety net: even without a watch event, a plan is looked at this often. Its changes, its
/// Jobs' and its Secrets' are watched, and its schedule sets its own wake-up: this only covers a
/// lost event, and each look costs the API server a few requests per plan (controller-runtime's
/// default resync is 10 hours).
const MAX_REQUEUE: Duration = Duration::from_secs(6 * 3600);
/// While a Job runs, its changes wake the reconciler; this only covers a missed watch event.
pub(super) const ACTIVE_REQUEUE: Duration = Duration::from_secs(300);

/// Decides everything about `plan` at `now`, from what was fetched, with no concurrency limit.
pub fn decide(
    plan: &BackupPlan,
    observed: &ObservedPlan,
    now: Timestamp,
    settings: &Settings,
) -> PlanDecision {
    decide_with(plan, observed, now, settings, &mut Open)
}

/// Decides everything about `plan` at `now`, from what was fetched; a run starts only when
/// `gate` admits it. No I/O.
pub fn decide_with(
    plan: &BackupPlan,
    observed: &ObservedPlan,
    now: Timestamp,
    settings: &Settings,
    gate: &mut dyn Gate,
) -> PlanDecision {
    let generation = plan.metadata.generation;
    let mut decision = PlanDecision::starting_from(plan.status.clone().unwrap_or_default());
    let ready_before = ready_condition(&decision.status);

    // What the plan's Jobs and snapshots say, and so what occupies it now.
    let jobs = runs::plan_jobs(plan, observed);
    suspect::acknowledge(plan, &mut decision, now);
    let backup = runs::observe(plan, &jobs, observed, &mut decision, now, settings);
    let running = backup.is_some();
    let plan_runs = (&jobs.backups[..], &jobs.hooks[..]);
    let preparing = snapshots::observe(plan, observed, plan_runs, running, &mut decision, now);
    let maintenance = maintenance::observe(&jobs.maintenance, &observed.pods, &mut decision, now);
    observe_beside(plan, &jobs, observed, &mut decision, now, settings);
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
            // A run that waited keeps its place in the status for when the plan is ready again.
            gate.withdraw(&admit::run_key(plan));
            gate.withdraw(&drills::drill_key(plan));
            decision.status.next_schedule_time = None;
            String::new()
        }
        Ok(ready) => {
            decision.status.mover = Some(ready.mover.status());
            occupant = start_runs(
                plan,
                observed,
                ready,
                occupant,
                now,
                settings,
                gate,
                &mut decision,
            );
            ready_message(plan.spec.suspend, &decision.status)
        }
    };
    decision.status.active_run = occupant.active_run().cloned();

    // Conditions, an Event when readiness changes, and the snapshots of runs that are over.
    let problems = ready.as_ref().err().map(Vec::as_slice).unwrap_or_default();
    if let Ok(ready) = &ready {
        decision.status.resolved_schedule = Some(ready.plan.schedule.resolved().to_owned());
    }
    let conditions = PlanConditions {
        problems,
        ready_message: &ready_message,
        preparing: preparing_snapshots(&occupant),
        unmatched_selectors: ready.as_ref().ok().map(|r| &r.plan.unmatched_selectors[..]),
        listing_recorded: decision.status.snapshots.as_ref() != plan_status_snapshots(plan),
    };
    let withheld = set_plan_conditions(&mut decision.status, conditions, generation, now);
    decision
        .events
        .extend(withheld.map(listing::withheld_event));
    maintenance::show_protection(
        plan,
        &settings.job.protection,
        &mut decision,
        generation,
        now,
    );
    let current_run = occupant.active_run().map(|run| run.job_name.as_str());
    (decision.delete_snapshots, decision.delete_claims) =
        snapshots::over(plan, observed, current_run);
    decision.status.observed_generation = generation;
    if ready_condition(&decision.status) != ready_before {
        decision.events.extend(not_ready_event(problems));
    }

    decision.requeue_after = requeue_after(&occupant, ready.is_ok(), &decision, now, settings);
    // A suspended plan is not expected to back up: no interval, no overdue alert.
    decision.schedule_interval = ready
        .as_ref()
        .ok()
        .filter(|_| !plan.spec.suspend)
        .and_then(|r| r.plan.schedule.interval_after(now));
    decision
}

/// Records the runs beside the plan's backups, prunes and checks: its copies, its destinations'
/// prunes, its drills.
fn observe_beside(
    plan: &BackupPlan,
    jobs: &runs::PlanJobs,
    observed: &ObservedPlan,
    decision: &mut PlanDecision,
    now: Timestamp,
    settings: &Settings,
) {
    copies::observe(plan, &jobs.copies, observed, decision, now, settings);
    copy_prunes::observe(&jobs.copy_prunes, observed, decision, now);
    drills::observe(plan, &jobs.drills, observed, decision, now, settings);
}

/// Whether a drill of the plan runs: it holds the plan as a prune does, and a backup, prune or
/// check due meanwhile catches up after it.
fn drilling(decision: &PlanDecision) -> bool {
    (decision.status.verify.as_ref()).is_some_and(|v| v.active_job.is_some())
}

/// How far the snapshots of the run that prepares them are, and the hook Job it waits for, for
/// its condition.
fn preparing_snapshots<'a>(occupant: &'a Occupant<'_>) -> Option<PreparingSnapshots<'a>> {
    match occupant {
        Occupant::PreparingSnapshots(preparing) => Some(PreparingSnapshots {
            job_name: &preparing.run.job_name,
            hooks: preparing.hooks.waiting_for(),
            ready: preparing.snapshots.iter().filter(|s| s.is_ready()).count(),
            taken: preparing.snapshots.len(),
        }),
        _ => None,
    }
}

/// The listing of the plan's snapshots in its status as fetched.
fn plan_status_snapshots(plan: &BackupPlan) -> Option<&PlanSnapshots> {
    plan.status.as_ref().and_then(|s| s.snapshots.as_ref())
}

/// [`start_or_advance`], then the copies due beside what occupies the plan after it, then the
/// destinations' prunes (after the copies: a copy started now holds its destination's prune off).
#[allow(clippy::too_many_arguments)]
fn start_runs<'a>(
    plan: &BackupPlan,
    observed: &ObservedPlan,
    ready: &ReadyPlan,
    occupant: Occupant<'a>,
    now: Timestamp,
    settings: &Settings,
    gate: &mut dyn Gate,
    decision: &mut PlanDecision,
) -> Occupant<'a> {
    let occupant = start_or_advance(
        plan, observed, ready, occupant, now, settings, gate, decision,
    );
    let locked = matches!(occupant, Occupant::Maintenance(_));
    let deadline = ready.plan.deadline;
    copies::start_due(
        plan, observed, locked, deadline, now, settings, gate, decision,
    );
    // The destinations' keep rules see the suspicion flag this reconcile decided.
    let flagged = suspect::with_decided_flag(plan, decision);
    let context = copy_prunes::PruneContext {
        schedule: &ready.plan.prune_schedule,
        deadline,
        remove_stale_locks: !runs::plan_pod_alive(&plan.name_any(), &observed.pods),
        settings: &settings.job,
    };
    let plan = flagged.as_ref().unwrap_or(plan);
    copy_prunes::start_due(plan, &context, now, gate, decision);
    // Last: a drill starts only when nothing else of the plan runs or is due.
    drills::start_due(plan, ready, &occupant, now, settings, gate, decision);
    occupant
}

/// For a ready plan: starts a due backup, or moves a prepared one on, or starts a due prune or
/// check, each when the gate admits it; returns what occupies the plan after.
#[allow(clippy::too_many_arguments)]
fn start_or_advance<'a>(
    plan: &BackupPlan,
    observed: &ObservedPlan,
    ready: &ReadyPlan,
    occupant: Occupant<'a>,
    now: Timestamp,
    settings: &Settings,
    gate: &mut dyn Gate,
    decision: &mut PlanDecision,
) -> Occupant<'a> {
    // The Jobs that start see the suspicion flag this reconcile decided.
    let flagged = suspect::with_decided_flag(plan, decision);
    let plan = flagged.as_ref().unwrap_or(plan);
    let remove_stale_locks = !runs::plan_pod_alive(
        &plan.metadata.name.clone().unwrap_or_default(),
        &observed.pods,
    );
    let idle = occupant.is_idle() && !drilling(decision);
    let request = triggers::due(plan, ready, idle, now, settings, decision);
    let occupant = match (occupant, request) {
        (Occupant::Idle, Some(request)) => {
            let footprint = admit::footprint(plan, ready, RunClass::Backup);
            let waiting = Waiting::backup(&request);
            if !admit::admit(plan, footprint, waiting, &mut decision.status, gate, now) {
                // It waits for a slot: nothing else of the plan starts before it.
                maintenance::show_next(plan, &ready.plan, &mut decision.status, now);
                return Occupant::Idle;
            }
            runs::start(
                plan,
                ready,
                request,
                remove_stale_locks,
                now,
                settings,
                decision,
            )
        }
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
    // A run taking VolumeSnapshots has no Job yet: it keeps the slot it was admitted to.
    if matches!(occupant, Occupant::PreparingSnapshots(_)) {
        let footprint = admit::footprint(plan, ready, RunClass::Backup);
        gate.hold(&admit::run_key(plan), &footprint, now);
    }
    // An idle plan prunes and checks its repository when they are due; a copy reading it
    // holds it off as a backup does.
    let copying = decision
        .status
        .copies
        .iter()
        .any(|c| c.active_job.is_some());
    if !occupant.is_idle() || !idle || copying {
        maintenance::show_next(plan, &ready.plan, &mut decision.status, now);
        return occupant;
    }
    // A prune or check refused by the gate stays due: its schedule is not moved on.
    let before = (decision.status.prune.clone(), decision.status.check.clone());
    match maintenance::start_due(
        plan,
        &ready.plan,
        &mut decision.status,
        now,
        remove_stale_locks,
        &settings.job,
    ) {
        Some(started) => {
            let footprint = admit::footprint(plan, ready, RunClass::Maintenance);
            let waiting = Waiting {
                kind: started.active.kind,
                trigger: started.active.trigger,
                scheduled_time: started.active.scheduled_time.as_ref().map(|t| t.0),
                manual_trigger: None,
            };
            if !admit::admit(plan, footprint, waiting, &mut decision.status, gate, now) {
                (decision.status.prune, decision.status.check) = before;
                return Occupant::Idle;
            }
            decision.password_copy = crate::job::password_copy(plan, &started.job);
            decision.create = Some(started.job);
            decision.events.push(started.event);
            Occupant::Maintenance(started.active)
        }
        None => {
            decision.status.queued = None;
            gate.withdraw(&admit::run_key(plan));
            Occupant::Idle
        }
    }
}

/// A lagging copy's gauge is set at each reconcile: a plan with one is looked at this often.
const COPY_LAG_REFRESH: Duration = Duration::from_secs(300);

/// When the plan's copies want it looked at again: a due copy that waits for a slot, or a lag
/// whose gauge grows.
fn copies_requeue(decision: &PlanDecision) -> Duration {
    if decision.copies_queued {
        QUEUED_RECHECK.min(COPY_LAG_REFRESH)
    } else if decision
        .status
        .copies
        .iter()
        .any(|c| c.behind_since.is_some())
    {
        COPY_LAG_REFRESH
    } else {
        MAX_REQUEUE
    }
}

fn ready_message(suspend: bool, status: &BackupPlanStatus) -> String {
    match (&status.next_schedule_time, suspend) {
        (_, true) => "suspended: no scheduled runs".into(),
        (Some(next), false) => format!("next run at {}", next.0),
        (None, false) => "ready".into(),
    }
}

/// The `Ready` condition's status and reason, to see whether it changed.
fn ready_condition(status: &BackupPlanStatus) -> Option<(ConditionStatus, Option<Reason>)> {
    find_condition(&status.conditions, types::READY).map(condition_state)
}

/// The Warning to publish when the plan is not ready: the `Ready=False` condition's reason and
/// message, from the same problems.
fn not_ready_event(problems: &[Problem]) -> Option<PlannedEvent> {
    not_ready(problems).map(|(reason, note)| PlannedEvent {
        type_: EventType::Warning,
        reason,
        note,
    })
}

fn requeue_after(
    occupant: &Occupant,
    ready: bool,
    decision: &PlanDecision,
    now: Timestamp,
    settings: &Settings,
) -> Duration {
    own_requeue(occupant, ready, &decision.status, now, settings)
        .min(copies_requeue(decision))
        .min(copy_prunes::next_wake(&decision.status, now))
        .min(drills::next_wake(decision, now))
}

fn own_requeue(
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
    } else if status.queued.is_some() {
        // A freed slot wakes the plan; this only covers a missed wake-up.
        QUEUED_RECHECK
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
