//! The restore Job: each volume into its target claim, databases with their credentials.
use super::tests::{container, from_plan, plan, pod_spec, restore, settings};
use super::*;
use crate::api::DatabaseType;
use crate::mover::Mover;
use jiff::SignedDuration;
use std::collections::BTreeMap;

#[test]
fn restore_job_writes_each_volume_into_its_target_claim() {
    let run = RestoreRun {
        stream_images: Default::default(),
        deadline: SignedDuration::from_hours(12),
        database_types: BTreeMap::from([("orders".to_string(), DatabaseType::Postgresql)]),
        mover: Mover::Privileged,
    };
    let job = restore_job(
        &restore(),
        &from_plan(&restore(), &plan()),
        &run,
        &settings(),
    );
    assert_eq!(job.metadata.name.as_deref(), Some("bring-back-restore"));
    let container = container(&job);
    assert_eq!(
        container.args.as_deref().unwrap(),
        [
            "restore",
            "latest",
            "--repo",
            "rest:https://gate.example.com/shop",
            "--result-file",
            "/dev/termination-log",
            "--target",
            "/restore",
            "--include",
            "/data/data/uploads/2026",
            "--host",
            "shop/nightly",
            "--before",
            "2026-11-29T00:00:00Z",
            "--database",
            "orders=postgresql://$(NEVERWIPED_DB_USERNAME_ORDERS)@pg-new:5432",
            "--database-password-file",
            "orders=/var/run/neverwiped/databases/orders/password",
            "--overwrite-database",
            "orders",
        ]
    );
    let mount = container
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.mount_path == "/restore/data/data")
        .unwrap();
    assert_eq!(mount.read_only, Some(false));
    let capabilities = container
        .security_context
        .as_ref()
        .unwrap()
        .capabilities
        .as_ref()
        .unwrap();
    assert_eq!(
        capabilities.add.as_deref().unwrap(),
        [
            "CHOWN".to_string(),
            "DAC_OVERRIDE".into(),
            "FOWNER".into(),
            "FSETID".into(),
            "MKNOD".into()
        ]
    );
    let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.kind, "Restore");
    assert_eq!(
        job.metadata.labels.as_ref().unwrap()[LABEL_RESTORE],
        "bring-back"
    );
    // The plan's placement applies to its restores too.
    assert!(pod_spec(&job).tolerations.is_some());
}
