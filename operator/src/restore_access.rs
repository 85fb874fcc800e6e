//! What a Restore's creator must be allowed to do for the operator to run it. The operator reads
//! the plan's repository and writes claims and databases with its own rights, so a Restore may
//! only read what its creator could read and write where its creator could write: restoring a
//! plan's data (into a claim or into any database host) needs what decrypting it needs (`get` on
//! the repository's password and gate-login Secrets, the plan's or the Restore's own), writing into an existing claim needs `update` on
//! it, creating one needs `create`. The creator is the user the admission request named, recorded
//! in [`REQUESTER_ANNOTATION`] (and, optionally, some of its groups in
//! [`REQUESTER_GROUPS_ANNOTATION`]), which the chart's ValidatingAdmissionPolicy lets only that
//! user write. Pure functions; the SubjectAccessReviews are in `controller::restore_review`.

use kube::api::ObjectMeta;

use crate::api::RestoreSpec;
use crate::conditions::Reason;
use crate::restore_source::ReadFrom;
use crate::tenant_policy::TenantPolicy;

pub use crate::api::{REQUESTER_ANNOTATION, REQUESTER_GROUPS_ANNOTATION};

/// Who a Restore acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requester {
    pub user: String,
    pub groups: Vec<String>,
}

impl Requester {
    /// The requester an object's annotations record, if they record one.
    pub fn of(meta: &ObjectMeta) -> Option<Requester> {
        let annotations = meta.annotations.as_ref()?;
        let user = annotations.get(REQUESTER_ANNOTATION)?.trim();
        if user.is_empty() {
            return None;
        }
        let groups = annotations
            .get(REQUESTER_GROUPS_ANNOTATION)
            .map(|groups| {
                groups
                    .split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        Some(Requester {
            user: user.to_owned(),
            groups,
        })
    }
}

/// Why the requester needs an access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessRule {
    /// Restoring a plan's data needs what decrypting it needs.
    DecryptPlan,
    /// Writing into a claim needs `update` on it (`create` for a new one).
    WriteClaim,
    /// A stream's command gets a Secret's value: it needs `get` on the Secret.
    ReadSecret,
}

impl AccessRule {
    /// The condition and Event reason when the requester lacks the access.
    pub fn reason(self) -> Reason {
        match self {
            AccessRule::DecryptPlan => Reason::RequesterCannotDecrypt,
            AccessRule::WriteClaim => Reason::RequesterCannotWriteClaim,
            AccessRule::ReadSecret => Reason::RequesterCannotReadSecret,
        }
    }

    fn explanation(self) -> &'static str {
        match self {
            AccessRule::DecryptPlan => {
                "restoring a plan's data needs what decrypting it needs: get on the repository's password and gate-login Secrets"
            }
            AccessRule::WriteClaim => {
                "writing into a PersistentVolumeClaim needs update on it (create for a new one)"
            }
            AccessRule::ReadSecret => {
                "a stream's command given a Secret's value needs get on the Secret"
            }
        }
    }
}

/// One access the requester must have in the Restore's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessNeeded {
    pub verb: &'static str,
    /// The core API resource (`secrets`, `persistentvolumeclaims`).
    pub resource: &'static str,
    /// The object's name; `None` for `create`, which names none.
    pub name: Option<String>,
    /// The field that names it.
    pub field: String,
    pub rule: AccessRule,
}

/// What a requester may not do, for the condition's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the user who created this Restore ({user:?}) may not {} {}{} named by {}; {}", .access.verb, .access.resource, .access.name.as_ref().map(|n| format!(" {n:?}")).unwrap_or_default(), .access.field, .access.rule.explanation())]
pub struct AccessDenied {
    pub user: String,
    pub access: AccessNeeded,
}

/// What the SubjectAccessReviews found for a Restore.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AccessReview {
    /// Not reviewed, or the Restore records no requester: nothing may run for it.
    #[default]
    NoRequester,
    /// The accesses the requester lacks (none: the Restore may run).
    Reviewed { denied: Vec<AccessDenied> },
}

