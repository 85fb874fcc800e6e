//! How a backup pod reaches the volumes.
//!
//! `Snapshot`: a CSI VolumeSnapshot of each claim, then a claim cloned from it (`dataSource`) that
//! the Job mounts read-only; both are deleted after the run. `Direct`: the live claim, mounted
//! read-only. A ReadWriteOnce volume can be mounted by several pods, but only on one node: a
//! backup pod that reads it while the application runs must be placed on the application's node.
//! A ReadWriteOncePod volume cannot be mounted a second time at all. `Auto` takes a snapshot where
//! a VolumeSnapshotClass for the claim's CSI driver exists, and reads directly elsewhere.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, Pod, TypedLocalObjectReference,
    VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::api::{BackupPlan, CopyMethod, NewClaim, Restore, RunTrigger};
use crate::csi::{
    VolumeSnapshot, VolumeSnapshotClass, VolumeSnapshotSource, VolumeSnapshotSpec,
    DEFAULT_STORAGE_CLASS_ANNOTATION, SNAPSHOT_GROUP,
};
use crate::job::{
    common_labels, parse_trigger, trigger_name, UnknownTrigger, ANNOTATION_MANUAL_TRIGGER,
    ANNOTATION_SCHEDULED_TIME, ANNOTATION_SOURCE_CLAIM, ANNOTATION_TRIGGER, LABEL_OPERATION,
    LABEL_PLAN, LABEL_RESTORE, LABEL_RUN,
};
use crate::plan::Problem;

/// How one claim of a backup is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeRead {
    /// The live claim, mounted read-only.
    Direct,
    /// A clone of a VolumeSnapshot of the claim, taken with this VolumeSnapshotClass.
    Snapshot { class: String },
}

/// What the cluster offers for snapshots.
#[derive(Debug, Clone, Copy)]
pub struct SnapshotSupport<'a> {
    /// The VolumeSnapshotClasses; `None` when the snapshot API is not served.
    pub classes: Option<&'a [VolumeSnapshotClass]>,
    pub storage_classes: &'a [StorageClass],
}

/// The CSI driver of a claim: its StorageClass's provisioner (the default class when it names
/// none, as the admission plugin would have set it). `None` for a claim without a class.
pub fn claim_driver(
    claim: &PersistentVolumeClaim,
    storage_classes: &[StorageClass],
) -> Option<String> {
    let named = claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref());
    let class = match named {
        Some("") => None,
        Some(name) => storage_classes
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name)),
        None => storage_classes.iter().find(|c| {
            c.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_STORAGE_CLASS_ANNOTATION))
                .is_some_and(|v| v == "true")
        }),
    };
    class.map(|c| c.provisioner.clone())
}

/// The VolumeSnapshotClass for `driver`: the one marked default, else the only one.
fn class_for_driver<'a>(
    driver: &str,
    classes: &'a [VolumeSnapshotClass],
) -> Option<&'a VolumeSnapshotClass> {
    let matching: Vec<&VolumeSnapshotClass> =
        classes.iter().filter(|c| c.driver == driver).collect();
    matching
        .iter()
        .find(|c| c.is_default())
        .copied()
        .or_else(|| (matching.len() == 1).then(|| matching[0]))
}

