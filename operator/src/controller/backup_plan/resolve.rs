//! What the plan's spec names, resolved against the cluster: its Secrets and claims, how each
//! volume is read (a snapshot or directly), the node a direct read must run on, and who the pod
//! that reads them runs as.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;

use super::fetch::ObservedPlan;
use crate::admission::check_backup_plan;
use crate::api::BackupPlan;
use crate::images::{images_not_allowed, plan_images};
use crate::job::LABEL_RUN;
use crate::mover::{choose_mover, IdentitySource, MoverChoice};
use crate::plan::{resolve_plan_seeded, Problem, ResolvedPlan};
use crate::tenant_policy::TenantPolicy;
use crate::volumes::{choose_reads, direct_placement, SnapshotSupport, VolumeRead};

/// A plan whose spec resolved: everything it names exists, and every volume can be read.
#[derive(Debug, Clone)]
pub struct ReadyPlan {
    pub plan: ResolvedPlan,
    /// How each of `plan.claims` is read, in the same order.
    pub reads: Vec<VolumeRead>,
    /// The node the pod must run on, when volumes are read directly.
    pub direct_node: Option<String>,
    /// The claims of the namespace that may be backed up (the plan's own clones left out).
    pub claims: Vec<PersistentVolumeClaim>,
    /// Who the pod that reads the volumes runs as.
    pub mover: MoverChoice,
}

impl ReadyPlan {
    /// The namespace's claim `name`, as it was read for this reconcile.
    pub fn claim(&self, name: &str) -> Option<&PersistentVolumeClaim> {
        self.claims.iter().find(|c| c.name_any() == name)
    }

    /// The claims read from snapshots with their VolumeSnapshotClass, in order: the nth is
    /// snapshot `<job>-<n>`.
    pub fn snapshotted(&self) -> Vec<(&str, &str)> {
        self.plan
            .claims
            .iter()
            .zip(&self.reads)
            .filter_map(|(claim, read)| match read {
                VolumeRead::Snapshot { class } => Some((claim.name.as_str(), class.as_str())),
                VolumeRead::Direct => None,
            })
            .collect()
    }
}

/// Resolves `plan`'s spec; the problems that keep it from running otherwise (what the cluster's
/// policy refuses first).
pub fn resolve(
    plan: &BackupPlan,
    observed: &ObservedPlan,
    policy: &TenantPolicy,
) -> Result<ReadyPlan, Vec<Problem>> {
    let spec = &plan.spec;
    let mut problems: Vec<Problem> = check_backup_plan(spec, &observed.secret_types, policy)
        .into_iter()
        .map(Problem::Refused)
        .collect();
    let namespace = plan.namespace().unwrap_or_default();
    let images = images_not_allowed(plan_images(spec), &namespace, policy);
    problems.extend(images.into_iter().map(Problem::ImageNotAllowed));
    // The clones of the plan's own runs are never backed up.
    let claims: Vec<PersistentVolumeClaim> = observed
        .claims
        .iter()
        .filter(|c| !c.labels().contains_key(LABEL_RUN))
        .cloned()
        .collect();
    let seed = format!(
        "{}/{}",
        plan.namespace().unwrap_or_default(),
        plan.name_any()
    );
    let resolved = match resolve_plan_seeded(spec, &seed, &observed.secrets, &claims) {
        Ok(resolved) => resolved,
        Err(found) => {
            problems.extend(found);
            return Err(problems);
        }
    };
    let mover = match plan_mover(plan, observed, &resolved, policy) {
        Ok(chosen) => chosen,
        Err(refusal) => {
            problems.push(Problem::Refused(refusal));
            return Err(problems);
        }
    };
    let mut ready = ReadyPlan {
        plan: resolved,
        reads: Vec::new(),
        direct_node: None,
        claims,
        mover,
    };
    if ready.plan.claims.is_empty() {
        return if problems.is_empty() {
            Ok(ready)
        } else {
            Err(problems)
        };
    }
    let plan_claims: Vec<&PersistentVolumeClaim> = ready
        .plan
        .claims
        .iter()
        .filter_map(|c| {
            ready
                .claims
                .iter()
                .find(|pvc| pvc.metadata.name.as_deref() == Some(&c.name))
        })
        .collect();
    let support = SnapshotSupport {
        classes: observed.snapshot_classes.as_deref(),
        storage_classes: &observed.storage_classes,
    };
    let class = spec.volume_snapshot_class_name.as_deref();
    let reads = match choose_reads(spec.copy_method, class, &plan_claims, support) {
        Ok(chosen) => chosen,
        Err(found) => {
            problems.extend(found);
            Vec::new()
        }
    };
    // Only volumes read directly tie the pod to a node.
    let direct: Vec<&PersistentVolumeClaim> = plan_claims
        .iter()
        .zip(&reads)
        .filter(|(_, read)| **read == VolumeRead::Direct)
        .map(|(claim, _)| *claim)
        .collect();
    let direct_node = match direct_placement(&direct, &observed.pods) {
        Ok(node) => node,
        Err(problem) => {
            problems.push(problem);
            None
        }
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    ready.reads = reads;
    ready.direct_node = direct_node;
    Ok(ready)
}

/// Who the plan's backup pods run as: the application's user comes from the pods that mount the
/// plan's claims.
fn plan_mover(
    plan: &BackupPlan,
    observed: &ObservedPlan,
    resolved: &ResolvedPlan,
    policy: &TenantPolicy,
) -> Result<MoverChoice, crate::admission::Refusal> {
    let claim_names: Vec<&str> = resolved.claims.iter().map(|c| c.name.as_str()).collect();
    let applications = IdentitySource::Applications {
        pods: &observed.pods,
        claims: &claim_names,
    };
    let namespace = plan.metadata.namespace.as_deref().unwrap_or_default();
    choose_mover(
        plan.spec.mover.as_ref(),
        "spec.mover",
        namespace,
        policy,
        applications,
    )
}
