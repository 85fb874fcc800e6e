//! What a finished Job means: the sidecar's result read from the terminated container's message,
//! or, when there is none, the real reason the pod ended (out of memory, deadline, image pull…);
//! and how that lands in a BackupPlan's or Restore's status.

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use neverwiped_contract::text::escaped;
use neverwiped_contract::{ExitStatus, Operation, RunResult};

use crate::api::{
    BackupPlanStatus, DatabaseRunRecord, MaintenanceRecord, RepositoryStatus, RestorePhase,
    RestoreStatus, RunKind, RunOutcome, RunRecord, RunTrigger,
};
use crate::conditions::{set_condition, set_condition_as_stored, types, ConditionStatus, Reason};
use crate::job::{scheduled_time_of, ANNOTATION_DEADLINE, SIDECAR_CONTAINER};
use crate::plan::{not_ready, Problem};

/// What Kubernetes writes (the kubelet in container states and pod phases, the Job controller in
/// Job conditions) and this module reads: their strings, not ours.
mod kubelet {
    pub const OOM_KILLED: &str = "OOMKilled";
    pub const IMAGE_PULL_BACK_OFF: &str = "ImagePullBackOff";
    pub const ERR_IMAGE_PULL: &str = "ErrImagePull";
    pub const INVALID_IMAGE_NAME: &str = "InvalidImageName";
    pub const CREATE_CONTAINER_CONFIG_ERROR: &str = "CreateContainerConfigError";
    pub const CREATE_CONTAINER_ERROR: &str = "CreateContainerError";
    pub const POD_FAILED: &str = "Failed";
    pub const JOB_COMPLETE: &str = "Complete";
    pub const JOB_FAILED: &str = "Failed";
    pub const JOB_DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
}

/// How many finished runs `status.history` keeps.
pub const HISTORY_LIMIT: usize = 10;

/// Messages quoted from elsewhere (a crash's output, a pod's message) are cut to this length.
const QUOTED_MESSAGE_MAX_CHARS: usize = 1024;

/// How a finished Job ended, whatever it ran.
#[derive(Debug, Clone, PartialEq)]
pub struct JobEnd {
    pub outcome: RunOutcome,
    pub reason: Reason,
    pub message: Option<String>,
    /// The sidecar's result, when it wrote one.
    pub result: Option<RunResult>,
    pub start_time: Option<Timestamp>,
    pub completion_time: Option<Timestamp>,
}

/// Whether a Job has finished: `Some(true)` complete, `Some(false)` failed, `None` still going.
pub fn job_finished(job: &Job) -> Option<bool> {
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    let is_true = |type_: &str| conditions.iter().any(|c| is_true(c, type_));
    if is_true(kubelet::JOB_COMPLETE) {
        Some(true)
    } else if is_true(kubelet::JOB_FAILED) {
        Some(false)
    } else {
        None
    }
}

/// Whether `condition` of a Job is of `type_` and `True`.
fn is_true(condition: &JobCondition, type_: &str) -> bool {
    condition.type_ == type_ && ConditionStatus::parse(&condition.status) == ConditionStatus::True
}

/// A pod that will not start by itself (its image cannot be pulled, a Secret key it needs is
/// missing): the reason and message, so the run can be failed now instead of at its deadline.
pub fn pod_blocked(pod: &Pod) -> Option<(Reason, String)> {
    let status = sidecar_status(pod)?;
    let waiting = status.state.as_ref()?.waiting.as_ref()?;
    let detail = waiting.message.clone().unwrap_or_default();
    match waiting.reason.as_deref()? {
        kubelet::IMAGE_PULL_BACK_OFF | kubelet::ERR_IMAGE_PULL | kubelet::INVALID_IMAGE_NAME => {
            Some((
                Reason::ImagePullFailed,
                format!("cannot pull the sidecar image {:?}: {detail}", status.image),
            ))
        }
        kubelet::CREATE_CONTAINER_CONFIG_ERROR | kubelet::CREATE_CONTAINER_ERROR => Some((
            Reason::ContainerConfigError,
            format!("cannot start the sidecar: {detail}"),
        )),
        _ => None,
    }
}

