//! When a backup runs: a run that waits for a slot under the concurrency limits first (it keeps
//! its place), then a manual trigger (`spec.manualTrigger`), then the schedule, with missed
//! scheduled times caught up within the catch-up window. This is the file that decides.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::decision::PlanDecision;
use super::resolve::ReadyPlan;
use crate::api::{BackupPlan, BackupPlanStatus, RunKind, RunTrigger};
use crate::conditions::Reason;
use crate::controller::effects::PlannedEvent;
use crate::controller::Settings;
use crate::plan::pending_manual_trigger;
use crate::recorder::EventType;
use crate::schedule::{self, ScheduleState};

/// A backup run that is due now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRequest {
    pub trigger: RunTrigger,
    /// The scheduled time it runs for; `None` for a manual run.
    pub scheduled_time: Option<Timestamp>,
    /// The `spec.manualTrigger` value it acts on.
    pub manual_trigger: Option<String>,
}

/// Marks a run's trigger as consumed on the status (its scheduled time, its manual trigger), so it
/// does not start again: also for a run whose status apply failed after its create.
pub fn consume(
    status: &mut BackupPlanStatus,
    scheduled_time: Option<Timestamp>,
    manual_trigger: Option<&str>,
) {
    if let Some(time) = scheduled_time {
        let later = status
            .last_schedule_time
            .as_ref()
            .is_none_or(|last| last.0 < time);
        if later {
            status.last_schedule_time = Some(Time(time));
        }
    }
    if let Some(trigger) = manual_trigger {
        status.last_manual_trigger = Some(trigger.to_owned());
    }
}

/// The backup due now for a plan that is `idle` (a busy plan's due run waits, and catches up
/// after); sets the next scheduled time and counts missed runs, with an Event.
pub fn due(
    plan: &BackupPlan,
    ready: &ReadyPlan,
    idle: bool,
    now: Timestamp,
    settings: &Settings,
    decision: &mut PlanDecision,
) -> Option<RunRequest> {
    let spec = &plan.spec;
    let schedule = &ready.plan.schedule;
    let status = &mut decision.status;
    let upcoming = || (!spec.suspend).then(|| schedule.next_after(now)).flatten();
    // Suspending a plan drops the scheduled run that waits for a slot; a manual one still runs.
    let waits = status.queued.as_ref().filter(|q| q.kind == RunKind::Backup);
    if spec.suspend && waits.is_some_and(|q| q.trigger != RunTrigger::Manual) {
        status.queued = None;
    }
    let waiting = status
        .queued
        .as_ref()
        .filter(|q| q.kind == RunKind::Backup)
        .map(|q| RunRequest {
            trigger: q.trigger,
            scheduled_time: q.scheduled_time.as_ref().map(|t| t.0),
            manual_trigger: q.manual_trigger.clone(),
        });
    let (request, next_run) = if !idle {
        (None, upcoming())
    } else if let Some(waiting) = waiting.clone().filter(|w| w.trigger == RunTrigger::Manual) {
        (Some(waiting), upcoming())
    } else if let (Some(waiting), None) = (&waiting, pending_manual_trigger(spec, Some(status))) {
        // A scheduled run waits: a newer scheduled time passing meanwhile takes its place in the
        // queue, and the one it replaces is counted as missed.
        let (request, next_run) = scheduled(plan, ready, now, settings, decision);
        match request {
            Some(newer) => {
                decision.newly_missed += 1;
                (Some(newer), next_run)
            }
            None => (Some(waiting.clone()), next_run),
        }
    } else if let Some(trigger) = pending_manual_trigger(spec, Some(status)) {
        // A manual run goes first; a scheduled time due meanwhile catches up after it.
        status.last_manual_trigger = Some(trigger.to_owned());
        let request = RunRequest {
            trigger: RunTrigger::Manual,
            scheduled_time: None,
            manual_trigger: Some(trigger.to_owned()),
        };
        (Some(request), upcoming())
    } else {
        scheduled(plan, ready, now, settings, decision)
    };
    let newly_missed = decision.newly_missed;
    if newly_missed > 0 {
        decision.status.missed_runs += i64::from(newly_missed);
        decision.events.push(PlannedEvent {
            type_: EventType::Warning,
            reason: Reason::MissedRuns,
            note: format!(
                "{newly_missed} scheduled run(s) did not start on time (the operator was down or a run was still going)"
            ),
        });
    }
    decision.status.next_schedule_time = next_run.map(Time);
    request
}

/// The scheduled run due now, if any, and the next scheduled time; moves `lastScheduleTime` on
/// and counts the times missed.
fn scheduled(
    plan: &BackupPlan,
    ready: &ReadyPlan,
    now: Timestamp,
    settings: &Settings,
    decision: &mut PlanDecision,
) -> (Option<RunRequest>, Option<Timestamp>) {
    let status = &mut decision.status;
    let state = ScheduleState {
        last_schedule_time: status.last_schedule_time.as_ref().map(|t| t.0),
        created: plan
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(now),
        suspended: plan.spec.suspend,
    };
    let schedule = &ready.plan.schedule;
    let decided = schedule::decide(schedule, &state, now, settings.catch_up_window);
    decision.newly_missed += decided.newly_missed;
    status.last_schedule_time = decided.last_schedule_time.map(Time);
    let request = decided.run.map(|run| RunRequest {
        trigger: run.trigger,
        scheduled_time: Some(run.scheduled_time),
        manual_trigger: None,
    });
    (request, decided.next_run)
}
