//! The plan's copies to the destinations of `spec.copies`: which copy Jobs finished (recorded on
//! their destination's `status.copies[]` entry once), which run, and which destination is due a
//! new one. A copy runs beside the plan's backups (both only read the plan's repository) but
//! never beside its prune or check, which lock it.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::decision::PlanDecision;
use super::fetch::ObservedPlan;
use crate::api::{BackupPlan, CopyDestination, CopyStatus, PlanSnapshots};
use crate::conditions::Reason;
use crate::controller::effects::PlannedEvent;
use crate::controller::queue::{Admission, Demand, Footprint, Gate, Owner, RunClass, RunKey};
use crate::controller::{pod_of, Settings};
use crate::job::{copy_destination_of, copy_job, copy_job_name, CopyRun};
use crate::recorder::EventType;
use crate::schedule::Schedule;
use crate::status::{job_state, record_copy_run, set_copy_lag, JobState};

/// The place of a plan's copy to `destination` in the concurrency limits' ledger.
pub fn copy_key(plan: &BackupPlan, destination: &str) -> RunKey {
    RunKey {
        namespace: plan.namespace().unwrap_or_default(),
        owner: Owner::Copy {
            plan: plan.name_any(),
            copy: destination.to_owned(),
        },
    }
}

/// The entry of `name` in `status.copies`, added when missing.
pub(super) fn entry<'a>(copies: &'a mut Vec<CopyStatus>, name: &str) -> &'a mut CopyStatus {
    let index = match copies.iter().position(|c| c.name == name) {
        Some(index) => index,
        None => {
            copies.push(CopyStatus {
                name: name.to_owned(),
                ..CopyStatus::default()
            });
            copies.len() - 1
        }
    };
    &mut copies[index]
}

/// Records the copy Jobs (`jobs`, oldest first) that finished, fails those whose pod cannot
/// start, keeps the newest finished ones of each destination, and notes those that run. Entries
/// of destinations no longer in the spec go.
pub fn observe(
    plan: &BackupPlan,
    jobs: &[&Job],
    observed: &ObservedPlan,
    decision: &mut PlanDecision,
    now: Timestamp,
    settings: &Settings,
) {
    let copies = &mut decision.status.copies;
    copies.retain(|c| plan.spec.copies.iter().any(|d| d.name == c.name));
    for copy in &plan.spec.copies {
        entry(copies, &copy.name).active_job = None;
    }
    let mut finished: Vec<(String, String)> = Vec::new();
    for job in jobs {
        let Some(destination) = copy_destination_of(job) else {
            continue;
        };
        let job_name = job.name_any();
        if !plan.spec.copies.iter().any(|d| d.name == destination) {
            finished.push((destination.to_owned(), job_name));
            continue;
        }
        let recorded = (decision.status.copies.iter())
            .any(|c| c.last_run.as_ref().is_some_and(|r| r.job_name == job_name));
        if recorded {
            finished.push((destination.to_owned(), job_name));
            continue;
        }
        let end = match job_state(job, pod_of(job, &observed.pods), now) {
            JobState::Running => {
                entry(&mut decision.status.copies, destination).active_job = Some(job_name);
                continue;
            }
            JobState::Blocked(end) => {
                decision.delete_job(job_name.clone());
                end
            }
            JobState::Ended(end) => {
                finished.push((destination.to_owned(), job_name.clone()));
                end
            }
        };
        let copies = &mut decision.status.copies;
        record_copy_run(entry(copies, destination), &job_name, &end, now);
        decision
            .events
            .push(finished_event(destination, &job_name, &end));
        decision
            .finished_copies
            .push((destination.to_owned(), end.outcome));
    }
    // The newest finished Jobs of each destination stay, for their logs.
    finished.reverse();
    for (index, (destination, name)) in finished.iter().enumerate() {
        let newer = finished[..index]
            .iter()
            .filter(|(d, _)| d == destination)
            .count();
        if newer >= settings.finished_jobs_to_keep {
            decision.delete_job(name.clone());
        }
    }
}

fn finished_event(destination: &str, job_name: &str, end: &crate::status::JobEnd) -> PlannedEvent {
    match end.outcome.is_success() {
        true => PlannedEvent {
            type_: EventType::Normal,
            reason: Reason::CopySucceeded,
            note: format!("{job_name} copied the plan's snapshots to {destination}"),
        },
        false => PlannedEvent {
            type_: EventType::Warning,
            reason: Reason::CopyFailed,
            note: format!(
                "{job_name} could not copy to {destination} ({}): {}",
                end.reason.as_str(),
                end.message.as_deref().unwrap_or("no message")
            ),
        },
    }
}