/// Where the Job of a run is.
#[derive(Debug, Clone, PartialEq)]
pub enum JobState {
    /// Still going.
    Running,
    /// Finished, for good or bad.
    Ended(JobEnd),
    /// Its pod will not start by itself (see [`pod_blocked`]): the run fails now with the real
    /// reason instead of at its deadline, and the caller ends the Job.
    Blocked(JobEnd),
}

/// Where `job` is, from the Job and its pod, at `now`.
pub fn job_state(job: &Job, pod: Option<&Pod>, now: Timestamp) -> JobState {
    if let Some(end) = job_end(job, pod) {
        return JobState::Ended(end);
    }
    match pod.and_then(pod_blocked) {
        Some((reason, message)) => JobState::Blocked(JobEnd {
            outcome: RunOutcome::Failed,
            reason,
            message: Some(message),
            result: None,
            start_time: job
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0),
            completion_time: Some(now),
        }),
        None => JobState::Running,
    }
}

/// How `job` ended, from the Job and its pod; `None` while it runs.
pub fn job_end(job: &Job, pod: Option<&Pod>) -> Option<JobEnd> {
    let complete = job_finished(job)?;
    let job_status = job.status.as_ref();
    let failed_condition = job_status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| is_true(c, kubelet::JOB_FAILED)));
    let start_time = job_status.and_then(|s| s.start_time.as_ref()).map(|t| t.0);
    let completion_time = job_status
        .and_then(|s| s.completion_time.as_ref())
        .or(failed_condition.and_then(|c| c.last_transition_time.as_ref()))
        .map(|t| t.0);

    let container = pod.and_then(sidecar_status);
    let terminated = container.and_then(|c| {
        c.state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .or(c.last_state.as_ref().and_then(|s| s.terminated.as_ref()))
    });
    let termination_message = terminated
        .and_then(|t| t.message.as_deref())
        .unwrap_or("")
        .trim();
    let result = RunResult::from_json(termination_message).ok();

    // Messages quote names a workload chose (a file it made unreadable): kept to one line of
    // printable text, they cannot rewrite the terminal of whoever reads the status.
    let end = |outcome, reason, message: Option<String>, result: Option<RunResult>| JobEnd {
        outcome,
        reason,
        message: message.map(|m| escaped(&m).into_owned()),
        result,
        start_time,
        completion_time,
    };

    // The most specific explanation first: the kernel's, then Kubernetes', then the sidecar's.
    if terminated.and_then(|t| t.reason.as_deref()) == Some(kubelet::OOM_KILLED) {
        let message = out_of_memory_message(pod);
        return Some(end(
            RunOutcome::Failed,
            Reason::OomKilled,
            Some(message),
            result,
        ));
    }
    if failed_condition.and_then(|c| c.reason.as_deref()) == Some(kubelet::JOB_DEADLINE_EXCEEDED) {
        return Some(end(
            RunOutcome::Failed,
            Reason::DeadlineExceeded,
            Some(deadline_message(job)),
            result,
        ));
    }
    if let Some(result) = result {
        let (outcome, reason, message) = outcome_of(&result);
        return Some(end(outcome, reason, message, Some(result)));
    }
    if let Some((reason, message)) = pod.and_then(pod_blocked) {
        return Some(end(RunOutcome::Failed, reason, Some(message), None));
    }
    if let Some(terminated) = terminated {
        let (reason, message) = no_result(terminated, termination_message);
        return Some(end(RunOutcome::Failed, reason, Some(message), None));
    }
    if let Some(pod_status) = pod.and_then(|p| p.status.as_ref()) {
        if pod_status.phase.as_deref() == Some(kubelet::POD_FAILED) {
            let message = format!(
                "the pod failed ({}): {}",
                pod_status.reason.as_deref().unwrap_or("no reason given"),
                shorten(pod_status.message.as_deref().unwrap_or(""))
            );
            return Some(end(
                RunOutcome::Failed,
                Reason::PodFailed,
                Some(message),
                None,
            ));
        }
    }
    if complete {
        let message = "the Job completed, but its pod and the sidecar's result are gone".to_owned();
        return Some(end(
            RunOutcome::Failed,
            Reason::NoResult,
            Some(message),
            None,
        ));
    }
    let message = failed_condition.map(|c| {
        format!(
            "the Job failed ({}): {}",
            c.reason.as_deref().unwrap_or("no reason given"),
            shorten(c.message.as_deref().unwrap_or(""))
        )
    });
    Some(end(RunOutcome::Failed, Reason::JobFailed, message, None))
}

