//! What a tenant who may create BackupPlans and Restores in a namespace may ask for, checked by
//! the operator before it builds a Job: every spec string that becomes a mount path, a file path,
//! an argument or an object name has its safe shape (again after the CRD schema, for objects
//! stored before a rule existed); no Secret it names is a service-account token; and the cluster
//! admin's [`TenantPolicy`] allows its repository and its pods' placement. Pure functions: each
//! finding is a [`Refusal`], which the reconcilers turn into `Ready=False` and an Event.

use std::collections::BTreeMap;

use neverwiped_contract::location::{self, LocationFault, RestLocation};

use crate::api::{
    BackupPlanSpec, BackupVolume, CredentialsSecretRef, PodSettings, Repository, RestoreSource,
    RestoreSpec,
};
use crate::conditions::Reason;
use crate::tenant_policy::TenantPolicy;
use crate::volume_patterns::{self, PatternFault, PatternField};

/// The type of each Secret a spec names, by name, as fetched (`Opaque` when it has none).
pub type SecretTypes = BTreeMap<String, String>;

/// The Secret type the operator never hands to a Job: it would give the Job, and whoever reads
/// its repository or gate, the service account's API token.
pub const SERVICE_ACCOUNT_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";

/// The shape a name must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameShape {
    /// A DNS-1123 subdomain: an object name.
    DnsSubdomain,
    /// A DNS-1123 label: a database entry's name.
    DnsLabel,
    /// A host name or IPv4 address.
    Host,
    /// A Restore's origin: `NAMESPACE/PLAN`.
    Origin,
}

impl std::fmt::Display for NameShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NameShape::DnsSubdomain => "a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', at most 253 characters)",
            NameShape::DnsLabel => "a DNS-1123 label (lower-case letters, digits and '-', at most 63 characters)",
            NameShape::Host => "a host name or IPv4 address (letters, digits, '-' and '.')",
            NameShape::Origin => "NAMESPACE/PLAN: a namespace (a DNS-1123 label), '/', and a BackupPlan's name (a DNS-1123 subdomain)",
        })
    }
}

/// Why a path, pattern or URL is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathFault {
    ControlCharacter,
    ParentComponent,
    DotSegment,
    UserQueryOrFragment,
    /// Not `http(s)://` with a host, or too short or long (the CRD's pattern and length).
    NotRepositoryUrl,
}

impl std::fmt::Display for PathFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PathFault::ControlCharacter => "it has a control character",
            PathFault::ParentComponent => {
                "it has a '..' component, which reaches outside the volume"
            }
            PathFault::DotSegment => "it has a '.' or '..' segment (also percent-encoded)",
            PathFault::UserQueryOrFragment => "it has a user, a query, a fragment or a backslash",
            PathFault::NotRepositoryUrl => {
                "it is not an http(s)://host[:port]/path URL of 8 to 2048 characters"
            }
        })
    }
}

