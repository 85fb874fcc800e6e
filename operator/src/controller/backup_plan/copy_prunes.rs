//! Retention at the destinations of `spec.copies`: each destination with `retention` is pruned
//! (forget by its keep rules, then prune) by a Job of its own, on the plan's prune schedule
//! (`spec.maintenance.prune`, suspended with it). Which of those Jobs finished (recorded once on
//! the destination's `status.copies[].prune`), which run, and which destination is due one.
//!
//! A destination's prune locks the destination exclusively, so it never runs beside that
//! destination's copy: a due prune waits for a running copy and stays due, and a copy waits for
//! a running prune ([`super::copies::start_due`]). It neither reads nor locks the plan's
//! repository, so it runs beside the plan's backups, prunes and checks.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::copies::{destination_footprint, entry};
use super::decision::PlanDecision;
use super::fetch::ObservedPlan;
use super::maintenance::delete_finished;
use crate::api::{BackupPlan, BackupPlanStatus, CopyDestination, MaintenanceRecord, RunTrigger};
use crate::conditions::Reason;
use crate::controller::effects::PlannedEvent;
use crate::controller::pod_of;
use crate::controller::queue::{Admission, Demand, Gate, Owner, RunKey};
use crate::job::{
    copy_prune_destination_of, copy_prune_job, CopyPruneJob, CopyPruneRun, JobSettings,
};
use crate::recorder::EventType;
use crate::schedule::{self, Schedule, ScheduleState};
use crate::status::{job_state, maintenance_record, JobState};

/// The place of a destination's prune in the concurrency limits' ledger.
pub fn copy_prune_key(plan: &BackupPlan, destination: &str) -> RunKey {
    RunKey {
        namespace: plan.namespace().unwrap_or_default(),
        owner: Owner::CopyPrune {
            plan: plan.name_any(),
            copy: destination.to_owned(),
        },
    }
}

/// Records the destinations' prune Jobs (`jobs`) that finished, with an Event each, notes those
/// that run, and deletes finished ones but the newest of each destination (in the operator's
/// namespace with their password copies).
pub fn observe(
    jobs: &[&Job],
    observed: &ObservedPlan,
    decision: &mut PlanDecision,
    now: Timestamp,
) {
    for copy in decision.status.copies.iter_mut() {
        copy.active_prune_job = None;
    }
    let mut jobs: Vec<&Job> = jobs.to_vec();
    jobs.sort_by_key(|job| job.metadata.creation_timestamp.as_ref().map(|t| t.0));
    let mut finished: Vec<(String, &Job)> = Vec::new();
    for job in jobs {
        let Some(destination) = copy_prune_destination_of(job) else {
            continue;
        };
        let name = job.name_any();
        let Some(entry) = (decision.status.copies.iter_mut()).find(|c| c.name == destination)
        else {
            // A destination no longer in the spec: its finished prunes go like old ones.
            finished.push((destination.to_owned(), job));
            continue;
        };
        let recorded = (entry.prune.last_run.as_ref()).is_some_and(|r| r.job_name == name);
        if !recorded {
            match job_state(job, pod_of(job, &observed.pods), now) {
                JobState::Running => {
                    entry.active_prune_job = Some(name);
                    continue;
                }
                JobState::Ended(end) | JobState::Blocked(end) => {
                    let record = maintenance_record(job, &end);
                    entry.prune.last_run = Some(record.clone());
                    decision.events.push(finished_event(destination, &record));
                    (decision.finished_copy_prunes).push((destination.to_owned(), record));
                }
            }
        }
        finished.push((destination.to_owned(), job));
    }
    // The newest finished prune of each destination stays, for its logs.
    finished.reverse();
    for (index, (destination, job)) in finished.iter().enumerate() {
        if finished[..index].iter().any(|(d, _)| d == destination) {
            delete_finished(job, decision);
        }
    }
}

fn finished_event(destination: &str, record: &MaintenanceRecord) -> PlannedEvent {
    match record.result.is_success() {
        true => PlannedEvent {
            type_: EventType::Normal,
            reason: Reason::PruneSucceeded,
            note: format!(
                "{} pruned copy destination {destination} and freed {} byte(s)",
                record.job_name,
                record.bytes_freed.unwrap_or(0)
            ),
        },
        false => PlannedEvent {
            type_: EventType::Warning,
            reason: Reason::PruneFailed,
            note: format!(
                "{} could not prune copy destination {destination} ({}): {}",
                record.job_name,
                record.reason,
                record.message.as_deref().unwrap_or("no message")
            ),
        },
    }
}

