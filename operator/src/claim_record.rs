//! What a backup records of each claim it reads (`backup --claim`), so that a restore can
//! recreate the claim where it no longer exists: its name, requested size, storage class, access
//! and volume modes, labels and the annotations of [`RecordedClaim::records_annotation`].
//!
//! Every string is the user's text on its way into an argument, so it goes through
//! [`literal`]: Kubernetes' `$(VAR)` expansion gives it back unchanged.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use neverwiped_contract::record::RecordedClaim;

use crate::expansion::literal;

/// The record of `claim`, read at `path` of the snapshot.
pub fn recorded_claim(claim: &PersistentVolumeClaim, path: &str) -> RecordedClaim {
    let spec = claim.spec.clone().unwrap_or_default();
    let requested_size = spec
        .resources
        .as_ref()
        .and_then(|resources| resources.requests.as_ref())
        .and_then(|requests| requests.get("storage"))
        .map(|quantity| literal(&quantity.0));
    RecordedClaim {
        path: literal(path),
        name: literal(&claim.name_any()),
        requested_size,
        storage_class_name: spec.storage_class_name.as_deref().map(literal),
        access_modes: spec
            .access_modes
            .unwrap_or_default()
            .iter()
            .map(|m| literal(m))
            .collect(),
        volume_mode: spec.volume_mode.as_deref().map(literal),
        labels: literal_map(claim.labels().iter()),
        annotations: literal_map(
            claim
                .annotations()
                .iter()
                .filter(|(key, _)| RecordedClaim::records_annotation(key)),
        ),
        annotations_left_out: false,
        unknown: BTreeMap::new(),
    }
}

fn literal_map<'a>(
    entries: impl Iterator<Item = (&'a String, &'a String)>,
) -> BTreeMap<String, String> {
    entries
        .map(|(key, value)| (literal(key), literal(value)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expansion::expand;
    use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, VolumeResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use kube::api::ObjectMeta;

    fn claim() -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("orders".into()),
                labels: Some([("app".to_owned(), "shop".to_owned())].into()),
                annotations: Some(
                    [
                        (
                            "example.com/note".to_owned(),
                            "$(NEVERWIPED_GATE_USERNAME)".to_owned(),
                        ),
                        (
                            "pv.kubernetes.io/bind-completed".to_owned(),
                            "yes".to_owned(),
                        ),
                        (
                            "kubectl.kubernetes.io/last-applied-configuration".to_owned(),
                            "{}".to_owned(),
                        ),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                storage_class_name: Some("fast".into()),
                volume_mode: Some("Filesystem".into()),
                resources: Some(VolumeResourceRequirements {
                    requests: Some([("storage".to_owned(), Quantity("10Gi".into()))].into()),
                    ..VolumeResourceRequirements::default()
                }),
                ..PersistentVolumeClaimSpec::default()
            }),
            ..PersistentVolumeClaim::default()
        }
    }

    #[test]
    fn a_claim_is_recorded_with_what_recreating_it_takes() {
        let record = recorded_claim(&claim(), "/data/orders");
        assert_eq!(record.name, "orders");
        assert_eq!(record.requested_size.as_deref(), Some("10Gi"));
        assert_eq!(record.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(record.access_modes, ["ReadWriteOnce"]);
        assert_eq!(record.volume_mode.as_deref(), Some("Filesystem"));
        assert_eq!(record.labels["app"], "shop");
        let keys: Vec<&str> = record.annotations.keys().map(String::as_str).collect();
        assert_eq!(keys, ["example.com/note"]);
    }

    #[test]
    fn the_pod_receives_the_claim_as_written_whatever_its_environment_holds() {
        let arg = recorded_claim(&claim(), "/data/orders").to_arg();
        let secret = |name: &str| (name == "NEVERWIPED_GATE_USERNAME").then(|| "alice".to_owned());
        let received: RecordedClaim = serde_json::from_str(&expand(&arg, &secret)).unwrap();
        assert_eq!(
            received.annotations["example.com/note"],
            "$(NEVERWIPED_GATE_USERNAME)"
        );
    }
}