/// Something a tenant asked for that the operator will not do; fixed by changing the spec (or,
/// for the policy's refusals, by the cluster admin), never by retrying.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{field}: {value:?} is not {shape}")]
    InvalidName {
        field: String,
        value: String,
        shape: NameShape,
    },
    #[error("{field}: {value:?} is refused: {fault}")]
    InvalidPath {
        field: String,
        value: String,
        fault: PathFault,
    },
    #[error("{field}: {value:?} is refused: {fault}")]
    InvalidPattern {
        field: String,
        value: String,
        fault: PatternFault,
    },
    #[error("{field}: {value:?} is refused: {fault}")]
    InvalidSelection {
        field: String,
        value: String,
        fault: String,
    },
    #[error("{field}: {url:?} is refused: {fault}")]
    InvalidRepositoryUrl {
        field: String,
        url: String,
        fault: PathFault,
    },
    #[error("{field}: {url:?} is the plan's own repository; a copy must go to another repository (another gate, or another path) to protect anything")]
    CopyToOwnRepository { field: String, url: String },
    #[error("{field}: the name {name:?} is used by another entry of spec.copies; each copy needs its own name")]
    DuplicateCopyName { field: String, name: String },
    #[error("Secret {name:?} named by {field} is of type {SERVICE_ACCOUNT_TOKEN_TYPE}; the operator never passes a service account's token to a Job: name a Secret that holds only the credential")]
    ServiceAccountToken { name: String, field: String },
    #[error("{field}: the cluster's policy does not allow backups to {url:?} (policy.allowedRepositoryPrefixes); ask the cluster admin, or use an allowed gate")]
    RepositoryNotAllowed { url: String, field: String },
    #[error("{field}: the cluster's policy does not allow the toleration {toleration} (policy.allowedTolerations)")]
    TolerationNotAllowed { field: String, toleration: String },
    #[error("{field}: the cluster's policy does not allow the node selector {key}={value:?} (policy.allowedNodeSelectors)")]
    NodeSelectorNotAllowed {
        field: String,
        key: String,
        value: String,
    },
    #[error("{field}: the cluster's policy does not allow PriorityClass {name:?} (policy.allowedPriorityClasses)")]
    PriorityClassNotAllowed { field: String, name: String },
    #[error("{field}: {name:?} is refused: an environment variable's name is a C identifier (letters, digits and '_', not starting with a digit) that does not start with NEVERWIPED_ (the operator's own variables)")]
    InvalidEnvName { field: String, name: String },
    #[error("{field}: set exactly one of value or valueFrom.secretKeyRef")]
    InvalidEnvValue { field: String },
    #[error("{field}: {path:?} is refused: a mountPath is absolute, without '..' or control characters, and not /, /tmp or under /neverwiped (the pod's own folders)")]
    InvalidMountPath { field: String, path: String },
    #[error("{field}: the name {name:?} is used by another entry of the same list; each needs its own name")]
    DuplicateEntryName { field: String, name: String },
    #[error("{field}: Privileged runs the pod as root with file capabilities, which the cluster's policy does not allow in namespace {namespace:?}; the cluster admin must add the namespace to the chart's policy.privilegedMoverNamespaces, or set mode Unprivileged")]
    PrivilegedMoverNotAllowed { field: String, namespace: String },
}

impl Refusal {
    /// The condition and Event reason.
    pub fn reason(&self) -> Reason {
        match self {
            Refusal::InvalidName { .. } => Reason::InvalidName,
            Refusal::InvalidPath { .. } | Refusal::InvalidPattern { .. } => Reason::InvalidPath,
            Refusal::InvalidSelection { .. } => Reason::InvalidSelection,
            Refusal::InvalidRepositoryUrl { .. } | Refusal::CopyToOwnRepository { .. } => {
                Reason::InvalidRepositoryUrl
            }
            Refusal::DuplicateCopyName { .. }
            | Refusal::DuplicateEntryName { .. }
            | Refusal::InvalidEnvName { .. }
            | Refusal::InvalidEnvValue { .. } => Reason::InvalidName,
            Refusal::InvalidMountPath { .. } => Reason::InvalidPath,
            Refusal::ServiceAccountToken { .. } => Reason::SecretTypeNotAllowed,
            Refusal::RepositoryNotAllowed { .. } => Reason::RepositoryNotAllowed,
            Refusal::TolerationNotAllowed { .. } => Reason::TolerationNotAllowed,
            Refusal::NodeSelectorNotAllowed { .. } => Reason::NodeSelectorNotAllowed,
            Refusal::PriorityClassNotAllowed { .. } => Reason::PriorityClassNotAllowed,
            Refusal::PrivilegedMoverNotAllowed { .. } => Reason::PrivilegedMoverNotAllowed,
        }
    }
}

/// Everything a BackupPlan asks for that the operator refuses.
pub fn check_backup_plan(
    spec: &BackupPlanSpec,
    secret_types: &SecretTypes,
    policy: &TenantPolicy,
) -> Vec<Refusal> {
    let mut found = Findings::default();
    found.repository(&spec.repository, "spec.repository", policy);
    for (index, volume) in spec.volumes.iter().enumerate() {
        let field = format!("spec.volumes[{index}]");
        if let Some(claim) = &volume.claim_name {
            found.name(
                &format!("{field}.claimName"),
                claim,
                NameShape::DnsSubdomain,
            );
        }
        found.paths(&format!("{field}.excludes"), &volume.excludes);
        found.patterns(
            &format!("{field}.excludes"),
            PatternField::Exclude,
            &volume.excludes,
        );
        found.selection(&field, volume);
    }
    if let Some(class) = &spec.volume_snapshot_class_name {
        found.name(
            "spec.volumeSnapshotClassName",
            class,
            NameShape::DnsSubdomain,
        );
    }
    for (index, database) in spec.databases.iter().enumerate() {
        let field = format!("spec.databases[{index}]");
        found.name(
            &format!("{field}.name"),
            &database.name,
            NameShape::DnsLabel,
        );
        found.name(&format!("{field}.host"), &database.host, NameShape::Host);
        found.credentials(
            &format!("{field}.credentialsSecretRef"),
            &database.credentials_secret_ref,
        );
    }
    found.copies(spec, policy);
    found.streams(&spec.streams);
    found.hooks(&spec.hooks);
    found.pod("spec.pod", spec.pod.as_ref(), policy);
    found.secrets_of_type(secret_types);
    found.refusals
}

