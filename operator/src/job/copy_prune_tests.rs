//! A destination's prune Job: its keep rules, where it runs and with which login, and its golden
//! YAML.

use jiff::SignedDuration;

use super::copy_tests::destination;
use super::golden_tests::assert_golden;
use super::tests::{plan, settings};
use super::*;
use crate::api::{
    BackupPlan, BackupPlanStatus, CopyDestination, Retention, SuspiciousChange,
    ANNOTATION_ACKNOWLEDGE_SUSPICIOUS_CHANGE,
};
use crate::protection::Protection;

fn kept_destination() -> CopyDestination {
    CopyDestination {
        retention: Some(Retention {
            keep_daily: Some(7),
            keep_weekly: Some(4),
            ..Retention::default()
        }),
        ..destination()
    }
}

fn run() -> CopyPruneRun {
    CopyPruneRun {
        trigger: RunTrigger::Schedule,
        scheduled_time: "2026-11-29T00:00:00Z".parse().unwrap(),
        deadline: SignedDuration::from_hours(2),
        remove_stale_locks: true,
    }
}

fn copy_plan() -> BackupPlan {
    let mut plan = plan();
    // The plan's own retention is not the destination's.
    plan.spec.retention = Some(Retention {
        keep_last: Some(30),
        ..Retention::default()
    });
    plan.spec.copies = vec![kept_destination()];
    plan
}

/// The admin covers the destination's gate (not the plan's) with a maintenance login.
fn destination_protected() -> JobSettings {
    let values = r#"{"credentials": [{"urlPrefix": "https://gate.other-site.example/", "secretName": "offsite-maintenance"}],
        "protectionWindow": {"default": "14d"}}"#;
    JobSettings {
        protection: Protection::parse(values, "neverwiped-system").unwrap(),
        ..settings()
    }
}

fn args(job: &Job) -> Vec<String> {
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    pod.containers[0].args.clone().unwrap()
}

fn after(args: &[String], flag: &str) -> Option<String> {
    let at = args.iter().position(|a| a == flag)?;
    args.get(at + 1).cloned()
}

fn mounted_secrets(job: &Job) -> Vec<String> {
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    (pod.volumes.iter().flatten())
        .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
        .collect()
}

#[test]
fn golden_copy_prune_job() {
    let pruned = copy_prune_job(&copy_plan(), &kept_destination(), &run(), &settings());
    assert!(pruned.password_copy.is_none());
    assert_golden("copy-prune", &pruned.job);
}

#[test]
fn golden_protected_copy_prune_job_runs_in_the_operators_namespace() {
    let settings = destination_protected();
    let pruned = copy_prune_job(&copy_plan(), &kept_destination(), &run(), &settings);
    assert_golden("copy-prune-protected", &pruned.job);
}

#[test]
fn a_destinations_prune_forgets_the_plans_host_there_by_the_destinations_keep_rules() {
    let pruned = copy_prune_job(&copy_plan(), &kept_destination(), &run(), &settings());
    let job = &pruned.job;
    let args = args(job);
    assert_eq!(args[0], "prune");
    assert_eq!(
        after(&args, "--repo").as_deref(),
        Some("rest:https://gate.other-site.example/shop/nightly")
    );
    assert_eq!(after(&args, "--host").as_deref(), Some("shop/nightly"));
    assert_eq!(after(&args, "--keep-daily").as_deref(), Some("7"));
    assert_eq!(after(&args, "--keep-weekly").as_deref(), Some("4"));
    assert_eq!(
        after(&args, "--keep-last"),
        None,
        "the plan's own rules stay home"
    );
    assert_eq!(
        after(&args, "--remove-locks-of-host"),
        Some(lock_hostname("shop", "nightly"))
    );
    // The plan's key hint names a key of its own repository.
    assert!(!args.contains(&"--key-hint".to_owned()));
    assert_eq!(job.metadata.namespace.as_deref(), Some("shop"));
    assert_eq!(
        job.metadata.name.as_deref(),
        Some("nightly-copy-offsite-prune-29931840")
    );
    let labels = job.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[LABEL_OPERATION], "prune");
    assert_eq!(copy_prune_destination_of(job), Some("offsite"));
    assert_eq!(copy_destination_of(job), None, "a prune is no copy");
    assert_eq!(
        job_annotation(job, ANNOTATION_REPOSITORY_HOST),
        Some("gate.other-site.example")
    );
    // Unprotected, it prunes with the destination's own login, from the plan's namespace.
    let secrets = mounted_secrets(job);
    assert!(
        secrets.contains(&"offsite-repository".to_owned()),
        "{secrets:?}"
    );
    assert!(secrets.contains(&"offsite-gate".to_owned()), "{secrets:?}");
    assert!(!secrets.contains(&"gate".to_owned()), "{secrets:?}");
}

