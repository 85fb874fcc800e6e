//! `restore --create-claims`: the claims a snapshot recorded (its `sources.claims`), made anew in
//! the Restore's namespace before the Restore that fills them, for the day the cluster that had
//! them is gone. Storage classes can be mapped (`--storage-class OLD=NEW`), as a new cluster
//! seldom has the old one's.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use neverwiped::format::snapshot::Snapshot;
use neverwiped_api::quota::{self, QuotaError};
use neverwiped_api::recorded_claims::{claim_from_record, ClaimFromRecordError, ClaimRules};
use neverwiped_contract::record::RecordedClaim;

use crate::cluster::Cluster;

/// A claim to create, and the backed-up volume (the recorded claim's name) that fills it.
pub struct ClaimToCreate {
    pub source: String,
    /// The storage class the snapshot recorded, before `--storage-class` mapped it.
    pub recorded_class: Option<String>,
    pub claim: PersistentVolumeClaim,
}

/// `OLD=NEW` pairs of `--storage-class`.
pub fn class_map(pairs: &[String]) -> Result<BTreeMap<String, String>> {
    pairs
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((old, new)) if !old.is_empty() && !new.is_empty() => {
                Ok((old.to_owned(), new.to_owned()))
            }
            _ => bail!("--storage-class {pair:?}: expected OLD=NEW, e.g. fast-ssd=standard"),
        })
        .collect()
}

/// The claims to create in `namespace` for the volumes `pairs` asks for (`(source, target)`;
/// none: every claim the snapshot recorded, under its own name), as `snapshot` recorded them.
pub fn from_snapshot(
    snapshot: &Snapshot,
    pairs: &[(String, String)],
    classes: &BTreeMap<String, String>,
    namespace: &str,
) -> Result<Vec<ClaimToCreate>> {
    let recorded = &snapshot.sources.claims;
    if recorded.is_empty() {
        bail!(
            "the snapshot records no claim (it was taken before neverwiped recorded them, or not \
             by a BackupPlan): create the claims yourself and restore with --volume SOURCE=TARGET"
        );
    }
    let all: Vec<(String, String)> = recorded
        .iter()
        .map(|c| (c.name.clone(), c.name.clone()))
        .collect();
    let chosen = if pairs.is_empty() { &all } else { pairs };
    chosen
        .iter()
        .map(|(source, target)| {
            let Some(claim) = recorded.iter().find(|c| c.name == *source) else {
                let names: Vec<&str> = recorded.iter().map(|c| c.name.as_str()).collect();
                bail!(
                    "the snapshot records no claim {source:?}; it records {}",
                    names.join(", ")
                );
            };
            Ok(ClaimToCreate {
                source: source.clone(),
                recorded_class: claim.storage_class_name.clone(),
                claim: claim_object(claim, target, namespace, classes)?,
            })
        })
        .collect()
}

/// The PersistentVolumeClaim `name` of `namespace` as `recorded` was, its class mapped (the
/// operator's `createClaims: FromSnapshot` makes them alike).
fn claim_object(
    recorded: &RecordedClaim,
    name: &str,
    namespace: &str,
    classes: &BTreeMap<String, String>,
) -> Result<PersistentVolumeClaim> {
    let rules = ClaimRules {
        classes: classes.clone(),
        minimum_size: None,
    };
    claim_from_record(recorded, name, namespace, &rules).map_err(|error| match error {
        ClaimFromRecordError::NoSize { claim } => {
            anyhow::anyhow!("the snapshot records no size for claim {claim:?}: create it yourself")
        }
        other => other.into(),
    })
}

/// Creates `claims` in `namespace`, none if one of them exists already (a restore into an
/// existing claim is `--volume SOURCE=TARGET` without `--create-claims`), if a storage class is
/// missing, or if they do not fit a ResourceQuota.
pub async fn create(cluster: &Cluster, namespace: &str, claims: &[ClaimToCreate]) -> Result<()> {
    check_classes(cluster, claims).await?;
    match cluster.resource_quotas(namespace).await {
        Ok(quotas) => {
            let made: Vec<PersistentVolumeClaim> = claims.iter().map(|c| c.claim.clone()).collect();
            quota::check(&quotas, &made, namespace).map_err(|error| match error {
                QuotaError::Shortfall(shortfall) => anyhow::anyhow!(
                    "{shortfall}: ask for a larger quota, or create the claims yourself and \
                     restore with --volume SOURCE=TARGET"
                ),
                other => other.into(),
            })?
        }
        Err(why) => eprintln!(
            "warning: cannot check the claims against the namespace's ResourceQuotas ({}); a \
             claim past one is refused when it is created",
            neverwiped::text::escaped(&why.to_string())
        ),
    }
    for wanted in claims {
        let name = wanted.claim.metadata.name.as_deref().unwrap_or_default();
        if cluster.claim_exists(namespace, name).await? {
            bail!(
                "the claim {namespace}/{name} exists already: restore into it with --volume \
                 {}={name} without --create-claims, or delete it first",
                wanted.source
            );
        }
    }
    for wanted in claims {
        let created = cluster.create_claim(namespace, &wanted.claim).await?;
        let size = quota::requested_storage(&created);
        let class = created
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref());
        println!(
            "created PersistentVolumeClaim {namespace}/{} ({size}, storage class {}) as the snapshot recorded {}",
            created.name_any(),
            class.unwrap_or("the default"),
            wanted.source
        );
    }
    Ok(())
}

