use k8s_openapi::api::core::v1::{
    PersistentVolumeClaimSpec, ResourceQuotaSpec, ResourceQuotaStatus, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ObjectMeta;

use super::*;

fn claim(size: &str, class: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        spec: Some(PersistentVolumeClaimSpec {
            storage_class_name: Some(class.into()),
            resources: Some(VolumeResourceRequirements {
                requests: Some([("storage".to_owned(), Quantity(size.into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn quota(hard: &[(&str, &str)], used: &[(&str, &str)]) -> ResourceQuota {
    let map = |pairs: &[(&str, &str)]| {
        Some(
            (pairs.iter())
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect(),
        )
    };
    ResourceQuota {
        metadata: ObjectMeta {
            name: Some("storage".into()),
            ..Default::default()
        },
        spec: Some(ResourceQuotaSpec {
            hard: map(hard),
            ..Default::default()
        }),
        status: Some(ResourceQuotaStatus {
            used: map(used),
            ..Default::default()
        }),
    }
}

fn shortfall(quotas: &[ResourceQuota], claims: &[PersistentVolumeClaim]) -> QuotaShortfall {
    match check(quotas, claims, "shop") {
        Err(QuotaError::Shortfall(shortfall)) => *shortfall,
        other => panic!("expected a shortfall, got {other:?}"),
    }
}

#[test]
fn claims_within_every_quota_fit() {
    let claims = [claim("4Gi", "fast"), claim("4Gi", "fast")];
    let roomy = quota(
        &[("requests.storage", "10Gi")],
        &[("requests.storage", "1Gi")],
    );
    let other_class = quota(
        &[("slow.storageclass.storage.k8s.io/requests.storage", "1Gi")],
        &[],
    );
    check(&[roomy, other_class], &claims, "shop").unwrap();
    // Exactly full is still within the quota, as the API server counts it.
    let exact = quota(
        &[("requests.storage", "10Gi")],
        &[("requests.storage", "2Gi")],
    );
    check(&[exact], &claims, "shop").unwrap();
}

#[test]
fn storage_past_a_quota_is_refused_with_the_quota_its_limit_and_its_use() {
    let claims = [claim("4Gi", "fast"), claim("4Gi", "fast")];
    let tight = quota(
        &[("requests.storage", "10Gi")],
        &[("requests.storage", "3Gi")],
    );
    let found = shortfall(&[tight], &claims);
    assert_eq!(found.key, "requests.storage");
    assert_eq!(found.asked, "8Gi of storage");
    assert_eq!((found.hard.as_str(), found.used.as_str()), ("10Gi", "3Gi"));
    let message = found.to_string();
    assert!(message.contains("ResourceQuota shop/storage"), "{message}");
    assert!(message.contains("(hard 10Gi, used 3Gi)"), "{message}");
}

#[test]
fn a_class_s_claim_count_is_checked_apart_and_a_quota_without_use_counts_none_used() {
    let claims = [claim("4Gi", "fast"), claim("1.5Gi", "fast")];
    let per_class = quota(
        &[(
            "fast.storageclass.storage.k8s.io/persistentvolumeclaims",
            "1",
        )],
        &[],
    );
    let found = shortfall(&[per_class], &claims);
    assert_eq!(found.asked, "2 claim(s)");
    assert_eq!(found.used, "0");
    let per_class_storage = quota(
        &[("fast.storageclass.storage.k8s.io/requests.storage", "5Gi")],
        &[],
    );
    assert_eq!(
        shortfall(&[per_class_storage], &claims).asked,
        "5632Mi of storage"
    );
}

#[test]
fn a_size_that_is_no_quantity_is_an_error_not_a_fit() {
    let claims = [claim("lots", "fast")];
    let error = check(&[], &claims, "shop").unwrap_err();
    assert!(matches!(error, QuotaError::Quantity(_)), "{error:?}");
    let broken = quota(&[("requests.storage", "ten")], &[]);
    let error = check(&[broken], &[claim("1Gi", "fast")], "shop").unwrap_err();
    assert!(error.to_string().contains("\"ten\""), "{error}");
}

#[test]
fn quantities_are_written_in_the_largest_exact_binary_unit() {
    assert_eq!(binary_quantity(8 << 30), "8Gi");
    assert_eq!(binary_quantity(1536 << 20), "1536Mi");
    assert_eq!(binary_quantity(1000), "1000");
    assert_eq!(binary_quantity(0), "0");
}
