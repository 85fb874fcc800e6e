//! The API as users meet it: the committed CRDs, the examples in docs/, and the schema's rules.

use std::path::PathBuf;

use kube::core::cel::Validator;
use kube::CustomResourceExt;
use neverwiped_operator::api::{
    self, BackupPlan, CopyMethod, DatabaseType, NonEmptyTargetPolicy, Restore,
};
use serde_json::{json, Value};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn committed_crds_match_the_rust_types() {
    let files = api::crd_files().expect("CRDs serialize");
    assert_eq!(
        files
            .iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>(),
        [
            "backupplans.neverwiped.io.yaml",
            "restores.neverwiped.io.yaml"
        ]
    );
    for (name, generated) in files {
        let path = repo_root().join("crds").join(&name);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "crds/{name} does not match the types in api/src; regenerate it with\n\n    cargo run -p neverwiped-operator --bin crdgen -- crds charts/neverwiped/crds\n"
        );
    }
}

fn example(name: &str) -> String {
    std::fs::read_to_string(repo_root().join("docs/examples").join(name)).expect("example exists")
}

#[test]
fn the_backupplan_example_parses_and_passes_the_schema_rules() {
    let text = example("backupplan.yaml");
    let plan: BackupPlan = serde_saphyr::from_str(&text).expect("the example is a BackupPlan");
    assert_eq!(plan.spec.schedule, "30 2 * * *");
    assert_eq!(plan.spec.time_zone, "Europe/Berlin");
    assert_eq!(plan.spec.copy_method, CopyMethod::Auto);
    assert_eq!(plan.spec.databases[0].engine, DatabaseType::Postgresql);
    assert_eq!(
        plan.spec.retention.as_ref().and_then(|r| r.keep_daily),
        Some(7)
    );
    let uploads = &plan.spec.volumes[0];
    assert!(uploads.exclude_caches);
    assert_eq!(uploads.exclude_if_present, [".nobackup"]);
    assert_eq!(uploads.exclude_larger_than.as_deref(), Some("2G"));
    // The operator accepts it too.
    neverwiped_operator::schedule::Schedule::parse(&plan.spec.schedule, &plan.spec.time_zone)
        .unwrap();
    neverwiped_operator::schedule::parse_duration(&plan.spec.deadline).unwrap();
    let value: Value = serde_saphyr::from_str(&text).unwrap();
    cel::<BackupPlan>(&value, None).expect("valid");
}

#[test]
fn the_restore_example_parses_and_passes_the_schema_rules() {
    let text = example("restore.yaml");
    let restore: Restore = serde_saphyr::from_str(&text).expect("the example is a Restore");
    assert_eq!(restore.spec.source.plan_name(), Some("nightly"));
    assert_eq!(
        restore.spec.databases[0].on_non_empty_target,
        NonEmptyTargetPolicy::Refuse
    );
    assert!(restore.spec.volumes[0].create_claim.is_some());
    let value: Value = serde_saphyr::from_str(&text).unwrap();
    cel::<Restore>(&value, None).expect("valid");
}

