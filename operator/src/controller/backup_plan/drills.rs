//! The plan's restore drills (`spec.verify`, `neverwiped.io/verify-now`): which drill Jobs
//! finished (recorded once in `status.verify`), which runs, and whether one starts now. A drill
//! runs while the plan is otherwise idle: a running drill holds the plan's backups, prunes and
//! checks off ([`super::decide`]), and a drill waits for them ([`super::drill_due::put_off`]).
//! It goes through the queue behind every backup and maintenance run.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::decision::PlanDecision;
use super::drill_due::{self, DueDrill};
use super::fetch::ObservedPlan;
use super::occupant::Occupant;
use super::resolve::ReadyPlan;
use crate::api::{BackupPlan, DrillOutcome, DrillRecord, RunTrigger, VerifySpec, VerifyStatus};
use crate::conditions::Reason;
use crate::controller::effects::PlannedEvent;
use crate::controller::queue::{Admission, Demand, Footprint, Gate, Owner, RunClass, RunKey};
use crate::controller::{pod_of, Settings};
use crate::job::{drill_job, drill_job_name, drill_run_of, DrillRun};
use crate::recorder::EventType;
use crate::status::{drill_record, job_state, record_drill, JobState};

/// A drill put off because its Job's name (its minute) is taken looks again this soon.
const NAME_TAKEN_RECHECK: Duration = Duration::from_secs(60);
/// While a drill runs, its Job's changes wake the reconciler; this only covers a missed event.
const ACTIVE_RECHECK: Duration = Duration::from_secs(300);

/// The place of a plan's drill in the concurrency limits' ledger.
pub fn drill_key(plan: &BackupPlan) -> RunKey {
    RunKey {
        namespace: plan.namespace().unwrap_or_default(),
        owner: Owner::Drill(plan.name_any()),
    }
}

/// The plan's drill settings: `spec.verify`, or the defaults for a request without one.
pub fn verify_spec(plan: &BackupPlan) -> VerifySpec {
    plan.spec.verify.clone().unwrap_or_default()
}

/// `status.verify`, made when the plan drills (or is asked to); `None` for a plan that never
/// did and is not asked to.
fn verify_status<'a>(
    plan: &BackupPlan,
    decision: &'a mut PlanDecision,
    jobs: bool,
) -> Option<&'a mut VerifyStatus> {
    let status = &mut decision.status;
    let wanted = plan.spec.verify.is_some()
        || jobs
        || drill_due::pending_request(plan, status.verify.as_ref()).is_some();
    if wanted {
        Some(status.verify.get_or_insert_with(VerifyStatus::default))
    } else {
        status.verify.as_mut()
    }
}

/// Records the drill Jobs (`jobs`) that finished, with an Event each, fails those whose pod
/// cannot start, notes the one that runs, and keeps the newest finished ones. What a Job was
/// started for (its scheduled time, request and round) counts as acted on even when the status
/// that said so was never written.
pub fn observe(
    plan: &BackupPlan,
    jobs: &[&Job],
    observed: &ObservedPlan,
    decision: &mut PlanDecision,
    now: Timestamp,
    settings: &Settings,
) {
    let verify = verify_spec(plan);
    let mut jobs: Vec<&Job> = jobs.to_vec();
    jobs.sort_by_key(|job| job.metadata.creation_timestamp.as_ref().map(|t| t.0));
    let Some(status) = verify_status(plan, decision, !jobs.is_empty()) else {
        return;
    };
    status.active_job = None;
    let mut finished: Vec<String> = Vec::new();
    let mut ended: Vec<(DrillRecord, bool)> = Vec::new();
    for job in jobs {
        let name = job.name_any();
        consume(status, job);
        if status.history.iter().any(|r| r.job_name == name) {
            finished.push(name);
            continue;
        }
        let (end, blocked) = match job_state(job, pod_of(job, &observed.pods), now) {
            JobState::Running => {
                status.active_job = Some(name);
                continue;
            }
            JobState::Blocked(end) => (end, true),
            JobState::Ended(end) => {
                finished.push(name);
                (end, false)
            }
        };
        let record = drill_record(job, &end, &verify);
        record_drill(status, record.clone(), now);
        ended.push((record, blocked));
    }
    for (record, blocked) in ended {
        if blocked {
            decision.delete_job(record.job_name.clone());
        }
        decision.events.push(finished_event(&record));
        decision.finished_drills.push(record);
    }
    // The newest finished drills stay, for their logs.
    finished.reverse();
    for name in finished.into_iter().skip(settings.finished_jobs_to_keep) {
        decision.delete_job(name);
    }
}