/// How long until the earliest destination's prune is due. A destination's prune does not wait
/// for the plan to be idle, so it wakes the plan even while a backup, prune or check runs.
pub fn next_wake(status: &BackupPlanStatus, now: Timestamp) -> Duration {
    (status.copies.iter())
        .filter_map(|c| c.prune.next_schedule_time.as_ref().map(|t| t.0))
        .min()
        .map(|next| next.duration_since(now).max(SignedDuration::from_secs(1)))
        .and_then(|wait| Duration::try_from(wait).ok())
        .unwrap_or(Duration::MAX)
}

/// What a destination's prune is decided with, besides the plan.
pub struct PruneContext<'a> {
    /// The plan's prune schedule, which the destinations follow.
    pub schedule: &'a Schedule,
    pub deadline: SignedDuration,
    /// As for the plan's prune: no pod of the plan is alive, so its lock host's locks are stale.
    pub remove_stale_locks: bool,
    pub settings: &'a JobSettings,
}

/// For each destination with `retention`: its next prune time, and its prune Job when one is due,
/// its copy does not run and the gate admits it. `plan` carries the suspicion flag this reconcile
/// decided (its keep rules are paused while one is set).
pub fn start_due(
    plan: &BackupPlan,
    context: &PruneContext,
    now: Timestamp,
    gate: &mut dyn Gate,
    decision: &mut PlanDecision,
) {
    let created = (plan.metadata.creation_timestamp.as_ref()).map_or(now, |t| t.0);
    let suspended = plan.spec.maintenance.prune.suspend;
    for destination in &plan.spec.copies {
        let key = copy_prune_key(plan, &destination.name);
        let entry = entry(&mut decision.status.copies, &destination.name);
        if destination.retention.is_none() {
            // Nothing to apply: the destination keeps every snapshot.
            entry.prune.next_schedule_time = None;
            gate.withdraw(&key);
            continue;
        }
        let state = ScheduleState {
            last_schedule_time: entry.prune.last_schedule_time.as_ref().map(|t| t.0),
            created,
            suspended,
        };
        let decided = schedule::decide(context.schedule, &state, now, SignedDuration::MAX);
        entry.prune.next_schedule_time = decided.next_run.map(Time);
        let Some(due) = decided.run else {
            entry.prune.last_schedule_time = decided.last_schedule_time.map(Time);
            gate.withdraw(&key);
            continue;
        };
        // A running prune or copy of the destination holds it: the due time waits for them.
        if entry.active_prune_job.is_some() || entry.active_job.is_some() {
            gate.withdraw(&key);
            continue;
        }
        let demand = Demand {
            key,
            footprint: destination_footprint(destination),
            since: due.scheduled_time,
        };
        if let Admission::Queued { .. } = gate.admit(&demand, now) {
            decision.copies_queued = true;
            continue;
        }
        entry.prune.last_schedule_time = decided.last_schedule_time.map(Time);
        let run = CopyPruneRun {
            trigger: due.trigger,
            scheduled_time: due.scheduled_time,
            deadline: context.deadline,
            remove_stale_locks: context.remove_stale_locks,
        };
        let pruned = copy_prune_job(plan, destination, &run, context.settings);
        entry.active_prune_job = Some(pruned.job.name_any());
        decision
            .events
            .push(started_event(plan, destination, &pruned, run.trigger));
        decision.create_copy_prunes.push(pruned);
    }
}

fn started_event(
    plan: &BackupPlan,
    destination: &CopyDestination,
    pruned: &CopyPruneJob,
    trigger: RunTrigger,
) -> PlannedEvent {
    let keeps = if crate::suspicion::retention_paused(plan) {
        "keeping every snapshot while a suspicious change waits for an admin"
    } else {
        "by its retention"
    };
    PlannedEvent {
        type_: EventType::Normal,
        reason: Reason::PruneStarted,
        note: format!(
            "created Job {} to prune copy destination {} {keeps} ({trigger:?})",
            pruned.job.name_any(),
            destination.name
        ),
    }
}
