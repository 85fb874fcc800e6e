//! What a finished Job changes, written: a BackupPlan's run records, repository and conditions,
//! and a Restore's status. What the Job's end means is read in [`outcome`].

mod copies;
pub mod outcome;
mod restore;
mod snapshots_listed;
pub mod streams;
mod verify;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use neverwiped_contract::is_key_id;
use neverwiped_contract::streams::HookPhase;
use neverwiped_contract::text::escaped;

use crate::api::{
    BackupPlanStatus, DatabaseRunRecord, MaintenanceRecord, RepositoryStatus, RunKind, RunRecord,
    RunTrigger,
};
use crate::conditions::{set_condition, set_condition_as_stored, types, ConditionStatus, Reason};
use crate::job::scheduled_time_of;
use crate::plan::{not_ready, Problem};

pub use copies::{copy_lag, record_copy_run, set_copy_lag, CopyLag};
pub use outcome::{job_end, job_finished, job_state, pod_blocked, JobEnd, JobState};
pub use restore::{finish_restore, set_restore_conditions, Readiness, RestoreConditions};
pub use snapshots_listed::withheld_message;
pub use verify::{drill_record, record_drill};

/// How many finished runs `status.history` keeps.
pub const HISTORY_LIMIT: usize = 10;

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The run record of a finished backup Job.
pub fn backup_run_record(job: &Job, trigger: RunTrigger, end: &JobEnd) -> RunRecord {
    let scheduled_time = scheduled_time_of(job).map(Time);
    let result = end.result.as_ref();
    let duration_seconds = result.map(|r| r.duration_secs.round() as i64).or_else(|| {
        Some(
            end.completion_time?
                .duration_since(end.start_time?)
                .as_secs(),
        )
    });
    RunRecord {
        job_name: job.metadata.name.clone().unwrap_or_default(),
        trigger,
        scheduled_time,
        start_time: end.start_time.map(Time),
        completion_time: end.completion_time.map(Time),
        duration_seconds,
        result: end.outcome,
        reason: end.reason.into(),
        message: end.message.clone(),
        snapshot_id: result.and_then(|r| r.snapshot_id.clone()),
        files_read: result.map(|r| to_i64(r.files)),
        bytes_read: result.map(|r| to_i64(r.bytes_read)),
        bytes_added: result.map(|r| to_i64(r.bytes_added)),
        bytes_sent: result.map(|r| to_i64(r.bytes_transferred)),
        warnings: result.map(|r| to_i64(r.warnings_total)).filter(|&w| w > 0),
        databases: result
            .map(|r| {
                r.databases
                    .iter()
                    .map(|d| DatabaseRunRecord {
                        name: d.name.clone(),
                        dump_bytes: to_i64(d.dump_bytes),
                        error: d.error.as_deref().map(|e| escaped(e).into_owned()),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        paused_seconds: result.and_then(|r| r.paused_secs),
        streams: result
            .map(|r| streams::stream_records(&r.streams))
            .unwrap_or_default(),
        hooks: result
            .map(|r| streams::hook_records(&r.hooks))
            .unwrap_or_default(),
    }
}

/// The record of a finished prune or check Job.
pub fn maintenance_record(job: &Job, end: &JobEnd) -> MaintenanceRecord {
    let result = end.result.as_ref();
    MaintenanceRecord {
        job_name: job.metadata.name.clone().unwrap_or_default(),
        start_time: end.start_time.map(Time),
        completion_time: end.completion_time.map(Time),
        result: end.outcome,
        reason: end.reason.into(),
        message: end.message.clone(),
        bytes_freed: result.and_then(|r| r.prune).map(|p| to_i64(p.bytes_freed)),
        problems: result.and_then(|r| r.check).map(|c| to_i64(c.problems)),
        packs_read: result.and_then(|r| r.check).map(|c| to_i64(c.packs_read)),
    }
}

/// Updates `status.repository` from a finished Job's result: its measurements, when it measured
/// the repository, and the key that opened it (the one recorded before stays when the run names
/// none, or names something that is not a key id).
pub fn record_repository(status: &mut BackupPlanStatus, end: &JobEnd, now: Timestamp) {
    let Some(result) = end.result.as_ref() else {
        return;
    };
    let key_id = result
        .key_id
        .clone()
        .filter(|id| is_key_id(id))
        .or_else(|| status.key_id().map(str::to_owned));
    match result.repository {
        Some(stats) => {
            status.repository = Some(RepositoryStatus {
                size_bytes: to_i64(stats.size_bytes),
                size: binary_quantity(stats.size_bytes),
                snapshots: to_i64(stats.snapshots),
                measured_time: Time(end.completion_time.unwrap_or(now)),
                key_id,
            })
        }
        None => {
            if let Some(repository) = status.repository.as_mut() {
                repository.key_id = key_id;
            }
        }
    }
}

/// Bytes as a Kubernetes quantity with a binary suffix, rounded to at most one decimal: `0`,
/// `980`, `12Ki`, `553Mi`, `1.2Gi`.
pub fn binary_quantity(bytes: u64) -> String {
    const SUFFIXES: [&str; 6] = ["", "Ki", "Mi", "Gi", "Ti", "Pi"];
    let mut value = bytes as f64;
    let mut suffix = 0;
    while value >= 1024.0 && suffix < SUFFIXES.len() - 1 {
        value /= 1024.0;
        suffix += 1;
    }
    if suffix == 0 || value >= 10.0 {
        format!("{}{}", value.round() as u64, SUFFIXES[suffix])
    } else {
        let text = format!("{value:.1}");
        format!("{}{}", text.trim_end_matches(".0"), SUFFIXES[suffix])
    }
}

/// Records a finished run: `lastRun`, the bounded `history` (newest first), and
/// `lastSuccessfulTime`. Recording the same Job twice changes nothing.
pub fn record_backup_run(status: &mut BackupPlanStatus, record: RunRecord, now: Timestamp) {
    if status.history.iter().any(|r| r.job_name == record.job_name) {
        return;
    }
    if record.result.is_success() {
        status.last_successful_time = Some(record.completion_time.clone().unwrap_or(Time(now)));
    }
    if status.active_run.as_ref().map(|a| &a.job_name) == Some(&record.job_name) {
        status.active_run = None;
    }
    status.history.insert(0, record.clone());
    status.history.truncate(HISTORY_LIMIT);
    status.last_run = Some(record);
}

/// Sets a BackupPlan's `Ready`, `Running` and `LastBackupSucceeded` conditions from its problems
/// (none: Ready, with `ready_message`), its active run and its last run.
fn set_backup_plan_conditions(
    status: &mut BackupPlanStatus,
    problems: &[Problem],
    ready_message: &str,
    generation: Option<i64>,
    now: Timestamp,
) {
    let conditions = &mut status.conditions;
    match not_ready(problems) {
        Some((reason, message)) => set_condition(
            conditions,
            types::READY,
            ConditionStatus::False,
            reason,
            message,
            generation,
            now,
        ),
        None => set_condition(
            conditions,
            types::READY,
            ConditionStatus::True,
            Reason::Ready,
            ready_message,
            generation,
            now,
        ),
    }
    match &status.active_run {
        Some(active) => {
            let (reason, doing) = match active.kind {
                RunKind::Backup => (Reason::BackupRunning, "is backing up"),
                RunKind::Prune => (Reason::PruneRunning, "is pruning the repository"),
                RunKind::Check => (Reason::CheckRunning, "is checking the repository"),
            };
            set_condition(
                conditions,
                types::RUNNING,
                ConditionStatus::True,
                reason,
                format!("Job {} {doing}", active.job_name),
                generation,
                now,
            )
        }
        None => set_condition(
            conditions,
            types::RUNNING,
            ConditionStatus::False,
            Reason::Idle,
            "no backup, prune or check is running",
            generation,
            now,
        ),
    }
    match &status.last_run {
        Some(run) => {
            let message = run
                .message
                .clone()
                .unwrap_or_else(|| match &run.snapshot_id {
                    Some(id) => format!("Job {} wrote snapshot {id}", run.job_name),
                    None => format!("Job {} finished", run.job_name),
                });
            set_condition_as_stored(
                conditions,
                types::LAST_BACKUP_SUCCEEDED,
                ConditionStatus::from_bool(run.result.is_success()),
                &run.reason,
                message,
                generation,
                now,
            );
        }
        None => set_condition(
            conditions,
            types::LAST_BACKUP_SUCCEEDED,
            ConditionStatus::Unknown,
            Reason::NoBackupYet,
            "no backup has finished yet",
            generation,
            now,
        ),
    }
}

/// What a BackupPlan's conditions are made of: gathered while a reconcile decides, applied once
/// at its end by [`set_plan_conditions`].
#[derive(Debug, Clone, Copy)]
pub struct PlanConditions<'a> {
    /// What is wrong with the spec; nothing: `Ready=True` with `ready_message`.
    pub problems: &'a [Problem],
    pub ready_message: &'a str,
    /// A backup whose Job waits for its VolumeSnapshots.
    pub preparing: Option<PreparingSnapshots<'a>>,
    /// The volume selectors that matched no claim, when the spec resolved; `None` leaves
    /// `VolumesSelected` as it was.
    pub unmatched_selectors: Option<&'a [Problem]>,
    /// A finished Job's listing of the plan's snapshots was recorded in this reconcile:
    /// `SnapshotsListed` compares it with the last successful backup (otherwise it stays as it
    /// was).
    pub listing_recorded: bool,
}

/// A backup's VolumeSnapshots, while its Job waits for them.
#[derive(Debug, Clone, Copy)]
pub struct PreparingSnapshots<'a> {
    pub job_name: &'a str,
    /// The hook Job that runs now around the snapshots, with its phase.
    pub hooks: Option<(HookPhase, &'a str)>,
    pub ready: usize,
    pub taken: usize,
}

/// Sets every condition of a BackupPlan: `Ready`, `Running` (a run, its VolumeSnapshots being
/// prepared, a place in the queue, or idle), `LastBackupSucceeded`, `VolumesSelected` and
/// `SnapshotsListed`. Called once, at the end of a reconcile. Returns the note of a Warning Event
/// when the listing newly withholds the last successful backup's snapshot.
#[must_use]
pub fn set_plan_conditions(
    status: &mut BackupPlanStatus,
    conditions: PlanConditions,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<String> {
    // `SnapshotsListed` records `status.observedGeneration` as it stood before this reconcile,
    // which moves it to `generation` only after this call.
    let withheld = conditions
        .listing_recorded
        .then(|| snapshots_listed::set_snapshots_listed(status, now))
        .flatten();
    set_backup_plan_conditions(
        status,
        conditions.problems,
        conditions.ready_message,
        generation,
        now,
    );
    if let Some(preparing) = conditions.preparing {
        let (reason, message) = preparing_message(&preparing);
        set_condition(
            &mut status.conditions,
            types::RUNNING,
            ConditionStatus::True,
            reason,
            message,
            generation,
            now,
        );
    }
    if status.active_run.is_none() {
        show_queued(status, generation, now);
    }
    if let Some(unmatched) = conditions.unmatched_selectors {
        show_selection(status, unmatched, generation, now);
    }
    withheld
}

/// The `Running` condition's reason and message while a run prepares its snapshots: the hook
/// Job it waits for, or how many of its snapshots are ready.
fn preparing_message(preparing: &PreparingSnapshots) -> (Reason, String) {
    let job = preparing.job_name;
    match preparing.hooks {
        Some((HookPhase::Pre, hooks)) => (
            Reason::RunningHooks,
            format!("the pre hooks run (Job {hooks}); then the VolumeSnapshots of Job {job} are taken"),
        ),
        Some((HookPhase::Post, hooks)) => (
            Reason::RunningHooks,
            format!(
                "the post hooks run (Job {hooks}) after the VolumeSnapshots ({} of {} ready); then Job {job} starts",
                preparing.ready, preparing.taken
            ),
        ),
        None => (
            Reason::PreparingSnapshots,
            format!(
                "Job {job} starts when its VolumeSnapshots are ready ({} of {})",
                preparing.ready, preparing.taken
            ),
        ),
    }
}

/// The `Running` condition of a plan whose run waits for a slot.
fn show_queued(status: &mut BackupPlanStatus, generation: Option<i64>, now: Timestamp) {
    let Some(queued) = &status.queued else {
        return;
    };
    let message = format!(
        "a {} waits for a slot, number {} of {} in the queue: {}",
        queued.kind.label(),
        queued.position,
        queued.waiting,
        queued.message
    );
    set_condition(
        &mut status.conditions,
        types::RUNNING,
        ConditionStatus::False,
        Reason::Queued,
        message,
        generation,
        now,
    );
}

/// `VolumesSelected=False` while a selector matches nothing (the plan's other volumes and
/// databases are backed up meanwhile); no condition while every selector matches.
fn show_selection(
    status: &mut BackupPlanStatus,
    unmatched: &[Problem],
    generation: Option<i64>,
    now: Timestamp,
) {
    if unmatched.is_empty() {
        status
            .conditions
            .retain(|c| c.type_ != types::VOLUMES_SELECTED);
        return;
    }
    let message = unmatched
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    set_condition(
        &mut status.conditions,
        types::VOLUMES_SELECTED,
        ConditionStatus::False,
        Reason::SelectorMatchedNothing,
        format!("{message}; the plan's other volumes and databases are backed up"),
        generation,
        now,
    );
}

#[cfg(test)]
mod tests;
