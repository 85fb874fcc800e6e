//! Values the unit tests share: a plan's spec and a sidecar result, each a baseline a test changes
//! only where its case differs.

use neverwiped_contract::{ExitStatus, Operation, RunResult, RESULT_FORMAT_VERSION};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{
    BackupPlanSpec, BackupVolume, CredentialsSecretRef, Repository, SecretKeyRef, SnapshotRecord,
};

/// A plan backing up the claim `data` nightly at 02:30 (Berlin) to a gate, with its password in
/// the Secret `repo` and the gate's login in `gate`.
pub fn plan_spec() -> BackupPlanSpec {
    BackupPlanSpec {
        streams: Vec::new(),
        hooks: Default::default(),
        schedule: "30 2 * * *".into(),
        time_zone: "Europe/Berlin".into(),
        suspend: false,
        manual_trigger: None,
        repository: Repository {
            url: "https://gate.example.com/shop".into(),
            password_secret_ref: SecretKeyRef {
                name: "repo".into(),
                key: "password".into(),
            },
            credentials_secret_ref: Some(CredentialsSecretRef::new("gate")),
            ca_secret_ref: None,
        },
        volumes: vec![BackupVolume::claim("data")],
        copy_method: Default::default(),
        volume_snapshot_class_name: None,
        databases: vec![],
        retention: None,
        copies: Vec::new(),
        maintenance: Default::default(),
        limits: None,
        verify: None,
        deadline: "12h".into(),
        pod: None,
        mover: None,
    }
}

/// What the sidecar writes for a ten-minute run on 2026-11-30 that read 1200 files; a snapshot id
/// exactly when `status` says one was written.
pub fn run_result(operation: Operation, status: ExitStatus) -> RunResult {
    RunResult {
        hooks: Vec::new(),
        paused_secs: None,
        streams: Vec::new(),
        verification: None,
        version: RESULT_FORMAT_VERSION,
        operation,
        status,
        snapshot_time: None,
        snapshot_id: matches!(status, ExitStatus::Success | ExitStatus::Partial)
            .then(|| "4f2a9c1b0d".into()),
        started_at: "2026-11-30T02:00:00Z".into(),
        finished_at: "2026-11-30T02:10:00Z".into(),
        duration_secs: 600.0,
        files: 1200,
        bytes_read: 5_000_000_000,
        bytes_added: 12_000_000,
        bytes_transferred: 12_500_000,
        bytes_per_second: None,
        databases: vec![],
        warnings_total: 0,
        warnings: vec![],
        error: None,
        repository: None,
        snapshots_forgotten: None,
        prune: None,
        check: None,
        host_snapshots: None,
        key_id: None,
        changes: None,
        drill: None,
        sources: None,
    }
}

/// What `restore` reads from `plan`.
pub fn from_plan<'a>(
    restore: &'a crate::api::Restore,
    plan: &'a crate::api::BackupPlan,
) -> crate::restore_source::ReadFrom<'a> {
    crate::restore_source::ReadFrom::of(restore, Some(plan)).expect("the plan is there")
}

/// A listed snapshot `id` taken at `time` (RFC 3339) of one small file.
pub fn snapshot_record(id: &str, time: &str) -> SnapshotRecord {
    SnapshotRecord {
        id: id.into(),
        time: Time(time.parse().expect("an RFC 3339 time")),
        files: 1,
        size_bytes: 1,
        size: "1".into(),
        tags: Vec::new(),
    }
}
