//! What a reconciler does to the cluster once it has decided, in one order for every kind: create
//! what is missing, apply the status, publish the Events, delete what is over. The pure deciders
//! return [`Effects`]; [`execute`] is the only place that writes them.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{Context, Error, FIELD_MANAGER};
use crate::conditions::Reason;
use crate::csi::VolumeSnapshot;
use crate::job::{password_copy_name, PasswordCopy, COPY_CA_KEY, COPY_PASSWORD_KEY};
use crate::recorder::EventType;

/// An Event to publish about the reconciled object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedEvent {
    pub type_: EventType,
    pub reason: Reason,
    pub note: String,
}

/// An object to create in the reconciled object's namespace; one that already exists (created by
/// an earlier reconcile whose status apply failed) is fine.
#[derive(Debug, Clone)]
pub enum Create {
    Snapshot(Box<VolumeSnapshot>),
    Claim(Box<PersistentVolumeClaim>),
    Job(Box<Job>),
    /// A Job in another namespace (a protected plan's prune, in the operator's), then the copy of
    /// the plan's repository password it mounts, owned by it.
    RemoteJob(Box<Job>, PasswordCopy),
}

/// An object to delete by name in the reconciled object's namespace; one already gone is fine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delete {
    /// A Job and, in the background, its pods.
    Job(String),
    Claim(String),
    Snapshot(String),
    /// A Job in another namespace and its password copy, in the background.
    RemoteJob {
        namespace: String,
        name: String,
    },
}

/// Everything a reconcile writes, in the order it is written.
#[derive(Debug, Clone)]
pub struct Effects<S> {
    pub create: Vec<Create>,
    /// The whole status, applied on the status subresource.
    pub status: S,
    pub events: Vec<PlannedEvent>,
    pub delete: Vec<Delete>,
}

/// Writes `effects` for `object`: creates, the status by server-side apply (with the kind's own
/// API version) when it changes, Events, deletes; then forgets the object's earlier failures (for
/// the backoff).
pub async fn execute<K, S>(ctx: &Context, object: &K, effects: &Effects<S>) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
    S: Serialize,
{
    let namespace = object.namespace().ok_or(Error::Incomplete {
        kind: "object",
        field: "namespace",
    })?;
    let client = &ctx.client;
    for create in &effects.create {
        match create {
            Create::Snapshot(snapshot) => {
                create_if_absent(client, &namespace, snapshot.as_ref()).await?
            }
            Create::Claim(claim) => create_if_absent(client, &namespace, claim.as_ref()).await?,
            Create::Job(job) => create_if_absent(client, &namespace, job.as_ref()).await?,
            Create::RemoteJob(job, copy) => create_remote_job(client, job, copy).await?,
        }
    }
    // A status that would not change is not written (most reconciles of a plan at rest).
    if status_changes(object, &effects.status) {
        apply_status(client, &namespace, object, &effects.status).await?;
    }
    for event in &effects.events {
        ctx.publish(
            object,
            event.type_,
            event.reason,
            event.note.clone(),
            "Reconcile",
        )
        .await;
    }
    for delete in &effects.delete {
        delete_object(client, &namespace, delete).await?;
    }
    ctx.reset_failures(&super::object_key(object));
    Ok(())
}

/// Deletes one object the operator created; one already gone is fine.
pub async fn delete_object(client: &Client, namespace: &str, delete: &Delete) -> Result<(), Error> {
    match delete {
        Delete::Job(name) => {
            let background = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..DeleteParams::default()
            };
            delete_if_present::<Job>(client, namespace, name, &background).await
        }
        Delete::Claim(name) => {
            let params = DeleteParams::default();
            delete_if_present::<PersistentVolumeClaim>(client, namespace, name, &params).await
        }
        Delete::Snapshot(name) => {
            let params = DeleteParams::default();
            delete_if_present::<VolumeSnapshot>(client, namespace, name, &params).await
        }
        Delete::RemoteJob { namespace, name } => {
            let background = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..DeleteParams::default()
            };
            delete_if_present::<Job>(client, namespace, name, &background).await?;
            // The garbage collector would delete the copy with its Job; the operator does not
            // leave a password behind for as long as that takes.
            let copy = password_copy_name(name);
            let params = DeleteParams::default();
            delete_if_present::<Secret>(client, namespace, &copy, &params).await
        }
    }
}

