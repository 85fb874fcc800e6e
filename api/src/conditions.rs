//! Condition types and [`Reason`]s: part of the API, since users and alerts match on them.

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
    /// `False` while a volume selector of the plan matches no claim (its other volumes and
    /// databases are backed up); absent otherwise.
    pub const VOLUMES_SELECTED: &str = "VolumesSelected";
    /// Whether the gate's last listing of the plan's snapshots had its last successful backup's
    /// snapshot (absent before a listing follows a success).
    pub const SNAPSHOTS_LISTED: &str = "SnapshotsListed";
    /// `True` while a backup far outside the plan's usual changes waits for an admin's
    /// acknowledgement (the plan's retention is paused meanwhile); `False` once acknowledged or
    /// while the nights look usual; absent before a backup with a parent was judged.
    pub const SUSPICIOUS_CHANGE: &str = "SuspiciousChange";
}

/// Declares [`Reason`]: each variant with its doc comment and the string the API carries. A new
/// reason is one more line: `/// what it means` and `Variant => "Variant",`.
macro_rules! reasons {
    ($($(#[doc = $doc:literal])* $variant:ident => $wire:literal,)+) => {
        /// Why a condition is as it is, why an Event was published, how a run ended: part of the
        /// API (conditions, Events, run records, metric labels), since users and alerts match on
        /// the strings [`Reason::as_str`] gives.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Reason {
            $($(#[doc = $doc])* $variant,)+
        }

        impl Reason {
            /// Every reason, in the order declared.
            pub const ALL: &'static [Reason] = &[$(Reason::$variant,)+];

            /// The string conditions, Events, run records and metrics carry.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$variant => $wire,)+
                }
            }
        }
    };
}

reasons! {
    // Ready=True.
    /// The spec is valid and everything it names exists.
    Ready => "Ready",
    /// Ready, but no maintenance credentials cover the plan's repository: its backups' own login
    /// forgets and prunes, so whoever holds it can delete the plan's history (the cluster admin's
    /// protection window still holds; `docs/security.md`). Also a Warning Event.
    BackupLoginCanDeleteHistory => "BackupLoginCanDeleteHistory",

    // Ready=False: what only the operator can judge. Each comes with a message naming the field
    // and what to do.
    /// `spec.schedule` does not parse as cron.
    InvalidSchedule => "InvalidSchedule",
    /// `spec.timeZone` is not an IANA time zone.
    InvalidTimeZone => "InvalidTimeZone",
    /// `spec.deadline` does not parse.
    InvalidDeadline => "InvalidDeadline",
    /// A Secret the spec names does not exist.
    SecretNotFound => "SecretNotFound",
    /// A Secret the spec names exists but lacks the key.
    SecretKeyNotFound => "SecretKeyNotFound",
    /// A PersistentVolumeClaim named by `claimName` does not exist.
    VolumeNotFound => "VolumeNotFound",
    /// A volume `selector` matches no PersistentVolumeClaim.
    NoVolumesSelected => "NoVolumesSelected",
    /// A volume `selector` is not a valid label selector.
    InvalidSelector => "InvalidSelector",
    /// `Direct` mode: ReadWriteOnce volumes in use on different nodes cannot be read by one pod.
    VolumesOnDifferentNodes => "VolumesOnDifferentNodes",
    /// `Direct` mode: a ReadWriteOncePod volume in use cannot be mounted by a second pod.
    VolumeInUseExclusively => "VolumeInUseExclusively",
    /// `copyMethod: Snapshot` in a cluster that does not serve the CSI snapshot API
    /// (`snapshot.storage.k8s.io/v1`).
    SnapshotNotAvailable => "SnapshotNotAvailable",
    /// `volumeSnapshotClassName` names a VolumeSnapshotClass that does not exist.
    VolumeSnapshotClassNotFound => "VolumeSnapshotClassNotFound",
    /// `copyMethod: Snapshot`: no VolumeSnapshotClass for a volume's CSI driver.
    NoVolumeSnapshotClass => "NoVolumeSnapshotClass",
    /// A Restore names a BackupPlan that does not exist.
    BackupPlanNotFound => "BackupPlanNotFound",
    /// A Restore's `copy` names no entry of its BackupPlan's `spec.copies`.
    CopyNotFound => "CopyNotFound",
    /// A Restore's database entry has no `type` and the plan has no entry of that name (or the
    /// Restore names a repository alone, where only `type` says the engine).
    UnknownDatabase => "UnknownDatabase",
    /// A Restore's target PersistentVolumeClaim does not exist (and `createClaim` is not set).
    TargetVolumeNotFound => "TargetVolumeNotFound",
    /// A Restore asks to create a PersistentVolumeClaim that already exists.
    TargetVolumeExists => "TargetVolumeExists",

    // Ready=False: what a tenant may not ask for (the operator's `admission` module).
    /// A name that becomes a path or an object name has the wrong shape.
    InvalidName => "InvalidName",
    /// A path or pattern has a control character or a `..` component.
    InvalidPath => "InvalidPath",
    /// A volume's `excludeIfPresent` entry is not `FILE[:HEADER]` with a file name, or its
    /// `excludeLargerThan` is not a size.
    InvalidSelection => "InvalidSelection",
    /// The repository URL has a `.`/`..` segment, a user, a query, a fragment or a backslash.
    InvalidRepositoryUrl => "InvalidRepositoryURL",
    /// A Secret named as a credential is a service-account token.
    SecretTypeNotAllowed => "SecretTypeNotAllowed",
    /// The cluster's policy does not allow the repository URL.
    RepositoryNotAllowed => "RepositoryNotAllowed",
    /// The cluster's policy does not allow a toleration of the pod.
    TolerationNotAllowed => "TolerationNotAllowed",
    /// The cluster's policy does not allow a node selector of the pod.
    NodeSelectorNotAllowed => "NodeSelectorNotAllowed",
    /// The cluster's policy does not allow the pod's PriorityClass.
    PriorityClassNotAllowed => "PriorityClassNotAllowed",
    /// The cluster's policy does not allow the image of a stream or hook
    /// (`policy.allowedImages`); no Job is created.
    ImageNotAllowed => "ImageNotAllowed",
    /// A Restore's stream sets no `image`, and no stream of the plan of that name gives one (or
    /// the Restore names a repository alone).
    UnknownStream => "UnknownStream",

    // Running.
    /// A backup Job is running.
    BackupRunning => "BackupRunning",
    /// A run waits for its VolumeSnapshots to be ready before its Job starts.
    PreparingSnapshots => "PreparingSnapshots",
    /// A run's pre or post hook Job runs around its VolumeSnapshots' creation; its backup Job
    /// starts after the post hooks.
    RunningHooks => "RunningHooks",
    /// A prune Job is running.
    PruneRunning => "PruneRunning",
    /// A check Job is running.
    CheckRunning => "CheckRunning",
    /// No backup, prune or check is running.
    Idle => "Idle",

    // LastBackupSucceeded, run records, Restore's Complete; the `*Failed` ones are also the
    // Warning Events of failed runs.
    /// No backup has finished yet.
    NoBackupYet => "NoBackupYet",
    /// Everything asked for was done.
    Succeeded => "Succeeded",
    /// A snapshot was written, but some files could not be read.
    SucceededWithWarnings => "SucceededWithWarnings",
    /// The sidecar reported a failure of the backup.
    BackupFailed => "BackupFailed",
    /// A stream's command failed (exited non-zero, was killed, or wrote nothing without
    /// `allowEmpty`); the run record's `streams` says which and why.
    StreamFailed => "StreamFailed",
    /// A pre hook with `onError: Fail` failed: nothing was read (the post hooks ran); the run
    /// record's `hooks` says which and why.
    HookFailed => "HookFailed",
    /// A VolumeSnapshot of the run failed, or was not ready within the run's deadline.
    SnapshotFailed => "SnapshotFailed",
    /// The sidecar reported a failure of the restore.
    RestoreFailed => "RestoreFailed",
    /// The sidecar could not describe the snapshot a Restore needs the record of (the message
    /// says why: a record too large for a termination message says what to do instead).
    DescribeFailed => "DescribeFailed",
    /// A claim the Restore creates from the snapshot's record is of a StorageClass this cluster
    /// lacks, and `storageClassMapping` maps it to none.
    StorageClassNotFound => "StorageClassNotFound",
    /// The claims the Restore creates from the snapshot's record do not fit one of the
    /// namespace's ResourceQuotas (the message names it, its limit and its use); none was made.
    QuotaExceeded => "QuotaExceeded",
    /// The snapshot's record lacks what the Restore needs of it: a claim a volume restores, a
    /// claim's size (without `minimumClaimSize`), or any claim or database at all for
    /// `allVolumes` or `allDatabases`.
    NotInSnapshotRecord => "NotInSnapshotRecord",
    /// The repository holds no snapshot of the Restore's origin that matches (`latest`,
    /// `takenBefore`, or the id); the message lists the origins it holds.
    SnapshotNotFound => "SnapshotNotFound",
    /// The sidecar reported a failure of a prune.
    PruneFailed => "PruneFailed",
    /// A check could not be carried out.
    CheckFailed => "CheckFailed",
    /// A check found problems in the repository: data is missing or damaged.
    RepositoryDamaged => "RepositoryDamaged",
    /// The sidecar reported a failure of a copy to a destination of `spec.copies`.
    CopyFailed => "CopyFailed",
    /// A restore drill could not be carried out (the message says why).
    DrillFailed => "DrillFailed",
    /// A restore drill read back a file that differs from the snapshot (or could not restore
    /// it); the message names the files.
    VerifyFailed => "VerifyFailed",
    /// A restore drill's database dump did not load into the throwaway server, or its tables'
    /// rows differ from what the backup recorded; the message gives the server's error.
    DumpDidNotLoad => "DumpDidNotLoad",
    /// A restore drill proved the data but took longer than `verify.recoveryTimeObjective`.
    OverObjective => "OverObjective",
    /// The repository password opens no key of the repository.
    WrongPassword => "WrongPassword",
    /// There is no repository at the URL.
    RepositoryNotFound => "RepositoryNotFound",
    /// Another process holds the repository's lock.
    RepositoryLocked => "RepositoryLocked",
    /// The run was still going at its deadline and was stopped.
    DeadlineExceeded => "DeadlineExceeded",
    /// The sidecar ran out of memory.
    OomKilled => "OOMKilled",
    /// The sidecar image could not be pulled.
    ImagePullFailed => "ImagePullFailed",
    /// The container could not be created, e.g. a Secret key it needs is missing.
    ContainerConfigError => "ContainerConfigError",
    /// The sidecar exited with an error and no result.
    SidecarCrashed => "SidecarCrashed",
    /// The sidecar ended without writing a readable result.
    NoResult => "NoResult",
    /// The pod was evicted or otherwise stopped by Kubernetes.
    PodFailed => "PodFailed",
    /// The Job failed for a reason its status gives, and no pod explains it.
    JobFailed => "JobFailed",
    /// The Job disappeared before it finished.
    JobLost => "JobLost",

    // Events only (Normal ones, and a trigger that cannot be read).
    /// A backup Job was created.
    BackupStarted => "BackupStarted",
    /// A backup wrote a snapshot.
    BackupSucceeded => "BackupSucceeded",
    /// A run's trigger annotation could not be read.
    UnknownTrigger => "UnknownTrigger",
    /// Scheduled runs were missed.
    MissedRuns => "MissedRuns",
    /// A restore Job was created.
    RestoreStarted => "RestoreStarted",
    /// A describe Job was created: it reads the record of the snapshot a Restore restores.
    DescribeStarted => "DescribeStarted",
    /// The describe Job named the snapshot a Restore restores, and its record.
    SnapshotDescribed => "SnapshotDescribed",
    /// A restore finished.
    RestoreSucceeded => "RestoreSucceeded",
    /// A PersistentVolumeClaim was created for a restore.
    ClaimCreated => "ClaimCreated",
    /// A prune Job was created.
    PruneStarted => "PruneStarted",
    /// A check Job was created.
    CheckStarted => "CheckStarted",
    /// A prune freed space.
    PruneSucceeded => "PruneSucceeded",
    /// A check found no problem.
    CheckSucceeded => "CheckSucceeded",
    /// A copy Job to a destination of `spec.copies` was created.
    CopyStarted => "CopyStarted",
    /// A copy Job stored the plan's snapshots in its destination.
    CopySucceeded => "CopySucceeded",
    /// A restore drill Job of the plan (`spec.verify`, or `neverwiped.io/verify-now`) was
    /// created.
    DrillStarted => "DrillStarted",
    /// A restore drill brought the snapshot back whole, within its recovery time objective.
    DrillSucceeded => "DrillSucceeded",

    // The concurrency limits and hashed schedules.
    /// Running=False: a due run waits for a slot under the operator's concurrency limits.
    Queued => "Queued",
    /// A volume `selector` matched no PersistentVolumeClaim, and the plan backs up its other
    /// volumes and databases (a condition of its own, `VolumesSelected=False`).
    SelectorMatchedNothing => "SelectorMatchedNothing",

    // Ready=False: who the pods that read or write volumes run as.
    /// `spec.mover.mode` is `Privileged` in a namespace the cluster admin did not allow
    /// (`policy.privilegedMoverNamespaces`); no Job is created.
    PrivilegedMoverNotAllowed => "PrivilegedMoverNotAllowed",

    // Ready=False: what a Restore's creator may not do (the operator's `restore_access` module); no Job is
    // created.
    /// The Restore does not record who created it (annotation `neverwiped.io/requested-by`).
    RequesterUnknown => "RequesterUnknown",
    /// The Restore's creator may not get the plan's password or gate-login Secret, which
    /// restoring the plan's data needs.
    RequesterCannotDecrypt => "RequesterCannotDecrypt",
    /// The Restore's creator may not update a target claim (or create a new one).
    RequesterCannotWriteClaim => "RequesterCannotWriteClaim",
    /// The Restore's creator may not get a Secret a stream's environment reads.
    RequesterCannotReadSecret => "RequesterCannotReadSecret",
    /// The cluster's policy does not allow Restores of the namespace to write to a database host
    /// (`policy.allowedRestoreDatabaseHosts`).
    DatabaseHostNotAllowed => "DatabaseHostNotAllowed",
    /// A Restore reads the snapshots of another namespace's plan (a clone), and no rule of the
    /// cluster's `policy.allowedRestoreOrigins` allows it.
    CloneNotAllowed => "CloneNotAllowed",

    // SnapshotsListed: the gate's listing against the plan's last success.
    /// The listing has the last successful backup's snapshot (or newer ones).
    SnapshotsListed => "SnapshotsListed",
    /// The listing has neither the last successful backup's snapshot nor any newer: the gate
    /// withholds snapshots, and a restore of `latest` would bring back an older one.
    SnapshotsWithheld => "SnapshotsWithheld",

    // SuspiciousChange: a night far outside the plan's own history (the operator's
    // `suspicion` module); True pauses the plan's retention until an admin acknowledges it.
    /// Most of the parent's files were changed or removed, where few usually are.
    MassRewrite => "MassRewrite",
    /// Many of the parent's files were removed, where few usually are.
    MassDelete => "MassDelete",
    /// The new data no longer compresses, where it usually did.
    IncompressibleData => "IncompressibleData",
    /// False: the plan's last backup looked like its usual ones.
    ChangeUsual => "ChangeUsual",
    /// False: an admin acknowledged the flagged backup; retention runs again.
    SuspiciousChangeAcknowledged => "SuspiciousChangeAcknowledged",
}

impl Reason {
    /// The reason whose string is `text`, as a condition or record stored by an operator holds it.
    pub fn parse(text: &str) -> Option<Reason> {
        Reason::ALL
            .iter()
            .copied()
            .find(|reason| reason.as_str() == text)
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<Reason> for String {
    fn from(reason: Reason) -> String {
        reason.as_str().to_owned()
    }
}

/// Sets the condition of `type_`: a changed status moves `lastTransitionTime` to `now`, an
/// unchanged one keeps it, so watchers see when things changed, not when they were last looked at.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: Reason,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: Timestamp,
) {
    set_condition_as_stored(
        conditions,
        type_,
        status,
        reason.as_str(),
        message,
        observed_generation,
        now,
    );
}

/// [`set_condition`] with a reason as a stored record holds it (`status.lastRun.reason`), copied
/// as it is: a record written by another version of the operator may name a reason this one
/// does not know.
pub fn set_condition_as_stored(
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

/// The status and reason of a condition, to see whether it changed; a reason this operator does
/// not know reads as `None`.
pub fn condition_state(condition: &Condition) -> (ConditionStatus, Option<Reason>) {
    (
        ConditionStatus::of(condition),
        Reason::parse(&condition.reason),
    )
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
            Reason::Ready,
            "ok",
            Some(1),
            t0,
        );
        set_condition(
            &mut conditions,
            types::READY,
            ConditionStatus::True,
            Reason::Ready,
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
            Reason::SecretNotFound,
            "gone",
            Some(2),
            t2,
        );
        assert_eq!(conditions[0].last_transition_time, Time(t2));
        assert_eq!(conditions[0].reason, "SecretNotFound");
    }

    #[test]
    fn every_reason_has_its_own_string_and_reads_back() {
        let mut seen = std::collections::BTreeSet::new();
        for &reason in Reason::ALL {
            assert!(seen.insert(reason.as_str()), "{reason:?} repeats a string");
            assert_eq!(Reason::parse(reason.as_str()), Some(reason));
            assert_eq!(reason.to_string(), reason.as_str());
        }
        assert_eq!(Reason::parse("NoSuchReason"), None);
    }

    #[test]
    fn the_strings_users_match_on_are_unchanged() {
        // Alerts and scripts match on these; a renamed variant must not rename them.
        let wire: Vec<&str> = [
            Reason::Ready,
            Reason::InvalidRepositoryUrl,
            Reason::OomKilled,
            Reason::SucceededWithWarnings,
            Reason::RepositoryDamaged,
            Reason::UnknownTrigger,
        ]
        .iter()
        .map(|r| r.as_str())
        .collect();
        assert_eq!(
            wire,
            [
                "Ready",
                "InvalidRepositoryURL",
                "OOMKilled",
                "SucceededWithWarnings",
                "RepositoryDamaged",
                "UnknownTrigger"
            ]
        );
    }
}
