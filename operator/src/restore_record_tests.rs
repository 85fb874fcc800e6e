use super::*;
use crate::api::{
    ClaimCreation, CredentialsSecretRef, DatabaseTarget, NewClaim, NonEmptyTargetPolicy,
    RestoreDatabase, StorageClassMapping,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ObjectMeta;
use neverwiped_contract::record::RecordedDatabase;

const ID: &str = "5f0c3e9a1b2d4c6e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f506";

fn spec() -> RestoreSpec {
    serde_json::from_value(serde_json::json!({
        "backupPlanName": "nightly",
        "snapshot": "latest",
        "takenBefore": "2026-11-29T00:00:00Z",
    }))
    .unwrap()
}

fn restore(spec: RestoreSpec) -> Restore {
    let mut restore = Restore::new("back", spec);
    restore.metadata.namespace = Some("shop".into());
    restore
}

fn recorded(name: &str, class: Option<&str>) -> RecordedClaim {
    RecordedClaim {
        path: format!("/data/{name}"),
        name: name.into(),
        requested_size: Some("10Gi".into()),
        storage_class_name: class.map(str::to_owned),
        access_modes: vec!["ReadWriteOncePod".into()],
        volume_mode: Some("Filesystem".into()),
        labels: [("app".to_owned(), "shop".to_owned())].into(),
        ..RecordedClaim::default()
    }
}

fn described() -> Described {
    Described {
        snapshot_id: ID.into(),
        snapshot_time: Some("2026-11-28T01:00:00Z".into()),
        sources: RecordedSources {
            claims: vec![recorded("orders", Some("fast")), recorded("media", None)],
            databases: vec![
                RecordedDatabase {
                    name: "main".into(),
                    engine: "postgresql".into(),
                    databases: vec!["shop".into()],
                    ..RecordedDatabase::default()
                },
                RecordedDatabase {
                    name: "legacy".into(),
                    engine: "mariadb".into(),
                    ..RecordedDatabase::default()
                },
            ],
            ..RecordedSources::default()
        },
    }
}

fn class(name: &str) -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        provisioner: "csi.example.com".into(),
        ..StorageClass::default()
    }
}

fn target() -> DatabaseTarget {
    DatabaseTarget {
        host: "db.shop.svc".into(),
        port: None,
        credentials_secret_ref: serde_json::from_str::<CredentialsSecretRef>(
            r#"{"name":"db-admin"}"#,
        )
        .unwrap(),
        on_non_empty_target: NonEmptyTargetPolicy::Overwrite,
    }
}

#[test]
fn only_a_restore_that_reads_the_record_needs_it() {
    let mut spec = spec();
    assert!(!needs_record(&spec));
    spec.create_claims = Some(ClaimCreation::FromSnapshot);
    assert!(needs_record(&spec));
    let all_volumes = RestoreSpec {
        all_volumes: true,
        ..self::spec()
    };
    assert!(needs_record(&all_volumes));
    let all_databases = RestoreSpec {
        all_databases: Some(target()),
        ..self::spec()
    };
    assert!(needs_record(&all_databases));
}

#[test]
fn all_volumes_and_databases_come_from_the_record_and_the_snapshot_is_pinned() {
    let mut spec = spec();
    spec.all_volumes = true;
    spec.all_databases = Some(target());
    // A listed entry wins over the record's default for its volume and database.
    spec.volumes.push(RestoreVolume {
        source_claim_name: "media".into(),
        target_claim_name: "media-copy".into(),
        create_claim: None,
        includes: vec!["uploads".into()],
    });
    spec.databases.push(RestoreDatabase {
        name: "legacy".into(),
        engine: None,
        host: "mariadb.shop.svc".into(),
        ..target().entry("legacy", None)
    });
    let resolved = resolve(&restore(spec), &described()).unwrap().spec;
    assert_eq!(resolved.snapshot, ID);
    assert_eq!(
        resolved.taken_before, None,
        "the id already is the one before it"
    );
    let volumes: Vec<(&str, &str)> = (resolved.volumes.iter())
        .map(|v| (v.source_claim_name.as_str(), v.target_claim_name.as_str()))
        .collect();
    assert_eq!(volumes, [("media", "media-copy"), ("orders", "orders")]);
    assert_eq!(resolved.volumes[0].includes, ["uploads"]);
    let databases: Vec<(&str, &str, Option<DatabaseType>)> = (resolved.databases.iter())
        .map(|d| (d.name.as_str(), d.host.as_str(), d.engine))
        .collect();
    assert_eq!(
        databases,
        [
            ("legacy", "mariadb.shop.svc", Some(DatabaseType::Mariadb)),
            ("main", "db.shop.svc", Some(DatabaseType::Postgresql)),
        ]
    );
    assert_eq!(
        resolved.databases[1].on_non_empty_target,
        NonEmptyTargetPolicy::Overwrite
    );
}

#[test]
fn a_record_without_claims_or_databases_cannot_restore_all_of_them() {
    let empty = Described {
        sources: RecordedSources::default(),
        ..described()
    };
    let all_volumes = RestoreSpec {
        all_volumes: true,
        ..spec()
    };
    let problem = resolve(&restore(all_volumes), &empty).unwrap_err();
    assert_eq!(problem.reason(), Reason::NotInSnapshotRecord);
    assert!(problem
        .to_string()
        .starts_with("spec.allVolumes: snapshot 5f0c"));
    assert!(problem.to_string().contains("list them in spec.volumes"));
    let all_databases = RestoreSpec {
        all_databases: Some(target()),
        ..spec()
    };
    let problem = resolve(&restore(all_databases), &empty).unwrap_err();
    assert!(problem.to_string().contains("list them in spec.databases"));
    let mut odd = described();
    odd.sources.databases[0].engine = "oracle".into();
    let all_databases = RestoreSpec {
        all_databases: Some(target()),
        ..spec()
    };
    let problem = resolve(&restore(all_databases), &odd).unwrap_err();
    assert!(problem.to_string().contains("\"oracle\""), "{problem}");
}