/// Why the sidecar ran out of memory, with its limit.
fn out_of_memory_message(pod: Option<&Pod>) -> String {
    let limit = pod
        .and_then(|p| p.spec.as_ref())
        .and_then(|s| s.containers.iter().find(|c| c.name == SIDECAR_CONTAINER))
        .and_then(|c| c.resources.as_ref())
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("memory"))
        .map(|q| q.0.clone())
        .unwrap_or_else(|| "none".into());
    format!(
        "the sidecar ran out of memory (memory limit {limit}); raise spec.pod.resources.limits.memory"
    )
}

/// What a run stopped at its deadline is told, with the deadline it had.
fn deadline_message(job: &Job) -> String {
    let deadline = job
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_DEADLINE).cloned())
        .or_else(|| {
            job.spec
                .as_ref()
                .and_then(|s| s.active_deadline_seconds)
                .map(|secs| format!("{secs}s"))
        })
        .unwrap_or_else(|| "its deadline".into());
    format!(
        "the run was still going after its deadline of {deadline} and was stopped; raise spec.deadline, or find out why it is slow"
    )
}

/// The reason and message of a sidecar that ended without a readable result, quoting what it
/// left in its termination message.
fn no_result(terminated: &ContainerStateTerminated, termination_message: &str) -> (Reason, String) {
    let (reason, message) = if terminated.exit_code == 0 {
        (
            Reason::NoResult,
            "the sidecar exited successfully but wrote no result".to_owned(),
        )
    } else {
        (
            Reason::SidecarCrashed,
            format!(
                "the sidecar exited with code {} ({}) without a result",
                terminated.exit_code,
                terminated.reason.as_deref().unwrap_or("Error")
            ),
        )
    };
    let message = match termination_message {
        "" => message,
        output => format!("{message}: {}", shorten(output)),
    };
    (reason, message)
}

