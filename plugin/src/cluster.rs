//! What the plugin reads and writes in the cluster, with the caller's kubeconfig: the plan, its
//! Secrets, Restores. Each refusal of the API server says which verb on which object was refused,
//! so the caller knows which right to ask for.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, ResourceQuota, Secret};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use neverwiped_api::{BackupPlan, Restore};
use zeroize::Zeroizing;

/// Why the cluster did not give what was asked.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cannot load the kubeconfig: {0}")]
    Config(String),
    #[error("{kind} {name:?} does not exist in namespace {namespace:?}")]
    NotFound {
        kind: &'static str,
        name: String,
        namespace: String,
    },
    #[error(
        "you may not {verb} {resource}{name} in namespace {namespace:?} (the API server answered \
         403 Forbidden: {message}): this needs a Role that allows {verb} on {resource}"
    )]
    Forbidden {
        verb: &'static str,
        resource: &'static str,
        /// ` "NAME"`, or nothing for a list.
        name: String,
        namespace: String,
        message: String,
    },
    #[error("the API server does not accept your credentials (401 Unauthorized): log in again or check the kubeconfig")]
    Unauthorized,
    #[error(
        "the Secret {secret:?} in namespace {namespace:?} has no key {key:?} ({field} names it)"
    )]
    MissingKey {
        secret: String,
        key: String,
        namespace: String,
        field: &'static str,
    },
    #[error("cannot {verb} {resource}{name} in namespace {namespace:?}: {source}")]
    Api {
        verb: &'static str,
        resource: &'static str,
        name: String,
        namespace: String,
        source: kube::Error,
    },
}

/// An object of the cluster, for the errors about it.
struct Target<'a> {
    verb: &'static str,
    kind: &'static str,
    resource: &'static str,
    name: Option<&'a str>,
    namespace: &'a str,
}

impl Target<'_> {
    fn error(&self, error: kube::Error) -> ClusterError {
        let name = self.name.map(|n| format!(" {n:?}")).unwrap_or_default();
        let namespace = self.namespace.to_owned();
        if let kube::Error::Api(status) = &error {
            match status.code {
                404 if self.name.is_some() => {
                    return ClusterError::NotFound {
                        kind: self.kind,
                        name: self.name.unwrap_or_default().to_owned(),
                        namespace,
                    }
                }
                403 => {
                    return ClusterError::Forbidden {
                        verb: self.verb,
                        resource: self.resource,
                        name,
                        namespace,
                        message: status.message.clone(),
                    }
                }
                401 => return ClusterError::Unauthorized,
                _ => {}
            }
        }
        ClusterError::Api {
            verb: self.verb,
            resource: self.resource,
            name,
            namespace,
            source: error,
        }
    }
}

const PLANS: &str = "backupplans.neverwiped.io";
const RESTORES: &str = "restores.neverwiped.io";
const SECRETS: &str = "secrets";

/// The cluster, as the caller's kubeconfig reaches it.
#[derive(Clone)]
pub struct Cluster {
    pub client: Client,
    /// The namespace of the kubeconfig's context (`default` when it names none).
    pub default_namespace: String,
}

