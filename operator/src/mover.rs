//! Who the pod of a Job that reads or writes volumes runs as: root with file capabilities only
//! where the cluster admin allows it (the [`TenantPolicy`]), else a non-root user without
//! capabilities — the one `spec.mover` names, else the application's (the pod that mounts the
//! claim), else [`DEFAULT_MOVER_ID`]. Pure: the reconcilers call [`choose_mover`] and show the
//! choice in `status.mover`.

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;

use crate::admission::Refusal;
use crate::api::{BackupPlan, MoverMode, MoverSettings, MoverStatus, Restore};
use crate::job::MANAGED_BY;
use crate::tenant_policy::TenantPolicy;

/// The user and group of an unprivileged pod when nothing names one (the image's `nonroot`).
pub const DEFAULT_MOVER_ID: i64 = 65532;

/// A non-root user and its groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoverIdentity {
    pub uid: i64,
    pub gid: i64,
    pub supplemental_groups: Vec<i64>,
    /// The group that owns the application's files (its pod's `fsGroup`).
    pub fs_group: Option<i64>,
}

impl Default for MoverIdentity {
    fn default() -> MoverIdentity {
        MoverIdentity {
            uid: DEFAULT_MOVER_ID,
            gid: DEFAULT_MOVER_ID,
            supplemental_groups: Vec::new(),
            fs_group: None,
        }
    }
}

impl MoverIdentity {
    /// The identity of a pod that only reads: the `fsGroup` becomes a supplemental group. As the
    /// pod's `fsGroup` it would make the kubelet change the group and mode of every file on the
    /// volume (for drivers that support it), i.e. a backup would modify what it backs up.
    pub fn reading(&self) -> MoverIdentity {
        let mut groups = self.supplemental_groups.clone();
        groups.extend(self.fs_group);
        groups.sort_unstable();
        groups.dedup();
        groups.retain(|&group| group != self.gid);
        MoverIdentity {
            supplemental_groups: groups,
            fs_group: None,
            ..self.clone()
        }
    }
}

/// How a pod that reads or writes volumes runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mover {
    /// Root with the operation's file capabilities: allowed by the cluster admin.
    Privileged,
    /// A non-root user without capabilities.
    Unprivileged(MoverIdentity),
}

impl Default for Mover {
    fn default() -> Mover {
        Mover::Unprivileged(MoverIdentity::default())
    }
}

/// The mover chosen, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoverChoice {
    pub mover: Mover,
    pub message: String,
}

impl MoverChoice {
    /// `status.mover`.
    pub fn status(&self) -> MoverStatus {
        match &self.mover {
            Mover::Privileged => MoverStatus {
                mode: MoverMode::Privileged,
                run_as_user: None,
                run_as_group: None,
                supplemental_groups: Vec::new(),
                fs_group: None,
                message: self.message.clone(),
            },
            Mover::Unprivileged(identity) => {
                let reading = identity.reading();
                MoverStatus {
                    mode: MoverMode::Unprivileged,
                    run_as_user: Some(reading.uid),
                    run_as_group: Some(reading.gid),
                    supplemental_groups: reading.supplemental_groups,
                    fs_group: identity.fs_group,
                    message: self.message.clone(),
                }
            }
        }
    }
}

/// Where an unprivileged pod's user comes from when `spec.mover` names none.
#[derive(Debug, Clone, Copy)]
pub enum IdentitySource<'a> {
    /// A backup: the application pods of the namespace, and the claims the backup reads.
    Applications {
        pods: &'a [Pod],
        claims: &'a [&'a str],
    },
    /// A restore: the user the plan's backups ran as.
    Recorded(Option<&'a MoverStatus>),
}

/// Chooses the mover for `settings` (the spec's `mover`, found at `field`) in `namespace`.
pub fn choose_mover(
    settings: Option<&MoverSettings>,
    field: &str,
    namespace: &str,
    policy: &TenantPolicy,
    source: IdentitySource<'_>,
) -> Result<MoverChoice, Refusal> {
    let settings = settings.cloned().unwrap_or_default();
    if settings.mode == MoverMode::Privileged {
        if !policy.allows_privileged_mover(namespace) {
            return Err(Refusal::PrivilegedMoverNotAllowed {
                field: format!("{field}.mode"),
                namespace: namespace.to_owned(),
            });
        }
        return Ok(MoverChoice {
            mover: Mover::Privileged,
            message: format!(
                "{field}.mode is Privileged, which the cluster's policy allows in namespace {namespace:?}: root with file capabilities, every file is read"
            ),
        });
    }
    let (found, origin) = match source {
        IdentitySource::Applications { pods, claims } => application_identity(pods, claims),
        IdentitySource::Recorded(status) => recorded_identity(status),
    };
    let spec_names_user = settings.run_as_user.is_some();
    let uid = settings
        .run_as_user
        .or(found.as_ref().map(|f| f.uid))
        .unwrap_or(DEFAULT_MOVER_ID);
    let from_found = |pick: fn(&MoverIdentity) -> Option<i64>| found.as_ref().and_then(pick);
    let gid = settings
        .run_as_group
        .or(if spec_names_user {
            None
        } else {
            from_found(|f| Some(f.gid))
        })
        .unwrap_or(uid);
    let supplemental_groups = if settings.supplemental_groups.is_empty() && !spec_names_user {
        found
            .as_ref()
            .map(|f| f.supplemental_groups.clone())
            .unwrap_or_default()
    } else {
        settings.supplemental_groups.clone()
    };
    let fs_group = settings.fs_group.or(if spec_names_user {
        None
    } else {
        from_found(|f| f.fs_group)
    });
    let origin = if spec_names_user {
        format!("the user {field}.runAsUser names")
    } else {
        origin
    };
    Ok(MoverChoice {
        mover: Mover::Unprivileged(MoverIdentity {
            uid,
            gid,
            supplemental_groups,
            fs_group,
        }),
        message: format!(
            "Unprivileged: user {uid}, group {gid}, no capabilities ({origin}); files this user cannot read are warnings of the run. Root needs {field}.mode Privileged, which the cluster admin allows per namespace (policy.privilegedMoverNamespaces)"
        ),
    })
}