/// Everything a Restore asks for that the operator refuses; `plan` is the spec of the BackupPlan
/// it restores from (if it names one), whose repository and (unless the Restore sets its own) pod
/// settings the restore Job uses. A repository the Restore names itself is checked as a plan's.
pub fn check_restore(
    spec: &RestoreSpec,
    plan: Option<&BackupPlanSpec>,
    secret_types: &SecretTypes,
    policy: &TenantPolicy,
) -> Vec<Refusal> {
    let mut found = Findings::default();
    found.source(&spec.source, plan, policy);
    for (index, volume) in spec.volumes.iter().enumerate() {
        let field = format!("spec.volumes[{index}]");
        let source = &volume.source_claim_name;
        found.name(
            &format!("{field}.sourceClaimName"),
            source,
            NameShape::DnsSubdomain,
        );
        let target = &volume.target_claim_name;
        found.name(
            &format!("{field}.targetClaimName"),
            target,
            NameShape::DnsSubdomain,
        );
        found.paths(&format!("{field}.includes"), &volume.includes);
        found.patterns(
            &format!("{field}.includes"),
            PatternField::Include,
            &volume.includes,
        );
        let class = volume
            .create_claim
            .as_ref()
            .and_then(|c| c.storage_class_name.as_ref());
        if let Some(class) = class {
            let field = format!("{field}.createClaim.storageClassName");
            found.name(&field, class, NameShape::DnsSubdomain);
        }
    }
    for (index, database) in spec.databases.iter().enumerate() {
        let field = format!("spec.databases[{index}]");
        found.name(
            &format!("{field}.name"),
            &database.name,
            NameShape::DnsLabel,
        );
        found.name(&format!("{field}.host"), &database.host, NameShape::Host);
        found.credentials(
            &format!("{field}.credentialsSecretRef"),
            &database.credentials_secret_ref,
        );
    }
    found.streams(&spec.streams);
    match (&spec.pod, spec.source.plan_name()) {
        (Some(pod), _) => found.pod("spec.pod", Some(pod), policy),
        (None, Some(plan_name)) => {
            let field = format!("BackupPlan {plan_name:?}'s spec.pod");
            found.pod(&field, plan.and_then(|p| p.pod.as_ref()), policy);
        }
        (None, None) => {}
    }
    found.secrets_of_type(secret_types);
    found.refusals
}

/// Whether `text` is a DNS-1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns_label(text: &str) -> bool {
    text.len() <= 63 && is_label(text, |c| c.is_ascii_lowercase() || c.is_ascii_digit())
}

/// Whether `text` is a DNS-1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns_subdomain(text: &str) -> bool {
    text.len() <= 253
        && text
            .split('.')
            .all(|label| is_label(label, |c| c.is_ascii_lowercase() || c.is_ascii_digit()))
}

/// Whether `text` is a Restore's origin: `NAMESPACE/PLAN`, a DNS-1123 label and subdomain.
pub fn is_origin(text: &str) -> bool {
    text.split_once('/')
        .is_some_and(|(namespace, plan)| is_dns_label(namespace) && is_dns_subdomain(plan))
}

/// Whether `text` is a host name or IPv4 address the connection URI can take as it is.
pub fn is_host(text: &str) -> bool {
    text.len() <= 253
        && text
            .split('.')
            .all(|label| is_label(label, |c| c.is_ascii_alphanumeric()))
}

/// A non-empty run of `alphanumeric` characters and inner `-`, starting and ending with one of
/// the former.
fn is_label(text: &str, alphanumeric: impl Fn(char) -> bool) -> bool {
    let ends_ok = text.starts_with(&alphanumeric) && text.ends_with(&alphanumeric);
    ends_ok && text.chars().all(|c| alphanumeric(c) || c == '-')
}

/// Why a path or pattern inside a volume is refused, if it is.
pub fn path_fault(path: &str) -> Option<PathFault> {
    if path.chars().any(char::is_control) {
        Some(PathFault::ControlCharacter)
    } else if path.split('/').any(|component| component == "..") {
        Some(PathFault::ParentComponent)
    } else {
        None
    }
}

