//! What a Restore reads from: the repository, the host its snapshots were written under (the
//! origin, `NAMESPACE/PLAN`), and the plan when it names one. A Restore names a BackupPlan of its
//! namespace, or a repository and an origin alone (for when the plan, or the cluster, is gone);
//! everything after the fetch works on [`ReadFrom`], so both are checked, reviewed and run alike.
//! Pure functions.

use kube::ResourceExt;
use neverwiped_contract::location::RestLocation;

use crate::api::{BackupPlan, Repository, Restore, RestoreSource};
use crate::conditions::Reason;
use crate::tenant_policy::TenantPolicy;

/// What a Restore reads from, resolved.
#[derive(Debug, Clone, Copy)]
pub struct ReadFrom<'a> {
    pub repository: &'a Repository,
    /// The plan, for a Restore that names one: its deadline, pod, mover and key hint count.
    pub plan: Option<&'a BackupPlan>,
    /// `NAMESPACE/PLAN`: the host of the snapshots to restore.
    pub origin: Origin<'a>,
}

/// The host a plan's snapshots are written under, split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin<'a> {
    pub namespace: &'a str,
    pub plan: &'a str,
}

impl std::fmt::Display for Origin<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.plan)
    }
}

impl<'a> Origin<'a> {
    /// `NAMESPACE/PLAN`, each part a DNS name (the CRD's pattern); `None` otherwise.
    pub fn parse(text: &'a str) -> Option<Origin<'a>> {
        let (namespace, plan) = text.split_once('/')?;
        let valid =
            crate::admission::is_dns_label(namespace) && crate::admission::is_dns_subdomain(plan);
        valid.then_some(Origin { namespace, plan })
    }
}

impl<'a> ReadFrom<'a> {
    /// What `restore` reads from; `plan` is its BackupPlan as fetched. `None`: the plan it names
    /// does not exist (or its origin does not parse, which admission refuses).
    pub fn of(restore: &'a Restore, plan: Option<&'a BackupPlan>) -> Option<ReadFrom<'a>> {
        match &restore.spec.source {
            RestoreSource::Plan { backup_plan_name } => {
                let plan = plan?;
                let namespace = restore.metadata.namespace.as_deref().unwrap_or_default();
                Some(ReadFrom {
                    repository: &plan.spec.repository,
                    plan: Some(plan),
                    origin: Origin {
                        namespace,
                        plan: backup_plan_name,
                    },
                })
            }
            RestoreSource::Repository { repository, origin } => Some(ReadFrom {
                repository,
                plan: None,
                origin: Origin::parse(origin)?,
            }),
        }
    }

    /// How messages name the repository's fields.
    pub fn repository_field(&self) -> String {
        match self.plan {
            Some(plan) => format!("BackupPlan {:?}'s spec.repository", plan.name_any()),
            None => "spec.repository".to_owned(),
        }
    }

    /// The sidecar's `--host`: the origin, for `latest` (a plan's own snapshots among those of
    /// every plan sharing the repository), and always for a repository named alone, so that an
    /// id of another origin's snapshot is refused rather than restored past the clone rules.
    pub fn host_arg(&self, snapshot: &str) -> Option<String> {
        let pinned = self.plan.is_none() || snapshot == "latest";
        pinned.then(|| self.origin.to_string())
    }
}

/// A clone the cluster's policy does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.origin: {origin:?} is a plan of namespace {from:?}, and this Restore is in namespace {to:?}: a clone, which needs a rule of the cluster's policy.allowedRestoreOrigins with from: {from}, to: {to} (or \"*\") whose repositoryPrefixes cover {url:?}; there is none. Ask the cluster admin for one, or restore in namespace {from:?}")]
pub struct CloneNotAllowed {
    pub origin: String,
    pub from: String,
    pub to: String,
    pub url: String,
}

impl CloneNotAllowed {
    pub fn reason(&self) -> Reason {
        Reason::CloneNotAllowed
    }
}

/// The refusal of a Restore in `namespace` reading `from`, when it is a clone no rule allows. A
/// URL that does not parse is refused by admission's repository check instead.
pub fn clone_refusal(
    from: &ReadFrom,
    namespace: &str,
    policy: &TenantPolicy,
) -> Option<CloneNotAllowed> {
    let location = RestLocation::parse(&from.repository.url).ok()?;
    let origin_namespace = from.origin.namespace;
    if policy.allows_restore_origin(origin_namespace, namespace, &location) {
        return None;
    }
    Some(CloneNotAllowed {
        origin: from.origin.to_string(),
        from: origin_namespace.to_owned(),
        to: namespace.to_owned(),
        url: from.repository.url.clone(),
    })
}

#[cfg(test)]
#[path = "restore_source_tests.rs"]
mod tests;