/// The mover of a Restore's pod: the Restore's `spec.mover`, else its plan's; the user, by
/// default, the one the plan's backups ran as (a Restore without a plan: the default user).
pub fn restore_mover(
    restore: &Restore,
    plan: Option<&BackupPlan>,
    policy: &TenantPolicy,
) -> Result<MoverChoice, Refusal> {
    let (settings, field) = match (&restore.spec.mover, plan) {
        (None, Some(plan)) => (
            plan.spec.mover.as_ref(),
            format!("BackupPlan {:?}'s spec.mover", plan.name_any()),
        ),
        (own, _) => (own.as_ref(), "spec.mover".to_owned()),
    };
    let recorded = plan.and_then(|p| p.status.as_ref()?.mover.as_ref());
    let namespace = restore.namespace().unwrap_or_default();
    choose_mover(
        settings,
        &field,
        &namespace,
        policy,
        IdentitySource::Recorded(recorded),
    )
}

/// The identity of the first application pod (by name) that mounts one of `claims`, and where
/// it came from; `None` with the reason when none names a non-root user.
fn application_identity(pods: &[Pod], claims: &[&str]) -> (Option<MoverIdentity>, String) {
    let mut candidates: Vec<&Pod> = pods
        .iter()
        .filter(|pod| !is_operators_pod(pod))
        .filter(|pod| mounted_claim_volume(pod, claims).is_some())
        .collect();
    candidates.sort_by_key(|pod| pod.metadata.name.clone());
    let Some(pod) = candidates.first() else {
        return (
            None,
            format!("no pod mounts the claims: the default user {DEFAULT_MOVER_ID}"),
        );
    };
    let name = pod.metadata.name.clone().unwrap_or_default();
    let (volume, claim) = mounted_claim_volume(pod, claims).unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let pod_context = spec.security_context.clone().unwrap_or_default();
    let container = spec.containers.iter().find(|c| mounts(c, &volume));
    let container_context = container.and_then(|c| c.security_context.clone());
    let context = container_context.unwrap_or_default();
    let uid = context.run_as_user.or(pod_context.run_as_user);
    let gid = context.run_as_group.or(pod_context.run_as_group);
    let container_name = container.map(|c| c.name.clone()).unwrap_or_default();
    match uid {
        Some(uid) if uid > 0 => (
            Some(MoverIdentity {
                uid,
                gid: gid.filter(|&g| g >= 0).unwrap_or(uid),
                supplemental_groups: pod_context
                    .supplemental_groups
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|&g| g >= 0)
                    .collect(),
                fs_group: pod_context.fs_group.filter(|&g| g >= 0),
            }),
            format!("the user and groups of pod {name:?} (container {container_name:?}), which mounts claim {claim:?}"),
        ),
        _ => (
            None,
            format!("pod {name:?}, which mounts claim {claim:?}, names no non-root runAsUser: the default user {DEFAULT_MOVER_ID}; set spec.mover.runAsUser to read as the files' owner"),
        ),
    }
}

/// The identity the plan's backups ran as.
fn recorded_identity(status: Option<&MoverStatus>) -> (Option<MoverIdentity>, String) {
    // Root is never a recorded identity: a status says what backups ran as, and anyone who may
    // patch it could write 0 there.
    let recorded = status.and_then(|s| s.run_as_user.filter(|&uid| uid > 0).map(|uid| (s, uid)));
    match recorded {
        Some((status, uid)) => (
            Some(MoverIdentity {
                uid,
                gid: status.run_as_group.unwrap_or(uid),
                supplemental_groups: status
                    .supplemental_groups
                    .iter()
                    .copied()
                    .filter(|&group| Some(group) != status.fs_group)
                    .collect(),
                fs_group: status.fs_group,
            }),
            "the user the plan's backups run as (its status.mover)".into(),
        ),
        None => (
            None,
            format!("the plan records no user of its backups: the default user {DEFAULT_MOVER_ID}"),
        ),
    }
}

/// A pod of the operator's own Jobs, which never lends its user.
fn is_operators_pod(pod: &Pod) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get("app.kubernetes.io/managed-by"))
        .is_some_and(|value| value == MANAGED_BY)
}

/// The pod's volume that is one of `claims`, with the claim's name.
fn mounted_claim_volume(pod: &Pod, claims: &[&str]) -> Option<(String, String)> {
    pod.spec
        .as_ref()?
        .volumes
        .iter()
        .flatten()
        .find_map(|volume| {
            let claim = &volume.persistent_volume_claim.as_ref()?.claim_name;
            claims
                .contains(&claim.as_str())
                .then(|| (volume.name.clone(), claim.clone()))
        })
}

fn mounts(container: &Container, volume: &str) -> bool {
    container
        .volume_mounts
        .iter()
        .flatten()
        .any(|mount| mount.name == volume)
}

#[cfg(test)]
#[path = "mover_tests.rs"]
mod tests;