/// Why a repository URL is refused, if it is, under the rules of its one parser
/// ([`RestLocation::parse`]): a `.` or `..` segment (as written or percent-encoded) would let an
/// HTTP client normalise it out of an allowed prefix; a user, query or fragment would change what
/// the prefix means.
pub fn repository_url_fault(url: &str) -> Option<PathFault> {
    let error = RestLocation::parse(url).err()?;
    Some(match error.fault {
        LocationFault::ControlCharacter => PathFault::ControlCharacter,
        LocationFault::UserQueryOrFragment | LocationFault::Credentials => {
            PathFault::UserQueryOrFragment
        }
        LocationFault::DotSegment => PathFault::DotSegment,
        _ => PathFault::NotRepositoryUrl,
    })
}

/// The refusals found so far, and the Secrets named (by name, with the field that names it).
#[derive(Default)]
struct Findings {
    refusals: Vec<Refusal>,
    secrets: Vec<(String, String)>,
}

impl Findings {
    /// `spec.copies`: each destination a repository as the plan's (the same policy), under a
    /// unique DNS-label name, and never the plan's own repository.
    fn copies(&mut self, spec: &BackupPlanSpec, policy: &TenantPolicy) {
        let own = spec.repository.location().ok();
        for (index, copy) in spec.copies.iter().enumerate() {
            let field = format!("spec.copies[{index}]");
            self.name(&format!("{field}.name"), &copy.name, NameShape::DnsLabel);
            if spec.copies[..index].iter().any(|c| c.name == copy.name) {
                self.refusals.push(Refusal::DuplicateCopyName {
                    field: format!("{field}.name"),
                    name: copy.name.clone(),
                });
            }
            self.repository(&copy.repository, &format!("{field}.repository"), policy);
            // Compared as the client connects (the path ending in `/`): `…/shop` is `…/shop/`.
            let location = copy.repository.location().ok();
            let connected = |l: &RestLocation| l.url().clone();
            if location.is_some() && location.as_ref().map(connected) == own.as_ref().map(connected)
            {
                self.refusals.push(Refusal::CopyToOwnRepository {
                    field: format!("{field}.repository.url"),
                    url: copy.repository.url.clone(),
                });
            }
        }
    }

    fn name(&mut self, field: &str, value: &str, shape: NameShape) {
        let valid = match shape {
            NameShape::DnsSubdomain => is_dns_subdomain(value),
            NameShape::DnsLabel => is_dns_label(value),
            NameShape::Host => is_host(value),
            NameShape::Origin => is_origin(value),
        };
        if !valid {
            self.refusals.push(Refusal::InvalidName {
                field: field.to_owned(),
                value: value.to_owned(),
                shape,
            });
        }
    }

    fn paths(&mut self, field: &str, paths: &[String]) {
        for (index, path) in paths.iter().enumerate() {
            if let Some(fault) = path_fault(path) {
                self.refusals.push(Refusal::InvalidPath {
                    field: format!("{field}[{index}]"),
                    value: path.clone(),
                    fault,
                });
            }
        }
    }

    fn patterns(&mut self, field: &str, kind: PatternField, patterns: &[String]) {
        for (index, fault) in volume_patterns::faults(kind, patterns) {
            self.refusals.push(Refusal::InvalidPattern {
                field: format!("{field}[{index}]"),
                value: patterns[index].clone(),
                fault,
            });
        }
    }

    /// A plan volume's `excludeIfPresent` and `excludeLargerThan`.
    fn selection(&mut self, field: &str, volume: &BackupVolume) {
        for (index, spec) in volume.exclude_if_present.iter().enumerate() {
            if let Some(fault) = volume_patterns::tag_file_fault(spec) {
                self.refusals.push(Refusal::InvalidSelection {
                    field: format!("{field}.excludeIfPresent[{index}]"),
                    value: spec.clone(),
                    fault: fault.to_owned(),
                });
            }
        }
        let size = volume.exclude_larger_than.as_deref();
        if let Some((size, fault)) = size.and_then(|s| Some((s, volume_patterns::size_fault(s)?))) {
            self.refusals.push(Refusal::InvalidSelection {
                field: format!("{field}.excludeLargerThan"),
                value: size.to_owned(),
                fault,
            });
        }
    }

    fn secret(&mut self, field: &str, name: &str) {
        self.name(&format!("{field}.name"), name, NameShape::DnsSubdomain);
        self.secrets.push((name.to_owned(), field.to_owned()));
    }