/// The outcome, reason and message the sidecar's own result gives.
fn outcome_of(result: &RunResult) -> (RunOutcome, Reason, Option<String>) {
    match result.status {
        ExitStatus::Success if result.warnings_total == 0 => {
            (RunOutcome::Succeeded, Reason::Succeeded, None)
        }
        // Complete, with warnings that lost nothing readable (e.g. a retention the gate refused).
        ExitStatus::Success => {
            let first = result.warnings.first().map(String::as_str).unwrap_or("");
            let message = format!(
                "the run succeeded with {} warning(s); the first: {first}",
                result.warnings_total
            );
            (
                RunOutcome::SucceededWithWarnings,
                Reason::SucceededWithWarnings,
                Some(message),
            )
        }
        ExitStatus::Partial => {
            let first = result
                .warnings
                .first()
                .map(|w| format!("; the first: {w}"))
                .unwrap_or_default();
            let message = format!("{} files could not be read{first}", result.warnings_total);
            (
                RunOutcome::SucceededWithWarnings,
                Reason::SucceededWithWarnings,
                Some(message),
            )
        }
        // Stopped by a signal just after its snapshot was stored: the snapshot is complete.
        status
            if status.is_stop_signal()
                && result.operation == Operation::Backup
                && result.snapshot_id.is_some() =>
        {
            (
                RunOutcome::SucceededWithWarnings,
                Reason::SucceededWithWarnings,
                result.error.clone(),
            )
        }
        status => {
            let reason = match status {
                ExitStatus::WrongPassword => Reason::WrongPassword,
                ExitStatus::NoRepository => Reason::RepositoryNotFound,
                ExitStatus::LockFailed => Reason::RepositoryLocked,
                _ => match result.operation {
                    Operation::Restore => Reason::RestoreFailed,
                    Operation::Prune => Reason::PruneFailed,
                    Operation::Check if result.check.is_some_and(|c| c.problems > 0) => {
                        Reason::RepositoryDamaged
                    }
                    Operation::Check => Reason::CheckFailed,
                    Operation::Init
                    | Operation::Backup
                    | Operation::Forget
                    | Operation::Snapshots
                    | Operation::Ls
                    | Operation::Unlock
                    | Operation::Key
                    | Operation::Mount
                    | Operation::Find
                    | Operation::Diff
                    | Operation::Stats
                    | Operation::Dump
                    | Operation::Tag
                    | Operation::Cat
                    | Operation::Repair => Reason::BackupFailed,
                },
            };
            let message = result
                .error
                .clone()
                .or_else(|| Some(format!("the sidecar reported {status:?}")));
            (RunOutcome::Failed, reason, message)
        }
    }
}

fn sidecar_status(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == SIDECAR_CONTAINER)
}

fn shorten(text: &str) -> String {
    let text = text.trim();
    if text.chars().count() <= QUOTED_MESSAGE_MAX_CHARS {
        return text.to_owned();
    }
    let mut short: String = text.chars().take(QUOTED_MESSAGE_MAX_CHARS).collect();
    short.push('…');
    short
}

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