/// How each of `claims` is read (in their order), or why they cannot be.
pub fn choose_reads(
    method: CopyMethod,
    class_name: Option<&str>,
    claims: &[&PersistentVolumeClaim],
    support: SnapshotSupport<'_>,
) -> Result<Vec<VolumeRead>, Vec<Problem>> {
    let direct = || vec![VolumeRead::Direct; claims.len()];
    let snapshot = |class: &VolumeSnapshotClass| VolumeRead::Snapshot {
        class: class.metadata.name.clone().unwrap_or_default(),
    };
    if method == CopyMethod::Direct {
        return Ok(direct());
    }
    let Some(classes) = support.classes else {
        return match method {
            CopyMethod::Snapshot => Err(vec![Problem::SnapshotNotAvailable]),
            _ => Ok(direct()),
        };
    };
    if let Some(name) = class_name {
        let Some(class) = classes
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
        else {
            return Err(vec![Problem::VolumeSnapshotClassNotFound {
                name: name.to_owned(),
            }]);
        };
        // Auto: only the claims of the named class's driver are snapshotted.
        return Ok(claims
            .iter()
            .map(|claim| {
                let same_driver = claim_driver(claim, support.storage_classes).as_deref()
                    == Some(class.driver.as_str());
                if method == CopyMethod::Snapshot || same_driver {
                    snapshot(class)
                } else {
                    VolumeRead::Direct
                }
            })
            .collect());
    }
    let mut reads = Vec::with_capacity(claims.len());
    let mut problems = Vec::new();
    for claim in claims {
        let driver = claim_driver(claim, support.storage_classes);
        match (
            driver.as_deref().and_then(|d| class_for_driver(d, classes)),
            method,
        ) {
            (Some(class), _) => reads.push(snapshot(class)),
            (None, CopyMethod::Snapshot) => problems.push(Problem::NoVolumeSnapshotClass {
                claim: claim.name_any(),
                driver: match driver {
                    Some(driver) => format!("the CSI driver {driver:?}"),
                    None => "it (it has no StorageClass)".into(),
                },
            }),
            (None, _) => reads.push(VolumeRead::Direct),
        }
    }
    if problems.is_empty() {
        Ok(reads)
    } else {
        Err(problems)
    }
}

fn run_labels(plan: &BackupPlan, job_name: &str) -> BTreeMap<String, String> {
    let mut labels = common_labels("backup");
    labels.insert(LABEL_PLAN.into(), plan.name_any());
    labels.insert(LABEL_RUN.into(), job_name.into());
    labels
}

/// The name of the VolumeSnapshot (and of its clone) of the `index`th snapshotted claim of a run.
pub fn run_snapshot_name(job_name: &str, index: usize) -> String {
    format!("{job_name}-{index}")
}

/// The VolumeSnapshot of `claim` for the run whose Job will be `job_name`. It carries the run's
/// trigger and scheduled time, so the run is known again while its snapshots get ready.
pub fn run_snapshot(
    plan: &BackupPlan,
    run: &SnapshotRunInfo,
    job_name: &str,
    index: usize,
    claim: &str,
    class: &str,
) -> VolumeSnapshot {
    let mut annotations = BTreeMap::from([
        (ANNOTATION_SOURCE_CLAIM.to_owned(), claim.to_owned()),
        (
            ANNOTATION_TRIGGER.to_owned(),
            trigger_name(run.trigger).to_owned(),
        ),
    ]);
    if let Some(time) = run.scheduled_time {
        annotations.insert(ANNOTATION_SCHEDULED_TIME.into(), time.to_string());
    }
    if let Some(trigger) = &run.manual_trigger {
        annotations.insert(ANNOTATION_MANUAL_TRIGGER.into(), trigger.clone());
    }
    let mut snapshot = VolumeSnapshot::new(
        &run_snapshot_name(job_name, index),
        VolumeSnapshotSpec {
            source: VolumeSnapshotSource {
                persistent_volume_claim_name: Some(claim.to_owned()),
                volume_snapshot_content_name: None,
            },
            volume_snapshot_class_name: Some(class.to_owned()),
        },
    );
    snapshot.metadata.namespace = plan.namespace();
    snapshot.metadata.labels = Some(run_labels(plan, job_name));
    snapshot.metadata.annotations = Some(annotations);
    snapshot.metadata.owner_references = crate::owner::controlled_by(plan).map(|o| vec![o]);
    snapshot
}

