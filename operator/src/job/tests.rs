//! The Jobs as values: arguments, mounts, privileges, names.
use super::pod::UNPRIVILEGED_UID;
use super::*;
use crate::api::{
    BackupPlan, BackupPlanSpec, CopyMethod, CredentialsSecretRef, DatabaseSource, Limits,
    NonEmptyTargetPolicy, PodSettings, Repository, Restore, RestoreDatabase, RestoreSpec,
    RestoreVolume, SecretKeyRef,
};
pub(super) use crate::fixtures::from_plan;
use crate::fixtures::plan_spec;
use crate::mover::{Mover, MoverIdentity};
use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec};

pub(super) fn settings() -> JobSettings {
    JobSettings {
        image: "ghcr.io/neverwiped/sidecar:0.1.0".into(),
        drill_image: None,
        drill_image_pull_policy: None,
        image_pull_policy: Some("IfNotPresent".into()),
        default_resources: None,
        protection: Default::default(),
    }
}

pub(super) fn plan() -> BackupPlan {
    let mut plan = BackupPlan::new(
        "nightly",
        BackupPlanSpec {
            repository: Repository {
                ca_secret_ref: Some(SecretKeyRef {
                    name: "gate-ca".into(),
                    key: "ca.crt".into(),
                }),
                ..plan_spec().repository
            },
            copy_method: CopyMethod::Direct,
            limits: Some(Limits {
                upload_bytes_per_second: Some(5_000_000),
            }),
            deadline: "2h".into(),
            pod: Some(PodSettings {
                tolerations: vec![Toleration {
                    key: Some("backup".into()),
                    operator: Some("Exists".into()),
                    ..Toleration::default()
                }],
                ..PodSettings::default()
            }),
            ..plan_spec()
        },
    );
    plan.metadata.namespace = Some("shop".into());
    plan.metadata.uid = Some("0b6d1c1e-0000-4000-8000-000000000001".into());
    plan.metadata.generation = Some(3);
    plan
}

pub(super) fn run() -> BackupRun {
    BackupRun {
        hooks_in_pod: true,
        trigger: RunTrigger::Schedule,
        scheduled_time: Some("2026-11-30T01:30:00Z".parse().unwrap()),
        manual_trigger: None,
        volumes: vec![
            BackupVolumeMount {
                source_claim: "logs".into(),
                mounted_claim: "logs".into(),
                excludes: vec!["*.gz".into()],
                selection: Default::default(),
                claim: None,
            },
            BackupVolumeMount {
                source_claim: "data".into(),
                mounted_claim: "data".into(),
                excludes: vec!["cache".into(), "/lost+found".into()],
                selection: Default::default(),
                claim: Some(
                    serde_json::from_value(serde_json::json!({
                        "metadata": {"name": "data", "labels": {"app": "shop"}},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "storageClassName": "fast",
                            "resources": {"requests": {"storage": "10Gi"}}
                        }
                    }))
                    .unwrap(),
                ),
            },
        ],
        node_name: Some("node-7".into()),
        deadline: SignedDuration::from_hours(2),
        remove_stale_locks: true,
        mover: Mover::Privileged,
    }
}

pub(super) fn pod_spec(job: &Job) -> &PodSpec {
    job.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

pub(super) fn container(job: &Job) -> &Container {
    &pod_spec(job).containers[0]
}

fn env_value<'a>(container: &'a Container, name: &str) -> Option<&'a EnvVar> {
    container
        .env
        .as_ref()
        .unwrap()
        .iter()
        .find(|e| e.name == name)
}