/// Marks what `job` was started for as acted on.
fn consume(status: &mut VerifyStatus, job: &Job) {
    let (scheduled, request, round) = drill_run_of(job);
    if let Some(time) = scheduled {
        if status
            .last_schedule_time
            .as_ref()
            .is_none_or(|t| t.0 < time)
        {
            status.last_schedule_time = Some(Time(time));
        }
    }
    if let Some(request) = request {
        status.last_request = Some(request);
    }
    if let Some(round) = round.and_then(|r| i64::try_from(r).ok()) {
        status.drills = status.drills.max(round.saturating_add(1));
    }
}

fn finished_event(record: &DrillRecord) -> PlannedEvent {
    let snapshot = record.snapshot_id.as_deref().unwrap_or("?");
    let took = record
        .recovery_seconds
        .map(|s| format!(" in {s:.0} s"))
        .unwrap_or_default();
    match record.result {
        DrillOutcome::Succeeded => PlannedEvent {
            type_: EventType::Normal,
            reason: Reason::DrillSucceeded,
            note: format!("{} restored snapshot {snapshot}{took}", record.job_name),
        },
        DrillOutcome::SucceededOverObjective => PlannedEvent {
            type_: EventType::Warning,
            reason: Reason::OverObjective,
            note: format!(
                "{} restored snapshot {snapshot}: {}",
                record.job_name,
                record.message.as_deref().unwrap_or("over its objective")
            ),
        },
        DrillOutcome::Failed => PlannedEvent {
            type_: EventType::Warning,
            reason: Reason::parse(&record.reason).unwrap_or(Reason::DrillFailed),
            note: format!(
                "{} could not prove snapshot {snapshot} ({}): {}",
                record.job_name,
                record.reason,
                record.message.as_deref().unwrap_or("no message")
            ),
        },
    }
}

/// Sets the next drill time, and starts the drill that is due when nothing puts it off and the
/// gate admits it; `status.verify.waiting` says why a due drill waits.
pub fn start_due(
    plan: &BackupPlan,
    ready: &ReadyPlan,
    occupant: &Occupant,
    now: Timestamp,
    settings: &Settings,
    gate: &mut dyn Gate,
    decision: &mut PlanDecision,
) {
    let key = drill_key(plan);
    let verify = verify_spec(plan);
    let Some(due) = due(plan, now, decision) else {
        gate.withdraw(&key);
        return;
    };
    let name = drill_job_name(plan, due.scheduled_time.unwrap_or(now));
    let waiting = drill_due::put_off(plan, ready, occupant, &decision.status, now).or_else(|| {
        taken(decision, &name).then(|| {
            decision.drill_recheck = Some(NAME_TAKEN_RECHECK);
            format!("Job {name} exists; the drill starts in the next minute")
        })
    });
    if let Some(waiting) = waiting {
        gate.withdraw(&key);
        set_waiting(decision, Some(waiting));
        return;
    }
    let demand = Demand {
        key,
        footprint: Footprint {
            class: RunClass::Drill,
            node: None,
            host: plan.spec.repository.location().ok().map(|l| l.host()),
        },
        since: due.scheduled_time.unwrap_or(now),
    };
    if let Admission::Queued {
        position,
        waiting,
        blocked_by,
    } = gate.admit(&demand, now)
    {
        decision.drill_recheck = Some(crate::controller::queue::QUEUED_RECHECK);
        let message = format!("waiting for a slot ({position} of {waiting}): {blocked_by}");
        set_waiting(decision, Some(message));
        return;
    }
    start(
        plan,
        &verify,
        due,
        ready.plan.deadline,
        now,
        settings,
        decision,
    );
}

