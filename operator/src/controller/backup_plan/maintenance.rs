//! Prune and check of a plan's repository, decided beside its backups: which of the plan's Jobs
//! are prunes and checks, what their results mean for the status, and when the next one starts.
//! Pure, like [`super::decide`], which calls it.
//!
//! A plan runs one Job at a time, whatever it does: a prune (which locks the repository
//! exclusively) never overlaps the plan's backups, and a backup due while a prune runs starts when
//! it ends, as a catch-up. A prune or check that could not start on time runs once as soon as the
//! plan is idle, however late: unlike a backup's, its time of day does not matter.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::decision::PlanDecision;
use crate::api::{ActiveRun, BackupPlan, BackupPlanStatus, MaintenanceRecord, MaintenanceStatus};
use crate::conditions::{find_condition, set_condition, types, ConditionStatus, Reason};
use crate::controller::effects::PlannedEvent;
use crate::controller::pod_of;
use crate::job::{
    maintenance_job, JobSettings, MaintenanceKind, MaintenanceRun, LABEL_COPY, LABEL_OPERATION,
    LABEL_PLAN_NAMESPACE,
};
use crate::plan::ResolvedPlan;
use crate::protection::Protection;
use crate::recorder::EventType;
use crate::schedule::{self, Schedule, ScheduleState};
use crate::status::{job_state, maintenance_record, record_repository, JobState};
use neverwiped_contract::text;

/// The maintenance kind of a plan's Job, from its `neverwiped.io/operation` label; `None` for a
/// backup, and for a destination's prune (of `spec.copies`), which is not the plan's.
pub fn maintenance_kind(job: &Job) -> Option<MaintenanceKind> {
    if job.labels().contains_key(LABEL_COPY) {
        return None;
    }
    let operation = job.labels().get(LABEL_OPERATION)?;
    MaintenanceKind::ALL
        .into_iter()
        .find(|kind| kind.label() == operation)
}

fn status_of(status: &mut BackupPlanStatus, kind: MaintenanceKind) -> &mut MaintenanceStatus {
    match kind {
        MaintenanceKind::Check => &mut status.check,
        MaintenanceKind::Prune => &mut status.prune,
    }
}

/// Records the finished prune and check Jobs of the plan on the status (each kind's `lastRun`,
/// and the repository's size they measured), with an Event each; deletes finished ones older than
/// the newest of their kind; returns the one that runs now. `jobs` are the plan's own.
pub fn observe(
    jobs: &[&Job],
    pods: &[Pod],
    decision: &mut PlanDecision,
    now: Timestamp,
) -> Option<ActiveRun> {
    let mut active = None;
    for kind in MaintenanceKind::ALL {
        let mut of_kind: Vec<&Job> = jobs
            .iter()
            .copied()
            .filter(|job| maintenance_kind(job) == Some(kind))
            .collect();
        of_kind.sort_by_key(|job| job.metadata.creation_timestamp.as_ref().map(|t| t.0));
        let mut finished: Vec<&Job> = Vec::new();
        for job in of_kind {
            let name = job.name_any();
            let status = &mut decision.status;
            let recorded = status_of(status, kind)
                .last_run
                .as_ref()
                .is_some_and(|r| r.job_name == name);
            if recorded {
                finished.push(job);
                continue;
            }
            // A blocked Job stays until a newer one of its kind finishes, for its pod's events.
            let end = match job_state(job, pod_of(job, pods), now) {
                JobState::Ended(end) | JobState::Blocked(end) => end,
                JobState::Running => {
                    let trigger = decision.trigger(&name, crate::job::run_trigger_of(job));
                    active = Some(ActiveRun {
                        job_name: name,
                        kind: kind.run_kind(),
                        trigger,
                        scheduled_time: crate::job::scheduled_time_of(job).map(Time),
                        start_time: job.metadata.creation_timestamp.clone(),
                    });
                    continue;
                }
            };
            let record = maintenance_record(job, &end);
            record_repository(status, &end, now);
            super::listing::record_snapshots(status, &end, now);
            decision.events.push(finished_event(kind, &record));
            decision.finished_maintenance.push((kind, record.clone()));
            status_of(status, kind).last_run = Some(record);
            finished.push(job);
        }
        // The newest finished Job of each kind stays, for its logs.
        finished.pop();
        for job in finished {
            delete_finished(job, decision);
        }
    }
    active
}

