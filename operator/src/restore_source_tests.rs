use super::*;
use crate::api::{BackupPlan, RestoreSpec};
use crate::fixtures::plan_spec;

fn restore(namespace: &str, spec: serde_json::Value) -> Restore {
    let spec: RestoreSpec = serde_json::from_value(spec).expect("a Restore's spec");
    let mut restore = Restore::new("back", spec);
    restore.metadata.namespace = Some(namespace.into());
    restore
}

fn from_repository(origin: &str, snapshot: &str) -> serde_json::Value {
    serde_json::json!({
        "repository": {"url": "https://gate.example.com/shop/app",
                       "passwordSecretRef": {"name": "repo", "key": "password"}},
        "origin": origin,
        "snapshot": snapshot,
        "volumes": [{"sourceClaimName": "data", "targetClaimName": "data"}],
    })
}

#[test]
fn a_plan_reads_its_own_snapshots_and_pins_the_host_only_for_latest() {
    let mut plan = BackupPlan::new("nightly", plan_spec());
    plan.metadata.namespace = Some("shop".into());
    let by_plan = serde_json::json!({"backupPlanName": "nightly",
                                      "volumes": [{"sourceClaimName": "d", "targetClaimName": "d"}]});
    let restore = restore("shop", by_plan);
    assert!(
        ReadFrom::of(&restore, None).is_none(),
        "no plan, nothing to read"
    );
    let from = ReadFrom::of(&restore, Some(&plan)).unwrap();
    assert_eq!(from.origin.to_string(), "shop/nightly");
    assert_eq!(from.repository, &plan.spec.repository);
    assert_eq!(from.host_arg("latest").as_deref(), Some("shop/nightly"));
    assert_eq!(from.host_arg("0123abcd"), None);
    let field = from.repository_field();
    assert_eq!(field, "BackupPlan \"nightly\"'s spec.repository");
}

#[test]
fn a_repository_alone_always_pins_the_origin_so_an_id_cannot_pass_the_clone_rules() {
    let restore = restore("recovery", from_repository("shop/nightly", "0123abcd"));
    let from = ReadFrom::of(&restore, None).unwrap();
    assert!(from.plan.is_none());
    assert_eq!(from.repository_field(), "spec.repository");
    assert_eq!(from.host_arg("0123abcd").as_deref(), Some("shop/nightly"));
    assert_eq!(from.host_arg("latest").as_deref(), Some("shop/nightly"));
}

#[test]
fn an_origin_is_a_namespace_and_a_plan_name() {
    let parsed = Origin::parse("shop/nightly.v2").unwrap();
    assert_eq!((parsed.namespace, parsed.plan), ("shop", "nightly.v2"));
    for invalid in [
        "shop",
        "/nightly",
        "shop/",
        "Shop/nightly",
        "a.b/nightly",
        "shop/a/b",
        "shop/../x",
    ] {
        assert_eq!(Origin::parse(invalid), None, "{invalid}");
    }
}

#[test]
fn a_clone_needs_a_rule_and_the_refusal_names_the_rule_missing() {
    let restore = restore("staging", from_repository("shop/nightly", "latest"));
    let from = ReadFrom::of(&restore, None).unwrap();
    let refusal = clone_refusal(&from, "staging", &TenantPolicy::default()).unwrap();
    assert_eq!(refusal.reason(), Reason::CloneNotAllowed);
    let message = refusal.to_string();
    for part in [
        "policy.allowedRestoreOrigins",
        "from: shop, to: staging",
        "https://gate.example.com/shop/app",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
    let same = restore_in("shop");
    let own = ReadFrom::of(&same, None).unwrap();
    assert_eq!(clone_refusal(&own, "shop", &TenantPolicy::default()), None);
    let allowed = TenantPolicy::from_json(
        r#"{"allowedRestoreOrigins": [{"from": "shop", "to": "staging",
                                       "repositoryPrefixes": ["https://gate.example.com/shop/"]}]}"#,
    )
    .unwrap();
    assert_eq!(clone_refusal(&from, "staging", &allowed), None);
    let elsewhere = TenantPolicy::from_json(
        r#"{"allowedRestoreOrigins": [{"from": "shop", "to": "staging",
                                       "repositoryPrefixes": ["https://gate.example.com/blog/"]}]}"#,
    )
    .unwrap();
    assert!(clone_refusal(&from, "staging", &elsewhere).is_some());
}

fn restore_in(namespace: &str) -> Restore {
    restore(
        namespace,
        from_repository(&format!("{namespace}/nightly"), "latest"),
    )
}

fn plan_with_copy() -> BackupPlan {
    let mut spec = plan_spec();
    spec.copies = vec![serde_json::from_value(serde_json::json!({
        "name": "offsite",
        "repository": {"url": "https://offsite.example.com/shop",
                       "passwordSecretRef": {"name": "offsite-repo", "key": "password"},
                       "credentialsSecretRef": {"name": "offsite-login"}},
    }))
    .expect("a copy")];
    let mut plan = BackupPlan::new("nightly", spec);
    plan.metadata.namespace = Some("shop".into());
    plan
}

fn from_copy(copy: &str) -> Restore {
    restore(
        "shop",
        serde_json::json!({"backupPlanName": "nightly", "copy": copy,
                           "volumes": [{"sourceClaimName": "d", "targetClaimName": "d"}]}),
    )
}

#[test]
fn a_copy_reads_the_copys_repository_and_the_plans_snapshots() {
    let plan = plan_with_copy();
    let restore = from_copy("offsite");
    let from = ReadFrom::of(&restore, Some(&plan)).unwrap();
    assert_eq!(from.repository, &plan.spec.copies[0].repository);
    assert_eq!(from.repository.url, "https://offsite.example.com/shop");
    assert_eq!(from.copy, Some("offsite"));
    assert_eq!(
        from.origin.to_string(),
        "shop/nightly",
        "the copy keeps the host"
    );
    assert_eq!(from.host_arg("latest").as_deref(), Some("shop/nightly"));
    assert_eq!(
        from.repository_field(),
        "BackupPlan \"nightly\"'s spec.copies[\"offsite\"].repository"
    );
    assert!(copy_not_found(&restore, &plan).is_none());
}

#[test]
fn a_copy_the_plan_lacks_is_copy_not_found_listing_the_plans_copies() {
    let plan = plan_with_copy();
    let restore = from_copy("elsewhere");
    assert!(ReadFrom::of(&restore, Some(&plan)).is_none());
    let problem = copy_not_found(&restore, &plan).expect("a problem");
    assert_eq!(problem.reason(), Reason::CopyNotFound);
    let message = problem.to_string();
    assert!(message.contains("\"elsewhere\""), "{message}");
    assert!(message.contains("[offsite]"), "{message}");
}