    fn credentials(&mut self, field: &str, credentials: &CredentialsSecretRef) {
        self.secret(field, &credentials.name);
    }

    /// Where a Restore reads from: the plan's name and repository, or its own repository and
    /// origin.
    fn source(
        &mut self,
        source: &RestoreSource,
        plan: Option<&BackupPlanSpec>,
        policy: &TenantPolicy,
    ) {
        match source {
            RestoreSource::Plan {
                backup_plan_name,
                copy,
            } => {
                let field = "spec.backupPlanName";
                self.name(field, backup_plan_name, NameShape::DnsSubdomain);
                if let Some(copy) = copy {
                    self.name("spec.copy", copy, NameShape::DnsLabel);
                }
                let Some(plan) = plan else { return };
                let plan_field = format!("BackupPlan {backup_plan_name:?}'s spec");
                match copy {
                    // The copy's repository is what the Restore reads: it is checked as the
                    // plan's would be (a copy the plan lacks is `CopyNotFound`, not a refusal).
                    Some(copy) => {
                        let entry = plan.copies.iter().find(|entry| &entry.name == copy);
                        if let Some(entry) = entry {
                            let field = format!("{plan_field}.copies[{copy:?}].repository");
                            self.repository(&entry.repository, &field, policy);
                        }
                    }
                    None => {
                        let field = format!("{plan_field}.repository");
                        self.repository(&plan.repository, &field, policy);
                    }
                }
            }
            RestoreSource::Repository { repository, origin } => {
                self.name("spec.origin", origin, NameShape::Origin);
                self.repository(repository, "spec.repository", policy);
            }
        }
    }

    fn repository(&mut self, repository: &Repository, field: &str, policy: &TenantPolicy) {
        let url = &repository.url;
        if let Some(fault) = repository_url_fault(url) {
            let url = location::redact_userinfo(url);
            self.refusals.push(Refusal::InvalidRepositoryUrl {
                field: format!("{field}.url"),
                url,
                fault,
            });
        } else if !policy.allows_repository(url) {
            self.refusals.push(Refusal::RepositoryNotAllowed {
                url: url.clone(),
                field: format!("{field}.url"),
            });
        }
        self.secret(
            &format!("{field}.passwordSecretRef"),
            &repository.password_secret_ref.name,
        );
        if let Some(credentials) = &repository.credentials_secret_ref {
            self.credentials(&format!("{field}.credentialsSecretRef"), credentials);
        }
        if let Some(ca) = &repository.ca_secret_ref {
            self.secret(&format!("{field}.caSecretRef"), &ca.name);
        }
    }

    fn pod(&mut self, field: &str, pod: Option<&PodSettings>, policy: &TenantPolicy) {
        let Some(pod) = pod else {
            return;
        };
        for (index, toleration) in pod.tolerations.iter().enumerate() {
            if !policy.allows_toleration(toleration) {
                self.refusals.push(Refusal::TolerationNotAllowed {
                    field: format!("{field}.tolerations[{index}]"),
                    toleration: serde_json::to_string(toleration).unwrap_or_default(),
                });
            }
        }
        for (key, value) in &pod.node_selector {
            if !policy.allows_node_selector(key, value) {
                self.refusals.push(Refusal::NodeSelectorNotAllowed {
                    field: format!("{field}.nodeSelector"),
                    key: key.clone(),
                    value: value.clone(),
                });
            }
        }
        if let Some(class) = &pod.priority_class_name {
            let class_field = format!("{field}.priorityClassName");
            self.name(&class_field, class, NameShape::DnsSubdomain);
            if !policy.allows_priority_class(class) {
                self.refusals.push(Refusal::PriorityClassNotAllowed {
                    field: class_field,
                    name: class.clone(),
                });
            }
        }
    }

    /// One refusal per Secret named that is a service-account token (at its first use).
    fn secrets_of_type(&mut self, secret_types: &SecretTypes) {
        let mut refused: Vec<&str> = Vec::new();
        for (name, field) in &self.secrets {
            let is_token =
                secret_types.get(name).map(String::as_str) == Some(SERVICE_ACCOUNT_TOKEN_TYPE);
            if is_token && !refused.contains(&name.as_str()) {
                refused.push(name);
                self.refusals.push(Refusal::ServiceAccountToken {
                    name: name.clone(),
                    field: field.clone(),
                });
            }
        }
    }
}

#[path = "admission_streams.rs"]
mod streams;

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