/// Deletes a finished prune or check (a copy destination's prune too): in the plan's namespace,
/// or in the operator's (a protected repository's prune, with its password copy).
pub(super) fn delete_finished(job: &Job, decision: &mut PlanDecision) {
    let name = job.name_any();
    if job.labels().contains_key(LABEL_PLAN_NAMESPACE) {
        let namespace = job.namespace().unwrap_or_default();
        decision.delete_remote.push((namespace, name));
    } else {
        decision.delete_job(name);
    }
}

fn finished_event(kind: MaintenanceKind, record: &MaintenanceRecord) -> PlannedEvent {
    let (type_, reason, note) = match (kind, record.result.is_success()) {
        (MaintenanceKind::Check, true) => (
            EventType::Normal,
            Reason::CheckSucceeded,
            format!(
                "{} found no problem ({} pack(s) read back)",
                record.job_name,
                record.packs_read.unwrap_or(0)
            ),
        ),
        (MaintenanceKind::Check, false) => {
            (EventType::Warning, Reason::CheckFailed, failed_note(record))
        }
        (MaintenanceKind::Prune, true) => (
            EventType::Normal,
            Reason::PruneSucceeded,
            format!(
                "{} freed {} byte(s)",
                record.job_name,
                record.bytes_freed.unwrap_or(0)
            ),
        ),
        (_, false) => (EventType::Warning, Reason::PruneFailed, failed_note(record)),
    };
    PlannedEvent {
        type_,
        reason,
        note,
    }
}

fn failed_note(record: &MaintenanceRecord) -> String {
    format!(
        "{} ({}): {}",
        record.job_name,
        record.reason,
        record.message.as_deref().unwrap_or("no message")
    )
}

/// A prune or check to start now.
#[derive(Debug)]
pub struct StartedMaintenance {
    pub job: Job,
    pub active: ActiveRun,
    pub event: PlannedEvent,
}

/// For an idle plan: starts the prune or check that is due (a prune first; a check due at the same
/// time waits for the next reconcile), and sets each kind's next scheduled time.
pub fn start_due(
    plan: &BackupPlan,
    resolved: &ResolvedPlan,
    status: &mut BackupPlanStatus,
    now: Timestamp,
    remove_stale_locks: bool,
    settings: &JobSettings,
) -> Option<StartedMaintenance> {
    let created = plan
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(now);
    let mut started = None;
    for kind in MaintenanceKind::ALL {
        let (schedule, suspended) = schedule_of(plan, resolved, kind);
        let kind_status = status_of(status, kind);
        if started.is_some() {
            // Not yet looked at: its due time, if any, stays pending for the next reconcile.
            kind_status.next_schedule_time = next_time(schedule, suspended, now);
            continue;
        }
        let state = ScheduleState {
            last_schedule_time: kind_status.last_schedule_time.as_ref().map(|t| t.0),
            created,
            suspended,
        };
        let decision = schedule::decide(schedule, &state, now, SignedDuration::MAX);
        kind_status.last_schedule_time = decision.last_schedule_time.map(Time);
        kind_status.next_schedule_time = decision.next_run.map(Time);
        if let Some(due) = decision.run {
            let run = MaintenanceRun {
                kind,
                trigger: due.trigger,
                scheduled_time: due.scheduled_time,
                deadline: resolved.deadline,
                remove_stale_locks,
            };
            let job = maintenance_job(plan, &run, settings);
            let job_name = job.name_any();
            let (reason, doing) = match kind {
                MaintenanceKind::Check => (Reason::CheckStarted, "check"),
                MaintenanceKind::Prune => (Reason::PruneStarted, "prune"),
            };
            started = Some(StartedMaintenance {
                event: PlannedEvent {
                    type_: EventType::Normal,
                    reason,
                    note: format!(
                        "created Job {job_name} to {doing} the repository ({:?})",
                        due.trigger
                    ),
                },
                active: ActiveRun {
                    job_name,
                    kind: kind.run_kind(),
                    trigger: due.trigger,
                    scheduled_time: Some(Time(due.scheduled_time)),
                    start_time: Some(Time(now)),
                },
                job,
            });
        }
    }
    started
}