#[test]
fn backup_job_runs_the_sidecar_with_the_documented_arguments() {
    let job = backup_job(&plan(), &run(), &settings());
    let container = container(&job);
    assert_eq!(
        container.command.as_deref(),
        Some(&["/usr/local/bin/neverwiped-sidecar".to_string()][..])
    );
    assert_eq!(
        container.args.as_deref().unwrap(),
        [
            "backup",
            "/data/data",
            "/data/logs",
            "--repo",
            "rest:https://gate.example.com/shop",
            "--result-file",
            "/dev/termination-log",
            "--host",
            "shop/nightly",
            "--tag",
            "plan=nightly",
            "--exclude",
            "/data/data/**/cache",
            "--exclude",
            "/data/data/lost+found",
            "--exclude",
            "/data/logs/**/*.gz",
            "--limit-upload",
            "5000000",
            "--remove-locks-of-host",
            "nightly-d0997da5b47dbdb3",
            // Half the 2h deadline, at most 30 minutes.
            "--retry-lock",
            "1800s",
            "--init",
            // What the claim was; the logs volume's claim was not seen.
            "--claim",
            r#"{"path":"/data/data","name":"data","requestedSize":"10Gi","storageClassName":"fast","accessModes":["ReadWriteOnce"],"labels":{"app":"shop"}}"#,
        ]
    );
    // The pod runs under that host name, which the sidecar records in its locks.
    assert_eq!(
        pod_spec(&job).hostname.as_deref(),
        Some("nightly-d0997da5b47dbdb3")
    );
    let alive = BackupRun {
        hooks_in_pod: true,
        remove_stale_locks: false,
        ..run()
    };
    let job = backup_job(&plan(), &alive, &settings());
    assert!(!pod_spec(&job).containers[0]
        .args
        .as_ref()
        .unwrap()
        .contains(&"--remove-locks-of-host".to_string()));
    assert_eq!(
        pod_spec(&job).hostname.as_deref(),
        Some("nightly-d0997da5b47dbdb3")
    );
}

#[test]
fn the_sidecar_gives_up_on_a_gate_at_half_the_deadline_at_most_its_own_budget() {
    let budget = |deadline: SignedDuration| {
        let job = backup_job(&plan(), &BackupRun { deadline, ..run() }, &settings());
        let value =
            env_value(container(&job), neverwiped_contract::cli::env::RETRY_BUDGET).unwrap();
        value.value.clone().unwrap()
    };
    // A gate down past half the run fails it with the gate's error, before the deadline.
    assert_eq!(budget(SignedDuration::from_mins(1)), "30s");
    assert_eq!(budget(SignedDuration::from_mins(20)), "600s");
    // The sidecar's own 15 minutes for the runs that may last longer.
    assert_eq!(budget(SignedDuration::from_hours(2)), "900s");
    assert_eq!(budget(SignedDuration::from_secs(1)), "1s");
}

#[test]
fn lock_host_names_are_dns_labels_that_differ_per_plan_and_stay_per_plan() {
    let name = lock_hostname("shop", "nightly");
    assert_eq!(name, lock_hostname("shop", "nightly"));
    assert_ne!(name, lock_hostname("shop2", "nightly"));
    assert_ne!(name, lock_hostname("shop", "nightly2"));
    for (namespace, plan) in [("shop", "nightly"), ("a", &"x.y".repeat(80)), ("a", "...")] {
        let host = lock_hostname(namespace, plan);
        assert!(host.len() <= 63, "{host}");
        assert!(
            host.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{host}"
        );
        assert!(!host.starts_with('-') && !host.ends_with('-'), "{host}");
    }
}

#[test]
fn backup_job_mounts_volumes_read_only_at_their_claim_names() {
    let job = backup_job(&plan(), &run(), &settings());
    let pod = pod_spec(&job);
    let mounts = container(&job).volume_mounts.as_ref().unwrap();
    for (claim, path) in [("data", "/data/data"), ("logs", "/data/logs")] {
        let mount = mounts.iter().find(|m| m.mount_path == path).unwrap();
        assert_eq!(mount.read_only, Some(true));
        let volume = pod
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == mount.name)
            .unwrap();
        let source = volume.persistent_volume_claim.as_ref().unwrap();
        assert_eq!(source.claim_name, claim);
        assert_eq!(source.read_only, Some(true));
    }
    assert!(mounts
        .iter()
        .any(|m| m.mount_path == "/tmp" && m.read_only.is_none()));
}

