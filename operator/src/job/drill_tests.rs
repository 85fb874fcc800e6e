//! A plan's drill Job: its arguments, its scratch space, what it mounts and runs as, its name,
//! and its golden YAML.

use jiff::SignedDuration;

use super::golden_tests::assert_golden;
use super::tests::{plan, settings};
use super::*;
use crate::api::{BackupPlan, VerifyScratch, VerifySpec};

fn run() -> DrillRun {
    DrillRun {
        trigger: RunTrigger::Schedule,
        scheduled_time: Some("2026-11-29T04:17:00Z".parse().unwrap()),
        request: None,
        started: "2026-11-29T04:17:00Z".parse().unwrap(),
        round: 4,
        scratch_bytes: 3 << 30,
        deadline: SignedDuration::from_hours(2),
    }
}

fn verify() -> VerifySpec {
    VerifySpec {
        sample_percent: 25,
        recovery_time_objective: Some("1h".into()),
        ..VerifySpec::default()
    }
}

fn drilled_plan() -> BackupPlan {
    let mut plan = plan();
    plan.spec.verify = Some(verify());
    plan.spec.databases = vec![serde_json::from_value(serde_json::json!({
        "name": "orders",
        "type": "postgresql",
        "host": "postgres.shop.svc",
        "credentialsSecretRef": {"name": "pg-backup"},
    }))
    .unwrap()];
    plan
}

fn pod(job: &Job) -> &k8s_openapi::api::core::v1::PodSpec {
    job.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

fn args(job: &Job) -> Vec<String> {
    pod(job).containers[0].args.clone().unwrap()
}

fn after(args: &[String], flag: &str) -> Option<String> {
    let at = args.iter().position(|a| a == flag)?;
    args.get(at + 1).cloned()
}

fn scratch(job: &Job) -> &k8s_openapi::api::core::v1::Volume {
    let volumes = pod(job).volumes.as_ref().unwrap();
    volumes.iter().find(|v| v.name == "scratch").unwrap()
}

#[test]
fn golden_drill_job() {
    let job = drill_job(&drilled_plan(), &verify(), &run(), &settings());
    assert_golden("drill", &job);
}

#[test]
fn golden_drill_job_with_an_ephemeral_scratch_volume() {
    let verify = VerifySpec {
        scratch: Some(VerifyScratch {
            storage_class_name: Some("fast-local".into()),
        }),
        ..verify()
    };
    let settings = JobSettings {
        drill_image: Some("ghcr.io/neverwiped/drill:0.1.0".into()),
        ..settings()
    };
    let job = drill_job(&drilled_plan(), &verify, &run(), &settings);
    assert_golden("drill-ephemeral", &job);
}

#[test]
fn a_drill_restores_the_plans_host_into_scratch_with_its_databases_and_sample_round() {
    let job = drill_job(&drilled_plan(), &verify(), &run(), &settings());
    let args = args(&job);
    assert_eq!(&args[..2], ["drill", "latest"]);
    assert_eq!(after(&args, "--host").as_deref(), Some("shop/nightly"));
    assert_eq!(after(&args, "--scratch").as_deref(), Some(SCRATCH_ROOT));
    assert_eq!(after(&args, "--sample-percent").as_deref(), Some("25"));
    assert_eq!(after(&args, "--sample-round").as_deref(), Some("4"));
    assert!(args.contains(&"--databases".to_owned()), "{args:?}");
    assert_eq!(
        job.metadata.name.as_deref(),
        Some("nightly-verify-29932097")
    );
    let labels = job.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[LABEL_OPERATION], DRILL_OPERATION);
    assert_eq!(labels[LABEL_PLAN], "nightly");
    assert!(is_drill_job(&job));
    assert_eq!(copy_destination_of(&job), None);
    assert_eq!(
        drill_run_of(&job),
        (run().scheduled_time, None, Some(4)),
        "what it ran for is read back"
    );
    let sidecar = &pod(&job).containers[0];
    assert_eq!(sidecar.image.as_deref(), Some(settings().image.as_str()));
    assert_eq!(
        job.spec.as_ref().unwrap().active_deadline_seconds,
        Some(7200)
    );
}

