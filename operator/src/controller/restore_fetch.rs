//! What the Restore reconciler fetches: the plan, the describe and restore Jobs and their pods,
//! and then, for the Restore as checked at its describe step ([`as_checked`]), its target
//! claims, Secrets, StorageClasses, ResourceQuotas and its creator's access.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, ResourceQuota};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams};
use kube::ResourceExt;

use super::restore_describe::{as_checked, describe_step, DescribeStep};
use super::restore_review::review_restore;
use super::{fetch_secret_keys, Error};
use crate::admission::{is_dns_subdomain, SecretTypes};
use crate::api::{BackupPlan, Restore};
use crate::job::{describe_job_name, restore_job_name, LABEL_RESTORE};
use crate::plan::{credentials_used, env_secrets_used, repository_secrets_used, SecretKeys};
use crate::restore_access::AccessReview;
use crate::restore_source::ReadFrom;

/// What the reconciler fetched for a Restore.
#[derive(Debug, Clone, Default)]
pub struct ObservedRestore {
    pub plan: Option<BackupPlan>,
    /// Keys of the Secrets the plan's repository and the Restore's databases name.
    pub secrets: SecretKeys,
    /// Types of the same Secrets.
    pub secret_types: SecretTypes,
    /// The target claims that exist, by name.
    pub claims: BTreeMap<String, PersistentVolumeClaim>,
    /// The restore Job, once created.
    pub job: Option<Job>,
    /// The Job's pods.
    pub pods: Vec<Pod>,
    /// What the Restore's creator may not do of what running it needs (reviewed while no Job
    /// exists).
    pub access: AccessReview,
    /// Where the Restore is with its snapshot's record (while no restore Job exists).
    pub describe: DescribeStep,
    /// The cluster's StorageClasses (fetched for `createClaims: FromSnapshot`).
    pub storage_classes: Vec<StorageClass>,
    /// The namespace's ResourceQuotas (fetched for `createClaims: FromSnapshot`).
    pub resource_quotas: Vec<ResourceQuota>,
}

/// Everything [`super::restore::decide`] needs of the cluster for `restore`, at `now`.
pub async fn fetch(
    client: &kube::Client,
    namespace: &str,
    restore: &Restore,
    now: Timestamp,
) -> Result<ObservedRestore, Error> {
    let plan = match restore.spec.source.plan_name() {
        Some(name) => fetch_plan(client, namespace, name).await?,
        None => None,
    };
    let jobs = Api::<Job>::namespaced(client.clone(), namespace);
    let job = jobs.get_opt(&restore_job_name(restore)).await?;
    let describe_job = match (&job, crate::restore_record::needs_record(&restore.spec)) {
        (None, true) => jobs.get_opt(&describe_job_name(restore)).await?,
        _ => None,
    };
    let pods = match job.is_some() || describe_job.is_some() {
        true => {
            let label = format!("{LABEL_RESTORE}={}", restore.name_any());
            Api::<Pod>::namespaced(client.clone(), namespace)
                .list(&ListParams::default().labels(&label))
                .await?
                .items
        }
        false => Vec::new(),
    };
    let describe = match &job {
        Some(_) => DescribeStep::NotNeeded,
        None => describe_step(restore, describe_job.as_ref(), &pods, now),
    };
    // What the claims, Secrets and access are checked for: the entries the record adds too.
    let checked = as_checked(restore, &describe);
    let from = ReadFrom::of(&checked, plan.as_ref());
    let mut uses = Vec::new();
    if let Some(from) = &from {
        uses.extend(repository_secrets_used(from.repository));
    }
    for database in &checked.spec.databases {
        uses.extend(credentials_used(&database.credentials_secret_ref, ""));
    }
    for stream in &checked.spec.streams {
        uses.extend(env_secrets_used(&stream.env, ""));
    }
    let claims_api = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace);
    let claims = fetch_target_claims(&claims_api, &checked).await?;
    let (secrets, secret_types) = fetch_secret_keys(client, namespace, &uses).await?;
    let access = match (&from, &job) {
        (Some(from), None) => review_restore(client, namespace, &checked, from, &claims).await?,
        _ => AccessReview::NoRequester,
    };
    let (storage_classes, resource_quotas) = match (&describe, checked.spec.create_claims) {
        (DescribeStep::Described(_), Some(_)) => {
            let classes = Api::<StorageClass>::all(client.clone())
                .list(&ListParams::default())
                .await?
                .items;
            (classes, fetch_quotas(client, namespace).await?)
        }
        _ => (Vec::new(), Vec::new()),
    };
    Ok(ObservedRestore {
        plan,
        secrets,
        secret_types,
        claims,
        job,
        pods,
        access,
        describe,
        storage_classes,
        resource_quotas,
    })
}

/// The ResourceQuotas of `namespace`. An API server that serves none (404: a cluster without the
/// quota admission, as some test servers are) has none to check against.
async fn fetch_quotas(client: &kube::Client, namespace: &str) -> Result<Vec<ResourceQuota>, Error> {
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), namespace);
    match quotas.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Vec::new()),
        Err(error) => Err(error.into()),
    }
}

/// The Restore's BackupPlan. A name that is not an object name would be a path in the request
/// (`../secrets/x`): it is never fetched, and `decide` refuses it.
async fn fetch_plan(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<BackupPlan>, Error> {
    if !is_dns_subdomain(name) {
        return Ok(None);
    }
    Ok(Api::<BackupPlan>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await?)
}

/// The Restore's target claims that exist, by name (those with a valid name, as [`fetch_plan`]).
async fn fetch_target_claims(
    api: &Api<PersistentVolumeClaim>,
    restore: &Restore,
) -> Result<BTreeMap<String, PersistentVolumeClaim>, Error> {
    let mut claims = BTreeMap::new();
    for volume in &restore.spec.volumes {
        let name = &volume.target_claim_name;
        if is_dns_subdomain(name) {
            if let Some(claim) = api.get_opt(name).await? {
                claims.insert(name.clone(), claim);
            }
        }
    }
    Ok(claims)
}
