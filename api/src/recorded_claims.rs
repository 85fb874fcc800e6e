//! Claims made anew as a snapshot recorded them (`contract::record::RecordedClaim`), for the
//! day the cluster that had them is gone: by the operator for a Restore with `createClaims:
//! FromSnapshot`, and by the kubectl plugin's `restore --create-claims`. The storage class may be
//! mapped to one of the new cluster, and the size raised, never lowered. Pure functions.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ObjectMeta;
use neverwiped_contract::record::RecordedClaim;

/// How recorded claims are made in this cluster.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClaimRules {
    /// Recorded StorageClass → the one to create the claim of.
    pub classes: BTreeMap<String, String>,
    /// The smallest size of a created claim: a claim gets the larger of it and its record.
    pub minimum_size: Option<Quantity>,
}

/// Why a recorded claim cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimFromRecordError {
    #[error("the snapshot records no size for claim {claim:?}: give a minimum claim size, or create the claim yourself")]
    NoSize { claim: String },
    #[error("{quantity:?} is not a quantity such as 10Gi or 500M")]
    NotAQuantity { quantity: String },
}

/// The PersistentVolumeClaim `name` of `namespace` as `recorded` was, made by `rules`: its class
/// mapped, its size at least the record's.
pub fn claim_from_record(
    recorded: &RecordedClaim,
    name: &str,
    namespace: &str,
    rules: &ClaimRules,
) -> Result<PersistentVolumeClaim, ClaimFromRecordError> {
    let size = claim_size(recorded, rules.minimum_size.as_ref())?;
    let class = recorded
        .storage_class_name
        .as_ref()
        .map(|class| rules.classes.get(class).unwrap_or(class).clone());
    let non_empty = |map: &BTreeMap<String, String>| (!map.is_empty()).then(|| map.clone());
    // A claim without access modes is refused by the API server; a record without any was
    // of a claim that got the only mode every volume has.
    let access_modes = match recorded.access_modes.is_empty() {
        true => vec!["ReadWriteOnce".to_owned()],
        false => recorded.access_modes.clone(),
    };
    Ok(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: non_empty(&recorded.labels),
            annotations: non_empty(&recorded.annotations),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(access_modes),
            storage_class_name: class,
            volume_mode: recorded.volume_mode.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some([("storage".to_owned(), size)].into()),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    })
}

/// The size to create `recorded` at: the larger of its record and `minimum`, as written.
pub fn claim_size(
    recorded: &RecordedClaim,
    minimum: Option<&Quantity>,
) -> Result<Quantity, ClaimFromRecordError> {
    let recorded_size = recorded
        .requested_size
        .as_ref()
        .map(|s| Quantity(s.clone()));
    match (recorded_size, minimum) {
        (None, None) => Err(ClaimFromRecordError::NoSize {
            claim: recorded.name.clone(),
        }),
        (Some(size), None) => Ok(size),
        (None, Some(minimum)) => Ok(minimum.clone()),
        (Some(size), Some(minimum)) => {
            let larger = quantity_bytes(&minimum.0)? > quantity_bytes(&size.0)?;
            Ok(if larger { minimum.clone() } else { size })
        }
    }
}

