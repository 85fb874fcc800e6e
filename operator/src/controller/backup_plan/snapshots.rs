//! Backups that read volumes from CSI VolumeSnapshots: a run first takes its snapshots, then, once
//! they are all ready, clones them into claims and starts its Job on those; when the run is over,
//! its snapshots and clones go. A snapshot that fails, or is not ready within the run's deadline,
//! fails the run.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::decision::PlanDecision;
use super::fetch::{owned_by, ObservedPlan};
use super::occupant::{backup_run, Occupant, PreparingRun};
use super::resolve::ReadyPlan;
use super::triggers;
use crate::api::{BackupPlan, RunOutcome, RunRecord};
use crate::conditions::Reason;
use crate::controller::Settings;
use crate::csi::VolumeSnapshot;
use crate::job::{backup_job, BackupRun, BackupVolumeMount, LABEL_RUN};
use crate::schedule::parse_duration;
use crate::volumes::{
    run_snapshot, snapshot_clone, snapshot_run_info, snapshot_trigger, SnapshotRunInfo,
};

/// Finds the run being prepared: VolumeSnapshots of a run whose Job does not exist yet (and was
/// not recorded). A run whose snapshots failed is recorded as failed instead. `backups` are the
/// plan's backup Jobs; while one of them runs (`backup_running`), nothing is being prepared.
pub fn observe<'a>(
    plan: &BackupPlan,
    observed: &'a ObservedPlan,
    backups: &[&k8s_openapi::api::batch::v1::Job],
    backup_running: bool,
    decision: &mut PlanDecision,
    now: Timestamp,
) -> Option<PreparingRun<'a>> {
    let mut runs: BTreeMap<String, Vec<&VolumeSnapshot>> = BTreeMap::new();
    for snapshot in observed.snapshots.iter().filter(|s| owned_by(*s, plan)) {
        if let Some(run) = snapshot.labels().get(LABEL_RUN) {
            runs.entry(run.clone()).or_default().push(snapshot);
        }
    }
    let mut preparing = None;
    for (run, snapshots) in runs {
        let over = backups.iter().any(|job| job.name_any() == run)
            || decision.status.history.iter().any(|r| r.job_name == run);
        if over || backup_running || preparing.is_some() {
            continue;
        }
        let trigger = decision.trigger(&run, snapshot_trigger(snapshots[0]));
        let info = snapshot_run_info(snapshots[0], trigger);
        let started = snapshots
            .iter()
            .filter_map(|s| s.metadata.creation_timestamp.as_ref().map(|t| t.0))
            .min()
            .unwrap_or(now);
        // The run's trigger is consumed, even if the status apply after the create failed.
        triggers::consume(
            &mut decision.status,
            info.scheduled_time,
            info.manual_trigger.as_deref(),
        );
        match failure(&plan.spec.deadline, &snapshots, started, now) {
            Some(message) => decision.record_backup(
                Reason::SnapshotFailed,
                failed_record(run, &info, started, now, message),
                now,
            ),
            None => {
                let active =
                    backup_run(run, info.trigger, info.scheduled_time, Some(Time(started)));
                preparing = Some(PreparingRun {
                    run: active,
                    info,
                    snapshots,
                });
            }
        }
    }
    preparing
}

/// Why a run's snapshots failed: the driver's message, or the deadline passed while some were not
/// ready; `None` while they may still get ready.
fn failure(
    deadline: &str,
    snapshots: &[&VolumeSnapshot],
    started: Timestamp,
    now: Timestamp,
) -> Option<String> {
    let failed = snapshots.iter().find_map(|s| {
        s.error_message().map(|message| {
            format!(
                "VolumeSnapshot {} of PersistentVolumeClaim {:?} failed: {message}",
                s.name_any(),
                s.spec
                    .source
                    .persistent_volume_claim_name
                    .as_deref()
                    .unwrap_or("")
            )
        })
    });
    failed.or_else(|| {
        let limit = parse_duration(deadline).ok()?;
        let waiting: Vec<String> = snapshots
            .iter()
            .filter(|s| !s.is_ready())
            .map(|s| s.name_any())
            .collect();
        (now.duration_since(started) > limit && !waiting.is_empty()).then(|| {
            format!(
                "VolumeSnapshots {} were not ready within the run's deadline of {deadline}; check the CSI driver's snapshotter",
                waiting.join(", "),
            )
        })
    })
}

fn failed_record(
    run: String,
    info: &SnapshotRunInfo,
    started: Timestamp,
    now: Timestamp,
    message: String,
) -> RunRecord {
    let reason = Reason::SnapshotFailed.into();
    RunRecord {
        scheduled_time: info.scheduled_time.map(Time),
        start_time: Some(Time(started)),
        completion_time: Some(Time(now)),
        duration_seconds: Some(now.duration_since(started).as_secs()),
        message: Some(message),
        ..RunRecord::without_figures(run, info.trigger, RunOutcome::Failed, reason)
    }
}

