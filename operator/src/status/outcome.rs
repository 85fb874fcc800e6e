//! What a finished Job means, read: the sidecar's result from the terminated container's
//! message or, when there is none, the real reason the pod ended (out of memory, deadline, image
//! pull…); and whether a Job has finished at all, which the queue asks too.

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Pod};
use neverwiped_contract::text::escaped;
use neverwiped_contract::{ExitStatus, Operation, RunResult};

use crate::api::RunOutcome;
use crate::conditions::{ConditionStatus, Reason};
use crate::job::{ANNOTATION_DEADLINE, SIDECAR_CONTAINER};
use crate::status::streams::stream_or_hook_failure;

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
        status if result.operation == Operation::Drill => {
            let (reason, message) = drill_failure(result, status);
            (RunOutcome::Failed, reason, Some(message))
        }
        status => {
            // A failed stream or a pre hook that stopped the read says more than "failed".
            if let Some((reason, message)) = stream_or_hook_failure(result) {
                return (RunOutcome::Failed, reason, Some(message));
            }
            let reason = match status {
                ExitStatus::WrongPassword => Reason::WrongPassword,
                ExitStatus::NoRepository => Reason::RepositoryNotFound,
                ExitStatus::LockFailed => Reason::RepositoryLocked,
                ExitStatus::NoSnapshotOfHost => Reason::SnapshotNotFound,
                _ => match result.operation {
                    Operation::Restore => Reason::RestoreFailed,
                    Operation::Describe => Reason::DescribeFailed,
                    Operation::Prune => Reason::PruneFailed,
                    Operation::Check if result.check.is_some_and(|c| c.problems > 0) => {
                        Reason::RepositoryDamaged
                    }
                    Operation::Check => Reason::CheckFailed,
                    Operation::Copy => Reason::CopyFailed,
                    Operation::Hooks => Reason::HookFailed,
                    Operation::Drill
                    | Operation::Init
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

/// Why a drill failed: the data differs (exit 14) in files (`VerifyFailed`, before all) or in a
/// database whose dump did not load or whose rows differ (`DumpDidNotLoad`, its entry's error);
/// a drill that could not run (no server could start: exit 1) or what fails any run (a wrong
/// password, no snapshot of the plan…) keeps the usual reasons.
fn drill_failure(result: &RunResult, status: ExitStatus) -> (Reason, String) {
    let stats = result.drill.as_ref();
    let failed_database = stats.and_then(|d| d.databases.iter().find(|db| db.error.is_some()));
    let files_differ = stats.is_some_and(|d| d.volumes.iter().any(|v| v.mismatched > 0));
    let reason = match status {
        ExitStatus::VerifyFailed if !files_differ && failed_database.is_some() => {
            Reason::DumpDidNotLoad
        }
        ExitStatus::VerifyFailed => Reason::VerifyFailed,
        ExitStatus::WrongPassword => Reason::WrongPassword,
        ExitStatus::NoRepository => Reason::RepositoryNotFound,
        ExitStatus::LockFailed => Reason::RepositoryLocked,
        ExitStatus::NoSnapshotOfHost => Reason::SnapshotNotFound,
        _ => Reason::DrillFailed,
    };
    let fallback = || match (reason, failed_database) {
        (Reason::VerifyFailed, _) => {
            let differing: Vec<String> = (stats.iter().flat_map(|d| &d.volumes))
                .filter(|v| v.mismatched > 0)
                .map(|v| format!("{} in {}", v.mismatched, v.path))
                .collect();
            format!("files differ from the snapshot: {}", differing.join(", "))
        }
        (Reason::DumpDidNotLoad, Some(database)) => format!(
            "database {}: {}",
            database.name,
            database.error.as_deref().unwrap_or_default()
        ),
        _ => format!("the sidecar reported {status:?}"),
    };
    (reason, result.error.clone().unwrap_or_else(fallback))
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