/// A claim of a storage class the cluster lacks would stay Pending, and its Restore with it: each
/// class is looked up first, where the caller may (`get` on storageclasses), else said unchecked.
async fn check_classes(cluster: &Cluster, claims: &[ClaimToCreate]) -> Result<()> {
    let mut checked = std::collections::BTreeSet::new();
    for wanted in claims {
        let spec = wanted.claim.spec.as_ref();
        let Some(class) = spec.and_then(|s| s.storage_class_name.as_deref()) else {
            continue;
        };
        if !checked.insert(class) {
            continue;
        }
        match cluster.storage_class_exists(class).await {
            Ok(true) => {}
            Ok(false) => {
                let recorded = wanted.recorded_class.as_deref().unwrap_or(class);
                bail!(
                    "the storage class {class:?} of the claim {:?} does not exist in this \
                     cluster: map it with --storage-class {recorded}=CLASS (kubectl get \
                     storageclasses lists them)",
                    wanted.source
                );
            }
            Err(why) => eprintln!(
                "warning: cannot check that the storage class {class:?} exists ({}); a claim \
                 of a class this cluster lacks stays Pending",
                neverwiped::text::escaped(&why.to_string())
            ),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(claims: Vec<RecordedClaim>) -> Snapshot {
        let json = format!(
            "{{\"time\":\"2026-11-30T01:00:00.000000001Z\",\"hostname\":\"shop/nightly\",\"username\":\"root\",\"paths\":[\"/data/orders\"],\"tree\":\"{}\",\"summary\":{{\"files\":1,\"dirs\":0,\"filesRead\":0,\"bytesRead\":0,\"totalBytes\":0,\"bytesAdded\":0,\"blobsAdded\":0,\"warnings\":0,\"durationMillis\":0}},\"programVersion\":\"neverwiped 0.1.0\"}}",
            "09".repeat(32)
        );
        let mut snapshot: Snapshot = serde_json::from_str(&json).unwrap();
        snapshot.sources.claims = claims;
        snapshot
    }

    fn orders() -> RecordedClaim {
        RecordedClaim {
            path: "/data/orders".into(),
            name: "orders".into(),
            requested_size: Some("10Gi".into()),
            storage_class_name: Some("fast".into()),
            access_modes: vec!["ReadWriteOnce".into()],
            labels: [("app".to_owned(), "shop".to_owned())].into(),
            ..RecordedClaim::default()
        }
    }

    #[test]
    fn a_claim_is_made_as_recorded_with_its_class_mapped() {
        let classes = class_map(&["fast=standard".into()]).unwrap();
        let made = from_snapshot(&snapshot(vec![orders()]), &[], &classes, "shop-copy").unwrap();
        let claim = &made[0].claim;
        assert_eq!(made[0].source, "orders");
        assert_eq!(claim.metadata.name.as_deref(), Some("orders"));
        assert_eq!(claim.metadata.namespace.as_deref(), Some("shop-copy"));
        assert_eq!(claim.metadata.labels.as_ref().unwrap()["app"], "shop");
        let spec = claim.spec.as_ref().unwrap();
        assert_eq!(spec.storage_class_name.as_deref(), Some("standard"));
        let requests = spec.resources.as_ref().unwrap().requests.as_ref().unwrap();
        assert_eq!(requests["storage"].0, "10Gi");
        let renamed = [("orders".to_owned(), "orders-copy".to_owned())];
        let made = from_snapshot(&snapshot(vec![orders()]), &renamed, &BTreeMap::new(), "x");
        let claim = &made.unwrap()[0].claim;
        assert_eq!(claim.metadata.name.as_deref(), Some("orders-copy"));
        let spec = claim.spec.as_ref().unwrap();
        assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
    }

    #[test]
    fn what_the_snapshot_does_not_record_is_refused_with_what_it_does() {
        let none = from_snapshot(&snapshot(vec![]), &[], &BTreeMap::new(), "x");
        assert!(none.err().unwrap().to_string().contains("records no claim"));
        let other = [("media".to_owned(), "media".to_owned())];
        let missing = from_snapshot(&snapshot(vec![orders()]), &other, &BTreeMap::new(), "x");
        let error = missing.err().unwrap().to_string();
        assert!(
            error.contains("\"media\"") && error.contains("it records orders"),
            "{error}"
        );
        let sizeless = RecordedClaim {
            requested_size: None,
            ..orders()
        };
        let error = from_snapshot(&snapshot(vec![sizeless]), &[], &BTreeMap::new(), "x");
        assert!(error.err().unwrap().to_string().contains("no size"));
        assert!(class_map(&["fast".into()]).is_err());
        assert!(class_map(&["=x".into()]).is_err());
    }
}