#[test]
fn secrets_reach_the_sidecar_only_as_files_and_environment() {
    let job = backup_job(&plan(), &run(), &settings());
    let container = container(&job);
    assert_eq!(
        env_value(container, "NEVERWIPED_PASSWORD_FILE")
            .unwrap()
            .value
            .as_deref(),
        Some("/var/run/neverwiped/repository/password")
    );
    assert_eq!(
        env_value(container, "NEVERWIPED_GATE_PASSWORD_FILE")
            .unwrap()
            .value
            .as_deref(),
        Some("/var/run/neverwiped/gate/password")
    );
    assert_eq!(
        env_value(container, "NEVERWIPED_GATE_CA_FILE")
            .unwrap()
            .value
            .as_deref(),
        Some("/var/run/neverwiped/gate-ca/ca.crt")
    );
    let username = env_value(container, "NEVERWIPED_GATE_USERNAME").unwrap();
    let selector = username
        .value_from
        .as_ref()
        .unwrap()
        .secret_key_ref
        .as_ref()
        .unwrap();
    assert_eq!(
        (selector.name.as_str(), selector.key.as_str()),
        ("gate", "username")
    );

    let volumes = pod_spec(&job).volumes.as_ref().unwrap();
    let password = volumes
        .iter()
        .find(|v| v.name == "repository-password")
        .unwrap();
    let secret = password.secret.as_ref().unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some("repo"));
    assert_eq!(secret.items.as_ref().unwrap()[0].key, "password");
    // No argument names a Secret's value, and none could: they are not known to the builder.
    assert!(container
        .args
        .as_ref()
        .unwrap()
        .iter()
        .all(|a| !a.contains("gate-ca") && !a.contains("repo ")));
}

#[test]
fn backup_job_is_locked_down() {
    let job = backup_job(&plan(), &run(), &settings());
    let job_spec = job.spec.as_ref().unwrap();
    assert_eq!(job_spec.backoff_limit, Some(0));
    assert_eq!(job_spec.active_deadline_seconds, Some(7200));
    let pod = pod_spec(&job);
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let pod_security = pod.security_context.as_ref().unwrap();
    assert_eq!(
        pod_security.seccomp_profile.as_ref().unwrap().type_,
        "RuntimeDefault"
    );
    assert_eq!(
        pod_security.fs_group, None,
        "fsGroup would chown the claims"
    );
    let container = container(&job);
    assert_eq!(
        container.termination_message_policy.as_deref(),
        Some("File")
    );
    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    let capabilities = security.capabilities.as_ref().unwrap();
    assert_eq!(capabilities.drop.as_deref(), Some(&["ALL".to_string()][..]));
    assert_eq!(
        capabilities.add.as_deref(),
        Some(&["DAC_READ_SEARCH".to_string()][..])
    );
}

#[test]
fn backup_job_links_to_its_plan_and_places_direct_reads_on_the_volumes_node() {
    let job = backup_job(&plan(), &run(), &settings());
    assert_eq!(job.metadata.name.as_deref(), Some("nightly-29933370"));
    assert_eq!(job.metadata.namespace.as_deref(), Some("shop"));
    let labels = job.metadata.labels.as_ref().unwrap();
    assert_eq!(labels.get(LABEL_PLAN).map(String::as_str), Some("nightly"));
    assert_eq!(
        labels.get(LABEL_OPERATION).map(String::as_str),
        Some("backup")
    );
    let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("BackupPlan", "nightly")
    );
    assert_eq!(owner.controller, Some(true));
    let annotations = job.metadata.annotations.as_ref().unwrap();
    assert_eq!(
        annotations[ANNOTATION_SCHEDULED_TIME],
        "2026-11-30T01:30:00Z"
    );
    assert_eq!(annotations[ANNOTATION_TRIGGER], "Schedule");

    let pod = pod_spec(&job);
    let terms = &pod
        .affinity
        .as_ref()
        .unwrap()
        .node_affinity
        .as_ref()
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap()
        .node_selector_terms;
    let field = &terms[0].match_fields.as_ref().unwrap()[0];
    assert_eq!(
        (field.key.as_str(), field.values.as_deref()),
        ("metadata.name", Some(&["node-7".to_string()][..]))
    );
    assert_eq!(
        pod.tolerations.as_ref().unwrap()[0].key.as_deref(),
        Some("backup")
    );
}

