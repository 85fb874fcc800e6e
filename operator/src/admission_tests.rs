use super::*;
use crate::api::{
    BackupVolume, DatabaseSource, DatabaseType, NonEmptyTargetPolicy, RestoreDatabase,
    RestoreVolume, SecretKeyRef,
};
use k8s_openapi::api::core::v1::Toleration;

fn plan() -> BackupPlanSpec {
    serde_json::from_value(serde_json::json!({
        "schedule": "30 2 * * *",
        "repository": {
            "url": "https://gate.example.com/shop",
            "passwordSecretRef": {"name": "repo", "key": "password"},
            "credentialsSecretRef": {"name": "gate"}
        },
        "volumes": [{"claimName": "data", "excludes": ["cache", "/tmp", "*.log"]}]
    }))
    .unwrap()
}

fn restore() -> RestoreSpec {
    serde_json::from_value(serde_json::json!({
        "backupPlanName": "nightly",
        "volumes": [{"sourceClaimName": "data", "targetClaimName": "data-restored",
                     "includes": ["/uploads/2026"]}]
    }))
    .unwrap()
}

fn reasons_of(refusals: &[Refusal]) -> Vec<Reason> {
    refusals.iter().map(Refusal::reason).collect()
}

#[test]
fn a_valid_plan_and_restore_are_refused_nothing() {
    let policy = TenantPolicy::default();
    assert_eq!(check_backup_plan(&plan(), &SecretTypes::new(), &policy), []);
    let restore = restore();
    assert_eq!(
        check_restore(&restore, Some(&plan()), &SecretTypes::new(), &policy),
        []
    );
}

#[test]
fn a_source_claim_name_that_walks_out_of_the_restore_directory_is_refused() {
    let mut spec = restore();
    spec.volumes[0].source_claim_name = "../../usr/lib/postgresql/18/bin".into();
    let refusals = check_restore(
        &spec,
        Some(&plan()),
        &SecretTypes::new(),
        &Default::default(),
    );
    assert_eq!(reasons_of(&refusals), [Reason::InvalidName]);
    let message = refusals[0].to_string();
    assert!(
        message.starts_with("spec.volumes[0].sourceClaimName: \"../../usr/lib/postgresql/18/bin\" is not a DNS-1123 subdomain"),
        "{message}"
    );
}

