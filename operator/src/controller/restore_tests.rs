use super::*;
use crate::api::{
    BackupPlan, BackupPlanSpec, CopyMethod, NewClaim, Repository, RestoreSpec, RestoreVolume,
};
use crate::fixtures::plan_spec;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

fn plan() -> BackupPlan {
    let mut plan = BackupPlan::new(
        "nightly",
        BackupPlanSpec {
            schedule: "@daily".into(),
            time_zone: "UTC".into(),
            repository: Repository {
                url: "http://127.0.0.1:8000/shop".into(),
                credentials_secret_ref: None,
                ..plan_spec().repository
            },
            copy_method: CopyMethod::Direct,
            ..plan_spec()
        },
    );
    plan.metadata.namespace = Some("shop".into());
    plan.metadata.uid = Some("uid-plan".into());
    plan
}

pub(crate) fn restore(create: bool) -> Restore {
    let mut restore = Restore::new(
        "back",
        RestoreSpec {
            streams: Vec::new(),
            on_non_empty_target: Default::default(),
            source: crate::api::RestoreSource::Plan {
                backup_plan_name: "nightly".into(),
                copy: None,
            },
            snapshot: "latest".into(),
            taken_before: None,
            volumes: vec![RestoreVolume {
                source_claim_name: "data".into(),
                target_claim_name: "data-restored".into(),
                create_claim: create.then(|| NewClaim {
                    storage: Quantity("1Gi".into()),
                    storage_class_name: None,
                    access_modes: vec![],
                }),
                includes: vec![],
            }],
            databases: vec![],
            pod: None,
            mover: None,
            all_volumes: false,
            create_claims: None,
            storage_class_mapping: Vec::new(),
            minimum_claim_size: None,
            all_databases: None,
        },
    );
    restore.metadata.namespace = Some("shop".into());
    restore.metadata.uid = Some("uid-restore".into());
    restore.metadata.generation = Some(1);
    restore
}

fn now() -> Timestamp {
    "2026-12-01T10:00:00Z".parse().unwrap()
}

pub(crate) fn observed() -> ObservedRestore {
    ObservedRestore {
        plan: Some(plan()),
        secrets: [("repo".to_string(), ["password".to_string()].into())].into(),
        // The SubjectAccessReviews found the creator allowed everything.
        access: AccessReview::Reviewed { denied: vec![] },
        ..ObservedRestore::default()
    }
}

#[test]
fn a_restore_of_a_missing_plan_waits_pending_with_its_reason() {
    let observed = ObservedRestore::default();
    let decision = decide(&restore(true), &observed, now(), &Settings::with_image("s"));
    assert_eq!(decision.status.phase, Some(RestorePhase::Pending));
    let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
    assert_eq!(ready.reason, "BackupPlanNotFound");
    assert!(decision.create_job.is_none() && decision.create_claims.is_empty());
    assert_eq!(decision.events[0].reason, Reason::BackupPlanNotFound);
}

/// `observed()` with a plan copied to `offsite`, whose Secrets are there too.
fn observed_with_copy() -> ObservedRestore {
    let mut observed = observed();
    let plan = observed.plan.as_mut().expect("a plan");
    plan.spec.copies = vec![serde_json::from_value(serde_json::json!({
        "name": "offsite",
        "repository": {"url": "http://127.0.0.1:9000/offsite",
                       "passwordSecretRef": {"name": "offsite-repo", "key": "password"},
                       "credentialsSecretRef": {"name": "offsite-login"}},
    }))
    .expect("a copy")];
    observed.secrets = [
        ("offsite-repo".to_string(), ["password".to_string()].into()),
        (
            "offsite-login".to_string(),
            ["username".to_string(), "password".to_string()].into(),
        ),
    ]
    .into();
    observed
}

fn restore_from_copy(copy: &str) -> Restore {
    let mut restore = restore(true);
    restore.spec.source = crate::api::RestoreSource::Plan {
        backup_plan_name: "nightly".into(),
        copy: Some(copy.into()),
    };
    restore
}

#[test]
fn a_restore_from_a_copy_runs_a_job_reading_the_copys_repository_and_secrets() {
    let settings = Settings::with_image("s");
    let decision = decide(
        &restore_from_copy("offsite"),
        &observed_with_copy(),
        now(),
        &settings,
    );
    assert_eq!(decision.status.phase, Some(RestorePhase::Running));
    let job = serde_json::to_string(decision.create_job.as_ref().expect("a Job")).unwrap();
    assert!(job.contains("http://127.0.0.1:9000/offsite"), "{job}");
    assert!(
        job.contains("\"offsite-repo\"") && job.contains("\"offsite-login\""),
        "{job}"
    );
    assert!(!job.contains("127.0.0.1:8000"), "the plan's URL: {job}");
    for plan_secret in ["\"repo\"", "\"gate\""] {
        assert!(
            !job.contains(plan_secret),
            "the plan's Secret {plan_secret}: {job}"
        );
    }
    assert!(job.contains("shop/nightly"), "the plan's host: {job}");
}

