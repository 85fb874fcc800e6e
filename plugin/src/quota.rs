//! Whether the claims `restore --create-claims` would create fit the namespace's ResourceQuotas.
//! The API server refuses a claim past a quota only when it comes to it, after the claims before it
//! were made; checked first, nothing is created unless all of them fit.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, ResourceQuota};

/// The quota keys a claim counts against: the namespace's total and its storage class's.
const STORAGE: &str = "requests.storage";
const CLAIMS: &str = "persistentvolumeclaims";
const CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";

/// Bytes of a Kubernetes quantity (`10Gi`, `500M`, `1.5T`, `2e9`, `100m`), rounded up: the
/// reading the operator's claims from a snapshot use too.
pub fn quantity_bytes(text: &str) -> Result<u64> {
    Ok(neverwiped_api::recorded_claims::quantity_bytes(text)?)
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

/// What `claims` ask of each quota key: bytes of storage, or a count of claims.
fn asked(claims: &[PersistentVolumeClaim]) -> Result<BTreeMap<String, u64>> {
    let mut asked = BTreeMap::new();
    for claim in claims {
        let bytes = quantity_bytes(requested_storage(claim))?;
        let spec = claim.spec.clone().unwrap_or_default();
        let mut add = |key: String, amount: u64| *asked.entry(key).or_insert(0) += amount;
        add(STORAGE.to_owned(), bytes);
        add(CLAIMS.to_owned(), 1);
        if let Some(class) = &spec.storage_class_name {
            add(format!("{class}{CLASS_SUFFIX}{STORAGE}"), bytes);
            add(format!("{class}{CLASS_SUFFIX}{CLAIMS}"), 1);
        }
    }
    Ok(asked)
}

/// Refuses `claims` when one of `quotas` cannot hold them beside what it counts as used.
pub fn check(
    quotas: &[ResourceQuota],
    claims: &[PersistentVolumeClaim],
    namespace: &str,
) -> Result<()> {
    let asked = asked(claims)?;
    for quota in quotas {
        let hard = quota
            .spec
            .as_ref()
            .and_then(|s| s.hard.clone())
            .unwrap_or_default();
        let used = quota
            .status
            .as_ref()
            .and_then(|s| s.used.clone())
            .unwrap_or_default();
        for (key, wanted) in &asked {
            let Some(limit) = hard.get(key) else {
                continue;
            };
            let limit_amount = quantity_bytes(&limit.0)?;
            let used_amount = match used.get(key) {
                Some(used) => quantity_bytes(&used.0)?,
                None => 0,
            };
            if used_amount.saturating_add(*wanted) > limit_amount {
                let name = quota.metadata.name.as_deref().unwrap_or_default();
                let what = if key.ends_with(STORAGE) {
                    format!("{} of storage", crate::table::bytes(*wanted))
                } else {
                    format!("{wanted} claim(s)")
                };
                bail!(
                    "the claims to create ask {what} ({key}), more than the ResourceQuota \
                     {namespace}/{name} leaves (hard {}, used {}): ask for a larger quota, or \
                     create the claims yourself and restore with --volume SOURCE=TARGET",
                    limit.0,
                    used.get(key).map_or("0", |q| q.0.as_str())
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        PersistentVolumeClaimSpec, ResourceQuotaSpec, ResourceQuotaStatus,
        VolumeResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use kube::api::ObjectMeta;

    #[test]
    fn quantities_read_as_kubernetes_writes_them() {
        assert_eq!(quantity_bytes("10Gi").unwrap(), 10 << 30);
        assert_eq!(quantity_bytes("500M").unwrap(), 500_000_000);
        assert_eq!(quantity_bytes("1.5Ki").unwrap(), 1536);
        assert_eq!(quantity_bytes("2e3").unwrap(), 2000);
        assert_eq!(quantity_bytes("1500m").unwrap(), 2);
        assert_eq!(quantity_bytes("7").unwrap(), 7);
        for bad in ["", "Gi", "10Qi", "1e"] {
            assert!(quantity_bytes(bad).is_err(), "{bad:?}");
        }
    }

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
                pairs
                    .iter()
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

    #[test]
    fn claims_past_a_quota_are_refused_with_the_quota_named() {
        let claims = [claim("4Gi", "fast"), claim("4Gi", "fast")];
        let roomy = quota(
            &[("requests.storage", "10Gi")],
            &[("requests.storage", "1Gi")],
        );
        check(&[roomy], &claims, "shop").unwrap();
        let tight = quota(
            &[("requests.storage", "10Gi")],
            &[("requests.storage", "3Gi")],
        );
        let error = check(&[tight], &claims, "shop").unwrap_err().to_string();
        assert!(
            error.contains("ResourceQuota shop/storage") && error.contains("hard 10Gi, used 3Gi"),
            "{error}"
        );
        let per_class = quota(
            &[(
                "fast.storageclass.storage.k8s.io/persistentvolumeclaims",
                "1",
            )],
            &[],
        );
        let error = check(&[per_class], &claims, "shop")
            .unwrap_err()
            .to_string();
        assert!(error.contains("2 claim(s)"), "{error}");
        let other_class = quota(
            &[("slow.storageclass.storage.k8s.io/requests.storage", "1Gi")],
            &[],
        );
        check(&[other_class], &claims, "shop").unwrap();
    }
}