/// Every access the creator of a Restore reading `from` must have; `claim_exists` says which
/// target claims exist (the others are created).
pub fn access_needed(
    spec: &RestoreSpec,
    from: &ReadFrom,
    claim_exists: impl Fn(&str) -> bool,
) -> Vec<AccessNeeded> {
    let plan_field = from.repository_field();
    let repository = from.repository;
    let mut needed = vec![AccessNeeded {
        verb: "get",
        resource: "secrets",
        name: Some(repository.password_secret_ref.name.clone()),
        field: format!("{plan_field}.passwordSecretRef"),
        rule: AccessRule::DecryptPlan,
    }];
    if let Some(login) = &repository.credentials_secret_ref {
        needed.push(AccessNeeded {
            verb: "get",
            resource: "secrets",
            name: Some(login.name.clone()),
            field: format!("{plan_field}.credentialsSecretRef"),
            rule: AccessRule::DecryptPlan,
        });
    }
    for (index, volume) in spec.volumes.iter().enumerate() {
        let field = format!("spec.volumes[{index}].targetClaimName");
        let name = &volume.target_claim_name;
        let (verb, name) = match claim_exists(name) {
            true => ("update", Some(name.clone())),
            false => ("create", None),
        };
        needed.push(AccessNeeded {
            verb,
            resource: "persistentvolumeclaims",
            name,
            field,
            rule: AccessRule::WriteClaim,
        });
    }
    needed.extend(stream_access_needed(spec));
    needed
}

/// What a Restore's streams need: `get` on each Secret their environment reads, `update` on each
/// claim they mount writable (their commands run with the operator's rights, not the creator's).
fn stream_access_needed(spec: &RestoreSpec) -> Vec<AccessNeeded> {
    let mut needed = Vec::new();
    for (index, stream) in spec.streams.iter().enumerate() {
        let field = format!("spec.streams[{index}]");
        for (at, variable) in stream.env.iter().enumerate() {
            let Some(source) = &variable.value_from else {
                continue;
            };
            needed.push(AccessNeeded {
                verb: "get",
                resource: "secrets",
                name: Some(source.secret_key_ref.name.clone()),
                field: format!("{field}.env[{at}].valueFrom.secretKeyRef"),
                rule: AccessRule::ReadSecret,
            });
        }
        let writable = stream.volume_mounts.iter().enumerate();
        for (at, mount) in writable.filter(|(_, m)| !m.read_only) {
            needed.push(AccessNeeded {
                verb: "update",
                resource: "persistentvolumeclaims",
                name: Some(mount.claim.claim_name.clone()),
                field: format!("{field}.volumeMounts[{at}].claimName"),
                rule: AccessRule::WriteClaim,
            });
        }
    }
    needed
}

/// A database host the cluster's policy does not allow Restores of `namespace` to write to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: the cluster's policy does not allow Restores in namespace {namespace:?} to write to host {host:?} (policy.allowedRestoreDatabaseHosts); ask the cluster admin, or restore to an allowed host")]
pub struct HostNotAllowed {
    pub field: String,
    pub host: String,
    pub namespace: String,
}

/// The database hosts of a Restore in `namespace` that `policy` does not allow.
pub fn hosts_not_allowed(
    spec: &RestoreSpec,
    namespace: &str,
    policy: &TenantPolicy,
) -> Vec<HostNotAllowed> {
    spec.databases
        .iter()
        .enumerate()
        .filter(|(_, database)| !policy.allows_restore_database_host(namespace, &database.host))
        .map(|(index, database)| HostNotAllowed {
            field: format!("spec.databases[{index}].host"),
            host: database.host.clone(),
            namespace: namespace.to_owned(),
        })
        .collect()
}

#[cfg(test)]
#[path = "restore_access_tests.rs"]
mod tests;
