//! A plan's repository (or one named on the command line), opened in this process from the plan
//! and its Secrets — the same URL, password and gate credentials its Jobs mount — and held only
//! in memory.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use neverwiped::backend::retry::RetryPolicy;
use neverwiped::backend::BackendError;
use neverwiped::open::{GateLogin, OpenError, OpenOptions, SecretSource};
use neverwiped::repository::{IndexedRepository, Repository};
use neverwiped::text;
use neverwiped_api::tenant_policy::{TenantPolicy, POLICY_ENV};
use neverwiped_api::{BackupPlan, Repository as RepositorySpec};
use neverwiped_contract::cli::env;
use neverwiped_contract::is_key_id;
use url::Url;

use crate::cluster::Cluster;
use crate::source::{SecretFields, Source};

/// A repository opened for a command, and the plan it came from, if any.
pub struct OpenedRepository {
    /// The plan read, when the repository was a plan's: its status says which snapshot `latest`
    /// should be and which key opened the repository last.
    pub plan: Option<BackupPlan>,
    /// The repository's URL, for messages.
    pub url: String,
    pub repo: Repository,
}

impl OpenedRepository {
    /// The repository with its index loaded, to read files.
    pub async fn indexed(self) -> Result<IndexedRepository> {
        let url = self.url;
        self.repo
            .load_index()
            .await
            .with_context(|| format!("cannot read the index of the repository at {url}"))
    }
}

/// The host name of a plan's snapshots, as its backup Jobs pass it (`--host NAMESPACE/PLAN`).
pub fn plan_host(namespace: &str, plan: &str) -> String {
    format!("{namespace}/{plan}")
}

/// Reads the repository's coordinates and Secrets from `source` (a plan, or the command line)
/// in `namespace`, and opens it on the gate; each call to the gate retries for at most
/// `retry_budget`.
pub async fn open(
    cluster: &Cluster,
    namespace: &str,
    source: &Source,
    retry_budget: Duration,
) -> Result<OpenedRepository> {
    let (plan, spec) = match source {
        Source::Plan { name, copy } => {
            let plan = cluster.plan(namespace, name).await?;
            let spec = match copy {
                Some(copy) => copy_repository(&plan, copy)?,
                None => plan.spec.repository.clone(),
            };
            (Some(plan), spec)
        }
        Source::CommandLine(named) => (None, named.clone()),
    };
    let spec = &spec;
    let who = source.describe(namespace);
    // The same parser as the operator's and the sidecar's.
    let location = spec
        .location()
        .with_context(|| format!("{who} names no repository"))?;
    // Whoever may edit the plan may point it anywhere: the gate login goes only where the
    // cluster admin's policy allows, and the person running this is told where.
    let policy = tenant_policy()?;
    if !policy.allows_location(&location) {
        bail!(
            "{who} names the repository {}, outside the tenant policy's \
             allowedRepositoryPrefixes ({POLICY_ENV}): its credentials are not sent there",
            text::escaped(location.as_str())
        );
    }
    eprintln!(
        "reading {}repository on the gate at {}",
        match source {
            Source::Plan { .. } => format!("{who}'s "),
            Source::CommandLine(_) => "the ".to_owned(),
        },
        text::escaped(&gate_host(location.url()))
    );
    let fields = source.secret_fields();
    let secrets = read_secrets(cluster, namespace, spec, fields).await?;
    let options = OpenOptions {
        retry: RetryPolicy::with_budget(retry_budget),
        ca_certificate_pem: secrets.ca_certificate_pem,
        // As the sidecar's `--key-hint`: the key the password opens, tried first (the
        // environment's, else the one the plan's status recorded).
        key_hint: key_hint(std::env::var(env::KEY_HINT).ok(), plan.as_ref()),
        ..OpenOptions::default()
    };
    let opened = neverwiped::open(
        &location.into(),
        &SecretSource::Memory(secrets.password),
        &secrets.login,
        &options,
    )
    .await;
    let repo = match opened {
        Ok(repo) => repo,
        Err(OpenError::Repository(error)) => return Err(gate_error(error, spec, &who)),
        Err(other) => return Err(other.into()),
    };
    Ok(OpenedRepository {
        plan,
        url: spec.url.clone(),
        repo,
    })
}

/// The repository of the copy `name` of `plan` (an entry of its `spec.copies`).
pub fn copy_repository(plan: &BackupPlan, name: &str) -> Result<RepositorySpec> {
    if let Some(copy) = plan.spec.copies.iter().find(|copy| copy.name == name) {
        return Ok(copy.repository.clone());
    }
    let names: Vec<_> = plan.spec.copies.iter().map(|c| c.name.as_str()).collect();
    bail!(
        "BackupPlan {} has no copy named {}; its spec.copies are: [{}]",
        text::escaped(&plan.metadata.name.clone().unwrap_or_default()),
        text::escaped(name),
        names.join(", ")
    )
}

/// What opens a repository, read from its Secrets.
struct RepositorySecrets {
    password: zeroize::Zeroizing<Vec<u8>>,
    login: GateLogin,
    ca_certificate_pem: Option<Vec<u8>>,
}