/// The drill due now (a request first, then the schedule), with the next scheduled time set.
fn due(plan: &BackupPlan, now: Timestamp, decision: &mut PlanDecision) -> Option<DueDrill> {
    let request = drill_due::pending_request(plan, decision.status.verify.as_ref());
    let request = request.map(str::to_owned);
    let status = decision.status.verify.as_mut()?;
    status.next_schedule_time = None;
    let scheduled = match &plan.spec.verify {
        Some(spec) => match drill_due::drill_schedule(plan, spec) {
            Ok(schedule) => Some(drill_due::scheduled(plan, &schedule, spec, status, now)),
            Err(error) => {
                status.waiting = Some(error);
                None
            }
        },
        None => None,
    };
    status.next_schedule_time = scheduled.and_then(|s| s.next_run).map(Time);
    if status.active_job.is_some() {
        // One drill at a time: what is due waits for the running one.
        status.waiting = None;
        return None;
    }
    if let Some(request) = request {
        return Some(DueDrill {
            trigger: RunTrigger::Manual,
            scheduled_time: None,
            request: Some(request),
        });
    }
    let Some(decided) = scheduled else {
        if plan.spec.verify.is_none() {
            status.waiting = None;
        }
        return None;
    };
    let Some(run) = decided.run else {
        status.last_schedule_time = decided.last_schedule_time.map(Time);
        status.waiting = None;
        return None;
    };
    Some(DueDrill {
        trigger: run.trigger,
        scheduled_time: Some(run.scheduled_time),
        request: None,
    })
}

/// Whether a finished drill had that name (one in the same minute); a running one holds the
/// next anyway.
fn taken(decision: &PlanDecision, name: &str) -> bool {
    let verify = decision.status.verify.as_ref();
    verify.is_some_and(|v| v.history.iter().any(|r| r.job_name == name))
}

fn set_waiting(decision: &mut PlanDecision, waiting: Option<String>) {
    if let Some(status) = decision.status.verify.as_mut() {
        status.waiting = waiting;
    }
}

/// Creates the drill's Job and marks its time or request as acted on.
fn start(
    plan: &BackupPlan,
    verify: &VerifySpec,
    due: DueDrill,
    deadline: SignedDuration,
    now: Timestamp,
    settings: &Settings,
    decision: &mut PlanDecision,
) {
    let scratch_bytes = drill_due::scratch_bytes(plan, verify, &decision.status);
    let Some(status) = decision.status.verify.as_mut() else {
        return;
    };
    let round = u64::try_from(status.drills.max(0)).unwrap_or(0);
    let run = DrillRun {
        trigger: due.trigger,
        scheduled_time: due.scheduled_time,
        request: due.request.clone(),
        started: due.scheduled_time.unwrap_or(now),
        round,
        scratch_bytes,
        deadline,
    };
    let job = drill_job(plan, verify, &run, &settings.job);
    let name = job.name_any();
    if let Some(time) = due.scheduled_time {
        status.last_schedule_time = Some(Time(time));
    }
    if let Some(request) = due.request {
        status.last_request = Some(request);
    }
    status.drills = status.drills.saturating_add(1);
    status.active_job = Some(name.clone());
    status.waiting = None;
    decision.events.push(PlannedEvent {
        type_: EventType::Normal,
        reason: Reason::DrillStarted,
        note: format!(
            "created Job {name} to drill snapshot {} of the plan ({:?}, {} MiB of scratch)",
            verify.snapshot,
            due.trigger,
            scratch_bytes.div_ceil(1 << 20)
        ),
    });
    decision.create_drill = Some(job);
}

/// How soon the plan's drills want it looked at again: the next drill time, a queued drill or
/// a taken name's recheck, the running drill's safety net.
pub fn next_wake(decision: &PlanDecision, now: Timestamp) -> Duration {
    let Some(status) = decision.status.verify.as_ref() else {
        return Duration::MAX;
    };
    let scheduled = (status.next_schedule_time.as_ref())
        .map(|next| next.0.duration_since(now).max(SignedDuration::from_secs(1)))
        .and_then(|wait| Duration::try_from(wait).ok())
        .unwrap_or(Duration::MAX);
    let active = if status.active_job.is_some() {
        ACTIVE_RECHECK
    } else {
        Duration::MAX
    };
    scheduled
        .min(active)
        .min(decision.drill_recheck.unwrap_or(Duration::MAX))
}
