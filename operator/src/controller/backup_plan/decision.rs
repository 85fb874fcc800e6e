//! What the pure part decides for a plan, and how that becomes the effects the reconciler writes.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use crate::api::{
    BackupPlanStatus, DrillRecord, MaintenanceRecord, RunOutcome, RunRecord, RunTrigger,
};
use crate::conditions::Reason;
use crate::controller::effects::{Create, Delete, Effects, PlannedEvent};
use crate::csi::VolumeSnapshot;
use crate::job::{CopyPruneJob, MaintenanceKind, PasswordCopy, UnknownTrigger};
use crate::recorder::EventType;
use crate::status::record_backup_run;

/// What to do for a plan.
#[derive(Debug, Clone)]
pub struct PlanDecision {
    /// The status to apply.
    pub status: BackupPlanStatus,
    /// A backup, prune or check Job to create.
    pub create: Option<Job>,
    /// Copy Jobs to create, one per destination at most.
    pub create_copies: Vec<Job>,
    /// The restore drill Job to create.
    pub create_drill: Option<Job>,
    /// Prune Jobs of copy destinations to create (with their password copies when they run in
    /// the operator's namespace), one per destination at most.
    pub create_copy_prunes: Vec<CopyPruneJob>,
    /// For a protected plan's prune Job (in the operator's namespace): the copy of the plan's
    /// repository password it mounts, created after it and owned by it.
    pub password_copy: Option<PasswordCopy>,
    /// VolumeSnapshots to take for a run that starts (its Job follows once they are ready).
    pub create_snapshots: Vec<VolumeSnapshot>,
    /// Claims to clone from a run's ready VolumeSnapshots, for its Job to mount.
    pub create_claims: Vec<PersistentVolumeClaim>,
    /// VolumeSnapshots of runs that are over.
    pub delete_snapshots: Vec<String>,
    /// Cloned claims of runs that are over.
    pub delete_claims: Vec<String>,
    /// Jobs to delete: stuck ones already recorded as failed, and finished ones beyond the kept.
    pub delete: Vec<String>,
    /// Finished prune Jobs of the plan in the operator's namespace to delete, as (namespace,
    /// name), with their password copies.
    pub delete_remote: Vec<(String, String)>,
    pub events: Vec<PlannedEvent>,
    /// Runs that finished in this reconcile, with their reasons (for metrics).
    pub finished: Vec<(Reason, RunRecord)>,
    /// Copies that finished in this reconcile, by destination (for metrics).
    pub finished_copies: Vec<(String, RunOutcome)>,
    /// A due copy waits for a slot under the concurrency limits.
    pub copies_queued: bool,
    /// Prunes of copy destinations that finished in this reconcile, by destination (for
    /// metrics).
    pub finished_copy_prunes: Vec<(String, MaintenanceRecord)>,
    /// Prunes and checks that finished in this reconcile (for metrics).
    pub finished_maintenance: Vec<(MaintenanceKind, MaintenanceRecord)>,
    /// Drills that finished in this reconcile (for metrics).
    pub finished_drills: Vec<DrillRecord>,
    /// A due drill waits (for a slot, or for its minute's name): look again this soon.
    pub drill_recheck: Option<Duration>,
    /// Scheduled runs newly counted as missed (for metrics).
    pub newly_missed: u32,
    /// The nominal time between two scheduled backups (for metrics and alerts); `None` while
    /// the plan is suspended or not ready.
    pub schedule_interval: Option<SignedDuration>,
    pub requeue_after: Duration,
}

impl PlanDecision {
    /// A decision that changes nothing yet, starting from `status`.
    pub fn starting_from(status: BackupPlanStatus) -> PlanDecision {
        PlanDecision {
            status,
            create: None,
            create_copies: Vec::new(),
            create_drill: None,
            create_copy_prunes: Vec::new(),
            password_copy: None,
            create_snapshots: Vec::new(),
            create_claims: Vec::new(),
            delete_snapshots: Vec::new(),
            delete_claims: Vec::new(),
            delete: Vec::new(),
            delete_remote: Vec::new(),
            events: Vec::new(),
            finished: Vec::new(),
            finished_copies: Vec::new(),
            finished_copy_prunes: Vec::new(),
            copies_queued: false,
            finished_maintenance: Vec::new(),
            finished_drills: Vec::new(),
            drill_recheck: None,
            newly_missed: 0,
            schedule_interval: None,
            requeue_after: Duration::ZERO,
        }
    }