/// Reads the password, gate login and CA certificate that `spec` names, from `namespace`.
async fn read_secrets(
    cluster: &Cluster,
    namespace: &str,
    spec: &RepositorySpec,
    fields: SecretFields,
) -> Result<RepositorySecrets> {
    let password_ref = &spec.password_secret_ref;
    let password = cluster
        .secret_value(
            namespace,
            &password_ref.name,
            &password_ref.key,
            fields.password,
        )
        .await?;
    let login = match &spec.credentials_secret_ref {
        None => GateLogin::default(),
        Some(credentials) => {
            let secret = &credentials.name;
            // A user name is taken as it is, as Kubernetes puts it into a Job's variable.
            let username = cluster
                .secret_value(namespace, secret, &credentials.username_key, fields.login)
                .await?;
            let username = String::from_utf8(username.to_vec()).with_context(|| {
                format!("the gate user name in the Secret {secret:?} is not UTF-8")
            })?;
            let password = cluster
                .secret_value(namespace, secret, &credentials.password_key, fields.login)
                .await?;
            GateLogin {
                username: Some(username),
                password: Some(SecretSource::Memory(password)),
            }
        }
    };
    let ca_certificate_pem = match &spec.ca_secret_ref {
        None => None,
        Some(ca) => Some(
            cluster
                .secret_value(namespace, &ca.name, &ca.key, fields.ca)
                .await?
                .to_vec(),
        ),
    };
    Ok(RepositorySecrets {
        password,
        login,
        ca_certificate_pem,
    })
}

/// The key tried first, as the sidecar's `--key-hint`: the caller's `NEVERWIPED_KEY_HINT`, else
/// the key that opened the plan's repository in its last run (`status.repository.keyId`).
pub fn key_hint(from_environment: Option<String>, plan: Option<&BackupPlan>) -> Option<String> {
    let recorded = plan.and_then(|plan| plan.status.as_ref()?.key_id());
    from_environment.or_else(|| recorded.filter(|id| is_key_id(id)).map(str::to_owned))
}

/// The cluster admin's tenant policy, as the operator reads it: JSON in [`POLICY_ENV`] (the
/// chart's `policy` values); unset, every URL is allowed.
fn tenant_policy() -> Result<TenantPolicy> {
    let json = std::env::var(POLICY_ENV).unwrap_or_default();
    Ok(TenantPolicy::from_json(&json)?)
}

/// The scheme, host and port of a repository URL: what is contacted.
fn gate_host(url: &Url) -> String {
    url.origin().ascii_serialization()
}

/// The repository could not be opened: say what that means, naming the Secrets `spec` names.
fn gate_error(error: neverwiped::Error, spec: &RepositorySpec, who: &str) -> anyhow::Error {
    let hint = match &error {
        neverwiped::Error::Backend(BackendError::Unauthorized) => {
            let secret = spec
                .credentials_secret_ref
                .as_ref()
                .map_or("none is set".to_owned(), |c| format!("Secret {:?}", c.name));
            format!("the gate refused the login ({secret})")
        }
        neverwiped::Error::WrongPassword => format!(
            "the password in the Secret {:?} opens no key of the repository",
            spec.password_secret_ref.name
        ),
        neverwiped::Error::Backend(
            BackendError::Transport { .. } | BackendError::RetryBudgetSpent { .. },
        ) => "the gate cannot be reached from here".to_owned(),
        _ => "cannot open it".to_owned(),
    };
    let url = &spec.url;
    anyhow::Error::new(error).context(format!("the repository of {who} at {url}: {hint}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use neverwiped_contract::location::RestLocation;

    #[test]
    fn the_gate_host_is_shown_without_path() {
        let host = |address: &str| gate_host(RestLocation::parse(address).unwrap().url());
        assert_eq!(
            host("https://gate.example.com:8443/shop/repo"),
            "https://gate.example.com:8443"
        );
        assert_eq!(host("http://127.0.0.1:8000/x"), "http://127.0.0.1:8000");
    }

    #[test]
    fn a_login_in_the_url_is_refused_before_anything_is_shown() {
        assert!(RestLocation::parse("https://u:p@gate.example.com:8443/shop/repo").is_err());
    }

    fn plan_whose_last_run_opened_with(key_id: Option<&str>) -> BackupPlan {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "neverwiped.io/v1alpha1",
            "kind": "BackupPlan",
            "metadata": {"name": "nightly", "namespace": "shop"},
            "spec": {
                "schedule": "@daily",
                "repository": {"url": "https://gate.example/r", "passwordSecretRef": {"name": "p", "key": "k"}},
                "volumes": [{"claimName": "data"}],
            },
            "status": {"repository": {
                "sizeBytes": 1, "size": "1", "snapshots": 1,
                "measuredTime": "2026-12-01T02:00:00Z", "keyId": key_id,
            }},
        }))
        .unwrap()
    }

    #[test]
    fn the_key_that_opened_the_plans_repository_last_time_is_tried_first() {
        let recorded = "5f".repeat(32);
        let plan = plan_whose_last_run_opened_with(Some(&recorded));
        assert_eq!(key_hint(None, Some(&plan)), Some(recorded));
        // The caller's own hint wins.
        assert_eq!(
            key_hint(Some("ab12".into()), Some(&plan)),
            Some("ab12".into())
        );
        assert_eq!(
            key_hint(None, Some(&plan_whose_last_run_opened_with(None))),
            None
        );
        // A status that does not hold a key id is not passed on.
        let odd = plan_whose_last_run_opened_with(Some("--all"));
        assert_eq!(key_hint(None, Some(&odd)), None);
    }

    #[test]
    fn the_host_is_the_one_backup_jobs_write() {
        assert_eq!(plan_host("shop", "nightly"), "shop/nightly");
    }
}