#[test]
fn a_restore_from_a_copy_the_plan_lacks_waits_with_copy_not_found_and_no_job() {
    let settings = Settings::with_image("s");
    let decision = decide(
        &restore_from_copy("attic"),
        &observed_with_copy(),
        now(),
        &settings,
    );
    assert_eq!(decision.status.phase, Some(RestorePhase::Pending));
    let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
    assert_eq!(ready.reason, "CopyNotFound");
    assert!(ready.message.contains("[offsite]"), "{}", ready.message);
    assert!(decision.create_job.is_none() && decision.create_claims.is_empty());
}

#[test]
fn a_ready_restore_creates_its_claim_and_job() {
    let decision = decide(
        &restore(true),
        &observed(),
        now(),
        &Settings::with_image("s"),
    );
    assert_eq!(decision.status.phase, Some(RestorePhase::Running));
    assert_eq!(decision.create_claims.len(), 1);
    assert_eq!(
        decision.create_job.unwrap().metadata.name.as_deref(),
        Some("back-restore")
    );
    assert_eq!(decision.status.job_name.as_deref(), Some("back-restore"));
}

#[test]
fn restoring_into_a_claim_that_is_missing_or_not_ours_to_create_is_refused() {
    let decision = decide(
        &restore(false),
        &observed(),
        now(),
        &Settings::with_image("s"),
    );
    let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
    assert_eq!(ready.reason, "TargetVolumeNotFound");

    let mut observed = observed();
    observed.claims.insert(
        "data-restored".into(),
        PersistentVolumeClaim {
            metadata: kube::api::ObjectMeta {
                name: Some("data-restored".into()),
                ..Default::default()
            },
            ..Default::default()
        },
    );
    let decision = decide(&restore(true), &observed, now(), &Settings::with_image("s"));
    let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
    assert_eq!(ready.reason, "TargetVolumeExists");
}

#[test]
fn a_finished_restore_is_left_alone() {
    let mut restore = restore(true);
    restore.status = Some(RestoreStatus {
        phase: Some(RestorePhase::Succeeded),
        ..RestoreStatus::default()
    });
    let decision = decide(&restore, &observed(), now(), &Settings::with_image("s"));
    assert!(decision.create_job.is_none());
    assert_eq!(decision.requeue_after, None);
}

/// A restore Job whose pod cannot pull its image, started at `started`.
fn blocked_job(started: &str) -> (Job, Pod) {
    use k8s_openapi::api::batch::v1::JobStatus;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateWaiting, ContainerStatus, PodStatus,
    };
    let mut job = Job::default();
    job.metadata.name = Some("back-restore".into());
    job.metadata.uid = Some("uid-job".into());
    job.status = Some(JobStatus {
        start_time: Some(Time(started.parse().unwrap())),
        ..JobStatus::default()
    });
    let mut pod = Pod::default();
    pod.metadata.name = Some("back-restore-x".into());
    pod.metadata.labels = Some([("job-name".to_string(), "back-restore".to_string())].into());
    pod.status = Some(PodStatus {
        phase: Some("Pending".into()),
        container_statuses: Some(vec![ContainerStatus {
            name: crate::job::SIDECAR_CONTAINER.into(),
            image: "sidecar:missing".into(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("ImagePullBackOff".into()),
                    message: Some("Back-off pulling image".into()),
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }]),
        ..PodStatus::default()
    });
    (job, pod)
}

#[test]
fn a_restore_whose_pod_cannot_start_fails_now_with_its_jobs_start_time() {
    let mut restore = restore(true);
    // The status of the create was lost: the Job's own start time is what is known.
    restore.status = Some(RestoreStatus {
        phase: Some(RestorePhase::Running),
        ..RestoreStatus::default()
    });
    let (job, pod) = blocked_job("2026-12-01T09:58:00Z");
    let mut observed = observed();
    observed.job = Some(job);
    observed.pods = vec![pod];
    let decision = decide(&restore, &observed, now(), &Settings::with_image("s"));
    assert_eq!(decision.status.phase, Some(RestorePhase::Failed));
    assert_eq!(decision.delete_job.as_deref(), Some("back-restore"));
    assert_eq!(
        decision.status.start_time,
        Some(Time("2026-12-01T09:58:00Z".parse().unwrap()))
    );
    assert_eq!(decision.status.completion_time, Some(Time(now())));
    let complete = find_condition(&decision.status.conditions, types::COMPLETE).unwrap();
    assert_eq!(complete.reason, "ImagePullFailed");
}