#[test]
fn a_protected_destination_is_pruned_from_the_operators_namespace_with_the_admins_login() {
    let settings = destination_protected();
    let plan = copy_plan();
    let pruned = copy_prune_job(&plan, &kept_destination(), &run(), &settings);
    let job = &pruned.job;
    assert_eq!(job.metadata.namespace.as_deref(), Some("neverwiped-system"));
    assert!(job.metadata.owner_references.is_none());
    assert!(
        remote_job_of(job, &plan),
        "found by the plan's labels and uid"
    );
    let name = job.metadata.name.clone().unwrap();
    assert!(
        name.starts_with("shop-nightly-copy-offsite-prune-29931840-"),
        "{name}"
    );
    let secrets = mounted_secrets(job);
    assert!(
        secrets.contains(&"offsite-maintenance".to_owned()),
        "{secrets:?}"
    );
    assert!(
        secrets.contains(&format!("{name}-repository")),
        "{secrets:?}"
    );
    assert!(!secrets.contains(&"offsite-gate".to_owned()), "{secrets:?}");
    let copy = pruned
        .password_copy
        .expect("a copy of the destination's password");
    assert_eq!(copy.source_namespace, "shop");
    assert_eq!(copy.namespace, "neverwiped-system");
    assert_eq!(copy.password.name, "offsite-repository");
    assert_eq!(copy.job_name, name);
    let args = args(job);
    assert_eq!(after(&args, "--protect-within").as_deref(), Some("14d"));
    assert_eq!(after(&args, "--keep-daily").as_deref(), Some("7"));
    // The plan's own prune stays in its namespace: its repository is not under the prefix.
    let own = maintenance_job_name(
        &plan,
        &MaintenanceRun {
            kind: MaintenanceKind::Prune,
            trigger: RunTrigger::Schedule,
            scheduled_time: run().scheduled_time,
            deadline: run().deadline,
            remove_stale_locks: false,
        },
        &settings,
    );
    assert_eq!(own, "nightly-prune-29931840");
}

#[test]
fn a_suspicious_night_leaves_a_destinations_prune_without_keep_rules_until_acknowledged() {
    let mut plan = copy_plan();
    plan.status = Some(BackupPlanStatus {
        suspicious_change: Some(SuspiciousChange {
            snapshot_id: "4f2a9c1b".repeat(8),
            reason: "MassRewrite".into(),
            message: "98% of the parent's files were changed".into(),
            time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-28T02:40:00Z".parse().unwrap(),
            ),
        }),
        ..BackupPlanStatus::default()
    });
    let paused = copy_prune_job(&plan, &kept_destination(), &run(), &settings());
    let keep_flags = |job: &Job| {
        args(job)
            .iter()
            .filter(|a| a.starts_with("--keep-"))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(keep_flags(&paused.job), Vec::<String>::new());
    plan.metadata.annotations = Some(
        [(
            ANNOTATION_ACKNOWLEDGE_SUSPICIOUS_CHANGE.to_owned(),
            "4f2a9c1b".to_owned(),
        )]
        .into(),
    );
    let resumed = copy_prune_job(&plan, &kept_destination(), &run(), &settings());
    assert_eq!(keep_flags(&resumed.job), ["--keep-daily", "--keep-weekly"]);
}

#[test]
fn copy_prune_job_names_stay_apart_between_destinations_and_times() {
    let plan = copy_plan();
    let at = |text: &str| text.parse().unwrap();
    let names = [
        copy_prune_job_name(&plan, "offsite", at("2026-11-29T00:00:00Z"), false),
        copy_prune_job_name(&plan, "offsite", at("2026-12-06T00:00:00Z"), false),
        copy_prune_job_name(&plan, "archive", at("2026-11-29T00:00:00Z"), false),
        copy_prune_job_name(&plan, "offsite", at("2026-11-29T00:00:00Z"), true),
        copy_prune_job_name(&plan, "archive", at("2026-11-29T00:00:00Z"), true),
    ];
    for (index, name) in names.iter().enumerate() {
        assert!(name.len() <= 63, "{name}");
        assert!(!names[..index].contains(name), "{names:?}");
    }
}
