//! What occupies a plan now. A plan runs one thing at a time — a backup (its Job, or the hook
//! Jobs and VolumeSnapshots its Job waits for) or a prune or check, which locks the repository — and this
//! type is that rule: there is no way to hold two of them.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::hooks::RunHooks;
use crate::api::{ActiveRun, RunKind, RunTrigger};
use crate::csi::VolumeSnapshot;
use crate::volumes::SnapshotRunInfo;

/// What occupies a plan now.
#[derive(Debug, Clone)]
pub enum Occupant<'a> {
    /// Nothing runs: a due backup, prune or check may start.
    Idle,
    /// A backup Job runs (or was created in this reconcile, or its VolumeSnapshots were).
    Backup(ActiveRun),
    /// A backup's VolumeSnapshots are being taken (between its hook Jobs, when the plan has
    /// hooks); its Job starts once they are ready.
    PreparingSnapshots(PreparingRun<'a>),
    /// A prune or check Job runs (or was created in this reconcile).
    Maintenance(ActiveRun),
}

impl Occupant<'_> {
    /// The run the status shows as active; `None` when idle.
    pub fn active_run(&self) -> Option<&ActiveRun> {
        match self {
            Occupant::Idle => None,
            Occupant::Backup(run) | Occupant::Maintenance(run) => Some(run),
            Occupant::PreparingSnapshots(preparing) => Some(&preparing.run),
        }
    }

    pub fn is_idle(&self) -> bool {
        matches!(self, Occupant::Idle)
    }
}

/// A backup run whose hook Jobs or VolumeSnapshots exist but whose Job does not yet.
#[derive(Debug, Clone)]
pub struct PreparingRun<'a> {
    /// The run as the status shows it; its Job will have its name.
    pub run: ActiveRun,
    /// What started the run, read back from its snapshots' annotations.
    pub info: SnapshotRunInfo,
    /// The run's VolumeSnapshots taken so far (none while its pre hooks run, or after they
    /// failed).
    pub snapshots: Vec<&'a VolumeSnapshot>,
    /// Its hook Jobs (none for a plan without hooks).
    pub hooks: RunHooks,
    /// Why its snapshots failed (one failed, or the deadline passed with some not ready); with
    /// hook Jobs, the post hooks run before the run is recorded as failed.
    pub snapshot_failure: Option<String>,
}

impl PreparingRun<'_> {
    /// The run's snapshot of the claim named `claim`.
    pub fn snapshot_of(&self, claim: &str) -> Option<&VolumeSnapshot> {
        use kube::ResourceExt;
        self.snapshots.iter().copied().find(|snapshot| {
            snapshot
                .annotations()
                .get(crate::job::ANNOTATION_SOURCE_CLAIM)
                .map(String::as_str)
                == Some(claim)
        })
    }
}

/// The status entry of a backup run.
pub fn backup_run(
    job_name: String,
    trigger: RunTrigger,
    scheduled_time: Option<Timestamp>,
    start_time: Option<Time>,
) -> ActiveRun {
    ActiveRun {
        job_name,
        kind: RunKind::Backup,
        trigger,
        scheduled_time: scheduled_time.map(Time),
        start_time,
    }
}