#[test]
fn every_name_that_becomes_a_path_or_an_object_name_is_checked() {
    let mut spec = restore();
    spec.source = RestoreSource::Plan {
        backup_plan_name: "Nightly".into(),
        copy: None,
    };
    spec.volumes.push(RestoreVolume {
        source_claim_name: "a/b".into(),
        target_claim_name: "..".into(),
        create_claim: None,
        includes: vec![],
    });
    spec.databases.push(RestoreDatabase {
        name: "../x".into(),
        engine: Some(DatabaseType::Postgresql),
        host: "db?sslmode=disable".into(),
        port: None,
        credentials_secret_ref: CredentialsSecretRef::new("creds/../x"),
        on_non_empty_target: NonEmptyTargetPolicy::Refuse,
    });
    let refusals = check_restore(&spec, None, &SecretTypes::new(), &Default::default());
    let fields: Vec<String> = refusals
        .iter()
        .map(|r| match r {
            Refusal::InvalidName { field, .. } => field.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        fields,
        [
            "spec.backupPlanName",
            "spec.volumes[1].sourceClaimName",
            "spec.volumes[1].targetClaimName",
            "spec.databases[0].name",
            "spec.databases[0].host",
            "spec.databases[0].credentialsSecretRef.name",
        ]
    );
}

#[test]
fn excludes_and_includes_with_a_parent_component_or_a_control_character_are_refused() {
    let mut spec = plan();
    spec.volumes[0].excludes = vec![
        "../other".into(),
        "a/../../b".into(),
        "ok/..hidden".into(),
        "line\nbreak".into(),
        "$(NEVERWIPED_PASSWORD_FILE)".into(),
    ];
    let refusals = check_backup_plan(&spec, &SecretTypes::new(), &Default::default());
    assert_eq!(
        refusals,
        [
            Refusal::InvalidPath {
                field: "spec.volumes[0].excludes[0]".into(),
                value: "../other".into(),
                fault: PathFault::ParentComponent,
            },
            Refusal::InvalidPath {
                field: "spec.volumes[0].excludes[1]".into(),
                value: "a/../../b".into(),
                fault: PathFault::ParentComponent,
            },
            Refusal::InvalidPath {
                field: "spec.volumes[0].excludes[3]".into(),
                value: "line\nbreak".into(),
                fault: PathFault::ControlCharacter,
            },
        ]
    );
    let mut restore = restore();
    restore.volumes[0].includes = vec!["/uploads/../../../etc".into()];
    let refusals = check_restore(&restore, None, &SecretTypes::new(), &Default::default());
    assert_eq!(reasons_of(&refusals), [Reason::InvalidPath]);
}

#[test]
fn tag_files_that_are_not_names_and_sizes_that_do_not_parse_are_refused_by_field() {
    let mut spec = plan();
    spec.volumes[0].exclude_if_present = vec![
        ".nobackup".into(),
        ":header".into(),
        "a/b".into(),
        "..".into(),
    ];
    spec.volumes[0].exclude_larger_than = Some("99999999999T".into());
    let refusals = check_backup_plan(&spec, &SecretTypes::new(), &Default::default());
    let fields: Vec<String> = refusals
        .iter()
        .map(|r| match r {
            Refusal::InvalidSelection { field, .. } => field.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        fields,
        [
            "spec.volumes[0].excludeIfPresent[1]",
            "spec.volumes[0].excludeIfPresent[2]",
            "spec.volumes[0].excludeIfPresent[3]",
            "spec.volumes[0].excludeLargerThan",
        ]
    );
    assert_eq!(
        refusals[0].to_string(),
        "spec.volumes[0].excludeIfPresent[1]: \":header\" is refused: the file name before ':' is empty"
    );
    assert_eq!(
        refusals[3].to_string(),
        "spec.volumes[0].excludeLargerThan: \"99999999999T\" is refused: \"99999999999T\" is too large (at most 8E, 2^63-1 bytes)"
    );
    assert_eq!(reasons_of(&refusals[..1]), [Reason::InvalidSelection]);
    spec.volumes[0].exclude_if_present = vec!["CACHEDIR.TAG:Signature: 8a47".into()];
    spec.volumes[0].exclude_larger_than = Some("500M".into());
    spec.volumes[0].exclude_caches = true;
    assert_eq!(
        check_backup_plan(&spec, &SecretTypes::new(), &Default::default()),
        []
    );
}

#[test]
fn includes_that_restic_refuses_or_that_take_back_first_are_refused_and_absolute_ones_stay_inside()
{
    let mut restore = restore();
    restore.volumes[0].includes = vec![
        "!uploads/tmp".into(),
        "uploads/[".into(),
        "a/[]".into(),
        "x\\".into(),
        "/etc/passwd".into(),
    ];
    let refusals = check_restore(&restore, None, &SecretTypes::new(), &Default::default());
    let found: Vec<(String, PatternFault)> = refusals
        .iter()
        .map(|r| match r {
            Refusal::InvalidPattern { field, fault, .. } => (field.clone(), *fault),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        found,
        [
            (
                "spec.volumes[0].includes[0]".into(),
                PatternFault::NothingToTakeBack
            ),
            (
                "spec.volumes[0].includes[1]".into(),
                PatternFault::Malformed
            ),
            (
                "spec.volumes[0].includes[2]".into(),
                PatternFault::Malformed
            ),
            (
                "spec.volumes[0].includes[3]".into(),
                PatternFault::Malformed
            ),
        ]
    );
    // An absolute pattern names a path inside the volume, never outside every source.
    let scoped = |field, pattern| volume_patterns::scoped(field, "/restore/data/data", pattern);
    assert_eq!(
        scoped(PatternField::Include, "/etc/passwd"),
        "/restore/data/data/etc/passwd"
    );
    assert_eq!(
        scoped(PatternField::Exclude, "/etc/passwd"),
        "/restore/data/data/etc/passwd"
    );
}

#[test]
fn names_follow_kubernetes_rules() {
    for valid in ["data", "a", "data-0", "pg.data", "0a"] {
        assert!(is_dns_subdomain(valid), "{valid}");
    }
    let too_long = "a".repeat(254);
    for invalid in [
        "", "Data", "-a", "a-", "a..b", ".a", "a.", "a/b", "..", "a_b", &too_long,
    ] {
        assert!(!is_dns_subdomain(invalid), "{invalid}");
    }
    assert!(is_dns_label("orders-eu"));
    assert!(!is_dns_label("orders.eu"));
    assert!(!is_dns_label(&"a".repeat(64)));
    for valid in ["postgres.shop.svc", "10.0.0.7", "DB-1"] {
        assert!(is_host(valid), "{valid}");
    }
    for invalid in [
        "", "db:5432", "user@db", "db/x", "db?x=1", "$(X)", "db..svc", "db ",
    ] {
        assert!(!is_host(invalid), "{invalid}");
    }
}

#[test]
fn repository_urls_that_could_leave_an_allowed_prefix_are_refused() {
    for valid in [
        "https://gate.example.com/team-a/shop",
        "http://rest-server.neverwiped.svc:8000/shop/",
        "https://gate.example.com/a..b/",
    ] {
        assert_eq!(repository_url_fault(valid), None, "{valid}");
    }
    for (invalid, fault) in [
        (
            "https://gate.example.com/team-a/../team-b",
            PathFault::DotSegment,
        ),
        (
            "https://gate.example.com/team-a/%2E%2e/team-b",
            PathFault::DotSegment,
        ),
        (
            "https://gate.example.com/team-a%2f..%2fteam-b",
            PathFault::DotSegment,
        ),
        ("https://gate.example.com/./x", PathFault::DotSegment),
        (
            "https://user@gate.example.com/x",
            PathFault::UserQueryOrFragment,
        ),
        (
            "https://gate.example.com/x?y",
            PathFault::UserQueryOrFragment,
        ),
        (
            "https://gate.example.com\\@evil/x",
            PathFault::UserQueryOrFragment,
        ),
        ("https://gate.example.com/x\ny", PathFault::ControlCharacter),
    ] {
        assert_eq!(repository_url_fault(invalid), Some(fault), "{invalid}");
    }
    let mut spec = plan();
    spec.repository.url = "https://gate.example.com/team-a/../team-b".into();
    assert_eq!(
        reasons_of(&check_backup_plan(
            &spec,
            &SecretTypes::new(),
            &Default::default()
        )),
        [Reason::InvalidRepositoryUrl]
    );
}

#[test]
fn a_service_account_token_is_refused_as_every_kind_of_credential() {
    let token_types =
        |name: &str| SecretTypes::from([(name.to_owned(), SERVICE_ACCOUNT_TOKEN_TYPE.to_owned())]);
    let mut spec = plan();
    spec.databases.push(DatabaseSource {
        name: "orders".into(),
        engine: DatabaseType::Postgresql,
        host: "postgres".into(),
        port: None,
        credentials_secret_ref: CredentialsSecretRef::new("db"),
        databases: vec![],
    });
    spec.repository.ca_secret_ref = Some(SecretKeyRef {
        name: "ca".into(),
        key: "ca.crt".into(),
    });
    for (secret, field) in [
        ("repo", "spec.repository.passwordSecretRef"),
        ("gate", "spec.repository.credentialsSecretRef"),
        ("ca", "spec.repository.caSecretRef"),
        ("db", "spec.databases[0].credentialsSecretRef"),
    ] {
        let refusals = check_backup_plan(&spec, &token_types(secret), &Default::default());
        assert_eq!(
            refusals,
            [Refusal::ServiceAccountToken {
                name: secret.into(),
                field: field.into()
            }],
            "{secret}"
        );
        assert!(refusals[0].to_string().contains("service-account-token"));
    }
    // Other types are fine.
    let opaque = SecretTypes::from([("repo".to_owned(), "Opaque".to_owned())]);
    assert_eq!(check_backup_plan(&spec, &opaque, &Default::default()), []);

    // A Restore: the plan's repository Secrets and its own database credentials.
    let mut restore = restore();
    restore.databases.push(RestoreDatabase {
        name: "orders".into(),
        engine: None,
        host: "postgres".into(),
        port: None,
        credentials_secret_ref: CredentialsSecretRef::new("restore-db"),
        on_non_empty_target: NonEmptyTargetPolicy::Refuse,
    });
    for (secret, field) in [
        (
            "repo",
            "BackupPlan \"nightly\"'s spec.repository.passwordSecretRef",
        ),
        ("restore-db", "spec.databases[0].credentialsSecretRef"),
    ] {
        let refusals = check_restore(
            &restore,
            Some(&spec),
            &token_types(secret),
            &Default::default(),
        );
        assert_eq!(
            refusals,
            [Refusal::ServiceAccountToken {
                name: secret.into(),
                field: field.into()
            }]
        );
    }
}

#[test]
fn the_policy_limits_repositories_and_placement_of_plans_and_restores() {
    let policy = TenantPolicy::from_json(
        r#"{"allowedRepositoryPrefixes": ["https://gate.example.com/"],
            "allowedTolerations": [{"key": "dedicated", "value": "backup"}],
            "allowedNodeSelectors": {"pool": ["backup"]},
            "allowedPriorityClasses": ["backup-low"]}"#,
    )
    .unwrap();
    let mut spec = plan();
    assert_eq!(check_backup_plan(&spec, &SecretTypes::new(), &policy), []);
    spec.repository.url = "https://elsewhere.example/shop".into();
    spec.pod = Some(PodSettings {
        node_selector: [(
            "node-role.kubernetes.io/control-plane".to_owned(),
            String::new(),
        )]
        .into(),
        tolerations: vec![Toleration {
            key: Some("node-role.kubernetes.io/control-plane".into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        }],
        resources: None,
        priority_class_name: Some("system-node-critical".into()),
    });
    let refusals = check_backup_plan(&spec, &SecretTypes::new(), &policy);
    assert_eq!(
        reasons_of(&refusals),
        [
            Reason::RepositoryNotAllowed,
            Reason::TolerationNotAllowed,
            Reason::NodeSelectorNotAllowed,
            Reason::PriorityClassNotAllowed,
        ]
    );
    assert!(refusals[1]
        .to_string()
        .starts_with("spec.pod.tolerations[0]:"));

    // A Restore runs with the plan's repository, and the plan's pod settings unless it has its own.
    let restore_spec = restore();
    let refusals = check_restore(&restore_spec, Some(&spec), &SecretTypes::new(), &policy);
    assert_eq!(refusals.len(), 4, "{refusals:?}");
    assert!(refusals[0]
        .to_string()
        .starts_with("BackupPlan \"nightly\"'s spec.repository.url:"));
    let mut own_pod = restore_spec.clone();
    own_pod.pod = Some(PodSettings::default());
    let refusals = check_restore(&own_pod, Some(&spec), &SecretTypes::new(), &policy);
    assert_eq!(reasons_of(&refusals), [Reason::RepositoryNotAllowed]);
}

#[test]
fn a_volume_selected_by_labels_needs_no_claim_name() {
    let mut spec = plan();
    spec.volumes = vec![BackupVolume {
        claim_name: None,
        selector: Some(Default::default()),
        ..BackupVolume::default()
    }];
    assert_eq!(
        check_backup_plan(&spec, &SecretTypes::new(), &Default::default()),
        []
    );
}

#[test]
fn a_copy_is_checked_as_the_plans_repository_and_never_to_the_same_one() {
    let mut spec = plan();
    let mut copy: crate::api::CopyDestination = serde_json::from_value(serde_json::json!({
        "name": "offsite",
        "repository": {
            "url": "https://gate.example.com/shop/",
            "passwordSecretRef": {"name": "offsite", "key": "password"}
        }
    }))
    .unwrap();
    spec.copies = vec![copy.clone()];
    let refusals = check_backup_plan(&spec, &SecretTypes::new(), &TenantPolicy::default());
    assert_eq!(
        refusals,
        [Refusal::CopyToOwnRepository {
            field: "spec.copies[0].repository.url".into(),
            url: "https://gate.example.com/shop/".into(),
        }],
        "the same repository, written with a trailing slash"
    );
    copy.repository.url = "https://other.example/shop".into();
    spec.copies = vec![copy.clone(), copy.clone()];
    let policy =
        TenantPolicy::from_json(r#"{"allowedRepositoryPrefixes": ["https://gate.example.com/"]}"#)
            .unwrap();
    let refusals = check_backup_plan(&spec, &SecretTypes::new(), &policy);
    assert!(refusals.contains(&Refusal::DuplicateCopyName {
        field: "spec.copies[1].name".into(),
        name: "offsite".into(),
    }));
    assert!(refusals.contains(&Refusal::RepositoryNotAllowed {
        url: "https://other.example/shop".into(),
        field: "spec.copies[0].repository.url".into(),
    }));
    let message = refusals[0].to_string();
    assert!(message.starts_with("spec.copies[0]"), "{message}");
}

#[test]
fn a_restore_from_a_copy_checks_the_copys_repository_against_the_policy() {
    let mut plan = plan();
    plan.copies = vec![serde_json::from_value(serde_json::json!({
        "name": "offsite",
        "repository": {
            "url": "https://other.example/shop",
            "passwordSecretRef": {"name": "offsite", "key": "password"}
        }
    }))
    .unwrap()];
    let mut spec = restore();
    spec.source = RestoreSource::Plan {
        backup_plan_name: "nightly".into(),
        copy: Some("offsite".into()),
    };
    let policy =
        TenantPolicy::from_json(r#"{"allowedRepositoryPrefixes": ["https://gate.example.com/"]}"#)
            .unwrap();
    let refusals = check_restore(&spec, Some(&plan), &SecretTypes::new(), &policy);
    assert_eq!(
        refusals,
        [Refusal::RepositoryNotAllowed {
            url: "https://other.example/shop".into(),
            field: "BackupPlan \"nightly\"'s spec.copies[\"offsite\"].repository.url".into(),
        }]
    );
    spec.source = RestoreSource::Plan {
        backup_plan_name: "nightly".into(),
        copy: Some("Off/site".into()),
    };
    let refusals = check_restore(&spec, Some(&plan), &SecretTypes::new(), &policy);
    assert_eq!(reasons_of(&refusals), [Reason::InvalidName]);
}
