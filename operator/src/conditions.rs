//! Condition types and reasons: part of the API, since users and alerts match on them.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Condition types.
pub mod types {
    /// The spec is valid and everything it names exists.
    pub const READY: &str = "Ready";
    /// A backup of the plan is in progress.
    pub const RUNNING: &str = "Running";
    /// Whether the plan's last finished backup wrote a snapshot.
    pub const LAST_BACKUP_SUCCEEDED: &str = "LastBackupSucceeded";
    /// A Restore is over (`True`: it succeeded; `False` with a reason: it failed).
    pub const COMPLETE: &str = "Complete";
}

/// Reasons of conditions, Events and run records.
pub mod reasons {
    // Ready=True.
    /// The spec is valid and everything it names exists.
    pub const READY: &str = "Ready";

    // Ready=False: what only the operator can judge. Each comes with a message naming the field
    // and what to do.
    /// `spec.schedule` does not parse as cron.
    pub const INVALID_SCHEDULE: &str = "InvalidSchedule";
    /// `spec.timeZone` is not an IANA time zone.
    pub const INVALID_TIME_ZONE: &str = "InvalidTimeZone";
    /// `spec.deadline` does not parse.
    pub const INVALID_DEADLINE: &str = "InvalidDeadline";
    /// A Secret the spec names does not exist.
    pub const SECRET_NOT_FOUND: &str = "SecretNotFound";
    /// A Secret the spec names exists but lacks the key.
    pub const SECRET_KEY_NOT_FOUND: &str = "SecretKeyNotFound";
    /// A PersistentVolumeClaim named by `claimName` does not exist.
    pub const VOLUME_NOT_FOUND: &str = "VolumeNotFound";
    /// A volume `selector` matches no PersistentVolumeClaim.
    pub const NO_VOLUMES_SELECTED: &str = "NoVolumesSelected";
    /// A volume `selector` is not a valid label selector.
    pub const INVALID_SELECTOR: &str = "InvalidSelector";
    /// `Direct` mode: ReadWriteOnce volumes in use on different nodes cannot be read by one pod.
    pub const VOLUMES_ON_DIFFERENT_NODES: &str = "VolumesOnDifferentNodes";
    /// `Direct` mode: a ReadWriteOncePod volume in use cannot be mounted by a second pod.
    pub const VOLUME_IN_USE_EXCLUSIVELY: &str = "VolumeInUseExclusively";
    /// `copyMethod: Snapshot` in a cluster that does not serve the CSI snapshot API
    /// (`snapshot.storage.k8s.io/v1`).
    pub const SNAPSHOT_NOT_AVAILABLE: &str = "SnapshotNotAvailable";
    /// `volumeSnapshotClassName` names a VolumeSnapshotClass that does not exist.
    pub const VOLUME_SNAPSHOT_CLASS_NOT_FOUND: &str = "VolumeSnapshotClassNotFound";
    /// `copyMethod: Snapshot`: no VolumeSnapshotClass for a volume's CSI driver.
    pub const NO_VOLUME_SNAPSHOT_CLASS: &str = "NoVolumeSnapshotClass";
    /// A Restore names a BackupPlan that does not exist.
    pub const BACKUP_PLAN_NOT_FOUND: &str = "BackupPlanNotFound";
    /// A Restore's database entry has no `type` and the plan has no entry of that name.
    pub const UNKNOWN_DATABASE: &str = "UnknownDatabase";
    /// A Restore's target PersistentVolumeClaim does not exist (and `createClaim` is not set).
    pub const TARGET_VOLUME_NOT_FOUND: &str = "TargetVolumeNotFound";
    /// A Restore asks to create a PersistentVolumeClaim that already exists.
    pub const TARGET_VOLUME_EXISTS: &str = "TargetVolumeExists";

    // Running.
    /// A backup Job is running.
    pub const BACKUP_RUNNING: &str = "BackupRunning";
    /// A run waits for its VolumeSnapshots to be ready before its Job starts.
    pub const PREPARING_SNAPSHOTS: &str = "PreparingSnapshots";
    /// A prune Job is running.
    pub const PRUNE_RUNNING: &str = "PruneRunning";
    /// A check Job is running.
    pub const CHECK_RUNNING: &str = "CheckRunning";
    /// No backup, prune or check is running.
    pub const IDLE: &str = "Idle";

