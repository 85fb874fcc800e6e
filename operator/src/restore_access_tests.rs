use super::*;
use crate::api::{BackupPlan, CredentialsSecretRef, Restore, RestoreDatabase, RestoreVolume};
use crate::fixtures::plan_spec;
use crate::restore_source::ReadFrom;

/// The needs of a Restore of `spec` in namespace shop, reading the plan `nightly` (when it names
/// one) of [`plan_spec`].
fn needed_for(spec: &RestoreSpec, claim_exists: impl Fn(&str) -> bool) -> Vec<AccessNeeded> {
    let mut plan = BackupPlan::new("nightly", plan_spec());
    plan.metadata.namespace = Some("shop".into());
    let mut restore = Restore::new("back", spec.clone());
    restore.metadata.namespace = Some("shop".into());
    let from = ReadFrom::of(&restore, Some(&plan)).expect("a source");
    access_needed(spec, &from, claim_exists)
}

fn restore_spec() -> RestoreSpec {
    serde_json::from_value(serde_json::json!({
        "backupPlanName": "nightly",
        "volumes": [{"sourceClaimName": "data", "targetClaimName": "data"},
                    {"sourceClaimName": "data", "targetClaimName": "data-copy"}],
    }))
    .unwrap()
}

fn annotated(annotations: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        annotations: Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..ObjectMeta::default()
    }
}

#[test]
fn the_requester_is_read_from_its_annotations_and_an_empty_one_is_none() {
    assert_eq!(Requester::of(&ObjectMeta::default()), None);
    assert_eq!(
        Requester::of(&annotated(&[(REQUESTER_ANNOTATION, " ")])),
        None
    );
    let requester = Requester::of(&annotated(&[
        (REQUESTER_ANNOTATION, "alice"),
        (REQUESTER_GROUPS_ANNOTATION, "team-a, restorers,"),
    ]));
    assert_eq!(
        requester,
        Some(Requester {
            user: "alice".into(),
            groups: vec!["team-a".into(), "restorers".into()],
        })
    );
}

#[test]
fn a_restore_needs_the_plans_secrets_and_write_access_to_each_target_claim() {
    let needed = needed_for(&restore_spec(), |name| name == "data");
    let summary: Vec<_> = needed
        .iter()
        .map(|n| (n.verb, n.resource, n.name.as_deref(), n.rule))
        .collect();
    assert_eq!(
        summary,
        [
            ("get", "secrets", Some("repo"), AccessRule::DecryptPlan),
            ("get", "secrets", Some("gate"), AccessRule::DecryptPlan),
            (
                "update",
                "persistentvolumeclaims",
                Some("data"),
                AccessRule::WriteClaim
            ),
            (
                "create",
                "persistentvolumeclaims",
                None,
                AccessRule::WriteClaim
            ),
        ]
    );
    assert_eq!(
        needed[0].field,
        "BackupPlan \"nightly\"'s spec.repository.passwordSecretRef"
    );
}

#[test]
fn a_database_only_restore_still_needs_the_plans_secrets() {
    let mut spec = restore_spec();
    spec.volumes.clear();
    spec.databases = vec![RestoreDatabase {
        name: "orders".into(),
        engine: None,
        host: "attacker.example".into(),
        port: None,
        credentials_secret_ref: CredentialsSecretRef::new("mine"),
        on_non_empty_target: Default::default(),
    }];
    let needed = needed_for(&spec, |_| true);
    assert_eq!(needed.len(), 2);
    assert!(needed.iter().all(|n| n.rule == AccessRule::DecryptPlan));
    let denied = AccessDenied {
        user: "mallory".into(),
        access: needed[0].clone(),
    };
    assert_eq!(
        denied.to_string(),
        "the user who created this Restore (\"mallory\") may not get secrets \"repo\" named by BackupPlan \"nightly\"'s spec.repository.passwordSecretRef; restoring a plan's data needs what decrypting it needs: get on the repository's password and gate-login Secrets"
    );
    let policy = TenantPolicy::from_json(
        r#"{"allowedRestoreDatabaseHosts": {"shop": ["postgres.shop.svc"]}}"#,
    )
    .unwrap();
    let refused = hosts_not_allowed(&spec, "shop", &policy);
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].field, "spec.databases[0].host");
    assert!(hosts_not_allowed(&spec, "shop", &TenantPolicy::default()).is_empty());
}

#[test]
fn every_volume_target_is_checked_whatever_its_source() {
    let mut spec = restore_spec();
    spec.volumes = vec![RestoreVolume {
        source_claim_name: "other-apps-data".into(),
        target_claim_name: "mine".into(),
        create_claim: None,
        includes: vec![],
    }];
    let needed = needed_for(&spec, |_| true);
    assert_eq!(needed[2].name.as_deref(), Some("mine"));
    assert_eq!(needed[2].verb, "update");
}

#[test]
fn a_restore_from_a_repository_alone_needs_its_own_secrets() {
    let spec: RestoreSpec = serde_json::from_value(serde_json::json!({
        "repository": {"url": "https://gate.example.com/shop",
                       "passwordSecretRef": {"name": "old-repo", "key": "password"},
                       "credentialsSecretRef": {"name": "old-gate"},
                       "caSecretRef": {"name": "old-ca", "key": "ca.crt"}},
        "origin": "shop/nightly",
        "volumes": [{"sourceClaimName": "data", "targetClaimName": "data"}],
    }))
    .unwrap();
    let needed = needed_for(&spec, |_| false);
    let summary: Vec<_> = needed
        .iter()
        .map(|n| (n.verb, n.name.as_deref(), n.field.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            ("get", Some("old-repo"), "spec.repository.passwordSecretRef"),
            (
                "get",
                Some("old-gate"),
                "spec.repository.credentialsSecretRef"
            ),
            ("create", None, "spec.volumes[0].targetClaimName"),
        ]
    );
}