/// Creates a protected plan's prune Job in the operator's namespace, then the copy of the plan's
/// repository password (and CA) beside it, owned by the Job so that it goes with it. The copy is
/// made after the Job exists (its pod waits for the Secret): a Job that could not be created
/// leaves no password behind. When the plan's Secret cannot be read, the Job is deleted again.
async fn create_remote_job(client: &Client, job: &Job, copy: &PasswordCopy) -> Result<(), Error> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), &copy.namespace);
    let created = match jobs.create(&PostParams::default(), job).await {
        Ok(created) => created,
        Err(kube::Error::Api(status)) if status.code == 409 => jobs.get(&copy.job_name).await?,
        Err(error) => return Err(error.into()),
    };
    let data = match copy_data(client, copy).await {
        Ok(data) => data,
        Err(error) => {
            let gone = Delete::RemoteJob {
                namespace: copy.namespace.clone(),
                name: copy.job_name.clone(),
            };
            delete_object(client, &copy.namespace, &gone).await?;
            return Err(error);
        }
    };
    let owner = OwnerReference {
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        name: created.name_any(),
        uid: created.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(copy.name.clone()),
            namespace: Some(copy.namespace.clone()),
            labels: created.metadata.labels.clone(),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(data),
        immutable: Some(true),
        type_: Some("Opaque".into()),
        ..Secret::default()
    };
    create_if_absent(client, &copy.namespace, &secret).await
}

/// The values the copy holds, read from the plan's Secrets.
async fn copy_data(
    client: &Client,
    copy: &PasswordCopy,
) -> Result<BTreeMap<String, ByteString>, Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &copy.source_namespace);
    let mut data = BTreeMap::new();
    let wanted = std::iter::once((COPY_PASSWORD_KEY, &copy.password))
        .chain(copy.ca.as_ref().map(|ca| (COPY_CA_KEY, ca)));
    for (key, source) in wanted {
        let fault = |problem: String| Error::PasswordCopy {
            job: copy.job_name.clone(),
            problem,
        };
        let place = format!("Secret {}/{}", copy.source_namespace, source.name);
        let secret = secrets
            .get_opt(&source.name)
            .await?
            .ok_or_else(|| fault(format!("{place} does not exist")))?;
        let value = (secret.data)
            .and_then(|mut values| values.remove(&source.key))
            .ok_or_else(|| fault(format!("{place} has no key {:?}", source.key)))?;
        data.insert(key.to_owned(), value);
    }
    Ok(data)
}

/// Whether `status` differs from the status `object` has (as the reconcile read it).
fn status_changes<K: Serialize, S: Serialize>(object: &K, status: &S) -> bool {
    let current = serde_json::to_value(object)
        .ok()
        .and_then(|mut object| object.get_mut("status").map(serde_json::Value::take));
    current.is_none() || current != serde_json::to_value(status).ok()
}

/// Applies the whole status of `object` with the operator's field manager.
async fn apply_status<K, S>(
    client: &Client,
    namespace: &str,
    object: &K,
    status: &S,
) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    S: Serialize,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    Api::<K>::namespaced(client.clone(), namespace)
        .patch_status(
            &object.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    Ok(())
}

/// Creates an object; one that already exists (the same one, created before) is fine.
pub async fn create_if_absent<K>(client: &Client, namespace: &str, object: &K) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Deletes an object by name; one already gone is fine.
async fn delete_if_present<K>(
    client: &Client,
    namespace: &str,
    name: &str,
    params: &DeleteParams,
) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    match api.delete(name, params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error.into()),
    }
}
