use super::*;
use crate::csi::VolumeSnapshotStatus;
use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
use k8s_openapi::api::core::v1::PersistentVolumeClaimSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn storage_class(name: &str, provisioner: &str) -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        provisioner: provisioner.into(),
        ..StorageClass::default()
    }
}

fn snapshot_class(name: &str, driver: &str) -> VolumeSnapshotClass {
    VolumeSnapshotClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        driver: driver.into(),
        deletion_policy: "Delete".into(),
        parameters: None,
    }
}

pub(super) fn snapshot_plan() -> BackupPlan {
    let mut plan = plan();
    plan.spec.copy_method = CopyMethod::Snapshot;
    plan.spec.manual_trigger = Some("now".into());
    // Today's scheduled run is done: only the manual one is due.
    plan.status = Some(BackupPlanStatus {
        last_schedule_time: Some(Time(at("2026-11-30T02:30:00Z"))),
        ..BackupPlanStatus::default()
    });
    plan
}

pub(super) fn snapshot_world() -> ObservedPlan {
    let mut observed = observed();
    observed.claims[0].spec = Some(PersistentVolumeClaimSpec {
        storage_class_name: Some("fast".into()),
        access_modes: Some(vec!["ReadWriteOnce".into()]),
        ..PersistentVolumeClaimSpec::default()
    });
    observed.storage_classes = vec![storage_class("fast", "csi.example.com")];
    observed.snapshot_classes = Some(vec![snapshot_class("fast-snap", "csi.example.com")]);
    observed
}

/// What the API server returns for a created object.
pub(super) fn stored<K: Resource>(mut object: K, created: &str) -> K {
    object.meta_mut().creation_timestamp = Some(Time(at(created)));
    object
}

pub(super) fn ready(mut snapshot: VolumeSnapshot) -> VolumeSnapshot {
    snapshot.status = Some(VolumeSnapshotStatus {
        ready_to_use: Some(true),
        restore_size: Some(Quantity("3Gi".into())),
        ..VolumeSnapshotStatus::default()
    });
    snapshot
}

#[test]
fn a_snapshot_run_takes_its_snapshots_then_clones_them_into_its_job_then_cleans_up() {
    let mut plan = snapshot_plan();
    let mut observed = snapshot_world();
    let now = at("2026-11-30T12:00:00Z");

    // The run starts by taking a snapshot of each volume; no Job yet.
    let decision = decide(&plan, &observed, now, &settings());
    assert!(decision.create.is_none());
    assert_eq!(decision.create_snapshots.len(), 1);
    let snapshot = decision.create_snapshots[0].clone();
    assert_eq!(
        snapshot.metadata.name.as_deref(),
        Some("nightly-manual-1-0")
    );
    assert_eq!(
        snapshot.spec.source.persistent_volume_claim_name.as_deref(),
        Some("data")
    );
    assert_eq!(
        snapshot.spec.volume_snapshot_class_name.as_deref(),
        Some("fast-snap")
    );
    assert_eq!(
        decision.status.active_run.as_ref().unwrap().job_name,
        "nightly-manual-1"
    );
    assert_eq!(decision.events[0].reason, Reason::BackupStarted);
    plan.status = Some(decision.status);

    // Not ready yet: the run waits, and says so.
    observed.snapshots = vec![stored(snapshot.clone(), "2026-11-30T12:00:00Z")];
    let decision = decide(&plan, &observed, at("2026-11-30T12:00:05Z"), &settings());
    assert!(decision.create.is_none() && decision.create_snapshots.is_empty());
    assert!(decision.delete_snapshots.is_empty());
    let running = find_condition(&decision.status.conditions, types::RUNNING).unwrap();
    assert_eq!(running.reason, "PreparingSnapshots");
    assert_eq!(decision.requeue_after, settings().snapshot_poll);
    assert_eq!(decision.status.last_manual_trigger.as_deref(), Some("now"));
    plan.status = Some(decision.status);

    // Ready: a claim is cloned from it and the Job mounts the clone where the volume goes.
    observed.snapshots = vec![ready(stored(snapshot, "2026-11-30T12:00:00Z"))];
    let decision = decide(&plan, &observed, at("2026-11-30T12:01:00Z"), &settings());
    assert_eq!(decision.create_claims.len(), 1);
    let clone = decision.create_claims[0].clone();
    let clone_spec = clone.spec.as_ref().unwrap();
    assert_eq!(clone.metadata.name.as_deref(), Some("nightly-manual-1-0"));
    assert_eq!(
        clone_spec.data_source.as_ref().unwrap().kind,
        "VolumeSnapshot"
    );
    assert_eq!(clone_spec.storage_class_name.as_deref(), Some("fast"));
    assert_eq!(
        clone_spec
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["storage"],
        Quantity("3Gi".into())
    );
    let job = decision.create.clone().expect("the Job");
    assert_eq!(job.metadata.name.as_deref(), Some("nightly-manual-1"));
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let volume = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find_map(|v| v.persistent_volume_claim.as_ref())
        .unwrap();
    assert_eq!(volume.claim_name, "nightly-manual-1-0");
    assert_eq!(args(&job)[1], "/data/data", "the snapshot names the source");
    // The minute of preparation counts against the deadline.
    assert_eq!(
        job.spec.as_ref().unwrap().active_deadline_seconds,
        Some(12 * 3600 - 60)
    );
    plan.status = Some(decision.status);

    // The Job runs: everything of the run stays.
    observed.claims.push(stored(clone, "2026-11-30T12:01:00Z"));
    let mut job = stored(job, "2026-11-30T12:01:00Z");
    observed.jobs = vec![job.clone()];
    let decision = decide(&plan, &observed, at("2026-11-30T12:02:00Z"), &settings());
    assert!(decision.create.is_none() && decision.create_claims.is_empty());
    assert!(decision.delete_snapshots.is_empty() && decision.delete_claims.is_empty());
    plan.status = Some(decision.status);

    // The Job ends: the run is recorded, its snapshot and clone deleted.
    job.status = Some(JobStatus {
        conditions: Some(vec![JobCondition {
            type_: "Complete".into(),
            status: "True".into(),
            ..JobCondition::default()
        }]),
        ..JobStatus::default()
    });
    observed.jobs = vec![job];
    observed.pods = vec![pod_for("nightly-manual-1")];
    let decision = decide(&plan, &observed, at("2026-11-30T12:30:00Z"), &settings());
    assert_eq!(decision.finished.len(), 1);
    assert_eq!(decision.delete_snapshots, ["nightly-manual-1-0"]);
    assert_eq!(decision.delete_claims, ["nightly-manual-1-0"]);
    assert!(decision.create_snapshots.is_empty());
}

