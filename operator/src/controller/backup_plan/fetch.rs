//! What the reconciler reads from the cluster for one plan, and which of it the plan owns.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};

use crate::admission::SecretTypes;
use crate::api::{BackupPlan, CopyMethod};
use crate::controller::{fetch_secret_keys, list_if_served, Error};
use crate::csi::{VolumeSnapshot, VolumeSnapshotClass};
use crate::job::{LABEL_PLAN, LABEL_PLAN_NAMESPACE, LABEL_RUN};
use crate::plan::{secrets_used, SecretKeys};

/// What the reconciler fetched for a plan.
#[derive(Debug, Clone, Default)]
pub struct ObservedPlan {
    /// The plan's Jobs (in its namespace, and its prunes in the operator's).
    pub jobs: Vec<Job>,
    /// The pods of the namespace (the Jobs' pods, and the applications' for `Direct` placement),
    /// and those of the plan's Jobs in the operator's namespace.
    pub pods: Vec<Pod>,
    /// Keys of the Secrets the plan names.
    pub secrets: SecretKeys,
    /// Types of the Secrets the plan names.
    pub secret_types: SecretTypes,
    /// The PersistentVolumeClaims of the namespace (the clones of the plan's runs among them).
    pub claims: Vec<PersistentVolumeClaim>,
    /// The VolumeSnapshots of the plan's runs.
    pub snapshots: Vec<VolumeSnapshot>,
    /// The VolumeSnapshotClasses; `None` when the cluster does not serve the snapshot API.
    pub snapshot_classes: Option<Vec<VolumeSnapshotClass>>,
    /// The StorageClasses (fetched when the plan may take snapshots).
    pub storage_classes: Vec<StorageClass>,
}

/// Whether `plan` is the controller owner of `object` (a label alone can be copied).
pub fn owned_by<K: Resource>(object: &K, plan: &BackupPlan) -> bool {
    let uid = plan.metadata.uid.as_deref();
    object
        .meta()
        .owner_references
        .as_ref()
        .is_some_and(|owners| {
            owners
                .iter()
                .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
        })
}

/// The label selector of everything the operator created for the plan's runs.
pub fn plan_selector(plan_name: &str) -> String {
    format!("{LABEL_PLAN}={plan_name}")
}

/// The label selector of the VolumeSnapshots and clones of the plan's runs.
pub fn run_selector(plan_name: &str) -> String {
    format!("{LABEL_PLAN}={plan_name},{LABEL_RUN}")
}

/// The label selector of a plan's Jobs in the operator's namespace (a protected plan's prunes).
pub fn remote_selector(namespace: &str, plan_name: &str) -> String {
    format!("{LABEL_PLAN}={plan_name},{LABEL_PLAN_NAMESPACE}={namespace}")
}

/// Reads what `plan` names and what the operator created for it: in its namespace, and its prune
/// Jobs and their pods in `own_namespace`, the operator's (when maintenance credentials are
/// configured). The requests go out together (the
/// pods after the Jobs): a plan woken because a slot freed starts its Job after two round trips,
/// not seven.
pub async fn fetch(
    client: &Client,
    plan: &BackupPlan,
    own_namespace: Option<&str>,
) -> Result<ObservedPlan, Error> {
    let namespace = plan.namespace().unwrap_or_default();
    let name = plan.name_any();
    let spec = &plan.spec;
    let may_snapshot = !spec.volumes.is_empty() && spec.copy_method != CopyMethod::Direct;
    let all = ListParams::default();
    let uses = secrets_used(spec);
    // Backups, prunes and checks (the decision keeps those the plan owns).
    let by_plan = ListParams::default().labels(&plan_selector(&name));
    let by_run = ListParams::default().labels(&run_selector(&name));
    let jobs_api = Api::<Job>::namespaced(client.clone(), &namespace);
    let pods_api = Api::<Pod>::namespaced(client.clone(), &namespace);
    let claims_api = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &namespace);
    let snapshots_api = Api::<VolumeSnapshot>::namespaced(client.clone(), &namespace);
    let classes_api = Api::<VolumeSnapshotClass>::all(client.clone());
    let storage_api = Api::<StorageClass>::all(client.clone());
    let claims = async {
        if spec.volumes.is_empty() {
            return Ok(Vec::new());
        }
        Ok::<_, Error>(claims_api.list(&all).await?.items)
    };
    let snapshot_classes = async {
        if !may_snapshot {
            return Ok(None);
        }
        list_if_served(&classes_api, &all).await
    };
    let storage_classes = async {
        if !may_snapshot {
            return Ok(Vec::new());
        }
        Ok::<_, Error>(storage_api.list(&all).await?.items)
    };
    // The pods are read once the Jobs are: the kubelet records how a container ended before the
    // Job controller marks its Job finished, so a finished Job's pod is seen as it ended (read
    // at once, the pods could predate the Job's end and a good run would read as failed).
    let jobs_then_pods = async {
        let jobs = jobs_api.list(&by_plan).await?.items;
        let pods = pods_api.list(&all).await?.items;
        Ok::<_, Error>((jobs, pods))
    };
    let remote = async {
        let Some(own_namespace) = own_namespace.filter(|own| *own != namespace) else {
            return Ok((Vec::new(), Vec::new()));
        };
        let by_plan = ListParams::default().labels(&remote_selector(&namespace, &name));
        let jobs = Api::<Job>::namespaced(client.clone(), own_namespace)
            .list(&by_plan)
            .await?
            .items;
        if jobs.is_empty() {
            return Ok((jobs, Vec::new()));
        }
        let pods = Api::<Pod>::namespaced(client.clone(), own_namespace)
            .list(&by_plan)
            .await?
            .items;
        Ok::<_, Error>((jobs, pods))
    };
    let (
        (secrets, secret_types),
        (mut jobs, mut pods),
        (remote_jobs, remote_pods),
        claims,
        snapshots,
        snapshot_classes,
        storage_classes,
    ) = futures::try_join!(
        fetch_secret_keys(client, &namespace, &uses),
        jobs_then_pods,
        remote,
        claims,
        // Listed for every plan: a plan switched to Direct still cleans up after its last run.
        list_if_served(&snapshots_api, &by_run),
        snapshot_classes,
        storage_classes,
    )?;
    jobs.extend(remote_jobs);
    pods.extend(remote_pods);
    Ok(ObservedPlan {
        jobs,
        pods,
        secrets,
        secret_types,
        claims,
        snapshots: snapshots.unwrap_or_default(),
        snapshot_classes,
        storage_classes,
    })
}