/// The claim a run's Job mounts: provisioned by the CSI driver from `snapshot`, as large as the
/// snapshot's restore size (or the source claim), of the source's StorageClass and volume mode.
pub fn snapshot_clone(
    plan: &BackupPlan,
    snapshot: &VolumeSnapshot,
    source: &PersistentVolumeClaim,
) -> PersistentVolumeClaim {
    let source_spec = source.spec.clone().unwrap_or_default();
    let size = snapshot
        .status
        .as_ref()
        .and_then(|s| s.restore_size.clone())
        .or_else(|| {
            source
                .status
                .as_ref()
                .and_then(|s| s.capacity.as_ref())
                .and_then(|c| c.get("storage").cloned())
        })
        .or_else(|| {
            source_spec
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("storage").cloned())
        });
    let job_name = snapshot
        .labels()
        .get(LABEL_RUN)
        .cloned()
        .unwrap_or_default();
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: snapshot.metadata.name.clone(),
            namespace: plan.namespace(),
            labels: Some(run_labels(plan, &job_name)),
            annotations: Some(BTreeMap::from([(
                ANNOTATION_SOURCE_CLAIM.to_owned(),
                source.name_any(),
            )])),
            owner_references: crate::owner::controlled_by(plan).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: source_spec.storage_class_name,
            volume_mode: source_spec.volume_mode,
            resources: Some(VolumeResourceRequirements {
                requests: size.map(|size| BTreeMap::from([("storage".to_owned(), size)])),
                limits: None,
            }),
            data_source: Some(TypedLocalObjectReference {
                api_group: Some(SNAPSHOT_GROUP.into()),
                kind: "VolumeSnapshot".into(),
                name: snapshot.name_any(),
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

/// What identifies a run that takes VolumeSnapshots: recorded in their annotations, so the run is
/// known again while they get ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRunInfo {
    pub trigger: RunTrigger,
    pub scheduled_time: Option<Timestamp>,
    pub manual_trigger: Option<String>,
}

/// The run a VolumeSnapshot was taken for, with its `trigger` (see [`snapshot_trigger`]).
pub fn snapshot_run_info(snapshot: &VolumeSnapshot, trigger: RunTrigger) -> SnapshotRunInfo {
    let annotations = snapshot.annotations();
    SnapshotRunInfo {
        trigger,
        scheduled_time: annotations
            .get(ANNOTATION_SCHEDULED_TIME)
            .and_then(|t| t.parse().ok()),
        manual_trigger: annotations.get(ANNOTATION_MANUAL_TRIGGER).cloned(),
    }
}

/// The trigger of the run a VolumeSnapshot was taken for, from its annotation.
pub fn snapshot_trigger(snapshot: &VolumeSnapshot) -> Result<RunTrigger, UnknownTrigger> {
    parse_trigger(
        snapshot
            .annotations()
            .get(ANNOTATION_TRIGGER)
            .map(String::as_str),
    )
}

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
    use crate::conditions::Reason;
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
        assert_eq!(problem.reason(), Reason::VolumesOnDifferentNodes);
        assert!(problem.to_string().contains("node-1, node-2"));
    }

    #[test]
    fn a_restore_creates_an_unowned_claim_of_the_asked_size() {
        use crate::api::{AccessMode, RestoreSpec};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let mut restore = Restore::new(
            "back",
            RestoreSpec {
                streams: Vec::new(),
                on_non_empty_target: Default::default(),
                source: crate::api::RestoreSource::Plan {
                    backup_plan_name: "nightly".into(),
                    copy: None,
                },
                snapshot: "latest".into(),
                taken_before: None,
                volumes: vec![],
                databases: vec![],
                pod: None,
                mover: None,
                all_volumes: false,
                create_claims: None,
                storage_class_mapping: Vec::new(),
                minimum_claim_size: None,
                all_databases: None,
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

    fn classed(name: &str, storage_class: Option<&str>) -> PersistentVolumeClaim {
        let mut claim = claim(name, "ReadWriteOnce");
        claim.spec.as_mut().unwrap().storage_class_name = storage_class.map(str::to_owned);
        claim
    }

    fn storage_class(name: &str, provisioner: &str, default: bool) -> StorageClass {
        StorageClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: default.then(|| {
                    BTreeMap::from([(
                        DEFAULT_STORAGE_CLASS_ANNOTATION.to_string(),
                        "true".to_string(),
                    )])
                }),
                ..ObjectMeta::default()
            },
            provisioner: provisioner.into(),
            ..StorageClass::default()
        }
    }

    fn snapshot_class(name: &str, driver: &str, default: bool) -> VolumeSnapshotClass {
        VolumeSnapshotClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: default.then(|| {
                    BTreeMap::from([(
                        crate::csi::DEFAULT_SNAPSHOT_CLASS_ANNOTATION.to_string(),
                        "true".to_string(),
                    )])
                }),
                ..ObjectMeta::default()
            },
            driver: driver.into(),
            deletion_policy: "Delete".into(),
            parameters: None,
        }
    }

    fn snap(class: &str) -> VolumeRead {
        VolumeRead::Snapshot {
            class: class.into(),
        }
    }

    #[test]
    fn auto_snapshots_where_the_claims_driver_has_a_class_and_reads_directly_elsewhere() {
        let storage_classes = [
            storage_class("fast", "ebs.csi.aws.com", false),
            storage_class("standard", "pd.csi.storage.gke.io", true),
            storage_class("local", "kubernetes.io/no-provisioner", false),
        ];
        let classes = [
            snapshot_class("ebs-a", "ebs.csi.aws.com", false),
            snapshot_class("ebs-b", "ebs.csi.aws.com", true),
            snapshot_class("pd", "pd.csi.storage.gke.io", false),
        ];
        let fast = classed("fast-data", Some("fast"));
        let defaulted = classed("default-data", None);
        let local = classed("local-data", Some("local"));
        let none = classed("no-class", Some(""));
        let support = SnapshotSupport {
            classes: Some(&classes),
            storage_classes: &storage_classes,
        };
        let reads = choose_reads(
            CopyMethod::Auto,
            None,
            &[&fast, &defaulted, &local, &none],
            support,
        );
        // The driver's default class wins over another; a claim without a class gets the
        // cluster's default StorageClass's driver.
        assert_eq!(
            reads,
            Ok(vec![
                snap("ebs-b"),
                snap("pd"),
                VolumeRead::Direct,
                VolumeRead::Direct
            ])
        );
        // Direct reads directly, whatever the cluster offers.
        assert_eq!(
            choose_reads(CopyMethod::Direct, None, &[&fast], support),
            Ok(vec![VolumeRead::Direct])
        );
        // A named class: Auto snapshots only the claims of its driver, Snapshot all.
        assert_eq!(
            choose_reads(CopyMethod::Auto, Some("pd"), &[&fast, &defaulted], support),
            Ok(vec![VolumeRead::Direct, snap("pd")])
        );
        assert_eq!(
            choose_reads(CopyMethod::Snapshot, Some("pd"), &[&fast], support),
            Ok(vec![snap("pd")])
        );
    }

    #[test]
    fn snapshot_needs_the_api_and_a_class_and_auto_falls_back_without_them() {
        let storage_classes = [storage_class("fast", "ebs.csi.aws.com", false)];
        let fast = classed("data", Some("fast"));
        let without_api = SnapshotSupport {
            classes: None,
            storage_classes: &storage_classes,
        };
        assert_eq!(
            choose_reads(CopyMethod::Snapshot, None, &[&fast], without_api).unwrap_err()[0]
                .reason(),
            Reason::SnapshotNotAvailable
        );
        assert_eq!(
            choose_reads(CopyMethod::Auto, None, &[&fast], without_api),
            Ok(vec![VolumeRead::Direct])
        );
        let no_classes = SnapshotSupport {
            classes: Some(&[]),
            storage_classes: &storage_classes,
        };
        let problems = choose_reads(CopyMethod::Snapshot, None, &[&fast], no_classes).unwrap_err();
        assert_eq!(problems[0].reason(), Reason::NoVolumeSnapshotClass);
        assert!(problems[0].to_string().contains("\"ebs.csi.aws.com\""));
        let problems =
            choose_reads(CopyMethod::Auto, Some("gone"), &[&fast], no_classes).unwrap_err();
        assert_eq!(problems[0].reason(), Reason::VolumeSnapshotClassNotFound);
        // Two classes for the driver and neither marked default: ambiguous, so none is picked.
        let classes = [
            snapshot_class("a", "ebs.csi.aws.com", false),
            snapshot_class("b", "ebs.csi.aws.com", false),
        ];
        let ambiguous = SnapshotSupport {
            classes: Some(&classes),
            storage_classes: &storage_classes,
        };
        assert_eq!(
            choose_reads(CopyMethod::Snapshot, None, &[&fast], ambiguous).unwrap_err()[0].reason(),
            Reason::NoVolumeSnapshotClass
        );
    }

    #[test]
    fn a_read_write_once_pod_volume_in_use_needs_a_snapshot() {
        let exclusive = claim("db", "ReadWriteOncePod");
        let problem =
            direct_placement(&[&exclusive], &[pod("pg-0", "n", "db", "Running")]).unwrap_err();
        assert_eq!(problem.reason(), Reason::VolumeInUseExclusively);
        assert_eq!(direct_placement(&[&exclusive], &[]), Ok(None));
    }
}