/// For a busy plan: each kind's next scheduled time, without acting on a due one.
pub fn show_next(
    plan: &BackupPlan,
    resolved: &ResolvedPlan,
    status: &mut BackupPlanStatus,
    now: Timestamp,
) {
    for kind in MaintenanceKind::ALL {
        let (schedule, suspended) = schedule_of(plan, resolved, kind);
        status_of(status, kind).next_schedule_time = next_time(schedule, suspended, now);
    }
}

fn schedule_of<'a>(
    plan: &BackupPlan,
    resolved: &'a ResolvedPlan,
    kind: MaintenanceKind,
) -> (&'a Schedule, bool) {
    let maintenance = &plan.spec.maintenance;
    match kind {
        MaintenanceKind::Check => (&resolved.check_schedule, maintenance.check.suspend),
        MaintenanceKind::Prune => (&resolved.prune_schedule, maintenance.prune.suspend),
    }
}

fn next_time(schedule: &Schedule, suspended: bool, now: Timestamp) -> Option<Time> {
    (!suspended)
        .then(|| schedule.next_after(now))
        .flatten()
        .map(Time)
}

/// The earliest next prune or check, to wake up for.
pub fn next_wake(status: &BackupPlanStatus) -> Option<Timestamp> {
    [&status.prune, &status.check]
        .into_iter()
        .filter_map(|s| s.next_schedule_time.as_ref().map(|t| t.0))
        .min()
}

/// For a ready plan whose repository, or one of whose copy destinations, no maintenance
/// credentials cover: `Ready=True` with the reason `BackupLoginCanDeleteHistory` (the login it
/// holds for that repository forgets and prunes there), and one Warning Event when the plan comes
/// to that. A plan whose repositories are all protected keeps the reason `Ready`.
pub fn show_protection(
    plan: &BackupPlan,
    protection: &Protection,
    decision: &mut PlanDecision,
    generation: Option<i64>,
    now: Timestamp,
) {
    let Some(why) = unprotected(plan, protection) else {
        return;
    };
    let conditions = &mut decision.status.conditions;
    let Some(ready) = find_condition(conditions, types::READY) else {
        return;
    };
    if ConditionStatus::of(ready) != ConditionStatus::True {
        return;
    }
    let message = format!("{}; {why}", ready.message);
    let before = plan.status.as_ref().and_then(|status| {
        find_condition(&status.conditions, types::READY).map(|c| c.reason.clone())
    });
    let reason = Reason::BackupLoginCanDeleteHistory;
    set_condition(
        conditions,
        types::READY,
        ConditionStatus::True,
        reason,
        message,
        generation,
        now,
    );
    if before.as_deref() != Some(reason.as_str()) {
        decision.events.push(PlannedEvent {
            type_: EventType::Warning,
            reason,
            note: why,
        });
    }
}

/// What no maintenance credentials cover, said for the condition: the plan's repository first,
/// then each copy destination's; `None` when all are covered.
fn unprotected(plan: &BackupPlan, protection: &Protection) -> Option<String> {
    let namespace = plan.namespace().unwrap_or_default();
    let own = std::iter::once((None, &plan.spec.repository.url));
    let copies = (plan.spec.copies.iter()).map(|c| (Some(&c.name), &c.repository.url));
    let said: Vec<String> = own
        .chain(copies)
        .filter_map(|(copy, url)| {
            let applies = protection.for_plan(&namespace, url);
            if applies.credentials.is_some() {
                return None;
            }
            let window = match &applies.window {
                Some(window) => format!("snapshots younger than {} stay", window.text),
                None => "no protection window is set".to_owned(),
            };
            let (repository, login) = match copy {
                None => ("repository".to_owned(), "this plan's gate login"),
                Some(name) => (
                    format!("copy destination {name}'s repository"),
                    "the destination's gate login",
                ),
            };
            Some(format!(
                "no maintenance credentials cover {repository} {}: whoever holds {login} can \
                 forget and prune its history ({window})",
                text::escaped(url)
            ))
        })
        .collect();
    (!said.is_empty()).then(|| said.join("; "))
}