/// Updates `status.repository` from a finished Job's result, when it measured the repository.
pub fn record_repository(status: &mut BackupPlanStatus, end: &JobEnd, now: Timestamp) {
    let Some(stats) = end.result.as_ref().and_then(|r| r.repository) else {
        return;
    };
    status.repository = Some(RepositoryStatus {
        size_bytes: to_i64(stats.size_bytes),
        size: binary_quantity(stats.size_bytes),
        snapshots: to_i64(stats.snapshots),
        measured_time: Time(end.completion_time.unwrap_or(now)),
    });
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

/// Sets a BackupPlan's conditions from its problems (none: Ready, with `ready_message`), its
/// active run and its last run.
pub fn set_backup_plan_conditions(
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

/// Records a finished restore Job on the Restore's status.
pub fn finish_restore(
    status: &mut RestoreStatus,
    end: &JobEnd,
    generation: Option<i64>,
    now: Timestamp,
) {
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
    }
    let message = end
        .message
        .clone()
        .unwrap_or_else(|| "the restore finished".into());
    status.message = Some(message.clone());
    set_condition(
        &mut status.conditions,
        types::COMPLETE,
        ConditionStatus::from_bool(succeeded),
        end.reason,
        message,
        generation,
        now,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ActiveRun, RunTrigger};
    use crate::job::{run_trigger_of, ANNOTATION_SCHEDULED_TIME, ANNOTATION_TRIGGER};
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStateWaiting, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn job(condition: Option<(&str, &str)>) -> Job {
        Job {
            metadata: ObjectMeta {
                name: Some("nightly-29933370".into()),
                annotations: Some(BTreeMap::from([
                    (ANNOTATION_TRIGGER.to_string(), "CatchUp".to_string()),
                    (
                        ANNOTATION_SCHEDULED_TIME.to_string(),
                        "2026-11-30T01:30:00Z".to_string(),
                    ),
                    (ANNOTATION_DEADLINE.to_string(), "12h".to_string()),
                ])),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(JobStatus {
                start_time: Some(Time(at("2026-11-30T02:00:00Z"))),
                completion_time: (condition.map(|c| c.0) == Some("Complete"))
                    .then(|| Time(at("2026-11-30T02:10:00Z"))),
                conditions: condition.map(|(type_, reason)| {
                    vec![JobCondition {
                        type_: type_.into(),
                        status: "True".into(),
                        reason: Some(reason.into()),
                        message: Some("Job has reached the specified backoff limit".into()),
                        last_transition_time: Some(Time(at("2026-11-30T02:10:00Z"))),
                        ..JobCondition::default()
                    }]
                }),
                ..JobStatus::default()
            }),
        }
    }

    fn pod(state: ContainerState) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some("Failed".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: SIDECAR_CONTAINER.into(),
                    image: "ghcr.io/neverwiped/sidecar:0.1.0".into(),
                    state: Some(state),
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn terminated(exit_code: i32, reason: &str, message: &str) -> ContainerState {
        ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code,
                reason: Some(reason.into()),
                message: Some(message.into()),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        }
    }

    fn result(status: ExitStatus) -> RunResult {
        RunResult {
            started_at: "2026-11-30T02:00:01Z".into(),
            finished_at: "2026-11-30T02:09:58Z".into(),
            duration_secs: 597.4,
            ..crate::fixtures::run_result(Operation::Backup, status)
        }
    }

    #[test]
    fn a_running_job_has_no_end() {
        assert_eq!(job_end(&job(None), None), None);
    }

    #[test]
    fn a_successful_run_is_recorded_from_the_sidecars_result() {
        let job = job(Some(("Complete", "CompletionsReached")));
        let pod = pod(terminated(
            0,
            "Completed",
            &result(ExitStatus::Success).to_termination_message(),
        ));
        let end = job_end(&job, Some(&pod)).unwrap();
        assert_eq!(end.outcome, RunOutcome::Succeeded);
        let record = backup_run_record(&job, run_trigger_of(&job).unwrap(), &end);
        assert_eq!(record.reason, "Succeeded");
        assert_eq!(record.trigger, RunTrigger::CatchUp);
        assert_eq!(
            record.scheduled_time,
            Some(Time(at("2026-11-30T01:30:00Z")))
        );
        assert_eq!(record.snapshot_id.as_deref(), Some("4f2a9c1b0d"));
        assert_eq!(record.bytes_sent, Some(12_500_000));
        assert_eq!(record.bytes_added, Some(12_000_000));
        assert_eq!(record.files_read, Some(1200));
        assert_eq!(record.duration_seconds, Some(597));
        assert_eq!(
            record.completion_time,
            Some(Time(at("2026-11-30T02:10:00Z")))
        );
    }

    #[test]
    fn a_partial_run_succeeds_with_warnings_and_says_which_file() {
        let mut partial = result(ExitStatus::Partial);
        partial.warnings_total = 2;
        partial.warnings = vec!["/data/app/secret.key: permission denied".into()];
        let job = job(Some(("Failed", "BackoffLimitExceeded")));
        let end = job_end(
            &job,
            Some(&pod(terminated(
                3,
                "Error",
                &partial.to_termination_message(),
            ))),
        )
        .unwrap();
        assert_eq!(end.outcome, RunOutcome::SucceededWithWarnings);
        assert_eq!(end.reason, Reason::SucceededWithWarnings);
        assert!(end
            .message
            .unwrap()
            .contains("2 files could not be read; the first: /data/app/secret.key"));
    }

    #[test]
    fn names_in_a_runs_messages_reach_the_status_as_printable_text() {
        let mut partial = result(ExitStatus::Partial);
        partial.warnings_total = 1;
        partial.warnings = vec!["/data/\x1b]52;c;cm0K\x07\nforged: permission denied".into()];
        let job = job(Some(("Failed", "BackoffLimitExceeded")));
        let message = partial.to_termination_message();
        let end = job_end(&job, Some(&pod(terminated(3, "Error", &message)))).unwrap();
        let shown = end.message.unwrap();
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(
            shown.ends_with(r"the first: /data/\x1b]52;c;cm0K\x07\nforged: permission denied"),
            "{shown}"
        );
    }

    #[test]
    fn a_complete_run_with_warnings_succeeds_with_warnings_and_says_the_first() {
        let mut warned = result(ExitStatus::Success);
        warned.warnings_total = 1;
        warned.warnings = vec!["retention not applied: 403 Forbidden".into()];
        let job = job(Some(("Complete", "CompletionsReached")));
        let end = job_end(
            &job,
            Some(&pod(terminated(
                0,
                "Completed",
                &warned.to_termination_message(),
            ))),
        )
        .unwrap();
        assert_eq!(end.outcome, RunOutcome::SucceededWithWarnings);
        assert_eq!(end.reason, Reason::SucceededWithWarnings);
        assert!(end
            .message
            .unwrap()
            .contains("1 warning(s); the first: retention not applied"));
    }

    #[test]
    fn a_failure_the_sidecar_reports_keeps_its_reason_and_message() {
        let mut failed = result(ExitStatus::WrongPassword);
        failed.error = Some("the password opens no key of the repository".into());
        let job = job(Some(("Failed", "BackoffLimitExceeded")));
        let end = job_end(
            &job,
            Some(&pod(terminated(
                12,
                "Error",
                &failed.to_termination_message(),
            ))),
        )
        .unwrap();
        assert_eq!(
            (end.outcome, end.reason.as_str()),
            (RunOutcome::Failed, "WrongPassword")
        );
        assert_eq!(
            end.message.as_deref(),
            Some("the password opens no key of the repository")
        );

        let mut failed = result(ExitStatus::Failed);
        failed.error = Some("connection refused".into());
        let end = job_end(
            &job,
            Some(&pod(terminated(
                1,
                "Error",
                &failed.to_termination_message(),
            ))),
        )
        .unwrap();
        assert_eq!(end.reason, Reason::BackupFailed);
    }

    #[test]
    fn a_backup_stopped_after_its_snapshot_was_stored_succeeded_with_a_warning() {
        let job = job(Some(("Failed", "BackoffLimitExceeded")));
        let mut stopped = result(ExitStatus::Terminated);
        stopped.snapshot_id = Some("1a2b3c4d".repeat(8));
        stopped.error = Some("interrupted: stopped by SIGTERM after snapshot 1a2b3c4d".into());
        let message = stopped.to_termination_message();
        let end = job_end(&job, Some(&pod(terminated(143, "Error", &message)))).unwrap();
        assert_eq!(end.outcome, RunOutcome::SucceededWithWarnings);
        assert!(end.message.unwrap().contains("after snapshot 1a2b3c4d"));
        // Before its snapshot: the backup failed.
        stopped.snapshot_id = None;
        let message = stopped.to_termination_message();
        let end = job_end(&job, Some(&pod(terminated(143, "Error", &message)))).unwrap();
        assert_eq!(end.reason, Reason::BackupFailed);
    }

    #[test]
    fn an_oom_killed_sidecar_is_reported_as_such_with_its_limit() {
        let job = job(Some(("Failed", "BackoffLimitExceeded")));
        let mut pod = pod(terminated(137, "OOMKilled", ""));
        pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            containers: vec![k8s_openapi::api::core::v1::Container {
                name: SIDECAR_CONTAINER.into(),
                resources: Some(k8s_openapi::api::core::v1::ResourceRequirements {
                    limits: Some(BTreeMap::from([(
                        "memory".to_string(),
                        k8s_openapi::apimachinery::pkg::api::resource::Quantity("512Mi".into()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        let end = job_end(&job, Some(&pod)).unwrap();
        assert_eq!(end.reason, Reason::OomKilled);
        assert!(end.message.unwrap().contains("memory limit 512Mi"));
    }

    #[test]
    fn a_run_stopped_at_its_deadline_says_so_even_when_the_sidecar_wrote_an_error() {
        let job = job(Some(("Failed", "DeadlineExceeded")));
        let mut interrupted = result(ExitStatus::Failed);
        interrupted.error = Some("interrupted by SIGTERM".into());
        let end = job_end(
            &job,
            Some(&pod(terminated(
                143,
                "Error",
                &interrupted.to_termination_message(),
            ))),
        )
        .unwrap();
        assert_eq!(end.reason, Reason::DeadlineExceeded);
        assert!(end.message.as_deref().unwrap().contains("deadline of 12h"));
        // The partial statistics are kept.
        assert_eq!(end.result.unwrap().files, 1200);
        // No pod at all: the Job's condition still tells.
        let end = job_end(&job, None).unwrap();
        assert_eq!(end.reason, Reason::DeadlineExceeded);
    }

    #[test]
    fn an_image_that_cannot_be_pulled_is_the_reason_not_the_deadline_it_led_to() {
        let waiting = ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("ImagePullBackOff".into()),
                message: Some("Back-off pulling image".into()),
            }),
            ..ContainerState::default()
        };
        let pod = pod(waiting);
        assert_eq!(
            pod_blocked(&pod).map(|(reason, _)| reason),
            Some(Reason::ImagePullFailed)
        );
        let end = job_end(&job(Some(("Failed", "BackoffLimitExceeded"))), Some(&pod)).unwrap();
        assert_eq!(end.reason, Reason::ImagePullFailed);
        assert!(end
            .message
            .unwrap()
            .contains("ghcr.io/neverwiped/sidecar:0.1.0"));
    }

    #[test]
    fn a_crash_without_a_result_quotes_what_it_left() {
        let job = job(Some(("Failed", "BackoffLimitExceeded")));
        let end = job_end(
            &job,
            Some(&pod(terminated(
                101,
                "Error",
                "thread 'main' panicked at src/main.rs:3",
            ))),
        )
        .unwrap();
        assert_eq!(end.reason, Reason::SidecarCrashed);
        assert_eq!(
            end.message.as_deref(),
            Some("the sidecar exited with code 101 (Error) without a result: thread 'main' panicked at src/main.rs:3")
        );
        let complete = self::job(Some(("Complete", "CompletionsReached")));
        let end = job_end(&complete, Some(&pod(terminated(0, "Completed", "")))).unwrap();
        assert_eq!(
            (end.outcome, end.reason.as_str()),
            (RunOutcome::Failed, "NoResult")
        );
    }

    #[test]
    fn a_job_failed_without_a_pod_reports_the_jobs_reason() {
        let end = job_end(&job(Some(("Failed", "BackoffLimitExceeded"))), None).unwrap();
        assert_eq!(end.reason, Reason::JobFailed);
        assert!(end.message.unwrap().contains("BackoffLimitExceeded"));
    }

    fn record(name: &str, result: RunOutcome, completed: &str) -> RunRecord {
        let reason = if result.is_success() {
            "Succeeded"
        } else {
            "BackupFailed"
        };
        RunRecord {
            completion_time: Some(Time(at(completed))),
            ..RunRecord::without_figures(name.into(), RunTrigger::Schedule, result, reason.into())
        }
    }

    #[test]
    fn history_is_newest_first_bounded_and_idempotent() {
        let mut status = BackupPlanStatus {
            active_run: Some(ActiveRun {
                kind: RunKind::Backup,
                job_name: "run-0".into(),
                trigger: RunTrigger::Schedule,
                scheduled_time: None,
                start_time: None,
            }),
            ..BackupPlanStatus::default()
        };
        let now = at("2026-12-01T00:00:00Z");
        record_backup_run(
            &mut status,
            record("run-0", RunOutcome::Succeeded, "2026-11-01T00:00:00Z"),
            now,
        );
        assert_eq!(status.active_run, None);
        for day in 1..=12 {
            let outcome = if day == 12 {
                RunOutcome::Failed
            } else {
                RunOutcome::Succeeded
            };
            record_backup_run(
                &mut status,
                record(
                    &format!("run-{day}"),
                    outcome,
                    &format!("2026-11-{day:02}T03:00:00Z"),
                ),
                now,
            );
        }
        record_backup_run(
            &mut status,
            record("run-12", RunOutcome::Failed, "2026-11-12T03:00:00Z"),
            now,
        );
        assert_eq!(status.history.len(), HISTORY_LIMIT);
        assert_eq!(status.history[0].job_name, "run-12");
        assert_eq!(status.history[9].job_name, "run-3");
        assert_eq!(status.last_run.as_ref().unwrap().job_name, "run-12");
        assert_eq!(
            status.last_successful_time,
            Some(Time(at("2026-11-11T03:00:00Z")))
        );
    }

    #[test]
    fn conditions_tell_ready_running_and_last_result() {
        let now = at("2026-12-01T00:00:00Z");
        let mut status = BackupPlanStatus::default();
        set_backup_plan_conditions(
            &mut status,
            &[],
            "next run at 2026-12-01T01:30:00Z",
            Some(4),
            now,
        );
        let get = |status: &BackupPlanStatus, type_: &str| {
            let c = crate::conditions::find_condition(&status.conditions, type_).unwrap();
            (c.status.clone(), c.reason.clone())
        };
        assert_eq!(get(&status, "Ready"), ("True".into(), "Ready".into()));
        assert_eq!(get(&status, "Running"), ("False".into(), "Idle".into()));
        assert_eq!(
            get(&status, "LastBackupSucceeded"),
            ("Unknown".into(), "NoBackupYet".into())
        );

        status.last_run = Some(record("run-1", RunOutcome::Failed, "2026-11-30T03:00:00Z"));
        let problems = [Problem::SecretNotFound {
            name: "repo".into(),
            field: "spec.repository.passwordSecretRef".into(),
        }];
        set_backup_plan_conditions(&mut status, &problems, "", Some(5), now);
        assert_eq!(
            get(&status, "Ready"),
            ("False".into(), "SecretNotFound".into())
        );
        assert_eq!(
            get(&status, "LastBackupSucceeded"),
            ("False".into(), "BackupFailed".into())
        );
        assert!(status
            .conditions
            .iter()
            .all(|c| c.observed_generation == Some(5)));
    }

    #[test]
    fn a_finished_restore_reports_phase_counts_and_snapshot() {
        let mut restored = result(ExitStatus::Success);
        restored.operation = Operation::Restore;
        let job = job(Some(("Complete", "CompletionsReached")));
        let end = job_end(
            &job,
            Some(&pod(terminated(
                0,
                "Completed",
                &restored.to_termination_message(),
            ))),
        )
        .unwrap();
        let mut status = RestoreStatus::default();
        finish_restore(&mut status, &end, Some(1), at("2026-12-01T00:00:00Z"));
        assert_eq!(status.phase, Some(RestorePhase::Succeeded));
        assert_eq!(status.snapshot_id.as_deref(), Some("4f2a9c1b0d"));
        assert_eq!(status.bytes_restored, Some(5_000_000_000));
        assert_eq!(status.conditions[0].type_, "Complete");
        assert_eq!(status.conditions[0].status, "True");

        let mut failed = restored.clone();
        failed.status = ExitStatus::Failed;
        failed.snapshot_id = None;
        failed.error = Some("target database \"orders\" is not empty".into());
        let end = job_end(
            &job,
            Some(&pod(terminated(
                1,
                "Error",
                &failed.to_termination_message(),
            ))),
        )
        .unwrap();
        let mut status = RestoreStatus::default();
        finish_restore(&mut status, &end, Some(1), at("2026-12-01T00:00:00Z"));
        assert_eq!(status.phase, Some(RestorePhase::Failed));
        assert_eq!(status.conditions[0].reason, "RestoreFailed");
        assert_eq!(
            status.message.as_deref(),
            Some("target database \"orders\" is not empty")
        );
    }
}
