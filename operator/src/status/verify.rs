//! What a finished drill Job means for `status.verify`: its record (how each volume and database
//! came back, the recovery time, held to the objective), the history and the last success.
//! Pure: no client, no clock.

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use neverwiped_contract::drill::DrillStats;
use neverwiped_contract::text::escaped;

use super::outcome::JobEnd;
use crate::api::{
    DrillOutcome, DrillRecord, DrilledDatabase, DrilledVolume, VerifySpec, VerifyStatus,
    VERIFY_HISTORY_LIMIT,
};
use crate::conditions::Reason;
use crate::schedule::parse_duration;

/// How many hex digits of the drilled snapshot's id the record shows.
const SHORT_ID_LEN: usize = 8;

/// The record of the drill Job `job` that ended as `end`, held to `verify`'s objective.
pub fn drill_record(job: &Job, end: &JobEnd, verify: &VerifySpec) -> DrillRecord {
    let result = end.result.as_ref();
    let stats = result.and_then(|r| r.drill.as_ref());
    let recovery_seconds = stats.map(DrillStats::recovery_secs);
    let objective = verify.recovery_time_objective.clone();
    let (outcome, reason, message) = if end.outcome.is_success() {
        judge(recovery_seconds, objective.as_deref(), end.message.clone())
    } else {
        (DrillOutcome::Failed, end.reason, end.message.clone())
    };
    DrillRecord {
        job_name: job.metadata.name.clone().unwrap_or_default(),
        result: outcome,
        reason: reason.as_str().to_owned(),
        message,
        snapshot_id: result
            .and_then(|r| r.snapshot_id.as_deref())
            .map(|id| id.chars().take(SHORT_ID_LEN).collect()),
        start_time: end.start_time.map(Time),
        completion_time: end.completion_time.map(Time),
        recovery_seconds: recovery_seconds.map(round_millis),
        recovery_time_objective: objective,
        sample_percent: stats.map(|s| i32::from(s.sample_percent)),
        volumes: stats.map(volumes).unwrap_or_default(),
        databases: stats.map(databases).unwrap_or_default(),
    }
}

/// A drill that proved the data: within its objective, or over it (with the times).
fn judge(
    recovery_seconds: Option<f64>,
    objective: Option<&str>,
    message: Option<String>,
) -> (DrillOutcome, Reason, Option<String>) {
    let limit = objective.and_then(|o| parse_duration(o).ok());
    match (recovery_seconds, limit) {
        (Some(took), Some(limit)) if took > limit.as_secs_f64() => (
            DrillOutcome::SucceededOverObjective,
            Reason::OverObjective,
            Some(format!(
                "the data came back, in {took:.0} s: over the recovery time objective of {} ({} s)",
                objective.unwrap_or_default(),
                limit.as_secs()
            )),
        ),
        _ => (DrillOutcome::Succeeded, Reason::Succeeded, message),
    }
}

fn volumes(stats: &DrillStats) -> Vec<DrilledVolume> {
    (stats.volumes.iter())
        .map(|v| DrilledVolume {
            path: escaped(&v.path).into_owned(),
            files: to_i64(v.files),
            bytes: to_i64(v.bytes),
            seconds: round_millis(v.secs),
            bytes_per_second: per_second(v.bytes, v.secs),
            mismatched: to_i64(v.mismatched),
        })
        .collect()
}

fn databases(stats: &DrillStats) -> Vec<DrilledDatabase> {
    (stats.databases.iter())
        .map(|d| DrilledDatabase {
            name: d.name.clone(),
            engine: d.engine.clone(),
            bytes: to_i64(d.bytes),
            seconds: round_millis(d.secs),
            bytes_per_second: per_second(d.bytes, d.secs),
            tables_checked: to_i64(d.tables_checked),
            error: d.error.as_deref().map(|e| escaped(e).into_owned()),
        })
        .collect()
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Bytes per second; the bytes themselves for a part that took no measurable time.
fn per_second(bytes: u64, secs: f64) -> i64 {
    if secs > 0.001 {
        (bytes as f64 / secs).round() as i64
    } else {
        to_i64(bytes)
    }
}

/// Seconds to the millisecond: the status does not change with every float's last digits.
fn round_millis(secs: f64) -> f64 {
    (secs * 1000.0).round() / 1000.0
}

/// Records a finished drill: `lastRun`, the bounded `history` (newest first) and
/// `lastSuccessTime`. Recording the same Job twice changes nothing.
pub fn record_drill(status: &mut VerifyStatus, record: DrillRecord, now: Timestamp) {
    if status.history.iter().any(|r| r.job_name == record.job_name) {
        return;
    }
    if record.result.is_success() {
        status.last_success_time = Some(record.completion_time.clone().unwrap_or(Time(now)));
    }
    if status.active_job.as_deref() == Some(record.job_name.as_str()) {
        status.active_job = None;
    }
    status.history.insert(0, record.clone());
    status.history.truncate(VERIFY_HISTORY_LIMIT);
    status.last_run = Some(record);
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
