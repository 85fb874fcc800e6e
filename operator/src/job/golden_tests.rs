//! Golden Jobs: the whole Job, as YAML, that each builder makes for one fixed input. A change to
//! any field of a Job's spec shows here as a diff of `golden/*.yaml`; an intended one is written
//! back with `NEVERWIPED_WRITE_GOLDEN=1 cargo test -p neverwiped-operator --lib golden`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use jiff::SignedDuration;
use k8s_openapi::api::batch::v1::Job;

use super::tests::{plan, restore, run, settings};
use super::*;
use crate::api::{DatabaseType, RunTrigger};
use crate::mover::Mover;

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/job/golden")
        .join(format!("{name}.yaml"))
}

/// Compares `job` as YAML with `golden/<name>.yaml`, or writes it there when asked to.
fn assert_golden(name: &str, job: &Job) {
    let yaml = serde_saphyr::to_string(job).expect("a Job serializes");
    let path = golden_path(name);
    if std::env::var_os("NEVERWIPED_WRITE_GOLDEN").is_some() {
        std::fs::write(&path, &yaml).expect("the golden file is written");
    }
    let golden = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
    assert!(
        golden == yaml,
        "the {name} Job differs from {}:\n{yaml}",
        path.display()
    );
}

fn maintenance_run(kind: MaintenanceKind) -> MaintenanceRun {
    MaintenanceRun {
        kind,
        trigger: RunTrigger::Schedule,
        scheduled_time: "2026-11-30T03:00:00Z".parse().unwrap(),
        deadline: SignedDuration::from_hours(6),
        remove_stale_locks: true,
    }
}

#[test]
fn golden_backup_job() {
    assert_golden("backup", &backup_job(&plan(), &run(), &settings()));
}

#[test]
fn golden_backup_job_with_selection_per_volume() {
    assert_golden(
        "backup-selection",
        &backup_job(&plan(), &super::selection_tests::run(), &settings()),
    );
}

#[test]
fn golden_prune_job() {
    let run = maintenance_run(MaintenanceKind::Prune);
    assert_golden("prune", &maintenance_job(&plan(), &run, &settings()));
}

#[test]
fn golden_check_job() {
    let run = maintenance_run(MaintenanceKind::Check);
    assert_golden("check", &maintenance_job(&plan(), &run, &settings()));
}

#[test]
fn golden_restore_job() {
    let run = RestoreRun {
        deadline: SignedDuration::from_hours(12),
        database_types: BTreeMap::from([("orders".to_string(), DatabaseType::Postgresql)]),
        mover: Mover::Privileged,
    };
    assert_golden(
        "restore",
        &restore_job(&restore(), &plan(), &run, &settings()),
    );
}