#[test]
fn job_names_fit_a_label_value_and_differ_per_run() {
    let mut plan = plan();
    plan.metadata.name = Some("a".repeat(80));
    let name = backup_job_name(&plan, &run());
    assert!(name.len() <= 63, "{name}");
    assert!(name.ends_with("-29933370"));
    let manual = BackupRun {
        hooks_in_pod: true,
        trigger: RunTrigger::Manual,
        scheduled_time: None,
        ..run()
    };
    assert!(backup_job_name(&plan, &manual).ends_with("-manual-3"));
}

#[test]
fn database_only_backup_runs_unprivileged_and_passes_credentials_by_reference() {
    let mut plan = plan();
    plan.spec.volumes.clear();
    plan.spec.databases = vec![
        DatabaseSource {
            name: "orders".into(),
            engine: DatabaseType::Postgresql,
            host: "pg.shop.svc".into(),
            port: None,
            credentials_secret_ref: CredentialsSecretRef::new("pg-backup"),
            databases: vec![],
        },
        DatabaseSource {
            name: "shop-db".into(),
            engine: DatabaseType::Mariadb,
            host: "mariadb".into(),
            port: Some(3307),
            credentials_secret_ref: CredentialsSecretRef::new("mariadb-backup"),
            databases: vec!["shop".into(), "audit".into()],
        },
    ];
    let run = BackupRun {
        hooks_in_pod: true,
        volumes: vec![],
        node_name: None,
        ..run()
    };
    let job = backup_job(&plan, &run, &settings());
    let container = container(&job);
    let args = container.args.as_ref().unwrap();
    let databases: Vec<_> = args
        .windows(2)
        .filter(|w| w[0] == "--database")
        .map(|w| w[1].as_str())
        .collect();
    assert_eq!(
        databases,
        [
            "orders=postgresql://$(NEVERWIPED_DB_USERNAME_ORDERS)@pg.shop.svc:5432",
            "shop-db=mariadb://$(NEVERWIPED_DB_USERNAME_SHOP_DB)@mariadb:3307/shop",
            "shop-db=mariadb://$(NEVERWIPED_DB_USERNAME_SHOP_DB)@mariadb:3307/audit",
        ]
    );
    // One password file per entry, however many of its databases are dumped.
    let password_files: Vec<_> = args
        .windows(2)
        .filter(|w| w[0] == "--database-password-file")
        .map(|w| w[1].split('=').next().unwrap())
        .collect();
    assert_eq!(password_files, ["orders", "shop-db"]);
    assert!(args.windows(2).any(|w| w
        == [
            "--database-password-file",
            "orders=/var/run/neverwiped/databases/orders/password"
        ]));
    // The variable the URI names is defined, from the Secret, before use.
    let username = env_value(container, "NEVERWIPED_DB_USERNAME_ORDERS").unwrap();
    assert_eq!(
        username
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap()
            .name,
        "pg-backup"
    );

    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(security.capabilities.as_ref().unwrap().add, None);
    assert_eq!(
        pod_spec(&job).security_context.as_ref().unwrap().fs_group,
        Some(UNPRIVILEGED_UID)
    );
}

pub(super) fn restore() -> Restore {
    let mut restore = Restore::new(
        "bring-back",
        RestoreSpec {
            streams: Vec::new(),
            on_non_empty_target: Default::default(),
            source: crate::api::RestoreSource::Plan {
                backup_plan_name: "nightly".into(),
                copy: None,
            },
            snapshot: "latest".into(),
            taken_before: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-29T00:00:00Z".parse().unwrap(),
            )),
            volumes: vec![RestoreVolume {
                source_claim_name: "data".into(),
                target_claim_name: "data-restored".into(),
                create_claim: None,
                includes: vec!["/uploads/2026".into()],
            }],
            databases: vec![RestoreDatabase {
                name: "orders".into(),
                engine: None,
                host: "pg-new".into(),
                port: None,
                credentials_secret_ref: CredentialsSecretRef::new("pg-admin"),
                on_non_empty_target: NonEmptyTargetPolicy::Overwrite,
            }],
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
    restore.metadata.uid = Some("0b6d1c1e-0000-4000-8000-000000000002".into());
    restore
}