fn from_snapshot(mapping: &[(&str, &str)], minimum: Option<&str>) -> Restore {
    let mut spec = spec();
    spec.all_volumes = true;
    spec.create_claims = Some(ClaimCreation::FromSnapshot);
    spec.storage_class_mapping = (mapping.iter())
        .map(|(from, to)| StorageClassMapping {
            from: from.to_string(),
            to: to.to_string(),
        })
        .collect();
    spec.minimum_claim_size = minimum.map(|m| Quantity(m.into()));
    resolve(&restore(spec), &described()).unwrap()
}

#[test]
fn claims_are_created_as_recorded_with_classes_mapped_and_labelled_as_the_restores() {
    let resolved = from_snapshot(&[("fast", "standard")], Some("20Gi"));
    let made = claims_to_create(
        &resolved,
        &described().sources,
        &BTreeMap::new(),
        &[class("standard")],
    )
    .unwrap();
    assert_eq!(made.len(), 2);
    let orders = &made[0];
    assert_eq!(orders.name_any(), "orders");
    assert_eq!(orders.namespace().as_deref(), Some("shop"));
    assert_eq!(
        orders.metadata.owner_references, None,
        "deleting the Restore keeps it"
    );
    let labels = orders.labels();
    assert_eq!(labels["app"], "shop");
    assert_eq!(labels[LABEL_RESTORE], "back");
    let spec = orders.spec.as_ref().unwrap();
    assert_eq!(spec.storage_class_name.as_deref(), Some("standard"));
    assert_eq!(spec.access_modes.as_deref().unwrap(), ["ReadWriteOncePod"]);
    assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
    let requests = spec.resources.as_ref().unwrap().requests.as_ref().unwrap();
    assert_eq!(requests["storage"].0, "20Gi", "raised to the minimum");
    // A claim that named no class gets the cluster's default: nothing to look up.
    let media = made[1].spec.as_ref().unwrap();
    assert_eq!(media.storage_class_name, None);
}

#[test]
fn existing_claims_and_explicit_new_claims_are_not_made_from_the_record() {
    let mut resolved = from_snapshot(&[("fast", "standard")], None);
    resolved.spec.volumes[1].create_claim = Some(NewClaim {
        storage: Quantity("1Gi".into()),
        storage_class_name: None,
        access_modes: vec![],
    });
    let existing = BTreeMap::from([("orders".to_owned(), PersistentVolumeClaim::default())]);
    let made = claims_to_create(&resolved, &described().sources, &existing, &[]).unwrap();
    assert!(made.is_empty(), "{made:?}");
    // Without createClaims, nothing is made at all.
    let mut listed = resolved.clone();
    listed.spec.create_claims = None;
    listed.spec.volumes[1].create_claim = None;
    let made = claims_to_create(&listed, &described().sources, &BTreeMap::new(), &[]);
    assert!(made.unwrap().is_empty());
}

#[test]
fn a_class_the_cluster_lacks_fails_with_how_to_map_it() {
    let resolved = from_snapshot(&[], None);
    let problem = claims_to_create(
        &resolved,
        &described().sources,
        &BTreeMap::new(),
        &[class("standard")],
    )
    .unwrap_err();
    assert_eq!(problem.reason(), Reason::StorageClassNotFound);
    let message = problem.to_string();
    assert!(message.contains("StorageClass \"fast\""), "{message}");
    assert!(message.contains("{from: fast, to: CLASS}"), "{message}");
    // Mapped to a class the cluster lacks too: the message names the class it would use.
    let resolved = from_snapshot(&[("fast", "premium")], None);
    let problem = claims_to_create(&resolved, &described().sources, &BTreeMap::new(), &[]);
    let message = problem.unwrap_err().to_string();
    assert!(
        message.contains("\"premium\"") && message.contains("from: fast"),
        "{message}"
    );
}

#[test]
fn a_volume_the_record_lacks_or_sizes_not_cannot_be_created() {
    let mut resolved = from_snapshot(&[], None);
    resolved.spec.volumes.push(RestoreVolume {
        source_claim_name: "logs".into(),
        target_claim_name: "logs".into(),
        create_claim: None,
        includes: vec![],
    });
    let classes = [class("fast")];
    let problem = claims_to_create(&resolved, &described().sources, &BTreeMap::new(), &classes);
    let message = problem.unwrap_err().to_string();
    assert!(
        message.starts_with("spec.volumes[2].sourceClaimName"),
        "{message}"
    );
    assert!(message.contains("it records orders, media"), "{message}");
    let mut sizeless = described();
    sizeless.sources.claims[1].requested_size = None;
    let resolved = from_snapshot(&[], None);
    let problem = claims_to_create(&resolved, &sizeless.sources, &BTreeMap::new(), &classes);
    let message = problem.unwrap_err().to_string();
    assert!(message.contains("no size for claim \"media\""), "{message}");
}

#[test]
fn only_a_describe_result_with_a_record_describes() {
    let mut result = crate::fixtures::run_result(
        Operation::Describe,
        neverwiped_contract::ExitStatus::Success,
    );
    result.snapshot_id = Some(ID.into());
    assert_eq!(Described::of(&result), None, "no record");
    result.sources = Some(described().sources);
    result.snapshot_time = Some("2026-11-28T01:00:00Z".into());
    assert_eq!(Described::of(&result), Some(described()));
    result.operation = Operation::Restore;
    assert_eq!(Described::of(&result), None);
}
