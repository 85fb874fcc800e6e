//! Whether claims about to be created fit their namespace's ResourceQuotas. The API server refuses
//! a claim past a quota only when it comes to it, after the claims before it were made; checked
//! first, none is created unless all of them fit. The plugin's `restore --create-claims` and the
//! operator's `createClaims: FromSnapshot` both ask it, each adding its own way out.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, ResourceQuota};

use crate::recorded_claims::{quantity_bytes, ClaimFromRecordError};

/// The quota keys a claim counts against: the namespace's totals and its storage class's.
const STORAGE: &str = "requests.storage";
const CLAIMS: &str = "persistentvolumeclaims";
const CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";

/// A quota that cannot hold the claims beside what it counts as used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the claims to create ask {asked} ({key}), more than the ResourceQuota {namespace}/{quota} \
     leaves (hard {hard}, used {used})"
)]
pub struct QuotaShortfall {
    pub namespace: String,
    pub quota: String,
    /// The quota key (`requests.storage`, `fast.storageclass.storage.k8s.io/persistentvolumeclaims`).
    pub key: String,
    /// What the claims ask of it, in words (`8Gi of storage`, `2 claim(s)`).
    pub asked: String,
    /// The quota's limit and use, as the quota writes them.
    pub hard: String,
    pub used: String,
}

/// Why the claims do not fit, or cannot be counted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    #[error(transparent)]
    Shortfall(Box<QuotaShortfall>),
    /// A claim's size, or a quota's limit or use, that is not a quantity.
    #[error(transparent)]
    Quantity(#[from] ClaimFromRecordError),
}

/// The storage `claim` requests, as written (`10Gi`); empty when it names none.
pub fn requested_storage(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|spec| spec.resources.as_ref())
        .and_then(|resources| resources.requests.as_ref())
        .and_then(|requests| requests.get("storage"))
        .map_or("", |quantity| quantity.0.as_str())
}

/// Refuses `claims` (to be created in `namespace`) when one of `quotas` cannot hold them beside
/// what it counts as used.
pub fn check(
    quotas: &[ResourceQuota],
    claims: &[PersistentVolumeClaim],
    namespace: &str,
) -> Result<(), QuotaError> {
    let asked = asked(claims)?;
    for quota in quotas {
        let hard = quota.spec.as_ref().and_then(|s| s.hard.clone());
        let used = quota.status.as_ref().and_then(|s| s.used.clone());
        let (hard, used) = (hard.unwrap_or_default(), used.unwrap_or_default());
        for (key, wanted) in &asked {
            let Some(limit) = hard.get(key) else {
                continue;
            };
            let used = used.get(key).map_or("0", |q| q.0.as_str());
            if quantity_bytes(used)?.saturating_add(*wanted) > quantity_bytes(&limit.0)? {
                return Err(QuotaError::Shortfall(Box::new(QuotaShortfall {
                    namespace: namespace.to_owned(),
                    quota: quota.metadata.name.clone().unwrap_or_default(),
                    key: key.clone(),
                    asked: in_words(key, *wanted),
                    hard: limit.0.clone(),
                    used: used.to_owned(),
                })));
            }
        }
    }
    Ok(())
}

/// What `claims` ask of each quota key: bytes of storage, or a count of claims.
fn asked(claims: &[PersistentVolumeClaim]) -> Result<BTreeMap<String, u64>, QuotaError> {
    let mut asked = BTreeMap::new();
    for claim in claims {
        let bytes = quantity_bytes(requested_storage(claim))?;
        let mut add = |key: String, amount: u64| *asked.entry(key).or_insert(0) += amount;
        add(STORAGE.to_owned(), bytes);
        add(CLAIMS.to_owned(), 1);
        let class = claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_ref());
        if let Some(class) = class {
            add(format!("{class}{CLASS_SUFFIX}{STORAGE}"), bytes);
            add(format!("{class}{CLASS_SUFFIX}{CLAIMS}"), 1);
        }
    }
    Ok(asked)
}

/// `amount` of quota `key` as a reader compares it with the quota's own figures.
fn in_words(key: &str, amount: u64) -> String {
    match key.ends_with(STORAGE) {
        true => format!("{} of storage", binary_quantity(amount)),
        false => format!("{amount} claim(s)"),
    }
}

/// `bytes` as a Kubernetes quantity in the largest binary unit that holds it exactly (`8Gi`,
/// `1536Mi`, `1000`).
fn binary_quantity(bytes: u64) -> String {
    const UNITS: [(&str, u32); 5] = [("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)];
    UNITS
        .iter()
        .find(|(_, shift)| bytes != 0 && bytes.trailing_zeros() >= *shift)
        .map_or(bytes.to_string(), |(unit, shift)| {
            format!("{}{unit}", bytes >> shift)
        })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        PersistentVolumeClaimSpec, ResourceQuotaSpec, ResourceQuotaStatus,
        VolumeResourceRequirements,
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
}
