//! The suspicion check's place in a reconcile: each finished backup judged against the plan's
//! history ([`crate::suspicion`]), with a Warning Event for a flagged night; an admin's
//! acknowledgement cleared, with a Normal one.

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;

use super::decision::PlanDecision;
use crate::api::{BackupPlan, RunTrigger, ANNOTATION_EXPECTED_CHANGE};
use crate::conditions::Reason;
use crate::controller::effects::PlannedEvent;
use crate::controller::Settings;
use crate::job::{job_annotation, ANNOTATION_MANUAL_TRIGGER};
use crate::recorder::EventType;
use crate::status::JobEnd;
use crate::suspicion::{self, Night};

/// Judges the backup `job` that ended as `end`, when it wrote a snapshot.
pub fn judge(
    plan: &BackupPlan,
    job: &Job,
    trigger: RunTrigger,
    end: &JobEnd,
    decision: &mut PlanDecision,
    settings: &Settings,
    now: Timestamp,
) {
    let Some(result) = end.result.as_ref().filter(|_| end.outcome.is_success()) else {
        return;
    };
    let night = Night {
        result,
        expected: trigger == RunTrigger::Manual && expected(plan, job),
        finished: end.completion_time.unwrap_or(now),
    };
    let generation = plan.metadata.generation;
    let flagged =
        suspicion::record_night(&mut decision.status, night, &settings.suspicion, generation);
    if let Some(flagged) = flagged {
        decision.events.push(PlannedEvent {
            type_: EventType::Warning,
            reason: Reason::parse(&flagged.reason).unwrap_or(Reason::MassRewrite),
            note: flagged.message,
        });
    }
}

/// Whether the manual run of `job` is the one the plan's expected-change annotation names.
fn expected(plan: &BackupPlan, job: &Job) -> bool {
    let marked = plan
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_EXPECTED_CHANGE));
    let trigger = job_annotation(job, ANNOTATION_MANUAL_TRIGGER);
    marked.is_some_and(|marked| Some(marked.as_str()) == trigger)
}

/// Clears a flag the plan's annotation acknowledges, with an Event.
pub fn acknowledge(plan: &BackupPlan, decision: &mut PlanDecision, now: Timestamp) {
    if let Some(cleared) = suspicion::acknowledge(plan, &mut decision.status, now) {
        decision.events.push(PlannedEvent {
            type_: EventType::Normal,
            reason: Reason::SuspiciousChangeAcknowledged,
            note: format!(
                "suspicious change of snapshot {} acknowledged; retention runs again",
                neverwiped_contract::text::escaped(&cleared.snapshot_id)
            ),
        });
    }
}

/// `plan` as the Job builders should see it: with the suspicion flag this reconcile set or
/// cleared, so a prune that starts in the same reconcile as a flagged backup is recorded gets no
/// keep rules. `None` when nothing changed.
pub fn with_decided_flag(plan: &BackupPlan, decision: &PlanDecision) -> Option<BackupPlan> {
    let before = plan
        .status
        .as_ref()
        .and_then(|s| s.suspicious_change.as_ref());
    if before == decision.status.suspicious_change.as_ref() {
        return None;
    }
    let mut updated = plan.clone();
    updated
        .status
        .get_or_insert_with(Default::default)
        .suspicious_change = decision.status.suspicious_change.clone();
    Some(updated)
}
