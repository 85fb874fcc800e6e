//! Golden Jobs: the whole Job, as YAML, that each builder makes for one fixed input. A change to
//! any field of a Job's spec shows here as a diff of `golden/*.yaml`; an intended one is written
//! back with `NEVERWIPED_WRITE_GOLDEN=1 cargo test -p neverwiped-operator --lib golden`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use jiff::SignedDuration;
use k8s_openapi::api::batch::v1::Job;

use super::tests::{from_plan, plan, restore, run, settings};
use super::*;
use crate::api::{DatabaseType, RunTrigger};
use crate::mover::Mover;

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/job/golden")
        .join(format!("{name}.yaml"))
}

/// Compares `job` as YAML with `golden/<name>.yaml`, or writes it there when asked to.
pub(super) fn assert_golden(name: &str, job: &Job) {
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

/// Settings whose admin protects the test plan's repository: a maintenance login for its
/// gate, and a window.
pub(super) fn protected_settings() -> JobSettings {
    let values = r#"{"credentials": [{"urlPrefix": "https://gate.example.com/", "secretName": "gate-maintenance"}],
        "protectionWindow": {"default": "14d"}}"#;
    let protection = crate::protection::Protection::parse(values, "neverwiped-system").unwrap();
    JobSettings {
        protection,
        ..settings()
    }
}

#[test]
fn golden_protected_prune_job_runs_in_the_operators_namespace() {
    let prune = maintenance_run(MaintenanceKind::Prune);
    let mut plan = plan();
    plan.spec.retention = Some(crate::api::Retention {
        keep_last: Some(3),
        keep_daily: Some(7),
        ..Default::default()
    });
    assert!(
        (protected_settings().protection)
            .for_plan("shop", &plan.spec.repository.url)
            .credentials
            .is_some(),
        "the test plan's repository lies under the prefix: {}",
        plan.spec.repository.url
    );
    let job = maintenance_job(&plan, &prune, &protected_settings());
    assert_golden("prune-protected", &job);
    let copy = password_copy(&plan, &job).expect("a password copy");
    assert_eq!(copy.namespace, "neverwiped-system");
    assert_eq!(copy.source_namespace, "shop");
    assert_eq!(
        copy.name,
        format!("{}-repository", job.metadata.name.as_ref().unwrap())
    );
    assert!(remote_job_of(&job, &plan));
    // Its backups never forget; both carry the window.
    let backup = sidecar_args(&backup_job(&plan, &run(), &protected_settings()));
    assert!(
        !backup.iter().any(|a| a.starts_with("--keep-")),
        "{backup:?}"
    );
    assert!(backup.windows(2).any(|w| w == ["--protect-within", "14d"]));
    // The check stays in the plan's namespace with the plan's login.
    let check = maintenance_job(
        &plan,
        &maintenance_run(MaintenanceKind::Check),
        &protected_settings(),
    );
    assert_eq!(check.metadata.namespace.as_deref(), Some("shop"));
    assert_eq!(password_copy(&plan, &check), None);
}

#[test]
fn golden_check_job() {
    let run = maintenance_run(MaintenanceKind::Check);
    assert_golden("check", &maintenance_job(&plan(), &run, &settings()));
}

#[test]
fn golden_restore_job() {
    let run = RestoreRun {
        stream_images: Default::default(),
        deadline: SignedDuration::from_hours(12),
        database_types: BTreeMap::from([("orders".to_string(), DatabaseType::Postgresql)]),
        mover: Mover::Privileged,
    };
    assert_golden(
        "restore",
        &restore_job(
            &restore(),
            &from_plan(&restore(), &plan()),
            &run,
            &settings(),
        ),
    );
}