#[test]
fn a_restore_whose_creator_may_not_decrypt_the_plan_gets_no_job() {
    use crate::restore_access::{access_needed, AccessDenied};
    let restore = restore(true);
    let plan = plan();
    let from = ReadFrom::of(&restore, Some(&plan)).unwrap();
    let needed = access_needed(&restore.spec, &from, |_| false);
    let mut observed = observed();
    observed.access = AccessReview::Reviewed {
        denied: vec![AccessDenied {
            user: "mallory".into(),
            access: needed[0].clone(),
        }],
    };
    let decision = decide(&restore, &observed, now(), &Settings::with_image("s"));
    assert!(decision.create_job.is_none() && decision.create_claims.is_empty());
    let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
    assert_eq!(ready.reason, "RequesterCannotDecrypt");
    assert!(ready.message.contains("\"mallory\""), "{}", ready.message);
    assert_eq!(decision.events[0].reason, Reason::RequesterCannotDecrypt);

    observed.access = AccessReview::NoRequester;
    let decision = decide(&restore, &observed, now(), &Settings::with_image("s"));
    assert!(decision.create_job.is_none());
    let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
    assert_eq!(ready.reason, "RequesterUnknown");
}

#[test]
fn a_restore_to_a_database_host_outside_the_policy_gets_no_job() {
    let mut restore = restore(true);
    restore.spec.databases = vec![crate::api::RestoreDatabase {
        name: "orders".into(),
        engine: Some(DatabaseType::Postgresql),
        host: "attacker.example".into(),
        port: None,
        credentials_secret_ref: crate::api::CredentialsSecretRef::new("mine"),
        on_non_empty_target: Default::default(),
    }];
    let mut observed = observed();
    for key in ["username", "password"] {
        observed
            .secrets
            .entry("mine".into())
            .or_default()
            .insert(key.into());
    }
    let mut settings = Settings::with_image("s");
    settings.tenant_policy = crate::tenant_policy::TenantPolicy::from_json(
        r#"{"allowedRestoreDatabaseHosts": {"shop": ["postgres.shop.svc"]}}"#,
    )
    .unwrap();
    let decision = decide(&restore, &observed, now(), &settings);
    assert!(decision.create_job.is_none());
    let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
    assert_eq!(ready.reason, "DatabaseHostNotAllowed", "{}", ready.message);
    assert!(ready.message.contains("spec.databases[0].host"));
}

/// A Restore of one stream, `cache`, with or without an image of its own.
fn restore_of_streams(image: Option<&str>) -> Restore {
    let mut restore = restore(false);
    restore.spec.volumes.clear();
    restore.spec.streams = vec![serde_json::from_value(serde_json::json!({
        "name": "cache", "image": image, "command": ["redis-cli", "--pipe"]
    }))
    .unwrap()];
    restore
}

#[test]
fn a_restore_of_streams_takes_its_image_from_the_plan_under_the_policy() {
    let settings = |json: &str| Settings {
        tenant_policy: crate::tenant_policy::TenantPolicy::from_json(json).unwrap(),
        ..Settings::with_image("s")
    };
    let ready_reason = |decision: &RestoreDecision| {
        let ready = find_condition(&decision.status.conditions, types::READY).unwrap();
        (ready.reason.clone(), ready.message.clone())
    };
    // No image, and no stream of the plan to take it from.
    let decision = decide(&restore_of_streams(None), &observed(), now(), &settings(""));
    assert!(decision.create_job.is_none());
    let (reason, message) = ready_reason(&decision);
    assert_eq!(reason, "UnknownStream");
    assert!(message.contains("set image"), "{message}");
    // The plan's stream gives it; the policy refuses it.
    let mut observed = observed();
    let plan = observed.plan.as_mut().unwrap();
    plan.spec.streams = vec![serde_json::from_value(serde_json::json!({
        "name": "cache", "image": "docker.io/redis:7", "command": ["redis-cli", "--rdb", "-"]
    }))
    .unwrap()];
    let only = settings(r#"{"allowedImages": {"shop": ["registry.example/"]}}"#);
    let decision = decide(&restore_of_streams(None), &observed, now(), &only);
    assert!(decision.create_job.is_none());
    let (reason, message) = ready_reason(&decision);
    assert_eq!(reason, "ImageNotAllowed");
    assert!(message.contains("docker.io/redis:7"), "{message}");
    // Its own allowed image: the Job starts, a restore of streams only.
    let restore = restore_of_streams(Some("registry.example/redis:7"));
    let decision = decide(&restore, &observed, now(), &only);
    let job = decision.create_job.expect("a restore Job");
    let pod = job.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.containers[1].name, "stream-cache");
    assert_eq!(
        pod.containers[1].image.as_deref(),
        Some("registry.example/redis:7")
    );
}