/// Bytes of a Kubernetes quantity (`10Gi`, `500M`, `1.5T`, `2e9`, `100m`), rounded up.
pub fn quantity_bytes(text: &str) -> Result<u64, ClaimFromRecordError> {
    let not_a_quantity = || ClaimFromRecordError::NotAQuantity {
        quantity: text.to_owned(),
    };
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| not_a_quantity())?;
    let factor = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exponent if exponent.starts_with(['e', 'E']) => {
            let power: i32 = exponent[1..].parse().map_err(|_| not_a_quantity())?;
            10f64.powi(power)
        }
        _ => return Err(not_a_quantity()),
    };
    Ok((value * factor).ceil() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn orders() -> RecordedClaim {
        RecordedClaim {
            path: "/data/orders".into(),
            name: "orders".into(),
            requested_size: Some("10Gi".into()),
            storage_class_name: Some("fast".into()),
            access_modes: vec!["ReadWriteMany".into()],
            volume_mode: Some("Block".into()),
            labels: [("app".to_owned(), "shop".to_owned())].into(),
            annotations: [("example.com/team".to_owned(), "payments".to_owned())].into(),
            ..RecordedClaim::default()
        }
    }

    fn rules(classes: &[(&str, &str)], minimum: Option<&str>) -> ClaimRules {
        ClaimRules {
            classes: classes
                .iter()
                .map(|(from, to)| (from.to_string(), to.to_string()))
                .collect(),
            minimum_size: minimum.map(|m| Quantity(m.into())),
        }
    }

    fn requested(claim: &PersistentVolumeClaim) -> &str {
        let spec = claim.spec.as_ref().unwrap();
        &spec.resources.as_ref().unwrap().requests.as_ref().unwrap()["storage"].0
    }

    #[test]
    fn a_claim_is_made_as_recorded_with_its_class_mapped() {
        let made = claim_from_record(
            &orders(),
            "orders-copy",
            "shop",
            &rules(&[("fast", "standard")], None),
        )
        .unwrap();
        assert_eq!(made.metadata.name.as_deref(), Some("orders-copy"));
        assert_eq!(made.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(made.metadata.labels.as_ref().unwrap()["app"], "shop");
        assert_eq!(
            made.metadata.annotations.as_ref().unwrap()["example.com/team"],
            "payments"
        );
        let spec = made.spec.as_ref().unwrap();
        assert_eq!(spec.storage_class_name.as_deref(), Some("standard"));
        assert_eq!(spec.access_modes.as_deref().unwrap(), ["ReadWriteMany"]);
        assert_eq!(spec.volume_mode.as_deref(), Some("Block"));
        assert_eq!(requested(&made), "10Gi");
        // A class the rules do not map stays; a claim that named none names none.
        let unmapped = claim_from_record(&orders(), "o", "shop", &rules(&[("slow", "x")], None));
        let spec = unmapped.unwrap().spec.unwrap();
        assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
        let classless = RecordedClaim {
            storage_class_name: None,
            access_modes: vec![],
            ..orders()
        };
        let spec = claim_from_record(&classless, "o", "shop", &rules(&[], None))
            .unwrap()
            .spec
            .unwrap();
        assert_eq!(spec.storage_class_name, None);
        assert_eq!(spec.access_modes.unwrap(), ["ReadWriteOnce"]);
    }

    #[test]
    fn a_created_claim_is_never_smaller_than_recorded() {
        let size = |minimum: Option<&str>| {
            let made = claim_from_record(&orders(), "o", "shop", &rules(&[], minimum)).unwrap();
            requested(&made).to_owned()
        };
        assert_eq!(size(None), "10Gi");
        assert_eq!(
            size(Some("5Gi")),
            "10Gi",
            "a smaller minimum does not shrink it"
        );
        assert_eq!(
            size(Some("10737418240")),
            "10Gi",
            "an equal minimum keeps the record"
        );
        assert_eq!(size(Some("20G")), "20G", "a larger minimum grows it");
        let sizeless = RecordedClaim {
            requested_size: None,
            ..orders()
        };
        let made = claim_from_record(&sizeless, "o", "shop", &rules(&[], Some("3Gi"))).unwrap();
        assert_eq!(requested(&made), "3Gi");
        let error = claim_from_record(&sizeless, "o", "shop", &rules(&[], None)).unwrap_err();
        assert!(
            error.to_string().contains("no size for claim \"orders\""),
            "{error}"
        );
        let unreadable = claim_from_record(&orders(), "o", "shop", &rules(&[], Some("lots")));
        assert!(matches!(
            unreadable,
            Err(ClaimFromRecordError::NotAQuantity { .. })
        ));
    }

    #[test]
    fn quantities_are_read_in_bytes() {
        assert_eq!(quantity_bytes("10Gi").unwrap(), 10 << 30);
        assert_eq!(quantity_bytes("500M").unwrap(), 500_000_000);
        assert_eq!(quantity_bytes("1.5T").unwrap(), 1_500_000_000_000);
        assert_eq!(quantity_bytes("2e9").unwrap(), 2_000_000_000);
        assert_eq!(quantity_bytes("100m").unwrap(), 1);
        assert!(quantity_bytes("10GB").is_err());
    }
}