/// For a run that starts: takes the snapshots of the volumes read from snapshots, returning the
/// names of their claims; `None` when the plan reads every volume directly (the Job starts now).
pub fn take(
    plan: &BackupPlan,
    ready: &ReadyPlan,
    run: &BackupRun,
    job_name: &str,
    decision: &mut PlanDecision,
) -> Option<Vec<String>> {
    let snapshotted = ready.snapshotted();
    if snapshotted.is_empty() {
        return None;
    }
    let info = SnapshotRunInfo {
        trigger: run.trigger,
        scheduled_time: run.scheduled_time,
        manual_trigger: run.manual_trigger.clone(),
    };
    for (index, (claim, class)) in snapshotted.iter().enumerate() {
        decision
            .create_snapshots
            .push(run_snapshot(plan, &info, job_name, index, claim, class));
    }
    Some(snapshotted.iter().map(|(c, _)| c.to_string()).collect())
}

/// Moves a prepared run on: takes a snapshot whose create failed; once all are ready, clones them
/// and creates the run's Job. Returns what occupies the plan after.
#[allow(clippy::too_many_arguments)]
pub fn advance<'a>(
    plan: &BackupPlan,
    ready: &ReadyPlan,
    observed: &ObservedPlan,
    preparing: PreparingRun<'a>,
    remove_stale_locks: bool,
    now: Timestamp,
    settings: &Settings,
    decision: &mut PlanDecision,
) -> Occupant<'a> {
    let run_name = preparing.run.job_name.clone();
    // A snapshot whose create failed after the others': take it now.
    for (index, (claim, class)) in ready.snapshotted().iter().enumerate() {
        if preparing.snapshot_of(claim).is_none() {
            let snapshot = run_snapshot(plan, &preparing.info, &run_name, index, claim, class);
            decision.create_snapshots.push(snapshot);
        }
    }
    if !decision.create_snapshots.is_empty() || !preparing.snapshots.iter().all(|s| s.is_ready()) {
        return Occupant::PreparingSnapshots(preparing);
    }
    let mut volumes = Vec::new();
    for claim in &ready.plan.claims {
        let mounted = match preparing.snapshot_of(&claim.name) {
            Some(snapshot) => {
                let exists = observed
                    .claims
                    .iter()
                    .any(|c| c.metadata.name == snapshot.metadata.name);
                let source = ready.claim(&claim.name);
                if let (false, Some(source)) = (exists, source) {
                    decision
                        .create_claims
                        .push(snapshot_clone(plan, snapshot, source));
                }
                snapshot.name_any()
            }
            None => claim.name.clone(),
        };
        volumes.push(BackupVolumeMount {
            source_claim: claim.name.clone(),
            mounted_claim: mounted,
            excludes: claim.excludes.clone(),
            selection: claim.selection.clone(),
            claim: ready.claim(&claim.name).cloned(),
        });
    }
    let started = preparing
        .run
        .start_time
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(now);
    // The deadline is the whole run's, preparation included.
    let deadline =
        (ready.plan.deadline - now.duration_since(started)).max(SignedDuration::from_mins(1));
    let info = preparing.info;
    let run = BackupRun {
        trigger: info.trigger,
        scheduled_time: info.scheduled_time,
        manual_trigger: info.manual_trigger,
        volumes,
        node_name: ready.direct_node.clone(),
        deadline,
        remove_stale_locks,
        mover: ready.mover.mover.clone(),
        hooks_in_pod: true,
    };
    let mut job = backup_job(plan, &run, &settings.job);
    // The run's name was fixed when its snapshots were taken.
    job.metadata.name = Some(run_name);
    decision.create = Some(job);
    Occupant::Backup(preparing.run)
}

/// The VolumeSnapshots and clones of runs that are over (not `current_run`), to delete.
pub fn over(
    plan: &BackupPlan,
    observed: &ObservedPlan,
    current_run: Option<&str>,
) -> (Vec<String>, Vec<String>) {
    let over = |labels: &BTreeMap<String, String>, deleting: bool| {
        !deleting
            && labels
                .get(LABEL_RUN)
                .is_some_and(|run| Some(run.as_str()) != current_run)
    };
    let snapshots = observed
        .snapshots
        .iter()
        .filter(|s| owned_by(*s, plan))
        .filter(|s| over(s.labels(), s.metadata.deletion_timestamp.is_some()))
        .map(|s| s.name_any())
        .collect();
    let claims = observed
        .claims
        .iter()
        .filter(|c| owned_by(*c, plan))
        .filter(|c| over(c.labels(), c.metadata.deletion_timestamp.is_some()))
        .map(|c| c.name_any())
        .collect();
    (snapshots, claims)
}