/// Sets each destination's lag, and starts the copy Jobs that are due and admitted. `locked`:
/// the plan's prune or check runs, and a copy waits for it.
#[allow(clippy::too_many_arguments)]
pub fn start_due(
    plan: &BackupPlan,
    observed: &ObservedPlan,
    locked: bool,
    deadline: SignedDuration,
    now: Timestamp,
    settings: &Settings,
    gate: &mut dyn Gate,
    decision: &mut PlanDecision,
) {
    let listed = decision.status.snapshots.clone();
    for destination in &plan.spec.copies {
        let copies = &mut decision.status.copies;
        let entry = entry(copies, &destination.name);
        let lag = set_copy_lag(entry, listed.as_ref());
        let key = copy_key(plan, &destination.name);
        // The destination's prune locks it: the copy waits for it.
        if entry.active_job.is_some() || entry.active_prune_job.is_some() || locked {
            gate.withdraw(&key);
            continue;
        }
        if lag.behind_snapshots == 0 {
            // A scheduled time with nothing to copy is acted on: the next backup waits for
            // the next one.
            if let Some(schedule) = &destination.schedule {
                let last = copy_schedule(plan, destination, schedule)
                    .ok()
                    .and_then(|s| s.last_at_or_before(now));
                entry.last_schedule_time = last.map(Time).or(entry.last_schedule_time.take());
            }
            gate.withdraw(&key);
            continue;
        }
        let Some(suffix) = due(plan, destination, entry, listed.as_ref(), observed, now) else {
            gate.withdraw(&key);
            continue;
        };
        let demand = Demand {
            key,
            footprint: destination_footprint(destination),
            // The longest behind goes first.
            since: lag.behind_since.unwrap_or(now),
        };
        if let Admission::Queued { .. } = gate.admit(&demand, now) {
            decision.copies_queued = true;
            continue;
        }
        if let Some(schedule) = &destination.schedule {
            entry.last_schedule_time = copy_schedule(plan, destination, schedule)
                .ok()
                .and_then(|s| s.last_at_or_before(now))
                .map(Time);
        }
        let run = CopyRun { suffix, deadline };
        let job = copy_job(plan, destination, &run, &settings.job);
        let job_name = job.name_any();
        entry.active_job = Some(job_name.clone());
        decision.events.push(PlannedEvent {
            type_: EventType::Normal,
            reason: Reason::CopyStarted,
            note: format!(
                "created Job {job_name} to copy {} snapshots to {}",
                lag.behind_snapshots, destination.name
            ),
        });
        decision.create_copies.push(job);
    }
}

/// The suffix of the copy Job due for `destination` now, or `None`. Without a schedule, one copy
/// per newest snapshot of the plan (a failed one is retried after the next backup); with one,
/// one per scheduled time.
fn due(
    plan: &BackupPlan,
    destination: &CopyDestination,
    entry: &mut CopyStatus,
    listed: Option<&PlanSnapshots>,
    observed: &ObservedPlan,
    now: Timestamp,
) -> Option<String> {
    let suffix = match &destination.schedule {
        None => listed?.newest.first()?.id.clone(),
        Some(expression) => {
            let schedule = match copy_schedule(plan, destination, expression) {
                Ok(schedule) => schedule,
                Err(error) => {
                    entry.last_error = Some(format!("schedule {expression:?}: {error}"));
                    return None;
                }
            };
            let last = schedule.last_at_or_before(now)?;
            let created = plan.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let acted_on = entry.last_schedule_time.as_ref().map(|t| t.0);
            if acted_on.is_some_and(|t| t >= last) || created.is_some_and(|c| c > last) {
                return None;
            }
            (last.as_second() / 60).to_string()
        }
    };
    let name = copy_job_name(plan, &destination.name, &suffix);
    let tried = entry.last_run.as_ref().is_some_and(|r| r.job_name == name)
        || observed.jobs.iter().any(|j| j.name_any() == name);
    (!tried).then_some(suffix)
}

/// A destination's schedule, read in the plan's time zone (`H` from the plan and destination).
fn copy_schedule(
    plan: &BackupPlan,
    destination: &CopyDestination,
    expression: &str,
) -> Result<Schedule, crate::schedule::ScheduleError> {
    let seed = format!(
        "{}/{}/copies/{}",
        plan.namespace().unwrap_or_default(),
        plan.name_any(),
        destination.name
    );
    Schedule::parse_hashed(expression, &plan.spec.time_zone, &seed)
}

/// What a run against `destination` (its copy, its prune) takes from the limits: maintenance, on
/// no node, against the destination's host.
pub fn destination_footprint(destination: &CopyDestination) -> Footprint {
    Footprint {
        class: RunClass::Maintenance,
        node: None,
        host: destination.repository.location().ok().map(|l| l.host()),
    }
}