fn schema<K: CustomResourceExt>() -> Value {
    let crd = K::crd();
    let version = &crd.spec.versions[0];
    serde_json::to_value(
        version
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

/// The messages of the CEL rules `object` breaks.
fn cel<K: CustomResourceExt>(object: &Value, old: Option<&Value>) -> Result<(), Vec<String>> {
    Validator::new()
        .validate(&schema::<K>(), object, old)
        .map_err(|errors| errors.iter().map(|e| e.message.clone()).collect())
}

fn plan(spec: Value) -> Value {
    let mut base = json!({
        "apiVersion": "neverwiped.io/v1alpha1",
        "kind": "BackupPlan",
        "metadata": {"name": "p", "namespace": "n"},
        "spec": {
            "schedule": "@daily",
            "repository": {"url": "https://gate.example/p", "passwordSecretRef": {"name": "r", "key": "password"}},
            "volumes": [{"claimName": "data"}]
        }
    });
    let spec_map = base["spec"].as_object_mut().unwrap();
    for (key, value) in spec.as_object().unwrap() {
        spec_map.insert(key.clone(), value.clone());
    }
    base
}

#[test]
fn a_volume_needs_exactly_one_of_claim_name_and_selector() {
    assert_eq!(cel::<BackupPlan>(&plan(json!({})), None), Ok(()));
    let both =
        plan(json!({"volumes": [{"claimName": "a", "selector": {"matchLabels": {"x": "y"}}}]}));
    assert_eq!(
        cel::<BackupPlan>(&both, None),
        Err(vec!["set exactly one of claimName or selector".into()])
    );
    let neither = plan(json!({"volumes": [{"excludes": ["cache"]}]}));
    assert!(cel::<BackupPlan>(&neither, None).is_err());
}

#[test]
fn a_volume_refuses_a_malformed_size_or_tag_file_with_the_rule() {
    let with = |fields: Value| {
        let mut volume = json!({"claimName": "data"});
        for (key, value) in fields.as_object().unwrap() {
            volume[key] = value.clone();
        }
        plan(json!({"volumes": [volume]}))
    };
    let valid = with(json!({
        "excludeCaches": true,
        "excludeIfPresent": [".nobackup", "CACHEDIR.TAG:Signature: 8a47", "...", "..a", "a:b:c"],
        "excludeLargerThan": "500M"
    }));
    assert_eq!(cel::<BackupPlan>(&valid, None), Ok(()));
    for size in ["4096", "1k", "2G", "3t", "7B"] {
        let plan = with(json!({"excludeLargerThan": size}));
        assert_eq!(cel::<BackupPlan>(&plan, None), Ok(()), "{size}");
    }
    for tag in ["", ":header", "a/b", "/x", ".", "..", "..:h", "a\nb"] {
        let plan = with(json!({"excludeIfPresent": ["ok", tag]}));
        let errors = cel::<BackupPlan>(&plan, None).expect_err(tag);
        assert!(
            errors
                .iter()
                .any(|e| e.contains("excludeIfPresent: each entry is FILE or FILE:HEADER")),
            "{tag:?}: {errors:?}"
        );
    }
    for size in ["", "1.5G", "1Gi", "+1", "G", "5 M", "-1"] {
        let plan = with(json!({"excludeLargerThan": size}));
        let errors = cel::<BackupPlan>(&plan, None).expect_err(size);
        assert!(
            errors
                .iter()
                .any(|e| e.contains("excludeLargerThan: digits, then optionally")),
            "{size:?}: {errors:?}"
        );
    }
}

#[test]
fn a_plan_backs_up_something() {
    let nothing = plan(json!({"volumes": []}));
    assert_eq!(
        cel::<BackupPlan>(&nothing, None),
        Err(vec![
            "a BackupPlan needs at least one entry in volumes, databases or streams".into()
        ])
    );
    let database_only = plan(json!({"volumes": [], "databases": [{
        "name": "orders", "type": "postgresql", "host": "pg", "credentialsSecretRef": {"name": "pg"}
    }]}));
    assert_eq!(cel::<BackupPlan>(&database_only, None), Ok(()));
}

#[test]
fn an_empty_retention_would_forget_everything_and_is_rejected() {
    let empty = plan(json!({"retention": {}}));
    assert_eq!(
        cel::<BackupPlan>(&empty, None),
        Err(vec![
            "set at least one keep rule, or leave out retention to keep every snapshot".into()
        ])
    );
    assert_eq!(
        cel::<BackupPlan>(&plan(json!({"retention": {"keepLast": 3}})), None),
        Ok(())
    );
}

#[test]
fn a_deadline_under_a_minute_is_rejected() {
    assert_eq!(
        cel::<BackupPlan>(&plan(json!({"deadline": "30s"})), None),
        Err(vec!["deadline must be at least 1m".into()])
    );
    assert_eq!(
        cel::<BackupPlan>(&plan(json!({"deadline": "1h30m"})), None),
        Ok(())
    );
}

fn restore(spec: Value) -> Value {
    let mut base = json!({
        "apiVersion": "neverwiped.io/v1alpha1",
        "kind": "Restore",
        "metadata": {"name": "r", "namespace": "n"},
        "spec": {
            "backupPlanName": "p",
            "volumes": [{"sourceClaimName": "data", "targetClaimName": "data"}]
        }
    });
    let spec_map = base["spec"].as_object_mut().unwrap();
    for (key, value) in spec.as_object().unwrap() {
        spec_map.insert(key.clone(), value.clone());
    }
    base
}

#[test]
fn taken_before_goes_with_latest_only() {
    assert_eq!(
        cel::<Restore>(
            &restore(json!({"takenBefore": "2026-01-01T00:00:00Z"})),
            None
        ),
        Ok(())
    );
    let with_id = restore(json!({"snapshot": "4f2a9c1b", "takenBefore": "2026-01-01T00:00:00Z"}));
    assert_eq!(
        cel::<Restore>(&with_id, None),
        Err(vec![
            "takenBefore picks the newest snapshot before a time; use it with snapshot: latest"
                .into()
        ])
    );
}

#[test]
fn a_whole_plan_restore_needs_no_listed_entry_but_something_to_restore() {
    let nothing = "a Restore needs at least one entry in volumes, databases or streams, or allVolumes: true, or allDatabases";
    let empty = restore(json!({"volumes": []}));
    assert_eq!(cel::<Restore>(&empty, None), Err(vec![nothing.into()]));
    let all_off = restore(json!({"volumes": [], "allVolumes": false}));
    assert_eq!(cel::<Restore>(&all_off, None), Err(vec![nothing.into()]));
    let all_volumes = restore(json!({"volumes": [], "allVolumes": true}));
    assert_eq!(cel::<Restore>(&all_volumes, None), Ok(()));
    let target = json!({"host": "db.shop.svc", "credentialsSecretRef": {"name": "db-admin"}});
    let all_databases = restore(json!({"volumes": [], "allDatabases": target}));
    assert_eq!(cel::<Restore>(&all_databases, None), Ok(()));
}

#[test]
fn claim_rules_go_with_claims_created_from_the_snapshot() {
    let mapping = json!([{"from": "fast-ssd", "to": "standard"}]);
    let without = restore(json!({"storageClassMapping": mapping, "minimumClaimSize": "10Gi"}));
    assert_eq!(
        cel::<Restore>(&without, None),
        Err(vec![
            "storageClassMapping maps the classes of the claims created from the snapshot: set createClaims: FromSnapshot".into(),
            "minimumClaimSize sizes the claims created from the snapshot: set createClaims: FromSnapshot".into(),
        ])
    );
    let with = restore(json!({
        "createClaims": "FromSnapshot", "storageClassMapping": mapping, "minimumClaimSize": "10Gi",
    }));
    assert_eq!(cel::<Restore>(&with, None), Ok(()));
}

#[test]
fn a_restore_cannot_be_changed_once_created() {
    let old = restore(json!({}));
    let changed = restore(json!({"snapshot": "4f2a9c1b"}));
    assert_eq!(
        cel::<Restore>(&changed, Some(&old)),
        Err(vec![
            "a Restore runs once and cannot be changed; create a new one".into()
        ])
    );
    assert_eq!(cel::<Restore>(&old, Some(&old)), Ok(()));
}

#[test]
fn crds_have_the_names_users_type() {
    let crd = BackupPlan::crd();
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(
        crd.spec.names.short_names.as_deref(),
        Some(&["bp".to_string(), "nwbp".into()][..])
    );
    assert_eq!(
        crd.spec.names.categories.as_deref(),
        Some(&["neverwiped".to_string()][..])
    );
    let columns: Vec<_> = crd.spec.versions[0]
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .filter(|c| c.priority.unwrap_or(0) == 0)
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        columns,
        [
            "Schedule",
            "Ready",
            "Last Result",
            "Last Success",
            "Bytes Sent",
            "Repository",
            "Next Run",
            "Runs At",
            "Queued",
            "Suspicious",
            "Verified",
            "Age"
        ]
    );
    assert!(crd.spec.versions[0]
        .subresources
        .as_ref()
        .unwrap()
        .status
        .is_some());

    let crd = Restore::crd();
    assert_eq!(
        crd.spec.names.short_names.as_deref(),
        Some(&["nwr".to_string(), "nwrestore".into()][..])
    );
    assert_eq!(
        crd.spec.names.categories.as_deref(),
        Some(&["neverwiped".to_string()][..])
    );
}