#[test]
fn a_snapshot_whose_create_failed_is_taken_before_the_job_starts() {
    let mut plan = snapshot_plan();
    plan.spec
        .volumes
        .push(crate::api::BackupVolume::claim("logs"));
    let mut observed = snapshot_world();
    let mut logs = observed.claims[0].clone();
    logs.metadata.name = Some("logs".into());
    observed.claims.push(logs);
    let decision = decide(&plan, &observed, at("2026-11-30T12:00:00Z"), &settings());
    let names: Vec<String> = decision
        .create_snapshots
        .iter()
        .map(|s| s.name_any())
        .collect();
    assert_eq!(names, ["nightly-manual-1-0", "nightly-manual-1-1"]);
    plan.status = Some(decision.status);
    // Only the first was created (the second create failed); it is ready.
    observed.snapshots = vec![ready(stored(
        decision.create_snapshots[0].clone(),
        "2026-11-30T12:00:00Z",
    ))];
    let decision = decide(&plan, &observed, at("2026-11-30T12:00:10Z"), &settings());
    assert!(
        decision.create.is_none(),
        "the Job waits for every snapshot"
    );
    let again: Vec<String> = decision
        .create_snapshots
        .iter()
        .map(|s| s.name_any())
        .collect();
    assert_eq!(again, ["nightly-manual-1-1"]);
    assert_eq!(
        decision.create_snapshots[0].annotations()[ANNOTATION_SOURCE_CLAIM],
        "logs"
    );
}

#[test]
fn a_failed_snapshot_fails_the_run_with_the_drivers_message() {
    let mut plan = snapshot_plan();
    let mut observed = snapshot_world();
    let decision = decide(&plan, &observed, at("2026-11-30T12:00:00Z"), &settings());
    let mut snapshot = stored(decision.create_snapshots[0].clone(), "2026-11-30T12:00:00Z");
    plan.status = Some(decision.status);
    snapshot.status = Some(VolumeSnapshotStatus {
        ready_to_use: Some(false),
        error: Some(crate::csi::VolumeSnapshotError {
            message: Some("rpc error: code = ResourceExhausted desc = quota".into()),
            time: None,
        }),
        ..VolumeSnapshotStatus::default()
    });
    observed.snapshots = vec![snapshot];
    let decision = decide(&plan, &observed, at("2026-11-30T12:00:30Z"), &settings());
    let last = decision.status.last_run.as_ref().unwrap();
    assert_eq!(last.job_name, "nightly-manual-1");
    assert_eq!(last.reason, "SnapshotFailed");
    assert!(last.message.as_ref().unwrap().contains("ResourceExhausted"));
    assert!(decision.status.active_run.is_none());
    assert_eq!(decision.delete_snapshots, ["nightly-manual-1-0"]);
    assert!(decision.create.is_none());
    assert_eq!(decision.events[0].reason, Reason::BackupFailed);
}

#[test]
fn snapshots_not_ready_by_the_deadline_fail_the_run() {
    let mut plan = snapshot_plan();
    plan.spec.deadline = "1h".into();
    let mut observed = snapshot_world();
    let decision = decide(&plan, &observed, at("2026-11-30T12:00:00Z"), &settings());
    observed.snapshots = vec![stored(
        decision.create_snapshots[0].clone(),
        "2026-11-30T12:00:00Z",
    )];
    plan.status = Some(decision.status);
    let decision = decide(&plan, &observed, at("2026-11-30T13:00:01Z"), &settings());
    let last = decision.status.last_run.as_ref().unwrap();
    assert_eq!(last.reason, "SnapshotFailed");
    assert!(last.message.as_ref().unwrap().contains("deadline of 1h"));
}

#[test]
fn snapshot_without_a_class_for_the_driver_is_not_ready() {
    let plan = snapshot_plan();
    let mut observed = snapshot_world();
    observed.snapshot_classes = Some(vec![snapshot_class("other", "csi.other.org")]);
    let decision = decide(&plan, &observed, at("2026-11-30T12:00:00Z"), &settings());
    let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
    assert_eq!(ready.reason, "NoVolumeSnapshotClass");
    assert!(
        ready.message.contains("\"csi.example.com\""),
        "{}",
        ready.message
    );
    assert!(decision.create_snapshots.is_empty() && decision.create.is_none());

    // Auto reads that volume directly instead.
    let mut auto = plan.clone();
    auto.spec.copy_method = CopyMethod::Auto;
    let decision = decide(&auto, &observed, at("2026-11-30T12:00:00Z"), &settings());
    assert!(decision.create_snapshots.is_empty());
    assert!(decision.create.is_some());
}