#[test]
fn a_full_drill_names_no_sample_and_a_plan_without_databases_loads_none() {
    let mut plan = drilled_plan();
    plan.spec.databases.clear();
    let verify = VerifySpec {
        sample_percent: 100,
        snapshot: "0a1b2c3d".into(),
        ..verify()
    };
    let requested = DrillRun {
        trigger: RunTrigger::Manual,
        scheduled_time: None,
        request: Some("2026-11-29T10:00:00Z".into()),
        ..run()
    };
    let job = drill_job(&plan, &verify, &requested, &settings());
    let args = args(&job);
    assert_eq!(args[1], "0a1b2c3d");
    assert!(!args.contains(&"--sample-percent".to_owned()), "{args:?}");
    assert!(!args.contains(&"--databases".to_owned()), "{args:?}");
    let (scheduled, request, _) = drill_run_of(&job);
    assert_eq!(scheduled, None);
    assert_eq!(request.as_deref(), Some("2026-11-29T10:00:00Z"));
}

#[test]
fn a_drill_mounts_only_scratch_and_the_repository_secrets_and_runs_unprivileged() {
    let job = drill_job(&drilled_plan(), &verify(), &run(), &settings());
    let pod = pod(&job);
    for volume in pod.volumes.iter().flatten() {
        assert!(
            volume.persistent_volume_claim.is_none(),
            "no claim of the plan: {volume:?}"
        );
    }
    let scratch = scratch(&job);
    let limit = scratch.empty_dir.as_ref().unwrap().size_limit.as_ref();
    assert_eq!(limit.map(|q| q.0.as_str()), Some("3072Mi"));
    let sidecar = &pod.containers[0];
    let mounts = sidecar.volume_mounts.as_ref().unwrap();
    let writable: Vec<&str> = (mounts.iter())
        .filter(|m| m.read_only != Some(true))
        .map(|m| m.mount_path.as_str())
        .collect();
    assert_eq!(writable, [SCRATCH_ROOT, "/tmp"]);
    let security = sidecar.security_context.as_ref().unwrap();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    let pod_security = pod.security_context.as_ref().unwrap();
    assert_eq!(pod_security.fs_group, Some(super::pod::UNPRIVILEGED_UID));
    assert_eq!(pod.automount_service_account_token, Some(false));
}

#[test]
fn an_ephemeral_scratch_volume_asks_for_the_size_in_its_class_and_the_drill_image_runs() {
    let verify = VerifySpec {
        scratch: Some(VerifyScratch::default()),
        ..verify()
    };
    let settings = JobSettings {
        drill_image: Some("registry.example/drill@sha256:ab".into()),
        drill_image_pull_policy: Some("Always".into()),
        ..settings()
    };
    let job = drill_job(&drilled_plan(), &verify, &run(), &settings);
    let template = scratch(&job).ephemeral.as_ref().unwrap();
    let claim = &template.volume_claim_template.as_ref().unwrap().spec;
    assert_eq!(
        claim.storage_class_name, None,
        "the cluster's default class"
    );
    let requests = claim.resources.as_ref().unwrap().requests.as_ref().unwrap();
    assert_eq!(requests["storage"].0, "3072Mi");
    let sidecar = &pod(&job).containers[0];
    let image = sidecar.image.as_deref();
    assert_eq!(image, Some("registry.example/drill@sha256:ab"));
    assert_eq!(sidecar.image_pull_policy.as_deref(), Some("Always"));
}

#[test]
fn a_long_plan_name_keeps_the_drills_minute_within_63_characters() {
    let mut plan = drilled_plan();
    plan.metadata.name = Some("a".repeat(63));
    let name = drill_job_name(&plan, run().started);
    assert!(name.len() <= 63, "{name}");
    assert!(name.ends_with("-verify-29932097"), "{name}");
}