/// A Restore from a repository alone, in another namespace than its origin's (a clone the
/// policy allowed): no plan label, no key hint, `--host` pinned although it names an id, the
/// default deadline and the Restore's own Secrets.
#[test]
fn golden_restore_job_from_a_repository_alone() {
    let mut restore = restore();
    restore.metadata.namespace = Some("recovery".into());
    restore.spec.source = crate::api::RestoreSource::Repository {
        repository: crate::api::Repository {
            url: "https://gate.example.com/shop".into(),
            password_secret_ref: crate::api::SecretKeyRef {
                name: "old-shop-repository".into(),
                key: "password".into(),
            },
            credentials_secret_ref: Some(crate::api::CredentialsSecretRef::new("old-gate-login")),
            ca_secret_ref: None,
        },
        origin: "shop/nightly".into(),
    };
    restore.spec.snapshot = "0123abcd".into();
    restore.spec.taken_before = None;
    let from = crate::restore_source::ReadFrom::of(&restore, None).unwrap();
    let run = RestoreRun {
        stream_images: Default::default(),
        deadline: SignedDuration::from_hours(12),
        database_types: BTreeMap::from([("orders".to_string(), DatabaseType::Postgresql)]),
        mover: Mover::Privileged,
    };
    let job = restore_job(&restore, &from, &run, &settings());
    let args = sidecar_args(&job);
    let host = args.iter().position(|a| a == "--host").expect("--host");
    assert_eq!(args[host + 1], "shop/nightly");
    assert_golden("restore-from-repository", &job);
}

/// `plan()` after a run that opened its repository with the key `5f5f…`.
fn plan_with_key_id() -> crate::api::BackupPlan {
    let mut plan = plan();
    plan.status = Some(crate::api::BackupPlanStatus {
        repository: Some(crate::api::RepositoryStatus {
            size_bytes: 4096,
            size: "4Ki".into(),
            snapshots: 3,
            measured_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-30T02:10:00Z".parse().unwrap(),
            ),
            key_id: Some("5f".repeat(32)),
        }),
        ..crate::api::BackupPlanStatus::default()
    });
    plan
}

#[test]
fn golden_backup_job_with_the_key_that_worked_last_time() {
    assert_golden(
        "backup-key-hint",
        &backup_job(&plan_with_key_id(), &run(), &settings()),
    );
}

/// The sidecar's arguments of `job`.
fn sidecar_args(job: &Job) -> Vec<String> {
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    pod.containers[0].args.clone().unwrap_or_default()
}

#[test]
fn every_job_of_a_plan_tries_the_key_that_worked_last_time_first() {
    let hinted = plan_with_key_id();
    let hint = ["--key-hint".to_string(), "5f".repeat(32)];
    let restore_run = RestoreRun {
        stream_images: Default::default(),
        deadline: SignedDuration::from_hours(12),
        database_types: BTreeMap::new(),
        mover: Mover::Privileged,
    };
    let jobs = |plan: &crate::api::BackupPlan| {
        [
            backup_job(plan, &run(), &settings()),
            maintenance_job(plan, &maintenance_run(MaintenanceKind::Prune), &settings()),
            maintenance_job(plan, &maintenance_run(MaintenanceKind::Check), &settings()),
            restore_job(
                &restore(),
                &from_plan(&restore(), plan),
                &restore_run,
                &settings(),
            ),
        ]
    };
    for (with_hint, without) in jobs(&hinted).iter().zip(jobs(&plan()).iter()) {
        let (with_hint, without) = (sidecar_args(with_hint), sidecar_args(without));
        assert_eq!(with_hint[with_hint.len() - 2..], hint, "{with_hint:?}");
        assert_eq!(with_hint[..with_hint.len() - 2], without[..]);
        assert!(!without.contains(&hint[0]), "{without:?}");
    }
    // What the status holds is passed on only when it is a key id.
    let mut odd = hinted.clone();
    let repository = odd.status.as_mut().unwrap().repository.as_mut().unwrap();
    repository.key_id = Some("--all".into());
    assert!(!sidecar_args(&backup_job(&odd, &run(), &settings())).contains(&hint[0]));
}
