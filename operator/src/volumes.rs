//! How a backup pod reaches the volumes: in `Direct` mode, the node it must run on.
//!
//! A ReadWriteOnce volume can be mounted by several pods, but only on one node: a backup pod that
//! reads it while the application runs must be placed on the application's node. A
//! ReadWriteOncePod volume cannot be mounted a second time at all.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, Pod, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::api::{NewClaim, Restore};
use crate::job::{LABEL_OPERATION, LABEL_RESTORE};
use crate::plan::Problem;

/// The PersistentVolumeClaim a Restore creates to restore into. It has no owner: deleting the
/// Restore must not delete the data it brought back.
pub fn restore_target_claim(
    restore: &Restore,
    name: &str,
    new: &NewClaim,
) -> PersistentVolumeClaim {
    let access_modes = if new.access_modes.is_empty() {
        vec!["ReadWriteOnce".to_owned()]
    } else {
        new.access_modes
            .iter()
            .map(|m| m.as_str().to_owned())
            .collect()
    };
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: restore.namespace(),
            labels: Some(BTreeMap::from([
                (
                    "app.kubernetes.io/managed-by".to_owned(),
                    "neverwiped-operator".to_owned(),
                ),
                (LABEL_RESTORE.to_owned(), restore.name_any()),
            ])),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(access_modes),
            storage_class_name: new.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    new.storage.clone(),
                )])),
                limits: None,
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

/// Whether `claim` was created by the Restore named `restore`.
pub fn created_by_restore(claim: &PersistentVolumeClaim, restore: &str) -> bool {
    claim.labels().get(LABEL_RESTORE).map(String::as_str) == Some(restore)
}

/// The node a pod reading `claims` directly must run on: `None` when no volume ties it to a node.
/// `pods` are the namespace's pods; the operator's own Jobs' pods are ignored.
pub fn direct_placement(
    claims: &[&PersistentVolumeClaim],
    pods: &[Pod],
) -> Result<Option<String>, Problem> {
    let mut nodes = BTreeSet::new();
    for claim in claims {
        let Some(name) = claim.metadata.name.as_deref() else {
            continue;
        };
        let modes = access_modes(claim);
        let shared = modes
            .iter()
            .any(|m| m == "ReadWriteMany" || m == "ReadOnlyMany");
        if shared {
            continue;
        }
        let exclusive = modes.iter().any(|m| m == "ReadWriteOncePod");
        for pod in pods.iter().filter(|p| is_active(p) && mounts(p, name)) {
            if exclusive {
                return Err(Problem::VolumeInUseExclusively {
                    name: name.to_owned(),
                    pod: pod.metadata.name.clone().unwrap_or_default(),
                });
            }
            if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                nodes.insert(node);
            }
        }
    }
    match nodes.len() {
        0 => Ok(None),
        1 => Ok(nodes.pop_first()),
        _ => Err(Problem::VolumesOnDifferentNodes {
            nodes: nodes.into_iter().collect::<Vec<_>>().join(", "),
        }),
    }
}

fn access_modes(claim: &PersistentVolumeClaim) -> Vec<String> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.access_modes.clone())
        .or_else(|| claim.spec.as_ref().and_then(|s| s.access_modes.clone()))
        .unwrap_or_default()
}

fn is_active(pod: &Pod) -> bool {
    let ours = pod
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(LABEL_OPERATION));
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !ours && !matches!(phase, Some("Succeeded" | "Failed"))
}

fn mounts(pod: &Pod, claim: &str) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|volumes| {
            volumes.iter().any(|v| {
                v.persistent_volume_claim
                    .as_ref()
                    .is_some_and(|c| c.claim_name == claim)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, PodSpec, PodStatus, Volume,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn claim(name: &str, mode: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec![mode.into()]),
                ..PersistentVolumeClaimSpec::default()
            }),
            status: None,
        }
    }

    fn pod(name: &str, node: &str, claim: &str, phase: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                volumes: Some(vec![Volume {
                    name: "v".into(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: claim.into(),
                        read_only: None,
                    }),
                    ..Volume::default()
                }]),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..PodStatus::default()
            }),
        }
    }

    #[test]
    fn a_read_write_once_volume_in_use_pins_the_pod_to_its_node() {
        let data = claim("data", "ReadWriteOnce");
        let pods = [
            pod("app-0", "node-3", "data", "Running"),
            pod("old", "node-9", "data", "Succeeded"),
        ];
        assert_eq!(direct_placement(&[&data], &pods), Ok(Some("node-3".into())));
        assert_eq!(direct_placement(&[&data], &[]), Ok(None));
    }

    #[test]
    fn shared_volumes_do_not_constrain_placement() {
        let shared = claim("shared", "ReadWriteMany");
        let pods = [
            pod("a", "node-1", "shared", "Running"),
            pod("b", "node-2", "shared", "Running"),
        ];
        assert_eq!(direct_placement(&[&shared], &pods), Ok(None));
    }

    #[test]
    fn volumes_in_use_on_two_nodes_cannot_be_read_by_one_pod() {
        let a = claim("a", "ReadWriteOnce");
        let b = claim("b", "ReadWriteOnce");
        let pods = [
            pod("x", "node-1", "a", "Running"),
            pod("y", "node-2", "b", "Running"),
        ];
        let problem = direct_placement(&[&a, &b], &pods).unwrap_err();
        assert_eq!(problem.reason(), "VolumesOnDifferentNodes");
        assert!(problem.to_string().contains("node-1, node-2"));
    }

    #[test]
    fn a_restore_creates_an_unowned_claim_of_the_asked_size() {
        use crate::api::{AccessMode, RestoreSpec};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let mut restore = Restore::new(
            "back",
            RestoreSpec {
                backup_plan_name: "nightly".into(),
                snapshot: "latest".into(),
                taken_before: None,
                volumes: vec![],
                databases: vec![],
                pod: None,
            },
        );
        restore.metadata.namespace = Some("shop".into());
        let new = NewClaim {
            storage: Quantity("20Gi".into()),
            storage_class_name: Some("fast".into()),
            access_modes: vec![AccessMode::ReadWriteOncePod],
        };
        let claim = restore_target_claim(&restore, "data-restored", &new);
        assert_eq!(claim.metadata.owner_references, None);
        assert!(created_by_restore(&claim, "back"));
        let spec = claim.spec.unwrap();
        assert_eq!(spec.access_modes.unwrap(), ["ReadWriteOncePod"]);
        assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(
            spec.resources.unwrap().requests.unwrap()["storage"],
            Quantity("20Gi".into())
        );
    }

    #[test]
    fn a_read_write_once_pod_volume_in_use_needs_a_snapshot() {
        let exclusive = claim("db", "ReadWriteOncePod");
        let problem =
            direct_placement(&[&exclusive], &[pod("pg-0", "n", "db", "Running")]).unwrap_err();
        assert_eq!(problem.reason(), "VolumeInUseExclusively");
        assert_eq!(direct_placement(&[&exclusive], &[]), Ok(None));
    }
}
