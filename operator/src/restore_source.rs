//! What a Restore reads from: the repository, the host its snapshots were written under (the
//! origin, `NAMESPACE/PLAN`), and the plan when it names one. A Restore names a BackupPlan of its
//! namespace, or a repository and an origin alone (for when the plan, or the cluster, is gone);
//! everything after the fetch works on [`ReadFrom`], so both are checked, reviewed and run alike.
//! Pure functions.

use kube::ResourceExt;
use neverwiped_contract::location::RestLocation;

use crate::api::{BackupPlan, CopyDestination, Repository, Restore, RestoreSource};
use crate::conditions::Reason;
use crate::tenant_policy::TenantPolicy;

/// What a Restore reads from, resolved.
#[derive(Debug, Clone, Copy)]
pub struct ReadFrom<'a> {
    /// The plan's repository, the repository of its copy the Restore names, or the Restore's own.
    pub repository: &'a Repository,
    /// The name of the plan's copy read from, for a Restore that names one.
    pub copy: Option<&'a str>,
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
    /// does not exist, or has no copy of the name it names ([`copy_not_found`]), or
    /// its origin does not parse (which admission refuses).
    pub fn of(restore: &'a Restore, plan: Option<&'a BackupPlan>) -> Option<ReadFrom<'a>> {
        match &restore.spec.source {
            RestoreSource::Plan {
                backup_plan_name,
                copy,
            } => {
                let plan = plan?;
                let repository = match copy {
                    Some(name) => &copy_of(plan, name)?.repository,
                    None => &plan.spec.repository,
                };
                let namespace = restore.metadata.namespace.as_deref().unwrap_or_default();
                Some(ReadFrom {
                    repository,
                    copy: copy.as_deref(),
                    plan: Some(plan),
                    origin: Origin {
                        namespace,
                        plan: backup_plan_name,
                    },
                })
            }
            RestoreSource::Repository { repository, origin } => Some(ReadFrom {
                repository,
                copy: None,
                plan: None,
                origin: Origin::parse(origin)?,
            }),
        }
    }

    /// How messages name the repository's fields.
    pub fn repository_field(&self) -> String {
        match (self.plan, self.copy) {
            (Some(plan), Some(copy)) => {
                format!(
                    "BackupPlan {:?}'s spec.copies[{copy:?}].repository",
                    plan.name_any()
                )
            }
            (Some(plan), None) => format!("BackupPlan {:?}'s spec.repository", plan.name_any()),
            (None, _) => "spec.repository".to_owned(),
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

/// The entry of the plan's `spec.copies` named `name`.
pub fn copy_of<'a>(plan: &'a BackupPlan, name: &str) -> Option<&'a CopyDestination> {
    plan.spec.copies.iter().find(|copy| copy.name == name)
}

/// A Restore's `copy` that its plan's `spec.copies` does not name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.copy: BackupPlan {plan:?} has no copy named {copy:?}; its spec.copies are: [{copies}]. Name one of them, or remove copy to read the plan's own repository")]
pub struct CopyNotFound {
    pub plan: String,
    pub copy: String,
    /// The plan's copies, comma-separated.
    pub copies: String,
}

impl CopyNotFound {
    pub fn reason(&self) -> Reason {
        Reason::CopyNotFound
    }
}

/// The copy `restore` names that `plan` does not have; `None` without one, or when it has it.
pub fn copy_not_found(restore: &Restore, plan: &BackupPlan) -> Option<CopyNotFound> {
    let copy = restore.spec.source.copy_name()?;
    if copy_of(plan, copy).is_some() {
        return None;
    }
    let copies = plan.spec.copies.iter().map(|copy| copy.name.as_str());
    Some(CopyNotFound {
        plan: plan.name_any(),
        copy: copy.to_owned(),
        copies: copies.collect::<Vec<_>>().join(", "),
    })
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