    /// Records a finished backup run that ended for `reason`: on the status (the record's
    /// `reason` is its string), in an Event, and for the metrics.
    pub fn record_backup(&mut self, reason: Reason, mut record: RunRecord, now: Timestamp) {
        record.reason = reason.into();
        self.events.push(finished_event(&record));
        record_backup_run(&mut self.status, record.clone(), now);
        self.finished.push((reason, record));
    }

    /// The trigger `object` (a Job or VolumeSnapshot of a run) names; one that cannot be read is
    /// reported in a Warning Event, and the run counts as a scheduled one.
    pub fn trigger(
        &mut self,
        object: &str,
        parsed: Result<RunTrigger, UnknownTrigger>,
    ) -> RunTrigger {
        parsed.unwrap_or_else(|error| {
            self.events.push(PlannedEvent {
                type_: EventType::Warning,
                reason: Reason::UnknownTrigger,
                note: format!("{object}: {error}; the run counts as a scheduled one"),
            });
            RunTrigger::Schedule
        })
    }

    /// Deletes the Job `name` (once, however many reasons there are).
    pub fn delete_job(&mut self, name: String) {
        if !self.delete.contains(&name) {
            self.delete.push(name);
        }
    }

    /// What the reconciler writes: snapshots, clones and the Job first (a status saying a run
    /// started is never applied before the run's objects exist), then the status, the Events, and
    /// the deletes.
    pub fn effects(&self) -> Effects<BackupPlanStatus> {
        let create =
            (self
                .create_snapshots
                .iter()
                .cloned()
                .map(|s| Create::Snapshot(Box::new(s))))
            .chain(
                self.create_claims
                    .iter()
                    .cloned()
                    .map(|c| Create::Claim(Box::new(c))),
            )
            .chain(
                self.create
                    .iter()
                    .cloned()
                    .map(|job| match &self.password_copy {
                        Some(copy) => Create::RemoteJob(Box::new(job), copy.clone()),
                        None => Create::Job(Box::new(job)),
                    }),
            )
            .chain(
                self.create_copies
                    .iter()
                    .cloned()
                    .map(|job| Create::Job(Box::new(job))),
            )
            .chain(
                self.create_drill
                    .iter()
                    .cloned()
                    .map(|job| Create::Job(Box::new(job))),
            )
            .chain(self.create_copy_prunes.iter().cloned().map(
                |pruned| match pruned.password_copy {
                    Some(copy) => Create::RemoteJob(Box::new(pruned.job), copy),
                    None => Create::Job(Box::new(pruned.job)),
                },
            ))
            .collect();
        let remote = self.delete_remote.iter().cloned();
        let delete = (self.delete.iter().cloned().map(Delete::Job))
            .chain(remote.map(|(namespace, name)| Delete::RemoteJob { namespace, name }))
            .chain(self.delete_claims.iter().cloned().map(Delete::Claim))
            .chain(self.delete_snapshots.iter().cloned().map(Delete::Snapshot))
            .collect();
        Effects {
            create,
            status: self.status.clone(),
            events: self.events.clone(),
            delete,
        }
    }
}

fn finished_event(record: &RunRecord) -> PlannedEvent {
    match record.result {
        RunOutcome::Failed => PlannedEvent {
            type_: EventType::Warning,
            reason: Reason::BackupFailed,
            note: format!(
                "{} ({}): {}",
                record.job_name,
                record.reason,
                record.message.as_deref().unwrap_or("no message")
            ),
        },
        _ => PlannedEvent {
            type_: EventType::Normal,
            reason: Reason::BackupSucceeded,
            note: format!(
                "{} wrote snapshot {}{}",
                record.job_name,
                record.snapshot_id.as_deref().unwrap_or("?"),
                record
                    .message
                    .as_deref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default()
            ),
        },
    }
}
