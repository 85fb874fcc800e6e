//! What a reconciler does to the cluster once it has decided, in one order for every kind: create
//! what is missing, apply the status, publish the Events, delete what is over. The pure deciders
//! return [`Effects`]; [`execute`] is the only place that writes them.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{Context, Error, FIELD_MANAGER};
use crate::conditions::Reason;
use crate::csi::VolumeSnapshot;
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
}

/// An object to delete by name in the reconciled object's namespace; one already gone is fine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delete {
    /// A Job and, in the background, its pods.
    Job(String),
    Claim(String),
    Snapshot(String),
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
    }
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