#[test]
fn trigger_names_read_back_and_anything_else_is_an_error() {
    for trigger in [
        RunTrigger::Schedule,
        RunTrigger::CatchUp,
        RunTrigger::Manual,
    ] {
        assert_eq!(parse_trigger(Some(trigger_name(trigger))), Ok(trigger));
    }
    assert_eq!(
        parse_trigger(Some("manual")),
        Err(UnknownTrigger(Some("manual".into())))
    );
    assert_eq!(parse_trigger(None), Err(UnknownTrigger(None)));
}

#[test]
fn an_unprivileged_backup_reads_as_its_user_with_the_fs_group_as_a_supplemental_group() {
    let unprivileged = BackupRun {
        hooks_in_pod: true,
        mover: Mover::Unprivileged(MoverIdentity {
            uid: 1000,
            gid: 3000,
            supplemental_groups: vec![4000],
            fs_group: Some(2000),
        }),
        ..run()
    };
    let job = backup_job(&plan(), &unprivileged, &settings());
    let pod = pod_spec(&job);
    let pod_security = pod.security_context.as_ref().unwrap();
    assert_eq!(
        pod_security.fs_group, None,
        "fsGroup would chown the claims"
    );
    assert_eq!(pod_security.fs_group_change_policy, None);
    assert_eq!(pod_security.supplemental_groups, Some(vec![2000, 4000]));
    let security = container(&job).security_context.as_ref().unwrap();
    assert_eq!(security.run_as_user, Some(1000));
    assert_eq!(security.run_as_group, Some(3000));
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(security.capabilities.as_ref().unwrap().add, None);
    // Without an fsGroup the Secrets' files must be readable by a user that is not root.
    for volume in pod.volumes.iter().flatten() {
        if let Some(secret) = &volume.secret {
            assert_eq!(secret.default_mode, Some(0o444), "{}", volume.name);
        }
    }
}

#[test]
fn an_unprivileged_restore_sets_its_fs_group_only_when_the_root_mismatches() {
    let run = RestoreRun {
        stream_images: Default::default(),
        deadline: SignedDuration::from_hours(1),
        database_types: BTreeMap::new(),
        mover: Mover::Unprivileged(MoverIdentity {
            uid: 1000,
            gid: 1000,
            supplemental_groups: vec![],
            fs_group: Some(2000),
        }),
    };
    let job = restore_job(
        &restore(),
        &from_plan(&restore(), &plan()),
        &run,
        &settings(),
    );
    let pod = pod_spec(&job);
    let pod_security = pod.security_context.as_ref().unwrap();
    assert_eq!(pod_security.fs_group, Some(2000));
    assert_eq!(
        pod_security.fs_group_change_policy.as_deref(),
        Some("OnRootMismatch")
    );
    let security = container(&job).security_context.as_ref().unwrap();
    assert_eq!(security.run_as_user, Some(1000));
    assert_eq!(security.capabilities.as_ref().unwrap().add, None);
    for volume in pod.volumes.iter().flatten() {
        if let Some(secret) = &volume.secret {
            assert_eq!(secret.default_mode, Some(0o440), "{}", volume.name);
        }
    }
}

#[test]
fn an_unprivileged_pod_is_never_built_as_root_whatever_identity_it_is_given() {
    let root = MoverIdentity {
        uid: 0,
        gid: 0,
        supplemental_groups: vec![],
        fs_group: Some(0),
    };
    let restore_run = RestoreRun {
        stream_images: Default::default(),
        deadline: SignedDuration::from_hours(1),
        database_types: BTreeMap::new(),
        mover: Mover::Unprivileged(root.clone()),
    };
    let backup_run = BackupRun {
        hooks_in_pod: true,
        mover: Mover::Unprivileged(root),
        ..run()
    };
    for job in [
        restore_job(
            &restore(),
            &from_plan(&restore(), &plan()),
            &restore_run,
            &settings(),
        ),
        backup_job(&plan(), &backup_run, &settings()),
    ] {
        let security = container(&job).security_context.as_ref().unwrap();
        assert_eq!(security.run_as_user, Some(UNPRIVILEGED_UID));
        assert_eq!(security.run_as_non_root, Some(true));
        assert_eq!(security.capabilities.as_ref().unwrap().add, None);
        let pod_security = pod_spec(&job).security_context.as_ref().unwrap();
        assert_ne!(pod_security.run_as_user, Some(0));
    }
}