    // LastBackupSucceeded, run records, Restore's Complete.
    /// No backup has finished yet.
    pub const NO_BACKUP_YET: &str = "NoBackupYet";
    /// Everything asked for was done.
    pub const SUCCEEDED: &str = "Succeeded";
    /// A snapshot was written, but some files could not be read.
    pub const SUCCEEDED_WITH_WARNINGS: &str = "SucceededWithWarnings";
    /// The sidecar reported a failure of the backup.
    pub const BACKUP_FAILED: &str = "BackupFailed";
    /// A VolumeSnapshot of the run failed, or was not ready within the run's deadline.
    pub const SNAPSHOT_FAILED: &str = "SnapshotFailed";
    /// The sidecar reported a failure of the restore.
    pub const RESTORE_FAILED: &str = "RestoreFailed";
    /// The sidecar reported a failure of a prune.
    pub const PRUNE_FAILED: &str = "PruneFailed";
    /// A check could not be carried out.
    pub const CHECK_FAILED: &str = "CheckFailed";
    /// A check found problems in the repository: data is missing or damaged.
    pub const REPOSITORY_DAMAGED: &str = "RepositoryDamaged";
    /// The repository password opens no key of the repository.
    pub const WRONG_PASSWORD: &str = "WrongPassword";
    /// There is no repository at the URL.
    pub const REPOSITORY_NOT_FOUND: &str = "RepositoryNotFound";
    /// Another process holds the repository's lock.
    pub const REPOSITORY_LOCKED: &str = "RepositoryLocked";
    /// The run was still going at its deadline and was stopped.
    pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
    /// The sidecar ran out of memory.
    pub const OOM_KILLED: &str = "OOMKilled";
    /// The sidecar image could not be pulled.
    pub const IMAGE_PULL_FAILED: &str = "ImagePullFailed";
    /// The container could not be created, e.g. a Secret key it needs is missing.
    pub const CONTAINER_CONFIG_ERROR: &str = "ContainerConfigError";
    /// The sidecar exited with an error and no result.
    pub const SIDECAR_CRASHED: &str = "SidecarCrashed";
    /// The sidecar ended without writing a readable result.
    pub const NO_RESULT: &str = "NoResult";
    /// The pod was evicted or otherwise stopped by Kubernetes.
    pub const POD_FAILED: &str = "PodFailed";
    /// The Job failed for a reason its status gives, and no pod explains it.
    pub const JOB_FAILED: &str = "JobFailed";
    /// The Job disappeared before it finished.
    pub const JOB_LOST: &str = "JobLost";

    // Ready=False: who the pods that read or write volumes run as.
    /// `spec.mover.mode` is `Privileged` in a namespace the cluster admin did not allow
    /// (`policy.privilegedMoverNamespaces`); no Job is created.
    pub const PRIVILEGED_MOVER_NOT_ALLOWED: &str = "PrivilegedMoverNotAllowed";
}

/// Sets the condition of `type_`: a changed status moves `lastTransitionTime` to `now`, an
/// unchanged one keeps it, so watchers see when things changed, not when they were last looked at.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: Timestamp,
) {
    let message = message.into();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            if ConditionStatus::of(existing) != status {
                existing.last_transition_time = Time(now);
            }
            existing.status = status.as_str().to_owned();
            existing.reason = reason.to_owned();
            existing.message = message;
            existing.observed_generation = observed_generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_owned(),
            status: status.as_str().to_owned(),
            reason: reason.to_owned(),
            message,
            observed_generation,
            last_transition_time: Time(now),
        }),
    }
}

/// The condition of `type_`, when present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// A condition's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    /// The string Kubernetes uses.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }

    /// The status of `condition`; a value Kubernetes does not define reads as `Unknown`.
    pub fn of(condition: &Condition) -> ConditionStatus {
        ConditionStatus::parse(&condition.status)
    }

    /// A status as Kubernetes writes it (in any kind's conditions, a Job's among them).
    pub fn parse(status: &str) -> ConditionStatus {
        match status {
            "True" => ConditionStatus::True,
            "False" => ConditionStatus::False,
            _ => ConditionStatus::Unknown,
        }
    }

    /// `True` or `False`.
    pub fn from_bool(value: bool) -> ConditionStatus {
        if value {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_when_the_status_changes() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let t2: Timestamp = "2026-01-01T02:00:00Z".parse().unwrap();
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            types::READY,
            ConditionStatus::True,
            reasons::READY,
            "ok",
            Some(1),
            t0,
        );
        set_condition(
            &mut conditions,
            types::READY,
            ConditionStatus::True,
            reasons::READY,
            "still ok",
            Some(2),
            t1,
        );
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, Time(t0));
        assert_eq!(conditions[0].message, "still ok");
        assert_eq!(conditions[0].observed_generation, Some(2));
        set_condition(
            &mut conditions,
            types::READY,
            ConditionStatus::False,
            reasons::SECRET_NOT_FOUND,
            "gone",
            Some(2),
            t2,
        );
        assert_eq!(conditions[0].last_transition_time, Time(t2));
        assert_eq!(conditions[0].reason, "SecretNotFound");
    }
}
