//! The describe step of a Restore that needs its snapshot's record (see
//! [`crate::restore_record`]): where it is ([`describe_step`], from the describe Job), the
//! Restore checked before it ([`before_describe`]) and after it ([`as_checked`]), and what each
//! step decides. The describe Job stays, owned by the Restore, so a later reconcile reads the
//! same record again until the restore Job exists.

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::effects::PlannedEvent;
use super::pod_of;
use crate::api::{Restore, RestorePhase, RestoreStatus, RunOutcome};
use crate::conditions::Reason;
use crate::recorder::EventType;
use crate::restore_record::{needs_record, resolve, Described, RecordProblem};
use crate::status::{job_state, JobEnd, JobState};

/// Where a Restore is with its snapshot's record, while it has no restore Job.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum DescribeStep {
    /// The Restore lists everything it restores: no describe Job.
    #[default]
    NotNeeded,
    /// No describe Job yet: it is created once the Restore's source checks out.
    Start,
    /// The describe Job runs.
    Running { job_name: String },
    /// The describe Job failed (or ended without a record): the Restore fails with it. `delete`:
    /// its pod will not start by itself, and the Job is removed.
    Failed { end: Box<JobEnd>, delete: bool },
    /// The describe Job found the snapshot and its record.
    Described(Box<Described>),
}

/// The describe step of `restore`, from its describe Job (`None`: none yet) and that Job's pods.
pub fn describe_step(
    restore: &Restore,
    job: Option<&Job>,
    pods: &[Pod],
    now: Timestamp,
) -> DescribeStep {
    if !needs_record(&restore.spec) {
        return DescribeStep::NotNeeded;
    }
    let Some(job) = job else {
        return DescribeStep::Start;
    };
    let (end, delete) = match job_state(job, pod_of(job, pods), now) {
        JobState::Running => {
            return DescribeStep::Running {
                job_name: job.name_any(),
            }
        }
        JobState::Ended(end) => (end, false),
        JobState::Blocked(end) => (end, true),
    };
    if !end.outcome.is_success() {
        return DescribeStep::Failed {
            end: Box::new(end),
            delete,
        };
    }
    match end.result.as_ref().and_then(Described::of) {
        Some(described) => DescribeStep::Described(Box::new(described)),
        None => DescribeStep::Failed {
            end: Box::new(JobEnd {
                outcome: RunOutcome::Failed,
                reason: Reason::DescribeFailed,
                message: Some(
                    "the describe Job ended without the snapshot's record in its result: is the sidecar image older than the operator?".into(),
                ),
                ..end
            }),
            delete: false,
        },
    }
}

/// `restore` as checked before its snapshot is described: what it reads from, and the access
/// that needs. Its volumes and databases are checked once the record tells what they are.
pub fn before_describe(restore: &Restore) -> Restore {
    let mut checked = restore.clone();
    checked.spec.volumes.clear();
    checked.spec.databases.clear();
    checked.spec.all_volumes = false;
    checked.spec.all_databases = None;
    checked
}

/// The Restore whose claims, Secrets and access the reconciler fetches and reviews at `step`.
pub fn as_checked(restore: &Restore, step: &DescribeStep) -> Restore {
    match step {
        DescribeStep::NotNeeded => restore.clone(),
        DescribeStep::Described(described) => {
            resolve(restore, described).unwrap_or_else(|_| before_describe(restore))
        }
        _ => before_describe(restore),
    }
}

/// The describe Job runs: the Restore shows it.
pub fn describing(job_name: &str, status: &mut RestoreStatus) {
    status.phase = Some(RestorePhase::Describing);
    status.describe_job_name = Some(job_name.to_owned());
}

/// A Job end for a Restore that fails with `problem` of its snapshot's record.
pub fn record_failure(problem: &RecordProblem, now: Timestamp) -> JobEnd {
    JobEnd {
        outcome: RunOutcome::Failed,
        reason: problem.reason(),
        message: Some(problem.to_string()),
        result: None,
        start_time: None,
        completion_time: Some(now),
    }
}

/// The Event of a describe Job that read the record the restore Job now runs on.
pub fn described_event(described: &Described, created_claims: usize) -> PlannedEvent {
    let sources = &described.sources;
    PlannedEvent {
        type_: EventType::Normal,
        reason: Reason::SnapshotDescribed,
        note: format!(
            "snapshot {} (taken at {}) records {} claim(s) and {} database(s); {created_claims} claim(s) created from the record",
            described.snapshot_id,
            described.snapshot_time.as_deref().unwrap_or("an unknown time"),
            sources.claims.len(),
            sources.databases.len()
        ),
    }
}
