//! A Restore's status: its finished Job recorded ([`finish_restore`]), and its conditions set by
//! one builder called once at the end of a reconcile ([`set_restore_conditions`]).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{to_i64, JobEnd};
use crate::api::{RestorePhase, RestoreStatus};
use crate::conditions::{set_condition, types, ConditionStatus, Reason};

/// What a Restore's conditions are made of: gathered while a reconcile decides, applied once at
/// its end by [`set_restore_conditions`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RestoreConditions<'a> {
    /// Whether everything the Restore names is there, checked while no Job exists; `None` leaves
    /// `Ready` as it was.
    pub readiness: Option<Readiness<'a>>,
    /// The end of the Restore's Job, once it ended: `Complete`.
    pub ended: Option<&'a JobEnd>,
}

/// A Restore's `Ready` condition.
#[derive(Debug, Clone, Copy)]
pub enum Readiness<'a> {
    Ready,
    NotReady { reason: Reason, message: &'a str },
}

/// Sets a Restore's `Ready` and `Complete` conditions. Called once, at the end of a reconcile.
pub fn set_restore_conditions(
    status: &mut RestoreStatus,
    conditions: RestoreConditions,
    generation: Option<i64>,
    now: Timestamp,
) {
    let ready = match conditions.readiness {
        None => None,
        Some(Readiness::Ready) => Some((
            ConditionStatus::True,
            Reason::Ready,
            "everything the Restore names exists",
        )),
        Some(Readiness::NotReady { reason, message }) => {
            Some((ConditionStatus::False, reason, message))
        }
    };
    if let Some((state, reason, message)) = ready {
        set_condition(
            &mut status.conditions,
            types::READY,
            state,
            reason,
            message,
            generation,
            now,
        );
    }
    if let Some(end) = conditions.ended {
        set_condition(
            &mut status.conditions,
            types::COMPLETE,
            ConditionStatus::from_bool(end.outcome.is_success()),
            end.reason,
            restore_message(end),
            generation,
            now,
        );
    }
}

/// Records a finished restore Job on the Restore's status (its `Complete` condition is
/// [`set_restore_conditions`]'s).
pub fn finish_restore(status: &mut RestoreStatus, end: &JobEnd, now: Timestamp) {
    let succeeded = end.outcome.is_success();
    status.phase = Some(if succeeded {
        RestorePhase::Succeeded
    } else {
        RestorePhase::Failed
    });
    status.start_time = status.start_time.clone().or(end.start_time.map(Time));
    status.completion_time = Some(Time(end.completion_time.unwrap_or(now)));
    if let Some(result) = &end.result {
        status.snapshot_id = result.snapshot_id.clone().or(status.snapshot_id.take());
        let taken = result.snapshot_time.as_deref().and_then(|t| t.parse().ok());
        status.snapshot_time = taken.map(Time).or(status.snapshot_time.take());
        status.files_restored = Some(to_i64(result.files));
        status.bytes_restored = Some(to_i64(result.bytes_read));
        status.bytes_per_second = result.bytes_per_second.map(to_i64);
        status.streams = super::streams::stream_records(&result.streams);
    }
    status.message = Some(restore_message(end));
}

/// What a finished restore Job says: its message, or that it finished.
fn restore_message(end: &JobEnd) -> String {
    end.message
        .clone()
        .unwrap_or_else(|| "the restore finished".into())
}