impl Cluster {
    /// Connects with the kubeconfig (`KUBECONFIG`, `~/.kube/config`; in a pod, its service
    /// account), in `context` when given.
    pub async fn connect(context: Option<String>) -> Result<Cluster, ClusterError> {
        let config = match context {
            None => Config::infer()
                .await
                .map_err(|e| ClusterError::Config(e.to_string()))?,
            Some(context) => {
                let kubeconfig =
                    Kubeconfig::read().map_err(|e| ClusterError::Config(e.to_string()))?;
                let options = KubeConfigOptions {
                    context: Some(context),
                    ..KubeConfigOptions::default()
                };
                Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| ClusterError::Config(e.to_string()))?
            }
        };
        let default_namespace = config.default_namespace.clone();
        let client = Client::try_from(config).map_err(|e| ClusterError::Config(e.to_string()))?;
        Ok(Cluster {
            client,
            default_namespace,
        })
    }

    /// The BackupPlan `name` of `namespace`.
    pub async fn plan(&self, namespace: &str, name: &str) -> Result<BackupPlan, ClusterError> {
        let plans: Api<BackupPlan> = Api::namespaced(self.client.clone(), namespace);
        plans
            .get(name)
            .await
            .map_err(|e| plan_target("get", name, namespace).error(e))
    }

    /// Every BackupPlan of `namespace`, or of the cluster.
    pub async fn plans(&self, namespace: Option<&str>) -> Result<Vec<BackupPlan>, ClusterError> {
        let plans: Api<BackupPlan> = match namespace {
            Some(namespace) => Api::namespaced(self.client.clone(), namespace),
            None => Api::all(self.client.clone()),
        };
        let target = Target {
            verb: "list",
            kind: "BackupPlan",
            resource: PLANS,
            name: None,
            namespace: namespace.unwrap_or("(all namespaces)"),
        };
        let mut list = plans
            .list(&ListParams::default())
            .await
            .map_err(|e| target.error(e))?
            .items;
        list.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        Ok(list)
    }

    /// Sets the plan's `spec.manualTrigger` (a merge patch of that field only).
    pub async fn trigger(
        &self,
        namespace: &str,
        name: &str,
        value: &str,
    ) -> Result<BackupPlan, ClusterError> {
        let plans: Api<BackupPlan> = Api::namespaced(self.client.clone(), namespace);
        let patch = serde_json::json!({ "spec": { "manualTrigger": value } });
        plans
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| plan_target("patch", name, namespace).error(e))
    }

    /// Sets the annotation `key` of the plan to `value` (a request the operator acts on once).
    pub async fn annotate(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
        value: &str,
    ) -> Result<BackupPlan, ClusterError> {
        let plans: Api<BackupPlan> = Api::namespaced(self.client.clone(), namespace);
        let patch = serde_json::json!({ "metadata": { "annotations": { key: value } } });
        plans
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| plan_target("patch", name, namespace).error(e))
    }

    /// The value of `key` in the Secret `name`; `field` is the plan's field that names it.
    pub async fn secret_value(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
        field: &'static str,
    ) -> Result<Zeroizing<Vec<u8>>, ClusterError> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let target = Target {
            verb: "get",
            kind: "Secret",
            resource: SECRETS,
            name: Some(name),
            namespace,
        };
        let mut secret = secrets.get(name).await.map_err(|e| target.error(e))?;
        let value = secret
            .data
            .as_mut()
            .and_then(|data| data.remove(key))
            .map(|bytes| Zeroizing::new(bytes.0));
        // The rest of the Secret is not needed: wipe it too.
        if let Some(data) = secret.data.as_mut() {
            for (_, mut bytes) in std::mem::take(data) {
                zeroize::Zeroize::zeroize(&mut bytes.0);
            }
        }
        value.ok_or_else(|| ClusterError::MissingKey {
            secret: name.to_owned(),
            key: key.to_owned(),
            namespace: namespace.to_owned(),
            field,
        })
    }

    /// Creates `restore` in `namespace`.
    pub async fn create_restore(
        &self,
        namespace: &str,
        restore: &Restore,
    ) -> Result<Restore, ClusterError> {
        let restores: Api<Restore> = Api::namespaced(self.client.clone(), namespace);
        let name = restore.metadata.name.clone().unwrap_or_default();
        restores
            .create(&PostParams::default(), restore)
            .await
            .map_err(|e| restore_target("create", &name, namespace).error(e))
    }

    /// The Restore `name` of `namespace`.
    pub async fn restore(&self, namespace: &str, name: &str) -> Result<Restore, ClusterError> {
        let restores: Api<Restore> = Api::namespaced(self.client.clone(), namespace);
        restores
            .get(name)
            .await
            .map_err(|e| restore_target("get", name, namespace).error(e))
    }

    /// Whether the claim `name` exists in `namespace`.
    pub async fn claim_exists(&self, namespace: &str, name: &str) -> Result<bool, ClusterError> {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        exists(claims, claim_target("get", name, namespace)).await
    }

    /// Creates `claim` in `namespace`.
    pub async fn create_claim(
        &self,
        namespace: &str,
        claim: &PersistentVolumeClaim,
    ) -> Result<PersistentVolumeClaim, ClusterError> {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        let name = claim.metadata.name.clone().unwrap_or_default();
        claims
            .create(&PostParams::default(), claim)
            .await
            .map_err(|e| claim_target("create", &name, namespace).error(e))
    }

    /// The ResourceQuotas of `namespace`.
    pub async fn resource_quotas(
        &self,
        namespace: &str,
    ) -> Result<Vec<ResourceQuota>, ClusterError> {
        let quotas: Api<ResourceQuota> = Api::namespaced(self.client.clone(), namespace);
        match quotas.list(&ListParams::default()).await {
            Ok(list) => Ok(list.items),
            Err(e) => Err(Target {
                verb: "list",
                kind: "ResourceQuota",
                resource: "resourcequotas",
                name: None,
                namespace,
            }
            .error(e)),
        }
    }

    /// Whether the StorageClass `name` exists (a cluster-wide object).
    pub async fn storage_class_exists(&self, name: &str) -> Result<bool, ClusterError> {
        let classes: Api<StorageClass> = Api::all(self.client.clone());
        let target = Target {
            verb: "get",
            kind: "StorageClass",
            resource: "storageclasses",
            name: Some(name),
            namespace: "(cluster-wide)",
        };
        exists(classes, target).await
    }
}

/// Whether `api` holds the object `target` names: its 404 is no, any other refusal the error.
async fn exists<K>(api: Api<K>, target: Target<'_>) -> Result<bool, ClusterError>
where
    K: Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get_opt(target.name.unwrap_or_default()).await {
        Ok(found) => Ok(found.is_some()),
        Err(e) => Err(target.error(e)),
    }
}

fn claim_target<'a>(verb: &'static str, name: &'a str, namespace: &'a str) -> Target<'a> {
    Target {
        verb,
        kind: "PersistentVolumeClaim",
        resource: "persistentvolumeclaims",
        name: Some(name),
        namespace,
    }
}

fn plan_target<'a>(verb: &'static str, name: &'a str, namespace: &'a str) -> Target<'a> {
    Target {
        verb,
        kind: "BackupPlan",
        resource: PLANS,
        name: Some(name),
        namespace,
    }
}

fn restore_target<'a>(verb: &'static str, name: &'a str, namespace: &'a str) -> Target<'a> {
    Target {
        verb,
        kind: "Restore",
        resource: RESTORES,
        name: Some(name),
        namespace,
    }
}
